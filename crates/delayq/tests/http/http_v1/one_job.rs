//! One job by its id: `GET`, `DELETE` and `POST .../finish` of `/v1/jobs/{id}`, and ids in
//! paths (percent-encoded, the id `batch`, invalid ids).

use super::*;

async fn get_is_200_or_404(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "a"})).await;
    assert_eq!(app.get("/v1/jobs/a").await.json["id"], "a");
    assert_error(
        &app.get("/v1/jobs/nope").await,
        StatusCode::NOT_FOUND,
        "not_found",
        None,
    );
}

async fn delete_is_204_then_404(b: &Backend) {
    let app = TestApp::new(b);
    pushed(
        &app,
        json!({"topic": "t", "id": "a", "run_at_ms": FAR_FUTURE}),
    )
    .await;
    let r = delete(&app, "/v1/jobs/a").await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert!(r.raw.is_empty());
    assert_error(
        &delete(&app, "/v1/jobs/a").await,
        StatusCode::NOT_FOUND,
        "not_found",
        None,
    );
    assert_eq!(stats(&app).await["topics"], json!({}));
}

async fn finish_is_204_then_404(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "a"})).await;
    assert_eq!(reserve(&app, &["t"], 1).await.len(), 1);
    let r = app.send(Method::POST, "/v1/jobs/a/finish", "", None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = app.send(Method::POST, "/v1/jobs/a/finish", "", None).await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found", None);
    assert_eq!(stats(&app).await["topics"], json!({}));
}

async fn ids_with_spaces_and_slashes_are_reachable_percent_encoded(b: &Backend) {
    let app = TestApp::new(b);
    let (status, location, job) = push_raw(&app, json!({"topic": "t", "id": "a/b c%d"})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(job["id"], "a/b c%d");
    let location = location.unwrap();
    assert_eq!(location, "/v1/jobs/a%2Fb%20c%25d");
    let r = app.get(&location).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["id"], "a/b c%d");
    // A raw slash ends the path segment: that is another (unknown) route, not this job.
    assert_eq!(
        app.get("/v1/jobs/a/b%20c%25d").await.status,
        StatusCode::NOT_FOUND
    );
    // Operations under the id work too.
    let r = app
        .send(Method::POST, &format!("{location}/bury"), "", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["state"], "dead");
    assert_eq!(delete(&app, &location).await.status, StatusCode::NO_CONTENT);
}

async fn a_job_named_batch_is_reachable_like_any_other(b: &Backend) {
    let app = TestApp::new(b);
    let (status, location, _) = push_raw(&app, json!({"topic": "t", "id": "batch"})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(location.as_deref(), Some("/v1/jobs/batch"));
    assert_eq!(app.get("/v1/jobs/batch").await.json["id"], "batch");
    let r = app
        .send(Method::POST, "/v1/jobs/batch/bury", "", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let r = app
        .send(Method::POST, "/v1/jobs/batch/kick", "", None)
        .await;
    assert_eq!(r.json["state"], "ready");
    assert_eq!(
        delete(&app, "/v1/jobs/batch").await.status,
        StatusCode::NO_CONTENT
    );
    assert_error(
        &app.get("/v1/jobs/batch").await,
        StatusCode::NOT_FOUND,
        "not_found",
        None,
    );
}

async fn invalid_ids_in_paths_are_400_naming_id(b: &Backend) {
    let app = TestApp::new(b);
    let long = "x".repeat(257);
    for path in [
        "/v1/jobs/a%0Ab".to_string(),
        "/v1/jobs/%7F".to_string(),
        format!("/v1/jobs/{long}"),
    ] {
        assert_error(
            &app.get(&path).await,
            StatusCode::BAD_REQUEST,
            "invalid_field",
            Some("id"),
        );
        let r = app
            .send(Method::POST, &format!("{path}/touch"), "", None)
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("id"));
    }
    // Not UTF-8 once decoded.
    let r = app.get("/v1/jobs/%FF").await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("id"));
    let r = app.post("/v1/topics/%FF/kick", json!({"max": 1})).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("topic"));
}

backend_tests!(
    get_is_200_or_404,
    delete_is_204_then_404,
    finish_is_204_then_404,
    ids_with_spaces_and_slashes_are_reachable_percent_encoded,
    a_job_named_batch_is_reachable_like_any_other,
    invalid_ids_in_paths_are_400_naming_id,
);
