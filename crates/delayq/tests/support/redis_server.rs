//! [`RedisServer`]: a throwaway `redis-server` for one test, after redis-rs `redis-test`. It
//! runs from PATH on a free loopback port with its own temp dir (no snapshot, no AOF unless
//! asked, log in the temp dir), answers PING before `start` returns, and is killed when
//! dropped. `stop`/`restart` keep port and dir, for tests of Redis going away and coming back.
//!
//! Never skips: without `redis-server` on PATH the test fails with one line saying how to
//! install it. It never touches a shared Redis (such as one on port 6379).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a starting server may take to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(10);

pub struct RedisServer {
    port: u16,
    /// Extra arguments given to `start_with`, reused by `restart`.
    extra: Vec<String>,
    /// Working dir and log; removed on drop.
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RedisServer {
    /// A server with the default test configuration.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// A server with extra configuration, e.g. `&["--appendonly", "yes"]`.
    pub fn start_with(args: &[&str]) -> RedisServer {
        let bin = redis_server_path();
        let dir = tempfile::Builder::new()
            .prefix("delayq-redis-")
            .tempdir()
            .expect("create temp dir for redis-server");
        let extra: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        // A free port can be taken between probing and binding: try a few.
        let mut last_log = String::new();
        for _ in 0..5 {
            let port = free_port();
            let mut child = spawn(&bin, port, dir.path(), &extra);
            match wait_ready(port, &mut child) {
                Ok(()) => {
                    return RedisServer {
                        port,
                        extra,
                        dir,
                        child: Some(child),
                    };
                }
                Err(()) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_log = read_log(dir.path());
                    if !last_log.contains("Address already in use") {
                        break;
                    }
                }
            }
        }
        panic!("redis-server did not start; its log:\n{last_log}");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        read_log(self.dir.path())
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server (SIGKILL, like a crash) and waits for it to exit. Port and dir are
    /// kept for `restart`.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server if it runs, then starts it again on the same port and dir with the
    /// same configuration (with AOF or RDB enabled, its data comes back).
    pub fn restart(&mut self) {
        self.stop();
        let bin = redis_server_path();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let mut child = spawn(&bin, self.port, self.dir.path(), &self.extra);
            match wait_ready(self.port, &mut child) {
                Ok(()) => {
                    self.child = Some(child);
                    return;
                }
                Err(()) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log = self.log();
                    // The old socket may linger for a moment; anything else is fatal.
                    if !log.contains("Address already in use") || Instant::now() > deadline {
                        panic!(
                            "redis-server did not restart on port {}; its log:\n{log}",
                            self.port
                        );
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `redis-server` from PATH, or a one-line panic saying how to install it.
pub fn redis_server_path() -> PathBuf {
    tool_path("redis-server")
}

/// A Redis tool (`redis-server`, `redis-cli`) from PATH, or a one-line panic saying how to
/// install it.
pub fn tool_path(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} not found on PATH: install it with 'apt-get install -y redis-server'")
        })
}

pub use super::free_port;

fn spawn(bin: &Path, port: u16, dir: &Path, extra: &[String]) -> Child {
    let log = dir.join("redis.log");
    Command::new(bin)
        .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
        .arg("--port")
        .arg(port.to_string())
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("could not run {}: {e}", bin.display()))
}

/// Waits until our server answers; `Err` if it exited or never answered.
fn wait_ready(port: u16, child: &mut Child) -> Result<(), ()> {
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return Err(());
        }
        if answers_as(port, child.id()) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(())
}

/// Whether the server on `port` answers and is process `pid`: another test's server may have
/// taken the port first, and talking to it would be wrong.
pub fn answers_as(port: u16, pid: u32) -> bool {
    let Ok(mut s) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"INFO server\r\n").is_err() {
        return false;
    }
    let want = format!("process_id:{pid}\r\n");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.len() < 64 * 1024 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&got);
        if text.contains("process_id:") && text.contains("run_id:") {
            return text.contains(&want);
        }
        if text.starts_with('-') {
            return false;
        }
    }
    false
}

pub fn read_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("redis.log")).unwrap_or_else(|e| format!("(no log: {e})"))
}

/// FLUSHALL of a test's own redis-server at `url` (never the machine's): the data loss a
/// restore must undo.
pub async fn flushall(url: &str) {
    let mut c = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
}
