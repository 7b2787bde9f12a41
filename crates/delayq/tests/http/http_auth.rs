//! Bearer-token authentication (api/auth.rs), endpoint by endpoint: with tokens configured,
//! every route of docs/api.md and docs/compat.md, `/readyz`, `/metrics` and `/v1/openapi.json`
//! refuse a request without a token, with a wrong one, or with the right one under another
//! scheme (401, `WWW-Authenticate: Bearer`, the body of the path's API), and serve it with a
//! right one; `/healthz` and the dashboard's static assets (`/ui/...`) never ask. With no token
//! configured, nothing asks. Also over a real socket with the Rust client. Authentication does not depend on the store, so the memory
//! store serves.

use crate::support;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use delayq::config::{AuthToken, Config};
use delayq::store::memory::MemoryStore;
use serde_json::Value;
use std::sync::Arc;
use support::app::{LiveServer, TestApp};
use support::backends::Backend;
use tower::ServiceExt;

const TOKEN: &str = "s3cret-token-0123456789";
const OTHER_TOKEN: &str = "another-token-abcdefgh";

/// Every endpoint but `/healthz`: method, path, a body it accepts (tests/http/routes.rs: each
/// documented operation and each compat route), and a path that is no route at all.
async fn endpoints() -> Vec<(String, String, String)> {
    let mut endpoints = crate::routes::authenticated().await;
    // No such route: still a 401 first, so an unauthenticated client learns nothing.
    endpoints.push(("GET".into(), "/no/such/route".into(), String::new()));
    endpoints
}

fn is_compat_path(path: &str) -> bool {
    crate::routes::UNDOCUMENTED
        .iter()
        .any(|u| u.compat && u.path == path)
}

fn with_tokens(tokens: &[&str]) -> Config {
    Config {
        auth_tokens: tokens.iter().map(|t| AuthToken::from(*t)).collect(),
        ..Config::default()
    }
}

/// Status, headers and JSON body of one request with an optional `Authorization` value.
async fn call(
    app: &TestApp,
    method: &str,
    path: &str,
    body: &str,
    authorization: Option<&str>,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    let mut req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(path);
    if let Some(a) = authorization {
        req = req.header(header::AUTHORIZATION, a);
    }
    let resp = app
        .router
        .clone()
        .oneshot(req.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let raw = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let json = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    (status, headers, json)
}

/// Asserts a 401 in the shape of the path's API.
fn assert_unauthorized(
    (status, headers, body): &(StatusCode, axum::http::HeaderMap, Value),
    what: &str,
) {
    assert_eq!(*status, StatusCode::UNAUTHORIZED, "{what}: {body}");
    assert_eq!(
        headers.get(header::WWW_AUTHENTICATE).unwrap(),
        "Bearer",
        "{what}"
    );
    let path = what.split_whitespace().nth(1).unwrap();
    let expected = if is_compat_path(path) {
        serde_json::json!({"code": 1, "message": "missing or invalid bearer token", "data": null})
    } else {
        serde_json::json!({"error": {
            "code": "unauthorized", "field": null, "message": "missing or invalid bearer token"
        }})
    };
    assert_eq!(*body, expected, "{what}");
}

#[tokio::test]
async fn every_endpoint_refuses_a_missing_token() {
    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, with_tokens(&[TOKEN]));
    for (method, path, body) in &endpoints().await {
        let what = format!("{method} {path}");
        assert_unauthorized(&call(&app, method, path, body, None).await, &what);
    }
}

#[tokio::test]
async fn every_endpoint_refuses_a_wrong_token() {
    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, with_tokens(&[TOKEN]));
    let wrong = [
        format!("Bearer {OTHER_TOKEN}"),
        format!("Bearer {TOKEN}x"),
        format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]),
        "Bearer ".to_string(),
    ];
    for (method, path, body) in &endpoints().await {
        for auth in &wrong {
            let what = format!("{method} {path} with {auth:?}");
            assert_unauthorized(&call(&app, method, path, body, Some(auth)).await, &what);
        }
    }
}

#[tokio::test]
async fn every_endpoint_refuses_the_right_token_under_another_scheme() {
    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, with_tokens(&[TOKEN]));
    let wrong_scheme = [
        format!("Basic {TOKEN}"),
        format!("Token {TOKEN}"),
        TOKEN.to_string(),
    ];
    for (method, path, body) in &endpoints().await {
        for auth in &wrong_scheme {
            let what = format!("{method} {path} with {auth:?}");
            assert_unauthorized(&call(&app, method, path, body, Some(auth)).await, &what);
        }
    }
}

