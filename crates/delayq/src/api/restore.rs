//! The journal's routes (docs/journal.md): a job's history, `GET /v1/jobs/{id}/history`,
//! and the restore: `POST /v1/restore` on the /v1 API, and
//! `GET /reStore?expire=true|false` and `GET /reStore/{id}` in the compat API's
//! `{code,message,data}` envelope. Both call [`crate::journal::Journal::restore`] on the
//! server's store, behind the same authentication as every route.
//!
//! Answers: the counts (`restored`, `already_present`, `skipped_overdue`,
//! `skipped_finished`); 409 `restore_running` while another restore runs, 404 when `id` is not
//! in the journal, 503 when the journal or the store cannot be read or written
//! (`store_unavailable`). On a server without `--journal` every route here answers 404
//! `journal_disabled` (the compat routes: code 1 with the same message). Refusals are
//! [`ApiError`]s; the compat routes put their message in the envelope.

use super::AppState;
use super::v1::ApiError;
use crate::job::JobId;
use crate::journal::{Overdue, RestoreCounts, RestoreError, RestoreOptions};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde_json::Value;
use std::collections::HashMap;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/restore", post(restore_v1))
        .route("/reStore", get(restore_compat_all))
        .route("/reStore/{id}", get(restore_compat_one))
        .route("/v1/jobs/{id}/history", get(history))
}

/// One state change of a job in `GET /v1/jobs/{id}/history`.
#[derive(serde::Serialize)]
struct HistoryEntry {
    /// `null` for a push of a new job.
    from: Option<&'static str>,
    to: &'static str,
    at_ms: u64,
    instance: String,
}

/// `GET /v1/jobs/{id}/history`.
#[derive(serde::Serialize)]
struct History {
    history: Vec<HistoryEntry>,
}

/// `GET /v1/jobs/{id}/history`: 200 with the job's journaled state changes, oldest first; 404
/// `journal_disabled` without a journal, 404 `not_found` when the journal has none for it.
async fn history(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<History>, ApiError> {
    let id = JobId::parse(id).map_err(|e| ApiError::from_invalid("id", e))?;
    let journal = state.journal.as_ref().ok_or(ApiError::JournalDisabled)?;
    let events = journal
        .history(&id)
        .await
        .map_err(|e| ApiError::JournalUnavailable(format!("a job's history: {e}")))?;
    if events.is_empty() {
        return Err(ApiError::NotFound);
    }
    let history = events
        .into_iter()
        .map(|e| HistoryEntry {
            from: e.from.map(|s| s.as_str()),
            to: e.to.as_str(),
            at_ms: e.at,
            instance: e.instance,
        })
        .collect();
    Ok(Json(History { history }))
}

/// The options of `POST /v1/restore`'s body: `overdue` (`fire`, the default, or `skip`) and
/// `id` (optional), nothing else.
fn options_v1(body: &[u8]) -> Result<RestoreOptions, ApiError> {
    let map = super::v1::input::object(body, true)?;
    let mut options = RestoreOptions {
        overdue: Overdue::Fire,
        id: None,
    };
    for (key, value) in map {
        match (key.as_str(), value) {
            (_, Value::Null) => {}
            ("overdue", Value::String(s)) if s == "fire" => options.overdue = Overdue::Fire,
            ("overdue", Value::String(s)) if s == "skip" => options.overdue = Overdue::Skip,
            ("overdue", _) => {
                return Err(ApiError::field("overdue", "must be \"fire\" or \"skip\""));
            }
            ("id", Value::String(s)) => {
                options.id = Some(JobId::parse(s).map_err(|e| ApiError::from_invalid("id", e))?);
            }
            ("id", _) => return Err(ApiError::field("id", "must be a string")),
            (other, _) => {
                return Err(ApiError::field(
                    other,
                    "unknown field; expected one of overdue, id",
                ));
            }
        }
    }
    Ok(options)
}

/// Runs a restore.
async fn run(state: &AppState, options: RestoreOptions) -> Result<RestoreCounts, ApiError> {
    let journal = state.journal.as_ref().ok_or(ApiError::JournalDisabled)?;
    let now = state.clock.now();
    // Its own task: a restore that outlasts the request's deadline still runs to its end
    // (and holds off other restores until then).
    let (journal, store) = (journal.clone(), state.store.clone());
    let task = tokio::spawn(async move { journal.restore(store.as_ref(), options, now).await });
    let result = task
        .await
        .unwrap_or_else(|e| Err(RestoreError::Stopped(e.to_string())));
    result.map_err(|e| match e {
        RestoreError::Running => ApiError::RestoreRunning,
        RestoreError::NotFound => ApiError::NotFound,
        RestoreError::Store(e) => ApiError::from(e),
        e => ApiError::JournalUnavailable(format!("restore: {e}")),
    })
}

/// `POST /v1/restore`: 200 with the counts.
async fn restore_v1(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RestoreCounts>, ApiError> {
    let options = options_v1(&body?)?;
    Ok(Json(run(&state, options).await?))
}

/// The compat envelope, HTTP 200: code 0 and the counts, or code 1 and why not.
fn envelope(result: Result<RestoreCounts, String>) -> Response {
    let body = match result {
        Ok(counts) => serde_json::json!({"code": 0, "message": "操作成功", "data": counts}),
        Err(message) => serde_json::json!({"code": 1, "message": message, "data": null}),
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `expire`: `true` (the default) fires overdue jobs, `false` skips them.
fn overdue_of(query: &HashMap<String, String>) -> Result<Overdue, String> {
    match query.get("expire").map(String::as_str) {
        None | Some("true") | Some("1") => Ok(Overdue::Fire),
        Some("false") | Some("0") => Ok(Overdue::Skip),
        Some(_) => Err("expire: must be true or false".into()),
    }
}

async fn restore_compat(
    state: AppState,
    query: HashMap<String, String>,
    id: Option<String>,
) -> Response {
    let overdue = match overdue_of(&query) {
        Ok(o) => o,
        Err(m) => return envelope(Err(m)),
    };
    let id = match id.map(JobId::parse).transpose() {
        Ok(id) => id,
        Err(e) => return envelope(Err(e.to_string())),
    };
    let result = run(&state, RestoreOptions { overdue, id }).await;
    envelope(result.map_err(|e| {
        e.log();
        e.message()
    }))
}

/// `GET /reStore?expire=true|false`: every job.
async fn restore_compat_all(
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    restore_compat(state, query, None).await
}

/// `GET /reStore/{id}?expire=true|false`: one job.
async fn restore_compat_one(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    restore_compat(state, query, Some(id)).await
}
