//! The /v1 HTTP API against docs/api.md, in-process (no sockets), once per backend: every
//! operation's success, each of its refusals with the status and the field it names, and that
//! a refused request changes nothing.
//!
//! Time-dependent checks use due times far in the past or future, or generous bounds; the few
//! tests that need the real long-poll and timer of dispatch/ say so in their `#[ignore]`.

// `backend_tests!` (support/backends.rs) names `crate::support` on purpose: the support module
// lives in each test crate, not in delayq, so `$crate` would be wrong.
#![allow(clippy::crate_in_macro_def)]

use crate::support;

use axum::http::{Method, StatusCode};
use delayq::api::v1::MAX_DELAY_MS;
use delayq::clock::{Clock, SystemClock};
use delayq::config::Config;
use delayq::job::MAX_RUN_AT;
use delayq::store::StoreError;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::app::{Reply, TestApp};
use support::backends::Backend;
use support::failing::FailingStore;

/// 2100-01-01: a due time that never comes during a test.
const FAR_FUTURE: u64 = 4_102_444_800_000;

fn now_ms() -> u64 {
    SystemClock.now()
}

/// The clock rounded up to the millisecond: the latest due time a delay counted from a request
/// that arrived before this reading can have (docs/semantics.md, "never early").
fn now_ceil_ms() -> u64 {
    SystemClock.now_micros().div_ceil(1000)
}

/// The earliest due time the server may give a job delayed by `delay_ms` in a request sent
/// after the clock read `sent_us` (µs): that instant plus the delay, rounded up.
fn earliest_due_ms(sent_us: u64, delay_ms: u64) -> u64 {
    (sent_us + delay_ms * 1000).div_ceil(1000)
}

fn small_limits() -> Config {
    Config {
        max_body_bytes: 16,
        max_batch: 3,
        max_wait_secs: 1,
        ..Config::default()
    }
}

async fn push(app: &TestApp, job: Value) -> Reply {
    app.post("/v1/jobs", job).await
}

/// Pushes a job that must be created; returns it.
async fn pushed(app: &TestApp, job: Value) -> Value {
    let r = push(app, job).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    r.json
}

async fn reserve(app: &TestApp, topics: &[&str], max: u64) -> Vec<Value> {
    let r = app
        .post(
            "/v1/reserve",
            json!({"topics": topics, "max": max, "timeout_ms": 0}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    r.json["jobs"].as_array().cloned().unwrap_or_default()
}

fn ids(jobs: &[Value]) -> Vec<&str> {
    jobs.iter().map(|j| j["id"].as_str().unwrap()).collect()
}

async fn stats(app: &TestApp) -> Value {
    let r = app.get("/v1/stats").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    r.json
}

async fn delete(app: &TestApp, path: &str) -> Reply {
    app.send(Method::DELETE, path, "", None).await
}

/// Asserts the error body of docs/api.md.
#[track_caller]
fn assert_error(r: &Reply, status: StatusCode, code: &str, field: Option<&str>) {
    assert_eq!(r.status, status, "{:?}", r.json);
    assert_eq!(r.json["error"]["code"], code, "{:?}", r.json);
    assert_eq!(r.json["error"]["field"].as_str(), field, "{:?}", r.json);
    assert!(
        r.json["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{:?}",
        r.json
    );
    assert_eq!(
        r.content_type.as_deref(),
        Some("application/json"),
        "{:?}",
        r
    );
}

// ---------------------------------------------------------------------------------------------
// Push

async fn push_answers_201_with_the_job_and_its_location(b: &Backend) {
    let app = TestApp::new(b);
    let before = now_ms();
    let r = push(
        &app,
        json!({"topic": "orders", "id": "o-1", "body": "{\"order\":42}", "delay_ms": 60_000,
               "ttr_ms": 5_000, "priority": 7, "max_attempts": 3, "backoff_ms": [10, 20]}),
    )
    .await;
    let after = now_ceil_ms();
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    let j = &r.json;
    assert_eq!(j["id"], "o-1");
    assert_eq!(j["topic"], "orders");
    assert_eq!(j["body"], "{\"order\":42}");
    assert_eq!(j["state"], "delayed");
    let run_at = j["run_at_ms"].as_u64().unwrap();
    assert!(
        (before + 60_000..=after + 60_000).contains(&run_at),
        "{run_at}"
    );
    assert_eq!(j["ttr_ms"], 5_000);
    assert_eq!(j["priority"], 7);
    assert_eq!(j["max_attempts"], 3);
    assert_eq!(j["backoff_ms"], json!([10, 20]));
    assert_eq!(j["attempts"], 0);
    assert_eq!(j["reserved_until_ms"], Value::Null);

    let got = app.get("/v1/jobs/o-1").await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(&got.json, j, "the pushed job is what the store holds");
}

async fn push_sets_location_and_applies_defaults(b: &Backend) {
    let app = TestApp::new(b);
    let resp = push_raw(&app, json!({"topic": "t", "id": "j1"})).await;
    assert_eq!(resp.0, StatusCode::CREATED);
    assert_eq!(resp.1.as_deref(), Some("/v1/jobs/j1"));
    let j = resp.2;
    assert_eq!(j["state"], "ready");
    assert_eq!(j["body"], "");
    assert_eq!(j["ttr_ms"], 60_000);
    assert_eq!(j["priority"], 1024);
    assert_eq!(j["max_attempts"], 0);
    assert_eq!(j["backoff_ms"], json!([]));
}

/// Pushes and returns (status, Location, body): the test app's `Reply` has no headers.
async fn push_raw(app: &TestApp, job: Value) -> (StatusCode, Option<String>, Value) {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;
    let req = Request::post("/v1/jobs")
        .body(Body::from(job.to_string()))
        .unwrap();
    let resp = app.router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let location = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let raw = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, location, serde_json::from_slice(&raw).unwrap())
}

async fn push_without_id_generates_time_ordered_ids(b: &Backend) {
    let app = TestApp::new(b);
    let mut ids = Vec::new();
    for _ in 0..5 {
        let j = pushed(&app, json!({"topic": "t"})).await;
        ids.push(j["id"].as_str().unwrap().to_string());
    }
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        ids, sorted,
        "generated ids are distinct and sort in push order"
    );
    assert!(ids.iter().all(|id| uuid_v7_shaped(id)), "{ids:?}");
}

fn uuid_v7_shaped(s: &str) -> bool {
    s.len() == 36 && s.as_bytes()[14] == b'7'
}

async fn push_of_an_existing_id_is_409_exists_and_changes_nothing(b: &Backend) {
    let app = TestApp::new(b);
    let first = pushed(&app, json!({"topic": "t", "id": "x", "body": "one"})).await;
    let before = stats(&app).await;
    let r = push(&app, json!({"topic": "t", "id": "x", "body": "two"})).await;
    assert_error(&r, StatusCode::CONFLICT, "exists", None);
    // Ids are unique across topics.
    let r = push(&app, json!({"topic": "other", "id": "x"})).await;
    assert_error(&r, StatusCode::CONFLICT, "exists", None);
    assert_eq!(stats(&app).await, before);
    assert_eq!(app.get("/v1/jobs/x").await.json, first);
}

async fn push_with_replace_is_201_and_the_old_body_is_never_delivered_again(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "x", "body": "old"})).await;
    // The old version is even out with a consumer when it is replaced.
    let got = reserve(&app, &["t"], 1).await;
    assert_eq!(got[0]["body"], "old");
    let r = push(
        &app,
        json!({"topic": "t", "id": "x", "body": "new", "replace": true}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    assert_eq!(r.json["body"], "new");
    assert_eq!(r.json["state"], "ready");
    let got = reserve(&app, &["t"], 10).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["body"], "new");
    assert_eq!(got[0]["attempts"], 1, "the new version starts afresh");
    assert!(reserve(&app, &["t"], 10).await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Batch push

async fn batch_push_reports_created_and_exists_per_job(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "b"})).await;
    let r = app
        .post(
            "/v1/jobs/batch",
            json!({"jobs": [
                {"topic": "t", "id": "a"},
                {"topic": "t", "id": "b", "body": "ignored"},
                {"topic": "u", "id": "c", "run_at_ms": FAR_FUTURE},
                {"topic": "u"}
            ]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let results = r.json["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    assert_eq!(results[0], json!({"id": "a", "status": "created"}));
    assert_eq!(results[1], json!({"id": "b", "status": "exists"}));
    assert_eq!(results[2], json!({"id": "c", "status": "created"}));
    assert_eq!(results[3]["status"], "created");
    assert!(uuid_v7_shaped(results[3]["id"].as_str().unwrap()));
    assert_eq!(
        app.get("/v1/jobs/b").await.json["body"],
        "",
        "b was not replaced"
    );
    let s = stats(&app).await;
    assert_eq!(s["topics"]["t"]["ready"], 2);
    assert_eq!(s["topics"]["u"]["ready"], 1);
    assert_eq!(s["topics"]["u"]["delayed"], 1);
}

async fn batch_push_with_replace_reports_replaced(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "a", "body": "old"})).await;
    let r = app
        .post(
            "/v1/jobs/batch",
            json!({"replace": true, "jobs": [
                {"topic": "t", "id": "a", "body": "new", "replace": true},
                {"topic": "t", "id": "b"}
            ]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(
        r.json["results"],
        json!([{"id": "a", "status": "replaced"}, {"id": "b", "status": "created"}])
    );
    assert_eq!(app.get("/v1/jobs/a").await.json["body"], "new");
}

async fn batch_with_one_invalid_job_is_400_naming_it_and_pushes_nothing(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    let before = stats(&app).await;
    let cases = [
        (
            json!({"jobs": [{"topic": "t"}, {"topic": "t", "ttr_ms": 0}]}),
            "jobs[1].ttr_ms",
        ),
        (
            json!({"jobs": [{"topic": "t"}, {"topic": "t"}, {"id": "x"}]}),
            "jobs[2].topic",
        ),
        (
            json!({"jobs": [{"topic": "t", "delay": 5}]}),
            "jobs[0].delay",
        ),
        (json!({"jobs": ["t"]}), "jobs[0]"),
        (json!({"jobs": {"topic": "t"}}), "jobs"),
        (json!({}), "jobs"),
        (json!({"jobs": [], "replace": 1}), "replace"),
        (
            json!({"jobs": [{"topic": "t", "replace": true}]}),
            "jobs[0].replace",
        ),
        (
            json!({"jobs": [{"topic": "t"}, {"topic": "t"}, {"topic": "t"}, {"topic": "t"}]}),
            "jobs",
        ),
    ];
    for (body, field) in cases {
        let r = app.post("/v1/jobs/batch", body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
        assert_eq!(stats(&app).await, before, "{body}");
    }
    let r = app
        .post(
            "/v1/jobs/batch",
            json!({"jobs": [{"topic": "t"}, {"topic": "t", "body": "x".repeat(17)}]}),
        )
        .await;
    assert_error(
        &r,
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        Some("jobs[1].body"),
    );
    assert_eq!(stats(&app).await, before);
    // An empty batch is a no-op, not an error.
    let r = app.post("/v1/jobs/batch", json!({"jobs": []})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json, json!({"results": []}));
}

// ---------------------------------------------------------------------------------------------
// One job

async fn get_is_200_or_404(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "a"})).await;
    assert_eq!(app.get("/v1/jobs/a").await.json["id"], "a");
    assert_error(
        &app.get("/v1/jobs/nope").await,
        StatusCode::NOT_FOUND,
        "not_found",
        None,
    );
}

async fn delete_is_204_then_404(b: &Backend) {
    let app = TestApp::new(b);
    pushed(
        &app,
        json!({"topic": "t", "id": "a", "run_at_ms": FAR_FUTURE}),
    )
    .await;
    let r = delete(&app, "/v1/jobs/a").await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert!(r.raw.is_empty());
    assert_error(
        &delete(&app, "/v1/jobs/a").await,
        StatusCode::NOT_FOUND,
        "not_found",
        None,
    );
    assert_eq!(stats(&app).await["topics"], json!({}));
}

async fn finish_is_204_then_404(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "a"})).await;
    assert_eq!(reserve(&app, &["t"], 1).await.len(), 1);
    let r = app.send(Method::POST, "/v1/jobs/a/finish", "", None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = app.send(Method::POST, "/v1/jobs/a/finish", "", None).await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found", None);
    assert_eq!(stats(&app).await["topics"], json!({}));
}

