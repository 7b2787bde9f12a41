//! The compat API (`/push`, `/pop`, `/finish`, `/delete`, `/get`, compatible with
//! ouqiang/delay-queue), row by row of docs/compat.md: each happy path, each original
//! validation message, the Go JSON decoding rules, long polls, replace semantics, limits,
//! health checks, and graceful shutdown of `server::run` over a real socket. Every
//! per-backend test runs on each backend of `backend_tests!`.

use crate::support;

use axum::http::{Method, StatusCode};
use delayq::clock::{Clock, SystemClock};
use delayq::config::Config;
use delayq::job::{JobId, JobSpec, JobState, Topic};
use delayq::store::memory::MemoryStore;
use delayq::store::{PushMode, Stats, Store, StoreError};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::app::{LiveServer, Reply, TestApp};
use support::backends::Backend;
use support::failing::FailingStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Generous bound for "promptly" on a loaded 2-core machine.
const PROMPT: Duration = Duration::from_secs(5);

fn ok_null(message: &str) -> Value {
    json!({"code": 0, "message": message, "data": null})
}

fn failed(r: &Reply) -> &str {
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.json["code"], 1, "{r:?}");
    assert_eq!(r.json["data"], Value::Null, "{r:?}");
    r.json["message"].as_str().expect("message is a string")
}

fn job(id: &str, topic: &str, delay: i64, body: &str) -> Value {
    json!({"id": id, "topic": topic, "delay": delay, "ttr": 30, "body": body})
}

async fn push_ok(app: &TestApp, body: Value) {
    let r = app.post("/push", body).await;
    assert_eq!(r.json, ok_null("添加成功"), "{r:?}");
}

/// Pops with a timeout in seconds; returns `data`.
async fn pop(app: &TestApp, topic: &str, timeout: u64) -> Value {
    let r = app
        .post("/pop", json!({"topic": topic, "timeout": timeout}))
        .await;
    assert_eq!(r.json["code"], 0, "{r:?}");
    assert_eq!(r.json["message"], "操作成功");
    r.json["data"].clone()
}

async fn stats(b: &Backend) -> Stats {
    b.store.stats().await.unwrap()
}

// ---------------------------------------------------------------------------------------------
// Happy paths

async fn push_then_get_returns_the_job_with_its_due_time_in_unix_seconds(b: &Backend) {
    let app = TestApp::new(b);
    let before = SystemClock.now() / 1000;
    push_ok(&app, job("j1", "orders", 60, "hello")).await;
    let r = app.post("/get", json!({"id": "j1"})).await;
    assert_eq!(r.json["code"], 0);
    assert_eq!(r.json["message"], "操作成功");
    let data = &r.json["data"];
    assert_eq!(data["topic"], "orders");
    assert_eq!(data["id"], "j1");
    assert_eq!(data["ttr"], 30);
    assert_eq!(data["body"], "hello");
    let delay = data["delay"].as_u64().unwrap();
    assert!(
        (before + 60..=before + 61).contains(&delay),
        "delay {delay}"
    );
    // Field order as in the original.
    let raw = String::from_utf8(r.raw).unwrap();
    let order: Vec<usize> = ["\"topic\"", "\"id\"", "\"delay\"", "\"ttr\"", "\"body\""]
        .iter()
        .map(|k| raw.find(k).unwrap())
        .collect();
    assert!(order.is_sorted(), "{raw}");
}

async fn push_then_pop_returns_id_body_and_topic(b: &Backend) {
    let app = TestApp::new(b);
    push_ok(&app, job("j1", "orders", 0, "{\"n\":1}")).await;
    let r = app.post("/pop", json!({"topic": "orders"})).await;
    assert_eq!(
        String::from_utf8(r.raw).unwrap(),
        r#"{"code":0,"message":"操作成功","data":{"id":"j1","body":"{\"n\":1}","topic":"orders"}}"#
    );
    let j = b.store.get(&JobId::parse("j1").unwrap()).await.unwrap();
    assert_eq!(j.state, JobState::Reserved);
}

