//! `--callback-allow public` (the default) against addresses that look public but are not
//! (docs/delivery.md, "Where callbacks may go"): IPv6 forms carrying a loopback or metadata
//! IPv4 address, and IPv6 special-purpose blocks. A push with such a callback URL is refused
//! naming `callback.url` (compat: code 1, `url: ...`), nothing is stored, and no call reaches
//! the receiver listening on loopback. One URL per form here; allow.rs's unit tests go through
//! every registry entry.

use crate::support;

use axum::http::StatusCode;
use serde_json::json;
use std::time::Duration;
use support::app::TestApp;
use support::backends::Backend;
use support::receiver::{Receiver, Reply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_forms_of_loopback_metadata_and_special_blocks_are_refused_and_never_called() {
    let b = Backend::memory().await;
    let rx = Receiver::start(|_, _| Reply::Status(204)).await;
    let port = rx.base.rsplit(':').next().unwrap().to_string();
    let app = TestApp::new(&b);
    let hosts = [
        "[::127.0.0.1]",
        "[::a9fe:a9fe]",
        "[::ffff:127.0.0.1]",
        "[::ffff:0:7f00:1]",
        "[64:ff9b::127.0.0.1]",
        "[2001::7f00:1]",
        "[100::1]",
        "[fec0::1]",
        "[3fff::1]",
        "[5f00::1]",
        "[2001:2::1]",
        "[2001:10::1]",
    ];
    for (i, host) in hosts.iter().enumerate() {
        let url = format!("http://{host}:{port}/hook");
        let r = app
            .post(
                "/v1/jobs",
                json!({"topic": "t", "id": format!("v{i}"), "callback": {"url": url}}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{url}: {}", r.json);
        assert_eq!(
            r.json["error"]["field"], "callback.url",
            "{url}: {}",
            r.json
        );
        let message = r.json["error"]["message"].as_str().unwrap();
        assert!(message.contains("not a public address"), "{message}");

        let r = app
            .post(
                "/push",
                json!({"topic": "t", "id": format!("c{i}"), "delay": 0, "url": url}),
            )
            .await;
        assert_eq!(r.json["code"], 1, "{url}: {}", r.json);
        assert!(
            r.json["message"].as_str().unwrap().starts_with("url: "),
            "{}",
            r.json
        );
    }
    for i in 0..hosts.len() {
        for id in [format!("v{i}"), format!("c{i}")] {
            let r = app.get(&format!("/v1/jobs/{id}")).await;
            assert_eq!(r.status, StatusCode::NOT_FOUND, "{id} was stored");
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(rx.calls().is_empty(), "called: {:?}", rx.calls());
}
