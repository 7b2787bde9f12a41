//! Connections that never make a request (docs/operations.md "Limits"): silent ones, and ones
//! that stop in the middle of the HTTP/2 preface or an HTTP/1 head, are closed within
//! `idle_timeout` while the server goes on answering others; past `max_connections`, new
//! connections wait until one closes, and the log says so once. Over real loopback sockets
//! (`server::run`, and the `delayq` binary for its log), with bounds generous for a loaded
//! machine.

use crate::support;

use delayq::config::Config;
use delayq::store::memory::MemoryStore;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::app::LiveServer;
use support::process::DelayqProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connections the flood test opens.
const SILENT: usize = 2_000;
/// Open files the flood test needs: both ends of each connection, and room for the rest of
/// the test binary running beside it.
const FILES_NEEDED: u64 = 2 * SILENT as u64 + 1_000;

/// What each silent connection sends before falling silent.
const OPENINGS: &[&[u8]] = &[
    b"",
    b"PRI * HTTP/2.0\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n",
    b"P",
];

/// Raises this process's soft open-file limit to what the flood needs, or fails saying how.
fn enough_open_files() {
    let now = rlimit::increase_nofile_limit(FILES_NEEDED).unwrap();
    assert!(
        now >= FILES_NEEDED,
        "this test needs {FILES_NEEDED} open files and the hard limit allows {now}: raise it \
         (ulimit -Hn {FILES_NEEDED} as root, or LimitNOFILE= for a service)"
    );
}

/// Reads until the server closes the connection; returns when it did, or `None` if it is still
/// open at `deadline`.
async fn closed_at(mut s: TcpStream, deadline: tokio::time::Instant) -> Option<Instant> {
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(Instant::now()),
            Ok(Ok(_)) => {}
        }
    }
}

/// `n` connections to `addr`, each having sent its opening (in turn from [`OPENINGS`]), with
/// the time each was opened.
async fn open_silent(addr: SocketAddr, n: usize) -> Vec<(TcpStream, Instant)> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let opened = Instant::now();
        let opening = OPENINGS[i % OPENINGS.len()];
        if !opening.is_empty() {
            s.write_all(opening).await.unwrap();
        }
        out.push((s, opened));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_within_the_idle_timeout_while_others_are_served() {
    enough_open_files();
    let idle = Duration::from_secs(5);
    let config = Config {
        idle_timeout_secs: idle.as_secs(),
        ..Config::default()
    };
    let server = LiveServer::start(Arc::new(MemoryStore::new()), config).await;
    let client = delayq_client::Client::new(&server.base_url).unwrap();
    let http = reqwest::Client::new();

    let started = Instant::now();
    let silent = open_silent(server.addr, SILENT).await;
    let opened_in = started.elapsed();
    let deadline = tokio::time::Instant::now() + idle + Duration::from_secs(20);
    let watchers: Vec<_> = silent
        .into_iter()
        .map(|(s, opened)| tokio::spawn(async move { (opened, closed_at(s, deadline).await) }))
        .collect();

    // Meanwhile, health checks and pushes on fresh connections are answered.
    let mut answered = Vec::new();
    for i in 0..10 {
        let conn = reqwest::Client::new();
        let r = conn
            .get(format!("{}/healthz", server.base_url))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        let mut job = delayq_client::NewJob::new("flood", "x");
        job.id = Some(format!("j{i}"));
        client.push(job).await.unwrap();
        answered.push(Instant::now());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = http
        .get(format!("{}/v1/stats", server.base_url))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());

    let mut still_open = 0;
    let mut closes = Vec::new();
    let mut too_early = Vec::new();
    for w in watchers {
        let (opened, closed) = w.await.unwrap();
        match closed {
            None => still_open += 1,
            Some(at) => {
                closes.push(at);
                let after = at - opened;
                if after < idle - Duration::from_millis(500) {
                    too_early.push(after);
                }
            }
        }
    }
    assert_eq!(
        still_open,
        0,
        "{still_open} of {SILENT} connections still open {:?} after the idle timeout \
         (opened in {opened_in:?})",
        Duration::from_secs(20)
    );
    assert!(
        too_early.is_empty(),
        "closed before the idle timeout: {too_early:?}"
    );
    // Each answer came while most silent connections were still open.
    for a in &answered {
        let closed_before = closes.iter().filter(|c| *c < a).count();
        assert!(
            closed_before < SILENT / 2,
            "a request was answered only after {closed_before} silent connections were closed \
             (opened in {opened_in:?})"
        );
    }
    for i in 0..10 {
        client.get(&format!("j{i}")).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_new_connections_wait_and_the_log_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("delayq.log");
    let server = DelayqProcess::start_logging_to(
        &["--memory", "--max-connections", "3", "--idle-timeout", "2"],
        &log,
    )
    .await;
    let addr: SocketAddr = format!("127.0.0.1:{}", server.port).parse().unwrap();
    // Let the start-up health check's connection close.
    tokio::time::sleep(Duration::from_millis(300)).await;

    for round in 0..2 {
        let silent = open_silent(addr, 3).await;
        let started = Instant::now();
        let r = reqwest::Client::new()
            .get(format!("{}/healthz", server.base_url))
            .timeout(Duration::from_secs(20))
            .send()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}; log:\n{}", server.log().unwrap()));
        let waited = started.elapsed();
        assert!(r.status().is_success(), "{}", r.status());
        // It waited for a silent connection to be closed (at 2 s), not longer than needed.
        assert!(
            waited >= Duration::from_millis(1_500),
            "round {round}: answered after {waited:?}"
        );
        assert!(
            waited < Duration::from_secs(15),
            "round {round}: answered after {waited:?}"
        );
        drop(silent);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let text = server.log().unwrap();
    assert_eq!(
        text.matches("connection limit reached").count(),
        1,
        "log:\n{text}"
    );
    assert!(text.contains("max_connections"), "log:\n{text}");
}
