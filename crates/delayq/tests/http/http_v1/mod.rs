//! The /v1 HTTP API against docs/api.md, in-process (no sockets), once per backend: every
//! operation's success, each of its refusals with the status and the field it names, and that
//! a refused request changes nothing. One file per part of the API (below); this file holds the
//! helpers they share. A test of a new operation goes in the file of its kind, a new kind of
//! operation gets its own file.
//!
//! Time-dependent checks use due times far in the past or future, or generous bounds.

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

mod backup;
mod bad_input;
mod batch;
mod listings;
mod one_job;
mod openapi;
mod push;
mod reserve;
mod schedules;
mod settings;
mod store_errors;
mod transitions;

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

fn uuid_v7_shaped(s: &str) -> bool {
    s.len() == 36 && s.as_bytes()[14] == b'7'
}
