//! The /v1 API (STUB).
use super::AppState;
use axum::Router;

pub fn routes() -> Router<AppState> {
    Router::new()
}
