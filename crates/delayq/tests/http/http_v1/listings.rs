//! What the API lists and counts: `GET /v1/stats`, `/v1/topics`, pages of a topic's jobs
//! (`/v1/topics/{topic}/jobs`) and the schedules (`/v1/schedule`, `/v1/topics/{topic}/schedule`),
//! with their refusals of bad parameters.

use super::*;

async fn stats_count_jobs_per_topic_and_state(b: &Backend) {
    let app = TestApp::new(b);
    assert_eq!(
        stats(&app).await,
        json!({"topics": {}, "callbacks": {}, "settings": {}, "next_due_ms": null})
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
        json!({"from": m0, "to": m0 + 5 * min, "step": min, "counts": [2, 1, 0, 2, 0],
            "ticks": [0, 0, 0, 0, 0], "ticks_partial": false})
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

async fn schedule_counts_the_coming_ticks_of_recurring_schedules_apart(b: &Backend) {
    let app = TestApp::new(b);
    let min = 60_000;
    let hour = 60 * min;
    let m0 = FAR_FUTURE - FAR_FUTURE % hour;
    let put = |id: &str, body: serde_json::Value| {
        let path = format!("/v1/schedules/{id}");
        let app = &app;
        async move {
            let r = app.json(Method::PUT, &path, body).await;
            assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
        }
    };
    // Every 2 minutes from m0 + 1 min, to topic s: ticks at 1, 3, 5, ... minutes.
    let every = json!({"every_ms": 2 * min, "start_at_ms": m0 + min, "job": {"topic": "s"}});
    put("sweep", every).await;
    // Hourly at :30 in Kolkata (UTC+5:30, so on UTC's hours), callback jobs of topic s, from
    // m0 to its third tick.
    put(
        "report",
        json!({"cron": "30 * * * *", "tz": "Asia/Kolkata", "start_at_ms": m0,
            "end_at_ms": m0 + 2 * hour,
            "job": {"topic": "s", "callback": {"url": "https://example.com/r"}}}),
    )
    .await;
    // Another topic's, and a paused one (no ticks while paused).
    put(
        "other",
        json!({"cron": "0 * * * *", "start_at_ms": m0, "job": {"topic": "o"}}),
    )
    .await;
    put(
        "paused",
        json!({"every_ms": min, "start_at_ms": m0, "paused": true, "job": {"topic": "s"}}),
    )
    .await;
    pushed(
        &app,
        json!({"topic": "s", "id": "j", "run_at_ms": m0 + 3 * min}),
    )
    .await;

    let r = app
        .get(&format!(
            "/v1/topics/s/schedule?from={m0}&to={}&step={min}",
            m0 + 6 * min
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(
        r.json["counts"],
        json!([0, 0, 0, 1, 0, 0]),
        "jobs and ticks apart"
    );
    assert_eq!(
        r.json["ticks"],
        json!([1, 1, 0, 1, 0, 1]),
        "report's at m0, sweep's"
    );
    assert_eq!(r.json["ticks_partial"], false);
    // Per hour, every topic: sweep's 30, report's 1 (m0, m0 + 1 h, and m0 + 2 h, its end),
    // other's 1; the paused one none.
    let r = app
        .get(&format!(
            "/v1/schedule?from={m0}&to={}&step={hour}",
            m0 + 3 * hour
        ))
        .await;
    assert_eq!(r.json["counts"], json!([1, 0, 0]));
    assert_eq!(r.json["ticks"], json!([32, 32, 32]));
    let r = app
        .get(&format!(
            "/v1/topics/o/schedule?from={m0}&to={}&step={hour}",
            m0 + 3 * hour
        ))
        .await;
    assert_eq!(r.json["ticks"], json!([1, 1, 1]));
    // Deleted, sweep ticks no more.
    let r = app
        .json(Method::DELETE, "/v1/schedules/sweep", json!(null))
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = app
        .get(&format!(
            "/v1/topics/s/schedule?from={m0}&to={}&step={min}",
            m0 + 6 * min
        ))
        .await;
    assert_eq!(r.json["ticks"], json!([1, 0, 0, 0, 0, 0]));
    // A day of a schedule every second is more ticks than are counted: the answer says so.
    put(
        "fast",
        json!({"every_ms": 1_000, "start_at_ms": m0, "job": {"topic": "s"}}),
    )
    .await;
    let r = app
        .get(&format!(
            "/v1/schedule?from={m0}&to={}&step={hour}",
            m0 + 24 * hour
        ))
        .await;
    assert_eq!(r.json["ticks_partial"], true);
    let counted: u64 = r.json["ticks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(counted <= 50_000, "{counted}");
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
    stats_count_jobs_per_topic_and_state,
    topics_lists_every_topic_by_name_with_pull_and_callback_counts,
    jobs_of_a_topic_are_paged_in_each_states_order,
    jobs_listing_refuses_bad_parameters_naming_them,
    schedule_counts_delayed_jobs_per_step,
    schedule_counts_the_coming_ticks_of_recurring_schedules_apart,
    schedule_refuses_bad_parameters_naming_them,
);
