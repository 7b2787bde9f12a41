//! The HTTP layer: the compat API (`compat.rs`), the /v1 API (`v1.rs`, described by
//! `openapi/`), the web dashboard's assets (`ui.rs`), health checks and Prometheus metrics
//! (here). Only this module knows HTTP; it
//! validates input, calls the store or the dispatcher, and maps results to responses.
//!
//! Cross-cutting layers are applied here, once, for every route: the request body limit
//! ([`request_body_limit`], enforced by axum's `DefaultBodyLimit`, so body extractors reject
//! oversized requests: /v1 answers 413, the compat API its code-1 reply), bearer-token
//! authentication when tokens are configured (`auth.rs`), the request deadline ([`deadline`])
//! and `TraceLayer`. Refusals made by these layers, outside any handler, have the error body of
//! the API the path belongs to ([`refusal`]).

pub mod auth;
pub mod compat;
pub mod openapi;
pub mod restore;
pub mod ui;
pub mod v1;

use crate::amqp::{AmqpOptions, Broker};
use crate::callback::{CallbackOptions, Deliverer};
use crate::clock::Clock;
use crate::config::Config;
use crate::dispatch::{DispatchOptions, Dispatcher};
use crate::journal::{Journal, Journaled};
use crate::metrics::{self, Metered, Metrics};
use crate::store::Store;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;
use std::time::Duration;
use tower_http::trace::TraceLayer;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The store, counted in `metrics` ([`Metered`]).
    pub store: Arc<dyn Store>,
    pub dispatch: Arc<Dispatcher>,
    pub clock: Arc<dyn Clock>,
    pub config: Arc<Config>,
    pub metrics: Arc<Metrics>,
    /// The recovery journal (`--journal`), which the store also writes to; `None` without it.
    pub journal: Option<Journal>,
    /// Push delivery of callback jobs (not started; `server::run` starts it beside the
    /// dispatcher).
    pub callbacks: Arc<Deliverer>,
    /// The RabbitMQ bridge (`--amqp`; not started: `server::run` starts it); `None` without
    /// it.
    pub amqp: Option<Arc<Broker>>,
}

impl AppState {
    /// The state of a server over `store`: the store wrapped in its metrics, and a dispatcher
    /// (not started) over the wrapped store, so long polls and the timer are counted too.
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, config: Config) -> AppState {
        AppState::with_journal(store, clock, config, None)
    }

    /// [`AppState::new`] with a journal: the store journaled ([`Journaled`]) inside its
    /// metrics, so a call the journal refuses is counted as a store error.
    pub fn with_journal(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: Config,
        journal: Option<Journal>,
    ) -> AppState {
        let mut metrics = Metrics::new(store.kind());
        let store: Arc<dyn Store> = match &journal {
            Some(j) => {
                metrics.register_journal(j.gauges());
                Arc::new(Journaled::new(store, j.clone()))
            }
            None => store,
        };
        let metrics = Arc::new(metrics);
        let store: Arc<dyn Store> = Arc::new(Metered::new(store, metrics.clone()));
        let options = DispatchOptions {
            max_waiters: config.max_waiters,
            ..DispatchOptions::default()
        };
        let dispatch = Dispatcher::with_options(store.clone(), clock.clone(), options);
        let amqp = config.amqp.as_ref().map(|url| {
            Broker::new(
                AmqpOptions {
                    url: url.clone(),
                    intake: config.amqp_intake.clone(),
                    publish_timeout: Duration::from_secs(config.amqp_publish_timeout_secs),
                    prefetch: config.amqp_prefetch,
                    max_body_bytes: config.max_body_bytes,
                },
                metrics.clone(),
            )
        });
        let callback_options = CallbackOptions {
            amqp: amqp.clone(),
            secrets: config.callback_secrets.clone(),
            allow: config.callback_allow.clone(),
            max_in_flight: config.callback_max_in_flight,
            max_in_flight_per_host: config.callback_max_in_flight_per_host,
        };
        // Building the HTTP client fails only without a TLS provider, and the build links
        // rustls with ring (tested in callback/call.rs).
        let callbacks = Deliverer::new(
            store.clone(),
            clock.clone(),
            metrics.clone(),
            callback_options,
        )
        .expect("the callback HTTP client builds");
        AppState {
            store,
            dispatch,
            clock,
            config: Arc::new(config),
            metrics,
            journal,
            callbacks: Arc::new(callbacks),
            amqp,
        }
    }
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
    let deadlines = Deadlines::new(&state.config);
    let tokens = auth::Tokens::new(&state.config.auth_tokens);
    let mut app = Router::new()
        .merge(compat::routes())
        .merge(v1::routes())
        .merge(restore::routes())
        .merge(ui::routes())
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(serve_metrics))
        .with_state(state)
        .layer(DefaultBodyLimit::max(limit));
    if let Some(tokens) = tokens {
        app = app.layer(middleware::from_fn_with_state(tokens, auth::require_bearer));
    }
    app.layer(middleware::from_fn_with_state(deadlines, deadline))
        .layer(TraceLayer::new_for_http())
}

