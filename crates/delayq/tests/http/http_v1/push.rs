//! `POST /v1/jobs`: the 201 with the job and its `Location`, the defaults, generated ids,
//! an existing id (409, or replaced with `replace`), and when a delay starts counting (never
//! early, a zero delay ready at once).

use super::*;

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

backend_tests!(
    push_answers_201_with_the_job_and_its_location,
    push_sets_location_and_applies_defaults,
    push_without_id_generates_time_ordered_ids,
    push_of_an_existing_id_is_409_exists_and_changes_nothing,
    push_with_replace_is_201_and_the_old_body_is_never_delivered_again,
    a_delay_counts_from_the_requests_arrival_rounded_up,
    a_zero_delay_is_ready_at_once,
);
