//! Property tests over generated requests: malformed JSON, wrong types, huge and negative
//! numbers, invalid UTF-8, deep nesting, unknown fields and oversized lists, sent to every
//! endpoint of both APIs. Only 4xx (or the compat API's code 1) may come back for bad input,
//! never a 5xx or a panic, and the store stays consistent. Integers written as `5.0` or
//! `5e0` are read as the integer they are, as JSON Schema (and so the OpenAPI document) says.
//!
//! `PROPTEST_CASES` sets the number of cases per endpoint group (default 256).

use crate::support;

use axum::http::{Method, StatusCode};
use delayq::config::Config;
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};
use support::app::TestApp;
use support::backends::Backend;

const FIELDS: &[&str] = &[
    "topic",
    "id",
    "delay",
    "ttr",
    "body",
    "timeout",
    "Topic",
    "ID",
    "DELAY",
    "delay_ms",
    "run_at_ms",
    "ttr_ms",
    "priority",
    "max_attempts",
    "backoff_ms",
    "replace",
    "jobs",
    "topics",
    "max",
    "timeout_ms",
    "ids",
    "unknown",
];

/// The compat API's routes that take a JSON body (tests/http/routes.rs).
fn compat_paths() -> Vec<&'static str> {
    crate::routes::UNDOCUMENTED
        .iter()
        .filter(|u| u.compat && !u.body.is_empty())
        .map(|u| u.path)
        .collect()
}

/// Every documented `POST` (tests/http/routes.rs), on the job and topic `fz`.
async fn v1_posts() -> Vec<String> {
    crate::routes::v1()
        .await
        .into_iter()
        .filter(|r| r.method == Method::POST)
        .map(|r| r.path("fz", "fz"))
        .collect()
}

/// What follows `/v1/jobs/{id}` in the documented operations on one job (`""`, `/finish`, ...).
async fn job_suffixes() -> Vec<String> {
    let suffixes: std::collections::BTreeSet<String> = crate::routes::v1()
        .await
        .iter()
        .filter_map(|r| r.job_suffix().map(str::to_string))
        .collect();
    suffixes.into_iter().collect()
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        (-5i64..5).prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        Just(json!(1e300)),
        Just(json!(18446744073709551615u64)),
        Just(json!(-9223372036854775808i64)),
        "[a-z,]{0,12}".prop_map(Value::String),
        "\\PC{0,20}".prop_map(Value::String),
        "[ \t\n\u{0}\u{7f}a]{0,8}".prop_map(Value::String),
        Just(Value::String("x".repeat(5000))),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(FIELDS), inner), 0..8).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

/// Request objects built from the APIs' own field names, with values of any type.
fn request_object() -> impl Strategy<Value = Value> {
    prop::collection::vec((prop::sample::select(FIELDS), value()), 0..8).prop_map(|kv| {
        let mut m = Map::new();
        for (k, v) in kv {
            m.insert(k.to_string(), v);
        }
        Value::Object(m)
    })
}

/// Raw bodies: JSON of any shape, broken JSON, invalid UTF-8, deep nesting.
fn raw_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => request_object().prop_map(|v| v.to_string().into_bytes()),
        2 => value().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..256),
        1 => request_object().prop_map(|v| {
            let mut s = v.to_string().into_bytes();
            s.truncate(s.len() / 2);
            s
        }),
        1 => (1usize..3000).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes()),
        1 => Just(b"{\"topic\":\"t\",\"id\":\"\xff\xfe\",\"body\":\"\xc3\"}".to_vec()),
        1 => Just(Vec::new()),
    ]
}

