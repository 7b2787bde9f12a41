//! The HTTP layer: the seed-compatible API (`compat.rs`), the /v1 API (`v1.rs`, described by
//! `openapi.rs`) and health checks (here). Only this module knows HTTP; it validates input,
//! calls the store or the dispatcher, and maps results to responses.
//!
//! Cross-cutting layers are applied here, once, for every route: the request body limit
//! ([`request_body_limit`], enforced by axum's `DefaultBodyLimit`, so body extractors reject
//! oversized requests: /v1 answers 413, the seed API its code-1 reply) and `TraceLayer`.

pub mod compat;
pub mod openapi;
pub mod v1;

use crate::clock::Clock;
use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::store::Store;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;
use std::time::Duration;
use tower_http::trace::TraceLayer;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub dispatch: Arc<Dispatcher>,
    pub clock: Arc<dyn Clock>,
    pub config: Arc<Config>,
}

/// How long `/readyz` waits for the store's answer before calling it unavailable.
const READY_PING_TIMEOUT: Duration = Duration::from_secs(2);

/// Room on top of `max_body_bytes` for the JSON around a job body: field names, other fields,
/// and escaping (a body of quotes or control characters grows when escaped).
const REQUEST_BODY_ROOM: usize = 64 * 1024;

/// The largest request body any route reads: twice `max_body_bytes` (escaping) plus
/// [`REQUEST_BODY_ROOM`]. A job body within `max_body_bytes` always fits unless most of it
/// needs `\uXXXX` escapes; a larger request is refused before it is buffered whole.
pub fn request_body_limit(config: &Config) -> usize {
    config
        .max_body_bytes
        .saturating_mul(2)
        .saturating_add(REQUEST_BODY_ROOM)
}

/// The whole HTTP application.
pub fn router(state: AppState) -> Router {
    let limit = request_body_limit(&state.config);
    Router::new()
        .merge(compat::routes())
        .merge(v1::routes())
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
        .layer(DefaultBodyLimit::max(limit))
        .layer(TraceLayer::new_for_http())
}

/// The body of `/healthz` and `/readyz`, fields in this order.
#[derive(serde::Serialize)]
struct Health {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    store: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// 200 `{"status":"ok"}` while the process serves HTTP at all.
async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        store: None,
        error: None,
    })
}

/// 200 `{"status":"ok","store":kind}` when the store answers a ping, else 503
/// `{"status":"unavailable","store":kind,"error":...}`.
async fn readyz(State(state): State<AppState>) -> Response {
    let store = Some(state.store.kind());
    let error = match tokio::time::timeout(READY_PING_TIMEOUT, state.store.ping()).await {
        Ok(Ok(())) => {
            let ok = Health {
                status: "ok",
                store,
                error: None,
            };
            return Json(ok).into_response();
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {} s", READY_PING_TIMEOUT.as_secs()),
    };
    let unavailable = Health {
        status: "unavailable",
        store,
        error: Some(error),
    };
    (StatusCode::SERVICE_UNAVAILABLE, Json(unavailable)).into_response()
}
