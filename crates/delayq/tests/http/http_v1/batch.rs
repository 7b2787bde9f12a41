//! The batch operations: `POST /v1/jobs/batch` (an outcome per job, all or nothing on bad
//! input) and `POST /v1/finish` (finished count and missing ids).

use super::*;

async fn batch_push_reports_created_and_exists_per_job(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "b"})).await;
    let r = app
        .post(
            "/v1/jobs/batch",
            json!({"jobs": [
                {"topic": "t", "id": "a"},
                {"topic": "t", "id": "b", "body": "ignored"},
                {"topic": "u", "id": "c", "run_at_ms": FAR_FUTURE},
                {"topic": "u"}
            ]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let results = r.json["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    assert_eq!(results[0], json!({"id": "a", "status": "created"}));
    assert_eq!(results[1], json!({"id": "b", "status": "exists"}));
    assert_eq!(results[2], json!({"id": "c", "status": "created"}));
    assert_eq!(results[3]["status"], "created");
    assert!(uuid_v7_shaped(results[3]["id"].as_str().unwrap()));
    assert_eq!(
        app.get("/v1/jobs/b").await.json["body"],
        "",
        "b was not replaced"
    );
    let s = stats(&app).await;
    assert_eq!(s["topics"]["t"]["ready"], 2);
    assert_eq!(s["topics"]["u"]["ready"], 1);
    assert_eq!(s["topics"]["u"]["delayed"], 1);
}

async fn batch_push_with_replace_reports_replaced(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "a", "body": "old"})).await;
    let r = app
        .post(
            "/v1/jobs/batch",
            json!({"replace": true, "jobs": [
                {"topic": "t", "id": "a", "body": "new", "replace": true},
                {"topic": "t", "id": "b"}
            ]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(
        r.json["results"],
        json!([{"id": "a", "status": "replaced"}, {"id": "b", "status": "created"}])
    );
    assert_eq!(app.get("/v1/jobs/a").await.json["body"], "new");
}

async fn batch_with_one_invalid_job_is_400_naming_it_and_pushes_nothing(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    let before = stats(&app).await;
    let cases = [
        (
            json!({"jobs": [{"topic": "t"}, {"topic": "t", "ttr_ms": 0}]}),
            "jobs[1].ttr_ms",
        ),
        (
            json!({"jobs": [{"topic": "t"}, {"topic": "t"}, {"id": "x"}]}),
            "jobs[2].topic",
        ),
        (
            json!({"jobs": [{"topic": "t", "delay": 5}]}),
            "jobs[0].delay",
        ),
        (json!({"jobs": ["t"]}), "jobs[0]"),
        (json!({"jobs": {"topic": "t"}}), "jobs"),
        (json!({}), "jobs"),
        (json!({"jobs": [], "replace": 1}), "replace"),
        (
            json!({"jobs": [{"topic": "t", "replace": true}]}),
            "jobs[0].replace",
        ),
        (
            json!({"jobs": [{"topic": "t"}, {"topic": "t"}, {"topic": "t"}, {"topic": "t"}]}),
            "jobs",
        ),
    ];
    for (body, field) in cases {
        let r = app.post("/v1/jobs/batch", body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
        assert_eq!(stats(&app).await, before, "{body}");
    }
    let r = app
        .post(
            "/v1/jobs/batch",
            json!({"jobs": [{"topic": "t"}, {"topic": "t", "body": "x".repeat(17)}]}),
        )
        .await;
    assert_error(
        &r,
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        Some("jobs[1].body"),
    );
    assert_eq!(stats(&app).await, before);
    // An empty batch is a no-op, not an error.
    let r = app.post("/v1/jobs/batch", json!({"jobs": []})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json, json!({"results": []}));
}

async fn batch_finish_counts_finished_and_lists_missing_ids(b: &Backend) {
    let app = TestApp::new(b);
    for id in ["a", "b", "c"] {
        pushed(&app, json!({"topic": "t", "id": id})).await;
    }
    reserve(&app, &["t"], 2).await;
    let r = app
        .post("/v1/finish", json!({"ids": ["a", "x", "c", "a", "y"]}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json, json!({"finished": 2, "missing": ["x", "y"]}));
    assert_eq!(
        stats(&app).await["topics"]["t"],
        json!({"delayed": 0, "ready": 0, "reserved": 1, "dead": 0})
    );
    let r = app.post("/v1/finish", json!({"ids": []})).await;
    assert_eq!(r.json, json!({"finished": 0, "missing": []}));
}

async fn batch_finish_refuses_invalid_requests(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    pushed(&app, json!({"topic": "t", "id": "a"})).await;
    let before = stats(&app).await;
    for (body, field) in [
        (json!({}), "ids"),
        (json!({"ids": "a"}), "ids"),
        (json!({"ids": ["a", "b", "c", "d"]}), "ids"),
        (json!({"ids": ["a", ""]}), "ids[1]"),
        (json!({"ids": ["a", "b\u{0}"]}), "ids[1]"),
        (json!({"ids": ["a", 1]}), "ids[1]"),
        (json!({"id": ["a"]}), "id"),
    ] {
        let r = app.post("/v1/finish", body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
        assert_eq!(stats(&app).await, before, "{body}");
    }
}

backend_tests!(
    batch_push_reports_created_and_exists_per_job,
    batch_push_with_replace_reports_replaced,
    batch_with_one_invalid_job_is_400_naming_it_and_pushes_nothing,
    batch_finish_counts_finished_and_lists_missing_ids,
    batch_finish_refuses_invalid_requests,
);