#[tokio::test]
async fn every_endpoint_serves_a_right_token() {
    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, with_tokens(&[OTHER_TOKEN, TOKEN]));
    for auth in [format!("Bearer {TOKEN}"), format!("bearer {OTHER_TOKEN}")] {
        for (method, path, body) in &endpoints().await {
            let (status, _, json) = call(&app, method, path, body, Some(&auth)).await;
            let what = format!("{method} {path}");
            assert_ne!(status, StatusCode::UNAUTHORIZED, "{what}: {json}");
            if *path == "/no/such/route" {
                assert_eq!(status, StatusCode::NOT_FOUND, "{what}");
            } else {
                // Served: the handler answered (404 not_found / 409 are the job's business).
                assert!(status.as_u16() < 500, "{what}: {status} {json}");
            }
        }
    }
}

#[tokio::test]
async fn healthz_needs_no_token() {
    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, with_tokens(&[TOKEN]));
    for auth in [None, Some("Bearer wrong-wrong-wrong-wrong")] {
        let (status, _, json) = call(&app, "GET", "/healthz", "", auth).await;
        assert_eq!(status, StatusCode::OK, "{auth:?}");
        assert_eq!(json["status"], "ok");
    }
    let (status, _, _) = call(&app, "HEAD", "/healthz", "", None).await;
    assert_eq!(status, StatusCode::OK);
}

/// The dashboard's static assets hold no data: served without a token (GET and HEAD only), with
/// their content type and ETag; the data the page shows needs the token (`endpoints`).
#[tokio::test]
async fn dashboard_assets_need_no_token() {
    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, with_tokens(&[TOKEN]));
    for (path, content_type) in [
        ("/ui/", "text/html; charset=utf-8"),
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/app.css", "text/css; charset=utf-8"),
    ] {
        for method in ["GET", "HEAD"] {
            let (status, headers, _) = call(&app, method, path, "", None).await;
            assert_eq!(status, StatusCode::OK, "{method} {path}");
            assert_eq!(headers[header::CONTENT_TYPE], content_type, "{path}");
            assert!(headers.contains_key(header::ETAG), "{path}");
        }
        let (status, _, _) = call(&app, "POST", path, "", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "POST {path}");
    }
    let (status, headers, _) = call(&app, "GET", "/ui", "", None).await;
    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(headers[header::LOCATION], "/ui/");
    // An unknown asset is a plain 404: there is nothing behind /ui/ to protect.
    let (status, _, _) = call(&app, "GET", "/ui/nothing.js", "", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn without_tokens_nothing_needs_a_token() {
    let b = Backend::memory().await;
    let app = TestApp::new(&b);
    for (method, path, body) in &endpoints().await {
        let (status, headers, json) = call(&app, method, path, body, None).await;
        let what = format!("{method} {path}");
        assert_ne!(status, StatusCode::UNAUTHORIZED, "{what}: {json}");
        assert!(headers.get(header::WWW_AUTHENTICATE).is_none(), "{what}");
    }
}

#[tokio::test]
async fn refused_requests_change_nothing() {
    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, with_tokens(&[TOKEN]));
    let (status, _, _) = call(&app, "POST", "/v1/jobs", r#"{"topic":"t","id":"x"}"#, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = call(
        &app,
        "POST",
        "/push",
        r#"{"topic":"t","id":"y","delay":0,"ttr":10}"#,
        Some("Bearer nope-nope-nope-nope"),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let stats = b.store.stats().await.unwrap();
    assert!(stats.topics.is_empty(), "{stats:?}");
}

/// The server over a real socket, with the Rust client: without a token it gets the 401 as an
/// API error, with one it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_with_token_is_served_and_without_is_refused() {
    let LiveServer {
        base_url: base,
        stop,
        task: server,
        ..
    } = LiveServer::start(Arc::new(MemoryStore::new()), with_tokens(&[TOKEN])).await;

    let anonymous = delayq_client::Client::new(&base).unwrap();
    let e = anonymous.stats().await.unwrap_err();
    assert_eq!((e.status(), e.code()), (Some(401), Some("unauthorized")));
    assert!(anonymous.health().await.is_ok(), "healthz needs no token");

    let client = delayq_client::Client::new(&base).unwrap().with_token(TOKEN);
    client
        .push(delayq_client::NewJob::new("t", "b").id("j"))
        .await
        .unwrap();
    assert_eq!(client.get("j").await.unwrap().id, "j");
    assert!(client.ready().await.is_ok());

    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_compat_refusal_has_the_envelope_keys_in_the_documented_order() {
    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, with_tokens(&[TOKEN]));
    for path in ["/push", "/pop", "/finish", "/delete", "/get", "/reStore/s1"] {
        let req = Request::builder()
            .method(Method::POST)
            .uri(path)
            .body(Body::from(r#"{"id":"s1"}"#))
            .unwrap();
        let resp = app.router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{path}");
        let raw = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(
            std::str::from_utf8(&raw).unwrap(),
            r#"{"code":1,"message":"missing or invalid bearer token","data":null}"#,
            "{path}: docs/compat.md gives code, message, data"
        );
    }
}
