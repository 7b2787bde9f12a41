//! The OpenAPI document describes the server that serves it: a job's `publish` only on a server
//! with RabbitMQ (`--amqp`), so that every request the document allows the server accepts
//! (.ci/schemathesis runs against both). The journal's routes, listed only with a journal, are
//! tested in tests/journal/http.rs.

use crate::support::app::TestApp;
use axum::http::StatusCode;
use delayq::config::Config;
use delayq::store::memory::MemoryStore;
use serde_json::{Value, json};
use std::sync::Arc;

async fn document(app: &TestApp) -> Value {
    let r = app.get("/v1/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    r.json
}

#[tokio::test]
async fn a_default_servers_document_has_no_publish_and_the_server_refuses_one() {
    let app = TestApp::with_store(Arc::new(MemoryStore::new()), Config::default());
    let doc = document(&app).await;
    let new_job = &doc["components"]["schemas"]["NewJob"];
    assert_eq!(new_job["additionalProperties"], false);
    assert!(new_job["properties"]["topic"].is_object());
    assert!(new_job["properties"].get("publish").is_none(), "{new_job}");
    assert!(doc["components"]["schemas"].get("NewPublish").is_none());

    let r = app
        .post(
            "/v1/jobs",
            json!({"topic": "t", "publish": {"routing_key": "k"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.json);
    assert_eq!(r.json["error"]["field"], "publish");
}

#[tokio::test]
async fn a_server_with_amqp_describes_publish() {
    let config = Config {
        amqp: Some("amqp://guest:guest@127.0.0.1:5672/%2f".into()),
        ..Config::default()
    };
    let app = TestApp::with_store(Arc::new(MemoryStore::new()), config);
    let doc = document(&app).await;
    let new_job = &doc["components"]["schemas"]["NewJob"];
    assert_eq!(
        new_job["properties"]["publish"]["oneOf"][0]["$ref"],
        "#/components/schemas/NewPublish"
    );
    let publish = &doc["components"]["schemas"]["NewPublish"];
    assert_eq!(publish["required"], json!(["routing_key"]));
}
