//! The HTTP layer: the seed-compatible API (`compat.rs`), the /v1 API (`v1.rs`, described by
//! `openapi.rs`) and health checks. Only this module knows HTTP; it validates input, calls the
//! store or the dispatcher, and maps results to responses.

pub mod compat;
pub mod openapi;
pub mod v1;

use crate::clock::Clock;
use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::store::Store;
use axum::Router;
use std::sync::Arc;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub dispatch: Arc<Dispatcher>,
    pub clock: Arc<dyn Clock>,
    pub config: Arc<Config>,
}

/// The whole HTTP application.
pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(compat::routes())
        .merge(v1::routes())
        .with_state(state)
}
