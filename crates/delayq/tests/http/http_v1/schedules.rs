//! Recurring schedules over /v1 (docs/schedules.md): create, read, list, replace, pause,
//! resume and delete; every refusal names its field and stores nothing; and the firing task
//! pushes one job per tick, `<id>@<tick>`, due at the tick.

use super::*;

fn daily_report() -> Value {
    json!({
        "cron": "0 9 * * *",
        "tz": "Europe/Berlin",
        "job": {"topic": "reports", "body": "{\"report\":\"daily\"}", "priority": 5, "max_attempts": 3}
    })
}

async fn put(app: &TestApp, id: &str, body: Value) -> Reply {
    app.json(Method::PUT, &format!("/v1/schedules/{id}"), body)
        .await
}

async fn a_schedule_is_created_read_listed_replaced_paused_resumed_and_deleted(b: &Backend) {
    let app = TestApp::new(b);
    let r = put(&app, "daily-report", daily_report()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    let s = &r.json;
    assert_eq!(s["id"], "daily-report");
    assert_eq!(s["cron"], "0 9 * * *");
    assert_eq!(s["tz"], "Europe/Berlin");
    assert_eq!(s["job"]["topic"], "reports");
    assert_eq!(s["job"]["body"], "{\"report\":\"daily\"}");
    assert_eq!(s["job"]["priority"], 5);
    assert_eq!(s["job"]["max_attempts"], 3);
    assert_eq!(
        (&s["catch_up"], &s["overlap"], &s["paused"]),
        (&json!("latest"), &json!("allow"), &json!(false))
    );
    assert_eq!(s["last_tick_ms"], Value::Null);
    assert!(s.get("every_ms").is_none());
    let runs: Vec<u64> = s["next_runs_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(runs.len(), 10);
    let now = now_ms();
    assert!(runs[0] > now && runs[0] <= now + 25 * 3_600_000, "{runs:?}");
    // Daily at 09:00 Berlin: 24 h apart, except across a DST change (23 or 25 h).
    for w in runs.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            [23, 24, 25].map(|h| h * 3_600_000).contains(&gap),
            "{runs:?}"
        );
    }

    let r = app.get("/v1/schedules/daily-report").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json, *s, "GET answers what PUT did");

    // Replaced: 200, the new rule.
    let mut every = daily_report();
    every["cron"] = Value::Null;
    every["every_ms"] = json!(900_000);
    let r = put(&app, "daily-report", every).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["every_ms"], 900_000);
    assert!(r.json.get("cron").is_none());
    let runs = r.json["next_runs_ms"].as_array().unwrap();
    assert_eq!(
        runs[1].as_u64().unwrap() - runs[0].as_u64().unwrap(),
        900_000
    );

    for id in ["b-sweep", "a-first", "c-last"] {
        let r = put(&app, id, json!({"every_ms": 60_000, "job": {"topic": "t"}})).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    }
    let r = app.get("/v1/schedules?limit=2").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let names = |page: &Value| -> Vec<String> {
        page["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&r.json), ["a-first", "b-sweep"]);
    let cursor = r.json["next_cursor"].as_str().unwrap().to_string();
    let r = app
        .get(&format!("/v1/schedules?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(names(&r.json), ["c-last", "daily-report"]);
    let r = app
        .get(&format!(
            "/v1/schedules?limit=2&cursor={}",
            r.json["next_cursor"].as_str().unwrap()
        ))
        .await;
    assert_eq!(names(&r.json), Vec::<String>::new());
    assert_eq!(r.json["next_cursor"], Value::Null);

    let r = app.post("/v1/schedules/b-sweep/pause", json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["paused"], true);
    assert_eq!(r.json["next_runs_ms"], json!([]));
    let r = app.post("/v1/schedules/b-sweep/resume", json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["paused"], false);
    assert!(r.json["next_runs_ms"][0].as_u64().unwrap() > now);

    let r = delete(&app, "/v1/schedules/b-sweep").await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    for r in [
        delete(&app, "/v1/schedules/b-sweep").await,
        app.get("/v1/schedules/b-sweep").await,
        app.post("/v1/schedules/b-sweep/pause", json!({})).await,
        app.post("/v1/schedules/b-sweep/resume", json!({})).await,
    ] {
        assert_error(&r, StatusCode::NOT_FOUND, "not_found", None);
    }
}

async fn bad_schedules_are_refused_naming_the_field_and_nothing_is_stored(b: &Backend) {
    let app = TestApp::new(b);
    let job = json!({"topic": "t"});
    let cases = [
        (json!({"cron": "61 * * * *", "job": job}), "cron"),
        (json!({"cron": "* * * *", "job": job}), "cron"),
        (
            json!({"cron": "0 9 * * *", "tz": "Europe/Atlantis", "job": job}),
            "tz",
        ),
        (
            json!({"cron": "0 9 * * *", "every_ms": 60_000, "job": job}),
            "every_ms",
        ),
        (json!({"job": job}), "cron"),
        (json!({"every_ms": 999, "job": job}), "every_ms"),
        (
            json!({"every_ms": 1_000, "start_at_ms": 2_000, "end_at_ms": 1_999, "job": job}),
            "end_at_ms",
        ),
        (json!({"every_ms": 1_000}), "job"),
        (
            json!({"every_ms": 1_000, "job": {"body": "no topic"}}),
            "job.topic",
        ),
        (
            json!({"every_ms": 1_000, "job": {"topic": "has space"}}),
            "job.topic",
        ),
        (
            json!({"every_ms": 1_000, "job": {"topic": "t", "id": "x"}}),
            "job.id",
        ),
        (
            json!({"every_ms": 1_000, "job": {"topic": "t", "delay_ms": 5}}),
            "job.delay_ms",
        ),
        (
            json!({"every_ms": 1_000, "job": {"topic": "t", "ttr_ms": 0}}),
            "job.ttr_ms",
        ),
        (
            json!({"every_ms": 1_000, "job": {"topic": "t", "callback": {"url": "ftp://x"}}}),
            "job.callback.url",
        ),
        (
            json!({"every_ms": 1_000, "job": job, "catch_up": "some"}),
            "catch_up",
        ),
        (
            json!({"every_ms": 1_000, "job": job, "overlap": "never"}),
            "overlap",
        ),
        (
            json!({"every_ms": 1_000, "job": job, "paused": "yes"}),
            "paused",
        ),
        (json!({"every_ms": 1_000, "job": job, "every": 5}), "every"),
    ];
    for (body, field) in cases {
        let r = put(&app, "bad", body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
    }
    let long = "x".repeat(201);
    let r = put(&app, &long, json!({"every_ms": 1_000, "job": job})).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("id"));
    let r = app.get("/v1/schedules").await;
    assert_eq!(r.json["schedules"], json!([]), "nothing stored");
    let r = app.get("/v1/schedules?limit=0").await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("limit"));
}

async fn each_tick_pushes_one_job_named_after_the_tick_and_due_at_it(b: &Backend) {
    let app = TestApp::new(b);
    let r = put(
        &app,
        "sweep",
        json!({"every_ms": 1_000, "job": {"topic": "sweeps", "body": "go"}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    let first = r.json["next_runs_ms"][0].as_u64().unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.len() < 3 && Instant::now() < deadline {
        for j in reserve(&app, &["sweeps"], 10).await {
            let at = now_ms();
            let run_at = j["run_at_ms"].as_u64().unwrap();
            assert!(run_at <= at, "never early: {j:?}");
            assert_eq!(j["id"], format!("sweep@{run_at}"));
            assert_eq!(j["body"], "go");
            let r = app
                .post(&format!("/v1/jobs/sweep@{run_at}/finish"), json!({}))
                .await;
            assert_eq!(r.status, StatusCode::NO_CONTENT);
            seen.push(run_at);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen.len() >= 3, "{seen:?}");
    assert_eq!(seen[0], first);
    for w in seen.windows(2) {
        assert_eq!(w[1] - w[0], 1_000, "one job per tick, none twice: {seen:?}");
    }
    let r = app.get("/v1/schedules/sweep").await;
    assert!(r.json["last_tick_ms"].as_u64().unwrap() >= *seen.last().unwrap());
}

/// Polls job `id` (up to 3 s) until `ok` says yes of its reply; returns the last reply.
async fn until_job(app: &TestApp, id: &str, ok: impl Fn(&Reply) -> bool) -> Reply {
    until_get(app, &format!("/v1/jobs/{id}"), ok).await
}

/// Polls `GET path` (up to 3 s) until `ok` says yes of its reply; returns the last reply.
async fn until_get(app: &TestApp, path: &str, ok: impl Fn(&Reply) -> bool) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let r = app.get(path).await;
        if ok(&r) || Instant::now() > deadline {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A tick within `FIRE_AHEAD_MS` is pushed ahead, delayed until it (docs/schedules.md, "Fired
/// ahead"); a replace that would fire it the same keeps it; a replace with another job, a
/// pause and a delete withdraw it; a resume or the replace fires it again.
async fn a_tick_fired_ahead_is_withdrawn_by_a_pause_a_delete_or_a_changed_replace(b: &Backend) {
    let app = TestApp::new(b);
    // Every minute from a tick 3 s away: within the lead, so fired ahead at once.
    let tick = (now_ms() + 3_000).div_ceil(1000) * 1000;
    let body = |b: &str| json!({"every_ms": 60_000, "start_at_ms": tick, "job": {"topic": "ahead", "body": b}});
    let r = put(&app, "early", body("one")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    let job = format!("early@{tick}");
    let r = until_job(&app, &job, |r| r.status == StatusCode::OK).await;
    assert_eq!(r.status, StatusCode::OK, "fired ahead: {:?}", r.json);
    assert_eq!(
        (&r.json["state"], &r.json["run_at_ms"], &r.json["body"]),
        (&json!("delayed"), &json!(tick), &json!("one"))
    );
    // On Redis the tick's job is stored before the schedule is moved on (store/redis/
    // schedules.rs): the schedule may name its last tick a moment after the job exists.
    let s = until_get(&app, "/v1/schedules/early", |r| {
        r.json["last_tick_ms"] == json!(tick)
    })
    .await
    .json;
    assert_eq!(
        s["last_tick_ms"],
        json!(tick),
        "the tick whose job is pushed"
    );
    assert_eq!(s["next_runs_ms"][0], json!(tick), "still a coming run");
    assert_eq!(s["next_runs_ms"][1], json!(tick + 60_000));

    // The same schedule again: the job stays as it is.
    let r = put(&app, "early", body("one")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["next_runs_ms"][0], json!(tick));
    assert_eq!(
        app.get(&format!("/v1/jobs/{job}")).await.json["body"],
        "one"
    );

    // Another job template: withdrawn, and fired again with it.
    let r = put(&app, "early", body("two")).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = until_job(&app, &job, |r| r.json["body"] == "two").await;
    assert_eq!(
        (&r.json["state"], &r.json["body"]),
        (&json!("delayed"), &json!("two")),
        "{:?}",
        r.json
    );

    // A pause withdraws it; a resume before the tick fires it again.
    let r = app.post("/v1/schedules/early/pause", json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["last_tick_ms"], Value::Null);
    let r = app.get(&format!("/v1/jobs/{job}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.json);
    let r = app.post("/v1/schedules/early/resume", json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = until_job(&app, &job, |r| r.status == StatusCode::OK).await;
    assert_eq!(r.json["state"], "delayed", "{:?}", r.json);

    // Nothing is handed out before the tick.
    assert!(reserve(&app, &["ahead"], 10).await.is_empty());

    // A delete withdraws it.
    let r = app
        .send(Method::DELETE, "/v1/schedules/early", "", None)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = app.get(&format!("/v1/jobs/{job}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.json);
    assert!(
        now_ms() < tick,
        "the test ran within the lead; else redo it slower"
    );
}

backend_tests!(
    a_tick_fired_ahead_is_withdrawn_by_a_pause_a_delete_or_a_changed_replace,
    a_schedule_is_created_read_listed_replaced_paused_resumed_and_deleted,
    bad_schedules_are_refused_naming_the_field_and_nothing_is_stored,
    each_tick_pushes_one_job_named_after_the_tick_and_due_at_it,
);