async fn ids_with_spaces_and_slashes_are_reachable_percent_encoded(b: &Backend) {
    let app = TestApp::new(b);
    let (status, location, job) = push_raw(&app, json!({"topic": "t", "id": "a/b c%d"})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(job["id"], "a/b c%d");
    let location = location.unwrap();
    assert_eq!(location, "/v1/jobs/a%2Fb%20c%25d");
    let r = app.get(&location).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["id"], "a/b c%d");
    // A raw slash ends the path segment: that is another (unknown) route, not this job.
    assert_eq!(
        app.get("/v1/jobs/a/b%20c%25d").await.status,
        StatusCode::NOT_FOUND
    );
    // Operations under the id work too.
    let r = app
        .send(Method::POST, &format!("{location}/bury"), "", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["state"], "dead");
    assert_eq!(delete(&app, &location).await.status, StatusCode::NO_CONTENT);
}

async fn a_job_named_batch_is_reachable_like_any_other(b: &Backend) {
    let app = TestApp::new(b);
    let (status, location, _) = push_raw(&app, json!({"topic": "t", "id": "batch"})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(location.as_deref(), Some("/v1/jobs/batch"));
    assert_eq!(app.get("/v1/jobs/batch").await.json["id"], "batch");
    let r = app
        .send(Method::POST, "/v1/jobs/batch/bury", "", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let r = app
        .send(Method::POST, "/v1/jobs/batch/kick", "", None)
        .await;
    assert_eq!(r.json["state"], "ready");
    assert_eq!(
        delete(&app, "/v1/jobs/batch").await.status,
        StatusCode::NO_CONTENT
    );
    assert_error(
        &app.get("/v1/jobs/batch").await,
        StatusCode::NOT_FOUND,
        "not_found",
        None,
    );
}

async fn invalid_ids_in_paths_are_400_naming_id(b: &Backend) {
    let app = TestApp::new(b);
    let long = "x".repeat(257);
    for path in [
        "/v1/jobs/a%0Ab".to_string(),
        "/v1/jobs/%7F".to_string(),
        format!("/v1/jobs/{long}"),
    ] {
        assert_error(
            &app.get(&path).await,
            StatusCode::BAD_REQUEST,
            "invalid_field",
            Some("id"),
        );
        let r = app
            .send(Method::POST, &format!("{path}/touch"), "", None)
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("id"));
    }
    // Not UTF-8 once decoded.
    let r = app.get("/v1/jobs/%FF").await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("id"));
    let r = app.post("/v1/topics/%FF/kick", json!({"max": 1})).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("topic"));
}

/// Never early: every way of delaying a job counts the delay from the request's arrival rounded
/// up to the millisecond, so the stored due time is at least the sender's clock reading taken
/// before sending, plus the delay. Repeated, so that readings fall at many points within a
/// millisecond; a due time counted from the arrival rounded down fails on almost every one.
async fn a_delay_counts_from_the_requests_arrival_rounded_up(b: &Backend) {
    let app = TestApp::new(b);
    for i in 0..20u64 {
        let delay = 30_000 + i;
        let sent = SystemClock.now_micros();
        let j = pushed(
            &app,
            json!({"topic": "t", "id": format!("p{i}"), "delay_ms": delay}),
        )
        .await;
        let run_at = j["run_at_ms"].as_u64().unwrap();
        assert!(
            run_at >= earliest_due_ms(sent, delay),
            "push {sent} µs + {delay} ms: {run_at}"
        );
        assert_eq!(j["state"], "delayed");

        let sent = SystemClock.now_micros();
        let r = app
            .post(
                "/v1/jobs/batch",
                json!({"jobs": [{"topic": "t", "id": format!("b{i}"), "delay_ms": delay}]}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
        let run_at = app.get(&format!("/v1/jobs/b{i}")).await.json["run_at_ms"]
            .as_u64()
            .unwrap();
        assert!(
            run_at >= earliest_due_ms(sent, delay),
            "batch {sent} µs + {delay} ms: {run_at}"
        );

        let sent = SystemClock.now_micros();
        let r = app
            .post(
                &format!("/v1/jobs/b{i}/reschedule"),
                json!({"delay_ms": delay}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
        let run_at = r.json["job"]["run_at_ms"].as_u64().unwrap();
        assert!(
            run_at >= earliest_due_ms(sent, delay),
            "reschedule {sent} µs + {delay} ms: {run_at}"
        );
    }
    for i in 0..20u64 {
        let delay = 30_000 + i;
        pushed(&app, json!({"topic": "r", "id": format!("r{i}")})).await;
        assert_eq!(reserve(&app, &["r"], 1).await.len(), 1);
        let sent = SystemClock.now_micros();
        let r = app
            .post(
                &format!("/v1/jobs/r{i}/release"),
                json!({"delay_ms": delay}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
        let run_at = r.json["run_at_ms"].as_u64().unwrap();
        assert!(
            run_at >= earliest_due_ms(sent, delay),
            "release {sent} µs + {delay} ms: {run_at}"
        );
    }
}

/// A zero delay is not rounded up: the job is ready in the request that pushed it, and a
/// reschedule or release with `delay_ms: 0` makes it ready at once.
async fn a_zero_delay_is_ready_at_once(b: &Backend) {
    let app = TestApp::new(b);
    for i in 0..10 {
        let id = format!("z{i}");
        let j = pushed(&app, json!({"topic": "z", "id": id, "delay_ms": 0})).await;
        assert_eq!(j["state"], "ready", "{j}");
        assert!(j["run_at_ms"].as_u64().unwrap() <= now_ms());
        assert_eq!(ids(&reserve(&app, &["z"], 1).await), [id.as_str()]);
        let r = app
            .post(&format!("/v1/jobs/{id}/release"), json!({"delay_ms": 0}))
            .await;
        assert_eq!(r.json["state"], "ready", "{:?}", r.json);
        let r = app
            .post(&format!("/v1/jobs/{id}/reschedule"), json!({"delay_ms": 0}))
            .await;
        assert_eq!(r.json["job"]["state"], "ready", "{:?}", r.json);
        assert_eq!(ids(&reserve(&app, &["z"], 1).await), [id.as_str()]);
        let r = app
            .send(Method::POST, &format!("/v1/jobs/{id}/finish"), "", None)
            .await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
    }
}

// ---------------------------------------------------------------------------------------------
// Reserve

async fn reserve_orders_by_priority_then_run_at_then_push_order(b: &Backend) {
    let app = TestApp::new(b);
    let t0 = now_ms() - 100_000;
    for (id, priority, run_at) in [
        ("low", 5, t0),
        ("late", 1, t0 + 2_000),
        ("early-1", 1, t0 + 1_000),
        ("early-2", 1, t0 + 1_000),
        ("future", 0, FAR_FUTURE),
    ] {
        pushed(
            &app,
            json!({"topic": "t", "id": id, "priority": priority, "run_at_ms": run_at}),
        )
        .await;
    }
    let got = reserve(&app, &["t"], 10).await;
    assert_eq!(ids(&got), ["early-1", "early-2", "late", "low"]);
    let now = now_ms();
    for j in &got {
        assert_eq!(j["state"], "reserved");
        assert_eq!(j["attempts"], 1);
        let until = j["reserved_until_ms"].as_u64().unwrap();
        assert!((now..=now + 60_000 + 5_000).contains(&until), "{until}");
    }
}

async fn reserve_takes_several_jobs_preferring_topics_in_order(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "a", "id": "a1", "priority": 0})).await;
    pushed(&app, json!({"topic": "a", "id": "a2", "priority": 0})).await;
    pushed(&app, json!({"topic": "b", "id": "b1", "priority": 9})).await;
    pushed(&app, json!({"topic": "c", "id": "c1"})).await;
    let got = reserve(&app, &["b", "a", "b"], 2).await;
    assert_eq!(ids(&got), ["b1", "a1"]);
    let got = reserve(&app, &["b", "a"], 5).await;
    assert_eq!(ids(&got), ["a2"], "topic c was not asked for");
    // `max` defaults to 1.
    pushed(&app, json!({"topic": "a", "id": "a3"})).await;
    pushed(&app, json!({"topic": "a", "id": "a4"})).await;
    let r = app.post("/v1/reserve", json!({"topics": ["a"]})).await;
    assert_eq!(ids(r.json["jobs"].as_array().unwrap()), ["a3"]);
}

async fn reserve_with_zero_timeout_returns_empty_at_once(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "run_at_ms": FAR_FUTURE})).await;
    let start = Instant::now();
    let r = app
        .post(
            "/v1/reserve",
            json!({"topics": ["t", "u"], "timeout_ms": 0}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json, json!({"jobs": []}));
    assert!(start.elapsed() < Duration::from_secs(2));
}

async fn reserve_refuses_invalid_requests(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    pushed(&app, json!({"topic": "t"})).await;
    let before = stats(&app).await;
    let cases = [
        (json!({}), "topics"),
        (json!({"topics": []}), "topics"),
        (json!({"topics": "t"}), "topics"),
        (json!({"topics": ["a", "b", "c", "d"]}), "topics"),
        (json!({"topics": ["t", "a,b"]}), "topics[1]"),
        (json!({"topics": ["t", 3]}), "topics[1]"),
        (json!({"topics": ["t"], "max": 0}), "max"),
        (json!({"topics": ["t"], "max": 4}), "max"),
        (json!({"topics": ["t"], "max": -1}), "max"),
        (json!({"topics": ["t"], "timeout_ms": 1_001}), "timeout_ms"),
        (json!({"topics": ["t"], "timeout_ms": 1.5}), "timeout_ms"),
        (json!({"topics": ["t"], "timeout": 5}), "timeout"),
    ];
    for (body, field) in cases {
        let r = app.post("/v1/reserve", body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
        assert_eq!(stats(&app).await, before, "{body}");
    }
    // At the limits it is fine.
    let r = app
        .post(
            "/v1/reserve",
            json!({"topics": ["x", "y", "t"], "max": 3, "timeout_ms": 0}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["jobs"].as_array().unwrap().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Release, touch, bury, kick

async fn release_returns_a_reserved_job_to_ready(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "a"})).await;
    reserve(&app, &["t"], 1).await;
    let r = app.send(Method::POST, "/v1/jobs/a/release", "", None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["state"], "ready");
    assert_eq!(r.json["attempts"], 1);
    assert_eq!(r.json["reserved_until_ms"], Value::Null);
    // And with an empty object.
    reserve(&app, &["t"], 1).await;
    let r = app.post("/v1/jobs/a/release", json!({})).await;
    assert_eq!(r.json["state"], "ready");
    assert_eq!(r.json["attempts"], 2);
}

async fn release_with_a_delay_makes_the_job_delayed(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "a"})).await;
    reserve(&app, &["t"], 1).await;
    let before = now_ms();
    let r = app
        .post("/v1/jobs/a/release", json!({"delay_ms": 60_000}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["state"], "delayed");
    let run_at = r.json["run_at_ms"].as_u64().unwrap();
    assert!((before + 60_000..=now_ceil_ms() + 60_000).contains(&run_at));
    assert!(reserve(&app, &["t"], 1).await.is_empty());
}