/// The compat API's paths: refusals there have its `{"code","message","data"}` body.
const COMPAT_PATHS: &[&str] = &["/push", "/pop", "/finish", "/delete", "/get", "/reStore"];

/// The long-poll paths: they may wait up to `max_wait` for a job before answering.
const LONG_POLL_PATHS: &[&str] = &["/pop", "/v1/reserve"];

/// A refusal made outside the handlers (401, request timeout), in the shape of the path's API:
/// the compat envelope `{"code":1,"message":...,"data":null}` on the compat paths, else the
/// /v1 error body `{"error":{"code","field":null,"message"}}`. Both with `status`: a compat client
/// gets a non-200 here, where the original had no such refusal at all.
pub(crate) fn refusal(path: &str, status: StatusCode, code: &str, message: &str) -> Response {
    let body = if COMPAT_PATHS.contains(&path) || path.starts_with("/reStore/") {
        serde_json::json!({"code": 1, "message": message, "data": null})
    } else {
        serde_json::json!({"error": {"code": code, "field": null, "message": message}})
    };
    (status, Json(body)).into_response()
}

/// How long a request may take before [`deadline`] answers it 503.
#[derive(Clone, Copy)]
struct Deadlines {
    /// `request_timeout`.
    request: Duration,
    /// `request_timeout + max_wait`: a long poll waits at most `max_wait` (reserve refuses a
    /// longer `timeout_ms`, compat `/pop` caps it), then has the ordinary time for the rest.
    long_poll: Duration,
}

impl Deadlines {
    fn new(config: &Config) -> Deadlines {
        let request = Duration::from_secs(config.request_timeout_secs);
        Deadlines {
            request,
            long_poll: request + Duration::from_secs(config.max_wait_secs),
        }
    }
}

/// Middleware: answers 503 `timeout` when the handler (reading the body included) has not
/// produced a response within the path's deadline. The handler is dropped at that point: an
/// operation may or may not have taken effect, as with any answer that never arrives. A job
/// reserved by a dropped long poll is handed out again after its TTR.
async fn deadline(State(d): State<Deadlines>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let limit = if LONG_POLL_PATHS.contains(&path.as_str()) {
        d.long_poll
    } else {
        d.request
    };
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => {
            tracing::warn!(%path, timeout = ?limit, "request timed out");
            let message = format!(
                "the request took longer than {} s and was abandoned; it may or may not have \
                 taken effect",
                limit.as_secs()
            );
            refusal(&path, StatusCode::SERVICE_UNAVAILABLE, "timeout", &message)
        }
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

/// `GET /metrics`: the Prometheus exposition (OpenMetrics text) of [`crate::metrics`].
async fn serve_metrics(State(state): State<AppState>) -> Response {
    let text = state
        .metrics
        .render(state.store.as_ref(), state.dispatch.waiters())
        .await;
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response()
}
