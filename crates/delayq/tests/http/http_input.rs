//! Request bodies whose meaning would be ambiguous are refused naming the field, and change
//! nothing: a JSON key given twice in one object (docs/api.md, "Request bodies"; docs/compat.md),
//! at the top level or nested (`callback`, `publish`, a batch's jobs), on /v1 with a 400
//! `invalid_field` and on the compat API with code 1, as a repeated query parameter is. JSON
//! allows repeated keys and parsers disagree on which one counts, so a producer and delayq
//! could read different jobs. In-process on the memory store: parsing is the same for every
//! store.

use crate::support;

use axum::http::{Method, StatusCode};
use support::app::TestApp;
use support::backends::Backend;

async fn post_raw(app: &TestApp, path: &str, body: &str) -> support::app::Reply {
    app.send(
        Method::POST,
        path,
        body.to_string(),
        Some("application/json"),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_refuses_a_key_given_twice_naming_it_and_stores_nothing() {
    let b = Backend::memory().await;
    let app = TestApp::new(&b);
    app.post("/v1/jobs", serde_json::json!({"topic": "t", "id": "held"}))
        .await;
    for (path, body, field) in [
        (
            "/v1/jobs",
            r#"{"topic":"first","topic":"second","id":"d1"}"#,
            "topic",
        ),
        (
            "/v1/jobs",
            r#"{"topic":"t","id":"d1","delay_ms":5,"delay_ms":0}"#,
            "delay_ms",
        ),
        (
            "/v1/jobs",
            r#"{"topic":"t","id":"d1","callback":{"url":"https://a.example/","url":"https://b.example/"}}"#,
            "callback.url",
        ),
        (
            "/v1/jobs",
            r#"{"topic":"t","id":"d1","publish":{"routing_key":"a","exchange":"","routing_key":"b"}}"#,
            "publish.routing_key",
        ),
        (
            "/v1/jobs/batch",
            r#"{"jobs":[{"topic":"t","id":"d2"},{"topic":"t","id":"d3","id":"d4"}]}"#,
            "jobs[1].id",
        ),
        (
            "/v1/jobs/batch",
            r#"{"jobs":[{"topic":"t","id":"d2"}],"jobs":[]}"#,
            "jobs",
        ),
        (
            "/v1/reserve",
            r#"{"topics":["t"],"topics":["u"]}"#,
            "topics",
        ),
        ("/v1/finish", r#"{"ids":["held"],"ids":[]}"#, "ids"),
        (
            "/v1/jobs/held/reschedule",
            r#"{"delay_ms":1,"delay_ms":2}"#,
            "delay_ms",
        ),
        ("/v1/topics/t/kick", r#"{"max":1,"max":2}"#, "max"),
        (
            "/v1/restore",
            r#"{"overdue":"fire","overdue":"skip"}"#,
            "overdue",
        ),
    ] {
        let r = post_raw(&app, path, body).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{path} {body}: {}",
            r.json
        );
        assert_eq!(
            r.json["error"]["code"], "invalid_field",
            "{body}: {}",
            r.json
        );
        assert_eq!(r.json["error"]["field"], field, "{body}: {}", r.json);
        let message = r.json["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(field) && message.contains("more than once"),
            "{message}"
        );
    }
    for id in ["d1", "d2", "d3", "d4"] {
        let r = app.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(
            r.status,
            StatusCode::NOT_FOUND,
            "{id} was stored: {}",
            r.json
        );
    }
    let held = app.get("/v1/jobs/held").await.json;
    assert_eq!(held["state"], "ready", "{held}");
    // The same key in two different objects, or in two cases, is not a repeat.
    let r = post_raw(
        &app,
        "/v1/jobs/batch",
        r#"{"jobs":[{"topic":"t","id":"e1"},{"topic":"t","id":"e2"}]}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_refuses_a_field_given_twice_in_any_case_naming_it() {
    let b = Backend::memory().await;
    let app = TestApp::new(&b);
    for (path, body, field) in [
        (
            "/push",
            r#"{"topic":"first","topic":"second","id":"c1","delay":0,"ttr":5,"body":"b"}"#,
            "topic",
        ),
        (
            "/push",
            r#"{"topic":"t","id":"c1","ID":"c2","delay":0,"ttr":5,"body":"b"}"#,
            "id",
        ),
        (
            "/push",
            r#"{"topic":"t","id":"c1","delay":0,"ttr":5,"body":"b","Body":null}"#,
            "body",
        ),
        ("/pop", r#"{"topic":"t","Topic":"u"}"#, "topic"),
        ("/finish", r#"{"id":"c1","id":"c2"}"#, "id"),
        ("/delete", r#"{"id":"c1","Id":"c2"}"#, "id"),
        ("/get", r#"{"id":"c1","id":"c1"}"#, "id"),
    ] {
        let r = post_raw(&app, path, body).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        assert_eq!(r.json["code"], 1, "{path} {body}: {}", r.json);
        assert_eq!(
            r.json["message"],
            format!("{field}: is given more than once"),
            "{path} {body}"
        );
        assert!(r.json["data"].is_null(), "{}", r.json);
    }
    for id in ["c1", "c2"] {
        let r = app.post("/get", serde_json::json!({"id": id})).await;
        assert!(r.json["data"].is_null(), "{id} was stored: {}", r.json);
    }
    // Unknown keys are still ignored, repeated or not.
    let r = post_raw(
        &app,
        "/push",
        r#"{"x":1,"x":2,"topic":"t","id":"c3","delay":0,"ttr":5,"body":"b"}"#,
    )
    .await;
    assert_eq!(r.json["code"], 0, "{}", r.json);
}