async fn release_of_a_job_that_is_not_reserved_is_409_with_its_state(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "a"})).await;
    let r = app.post("/v1/jobs/a/release", json!({})).await;
    assert_error(&r, StatusCode::CONFLICT, "wrong_state", None);
    assert_eq!(r.json["error"]["state"], "ready");
    let r = app.post("/v1/jobs/zz/release", json!({})).await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found", None);
    assert!(r.json["error"].get("state").is_none());
    // Bad input is refused before the state is looked at.
    reserve(&app, &["t"], 1).await;
    let before = app.get("/v1/jobs/a").await.json;
    for (body, field) in [
        (json!({"delay_ms": -1}), "delay_ms"),
        (json!({"delay_ms": "1s"}), "delay_ms"),
        (json!({"delay_ms": u64::MAX}), "delay_ms"),
        (json!({"delay": 1}), "delay"),
    ] {
        let r = app.post("/v1/jobs/a/release", body).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
    }
    let r = app
        .send(Method::POST, "/v1/jobs/a/release", "nope", None)
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_json", None);
    assert_eq!(app.get("/v1/jobs/a").await.json, before);
}

async fn touch_extends_the_reservation(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "a", "ttr_ms": 60_000})).await;
    let got = reserve(&app, &["t"], 1).await;
    let first = got[0]["reserved_until_ms"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let r = app.send(Method::POST, "/v1/jobs/a/touch", "", None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["state"], "reserved");
    let touched = r.json["reserved_until_ms"].as_u64().unwrap();
    assert!(touched > first, "{touched} > {first}");
    assert!(touched <= now_ms() + 60_000);
    // Only a reserved job can be touched.
    pushed(
        &app,
        json!({"topic": "t", "id": "b", "run_at_ms": FAR_FUTURE}),
    )
    .await;
    let r = app.send(Method::POST, "/v1/jobs/b/touch", "", None).await;
    assert_error(&r, StatusCode::CONFLICT, "wrong_state", None);
    assert_eq!(r.json["error"]["state"], "delayed");
    let r = app.send(Method::POST, "/v1/jobs/zz/touch", "", None).await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found", None);
}

async fn bury_makes_a_job_dead_and_kick_returns_it_ready_with_no_attempts(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "a"})).await;
    reserve(&app, &["t"], 1).await;
    let r = app.send(Method::POST, "/v1/jobs/a/bury", "", None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["state"], "dead");
    assert_eq!(r.json["attempts"], 1);
    assert_eq!(r.json["reserved_until_ms"], Value::Null);
    let r = app.send(Method::POST, "/v1/jobs/a/bury", "", None).await;
    assert_error(&r, StatusCode::CONFLICT, "wrong_state", None);
    assert_eq!(r.json["error"]["state"], "dead");

    let r = app.send(Method::POST, "/v1/jobs/a/kick", "", None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["state"], "ready");
    assert_eq!(r.json["attempts"], 0);
    let r = app.send(Method::POST, "/v1/jobs/a/kick", "", None).await;
    assert_error(&r, StatusCode::CONFLICT, "wrong_state", None);
    assert_eq!(r.json["error"]["state"], "ready");
    for op in ["bury", "kick"] {
        let r = app
            .send(Method::POST, &format!("/v1/jobs/zz/{op}"), "", None)
            .await;
        assert_error(&r, StatusCode::NOT_FOUND, "not_found", None);
    }
}

async fn kick_topic_kicks_up_to_max_dead_jobs_and_counts_them(b: &Backend) {
    let app = TestApp::new(b);
    for id in ["a", "b", "c"] {
        pushed(&app, json!({"topic": "t", "id": id})).await;
        app.send(Method::POST, &format!("/v1/jobs/{id}/bury"), "", None)
            .await;
    }
    pushed(&app, json!({"topic": "u", "id": "u1"})).await;
    app.send(Method::POST, "/v1/jobs/u1/bury", "", None).await;
    let kick = |max: u64| app.post("/v1/topics/t/kick", json!({"max": max}));
    assert_eq!(kick(2).await.json, json!({"kicked": 2}));
    assert_eq!(kick(2).await.json, json!({"kicked": 1}));
    assert_eq!(kick(2).await.json, json!({"kicked": 0}));
    let s = stats(&app).await;
    assert_eq!(s["topics"]["t"]["ready"], 3);
    assert_eq!(s["topics"]["u"]["dead"], 1, "other topics are untouched");
    let r = app.post("/v1/topics/empty/kick", json!({"max": 10})).await;
    assert_eq!(r.json, json!({"kicked": 0}));
}

async fn kick_topic_refuses_invalid_requests(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    pushed(&app, json!({"topic": "t", "id": "a"})).await;
    app.send(Method::POST, "/v1/jobs/a/bury", "", None).await;
    let before = stats(&app).await;
    for (path, body, field) in [
        ("/v1/topics/t/kick", json!({}), "max"),
        ("/v1/topics/t/kick", json!({"max": 0}), "max"),
        ("/v1/topics/t/kick", json!({"max": 4}), "max"),
        ("/v1/topics/t/kick", json!({"max": "1"}), "max"),
        ("/v1/topics/t/kick", json!({"max": 1, "all": true}), "all"),
        ("/v1/topics/a%2Cb/kick", json!({"max": 1}), "topic"),
        ("/v1/topics/a%20b/kick", json!({"max": 1}), "topic"),
    ] {
        let r = app.post(path, body).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
    }
    let r = app.send(Method::POST, "/v1/topics/t/kick", "", None).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_json", None);
    assert_eq!(stats(&app).await, before);
}

// ---------------------------------------------------------------------------------------------
// Reschedule

async fn reschedule_of_a_delayed_or_ready_job_returns_its_previous_state(b: &Backend) {
    let app = TestApp::new(b);
    pushed(
        &app,
        json!({"topic": "t", "id": "a", "run_at_ms": FAR_FUTURE, "body": "v1"}),
    )
    .await;
    // Delayed -> ready now, with a new body and priority.
    let r = app
        .post(
            "/v1/jobs/a/reschedule",
            json!({"delay_ms": 0, "body": "v2", "priority": 3}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["previous_state"], "delayed");
    assert_eq!(r.json["job"]["state"], "ready");
    assert_eq!(r.json["job"]["body"], "v2");
    assert_eq!(r.json["job"]["priority"], 3);
    assert_eq!(r.json["job"]["id"], "a");
    // Ready -> delayed again, body kept.
    let r = app
        .post("/v1/jobs/a/reschedule", json!({"run_at_ms": FAR_FUTURE}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["previous_state"], "ready");
    assert_eq!(r.json["job"]["state"], "delayed");
    assert_eq!(r.json["job"]["run_at_ms"], FAR_FUTURE);
    assert_eq!(r.json["job"]["body"], "v2");
    assert_eq!(r.json["job"]["priority"], 3);
}

async fn reschedule_of_a_reserved_job_is_409_with_its_state(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "a"})).await;
    reserve(&app, &["t"], 1).await;
    let before = app.get("/v1/jobs/a").await.json;
    let r = app
        .post("/v1/jobs/a/reschedule", json!({"delay_ms": 1_000}))
        .await;
    assert_error(&r, StatusCode::CONFLICT, "wrong_state", None);
    assert_eq!(r.json["error"]["state"], "reserved");
    app.send(Method::POST, "/v1/jobs/a/bury", "", None).await;
    let r = app
        .post("/v1/jobs/a/reschedule", json!({"delay_ms": 1_000}))
        .await;
    assert_eq!(r.json["error"]["state"], "dead");
    let r = app
        .post("/v1/jobs/zz/reschedule", json!({"delay_ms": 1_000}))
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found", None);
    let after = app.get("/v1/jobs/a").await.json;
    assert_eq!(
        after["run_at_ms"], before["run_at_ms"],
        "refusals change nothing"
    );
    assert_eq!(after["state"], "dead");
}

async fn reschedule_refuses_invalid_requests(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    pushed(
        &app,
        json!({"topic": "t", "id": "a", "run_at_ms": FAR_FUTURE}),
    )
    .await;
    let before = app.get("/v1/jobs/a").await.json;
    for (body, field) in [
        (json!({}), "delay_ms"),
        (json!({"body": "x"}), "delay_ms"),
        (json!({"delay_ms": 1, "run_at_ms": 1}), "run_at_ms"),
        (json!({"delay_ms": -5}), "delay_ms"),
        (json!({"run_at_ms": MAX_RUN_AT + 1}), "run_at_ms"),
        (
            json!({"delay_ms": 1, "priority": 4_294_967_296_u64}),
            "priority",
        ),
        (json!({"delay_ms": 1, "body": 5}), "body"),
        (json!({"delay_ms": 1, "ttr_ms": 5}), "ttr_ms"),
    ] {
        let r = app.post("/v1/jobs/a/reschedule", body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
    }
    let r = app
        .post(
            "/v1/jobs/a/reschedule",
            json!({"delay_ms": 1, "body": "x".repeat(17)}),
        )
        .await;
    assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "too_large", Some("body"));
    assert_eq!(app.get("/v1/jobs/a").await.json, before);
}

// ---------------------------------------------------------------------------------------------
// Batch finish