/// Never early: `/push` counts the delay from the request's arrival rounded up to the
/// millisecond, so the stored due time is at least the sender's clock reading taken before
/// sending, plus the delay; a zero delay stays ready at once.
async fn push_counts_the_delay_from_its_arrival_rounded_up(b: &Backend) {
    let app = TestApp::new(b);
    for i in 0..20 {
        let id = format!("j{i}");
        let sent_us = SystemClock.now_micros();
        push_ok(&app, job(&id, "t", 60, "")).await;
        let j = b.store.get(&JobId::parse(id).unwrap()).await.unwrap();
        let earliest = (sent_us + 60_000_000).div_ceil(1000);
        assert!(
            j.spec.run_at >= earliest,
            "{sent_us} µs + 60 s: {}",
            j.spec.run_at
        );
        assert_eq!(j.state, JobState::Delayed);
    }
    push_ok(&app, job("now", "z", 0, "")).await;
    assert_eq!(pop(&app, "z", 0).await["id"], "now");
}

async fn finish_removes_a_popped_job(b: &Backend) {
    let app = TestApp::new(b);
    push_ok(&app, job("j1", "t", 0, "")).await;
    assert_eq!(pop(&app, "t", 0).await["id"], "j1");
    let r = app.post("/finish", json!({"id": "j1"})).await;
    assert_eq!(r.json, ok_null("操作成功"));
    assert_eq!(
        app.post("/get", json!({"id": "j1"})).await.json,
        ok_null("操作成功")
    );
    assert!(stats(b).await.topics.is_empty());
}

async fn delete_removes_a_delayed_job(b: &Backend) {
    let app = TestApp::new(b);
    push_ok(&app, job("j1", "t", 600, "")).await;
    let r = app.post("/delete", json!({"id": "j1"})).await;
    assert_eq!(r.json, ok_null("操作成功"));
    assert!(stats(b).await.topics.is_empty());
}

async fn finish_and_delete_of_an_unknown_id_succeed(b: &Backend) {
    let app = TestApp::new(b);
    for path in ["/finish", "/delete"] {
        let r = app.post(path, json!({"id": "nope"})).await;
        assert_eq!(r.json, ok_null("操作成功"), "{path}");
    }
}

async fn get_of_an_unknown_id_returns_null_data(b: &Backend) {
    let app = TestApp::new(b);
    let r = app.post("/get", json!({"id": "nope"})).await;
    assert_eq!(r.json, ok_null("操作成功"));
}

async fn get_reports_ttr_in_whole_seconds_rounded_up(b: &Backend) {
    let app = TestApp::new(b);
    let mut spec = JobSpec::new(
        Topic::parse("t").unwrap(),
        JobId::parse("ms").unwrap(),
        "",
        1_500_000,
    );
    spec.ttr_ms = 1_500;
    b.store.push(spec, PushMode::Reject, 0).await.unwrap();
    let r = app.post("/get", json!({"id": "ms"})).await;
    assert_eq!(r.json["data"]["ttr"], 2);
    assert_eq!(r.json["data"]["delay"], 1_500);
}

async fn replies_are_http_200_compact_json_envelopes(b: &Backend) {
    let app = TestApp::new(b);
    let r = app.post("/push", job("j1", "t", 5, "")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.content_type.as_deref(), Some("application/json"));
    assert_eq!(
        r.raw,
        r#"{"code":0,"message":"添加成功","data":null}"#.as_bytes()
    );
    let r = app.post("/push", json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.raw,
        r#"{"code":1,"message":"job id不能为空","data":null}"#.as_bytes()
    );
}

async fn body_id_and_spaces_inside_are_stored_untrimmed(b: &Backend) {
    let app = TestApp::new(b);
    push_ok(&app, job(" padded id ", "t", 0, "  padded body  ")).await;
    let data = pop(&app, "t", 0).await;
    assert_eq!(data["id"], " padded id ");
    assert_eq!(data["body"], "  padded body  ");
    // The id is used as given everywhere.
    let r = app.post("/get", json!({"id": " padded id "})).await;
    assert_eq!(r.json["data"]["id"], " padded id ");
    assert_eq!(
        app.post("/get", json!({"id": "padded id"})).await.json["data"],
        Value::Null
    );
}

