//! The transitions of one job named by its id, each one function call on the job's shard:
//! `release`, `touch`, `bury`, `kick` and `reschedule`; and `get`, one HGET.
//!
//! They decide nothing: each `.lua` function checks the job's state and applies job.rs's
//! rule; this file builds the call and decodes the `{'ok', record, ...} | {'nf'} | {'ws',
//! code}` reply.

use super::RedisStore;
use super::conn::Call;
use super::keys::far_window;
use super::record::{by_id_reply, bytes, decode_job, state_from_code, string, unexpected};
use super::scripts::LIBRARY;
use crate::job::{Job, JobId, JobState, MAX_RUN_AT, UnixMillis};
use crate::store::{Reschedule, StoreError, StoreResult};
use redis::Value;

pub(super) async fn release(
    store: &RedisStore,
    id: &JobId,
    delay_ms: Option<u64>,
    now: UnixMillis,
) -> StoreResult<Job> {
    let delay = delay_ms
        .map(|d| d.min(MAX_RUN_AT).to_string())
        .unwrap_or_default();
    let call = store
        .shard_fcall(&LIBRARY.release, store.shard(id), now)
        .arg(id.as_str())
        .arg(delay)
        .arg(store.stamp(now, 1));
    by_id(store, id, call).await
}

pub(super) async fn touch(store: &RedisStore, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
    let call = store
        .shard_fcall(&LIBRARY.touch, store.shard(id), now)
        .arg(id.as_str());
    by_id(store, id, call).await
}

pub(super) async fn bury(store: &RedisStore, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
    let call = store
        .shard_fcall(&LIBRARY.bury, store.shard(id), now)
        .arg(id.as_str())
        .arg(store.stamp(now, 1));
    by_id(store, id, call).await
}

pub(super) async fn kick(store: &RedisStore, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
    let call = store
        .shard_fcall(&LIBRARY.kick, store.shard(id), now)
        .arg(id.as_str());
    by_id(store, id, call).await
}

/// The job's new due time names its far window list, when it is far (`keys.rs`
/// `far_window`), which goes in KEYS[9].
pub(super) async fn reschedule(
    store: &RedisStore,
    id: &JobId,
    change: Reschedule,
    now: UnixMillis,
) -> StoreResult<(Job, JobState)> {
    let run_at = change.run_at.min(MAX_RUN_AT);
    let far = far_window(run_at, now);
    let windows: Vec<u64> = far.into_iter().collect();
    let call = store
        .shard_fcall_windows(&LIBRARY.reschedule, store.shard(id), &windows, now)
        .arg(id.as_str())
        .arg(run_at)
        .arg(if change.body.is_some() { "1" } else { "0" })
        .arg(change.body.as_deref().unwrap_or(""))
        .arg(change.priority.map(|p| p.to_string()).unwrap_or_default())
        .arg(far.map(|w| w.to_string()).unwrap_or_default());
    let v = store.fcall_one(call).await?;
    let (job, rest) = by_id_reply(id, &v)?;
    let previous = match rest {
        [code] => state_from_code(string(code)?)?,
        _ => return Err(unexpected(&v)),
    };
    Ok((job, previous))
}

pub(super) async fn get(store: &RedisStore, id: &JobId) -> StoreResult<Job> {
    let mut pipe = redis::pipe();
    pipe.cmd("HGET").arg(&store.shard(id).jobs).arg(id.as_str());
    let mut v = store.inner.conn.query(&pipe).await?;
    match v.pop() {
        Some(Value::Nil) => Err(StoreError::NotFound),
        Some(v) => decode_job(id.as_str(), bytes(&v)?),
        None => Err(unexpected(&Value::Nil)),
    }
}

/// Sends a by-id function call and decodes its reply into the job.
async fn by_id(store: &RedisStore, id: &JobId, call: Call) -> StoreResult<Job> {
    let v = store.fcall_one(call).await?;
    by_id_reply(id, &v).map(|(job, _)| job)
}