async fn batch_finish_counts_finished_and_lists_missing_ids(b: &Backend) {
    let app = TestApp::new(b);
    for id in ["a", "b", "c"] {
        pushed(&app, json!({"topic": "t", "id": id})).await;
    }
    reserve(&app, &["t"], 2).await;
    let r = app
        .post("/v1/finish", json!({"ids": ["a", "x", "c", "a", "y"]}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json, json!({"finished": 2, "missing": ["x", "y"]}));
    assert_eq!(
        stats(&app).await["topics"]["t"],
        json!({"delayed": 0, "ready": 0, "reserved": 1, "dead": 0})
    );
    let r = app.post("/v1/finish", json!({"ids": []})).await;
    assert_eq!(r.json, json!({"finished": 0, "missing": []}));
}

async fn batch_finish_refuses_invalid_requests(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    pushed(&app, json!({"topic": "t", "id": "a"})).await;
    let before = stats(&app).await;
    for (body, field) in [
        (json!({}), "ids"),
        (json!({"ids": "a"}), "ids"),
        (json!({"ids": ["a", "b", "c", "d"]}), "ids"),
        (json!({"ids": ["a", ""]}), "ids[1]"),
        (json!({"ids": ["a", "b\u{0}"]}), "ids[1]"),
        (json!({"ids": ["a", 1]}), "ids[1]"),
        (json!({"id": ["a"]}), "id"),
    ] {
        let r = app.post("/v1/finish", body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
        assert_eq!(stats(&app).await, before, "{body}");
    }
}

// ---------------------------------------------------------------------------------------------
// Stats

async fn stats_count_jobs_per_topic_and_state(b: &Backend) {
    let app = TestApp::new(b);
    assert_eq!(
        stats(&app).await,
        json!({"topics": {}, "callbacks": {}, "next_due_ms": null})
    );
    pushed(
        &app,
        json!({"topic": "s", "id": "d", "run_at_ms": FAR_FUTURE}),
    )
    .await;
    pushed(&app, json!({"topic": "s", "id": "r1", "priority": 0})).await;
    pushed(&app, json!({"topic": "s", "id": "r2"})).await;
    pushed(&app, json!({"topic": "s", "id": "x"})).await;
    pushed(&app, json!({"topic": "other", "id": "o"})).await;
    assert_eq!(stats(&app).await["next_due_ms"], FAR_FUTURE);
    let got = reserve(&app, &["s"], 1).await;
    assert_eq!(ids(&got), ["r1"]);
    app.send(Method::POST, "/v1/jobs/x/bury", "", None).await;
    let s = stats(&app).await;
    assert_eq!(
        s["topics"],
        json!({
            "s": {"delayed": 1, "ready": 1, "reserved": 1, "dead": 1},
            "other": {"delayed": 0, "ready": 1, "reserved": 0, "dead": 0}
        })
    );
    assert_eq!(
        s["next_due_ms"], got[0]["reserved_until_ms"],
        "the reservation is due first"
    );
}

// ---------------------------------------------------------------------------------------------
// Bad input on push: each kind of invalid field, and bodies that are not JSON objects

async fn push_refuses_each_invalid_field_naming_it_and_changes_nothing(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "existing"})).await;
    let before = stats(&app).await;
    let backoff_65: Vec<u64> = vec![1; 65];
    let cases = [
        (json!({}), "topic"),
        (json!({"topic": null}), "topic"),
        (json!({"topic": ""}), "topic"),
        (json!({"topic": "a b"}), "topic"),
        (json!({"topic": "a,b"}), "topic"),
        (json!({"topic": "a\u{1}"}), "topic"),
        (json!({"topic": "x".repeat(129)}), "topic"),
        (json!({"topic": 5}), "topic"),
        (json!({"topic": "t", "id": ""}), "id"),
        (json!({"topic": "t", "id": "a\u{7}b"}), "id"),
        (json!({"topic": "t", "id": "a\nb"}), "id"),
        (json!({"topic": "t", "id": "x".repeat(257)}), "id"),
        (json!({"topic": "t", "id": 12}), "id"),
        (json!({"topic": "t", "body": {"order": 42}}), "body"),
        (json!({"topic": "t", "delay_ms": -1}), "delay_ms"),
        (json!({"topic": "t", "delay_ms": 1.5}), "delay_ms"),
        (json!({"topic": "t", "delay_ms": "5s"}), "delay_ms"),
        (json!({"topic": "t", "delay_ms": u64::MAX}), "delay_ms"),
        (json!({"topic": "t", "delay_ms": 1e30}), "delay_ms"),
        (
            json!({"topic": "t", "delay_ms": 5, "run_at_ms": 5}),
            "run_at_ms",
        ),
        (json!({"topic": "t", "run_at_ms": -1}), "run_at_ms"),
        (
            json!({"topic": "t", "run_at_ms": MAX_RUN_AT + 1}),
            "run_at_ms",
        ),
        (json!({"topic": "t", "ttr_ms": "60000"}), "ttr_ms"),
        (json!({"topic": "t", "ttr_ms": 1.5}), "ttr_ms"),
        (json!({"topic": "t", "ttr_ms": 0}), "ttr_ms"),
        (json!({"topic": "t", "ttr_ms": 86_400_001}), "ttr_ms"),
        (
            json!({"topic": "t", "priority": 4_294_967_296_u64}),
            "priority",
        ),
        (json!({"topic": "t", "priority": -1}), "priority"),
        (json!({"topic": "t", "max_attempts": -1}), "max_attempts"),
        (
            json!({"topic": "t", "max_attempts": 4_294_967_296_u64}),
            "max_attempts",
        ),
        (json!({"topic": "t", "backoff_ms": 1000}), "backoff_ms"),
        (json!({"topic": "t", "backoff_ms": "1s"}), "backoff_ms"),
        (
            json!({"topic": "t", "backoff_ms": [1, -2]}),
            "backoff_ms[1]",
        ),
        (
            json!({"topic": "t", "backoff_ms": [1, "2"]}),
            "backoff_ms[1]",
        ),
        (
            json!({"topic": "t", "backoff_ms": backoff_65}),
            "backoff_ms",
        ),
        (
            json!({"topic": "t", "backoff_ms": [u64::MAX]}),
            "backoff_ms",
        ),
        (json!({"topic": "t", "replace": "yes"}), "replace"),
        (json!({"topic": "t", "delay": 5}), "delay"),
        (json!({"topic": "t", "ttr": 5}), "ttr"),
    ];
    for (body, field) in cases {
        let r = push(&app, body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {:?}", r.json);
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
        let message = r.json["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("{field}: ")), "{message}");
        assert_eq!(stats(&app).await, before, "{body}");
    }
    // At the limits it is fine.
    let ok = json!({"topic": "x".repeat(128), "id": "é".repeat(256), "ttr_ms": 86_400_000,
                    "priority": 4_294_967_295_u64, "max_attempts": 4_294_967_295_u64,
                    "backoff_ms": vec![1; 64], "run_at_ms": MAX_RUN_AT});
    pushed(&app, ok).await;
    // Nulls are absent fields.
    let j = pushed(
        &app,
        json!({"topic": "t", "id": null, "delay_ms": null, "replace": null}),
    )
    .await;
    assert_eq!(j["state"], "ready");
}

async fn push_refuses_bodies_that_are_not_a_json_object(b: &Backend) {
    let app = TestApp::new(b);
    let before = stats(&app).await;
    for body in [
        "",
        "  ",
        "not json",
        "{\"topic\": \"t\"",
        "[]",
        "[{\"topic\":\"t\"}]",
        "\"t\"",
        "42",
        "null",
    ] {
        let r = app
            .send(Method::POST, "/v1/jobs", body, Some("application/json"))
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_json", None);
        assert_eq!(stats(&app).await, before, "{body}");
    }
    for path in ["/v1/jobs/batch", "/v1/reserve", "/v1/finish"] {
        let r = app.send(Method::POST, path, "[1]", None).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_json", None);
    }
}

async fn push_accepts_any_or_no_content_type(b: &Backend) {
    let app = TestApp::new(b);
    for (i, ct) in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ]
    .into_iter()
    .enumerate()
    {
        let body = json!({"topic": "t", "id": format!("j{i}")}).to_string();
        let r = app.send(Method::POST, "/v1/jobs", body, ct).await;
        assert_eq!(r.status, StatusCode::CREATED, "{ct:?}: {:?}", r.json);
    }
}

async fn push_of_a_body_over_the_limit_is_413_naming_body(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    pushed(&app, json!({"topic": "t", "body": "x".repeat(16)})).await;
    // The limit is in bytes, not characters.
    pushed(&app, json!({"topic": "t", "body": "é".repeat(8)})).await;
    let before = stats(&app).await;
    for body in ["x".repeat(17), "é".repeat(9)] {
        let r = push(&app, json!({"topic": "t", "body": body})).await;
        assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "too_large", Some("body"));
    }
    assert_eq!(stats(&app).await, before);
}

async fn a_request_body_over_the_server_limit_is_413(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    let huge = json!({"topic": "t", "body": "x".repeat(4 << 20)}).to_string();
    for path in ["/v1/jobs", "/v1/jobs/batch", "/v1/reserve"] {
        let r = app.send(Method::POST, path, huge.clone(), None).await;
        assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "too_large", None);
    }
    assert_eq!(stats(&app).await["topics"], json!({}));
}

// ---------------------------------------------------------------------------------------------
// Arbitrary input: never a 5xx, never a panic, always the error body

/// Field names worth guessing: every name /v1 knows, plus anything.
fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "topic", "id", "body", "delay_ms", "run_at_ms", "ttr_ms", "priority",
            "max_attempts", "backoff_ms", "replace", "jobs", "topics", "max", "timeout_ms",
            "ids",
        ])
        .prop_map(String::from),
        1 => ".{0,6}",
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(3),
            Just(86_400_000),
            Just(MAX_RUN_AT)
        ]
        .prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        prop::sample::select(vec!["t", "a/b", "", "x y", "batch"]).prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(3, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(field_name(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A request body: usually an object of plausible fields, sometimes any JSON, sometimes bytes.
fn any_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::collection::btree_map(field_name(), any_json(), 0..6)
            .prop_map(|m| Value::Object(m.into_iter().collect()).to_string().into_bytes()),
        1 => any_json().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..40),
    ]
}