fn fuzz_app(b: &Backend) -> TestApp {
    let config = Config {
        // No request may park: a long poll in a fuzz run would only slow it down.
        max_wait_secs: 0,
        compat_pop_timeout_secs: 0,
        max_body_bytes: 4096,
        max_batch: 16,
        ..Config::default()
    };
    TestApp::with_config(b, config)
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

fn run<S: Strategy>(
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> Result<(), String> {
    let mut runner = TestRunner::new(PtConfig {
        cases: cases(),
        failure_persistence: None,
        ..PtConfig::default()
    });
    tokio::task::block_in_place(|| runner.run(&strategy, test)).map_err(|e| e.to_string())
}

async fn compat_api_answers_code_1_never_5xx(b: &Backend) {
    let app = fuzz_app(b);
    let handle = tokio::runtime::Handle::current();
    let strategy = (prop::sample::select(compat_paths()), raw_body());
    let result = run(strategy, |(path, body)| {
        let reply = handle.block_on(app.send(Method::POST, path, body.clone(), None));
        let shown = String::from_utf8_lossy(&body)
            .chars()
            .take(200)
            .collect::<String>();
        prop_assert_eq!(reply.status, StatusCode::OK, "{} {}", path, shown);
        let code = reply.json.get("code").and_then(Value::as_i64);
        prop_assert!(
            matches!(code, Some(0 | 1)),
            "{} {} -> {:?}",
            path,
            shown,
            reply.json
        );
        if code == Some(1) {
            prop_assert_eq!(&reply.json["data"], &Value::Null);
            let msg = reply.json["message"].as_str().unwrap_or("");
            prop_assert!(!msg.is_empty(), "code 1 without a message");
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert_store_consistent(b).await;
}

async fn v1_answers_4xx_naming_the_problem_never_5xx(b: &Backend) {
    let app = fuzz_app(b);
    let handle = tokio::runtime::Handle::current();
    let strategy = (prop::sample::select(v1_posts().await), raw_body());
    let result = run(strategy, |(path, body)| {
        let reply = handle.block_on(app.send(Method::POST, &path, body.clone(), None));
        let shown = String::from_utf8_lossy(&body)
            .chars()
            .take(200)
            .collect::<String>();
        prop_assert!(
            !reply.status.is_server_error(),
            "{} {} -> {} {:?}",
            path,
            shown,
            reply.status,
            reply.json
        );
        if reply.status.is_client_error() && reply.status != StatusCode::NOT_FOUND {
            let err = &reply.json["error"];
            prop_assert!(err["code"].is_string(), "{} -> {:?}", path, reply.json);
            prop_assert!(err["message"].is_string(), "{} -> {:?}", path, reply.json);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert_store_consistent(b).await;
}

/// Paths with odd ids: percent-encoding, dots, unicode, very long.
async fn odd_paths_never_5xx(b: &Backend) {
    let app = fuzz_app(b);
    let handle = tokio::runtime::Handle::current();
    let seg = prop_oneof![
        "[a-zA-Z0-9%._~-]{1,40}",
        Just("%00".to_string()),
        Just("%ff%fe".to_string()),
        Just("..".to_string()),
        Just("x".repeat(2000)),
        "\\PC{1,10}".prop_map(|s| s.bytes().map(|b| format!("%{b:02X}")).collect()),
    ];
    let method = prop::sample::select(vec![Method::GET, Method::POST, Method::DELETE, Method::PUT]);
    let suffix = prop::sample::select(job_suffixes().await);
    let result = run((method, seg, suffix), |(method, seg, suffix)| {
        let path = format!("/v1/jobs/{seg}{suffix}");
        let reply = handle.block_on(app.send(method.clone(), &path, "{}", None));
        prop_assert!(
            !reply.status.is_server_error(),
            "{} {} -> {}",
            method,
            path,
            reply.status
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// The integer fields of `NewJob` (the other /v1 integers are read by the same code).
const INTEGER_FIELDS: &[&str] = &[
    "delay_ms",
    "run_at_ms",
    "ttr_ms",
    "priority",
    "max_attempts",
];

/// A push whose integer field is written `n`, `n.0`, `ne0` or `n.0e0` is answered alike: the
/// same status, the same stored value (or the same field named in the refusal). Every /v1
/// integer is at most 2^53 (where an `f64` stops being exact), so past it all four forms are
/// refused.
async fn integers_are_read_alike_in_any_notation(b: &Backend) {
    let app = fuzz_app(b);
    let handle = tokio::runtime::Handle::current();
    let number = prop_oneof![
        0u64..100_000,
        any::<u32>().prop_map(u64::from),
        any::<u64>()
    ];
    let strategy = (prop::sample::select(INTEGER_FIELDS), number);
    let seq = std::sync::atomic::AtomicU64::new(0);
    let result = run(strategy, |(field, n)| {
        let mut answers = Vec::new();
        for text in [
            n.to_string(),
            format!("{n}.0"),
            format!("{n}e0"),
            format!("{n}.0e0"),
        ] {
            let id = format!(
                "n{}",
                seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            let body = format!(r#"{{"topic":"t","id":"{id}","{field}":{text}}}"#);
            let r = handle.block_on(app.send(Method::POST, "/v1/jobs", body.clone(), None));
            // `run_at_ms` of a pushed job is the value itself; a delay is relative to now.
            let value = if field == "delay_ms" {
                Value::Null
            } else {
                r.json[field].clone()
            };
            answers.push((r.status, value, r.json["error"]["field"].clone(), body));
        }
        let (status, value, refused, body) = &answers[0];
        for (s, v, f, b) in &answers[1..] {
            prop_assert_eq!((s, v, f), (status, value, refused), "{} vs {}", b, body);
        }
        if status.is_client_error() {
            prop_assert_eq!(refused, &json!(field), "{}", body);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

async fn assert_store_consistent(b: &Backend) {
    let stats = b.store.stats().await.expect("stats after fuzzing");
    for (topic, counts) in stats.topics {
        assert!(counts.total() > 0, "{topic} listed with no jobs");
    }
}

backend_tests!(
    compat_api_answers_code_1_never_5xx,
    v1_answers_4xx_naming_the_problem_never_5xx,
    odd_paths_never_5xx,
    integers_are_read_alike_in_any_notation,
);
