//! `POST /v1/reserve`: delivery order, several jobs and topics, its refusals, and the long poll
//! and timer of dispatch/ behind it (a push wakes a waiting reserve, a timeout returns empty,
//! too many waiters are refused, a delayed job becomes ready when due).

use super::*;

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
    assert_eq!(r.json, json!({"jobs": [], "finished": 0, "missing": []}));
    assert!(start.elapsed() < Duration::from_secs(2));
}

async fn reserve_refuses_invalid_requests(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    pushed(&app, json!({"topic": "t"})).await;
    // A reserved job, named in `finish` beside an invalid id: it must stay reserved.
    pushed(&app, json!({"topic": "held", "id": "h1"})).await;
    assert_eq!(ids(&reserve(&app, &["held"], 1).await), ["h1"]);
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
        (json!({"topics": ["t"], "finish": "h1"}), "finish"),
        (
            json!({"topics": ["t"], "finish": ["h1", "a", "b", "c"]}),
            "finish",
        ),
        (json!({"topics": ["t"], "finish": ["h1", ""]}), "finish[1]"),
        (json!({"topics": ["t"], "finish": ["h1", 3]}), "finish[1]"),
        (json!({"topics": [], "finish": ["h1"]}), "topics"),
        (json!({"topics": ["t"], "max": 0, "finish": ["h1"]}), "max"),
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
    assert_eq!(r.json, json!({"jobs": [], "finished": 0, "missing": []}));
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

/// `finish` in a reserve: those jobs are finished first, as `POST /v1/finish` would, and the
/// reply says how many and which were missing; the reserve then runs as without it.
async fn a_reserve_finishes_the_jobs_it_names_first(b: &Backend) {
    let app = TestApp::new(b);
    for id in ["j1", "j2", "j3"] {
        pushed(&app, json!({"topic": "t", "id": id})).await;
    }
    assert_eq!(ids(&reserve(&app, &["t"], 1).await), ["j1"]);
    let r = app
        .post(
            "/v1/reserve",
            json!({"topics": ["t"], "finish": ["j1", "nope", "j1"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(ids(r.json["jobs"].as_array().unwrap()), ["j2"]);
    assert_eq!(
        r.json["finished"], 1,
        "a repeated id counts once: {}",
        r.json
    );
    assert_eq!(r.json["missing"], json!(["nope"]));
    assert_eq!(app.get("/v1/jobs/j1").await.status, StatusCode::NOT_FOUND);
    // Finished even when nothing is then reserved (another topic, no wait).
    let r = app
        .post(
            "/v1/reserve",
            json!({"topics": ["empty"], "timeout_ms": 0, "finish": ["j2"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["jobs"], json!([]));
    assert_eq!(
        (&r.json["finished"], &r.json["missing"]),
        (&json!(1), &json!([]))
    );
    assert_eq!(app.get("/v1/jobs/j2").await.status, StatusCode::NOT_FOUND);
    // An empty list finishes nothing, as no list does.
    let r = app
        .post("/v1/reserve", json!({"topics": ["t"], "finish": []}))
        .await;
    assert_eq!(ids(r.json["jobs"].as_array().unwrap()), ["j3"]);
    assert_eq!(
        (&r.json["finished"], &r.json["missing"]),
        (&json!(0), &json!([]))
    );
    let r = app.post("/v1/reserve", json!({"topics": ["t"]})).await;
    assert_eq!(r.json, json!({"jobs": [], "finished": 0, "missing": []}));
    let t = &stats(&app).await["topics"]["t"];
    assert_eq!((&t["ready"], &t["reserved"]), (&json!(0), &json!(1)), "{t}");
}

backend_tests!(
    a_reserve_finishes_the_jobs_it_names_first,
    reserve_orders_by_priority_then_run_at_then_push_order,
    reserve_takes_several_jobs_preferring_topics_in_order,
    reserve_with_zero_timeout_returns_empty_at_once,
    reserve_refuses_invalid_requests,
    a_waiting_reserve_is_woken_by_a_push,
    a_reserve_with_a_timeout_waits_then_returns_empty,
    a_long_poll_over_max_waiters_is_refused_at_once,
    a_delayed_job_becomes_ready_when_due,
);
