//! The same sessions against beanstalkd itself (the reference, started here on a free port) and
//! against delayq's beanstalkd port: every reply must be the same, job ids aside (each server
//! numbers its own; `{1}`, `{2}` in a session are the ids its first and second `INSERTED`
//! named, and replies are compared with each id replaced by its place). The differences
//! docs/beanstalkd.md lists ("What differs") are left out; this checks that there are no
//! others in what the sessions cover.

use super::support::free_port;
use super::{Backend, Bean, MAX_JOB_SIZE, Server};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// beanstalkd on a free loopback port, killed when dropped.
struct Beanstalkd {
    child: Child,
    port: u16,
}

impl Beanstalkd {
    async fn start() -> Beanstalkd {
        let port = free_port();
        let child = Command::new("beanstalkd")
            .args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .args(["-z", &MAX_JOB_SIZE.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run beanstalkd ({e}): install it with 'apt-get install -y beanstalkd'"
                )
            });
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "beanstalkd did not listen on {port} within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Beanstalkd { child, port }
    }
}

impl Drop for Beanstalkd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One session: what is sent, in steps; each step is answered by one reply (a line, and the
/// body a `RESERVED`, `FOUND` or `OK` line announces), or by the connection closing.
type Session = &'static [&'static str];

/// Each session runs on a connection of its own, first using and watching a tube of its own
/// only (`{T}` in a step is that tube's name), so sessions do not see each other's jobs.
const SESSIONS: &[(&str, Session)] = &[
    (
        "put, peek, reserve, delete",
        &[
            "put 5 0 10 5\r\nhello\r\n",
            "peek-ready\r\n",
            "peek {1}\r\n",
            "peek-delayed\r\n",
            "peek-buried\r\n",
            "reserve-with-timeout 0\r\n",
            "peek-ready\r\n",
            "delete {1}\r\n",
            "delete {1}\r\n",
            "peek {1}\r\n",
            "reserve-with-timeout 0\r\n",
        ],
    ),
    (
        "priorities order the ready jobs",
        &[
            "put 10 0 10 3\r\nlow\r\n",
            "put 1 0 10 4\r\nhigh\r\n",
            "put 10 0 10 4\r\nlow2\r\n",
            "peek-ready\r\n",
            "reserve-with-timeout 0\r\n",
            "reserve-with-timeout 0\r\n",
            "reserve-with-timeout 0\r\n",
            "reserve-with-timeout 0\r\n",
        ],
    ),
    (
        "release, bury, kick",
        &[
            "put 7 0 10 1\r\nx\r\n",
            "reserve\r\n",
            "release {1} 7 0\r\n",
            "reserve\r\n",
            "bury {1} 7\r\n",
            "peek-buried\r\n",
            "reserve-with-timeout 0\r\n",
            "kick 5\r\n",
            "peek-ready\r\n",
            "reserve\r\n",
            "release {1} 7 100\r\n",
            "peek-delayed\r\n",
            "kick-job {1}\r\n",
            "kick-job {1}\r\n",
            "peek-ready\r\n",
        ],
    ),
    (
        "bury sets the priority",
        &[
            "put 5 0 10 1\r\na\r\n",
            "put 5 0 10 1\r\nb\r\n",
            "reserve\r\n",
            "bury {1} 1\r\n",
            "kick 1\r\n",
            "reserve-with-timeout 0\r\n",
            "reserve-with-timeout 0\r\n",
        ],
    ),
    (
        "delayed jobs",
        &[
            "put 0 100 10 1\r\nd\r\n",
            "peek-delayed\r\n",
            "peek-ready\r\n",
            "reserve-with-timeout 0\r\n",
            "kick 10\r\n",
            "peek-delayed\r\n",
            "peek-ready\r\n",
            "reserve-with-timeout 0\r\n",
        ],
    ),
    (
        "touch, release and bury need the reservation",
        &[
            "put 0 0 10 1\r\nt\r\n",
            "touch {1}\r\n",
            "release {1} 0 0\r\n",
            "bury {1} 0\r\n",
            "reserve\r\n",
            "touch {1}\r\n",
            "release {1} 0 0\r\n",
            "release {1} 0 0\r\n",
            "delete {1}\r\n",
        ],
    ),
    (
        "reserve-job",
        &[
            "put 0 0 10 2\r\nrj\r\n",
            "reserve-job {1}\r\n",
            "reserve-job {1}\r\n",
            "peek-ready\r\n",
            "delete {1}\r\n",
            "reserve-job {1}\r\n",
        ],
    ),
    (
        "tubes used and watched",
        &[
            "list-tube-used\r\n",
            "list-tubes-watched\r\n",
            "watch {T}-other\r\n",
            "watch {T}-other\r\n",
            "list-tubes-watched\r\n",
            "ignore {T}-other\r\n",
            "ignore {T}\r\n",
            "use {T}-other\r\n",
            "list-tube-used\r\n",
            "put 0 0 10 1\r\no\r\n",
            "reserve-with-timeout 0\r\n",
            "watch {T}-other\r\n",
            "reserve-with-timeout 0\r\n",
            "delete {1}\r\n",
        ],
    ),
    (
        "pause-tube",
        &[
            "pause-tube {T} 0\r\n",
            "pause-tube {T}-never-used 1\r\n",
            "stats-tube {T}-never-used\r\n",
        ],
    ),
    (
        "bad input",
        &[
            "frobnicate\r\n",
            "put 0 0 10\r\n",
            "put 0 0 10 x\r\n",
            "put a 0 10 1\r\n",
            "use -starts-with-a-hyphen\r\n",
            "peek 999999999999\r\n",
            "delete 999999999999\r\n",
            "kick-job 999999999999\r\n",
            "put 0 0 10 5\r\nhelloXY\r\n",
            "peek-ready\r\n",
        ],
    ),
    (
        "a body over the limit",
        &[
            // `{big}` is a put whose body is one byte over the limit, body and all.
            "{big}",
            "peek-ready\r\n",
            "put 0 0 10 2\r\nok\r\n",
            "peek-ready\r\n",
        ],
    ),
    ("quit", &["quit\r\n"]),
];

