//! `ApiError`: every way a /v1 request can be refused, and how each one is rendered.
//!
//! The body is always `{"error": {"code", "field", "message"}}` (plus `"state"` for
//! `wrong_state`), as docs/api.md specifies. Bad input is a 4xx naming the field; store trouble
//! is a 503 (unreachable) or a plain 500 (corrupt data), whose details go to the log, not to the
//! client. This module only renders: deciding which error applies is the handlers' job.

use crate::dispatch::DispatchError;
use crate::job::{InvalidField, JobState};
use crate::store::StoreError;
use axum::Json;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// A refused /v1 request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// 400 `invalid_field`: a field is missing, has the wrong type or is out of range. `field`
    /// is the field's full name (`jobs[3].topic` in batches).
    InvalidField { field: String, message: String },
    /// 400 `invalid_json`: the body is not JSON, or not a JSON object.
    InvalidJson(String),
    /// 404 `not_found`: no job with that id.
    NotFound,
    /// 404 `not_found`: no recurring schedule with that id.
    ScheduleNotFound,
    /// 404 `journal_disabled`: a journal route (a job's history, the restore) on a server
    /// without a journal (`--journal`).
    JournalDisabled,
    /// 409 `exists`: a push without `replace` named an id that exists.
    Exists,
    /// 409 `wrong_state`: the job's state does not allow the operation; the body also has
    /// `state`.
    WrongState(JobState),
    /// 413 `too_large`: the request body, or one job's `body` (then `field` names it), is over
    /// the configured limit.
    TooLarge {
        field: Option<String>,
        message: String,
    },
    /// 409 `restore_running`: another restore runs (here or on a server sharing the journal).
    RestoreRunning,
    /// 409 `backup_unsupported`: `POST /v1/backup` on a store without an online backup (its
    /// kind: `redis`, `memory`).
    BackupUnsupported(&'static str),
    /// 409 `backup_disabled`: `POST /v1/backup` on a server without `backup_dir`.
    BackupDisabled,
    /// 409 `backup_running`: another backup of this store runs.
    BackupRunning,
    /// 500 `backup_failed`: the copy could not be written. The message names the file and
    /// the error: the operator asking for the backup needs them.
    BackupFailed(String),
    /// 503 `store_unavailable`: the store could not be reached. The detail is logged only.
    StoreUnavailable(String),
    /// 503 `store_unavailable`: the journal could not be read or written (a history, a
    /// restore). The detail is logged only.
    JournalUnavailable(String),
    /// 503 `too_many_waiters`: the request would wait, and `max_waiters` requests already
    /// are. Nothing was reserved; retry later or reserve without waiting.
    TooManyWaiters(String),
    /// 500 `internal`: something that is not the client's fault (corrupt stored data). The
    /// detail is logged only.
    Internal(String),
}

impl ApiError {
    /// An `invalid_field` error; the message is prefixed with the field's name.
    pub fn field(field: impl Into<String>, message: impl AsRef<str>) -> ApiError {
        let field = field.into();
        let message = format!("{field}: {}", message.as_ref());
        ApiError::InvalidField { field, message }
    }

    /// A `too_large` error about one job body.
    pub fn body_too_large(field: impl Into<String>, len: usize, limit: usize) -> ApiError {
        let field = field.into();
        ApiError::TooLarge {
            message: format!("{field}: is {len} bytes, more than the limit of {limit}"),
            field: Some(field),
        }
    }

    /// Re-labels a validation error of job.rs under the /v1 name of its field.
    pub fn from_invalid(field: impl Into<String>, e: InvalidField) -> ApiError {
        ApiError::field(field, e.message)
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidField { .. } | ApiError::InvalidJson(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound | ApiError::ScheduleNotFound | ApiError::JournalDisabled => {
                StatusCode::NOT_FOUND
            }
            ApiError::Exists
            | ApiError::WrongState(_)
            | ApiError::RestoreRunning
            | ApiError::BackupUnsupported(_)
            | ApiError::BackupDisabled
            | ApiError::BackupRunning => StatusCode::CONFLICT,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::StoreUnavailable(_)
            | ApiError::JournalUnavailable(_)
            | ApiError::TooManyWaiters(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) | ApiError::BackupFailed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidField { .. } => "invalid_field",
            ApiError::InvalidJson(_) => "invalid_json",
            ApiError::NotFound | ApiError::ScheduleNotFound => "not_found",
            ApiError::JournalDisabled => "journal_disabled",
            ApiError::RestoreRunning => "restore_running",
            ApiError::BackupUnsupported(_) => "backup_unsupported",
            ApiError::BackupDisabled => "backup_disabled",
            ApiError::BackupRunning => "backup_running",
            ApiError::BackupFailed(_) => "backup_failed",
            ApiError::Exists => "exists",
            ApiError::WrongState(_) => "wrong_state",
            ApiError::TooLarge { .. } => "too_large",
            ApiError::StoreUnavailable(_) | ApiError::JournalUnavailable(_) => "store_unavailable",
            ApiError::TooManyWaiters(_) => "too_many_waiters",
            ApiError::Internal(_) => "internal",
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::NotFound => ApiError::NotFound,
            StoreError::WrongState(s) => ApiError::WrongState(s),
            StoreError::Exists => ApiError::Exists,
            StoreError::Unavailable(m) => ApiError::StoreUnavailable(m.into()),
            StoreError::Corrupt(m) => ApiError::Internal(format!("corrupt data: {m}")),
            // `StoreError` is non-exhaustive: a future variant is the server's problem until
            // it is mapped here.
            #[allow(unreachable_patterns)]
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<DispatchError> for ApiError {
    fn from(e: DispatchError) -> ApiError {
        match e {
            DispatchError::Store(e) => e.into(),
            e @ DispatchError::TooManyWaiters { .. } => ApiError::TooManyWaiters(e.to_string()),
        }
    }
}

impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> ApiError {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge {
                field: None,
                message: "the request body is larger than the configured limit".into(),
            }
        } else {
            ApiError::InvalidJson(format!(
                "the request body could not be read: {}",
                r.body_text()
            ))
        }
    }
}

impl ApiError {
    /// A path parameter that could not be extracted. On a matched route the only cause is a
    /// parameter that is not UTF-8 once percent-decoded.
    pub fn path(param: &str, r: PathRejection) -> ApiError {
        ApiError::field(
            param,
            format!("is not a valid path parameter ({})", r.body_text()),
        )
    }
}

#[derive(Serialize)]
struct Body<'a> {
    error: Detail<'a>,
}

