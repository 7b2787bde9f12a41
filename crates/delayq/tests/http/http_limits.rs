//! Request and connection timeouts (README "Limits"): a request that takes longer than
//! `request_timeout` (here: one whose body never finishes arriving) is answered 503 `timeout` in
//! its API's shape; a long poll may wait its `timeout_ms` on top without tripping it; and over a
//! real socket, a connection that does not send a complete request head within `idle_timeout`,
//! or sits idle after a request, is closed. Real time, with bounds generous for a loaded machine.

use crate::support;

use axum::body::{Body, Bytes};
use axum::http::{Method, Request, StatusCode};
use delayq::config::Config;
use delayq::store::memory::MemoryStore;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::app::{LiveServer, TestApp};
use support::backends::Backend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

fn one_second_timeouts() -> Config {
    Config {
        request_timeout_secs: 1,
        idle_timeout_secs: 1,
        ..Config::default()
    }
}

/// A request whose body never ends: its handler waits for it until the deadline.
async fn stalled_upload(app: &TestApp, path: &str) -> (StatusCode, Value, Duration) {
    let body = Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
    let req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .body(body)
        .unwrap();
    let started = Instant::now();
    let resp = app.router.clone().oneshot(req).await.unwrap();
    let elapsed = started.elapsed();
    let status = resp.status();
    let raw = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&raw).unwrap(), elapsed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_slower_than_the_request_timeout_is_answered_503() {
    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, one_second_timeouts());

    let (status, body, elapsed) = stalled_upload(&app, "/v1/jobs").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "timeout", "{body}");
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");

    // The compat API answers in its own envelope.
    let (status, body, _) = stalled_upload(&app, "/push").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        (body["code"].as_u64(), &body["data"]),
        (Some(1), &Value::Null)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_may_wait_longer_than_the_request_timeout() {
    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, one_second_timeouts());
    let started = Instant::now();
    let r = app
        .post(
            "/v1/reserve",
            json!({"topics": ["nothing"], "timeout_ms": 1500}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["jobs"], json!([]), "{}", r.json);
    assert!(started.elapsed() >= Duration::from_millis(1400));

    let r = app
        .post("/pop", json!({"topic": "nothing", "timeout": 2}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["data"], Value::Null);
}

/// `server::run` on a loopback port with these settings; dropping the sender stops it.
async fn start_server(config: Config) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let server = LiveServer::start(Arc::new(MemoryStore::new()), config).await;
    (server.addr, server.stop)
}

/// Reads until the server closes the connection (EOF or reset); returns what was read and
/// when it closed. Panics if it is still open after `limit`.
async fn read_until_closed(s: &mut tokio::net::TcpStream, limit: Duration) -> (String, Instant) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => panic!(
                "connection still open after {limit:?}; read so far: {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => {
                return (String::from_utf8_lossy(&got).into(), Instant::now());
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_that_never_finishes_its_request_head_is_closed() {
    let (addr, _stop) = start_server(one_second_timeouts()).await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let (_, closed) = read_until_closed(&mut s, Duration::from_secs(10)).await;
    let after = closed - started;
    assert!(after >= Duration::from_millis(900), "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let (addr, _stop) = start_server(one_second_timeouts()).await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let (got, closed) = read_until_closed(&mut s, Duration::from_secs(10)).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.ends_with(r#"{"status":"ok"}"#), "{got}");
    let after = closed - started;
    assert!(after >= Duration::from_millis(900), "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_in_use_is_not_cut_by_the_idle_timeout() {
    // A long poll of 2 s on a server whose idle timeout is 1 s: the head was complete, so
    // the wait is the request's, bounded by request_timeout + max_wait, not by idle_timeout.
    let (addr, _stop) = start_server(one_second_timeouts()).await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = r#"{"topics":["nothing"],"timeout_ms":2000}"#;
    let req = format!(
        "POST /v1/reserve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let (got, _) = read_until_closed(&mut s, Duration::from_secs(10)).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(
        got.ends_with(r#"{"jobs":[],"finished":0,"missing":[]}"#),
        "{got}"
    );
}