// ---------------------------------------------------------------------------------------------
// Validation: the original messages, in the original order

async fn push_without_id_is_refused(b: &Backend) {
    let app = TestApp::new(b);
    for id in [json!(null), json!(""), json!("   ")] {
        let r = app
            .post(
                "/push",
                json!({"id": id, "topic": "t", "delay": 1, "ttr": 1}),
            )
            .await;
        assert_eq!(failed(&r), "job id不能为空");
    }
}

async fn push_without_topic_is_refused(b: &Backend) {
    let app = TestApp::new(b);
    for topic in [json!(null), json!(""), json!(" \t ")] {
        let r = app
            .post(
                "/push",
                json!({"id": "j", "topic": topic, "delay": 1, "ttr": 1}),
            )
            .await;
        assert_eq!(failed(&r), "topic 不能为空");
    }
}

async fn push_with_an_invalid_topic_names_the_field(b: &Backend) {
    let app = TestApp::new(b);
    for topic in [" t", "a b", "a,b", &"x".repeat(129)] {
        let r = app
            .post(
                "/push",
                json!({"id": "j", "topic": topic, "delay": 1, "ttr": 1}),
            )
            .await;
        assert!(failed(&r).starts_with("topic: "), "{topic:?}: {r:?}");
    }
}

async fn push_with_an_invalid_id_names_the_field(b: &Backend) {
    let app = TestApp::new(b);
    for id in ["a\nb", &"x".repeat(257)] {
        let r = app
            .post(
                "/push",
                json!({"id": id, "topic": "t", "delay": 1, "ttr": 1}),
            )
            .await;
        assert!(failed(&r).starts_with("id: "), "{r:?}");
    }
}

async fn push_delay_must_be_between_0_and_2_pow_31_minus_1(b: &Backend) {
    let app = TestApp::new(b);
    for delay in [-1_i64, 1 << 31, (1 << 31) + 1, i64::MAX] {
        let r = app
            .post(
                "/push",
                json!({"id": "j", "topic": "t", "delay": delay, "ttr": 1}),
            )
            .await;
        assert_eq!(failed(&r), "delay 取值范围0 - (2^31 - 1)", "{delay}");
    }
    push_ok(
        &app,
        json!({"id": "max", "topic": "t", "delay": (1_i64 << 31) - 1, "ttr": 1}),
    )
    .await;
    push_ok(
        &app,
        json!({"id": "zero", "topic": "t", "delay": 0, "ttr": 1}),
    )
    .await;
    push_ok(&app, json!({"id": "absent", "topic": "t", "ttr": 1})).await;
}

async fn push_ttr_must_be_between_1_and_86400(b: &Backend) {
    let app = TestApp::new(b);
    for ttr in [json!(0), json!(-1), json!(86_401), json!(null)] {
        let r = app
            .post(
                "/push",
                json!({"id": "j", "topic": "t", "delay": 1, "ttr": ttr}),
            )
            .await;
        assert_eq!(failed(&r), "ttr 取值范围1 - 86400", "{ttr}");
    }
    push_ok(
        &app,
        json!({"id": "j", "topic": "t", "delay": 1, "ttr": 86_400}),
    )
    .await;
    push_ok(&app, json!({"id": "k", "topic": "t", "delay": 1, "ttr": 1})).await;
}

async fn push_validation_follows_the_original_order(b: &Backend) {
    let app = TestApp::new(b);
    let cases = [
        (json!({"delay": -1, "ttr": 0}), "job id不能为空"),
        (json!({"id": "j", "delay": -1, "ttr": 0}), "topic 不能为空"),
        (
            json!({"id": "j", "topic": "t", "delay": -1, "ttr": 0}),
            "delay 取值范围0 - (2^31 - 1)",
        ),
        (
            json!({"id": "j", "topic": "t", "delay": 1, "ttr": 0}),
            "ttr 取值范围1 - 86400",
        ),
    ];
    for (body, message) in cases {
        assert_eq!(
            failed(&app.post("/push", body.clone()).await),
            message,
            "{body}"
        );
    }
}

