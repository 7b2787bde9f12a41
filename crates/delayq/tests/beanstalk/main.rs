//! The beanstalkd front end (`--beanstalk-listen`) through a real `delayq serve` process, on
//! the embedded store and on a private Redis, with clients no one here wrote: greenstalk
//! (PyPI, from .ci/test-venv) runs `greenstalk_conformance.py`, the behaviours of greenstalk's
//! own suite; fivebeans (npm, from .ci/test-node-modules) runs `fivebeans_client.js`. `raw.rs`
//! sends what no client library would (bad input, a slow client, a 10 MB line) over a plain
//! socket; `faults.rs` kills the server under puts and runs three instances on one Redis;
//! `docs.rs` runs docs/beanstalkd.md's example as written; `reference.rs` runs the same
//! sessions against beanstalkd itself and compares every reply.
//!
//! `cargo test -p delayq --test beanstalk` (about a minute: the timed behaviours wait).

#[path = "../support/mod.rs"]
mod support;

mod clients;
mod docs;
mod faults;
mod raw;
mod reference;

use std::path::{Path, PathBuf};
use std::time::Duration;
use support::process::{DelayqProcess, free_port};
use support::redis_server::RedisServer;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The body limit the servers here run with: beanstalkd's default `max-job-size`, so
/// greenstalk's JOB_TOO_BIG test holds as written.
const MAX_JOB_SIZE: usize = 65_535;

/// A `delayq serve` with its beanstalkd port, and what it keeps its jobs in.
struct Server {
    delayq: DelayqProcess,
    beanstalk_port: u16,
    _redis: Option<RedisServer>,
    _dir: tempfile::TempDir,
}

#[derive(Debug, Clone, Copy)]
enum Backend {
    Embedded,
    Redis,
}

impl Server {
    async fn start(backend: Backend) -> Server {
        let redis = matches!(backend, Backend::Redis).then(RedisServer::start);
        Server::start_with(backend, redis, &[]).await
    }

    async fn start_with(backend: Backend, redis: Option<RedisServer>, extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let max = MAX_JOB_SIZE.to_string();
        let data = dir.path().join("data").to_string_lossy().into_owned();
        let mut args = vec!["--beanstalk-listen", &listen, "--max-body-bytes", &max];
        let url = redis.as_ref().map(RedisServer::url);
        match (backend, &url) {
            (Backend::Redis, Some(url)) => args.extend(["--redis", url.as_str()]),
            _ => args.extend(["--data-dir", data.as_str()]),
        }
        args.extend(extra);
        let delayq = DelayqProcess::start(&args).await;
        Server {
            delayq,
            beanstalk_port: port,
            _redis: redis,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.delayq.pid()
    }

    async fn connect(&self) -> Bean {
        Bean::connect(self.beanstalk_port).await
    }
}

/// A plain beanstalkd connection: lines and bodies as the protocol has them.
struct Bean {
    r: BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: tokio::net::tcp::OwnedWriteHalf,
}

impl Bean {
    async fn connect(port: u16) -> Bean {
        let s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to the beanstalkd port");
        s.set_nodelay(true).unwrap();
        let (r, w) = s.into_split();
        Bean {
            r: BufReader::new(r),
            w,
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).await.expect("send");
    }

    /// One reply line without its `\r\n` ("" at the end of the stream).
    async fn line(&mut self) -> String {
        let mut buf = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(30), self.r.read_until(b'\n', &mut buf))
                .await
                .expect("a reply within 30 s");
        read.expect("read a reply");
        let s = String::from_utf8(buf).expect("a text reply line");
        assert!(
            s.is_empty() || s.ends_with("\r\n"),
            "reply not ended by CRLF: {s:?}"
        );
        s.trim_end_matches("\r\n").to_string()
    }

    /// Sends a command line and reads the reply line.
    async fn cmd(&mut self, line: &str) -> String {
        self.send(format!("{line}\r\n").as_bytes()).await;
        self.line().await
    }

    /// The `n` bytes of a body and its `\r\n`.
    async fn body(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0; n + 2];
        self.r.read_exact(&mut buf).await.expect("read a body");
        assert!(buf.ends_with(b"\r\n"), "body not ended by CRLF");
        buf.truncate(n);
        buf
    }

    /// `put`; the job's id.
    async fn put(&mut self, pri: u32, delay: u32, ttr: u32, body: &[u8]) -> u64 {
        let mut msg = format!("put {pri} {delay} {ttr} {}\r\n", body.len()).into_bytes();
        msg.extend_from_slice(body);
        msg.extend_from_slice(b"\r\n");
        self.send(&msg).await;
        let reply = self.line().await;
        reply
            .strip_prefix("INSERTED ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("put: {reply}"))
    }

    /// A command answered `<word> <id> <bytes>` and a body: the id and body.
    async fn job(&mut self, line: &str, word: &str) -> (u64, Vec<u8>) {
        let reply = self.cmd(line).await;
        let parts: Vec<&str> = reply.split(' ').collect();
        assert!(
            parts.len() == 3 && parts[0] == word,
            "{line}: expected {word}, got {reply}"
        );
        let id = parts[1].parse().unwrap();
        let n = parts[2].parse().unwrap();
        (id, self.body(n).await)
    }

    /// A command answered `OK <bytes>` and YAML: the `key: value` lines.
    async fn yaml(&mut self, line: &str) -> std::collections::HashMap<String, String> {
        let reply = self.cmd(line).await;
        let n: usize = reply
            .strip_prefix("OK ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}: {reply}"));
        let body = String::from_utf8(self.body(n).await).unwrap();
        body.lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// The workspace's root.
fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// This directory (the scripts beside the tests).
fn here() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/beanstalk")
}

/// Runs a client script to its end; panics with its output unless it succeeded.
async fn run_script(program: &Path, args: &[String], env: &[(&str, PathBuf)]) -> String {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(300), cmd.output())
        .await
        .expect("the client script finished within 300 s")
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{} failed:\n{text}",
        program.display()
    );
    text
}
