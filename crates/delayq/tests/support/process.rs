//! Runs the real `delayq` binary as a child process, for tests that kill, restart or run several
//! servers: `DelayqProcess::start(&["--redis", url])` picks a free loopback port, waits until
//! `/healthz` answers, and kills the process when dropped. Its log (stderr) goes to the test's
//! stderr, or to a file with `start_logging_to` (for tests that make it log a lot on purpose).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct DelayqProcess {
    child: Child,
    pub port: u16,
    pub base_url: String,
    args: Vec<String>,
    /// Where stderr is appended (kept across `restart`); `None`: inherited.
    log: Option<PathBuf>,
    /// Extra environment variables (kept across `restart`).
    env: Vec<(String, String)>,
    /// The working directory (kept across `restart`); `None`: the test's.
    dir: Option<PathBuf>,
}

pub use super::free_port;

impl DelayqProcess {
    /// Starts `delayq serve --listen 127.0.0.1:<free port> <args>`.
    pub async fn start(args: &[&str]) -> DelayqProcess {
        Self::start_on(free_port(), owned(args), None, Vec::new(), None).await
    }

    /// As `start`, with extra environment variables.
    pub async fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> DelayqProcess {
        Self::start_on(free_port(), owned(args), None, owned_env(env), None).await
    }

    /// As `start`, with the process's stderr appended to `log` (also after `restart`).
    pub async fn start_logging_to(args: &[&str], log: &Path) -> DelayqProcess {
        Self::start_on(
            free_port(),
            owned(args),
            Some(log.to_path_buf()),
            Vec::new(),
            None,
        )
        .await
    }

    /// As `start_logging_to`, with extra environment variables.
    pub async fn start_logging_with_env(
        args: &[&str],
        env: &[(&str, &str)],
        log: &Path,
    ) -> DelayqProcess {
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self::start_on(free_port(), owned(args), Some(log.to_path_buf()), env, None).await
    }

    /// As `start_logging_to`, run in the working directory `dir` (also after `restart`).
    pub async fn start_in(dir: &Path, args: &[&str], log: &Path) -> DelayqProcess {
        Self::start_on(
            free_port(),
            owned(args),
            Some(log.to_path_buf()),
            Vec::new(),
            Some(dir.to_path_buf()),
        )
        .await
    }

    async fn start_on(
        port: u16,
        args: Vec<String>,
        log: Option<PathBuf>,
        env: Vec<(String, String)>,
        dir: Option<PathBuf>,
    ) -> DelayqProcess {
        // The test's own reqwest clients are built with the server's rustls (no provider).
        delayq::install_tls_provider();
        let stderr = match &log {
            Some(path) => OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map(Stdio::from)
                .unwrap_or_else(|e| panic!("open {}: {e}", path.display())),
            None => Stdio::inherit(),
        };
        let mut command = Command::new(env!("CARGO_BIN_EXE_delayq"));
        if let Some(dir) = &dir {
            command.current_dir(dir);
        }
        let child = command
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(&args)
            .env("RUST_LOG", "warn")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn delayq");
        let mut p = DelayqProcess {
            child,
            port,
            base_url: format!("http://127.0.0.1:{port}"),
            args,
            log,
            env,
            dir,
        };
        p.wait_healthy().await;
        p
    }

    async fn wait_healthy(&mut self) {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "delayq exited during start-up: {status}{}",
                    self.log()
                        .map(|l| format!("; its log:\n{l}"))
                        .unwrap_or_default()
                );
            }
            let url = format!("{}/healthz", self.base_url);
            if let Ok(r) = http.get(&url).send().await
                && r.status().is_success()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "delayq did not answer /healthz within 30 s{}",
                self.log()
                    .map(|l| format!("; its log:\n{l}"))
                    .unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The process id (for signals: SIGUSR1 puts the beanstalkd front end in drain mode).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process has exited, `None` while it runs (`Child::try_wait`).
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL: no shutdown, no flush.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits up to `within` for a clean exit; returns the exit status.
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Starts the same command again on the same port (after `kill`).
    pub async fn restart(&mut self) {
        self.kill();
        // The old value is dropped here; killing an exited child again is harmless.
        *self = Self::start_on(
            self.port,
            self.args.clone(),
            self.log.clone(),
            self.env.clone(),
            self.dir.clone(),
        )
        .await;
    }

    /// What the process logged so far, when started with `start_logging_to`.
    pub fn log(&self) -> Option<String> {
        self.log
            .as_ref()
            .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| format!("(no log: {e})")))
    }
}

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn owned_env(env: &[(&str, &str)]) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Drop for DelayqProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