async fn finish_delete_and_get_need_an_id(b: &Backend) {
    let app = TestApp::new(b);
    for path in ["/finish", "/delete", "/get"] {
        for body in [json!({}), json!({"id": "  "}), json!({"id": null})] {
            assert_eq!(
                failed(&app.post(path, body).await),
                "job id不能为空",
                "{path}"
            );
        }
    }
}

async fn pop_needs_a_topic(b: &Backend) {
    let app = TestApp::new(b);
    for topic in [
        json!(null),
        json!(""),
        json!("  "),
        json!(","),
        json!(" , ,"),
    ] {
        let r = app
            .post("/pop", json!({"topic": topic, "timeout": 0}))
            .await;
        assert_eq!(failed(&r), "topic不能为空", "{topic}");
    }
    let r = app
        .post("/pop", json!({"topic": "a,b c", "timeout": 0}))
        .await;
    assert!(failed(&r).starts_with("topic: "), "{r:?}");
    let r = app.post("/pop", json!({"topic": "a", "timeout": -1})).await;
    assert!(failed(&r).starts_with("timeout: "), "{r:?}");
}

// ---------------------------------------------------------------------------------------------
// Decoding after Go encoding/json

async fn keys_are_matched_case_insensitively(b: &Backend) {
    let app = TestApp::new(b);
    push_ok(
        &app,
        json!({"ID": "j1", "Topic": "t", "DELAY": 0, "tTr": 5, "Body": "x", "extra": [1, {}]}),
    )
    .await;
    let r = app.post("/pop", json!({"TOPIC": "t", "Timeout": 0})).await;
    assert_eq!(r.json["data"]["id"], "j1");
    assert_eq!(r.json["data"]["body"], "x");
    let r = app.post("/get", json!({"Id": "j1"})).await;
    assert_eq!(r.json["data"]["ttr"], 5);
}

