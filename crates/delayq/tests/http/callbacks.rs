//! Push delivery (docs/delivery.md), in-process with a real HTTP receiver on loopback: a
//! callback job is POSTed when due, once per attempt, with its body and a Standard Webhooks
//! signature that an independent HMAC check verifies; failures follow the backoff, then the
//! job dies, and a kick calls it again. Per backend where the store matters; on the memory
//! store for what only the deliverer decides (timeouts, `Retry-After`, the per-host limit,
//! bad input, metrics). Crashes and several instances are in tests/faults/callbacks.rs.

// `backend_tests!` (support/backends.rs) names `crate::support` on purpose: the support module
// lives in each test crate, not in delayq, so `$crate` would be wrong.
#![allow(clippy::crate_in_macro_def)]

use crate::support;

use axum::http::{Method, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use delayq::config::Config;
use delayq::delivery::allow::AllowList;
use delayq::delivery::sign::WebhookSecret;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::app::TestApp;
use support::backends::Backend;
use support::receiver::{Receiver, Reply};

/// The key of [`SECRET`] and of [`OLD_SECRET`], as a receiver knows them.
const KEY: &[u8] = b"delayq test signing key";
const OLD_KEY: &[u8] = b"the key before rotation";
/// Generous bound for a call that is due now (a loaded CI machine, a Redis Cluster).
const SOON: Duration = Duration::from_secs(10);

fn secret(key: &[u8]) -> WebhookSecret {
    WebhookSecret::parse(&format!("whsec_{}", BASE64.encode(key))).unwrap()
}

/// Callbacks to loopback allowed (the default refuses it), signed with two secrets.
fn config() -> Config {
    Config {
        callback_allow: AllowList::parse(&["127.0.0.1".into()]).unwrap(),
        callback_secrets: vec![secret(KEY), secret(OLD_KEY)],
        ..Config::default()
    }
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// What a receiver does to verify a call, written from the Standard Webhooks specification,
/// not from delayq's code: HMAC-SHA256 over `{id}.{timestamp}.{body}`, base64, compared with
/// each `v1,` signature of the header.
fn verifies(key: &[u8], id: &str, timestamp: &str, body: &[u8], header: &str) -> bool {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let expected = BASE64.encode(mac.finalize().into_bytes());
    header
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|sig| sig == expected)
}

async fn push(app: &TestApp, job: Value) -> Value {
    let r = app.post("/v1/jobs", job).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    r.json
}

async fn state(app: &TestApp, id: &str) -> Option<String> {
    let r = app.get(&format!("/v1/jobs/{id}")).await;
    match r.status {
        StatusCode::NOT_FOUND => None,
        StatusCode::OK => Some(r.json["state"].as_str().unwrap().to_string()),
        s => panic!("GET job: {s} {}", r.json),
    }
}

/// Waits until the job is gone (finished), failing after `within`.
async fn wait_gone(app: &TestApp, id: &str, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while state(app, id).await.is_some() {
        assert!(tokio::time::Instant::now() < deadline, "{id} still there");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_state(app: &TestApp, id: &str, want: &str, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let s = state(app, id).await;
        if s.as_deref() == Some(want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id} is {s:?}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn callback_is_called_once_when_due_with_its_body_signed(b: &Backend) {
    let rx = Receiver::start(|_, _| Reply::Status(204)).await;
    let app = TestApp::with_config(b, config());
    let body = r#"{"order":42,"note":"ü"}"#;
    let pushed = push(
        &app,
        json!({"topic": "orders", "id": "order-42", "body": body, "delay_ms": 400,
               "callback": {"url": format!("{}/hooks/due?x=1", rx.base)}}),
    )
    .await;
    assert_eq!(pushed["callback"]["timeout_ms"], 30_000);
    let due = pushed["run_at_ms"].as_u64().unwrap() as f64;

    let calls = rx.wait_for(1, SOON).await;
    let c = &calls[0];
    assert!(c.at_ms >= due, "called {} ms early", due - c.at_ms);
    assert_eq!(c.path, "/hooks/due");
    assert_eq!(&c.body[..], body.as_bytes());
    assert_eq!(c.id, "order-42");
    assert_eq!((c.topic.as_str(), c.attempt), ("orders", 1));
    assert_eq!(c.content_type, "application/json");
    let ts: f64 = c.timestamp.parse::<f64>().unwrap() * 1000.0;
    assert!(
        (ts - c.at_ms).abs() < 5_000.0,
        "timestamp {ts} vs {}",
        c.at_ms
    );
    let sig = c.signature.as_deref().expect("signed");
    assert!(verifies(KEY, &c.id, &c.timestamp, &c.body, sig), "{sig}");
    assert!(
        verifies(OLD_KEY, &c.id, &c.timestamp, &c.body, sig),
        "{sig}"
    );
    assert!(!verifies(b"another key", &c.id, &c.timestamp, &c.body, sig));

    // A 2xx finishes the job: gone, and never called again.
    wait_gone(&app, "order-42", SOON).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rx.calls().len(), 1);
}

async fn failed_calls_follow_the_backoff_then_a_2xx_finishes(b: &Backend) {
    let rx = Receiver::start(|_, earlier| match earlier {
        0 | 1 => Reply::Status(500),
        _ => Reply::Status(200),
    })
    .await;
    let app = TestApp::with_config(b, config());
    push(
        &app,
        json!({"topic": "retry", "id": "r1", "body": "again",
               "backoff_ms": [300, 600], "callback": {"url": rx.base.clone()}}),
    )
    .await;
    let calls = rx.wait_for(3, SOON * 2).await;
    let attempts: Vec<u32> = calls.iter().map(|c| c.attempt).collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert!(
        calls
            .iter()
            .all(|c| c.id == "r1" && &c.body[..] == b"again")
    );
    assert_eq!(calls[0].content_type, "text/plain; charset=utf-8");
    assert!(calls[1].at_ms - calls[0].at_ms >= 300.0, "{calls:?}");
    assert!(calls[2].at_ms - calls[1].at_ms >= 600.0, "{calls:?}");
    wait_gone(&app, "r1", SOON).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rx.calls().len(), 3);
}

async fn a_callback_that_keeps_failing_dies_and_a_kick_calls_it_again(b: &Backend) {
    let rx = Receiver::start(|_, earlier| match earlier {
        0..=2 => Reply::Status(503),
        _ => Reply::Status(200),
    })
    .await;
    let app = TestApp::with_config(b, config());
    push(
        &app,
        json!({"topic": "dying", "id": "d1", "max_attempts": 3, "backoff_ms": [100],
               "callback": {"url": rx.base.clone()}}),
    )
    .await;
    rx.wait_for(3, SOON * 2).await;
    wait_state(&app, "d1", "dead", SOON).await;
    let stats = app.get("/v1/stats").await.json;
    assert_eq!(stats["callbacks"]["dying"]["dead"], 1, "{stats}");
    assert!(stats["topics"].get("dying").is_none(), "{stats}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rx.calls().len(), 3, "a dead job is not called");

    let r = app.post("/v1/jobs/d1/kick", json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let calls = rx.wait_for(4, SOON).await;
    assert_eq!(calls[3].attempt, 1, "a kick starts the attempts again");
    wait_gone(&app, "d1", SOON).await;
}

async fn a_callback_job_is_never_handed_to_a_consumer(b: &Backend) {
    // The receiver never answers: the job stays with the deliverer for the whole test.
    let rx = Receiver::start(|_, _| Reply::Hang).await;
    let app = TestApp::with_config(b, config());
    push(
        &app,
        json!({"topic": "mixed", "id": "cb", "callback": {"url": rx.base.clone()}}),
    )
    .await;
    push(&app, json!({"topic": "mixed", "id": "pull"})).await;
    rx.wait_for(1, SOON).await;
    let r = app
        .post(
            "/v1/reserve",
            json!({"topics": ["mixed"], "max": 10, "timeout_ms": 300}),
        )
        .await;
    let ids: Vec<&str> = r.json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["pull"]);
    let popped = app
        .post("/pop", json!({"topic": "mixed", "timeout": 1}))
        .await;
    assert_eq!(popped.json["data"], Value::Null, "{}", popped.json);
    // get, bury and delete work on it as on any job.
    let j = app.get("/v1/jobs/cb").await.json;
    assert_eq!(j["state"], "reserved");
    assert_eq!(j["callback"]["url"], rx.base.as_str());
    let r = app.post("/v1/jobs/cb/bury", json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let r = app.send(Method::DELETE, "/v1/jobs/cb", "", None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(state(&app, "cb").await, None);
}

backend_tests!(
    callback_is_called_once_when_due_with_its_body_signed,
    failed_calls_follow_the_backoff_then_a_2xx_finishes,
    a_callback_that_keeps_failing_dies_and_a_kick_calls_it_again,
    a_callback_job_is_never_handed_to_a_consumer,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_an_answer_times_out_and_is_retried() {
    let b = Backend::memory().await;
    let rx = Receiver::start(|_, earlier| match earlier {
        0 => Reply::Hang,
        _ => Reply::Status(200),
    })
    .await;
    let app = TestApp::with_config(&b, config());
    push(
        &app,
        json!({"topic": "slow", "id": "s1", "backoff_ms": [0],
               "callback": {"url": rx.base.clone(), "timeout_ms": 500}}),
    )
    .await;
    let calls = rx.wait_for(2, SOON).await;
    assert!(calls[1].at_ms - calls[0].at_ms >= 500.0, "{calls:?}");
    assert_eq!(calls[1].attempt, 2);
    wait_gone(&app, "s1", SOON).await;
    let metrics = String::from_utf8(app.get("/metrics").await.raw).unwrap();
    assert!(
        metrics.contains(r#"delayq_callback_attempts_total{outcome="timeout"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"delayq_callback_attempts_total{outcome="2xx"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("delayq_callback_duration_seconds_count 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_a_failed_attempt_and_is_not_followed() {
    let b = Backend::memory().await;
    let target = Receiver::start(|_, _| Reply::Status(200)).await;
    let moved = format!("{}/moved", target.base);
    let rx = Receiver::start(move |_, earlier| match earlier {
        0 => Reply::Redirect(307, moved.clone()),
        _ => Reply::Status(200),
    })
    .await;
    let app = TestApp::with_config(&b, config());
    push(
        &app,
        json!({"topic": "moved", "id": "m1", "backoff_ms": [0],
               "callback": {"url": format!("{}/hook", rx.base)}}),
    )
    .await;
    let calls = rx.wait_for(2, SOON).await;
    assert_eq!(calls[1].attempt, 2, "the 307 counted as a failed attempt");
    wait_gone(&app, "m1", SOON).await;
    assert!(target.calls().is_empty(), "the redirect was followed");
    let metrics = String::from_utf8(app.get("/metrics").await.raw).unwrap();
    assert!(
        metrics.contains(r#"delayq_callback_attempts_total{outcome="other_status"} 1"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_moves_the_next_call() {
    let b = Backend::memory().await;
    let rx = Receiver::start(|_, earlier| match earlier {
        0 => Reply::RetryAfter(503, "2".into()),
        _ => Reply::Status(200),
    })
    .await;
    let app = TestApp::with_config(&b, config());
    push(
        &app,
        json!({"topic": "later", "id": "l1", "backoff_ms": [50],
               "callback": {"url": rx.base.clone()}}),
    )
    .await;
    let calls = rx.wait_for(2, SOON).await;
    let gap = calls[1].at_ms - calls[0].at_ms;
    assert!(gap >= 2_000.0, "second call {gap} ms after the first");
    wait_gone(&app, "l1", SOON).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_that_hangs_does_not_delay_the_others() {
    let b = Backend::memory().await;
    let hung = Receiver::start(|_, _| Reply::Hang).await;
    let fast = Receiver::start(|_, _| Reply::Status(200)).await;
    let app = TestApp::with_config(
        &b,
        Config {
            callback_max_in_flight: 8,
            callback_max_in_flight_per_host: 2,
            ..config()
        },
    );
    // Far more hung calls than the whole in-flight limit, pushed first.
    let mut jobs: Vec<Value> = (0..50)
        .map(|i| json!({"topic": "stuck", "id": format!("h{i}"), "callback": {"url": hung.base.clone()}}))
        .collect();
    jobs.extend((0..20).map(|i| {
        json!({"topic": "fine", "id": format!("f{i}"), "delay_ms": 200,
               "callback": {"url": fast.base.clone()}})
    }));
    let r = app.post("/v1/jobs/batch", json!({"jobs": jobs})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let started = now_ms();
    let calls = fast.wait_for(20, SOON).await;
    let last = calls.iter().map(|c| c.at_ms).fold(0.0, f64::max);
    assert!(
        last - started < 5_000.0,
        "the fast host waited {} ms",
        last - started
    );
    let held = hung.calls().len();
    assert!(held <= 2, "{held} calls to the hung host at once, limit 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_callbacks_are_refused_naming_the_field_and_nothing_is_stored() {
    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, config());
    for (callback, field) in [
        (json!({"url": "not a url"}), "callback.url"),
        (json!({"url": "ftp://127.0.0.1/x"}), "callback.url"),
        (
            json!({"url": "http://169.254.169.254/latest"}),
            "callback.url",
        ),
        (json!({"url": "http://10.0.0.1/"}), "callback.url"),
        (json!({}), "callback.url"),
        (
            json!({"url": "http://127.0.0.1/", "timeout_ms": 0}),
            "callback.timeout_ms",
        ),
        (
            json!({"url": "http://127.0.0.1/", "timeout_ms": 600_001}),
            "callback.timeout_ms",
        ),
        (
            json!({"url": "http://127.0.0.1/", "method": "GET"}),
            "callback.method",
        ),
        (json!("http://127.0.0.1/"), "callback"),
    ] {
        let r = app
            .post(
                "/v1/jobs",
                json!({"topic": "bad", "id": "b1", "callback": callback}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{callback}: {}", r.json);
        assert_eq!(r.json["error"]["field"], field, "{callback}: {}", r.json);
        let r = app
            .post(
                "/v1/jobs/batch",
                json!({"jobs": [{"topic": "bad", "id": "b2", "callback": callback}]}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{callback}: {}", r.json);
        assert_eq!(
            r.json["error"]["field"],
            format!("jobs[0].{field}"),
            "{callback}: {}",
            r.json
        );
    }
    for url in ["gopher://127.0.0.1/", "http://169.254.169.254/", "x"] {
        let r = app
            .post(
                "/push",
                json!({"topic": "bad", "id": "c1", "delay": 0, "ttr": 10, "url": url}),
            )
            .await;
        assert_eq!(r.json["code"], 1, "{url}: {}", r.json);
        assert!(
            r.json["message"].as_str().unwrap().starts_with("url: "),
            "{}",
            r.json
        );
    }
    for id in ["b1", "b2", "c1"] {
        assert_eq!(state(&app, id).await, None, "{id} was stored");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compat_api_pushes_a_callback_job_with_url_and_get_shows_it() {
    let b = Backend::memory().await;
    let rx = Receiver::start(|_, _| Reply::Hang).await;
    let app = TestApp::with_config(&b, config());
    // A compat client sends `url` and may leave `ttr` out.
    let r = app
        .post(
            "/push",
            json!({"topic": "seed", "id": "s4", "delay": 3600, "body": "b",
                              "url": format!("{}/notify", rx.base)}),
        )
        .await;
    assert_eq!(r.json["code"], 0, "{}", r.json);
    let got = app.post("/get", json!({"id": "s4"})).await.json;
    assert_eq!(got["data"]["url"], format!("{}/notify", rx.base), "{got}");
    let j = app.get("/v1/jobs/s4").await.json;
    assert_eq!(j["callback"]["timeout_ms"], 30_000);
    assert_eq!(j["max_attempts"], 9);
    assert_eq!(
        j["backoff_ms"],
        json!([
            15_000, 180_000, 600_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 54_000_000
        ])
    );
    // A pull job's /get has no `url`.
    app.post(
        "/push",
        json!({"topic": "seed", "id": "p", "delay": 3600, "ttr": 5}),
    )
    .await;
    let got = app.post("/get", json!({"id": "p"})).await.json;
    assert!(got["data"].get("url").is_none(), "{got}");
}
