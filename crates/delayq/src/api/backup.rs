//! `POST /v1/backup` (docs/operations.md, "Backup and restore"): an online backup of the
//! embedded store into a directory under the `backup_dir` setting, behind the same
//! authentication as every route. The copy is the store's (`Store::online_backup`); this
//! file decides only where a request may make the server write.
//!
//! **Where.** A request makes the server write a file of every job body, so it writes only
//! under `backup_dir`, and nowhere without it (409 `backup_disabled`). `dir` is a directory
//! under it: relative (to it) or absolute (inside it), without `..`, and not `backup_dir`
//! itself; it is created, or must be empty. A symbolic link leading out of `backup_dir` is
//! refused like `..`. So a generated or hostile request can at worst fill `backup_dir`.
//!
//! Answers: 200 with what was written (`dir` as written, `jobs`, `schedules`, `bytes`,
//! `took_ms`); 400 `invalid_field` naming `dir`; 503 or 500 when the store fails, as any call; 409 `backup_unsupported` on a store without
//! an online backup (Redis, Cluster, memory: the message says what to do instead), 409
//! `backup_disabled` without `backup_dir`, 409 `backup_running` while another runs; 500
//! `backup_failed` when the copy cannot be written (the message names the file and the
//! error). The request has no deadline: the answer comes when the copy is complete (the copy
//! runs to its end, answered or not).

use super::AppState;
use super::v1::ApiError;
use crate::store::BackupError;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::routing::post;
use axum::{Json, Router};
use bytes::Bytes;
use serde_json::Value;
use std::path::{Component, Path, PathBuf};

/// The route's path (exempt from the request deadline, `api/mod.rs`).
pub const BACKUP_PATH: &str = "/v1/backup";

/// Longest `dir` accepted, in characters (Linux's `PATH_MAX` is 4096 bytes).
const MAX_DIR_CHARS: usize = 4096;

pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/backup", post(backup))
}

/// What `POST /v1/backup` answers.
#[derive(serde::Serialize)]
struct BackupView {
    /// The directory written, absolute.
    dir: String,
    jobs: u64,
    schedules: u64,
    bytes: u64,
    took_ms: u64,
}

/// `dir` from the body `{"dir": "..."}`, nothing else.
fn dir_of(body: &[u8]) -> Result<String, ApiError> {
    let map = super::v1::input::object(body, false)?;
    let mut dir = None;
    for (key, value) in map {
        match (key.as_str(), value) {
            ("dir", Value::String(s)) => dir = Some(s),
            ("dir", _) => return Err(ApiError::field("dir", "must be a string")),
            (other, _) => {
                return Err(ApiError::field(other, "unknown field; expected dir"));
            }
        }
    }
    let dir = dir.ok_or_else(|| ApiError::field("dir", "is required"))?;
    if dir.is_empty() {
        return Err(ApiError::field("dir", "must not be empty"));
    }
    if dir.chars().count() > MAX_DIR_CHARS {
        return Err(ApiError::field(
            "dir",
            format!("must be at most {MAX_DIR_CHARS} characters"),
        ));
    }
    if dir.chars().any(char::is_control) {
        return Err(ApiError::field(
            "dir",
            "must not contain control characters",
        ));
    }
    Ok(dir)
}