#[derive(Serialize)]
struct Detail<'a> {
    code: &'static str,
    field: Option<&'a str>,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<JobState>,
}

impl ApiError {
    /// What the client is told. The details of a 5xx are not: [`ApiError::log`] writes them.
    pub fn message(&self) -> String {
        match self {
            ApiError::InvalidField { message, .. } | ApiError::TooLarge { message, .. } => {
                message.clone()
            }
            ApiError::InvalidJson(m) | ApiError::TooManyWaiters(m) => m.clone(),
            ApiError::NotFound => "no job with that id".into(),
            ApiError::ScheduleNotFound => "no schedule with that id".into(),
            ApiError::JournalDisabled => {
                "this server runs without a journal (--journal): there is no recorded history \
                 and nothing to restore from"
                    .into()
            }
            ApiError::Exists => {
                "a job with this id already exists (push with \"replace\": true to replace it)"
                    .into()
            }
            ApiError::WrongState(s) => {
                format!("the job is {s}, which does not allow this operation")
            }
            ApiError::RestoreRunning => {
                "a restore is already running; try again when it has finished".into()
            }
            ApiError::BackupUnsupported("memory") => {
                "this server keeps jobs in memory only (--memory): there is nothing on disk to \
                 back up"
                    .into()
            }
            ApiError::BackupUnsupported("redis") => {
                "this server keeps jobs in Redis, which delayq does not copy: back up Redis \
                 itself (RDB snapshots or the append-only file; docs/operations.md)"
                    .into()
            }
            ApiError::BackupUnsupported(kind) => {
                format!("the {kind} store has no online backup; only the embedded store has")
            }
            ApiError::BackupDisabled => {
                "backups are off on this server: start it with backup_dir (--backup-dir, \
                 DELAYQ_BACKUP_DIR), the directory backups are written under"
                    .into()
            }
            ApiError::BackupRunning => {
                "a backup is already running; try again when it has finished".into()
            }
            ApiError::BackupFailed(m) => m.clone(),
            ApiError::StoreUnavailable(detail) if detail.contains(crate::journal::UNWRITABLE) => {
                crate::journal::UNWRITABLE_ANSWER.into()
            }
            ApiError::StoreUnavailable(_) => {
                "the store could not be reached or did not answer in time; if it did not answer, the change may still be applied (retry with the same id)".into()
            }
            ApiError::JournalUnavailable(_) => {
                "the journal (--journal) could not be read or written; the server's log says why"
                    .into()
            }
            ApiError::Internal(_) => "internal error".into(),
        }
    }

    /// Logs the details of a 5xx, which the client is not told.
    pub fn log(&self) {
        match self {
            ApiError::StoreUnavailable(detail) if detail.contains(crate::journal::UNWRITABLE) => {
                tracing::warn!(error = %detail, "journal unavailable");
            }
            ApiError::StoreUnavailable(detail) => {
                tracing::warn!(error = %detail, "store unavailable");
            }
            ApiError::JournalUnavailable(detail) => {
                tracing::warn!(error = %detail, "journal cannot be read or written");
            }
            ApiError::Internal(detail) => tracing::error!(error = %detail, "internal error"),
            ApiError::BackupFailed(detail) => tracing::error!(error = %detail, "backup failed"),
            _ => {}
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.log();
        let (field, state) = match &self {
            ApiError::InvalidField { field, .. } => (Some(field.as_str()), None),
            ApiError::TooLarge { field, .. } => (field.as_deref(), None),
            ApiError::WrongState(s) => (None, Some(*s)),
            _ => (None, None),
        };
        let message = self.message();
        let body = Body {
            error: Detail {
                code: self.code(),
                field,
                message: &message,
                state,
            },
        };
        (self.status(), Json(body)).into_response()
    }
}
