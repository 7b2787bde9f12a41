//! The HTTP layer: the compat API (`compat.rs`), the /v1 API (`v1.rs`, described by
//! `openapi/`), the web dashboard's assets (`ui.rs`), health checks and Prometheus metrics
//! (here). Only this module knows HTTP; it
//! validates input, calls the store or the dispatcher, and maps results to responses.
//!
//! Cross-cutting layers are applied here, once, around the whole router ([`router`]): the
//! request body limit ([`request_body_limit`], enforced by axum's `DefaultBodyLimit`, so body
//! extractors reject oversized requests: /v1 answers 413, the compat API its code-1 reply),
//! bearer-token authentication when tokens are configured (`auth.rs`), before it the host check
//! and the refusal of cross-site changes (`origin.rs`), and the request deadline (`front.rs`);
//! inside them, on the routes, `TraceLayer` when its log lines are asked for. Refusals made by these layers, outside any handler, have the error body of
//! the API the path belongs to ([`refusal`]).

pub mod auth;
pub mod backup;
pub mod compat;
mod front;
pub mod openapi;
pub mod origin;
pub mod restore;
pub mod ui;
pub mod v1;

use crate::clock::Clock;
use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::journal::Journal;
use crate::metrics::{self, Metrics};
use crate::store::Store;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;
use std::time::Duration;
use tower::Layer;
use tower_http::trace::TraceLayer;

/// What every handler can reach: one shared [`Parts`], so the clone axum makes for each
/// extractor and middleware of a request is one reference count, not one per part. Built by
/// the server (`server::App`), which wires the parts together; nothing here builds them.
#[derive(Clone)]
pub struct AppState(Arc<Parts>);

impl AppState {
    pub fn new(parts: Parts) -> AppState {
        AppState(Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.0
    }
}

/// The parts of an [`AppState`].
pub struct Parts {
    /// The store, journaled when there is a journal and counted in `metrics`
    /// (`metrics::Metered`).
    pub store: Arc<dyn Store>,
    pub dispatch: Arc<Dispatcher>,
    pub clock: Arc<dyn Clock>,
    pub config: Arc<Config>,
    pub metrics: Arc<Metrics>,
    /// The firing task of recurring schedules (woken when one is created or changed here).
    pub scheduler: Arc<crate::scheduler::Scheduler>,
    /// The recovery journal (`--journal`), which the store also writes to; `None` without it.
    pub journal: Option<Journal>,
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

/// The whole HTTP application: the routes, behind the request body limit, behind
/// [`front::Front`] (the guard, the tokens and the deadline).
pub type Http = front::Front<<DefaultBodyLimit as Layer<Router>>::Service>;

/// The whole HTTP application ([`Http`]). The body limit and the front wrap the router once,
/// not each of its routes as `Router::layer` would: every layer given to `Router::layer` costs
/// each request a boxed clone of its route and a boxed future.
pub fn router(state: AppState) -> Http {
    let limit = request_body_limit(&state.config);
    let deadlines = front::Deadlines::new(&state.config);
    let tokens = auth::Tokens::new(&state.config.auth_tokens);
    let guard = origin::Guard::new(&state.config);
    let routes = Router::new()
        .merge(compat::routes())
        .merge(v1::routes())
        .merge(restore::routes())
        .merge(backup::routes())
        .merge(ui::routes())
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(serve_metrics))
        .with_state(state);
    // A span and a line per request that reaches a route (`RUST_LOG=tower_http=debug`), only
    // when asked for: it costs every request about 2,000 instructions even when nothing is
    // logged. The handlers log the causes of their 5xx answers themselves, and the front its
    // refusals.
    let routes = if tracing::enabled!(target: "tower_http::trace", tracing::Level::DEBUG) {
        routes.layer(TraceLayer::new_for_http())
    } else {
        routes
    };
    let front = front::FrontLayer {
        guard,
        tokens,
        deadlines,
    };
    front.layer(DefaultBodyLimit::max(limit).layer(routes))
}

/// The compat API's paths: refusals there have its `{"code","message","data"}` body.
const COMPAT_PATHS: &[&str] = &["/push", "/pop", "/finish", "/delete", "/get", "/reStore"];

/// The long-poll paths: they may wait up to `max_wait` for a job before answering.
const LONG_POLL_PATHS: &[&str] = &["/pop", "/v1/reserve"];

/// A refusal made outside the handlers (401, 403, 421, request timeout), in the shape of the path's API:
/// the compat envelope `{"code":1,"message":...,"data":null}` on the compat paths, else the
/// /v1 error body `{"error":{"code","field":null,"message"}}`. Both with `status`: a compat client
/// gets a non-200 here, where the original had no such refusal at all.
pub(crate) fn refusal(path: &str, status: StatusCode, code: &str, message: &str) -> Response {
    if COMPAT_PATHS.contains(&path) || path.starts_with("/reStore/") {
        // A struct, not `json!`: its map would sort the keys, and the envelope's order is
        // code, message, data, as on every other compat answer.
        #[derive(serde::Serialize)]
        struct Envelope<'a> {
            code: u8,
            message: &'a str,
            data: Option<()>,
        }
        let body = Envelope {
            code: 1,
            message,
            data: None,
        };
        (status, Json(body)).into_response()
    } else {
        let body = serde_json::json!({"error": {"code": code, "field": null, "message": message}});
        (status, Json(body)).into_response()
    }
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

/// `GET /metrics`: the Prometheus exposition of [`crate::metrics`], in OpenMetrics when
/// `Accept` asks for it, else in the text format 0.0.4 ([`metrics::Format::negotiate`]).
async fn serve_metrics(State(state): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    let accept = headers.get_all(header::ACCEPT);
    let format = metrics::Format::negotiate(accept.iter().filter_map(|v| v.to_str().ok()));
    let text = state
        .metrics
        .render(state.store.as_ref(), state.dispatch.waiters(), format)
        .await;
    let headers = [
        (header::CONTENT_TYPE, format.content_type()),
        (header::VARY, "accept"),
    ];
    (headers, text).into_response()
}
