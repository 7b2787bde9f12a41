//! The seed-compatible API (STUB).
use super::AppState;
use axum::Router;

pub fn routes() -> Router<AppState> {
    Router::new()
}