async fn any_content_type_and_any_method_are_accepted(b: &Backend) {
    let app = TestApp::new(b);
    let body = job("j1", "t", 0, "b").to_string();
    let r = app
        .send(
            Method::POST,
            "/push",
            body.clone(),
            Some("application/x-www-form-urlencoded"),
        )
        .await;
    assert_eq!(r.json, ok_null("添加成功"));
    let r = app.send(Method::PUT, "/push", body, None).await;
    assert_eq!(r.json, ok_null("添加成功"));
    let r = app
        .send(Method::GET, "/get", r#"{"id":"j1"}"#, Some("text/plain"))
        .await;
    assert_eq!(r.json["data"]["id"], "j1");
}

async fn wrong_types_and_non_objects_are_parse_errors(b: &Backend) {
    let app = TestApp::new(b);
    let bodies = [
        r#"{"id":"j","topic":"t","delay":"1","ttr":1}"#,
        r#"{"id":"j","topic":"t","delay":1e3,"ttr":1}"#,
        r#"{"id":"j","topic":"t","delay":1.5,"ttr":1}"#,
        r#"{"id":"j","topic":"t","delay":1,"ttr":true}"#,
        r#"{"id":7,"topic":"t","delay":1,"ttr":1}"#,
        r#"{"id":"j","topic":"t","delay":1,"ttr":1,"body":{"a":1}}"#,
        r#"[1]"#,
        r#""#,
        r#"{"id":"j""#,
        "id=j&topic=t&delay=1&ttr=1",
    ];
    for body in bodies {
        let r = app.send(Method::POST, "/push", body, None).await;
        assert_eq!(failed(&r), "解析json失败", "{body}");
    }
    for path in ["/pop", "/finish", "/delete", "/get"] {
        let r = app.send(Method::POST, path, "[]", None).await;
        assert_eq!(failed(&r), "解析json失败", "{path}");
    }
    // Fields a route does not read are ignored whatever their type, as in Go.
    let r = app
        .post("/get", json!({"id": "j", "delay": "not a number"}))
        .await;
    assert_eq!(r.json, ok_null("操作成功"));
}

async fn null_body_is_an_empty_request(b: &Backend) {
    let app = TestApp::new(b);
    let r = app.send(Method::POST, "/push", "null", None).await;
    assert_eq!(failed(&r), "job id不能为空");
}

async fn bad_input_changes_nothing(b: &Backend) {
    let app = TestApp::new(b);
    push_ok(&app, job("keep", "t", 600, "original")).await;
    let before = stats(b).await;
    let bad = [
        json!({"id": "keep", "topic": "t", "delay": -1, "ttr": 1}),
        json!({"id": "keep", "topic": "t", "delay": 1, "ttr": 0}),
        json!({"id": "keep", "topic": "a b", "delay": 1, "ttr": 1}),
        json!({"id": "new", "topic": "t", "delay": "1", "ttr": 1}),
        json!({"id": "", "topic": "t", "delay": 1, "ttr": 1}),
    ];
    for body in bad {
        assert_eq!(app.post("/push", body).await.json["code"], 1);
    }
    assert_eq!(app.post("/finish", json!({"id": 1})).await.json["code"], 1);
    assert_eq!(stats(b).await, before);
    let r = app.post("/get", json!({"id": "keep"})).await;
    assert_eq!(r.json["data"]["body"], "original");
}

// ---------------------------------------------------------------------------------------------
// Pop: several topics, long polls, delays

async fn multi_topic_pop_prefers_topics_in_the_order_given(b: &Backend) {
    let app = TestApp::new(b);
    push_ok(&app, job("b1", "b", 0, "")).await;
    push_ok(&app, job("a1", "a", 0, "")).await;
    let first = pop(&app, " a, b ,", 0).await;
    assert_eq!(
        (first["id"].as_str(), first["topic"].as_str()),
        (Some("a1"), Some("a"))
    );
    let second = pop(&app, "a, b", 0).await;
    assert_eq!(
        (second["id"].as_str(), second["topic"].as_str()),
        (Some("b1"), Some("b"))
    );
    assert_eq!(pop(&app, "a, b", 0).await, Value::Null);
}

async fn pop_with_timeout_0_returns_null_at_once(b: &Backend) {
    let app = TestApp::new(b);
    let started = Instant::now();
    assert_eq!(pop(&app, "empty", 0).await, Value::Null);
    assert!(started.elapsed() < PROMPT);
}

async fn pop_returns_null_when_nothing_is_ready_within_its_timeout(b: &Backend) {
    let app = TestApp::new(b);
    let started = Instant::now();
    assert_eq!(pop(&app, "empty", 1).await, Value::Null);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "returned after {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(1) + PROMPT,
        "returned after {waited:?}"
    );
    assert_eq!(app.state.dispatch.waiters(), 0);
}

async fn pop_timeout_is_capped_at_max_wait_secs(b: &Backend) {
    let config = Config {
        max_wait_secs: 1,
        ..Config::default()
    };
    let app = TestApp::with_config(b, config);
    let started = Instant::now();
    assert_eq!(pop(&app, "empty", 3_600).await, Value::Null);
    assert!(started.elapsed() < Duration::from_secs(1) + PROMPT);
}

