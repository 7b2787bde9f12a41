//! `GET` and `PUT /v1/topics/{topic}/settings` (flow control, docs/flow-control.md): the
//! settings in force, changes merged field by field, refusals naming the field with nothing
//! changed, `/v1/stats` showing them, and what a pause and a `max_in_flight` do to
//! `/v1/reserve`, its long poll included.

use super::*;

async fn put_settings(app: &TestApp, topic: &str, body: Value) -> Reply {
    app.json(Method::PUT, &format!("/v1/topics/{topic}/settings"), body)
        .await
}

async fn settings_are_read_changed_field_by_field_and_shown_in_stats(b: &Backend) {
    let app = TestApp::new(b);
    let r = app.get("/v1/topics/mail/settings").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let defaults =
        json!({"paused": false, "rate_per_s": null, "burst": null, "max_in_flight": null});
    assert_eq!(r.json, defaults);

    // A topic may be set before its first job; the default burst follows the rate.
    let r = put_settings(&app, "mail", json!({"rate_per_s": 100, "max_in_flight": 8})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let limited = json!({"paused": false, "rate_per_s": 100.0, "burst": 100, "max_in_flight": 8});
    assert_eq!(r.json, limited);
    let r = put_settings(&app, "mail", json!({"burst": 10, "paused": true})).await;
    let set = json!({"paused": true, "rate_per_s": 100.0, "burst": 10, "max_in_flight": 8});
    assert_eq!(r.json, set);
    assert_eq!(app.get("/v1/topics/mail/settings").await.json, set);
    assert_eq!(stats(&app).await["settings"], json!({"mail": set}));

    // `null` removes a limit (the burst goes with the rate); `{}` changes nothing.
    let r = put_settings(&app, "mail", json!({"rate_per_s": null})).await;
    let unrated = json!({"paused": true, "rate_per_s": null, "burst": null, "max_in_flight": 8});
    assert_eq!(r.json, unrated);
    assert_eq!(put_settings(&app, "mail", json!({})).await.json, unrated);
    let r = put_settings(
        &app,
        "mail",
        json!({"paused": false, "max_in_flight": null}),
    )
    .await;
    assert_eq!(r.json, defaults);
    assert_eq!(stats(&app).await["settings"], json!({}));
}

async fn bad_settings_are_refused_naming_the_field_and_change_nothing(b: &Backend) {
    let app = TestApp::new(b);
    let before = json!({"paused": false, "rate_per_s": 2.5, "burst": 2, "max_in_flight": null});
    let r = put_settings(&app, "t", json!({"rate_per_s": 2.5})).await;
    assert_eq!(r.json, before);
    for (body, field) in [
        (json!({"rate_per_s": 0}), "rate_per_s"),
        (json!({"rate_per_s": -1}), "rate_per_s"),
        (json!({"rate_per_s": "10"}), "rate_per_s"),
        (json!({"rate_per_s": 1e-9}), "rate_per_s"),
        (json!({"rate_per_s": 10_000_001}), "rate_per_s"),
        (json!({"burst": 1.5}), "burst"),
        (json!({"burst": 0}), "burst"),
        (json!({"burst": 5, "rate_per_s": null}), "burst"),
        (json!({"max_in_flight": 2.5}), "max_in_flight"),
        (json!({"max_in_flight": 0}), "max_in_flight"),
        (json!({"max_in_flight": -3}), "max_in_flight"),
        (json!({"paused": "yes"}), "paused"),
        (json!({"paused": null}), "paused"),
        (json!({"pause": true}), "pause"),
        (json!({"max_in_flight": 4, "rate": 3}), "rate"),
    ] {
        let r = put_settings(&app, "t", body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
        assert_eq!(
            app.get("/v1/topics/t/settings").await.json,
            before,
            "{body}"
        );
    }
    // A burst needs a rate, given or already set.
    let r = put_settings(&app, "fresh", json!({"burst": 5})).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("burst"));
    let r = put_settings(&app, "bad,topic", json!({"paused": true})).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("topic"));
    let r = app
        .send(Method::PUT, "/v1/topics/t/settings", "nope", None)
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_json", None);
}

async fn a_paused_topic_is_skipped_and_its_long_polls_answer_on_resume(b: &Backend) {
    let app = Arc::new(TestApp::new(b));
    put_settings(&app, "p", json!({"paused": true})).await;
    pushed(&app, json!({"topic": "p", "id": "a"})).await;
    pushed(&app, json!({"topic": "o", "id": "b"})).await;
    let r = app
        .post("/v1/reserve", json!({"topics": ["p", "o"], "max": 5}))
        .await;
    assert_eq!(ids(r.json["jobs"].as_array().unwrap()), ["b"]);
    assert_eq!(app.get("/v1/jobs/a").await.json["state"], "ready");

    let waiter = {
        let app = app.clone();
        tokio::spawn(async move {
            let r = app
                .post(
                    "/v1/reserve",
                    json!({"topics": ["p"], "timeout_ms": 10_000}),
                )
                .await;
            (r, Instant::now())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.state.dispatch.waiters() < 1 {
        assert!(Instant::now() < deadline, "the long poll never waited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "answered while paused");
    let resumed = Instant::now();
    put_settings(&app, "p", json!({"paused": false})).await;
    let (r, answered) = waiter.await.unwrap();
    assert_eq!(ids(r.json["jobs"].as_array().unwrap()), ["a"]);
    let waited = answered - resumed;
    assert!(
        waited < Duration::from_millis(100),
        "{waited:?} after the resume"
    );
}

async fn max_in_flight_holds_a_sixth_reserve_until_one_is_finished(b: &Backend) {
    let app = Arc::new(TestApp::new(b));
    // 8 splits evenly over the shards of a sharded Redis store (docs/flow-control.md).
    put_settings(&app, "m", json!({"max_in_flight": 8})).await;
    for i in 0..12 {
        pushed(&app, json!({"topic": "m", "id": format!("j{i}")})).await;
    }
    let first = reserve(&app, &["m"], 12).await;
    assert!(!first.is_empty() && first.len() <= 8, "{}", first.len());
    assert!(reserve(&app, &["m"], 12).await.is_empty());

    // A long poll waits, and is answered when a reservation ends.
    let waiter = {
        let app = app.clone();
        tokio::spawn(async move {
            app.post(
                "/v1/reserve",
                json!({"topics": ["m"], "timeout_ms": 10_000}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "answered over the limit");
    let mut answered = false;
    for j in &first {
        let id = j["id"].as_str().unwrap();
        let r = app
            .send(Method::POST, &format!("/v1/jobs/{id}/finish"), "", None)
            .await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
        tokio::time::sleep(Duration::from_millis(200)).await;
        if waiter.is_finished() {
            answered = true;
            break;
        }
    }
    assert!(answered, "no finish let the long poll's job out");
    let r = waiter.await.unwrap();
    assert_eq!(r.json["jobs"].as_array().unwrap().len(), 1);
}

backend_tests!(
    settings_are_read_changed_field_by_field_and_shown_in_stats,
    bad_settings_are_refused_naming_the_field_and_change_nothing,
    a_paused_topic_is_skipped_and_its_long_polls_answer_on_resume,
    max_in_flight_holds_a_sixth_reserve_until_one_is_finished,
);