/// Where under `root` the directory `dir` is, checked as the module docs say; creates `root`
/// if missing. Blocking (file system).
fn resolve(root: &Path, dir: &str) -> Result<PathBuf, ApiError> {
    let bad = |m: String| ApiError::field("dir", m);
    let shown_root = root.display();
    std::fs::create_dir_all(root).map_err(|e| {
        ApiError::BackupFailed(format!("cannot create backup_dir {shown_root}: {e}"))
    })?;
    let real_root = root.canonicalize().map_err(|e| {
        ApiError::BackupFailed(format!("cannot resolve backup_dir {shown_root}: {e}"))
    })?;
    let asked = Path::new(dir);
    if asked.components().any(|c| c == Component::ParentDir) {
        return Err(bad(format!("{dir:?} must not contain \"..\"")));
    }
    let rest = if asked.is_absolute() {
        let given_root = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        asked
            .strip_prefix(&real_root)
            .or_else(|_| asked.strip_prefix(&given_root))
            .map_err(|_| {
                bad(format!(
                    "{dir:?} is not under the server's backup_dir ({}); give a path inside \
                     it, or one relative to it",
                    real_root.display()
                ))
            })?
            .to_path_buf()
    } else {
        asked.to_path_buf()
    };
    if !rest.components().any(|c| matches!(c, Component::Normal(_))) {
        return Err(bad(format!(
            "{dir:?} names backup_dir itself; give a directory under it"
        )));
    }
    let target = real_root.join(&rest);
    // The deepest part that exists must be inside backup_dir once links are followed; what
    // is below it does not exist yet, so the backup creates it as plain directories.
    let mut existing = target.as_path();
    while !existing.exists() {
        existing = existing.parent().unwrap_or(&real_root);
    }
    let real = existing
        .canonicalize()
        .map_err(|e| bad(format!("cannot resolve {}: {e}", existing.display())))?;
    if !real.starts_with(&real_root) {
        return Err(bad(format!(
            "{dir:?} leads out of the server's backup_dir ({}) through a symbolic link",
            real_root.display()
        )));
    }
    Ok(target)
}

/// `POST /v1/backup`.
async fn backup(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<BackupView>, ApiError> {
    let dir = dir_of(&body?)?;
    let store = state.store.clone();
    // A store that has failed refuses a backup as it refuses any call.
    store.ping().await?;
    if store.online_backup().is_none() {
        return Err(ApiError::BackupUnsupported(store.kind()));
    }
    let root = state
        .config
        .backup_dir
        .clone()
        .ok_or(ApiError::BackupDisabled)?;
    let target = tokio::task::spawn_blocking(move || resolve(&root, &dir))
        .await
        .map_err(|e| ApiError::BackupFailed(format!("backup task failed: {e}")))??;
    let online = store
        .online_backup()
        .ok_or(ApiError::BackupUnsupported(store.kind()))?;
    let report = online.backup(&target).await.map_err(|e| match e {
        BackupError::Target(m) => ApiError::field("dir", m),
        BackupError::Running => ApiError::BackupRunning,
        BackupError::Write(m) => ApiError::BackupFailed(m),
        BackupError::Store(e) => ApiError::from(e),
        #[allow(unreachable_patterns)]
        other => ApiError::BackupFailed(other.to_string()),
    })?;
    Ok(Json(BackupView {
        dir: target.display().to_string(),
        jobs: report.jobs,
        schedules: report.schedules,
        bytes: report.bytes,
        took_ms: report.took_ms,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_message(r: Result<PathBuf, ApiError>) -> String {
        match r {
            Err(ApiError::InvalidField { field, message }) if field == "dir" => message,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_directory_is_taken_relative_to_backup_dir_or_absolute_inside_it() {
        let root = tempfile::tempdir().unwrap();
        let real = root.path().canonicalize().unwrap();
        assert_eq!(resolve(root.path(), "a/b").unwrap(), real.join("a/b"));
        let inside = real.join("nightly").display().to_string();
        assert_eq!(resolve(root.path(), &inside).unwrap(), real.join("nightly"));
    }

    #[test]
    fn a_directory_outside_backup_dir_is_refused_naming_it() {
        let root = tempfile::tempdir().unwrap();
        for dir in ["/etc/delayq", "../x", "a/../../x", ".", "./"] {
            let m = field_message(resolve(root.path(), dir));
            assert!(m.starts_with("dir: "), "{dir}: {m}");
        }
        let m = field_message(resolve(root.path(), "/tmp"));
        assert!(m.contains("is not under the server's backup_dir"), "{m}");
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_out_of_backup_dir_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), root.path().join("out")).unwrap();
        let m = field_message(resolve(root.path(), "out/copy"));
        assert!(m.contains("through a symbolic link"), "{m}");
    }
}