async fn pop_wakes_when_a_job_is_pushed_meanwhile(b: &Backend) {
    let app = TestApp::new(b);
    let started = Instant::now();
    let (data, ()) = tokio::join!(pop(&app, "t", 60), async {
        let deadline = Instant::now() + PROMPT;
        while app.state.dispatch.waiters() == 0 {
            assert!(Instant::now() < deadline, "the pop never waited");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        push_ok(&app, job("late", "t", 0, "")).await;
    });
    assert_eq!(data["id"], "late");
    assert!(started.elapsed() < PROMPT, "took {:?}", started.elapsed());
}

async fn delayed_job_is_not_popped_before_its_delay(b: &Backend) {
    let app = TestApp::new(b);
    let pushed_at = Instant::now();
    push_ok(&app, job("later", "t", 1, "")).await;
    assert_eq!(pop(&app, "t", 0).await, Value::Null);
    let data = pop(&app, "t", 5).await;
    assert_eq!(data["id"], "later");
    assert!(
        pushed_at.elapsed() >= Duration::from_millis(990),
        "{:?}",
        pushed_at.elapsed()
    );
}

async fn delay_0_is_ready_at_once(b: &Backend) {
    let app = TestApp::new(b);
    push_ok(&app, job("now", "t", 0, "")).await;
    assert_eq!(pop(&app, "t", 0).await["id"], "now");
}

async fn repush_replaces_the_job_and_the_old_version_is_never_delivered(b: &Backend) {
    let app = TestApp::new(b);
    // Old version due in 1 s, new one ready now.
    push_ok(&app, job("dup", "t", 1, "old")).await;
    push_ok(&app, job("dup", "t", 0, "new")).await;
    let data = pop(&app, "t", 0).await;
    assert_eq!(data["body"], "new");
    assert_eq!(
        app.post("/finish", json!({"id": "dup"})).await.json["code"],
        0
    );
    // Past the old due time: nothing.
    assert_eq!(pop(&app, "t", 2).await, Value::Null);

    // Re-push of a reserved job: the new version is delivered fresh, once. (A topic of its
    // own: the serving task may still be reserving for the waiter that just timed out on "t",
    // and hands such a job back only after that reserve.)
    push_ok(&app, job("r", "u", 0, "first")).await;
    assert_eq!(pop(&app, "u", 0).await["body"], "first");
    push_ok(&app, job("r", "u", 0, "second")).await;
    assert_eq!(pop(&app, "u", 0).await["body"], "second");
    assert_eq!(pop(&app, "u", 0).await, Value::Null);
    let counts = stats(b).await.topics[&Topic::parse("u").unwrap()];
    assert_eq!((counts.reserved, counts.total()), (1, 1));
}

// ---------------------------------------------------------------------------------------------
// Limits, paths, health

async fn body_larger_than_max_body_bytes_is_refused_naming_body(b: &Backend) {
    let config = Config {
        max_body_bytes: 16,
        ..Config::default()
    };
    let app = TestApp::with_config(b, config);
    push_ok(&app, job("fits", "t", 0, &"x".repeat(16))).await;
    let r = app.post("/push", job("big", "t", 0, &"x".repeat(17))).await;
    assert!(failed(&r).starts_with("body: "), "{r:?}");
    // A request far beyond the limit is refused before it is decoded.
    let r = app
        .post("/push", job("huge", "t", 0, &"x".repeat(200_000)))
        .await;
    let message = failed(&r);
    assert!(
        message.starts_with("body: the request is larger than"),
        "{message}"
    );
    let counts = stats(b).await.topics[&Topic::parse("t").unwrap()];
    assert_eq!(counts.total(), 1);
}

async fn unknown_path_is_404(b: &Backend) {
    let app = TestApp::new(b);
    assert_eq!(
        app.post("/nope", json!({})).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(app.get("/push/extra").await.status, StatusCode::NOT_FOUND);
}

async fn healthz_and_readyz_answer_ok(b: &Backend) {
    let app = TestApp::new(b);
    let r = app.get("/healthz").await;
    assert_eq!(
        (r.status, r.raw.as_slice()),
        (StatusCode::OK, br#"{"status":"ok"}"#.as_slice())
    );
    let r = app.get("/readyz").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json, json!({"status": "ok", "store": b.store.kind()}));
}

backend_tests!(
    push_then_get_returns_the_job_with_its_due_time_in_unix_seconds,
    push_then_pop_returns_id_body_and_topic,
    push_counts_the_delay_from_its_arrival_rounded_up,
    finish_removes_a_popped_job,
    delete_removes_a_delayed_job,
    finish_and_delete_of_an_unknown_id_succeed,
    get_of_an_unknown_id_returns_null_data,
    get_reports_ttr_in_whole_seconds_rounded_up,
    replies_are_http_200_compact_json_envelopes,
    body_id_and_spaces_inside_are_stored_untrimmed,
    push_without_id_is_refused,
    push_without_topic_is_refused,
    push_with_an_invalid_topic_names_the_field,
    push_with_an_invalid_id_names_the_field,
    push_delay_must_be_between_0_and_2_pow_31_minus_1,
    push_ttr_must_be_between_1_and_86400,
    push_validation_follows_the_original_order,
    finish_delete_and_get_need_an_id,
    pop_needs_a_topic,
    keys_are_matched_case_insensitively,
    any_content_type_and_any_method_are_accepted,
    wrong_types_and_non_objects_are_parse_errors,
    null_body_is_an_empty_request,
    bad_input_changes_nothing,
    multi_topic_pop_prefers_topics_in_the_order_given,
    pop_with_timeout_0_returns_null_at_once,
    pop_returns_null_when_nothing_is_ready_within_its_timeout,
    pop_timeout_is_capped_at_max_wait_secs,
    pop_wakes_when_a_job_is_pushed_meanwhile,
    delayed_job_is_not_popped_before_its_delay,
    delay_0_is_ready_at_once,
    repush_replaces_the_job_and_the_old_version_is_never_delivered,
    body_larger_than_max_body_bytes_is_refused_naming_body,
    unknown_path_is_404,
    healthz_and_readyz_answer_ok,
);

// ---------------------------------------------------------------------------------------------
// A store that is down

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_unavailable_is_code_1_and_readyz_503() {
    let store: Arc<dyn Store> = Arc::new(FailingStore::new(StoreError::Unavailable(
        "connection refused".into(),
    )));
    let app = TestApp::with_store(store, Config::default());
    let requests = [
        ("/push", job("j", "t", 0, "")),
        ("/pop", json!({"topic": "t", "timeout": 0})),
        ("/finish", json!({"id": "j"})),
        ("/delete", json!({"id": "j"})),
        ("/get", json!({"id": "j"})),
    ];
    for (path, body) in requests {
        let r = app.post(path, body).await;
        assert_eq!(
            failed(&r),
            "store unavailable: connection refused",
            "{path}"
        );
    }
    let r = app.get("/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        r.json,
        json!({"status": "unavailable", "store": "failing", "error": "store unavailable: connection refused"})
    );
    assert_eq!(app.get("/healthz").await.status, StatusCode::OK);
}

// ---------------------------------------------------------------------------------------------
// server::run over a real socket

/// One HTTP/1.1 request on a fresh connection; returns the status code and the body.
async fn http(addr: std::net::SocketAddr, path: &str, body: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    (status, body.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_shutdown_answers_a_waiting_pop_with_null_and_stops() {
    let LiveServer {
        addr,
        dispatch,
        stop,
        task: server,
        ..
    } = LiveServer::start(Arc::new(MemoryStore::new()), Config::default()).await;

    let (status, body) = http(addr, "/push", &job("j1", "t", 0, "b").to_string()).await;
    assert_eq!(
        (status, body.as_str()),
        (200, r#"{"code":0,"message":"添加成功","data":null}"#)
    );
    let (_, body) = http(addr, "/pop", r#"{"topic":"t","timeout":0}"#).await;
    assert!(body.contains(r#""id":"j1""#), "{body}");

    let waiting = tokio::spawn(http(addr, "/pop", r#"{"topic":"t","timeout":120}"#));
    let deadline = Instant::now() + PROMPT;
    while dispatch.waiters() == 0 {
        assert!(Instant::now() < deadline, "the pop never waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    stop.send(()).unwrap();
    let (status, body) = tokio::time::timeout(PROMPT, waiting)
        .await
        .expect("the waiting pop was not answered")
        .unwrap();
    assert_eq!(
        (status, body.as_str()),
        (200, r#"{"code":0,"message":"操作成功","data":null}"#)
    );
    tokio::time::timeout(PROMPT, server)
        .await
        .expect("the server did not stop")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < PROMPT);
    // A connection can only be the socket meeting itself (TCP's simultaneous open, when the
    // kernel picks the closed port as its source port), never a listener.
    if let Ok(s) = tokio::net::TcpStream::connect(addr).await {
        assert_eq!(s.local_addr().ok(), s.peer_addr().ok(), "still accepting");
    }
}
