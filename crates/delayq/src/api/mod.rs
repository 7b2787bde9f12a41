//! The HTTP layer: the seed-compatible API (`compat.rs`), the /v1 API (`v1.rs`) and health
//! checks. Only this module knows HTTP; it validates input, calls the store or the dispatcher,
//! and maps results to responses.

use crate::clock::Clock;
use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::store::Store;
use std::sync::Arc;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub dispatch: Arc<Dispatcher>,
    pub clock: Arc<dyn Clock>,
    pub config: Arc<Config>,
}
