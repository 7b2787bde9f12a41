//! The transitions of one job by its id, and of a topic's dead jobs: release, touch, bury,
//! kick, `POST /v1/topics/{topic}/kick` and reschedule, each with its 409 for a job in the wrong
//! state and its refusals of bad input.

use super::*;

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

backend_tests!(
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
);
