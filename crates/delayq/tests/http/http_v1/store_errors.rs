//! A store that fails, on every operation that asks it: 503 `store_unavailable` when it cannot
//! be reached, a plain 500 for data it cannot read, neither leaking the store's details; bad
//! input is refused before the store is asked.

use super::*;

fn failing_app(err: StoreError) -> TestApp {
    TestApp::with_store(Arc::new(FailingStore::new(err)), Config::default())
}

/// One request per operation that reaches the store: each the document says may answer 503
/// `store_unavailable` (tests/http/routes.rs), with a body it accepts. Those of the journal are
/// left out: a test server has none, and they answer that before any store could fail them.
async fn store_requests() -> Vec<(Method, String, String)> {
    let requests: Vec<_> = crate::routes::v1()
        .await
        .into_iter()
        .filter(|r| r.asks_the_store && !r.needs_the_journal)
        .map(|r| (r.method.clone(), r.path("a", "t"), r.body))
        .collect();
    assert!(requests.len() > 10, "{requests:?}");
    requests
}

#[tokio::test]
async fn an_unreachable_store_is_503_store_unavailable() {
    let app = failing_app(StoreError::Unavailable(
        "redis://secret@host: refused".into(),
    ));
    for (method, path, body) in store_requests().await {
        let r = app.send(method.clone(), &path, body, None).await;
        assert_error(
            &r,
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            None,
        );
        let text = String::from_utf8_lossy(&r.raw);
        assert!(
            !text.contains("secret"),
            "{method} {path}: store details stay in the log"
        );
    }
}

#[tokio::test]
async fn corrupt_data_is_a_plain_500() {
    let app = failing_app(StoreError::Corrupt("job:a".into()));
    for (method, path, body) in store_requests().await {
        let r = app.send(method.clone(), &path, body, None).await;
        assert_error(&r, StatusCode::INTERNAL_SERVER_ERROR, "internal", None);
        assert!(
            !String::from_utf8_lossy(&r.raw).contains("job:a"),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn bad_input_is_refused_before_the_store_is_asked() {
    let app = failing_app(StoreError::Unavailable("down".into()));
    let r = app.post("/v1/jobs", json!({"topic": ""})).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some("topic"));
}