/// Each fuzzed endpoint and a valid body for it, which the fuzzer then bends.
const FUZZ_PATHS: &[(&str, &str)] = &[
    ("/v1/jobs", r#"{"topic":"t"}"#),
    (
        "/v1/jobs/batch",
        r#"{"jobs":[{"topic":"t"},{"topic":"u","id":"x"}]}"#,
    ),
    ("/v1/reserve", r#"{"topics":["t","u"],"max":2}"#),
    ("/v1/finish", r#"{"ids":["t","x"]}"#),
    ("/v1/jobs/t/release", "{}"),
    ("/v1/jobs/t/reschedule", r#"{"delay_ms":0}"#),
    ("/v1/topics/t/kick", r#"{"max":1}"#),
];

/// A request body: a valid one with up to two fields changed (so that requests get past the
/// first check), or anything at all.
#[derive(Debug, Clone)]
enum FuzzBody {
    Bent(Vec<(String, Value)>),
    Raw(Vec<u8>),
}

fn fuzz_body() -> impl Strategy<Value = FuzzBody> {
    prop_oneof![
        3 => prop::collection::vec((field_name(), any_json()), 0..3).prop_map(FuzzBody::Bent),
        1 => any_body().prop_map(FuzzBody::Raw),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_requests_get_a_4xx_or_a_success_never_a_5xx(
        requests in prop::collection::vec(
            (prop::sample::select(FUZZ_PATHS), fuzz_body(), ".{0,8}"), 1..8),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let b = Backend::memory().await;
            // No long polls: any timeout_ms above 0 is refused.
            let app = TestApp::with_config(&b, Config { max_wait_secs: 0, ..small_limits() });
            pushed(&app, json!({"topic": "t", "id": "t"})).await;
            for ((path, valid), body, id) in requests {
                let body = match body {
                    FuzzBody::Raw(raw) => raw,
                    FuzzBody::Bent(changes) => {
                        let mut v: Value = serde_json::from_str(valid).unwrap();
                        for (k, x) in changes {
                            v[k] = x;
                        }
                        v.to_string().into_bytes()
                    }
                };
                let r = app.send(Method::POST, path, body.clone(), None).await;
                check_reply(&r, path, &body);
                let enc: String = id.bytes().map(|b| format!("%{b:02X}")).collect();
                for op in ["", "/touch", "/bury", "/kick", "/finish"] {
                    let method = if op.is_empty() { Method::GET } else { Method::POST };
                    let p = format!("/v1/jobs/{enc}{op}");
                    let r = app.send(method, &p, "", None).await;
                    check_reply(&r, &p, b"");
                }
            }
            let r = app.get("/v1/stats").await;
            assert_eq!(r.status, StatusCode::OK);
        });
    }
}

#[track_caller]
fn check_reply(r: &Reply, path: &str, body: &[u8]) {
    let body = String::from_utf8_lossy(body);
    assert!(
        !r.status.is_server_error(),
        "{path} {body}: {} {:?}",
        r.status,
        r.json
    );
    if r.status.is_client_error() && r.status != StatusCode::NOT_FOUND
        || r.json.get("error").is_some()
    {
        let code = r.json["error"]["code"].as_str();
        assert!(code.is_some(), "{path} {body}: {:?}", r.json);
        if code == Some("invalid_field") {
            assert!(
                r.json["error"]["field"].is_string(),
                "{path} {body}: {:?}",
                r.json
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Store failures: 503 for an unreachable store, a plain 500 for corrupt data

fn failing_app(err: StoreError) -> TestApp {
    TestApp::with_store(Arc::new(FailingStore::new(err)), Config::default())
}

/// One request per operation that reaches the store.
fn store_requests() -> Vec<(Method, &'static str, &'static str)> {
    vec![
        (Method::POST, "/v1/jobs", r#"{"topic":"t"}"#),
        (
            Method::POST,
            "/v1/jobs/batch",
            r#"{"jobs":[{"topic":"t"}]}"#,
        ),
        (Method::GET, "/v1/jobs/a", ""),
        (Method::DELETE, "/v1/jobs/a", ""),
        (Method::POST, "/v1/jobs/a/finish", ""),
        (Method::POST, "/v1/jobs/a/release", ""),
        (Method::POST, "/v1/jobs/a/touch", ""),
        (Method::POST, "/v1/jobs/a/bury", ""),
        (Method::POST, "/v1/jobs/a/kick", ""),
        (Method::POST, "/v1/jobs/a/reschedule", r#"{"delay_ms":1}"#),
        (Method::POST, "/v1/reserve", r#"{"topics":["t"]}"#),
        (Method::POST, "/v1/finish", r#"{"ids":["a"]}"#),
        (Method::POST, "/v1/topics/t/kick", r#"{"max":1}"#),
        (Method::GET, "/v1/stats", ""),
    ]
}

#[tokio::test]
async fn an_unreachable_store_is_503_store_unavailable() {
    let app = failing_app(StoreError::Unavailable(
        "redis://secret@host: refused".into(),
    ));
    for (method, path, body) in store_requests() {
        let r = app.send(method.clone(), path, body, None).await;
        assert_error(
            &r,
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            None,
        );
        let text = String::from_utf8_lossy(&r.raw);
        assert!(
            !text.contains("secret"),
            "{method} {path}: store details stay in the log"
        );
    }
}

#[tokio::test]
async fn corrupt_data_is_a_plain_500() {
    let app = failing_app(StoreError::Corrupt("job:a".into()));
    for (method, path, body) in store_requests() {
        let r = app.send(method.clone(), path, body, None).await;
        assert_error(&r, StatusCode::INTERNAL_SERVER_ERROR, "internal", None);
        assert!(
            !String::from_utf8_lossy(&r.raw).contains("job:a"),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn bad_input_is_refused_before_the_store_is_asked() {
    let app = failing_app(StoreError::Unavailable("down".into()));
    let r = app.post("/v1/jobs", json!({"topic": ""})).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("topic"));
}

// ---------------------------------------------------------------------------------------------
// The OpenAPI document

/// Every route of the /v1 router, from docs/api.md (health checks included: the document
/// describes them though another module serves them).
const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/jobs"),
    ("post", "/v1/jobs/batch"),
    // The job whose id is `batch`: its URL is this path, not `/v1/jobs/{id}`.
    ("get", "/v1/jobs/batch"),
    ("delete", "/v1/jobs/batch"),
    ("get", "/v1/jobs/{id}"),
    ("delete", "/v1/jobs/{id}"),
    ("post", "/v1/jobs/{id}/finish"),
    ("post", "/v1/jobs/{id}/release"),
    ("post", "/v1/jobs/{id}/touch"),
    ("post", "/v1/jobs/{id}/bury"),
    ("post", "/v1/jobs/{id}/kick"),
    ("post", "/v1/jobs/{id}/reschedule"),
    ("get", "/v1/jobs/{id}/history"),
    ("post", "/v1/reserve"),
    ("post", "/v1/finish"),
    ("post", "/v1/topics/{topic}/kick"),
    ("get", "/v1/stats"),
    ("get", "/v1/topics"),
    ("get", "/v1/topics/{topic}/jobs"),
    ("get", "/v1/topics/{topic}/schedule"),
    ("get", "/v1/schedule"),
    ("post", "/v1/restore"),
    ("get", "/v1/openapi.json"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
];

async fn openapi_document_describes_every_route(b: &Backend) {
    let app = TestApp::new(b);
    let r = app.get("/v1/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.content_type.as_deref(), Some("application/json"));
    let doc = &r.json;
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    let mut described = BTreeSet::new();
    for (path, item) in paths {
        for method in ["get", "post", "put", "delete", "patch"] {
            if let Some(op) = item.get(method) {
                described.insert((method.to_string(), path.clone()));
                assert!(op["operationId"].is_string(), "{method} {path}");
                assert!(op["responses"].is_object(), "{method} {path}");
            }
        }
    }
    // The journal's routes are described only by a server with a journal (this one has none;
    // tests/journal/http.rs checks one that has).
    let expected: BTreeSet<(String, String)> = ROUTES
        .iter()
        .filter(|(_, p)| !p.ends_with("/history") && *p != "/v1/restore")
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(described, expected);

    // Every route the router serves (other than health checks) answers something other than
    // "no such route" (404 with an empty body) or 405.
    for (method, path) in ROUTES {
        if path.starts_with("/healthz") || path.starts_with("/readyz") {
            continue;
        }
        let concrete = path.replace("{id}", "nope").replace("{topic}", "t");
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let r = app.send(method.clone(), &concrete, "{}", None).await;
        assert_ne!(
            r.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {concrete}"
        );
        assert!(
            r.status != StatusCode::NOT_FOUND
                || r.json["error"]["code"] == "not_found"
                || r.json["error"]["code"] == "journal_disabled",
            "{method} {concrete}: {:?}",
            r
        );
    }

    // Every `$ref` resolves.
    let mut refs = Vec::new();
    collect_refs(doc, &mut refs);
    assert!(!refs.is_empty());
    for r in refs {
        let pointer = r.strip_prefix('#').unwrap();
        assert!(doc.pointer(pointer).is_some(), "dangling $ref {r}");
    }
    // The described objects have the fields the API really sends.
    let schema_fields = |name: &str| -> BTreeSet<String> {
        let schema = &doc["components"]["schemas"][name];
        let props: BTreeSet<String> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let required: BTreeSet<String> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(props, required, "{name}: every field is always sent");
        props
    };
    let keys = |v: &Value| -> BTreeSet<String> { v.as_object().unwrap().keys().cloned().collect() };
    let job = pushed(&app, json!({"topic": "t", "id": "doc"})).await;
    assert_eq!(keys(&job), schema_fields("Job"));
    assert_eq!(keys(&stats(&app).await), schema_fields("Stats"));
    let reserved = app.post("/v1/reserve", json!({"topics": ["t"]})).await.json;
    assert_eq!(keys(&reserved), schema_fields("ReserveReply"));
    let r = app
        .post("/v1/jobs/doc/reschedule", json!({"delay_ms": 0}))
        .await;
    assert_eq!(keys(&r.json), schema_fields("Error"));
    let detail = &doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"];
    assert_eq!(
        keys(&r.json["error"]),
        keys(detail),
        "wrong_state sends every field"
    );

    // Each operation with a path parameter declares it.
    for (path, item) in paths {
        if path.contains('{') {
            assert!(item["parameters"].is_array(), "{path}");
        }
    }
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                if k == "$ref" {
                    out.push(v.as_str().unwrap().to_string());
                } else {
                    collect_refs(v, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// The document says what the server enforces (.ci/schemathesis checks it at random; these
// tests, by example)

/// The schema of a request field in the document: the field's own schema, or the non-null one
/// of an optional field's `oneOf`.
fn field_schema<'a>(doc: &'a Value, schema: &str, field: &str) -> &'a Value {
    let s = &doc["components"]["schemas"][schema]["properties"][field];
    match s["oneOf"].as_array() {
        Some(alternatives) => alternatives
            .iter()
            .find(|a| a["type"] != "null")
            .unwrap_or(s),
        None => s,
    }
}

async fn openapi(app: &TestApp) -> Value {
    let r = app.get("/v1/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    r.json
}

async fn integers_may_be_written_with_a_fraction_or_an_exponent(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    let before = now_ms();
    // `1614.0`, `5e3`: integers in JSON Schema, so in the document, so on the server.
    let f = pushed(
        &app,
        json!({"topic": "slow", "id": "f", "delay_ms": 1614.0, "ttr_ms": 5e3, "priority": 7.0,
               "max_attempts": 2.0, "backoff_ms": [10.0, 2e1]}),
    )
    .await;
    assert_eq!(
        [
            &f["ttr_ms"],
            &f["priority"],
            &f["max_attempts"],
            &f["backoff_ms"]
        ],
        [&json!(5000), &json!(7), &json!(2), &json!([10, 20])]
    );
    let run_at = f["run_at_ms"].as_u64().unwrap();
    assert!((before + 1614..=now_ceil_ms() + 1614).contains(&run_at));
    let g = pushed(&app, json!({"topic": "t", "id": "g", "run_at_ms": 1.0})).await;
    assert_eq!((&g["run_at_ms"], &g["state"]), (&json!(1), &json!("ready")));
    let r = app
        .post(
            "/v1/reserve",
            json!({"topics": ["t"], "max": 1.0, "timeout_ms": 0.0}),
        )
        .await;
    assert_eq!(ids(r.json["jobs"].as_array().unwrap()), ["g"]);
    let r = app
        .post("/v1/jobs/g/release", json!({"delay_ms": 0.0}))
        .await;
    assert_eq!(r.json["state"], "ready", "{:?}", r.json);
    let r = app.send(Method::POST, "/v1/jobs/g/bury", "", None).await;
    assert_eq!(r.json["state"], "dead", "{:?}", r.json);
    let r = app.post("/v1/topics/t/kick", json!({"max": 1.0})).await;
    assert_eq!(r.json, json!({"kicked": 1}));
    let r = app
        .post(
            "/v1/jobs/f/reschedule",
            json!({"run_at_ms": 2.0, "priority": 3.0}),
        )
        .await;
    assert_eq!(
        (&r.json["job"]["run_at_ms"], &r.json["job"]["priority"]),
        (&json!(2), &json!(3)),
        "{:?}",
        r.json
    );

    // A fraction is refused, naming the field.
    let before = stats(&app).await;
    let cases = [
        (
            "/v1/jobs",
            json!({"topic": "t", "delay_ms": 1614.5}),
            "delay_ms",
        ),
        (
            "/v1/jobs",
            json!({"topic": "t", "run_at_ms": 1614.5}),
            "run_at_ms",
        ),
        (
            "/v1/jobs",
            json!({"topic": "t", "ttr_ms": 1614.5}),
            "ttr_ms",
        ),
        (
            "/v1/jobs",
            json!({"topic": "t", "priority": 1614.5}),
            "priority",
        ),
        (
            "/v1/jobs",
            json!({"topic": "t", "max_attempts": 1614.5}),
            "max_attempts",
        ),
        (
            "/v1/jobs",
            json!({"topic": "t", "backoff_ms": [1, 1614.5]}),
            "backoff_ms[1]",
        ),
        (
            "/v1/jobs/batch",
            json!({"jobs": [{"topic": "t", "priority": 1614.5}]}),
            "jobs[0].priority",
        ),
        ("/v1/reserve", json!({"topics": ["t"], "max": 1.5}), "max"),
        (
            "/v1/reserve",
            json!({"topics": ["t"], "timeout_ms": 1614.5}),
            "timeout_ms",
        ),
        ("/v1/topics/t/kick", json!({"max": 1.5}), "max"),
        (
            "/v1/jobs/f/release",
            json!({"delay_ms": 1614.5}),
            "delay_ms",
        ),
        (
            "/v1/jobs/f/reschedule",
            json!({"delay_ms": 1614.5}),
            "delay_ms",
        ),
    ];
    for (path, body, field) in cases {
        let r = app.post(path, body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
        let message = r.json["error"]["message"].as_str().unwrap();
        assert!(message.contains(".5"), "{path} {body}: {message}");
    }
    assert_eq!(stats(&app).await, before);
}

/// Request bodies, the document's schema of each, and the fields a valid one needs.
const REQUESTS: &[(&str, &str, &str)] = &[
    ("NewJob", "/v1/jobs", r#"{"topic": "t"}"#),
    (
        "BatchPush",
        "/v1/jobs/batch",
        r#"{"jobs": [{"topic": "t"}]}"#,
    ),
    ("ReserveRequest", "/v1/reserve", r#"{"topics": ["t"]}"#),
    ("Release", "/v1/jobs/n/release", "{}"),
    ("Reschedule", "/v1/jobs/n/reschedule", r#"{"delay_ms": 0}"#),
    ("Reschedule", "/v1/jobs/n/reschedule", r#"{"run_at_ms": 0}"#),
    ("FinishBatch", "/v1/finish", r#"{"ids": ["n"]}"#),
    ("KickTopic", "/v1/topics/t/kick", r#"{"max": 1}"#),
];

async fn null_is_an_absent_field_wherever_the_document_allows_it(b: &Backend) {
    let app = TestApp::new(b);
    let doc = openapi(&app).await;
    let schemas = &doc["components"]["schemas"];
    // The document: every optional field of a request may be `null`, no required one may.
    for (name, _, _) in REQUESTS {
        let required = schemas[name]["required"].as_array().cloned();
        for (field, schema) in schemas[name]["properties"].as_object().unwrap() {
            let nullable = schema["oneOf"]
                .as_array()
                .is_some_and(|a| a.contains(&json!({"type": "null"})));
            let is_required = required.as_ref().is_some_and(|r| r.contains(&json!(field)));
            assert_eq!(nullable, !is_required, "{name}.{field}");
        }
    }
    // The server: each valid request with every other field `null` is served as without them.
    for (name, path, valid) in REQUESTS {
        let mut body: Value = serde_json::from_str(valid).unwrap();
        for field in schemas[name]["properties"].as_object().unwrap().keys() {
            if body.get(field).is_none() {
                body[field] = Value::Null;
            }
        }
        let job = json!({"topic": "n", "id": "n", "run_at_ms": FAR_FUTURE, "replace": true});
        pushed(&app, job).await;
        if path.ends_with("/release") {
            app.post("/v1/jobs/n/reschedule", json!({"delay_ms": 0}))
                .await;
            assert_eq!(ids(&reserve(&app, &["n"], 1).await), ["n"]);
        }
        let r = app.post(path, body.clone()).await;
        assert!(r.status.is_success(), "{path} {body}: {:?}", r.json);
        if *name == "NewJob" {
            // The defaults of docs/api.md.
            assert_eq!(
                [&r.json["body"], &r.json["ttr_ms"], &r.json["priority"]],
                [&json!(""), &json!(60_000), &json!(1024)]
            );
            assert_eq!(
                [
                    &r.json["max_attempts"],
                    &r.json["backoff_ms"],
                    &r.json["state"]
                ],
                [&json!(0), &json!([]), &json!("ready")]
            );
        }
        app.send(Method::DELETE, "/v1/jobs/n", "", None).await;
    }
    // A required field that is `null` is missing.
    for (path, body, field) in [
        ("/v1/jobs", json!({"topic": null}), "topic"),
        ("/v1/jobs/batch", json!({"jobs": null}), "jobs"),
        ("/v1/reserve", json!({"topics": null}), "topics"),
        ("/v1/finish", json!({"ids": null}), "ids"),
        ("/v1/topics/t/kick", json!({"max": null}), "max"),
    ] {
        let r = app.post(path, body).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
    }
}

async fn both_due_times_are_refused_as_the_document_says(b: &Backend) {
    let app = TestApp::new(b);
    let doc = openapi(&app).await;
    let schemas = &doc["components"]["schemas"];
    // NewJob: not both (each given, not null); Reschedule: exactly one.
    let both = &schemas["NewJob"]["not"];
    assert_eq!(both["required"], json!(["delay_ms", "run_at_ms"]));
    let one_of = schemas["Reschedule"]["oneOf"].as_array().unwrap();
    let required: Vec<&Value> = one_of.iter().map(|s| &s["required"]).collect();
    assert_eq!(required, [&json!(["delay_ms"]), &json!(["run_at_ms"])]);

    let r = push(&app, json!({"topic": "t", "delay_ms": 5, "run_at_ms": 5})).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        "invalid_field",
        Some("run_at_ms"),
    );
    pushed(
        &app,
        json!({"topic": "t", "id": "a", "delay_ms": 60_000, "run_at_ms": null}),
    )
    .await;
    pushed(
        &app,
        json!({"topic": "t", "id": "b", "delay_ms": null, "run_at_ms": FAR_FUTURE}),
    )
    .await;
    for (body, field) in [
        (json!({"delay_ms": 1, "run_at_ms": 1}), "run_at_ms"),
        (json!({"delay_ms": null, "run_at_ms": null}), "delay_ms"),
    ] {
        let r = app.post("/v1/jobs/a/reschedule", body).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
    }
    let r = app
        .post(
            "/v1/jobs/a/reschedule",
            json!({"delay_ms": null, "run_at_ms": FAR_FUTURE}),
        )
        .await;
    assert_eq!(r.json["job"]["run_at_ms"], FAR_FUTURE, "{:?}", r.json);
}

async fn the_document_states_the_limits_of_the_configuration(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    let doc = openapi(&app).await;
    let limit =
        |schema: &str, field: &str, key: &str| field_schema(&doc, schema, field)[key].clone();
    // small_limits: max_batch 3, max_wait 1 s, max_body_bytes 16.
    assert_eq!(limit("BatchPush", "jobs", "maxItems"), 3);
    assert_eq!(limit("ReserveRequest", "topics", "maxItems"), 3);
    assert_eq!(limit("ReserveRequest", "max", "maximum"), 3);
    assert_eq!(limit("ReserveRequest", "timeout_ms", "maximum"), 1_000);
    assert_eq!(limit("FinishBatch", "ids", "maxItems"), 3);
    assert_eq!(limit("KickTopic", "max", "maximum"), 3);
    assert_eq!(limit("NewJob", "body", "maxLength"), 16);
    assert_eq!(limit("Reschedule", "body", "maxLength"), 16);
    assert_eq!(limit("NewJob", "max_attempts", "minimum"), 0);
    // The server: at each limit it is fine, one past it is refused naming the field.
    pushed(
        &app,
        json!({"topic": "t", "id": "a", "run_at_ms": FAR_FUTURE}),
    )
    .await;
    let jobs = |n: usize| json!({"jobs": vec![json!({"topic": "t", "run_at_ms": FAR_FUTURE}); n]});
    let cases = [
        ("/v1/jobs/batch", jobs(3), jobs(4), "jobs"),
        (
            "/v1/topics/t/kick",
            json!({"max": 3}),
            json!({"max": 4}),
            "max",
        ),
        (
            "/v1/jobs",
            json!({"topic": "t", "body": "x".repeat(16), "max_attempts": 0}),
            json!({"topic": "t", "body": "x".repeat(17)}),
            "body",
        ),
    ];
    for (path, ok, over, field) in cases {
        let r = app.post(path, ok.clone()).await;
        assert!(r.status.is_success(), "{path} {ok}: {:?}", r.json);
        let r = app.post(path, over.clone()).await;
        assert!(r.status.is_client_error(), "{path} {over}: {:?}", r.json);
        assert_eq!(r.json["error"]["field"], field, "{path} {over}");
    }
    // A job with `max_attempts: 0` is delivered again and again (0 is unlimited).
    let j = pushed(&app, json!({"topic": "u", "id": "u", "max_attempts": 0})).await;
    assert_eq!(j["max_attempts"], 0);
    for _ in 0..3 {
        assert_eq!(ids(&reserve(&app, &["u"], 1).await), ["u"]);
        app.post("/v1/jobs/u/release", json!({})).await;
    }

    // The defaults, in a server with the default configuration.
    let app = TestApp::new(b);
    let doc = openapi(&app).await;
    let d = Config::default();
    let max_batch = json!(d.max_batch);
    assert_eq!(
        field_schema(&doc, "BatchPush", "jobs")["maxItems"],
        max_batch
    );
    assert_eq!(
        field_schema(&doc, "ReserveRequest", "max")["maximum"],
        max_batch
    );
    assert_eq!(
        field_schema(&doc, "ReserveRequest", "timeout_ms")["maximum"],
        d.max_wait_secs * 1000
    );
    assert_eq!(
        field_schema(&doc, "NewJob", "body")["maxLength"],
        json!(d.max_body_bytes)
    );
}

async fn delays_are_at_most_1000_years_as_the_document_says(b: &Backend) {
    let app = TestApp::new(b);
    let doc = openapi(&app).await;
    for schema in ["NewJob", "Release", "Reschedule"] {
        assert_eq!(
            field_schema(&doc, schema, "delay_ms")["maximum"],
            MAX_DELAY_MS,
            "{schema}"
        );
    }
    assert_eq!(MAX_DELAY_MS, 1000 * 365 * 86_400_000);
    let j = pushed(
        &app,
        json!({"topic": "t", "id": "a", "delay_ms": MAX_DELAY_MS}),
    )
    .await;
    assert_eq!(j["state"], "delayed");
    let over = MAX_DELAY_MS + 1;
    let r = push(&app, json!({"topic": "t", "delay_ms": over})).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        "invalid_field",
        Some("delay_ms"),
    );
    let r = app
        .post("/v1/jobs/a/reschedule", json!({"delay_ms": over}))
        .await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        "invalid_field",
        Some("delay_ms"),
    );
    app.post("/v1/jobs/a/reschedule", json!({"delay_ms": 0}))
        .await;
    reserve(&app, &["t"], 1).await;
    let r = app
        .post("/v1/jobs/a/release", json!({"delay_ms": over}))
        .await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        "invalid_field",
        Some("delay_ms"),
    );
    let r = app
        .post("/v1/jobs/a/release", json!({"delay_ms": MAX_DELAY_MS}))
        .await;
    assert_eq!(r.json["state"], "delayed", "{:?}", r.json);
}

/// The ranges of characters that a pattern of the document, `^[^<ranges>]+$` with each
/// character written `\uXXXX`, excludes.
fn excluded_ranges(pattern: &str) -> Vec<(u32, u32)> {
    let class = pattern
        .strip_prefix("^[^")
        .and_then(|p| p.strip_suffix("]+$"))
        .unwrap_or_else(|| panic!("unexpected pattern {pattern}"));
    let code = |s: &str| {
        assert!(s.starts_with("\\u"), "unexpected pattern {pattern}");
        u32::from_str_radix(&s[2..6], 16).unwrap()
    };
    let mut ranges = Vec::new();
    let mut rest = class;
    while !rest.is_empty() {
        let lo = code(rest);
        rest = &rest[6..];
        let hi = match rest.strip_prefix('-') {
            Some(r) => {
                rest = &r[6..];
                code(r)
            }
            None => lo,
        };
        ranges.push((lo, hi));
    }
    ranges
}

#[tokio::test]
async fn ids_and_topics_refuse_exactly_the_characters_the_documents_patterns_exclude() {
    let b = Backend::memory().await;
    let app = TestApp::new(&b);
    let doc = openapi(&app).await;
    let schemas = &doc["components"]["schemas"];
    let id_excluded = excluded_ranges(schemas["JobId"]["pattern"].as_str().unwrap());
    let topic_excluded = excluded_ranges(schemas["Topic"]["pattern"].as_str().unwrap());
    let excludes = |ranges: &[(u32, u32)], c: char| {
        ranges
            .iter()
            .any(|&(lo, hi)| (lo..=hi).contains(&u32::from(c)))
    };
    let candidates = (0..=0x2ffu32)
        .chain(0x1680..=0x1681)
        .chain(0x1ffe..=0x2070)
        .chain([0x3000, 0x3001, 0xfeff, 0xfffd, 0x10ffff])
        .filter_map(char::from_u32);
    for c in candidates {
        let enc: String = format!("a{c}b")
            .bytes()
            .map(|b| format!("%{b:02X}"))
            .collect();
        // A valid id that names no job is 404; an invalid one 400.
        let r = app.get(&format!("/v1/jobs/{enc}")).await;
        let refused = r.status == StatusCode::BAD_REQUEST;
        assert!(refused || r.status == StatusCode::NOT_FOUND, "{c:?}: {r:?}");
        assert_eq!(refused, excludes(&id_excluded, c), "id with {c:?}");
        let r = app
            .post(&format!("/v1/topics/{enc}/kick"), json!({"max": 1}))
            .await;
        let refused = r.status == StatusCode::BAD_REQUEST;
        assert!(refused || r.status == StatusCode::OK, "{c:?}: {r:?}");
        assert_eq!(refused, excludes(&topic_excluded, c), "topic with {c:?}");
    }
}

#[tokio::test]
async fn every_path_allows_exactly_the_methods_the_document_describes() {
    use axum::body::Body;
    use axum::http::{Request, header};
    use tower::ServiceExt;
    let b = Backend::memory().await;
    let app = TestApp::new(&b);
    let doc = openapi(&app).await;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let mut documented: BTreeSet<String> = ["get", "post", "put", "delete", "patch"]
            .into_iter()
            .filter(|m| item.get(*m).is_some())
            .map(str::to_uppercase)
            .collect();
        // Every GET route answers HEAD too (axum), and HTTP says so.
        if documented.contains("GET") {
            documented.insert("HEAD".into());
        }
        let concrete = path.replace("{id}", "nope").replace("{topic}", "t");
        let req = Request::builder()
            .method(Method::OPTIONS)
            .uri(&concrete)
            .body(Body::empty())
            .unwrap();
        let resp = app.router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED, "{concrete}");
        let allow: BTreeSet<String> = resp
            .headers()
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .split(',')
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty())
            .collect();
        assert_eq!(allow, documented, "OPTIONS {concrete}");
    }
}

// ---------------------------------------------------------------------------------------------
// The long-poll and the timer (dispatch/)

async fn a_waiting_reserve_is_woken_by_a_push(b: &Backend) {
    let app = Arc::new(TestApp::new(b));
    let waiter = {
        let app = app.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let r = app
                .post(
                    "/v1/reserve",
                    json!({"topics": ["t"], "timeout_ms": 10_000}),
                )
                .await;
            (r, start.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    pushed(&app, json!({"topic": "t", "id": "a"})).await;
    let (r, waited) = waiter.await.unwrap();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(ids(r.json["jobs"].as_array().unwrap()), ["a"]);
    assert!(waited < Duration::from_secs(8), "{waited:?}");
}

async fn a_reserve_with_a_timeout_waits_then_returns_empty(b: &Backend) {
    let app = TestApp::new(b);
    let start = Instant::now();
    let r = app
        .post("/v1/reserve", json!({"topics": ["t"], "timeout_ms": 300}))
        .await;
    assert_eq!(r.json, json!({"jobs": []}));
    assert!(
        start.elapsed() >= Duration::from_millis(250),
        "{:?}",
        start.elapsed()
    );
}

async fn a_long_poll_over_max_waiters_is_refused_at_once(b: &Backend) {
    let app = Arc::new(TestApp::with_config(
        b,
        Config {
            max_waiters: 1,
            ..Config::default()
        },
    ));
    let first = {
        let app = app.clone();
        tokio::spawn(async move {
            app.post(
                "/v1/reserve",
                json!({"topics": ["w"], "timeout_ms": 10_000}),
            )
            .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.state.dispatch.waiters() < 1 {
        assert!(
            Instant::now() < deadline,
            "the first long poll never waited"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let start = Instant::now();
    let r = app
        .post(
            "/v1/reserve",
            json!({"topics": ["w"], "timeout_ms": 10_000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.json);
    assert_eq!(r.json["error"]["code"], "too_many_waiters");
    assert!(start.elapsed() < Duration::from_secs(5), "refused at once");
    // A reserve that does not wait is still served.
    let r = app.post("/v1/reserve", json!({"topics": ["w"]})).await;
    assert_eq!(r.status, StatusCode::OK);
    // The waiting one gets the next job.
    pushed(&app, json!({"topic": "w", "id": "w1"})).await;
    let r = first.await.unwrap();
    assert_eq!(ids(r.json["jobs"].as_array().unwrap()), ["w1"]);
}

async fn a_delayed_job_becomes_ready_when_due(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "a", "delay_ms": 200})).await;
    let r = app
        .post(
            "/v1/reserve",
            json!({"topics": ["t"], "timeout_ms": 10_000}),
        )
        .await;
    assert_eq!(ids(r.json["jobs"].as_array().unwrap()), ["a"]);
}

// ---------------------------------------------------------------------------------------------
// Listings: topics, pages of jobs, schedules

/// A callback job of `topic` due at `run_at`, pushed straight into the store.
async fn push_callback_job(b: &Backend, topic: &str, id: &str, run_at: u64) {
    let mut spec = delayq::job::JobSpec::new(
        delayq::job::Topic::parse(topic).unwrap(),
        delayq::job::JobId::parse(id).unwrap(),
        "{}",
        run_at,
    );
    spec.with_callback_defaults(
        delayq::job::Callback {
            url: "https://hooks.example.com/due".into(),
            timeout_ms: 10_000,
        },
        None,
        None,
        None,
    );
    b.store
        .push(spec, delayq::store::PushMode::Reject, now_ms())
        .await
        .unwrap();
}

async fn topics_lists_every_topic_by_name_with_pull_and_callback_counts(b: &Backend) {
    let app = TestApp::new(b);
    let r = app.get("/v1/topics").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json, json!({"topics": [], "next_due_ms": null}));
    pushed(
        &app,
        json!({"topic": "zeta", "id": "z1", "run_at_ms": FAR_FUTURE}),
    )
    .await;
    pushed(&app, json!({"topic": "alpha", "id": "a1"})).await;
    pushed(&app, json!({"topic": "alpha", "id": "a2"})).await;
    app.send(Method::POST, "/v1/jobs/a2/bury", "", None).await;
    push_callback_job(b, "mid", "c1", FAR_FUTURE - 1).await;
    push_callback_job(b, "alpha", "c2", FAR_FUTURE).await;
    let r = app.get("/v1/topics").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let zero = json!({"delayed": 0, "ready": 0, "reserved": 0, "dead": 0});
    assert_eq!(
        r.json,
        json!({
            "topics": [
                {"topic": "alpha", "delayed": 0, "ready": 1, "reserved": 0, "dead": 1,
                 "callbacks": {"delayed": 1, "ready": 0, "reserved": 0, "dead": 0}},
                {"topic": "mid", "delayed": 0, "ready": 0, "reserved": 0, "dead": 0,
                 "callbacks": {"delayed": 1, "ready": 0, "reserved": 0, "dead": 0}},
                {"topic": "zeta", "delayed": 1, "ready": 0, "reserved": 0, "dead": 0,
                 "callbacks": zero},
            ],
            "next_due_ms": FAR_FUTURE - 1
        })
    );
    let r = app.get("/v1/topics?x=1").await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("x"));
}

/// Every page of a listing through the API, following `next_cursor`: the jobs in order.
async fn walk_pages(app: &TestApp, path: &str, limit: u64) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let mut url = format!("{path}&limit={limit}");
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let r = app.get(&url).await;
        assert_eq!(r.status, StatusCode::OK, "{url}: {:?}", r.json);
        let jobs = r.json["jobs"].as_array().unwrap();
        assert!(jobs.len() as u64 <= limit);
        out.extend(jobs.iter().cloned());
        match &r.json["next_cursor"] {
            Value::Null => return out,
            Value::String(c) => cursor = Some(c.clone()),
            other => panic!("next_cursor {other:?}"),
        }
    }
    panic!("{path}: the pages never ended");
}

async fn jobs_of_a_topic_are_paged_in_each_states_order(b: &Backend) {
    let app = TestApp::new(b);
    for (i, at) in [("d2", 2_000), ("d1", 1_000), ("d3", 3_000), ("d0", 1_000)] {
        pushed(
            &app,
            json!({"topic": "p", "id": i, "run_at_ms": FAR_FUTURE + at}),
        )
        .await;
    }
    pushed(
        &app,
        json!({"topic": "q", "id": "other", "run_at_ms": FAR_FUTURE}),
    )
    .await;
    for (i, p) in [("r1", 3), ("r2", 1), ("r3", 2), ("x", 0)] {
        pushed(&app, json!({"topic": "p", "id": i, "priority": p})).await;
    }
    assert_eq!(ids(&reserve(&app, &["p"], 1).await), ["x"]);
    for i in ["k2", "k1"] {
        pushed(
            &app,
            json!({"topic": "p", "id": i, "run_at_ms": FAR_FUTURE}),
        )
        .await;
        app.send(Method::POST, &format!("/v1/jobs/{i}/bury"), "", None)
            .await;
    }
    push_callback_job(b, "p", "cb", FAR_FUTURE).await;
    for limit in [1, 2, 50] {
        let walked = |state: &str| format!("/v1/topics/p/jobs?state={state}");
        let d = walk_pages(&app, &walked("delayed"), limit).await;
        assert_eq!(ids(&d), ["d0", "d1", "d2", "d3"]);
        assert_eq!(
            ids(&walk_pages(&app, &walked("ready"), limit).await),
            ["r2", "r3", "r1"]
        );
        assert_eq!(
            ids(&walk_pages(&app, &walked("reserved"), limit).await),
            ["x"]
        );
        assert_eq!(
            ids(&walk_pages(&app, &walked("dead"), limit).await),
            ["k2", "k1"]
        );
        let cb = walk_pages(&app, "/v1/topics/p/jobs?state=delayed&callback=true", limit).await;
        assert_eq!(ids(&cb), ["cb"]);
        let pull = walk_pages(
            &app,
            "/v1/topics/p/jobs?state=delayed&callback=false",
            limit,
        )
        .await;
        assert_eq!(pull, d);
        // The same job object as GET /v1/jobs/{id}.
        assert_eq!(d[0], app.get("/v1/jobs/d0").await.json);
    }
    // The default page is 50 jobs.
    let r = app.get("/v1/topics/nobody/jobs?state=ready").await;
    assert_eq!(r.json, json!({"jobs": [], "next_cursor": null}));
}

async fn jobs_listing_refuses_bad_parameters_naming_them(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "p", "id": "a"})).await;
    for (query, field) in [
        ("", "state"),
        ("?state=gone", "state"),
        ("?state=ready&limit=0", "limit"),
        ("?state=ready&limit=1001", "limit"),
        ("?state=ready&limit=-1", "limit"),
        ("?state=ready&limit=ten", "limit"),
        ("?state=ready&cursor=nonsense", "cursor"),
        ("?state=ready&cursor=", "cursor"),
        ("?state=ready&callback=yes", "callback"),
        ("?state=ready&state=dead", "state"),
        ("?state=ready&page=2", "page"),
    ] {
        let r = app.get(&format!("/v1/topics/p/jobs{query}")).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
    }
    let r = app.get("/v1/topics/a,callback/jobs?state=ready").await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("topic"));
    let r = app.get("/v1/topics/p/jobs?state=ready&limit=1000").await;
    assert_eq!(ids(r.json["jobs"].as_array().unwrap()), ["a"]);
}

async fn schedule_counts_delayed_jobs_per_step(b: &Backend) {
    let app = TestApp::new(b);
    let min = 60_000;
    let m0 = FAR_FUTURE - FAR_FUTURE % min;
    for (i, at) in [
        ("a", 0),
        ("b", 59_999),
        ("c", min),
        ("d", 3 * min + 5),
        ("e", 2 * 3_600_000),
    ] {
        pushed(&app, json!({"topic": "s", "id": i, "run_at_ms": m0 + at})).await;
    }
    pushed(
        &app,
        json!({"topic": "other", "id": "o", "run_at_ms": m0 + min}),
    )
    .await;
    push_callback_job(b, "s", "cb", m0 + 3 * min).await;
    pushed(&app, json!({"topic": "s", "id": "ready"})).await;

    let r = app
        .get(&format!(
            "/v1/topics/s/schedule?from={m0}&to={}&step={min}",
            m0 + 5 * min
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(
        r.json,
        json!({"from": m0, "to": m0 + 5 * min, "step": min, "counts": [2, 1, 0, 2, 0]})
    );
    let r = app
        .get(&format!(
            "/v1/schedule?from={m0}&to={}&step={}",
            m0 + 3 * 3_600_000,
            3_600_000
        ))
        .await;
    assert_eq!(r.json["counts"], json!([6, 0, 1]));
    // The last step is cut at `to`.
    let r = app
        .get(&format!(
            "/v1/topics/s/schedule?from={m0}&to={}&step={}",
            m0 + 4 * min,
            3 * min
        ))
        .await;
    assert_eq!(r.json["counts"], json!([3, 2]));
    let r = app
        .get(&format!(
            "/v1/topics/nobody/schedule?from={m0}&to={}&step={min}",
            m0 + 2 * min
        ))
        .await;
    assert_eq!(r.json["counts"], json!([0, 0]));
    // A week by minute is the most.
    let week = 7 * 24 * 60 * min;
    let r = app
        .get(&format!(
            "/v1/schedule?from={m0}&to={}&step={min}",
            m0 + week
        ))
        .await;
    assert_eq!(r.json["counts"].as_array().unwrap().len(), 10_080);
}

async fn schedule_refuses_bad_parameters_naming_them(b: &Backend) {
    let app = TestApp::new(b);
    let max = MAX_RUN_AT;
    for (query, field) in [
        ("to=10&step=1", "from"),
        ("from=0&step=1", "to"),
        ("from=0&to=10", "step"),
        ("from=10&to=10&step=1", "to"),
        ("from=10&to=5&step=1", "to"),
        ("from=0&to=10&step=0", "step"),
        ("from=0&to=10081&step=1", "step"),
        ("from=x&to=10&step=1", "from"),
        ("from=-1&to=10&step=1", "from"),
        (
            &format!("from=0&to={}&step=1000000000000000", max + 1),
            "to",
        ),
        ("from=0&to=10&step=1&topic=t", "topic"),
    ] {
        for path in ["/v1/schedule", "/v1/topics/t/schedule"] {
            let r = app.get(&format!("{path}?{query}")).await;
            assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
        }
    }
    let r = app.get("/v1/schedule?from=0&to=10080&step=1").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
}

backend_tests!(
    topics_lists_every_topic_by_name_with_pull_and_callback_counts,
    jobs_of_a_topic_are_paged_in_each_states_order,
    jobs_listing_refuses_bad_parameters_naming_them,
    schedule_counts_delayed_jobs_per_step,
    schedule_refuses_bad_parameters_naming_them,
    push_answers_201_with_the_job_and_its_location,
    push_sets_location_and_applies_defaults,
    a_delay_counts_from_the_requests_arrival_rounded_up,
    a_zero_delay_is_ready_at_once,
    push_without_id_generates_time_ordered_ids,
    push_of_an_existing_id_is_409_exists_and_changes_nothing,
    push_with_replace_is_201_and_the_old_body_is_never_delivered_again,
    batch_push_reports_created_and_exists_per_job,
    batch_push_with_replace_reports_replaced,
    batch_with_one_invalid_job_is_400_naming_it_and_pushes_nothing,
    get_is_200_or_404,
    delete_is_204_then_404,
    finish_is_204_then_404,
    ids_with_spaces_and_slashes_are_reachable_percent_encoded,
    a_job_named_batch_is_reachable_like_any_other,
    invalid_ids_in_paths_are_400_naming_id,
    reserve_orders_by_priority_then_run_at_then_push_order,
    reserve_takes_several_jobs_preferring_topics_in_order,
    reserve_with_zero_timeout_returns_empty_at_once,
    reserve_refuses_invalid_requests,
    release_returns_a_reserved_job_to_ready,
    release_with_a_delay_makes_the_job_delayed,
    release_of_a_job_that_is_not_reserved_is_409_with_its_state,
    touch_extends_the_reservation,
    bury_makes_a_job_dead_and_kick_returns_it_ready_with_no_attempts,
    kick_topic_kicks_up_to_max_dead_jobs_and_counts_them,
    kick_topic_refuses_invalid_requests,
    reschedule_of_a_delayed_or_ready_job_returns_its_previous_state,
    reschedule_of_a_reserved_job_is_409_with_its_state,
    reschedule_refuses_invalid_requests,
    batch_finish_counts_finished_and_lists_missing_ids,
    batch_finish_refuses_invalid_requests,
    stats_count_jobs_per_topic_and_state,
    push_refuses_each_invalid_field_naming_it_and_changes_nothing,
    push_refuses_bodies_that_are_not_a_json_object,
    push_accepts_any_or_no_content_type,
    push_of_a_body_over_the_limit_is_413_naming_body,
    a_request_body_over_the_server_limit_is_413,
    openapi_document_describes_every_route,
    integers_may_be_written_with_a_fraction_or_an_exponent,
    null_is_an_absent_field_wherever_the_document_allows_it,
    both_due_times_are_refused_as_the_document_says,
    the_document_states_the_limits_of_the_configuration,
    delays_are_at_most_1000_years_as_the_document_says,
    a_waiting_reserve_is_woken_by_a_push,
    a_reserve_with_a_timeout_waits_then_returns_empty,
    a_delayed_job_becomes_ready_when_due,
    a_long_poll_over_max_waiters_is_refused_at_once,
);