/// A connection that records each reply with ids replaced by their place.
struct Talker {
    conn: Bean,
    /// The ids the server named, in the order it first named them.
    ids: Vec<String>,
}

impl Talker {
    async fn connect(port: u16) -> Talker {
        Talker {
            conn: Bean::connect(port).await,
            ids: Vec::new(),
        }
    }

    /// `{n}` in `step` replaced by the n-th id this server named, `{T}` by `tube`; `{big}` is
    /// a put one byte over the body limit.
    fn expand(&self, step: &str, tube: &str) -> Vec<u8> {
        if step == "{big}" {
            let n = MAX_JOB_SIZE + 1;
            let mut put = format!("put 0 0 10 {n}\r\n").into_bytes();
            put.extend(std::iter::repeat_n(b'b', n));
            put.extend_from_slice(b"\r\n");
            return put;
        }
        let mut s = step.replace("{T}", tube);
        for (i, id) in self.ids.iter().enumerate() {
            s = s.replace(&format!("{{{}}}", i + 1), id);
        }
        s.into_bytes()
    }

    /// The place of `id` among the ids named so far (added if new), as `#n`.
    fn place(&mut self, id: &str) -> String {
        let n = match self.ids.iter().position(|x| x == id) {
            Some(i) => i + 1,
            None => {
                self.ids.push(id.to_string());
                self.ids.len()
            }
        };
        format!("#{n}")
    }

    /// Sends `bytes` and reads one reply: its line (ids as places) and any body.
    async fn step(&mut self, bytes: &[u8]) -> String {
        self.conn.send(bytes).await;
        let line = self.conn.line().await;
        if line.is_empty() {
            return "<closed>".into();
        }
        let parts: Vec<&str> = line.split(' ').collect();
        let (shown, body_len) = match parts.as_slice() {
            [word @ ("INSERTED" | "BURIED"), id] if id.parse::<u64>().is_ok() => {
                (format!("{word} {}", self.place(id)), None)
            }
            [word @ ("RESERVED" | "FOUND"), id, n] => {
                (format!("{word} {} {n}", self.place(id)), n.parse().ok())
            }
            ["OK", n] => (line.clone(), n.parse().ok()),
            _ => (line.clone(), None),
        };
        match body_len {
            Some(n) => {
                let body = self.conn.body(n).await;
                format!("{shown}\r\n{}", String::from_utf8_lossy(&body))
            }
            None => shown,
        }
    }
}

/// Runs every session against both servers; returns the steps whose replies differ.
async fn compare(delayq_port: u16, reference_port: u16) -> Vec<String> {
    let mut differ = Vec::new();
    for (n, (name, steps)) in SESSIONS.iter().enumerate() {
        let tube = format!("reference-{n}");
        let mut ours = Talker::connect(delayq_port).await;
        let mut theirs = Talker::connect(reference_port).await;
        let opening = [
            format!("use {tube}\r\n"),
            format!("watch {tube}\r\n"),
            "ignore default\r\n".to_string(),
        ];
        for line in &opening {
            assert_eq!(
                ours.step(line.as_bytes()).await,
                theirs.step(line.as_bytes()).await
            );
        }
        for step in *steps {
            let a = ours.step(&ours.expand(step, &tube)).await;
            let b = theirs.step(&theirs.expand(step, &tube)).await;
            if a != b {
                differ.push(format!(
                    "{name}: {step:?}\n  beanstalkd: {b:?}\n  delayq:     {a:?}"
                ));
            }
        }
    }
    differ
}

async fn same_replies_as_beanstalkd(backend: Backend) {
    let reference = Beanstalkd::start().await;
    let server = Server::start(backend).await;
    let differ = compare(server.beanstalk_port, reference.port).await;
    assert!(
        differ.is_empty(),
        "replies that differ from beanstalkd's:\n{}",
        differ.join("\n")
    );
}

#[tokio::test]
async fn sessions_get_the_same_replies_as_from_beanstalkd_on_the_embedded_store() {
    same_replies_as_beanstalkd(Backend::Embedded).await;
}

#[tokio::test]
async fn sessions_get_the_same_replies_as_from_beanstalkd_on_redis() {
    same_replies_as_beanstalkd(Backend::Redis).await;
}
