//! The transitions of one job named by its id, each one function call on the job's shard:
//! `release`, `touch`, `bury`, `kick`, `reserve_job` and `reschedule`; and `get`, one HGET
//! (and, for a job placed ahead, one HEXISTS of its group).
//!
//! They decide nothing: each `.lua` function checks the job's state and applies job.rs's
//! rule; this file builds the call and decodes the `{'ok', record, ...} | {'nf'} | {'ws',
//! code}` reply.

use super::conn::Call;
use super::keys::{self, far_window};
use super::record::{
    by_id_reply, bytes, decode_job, int, placed_ahead, state_from_code, string, unexpected,
};
use super::scripts::{Function, Memory};
use super::{Calls, RedisStore, reserve};
use crate::job::{Job, JobId, JobState, MAX_RUN_AT, UnixMillis};
use crate::store::{Reschedule, StoreError, StoreResult};
use redis::Value;

// Moving one job between states leaves memory about the same: these run when Redis is full.
// A reschedule may move a job out of a far window into the timeline, which adds memory.
static RELEASE: Function = Function::new("release", include_str!("release.lua"), Memory::Neutral);
static TOUCH: Function = Function::new("touch", include_str!("touch.lua"), Memory::Neutral);
static BURY: Function = Function::new("bury", include_str!("bury.lua"), Memory::Neutral);
static KICK: Function = Function::new("kick", include_str!("kick.lua"), Memory::Neutral);
static RESERVE_JOB: Function = Function::new(
    "reserve_job",
    include_str!("reserve_job.lua"),
    Memory::Neutral,
);
static RESCHEDULE: Function =
    Function::new("reschedule", include_str!("reschedule.lua"), Memory::Adds);

/// The functions this file calls, for the library (`scripts.rs`).
pub(super) static FUNCTIONS: [&Function; 6] =
    [&RELEASE, &TOUCH, &BURY, &KICK, &RESERVE_JOB, &RESCHEDULE];

impl Calls {
    pub(in crate::store) async fn release(
        store: &RedisStore,
        id: &JobId,
        delay_ms: Option<u64>,
        now: UnixMillis,
    ) -> StoreResult<Job> {
        let delay = delay_ms
            .map(|d| d.min(MAX_RUN_AT).to_string())
            .unwrap_or_default();
        let call = store
            .shard_fcall(&RELEASE, store.shard(id), now)
            .arg(id.as_str())
            .arg(delay)
            .arg(store.stamp(now, 1));
        by_id(store, id, call).await
    }

    pub(in crate::store) async fn touch(
        store: &RedisStore,
        id: &JobId,
        now: UnixMillis,
    ) -> StoreResult<Job> {
        let call = store
            .shard_fcall(&TOUCH, store.shard(id), now)
            .arg(id.as_str());
        by_id(store, id, call).await
    }

    pub(in crate::store) async fn bury(
        store: &RedisStore,
        id: &JobId,
        priority: Option<u32>,
        now: UnixMillis,
    ) -> StoreResult<Job> {
        let call = store
            .shard_fcall(&BURY, store.shard(id), now)
            .arg(id.as_str())
            .arg(store.stamp(now, 1))
            .arg(priority.map(|p| p.to_string()).unwrap_or_default());
        by_id(store, id, call).await
    }

    pub(in crate::store) async fn kick(
        store: &RedisStore,
        id: &JobId,
        now: UnixMillis,
    ) -> StoreResult<Job> {
        let call = store
            .shard_fcall(&KICK, store.shard(id), now)
            .arg(id.as_str());
        by_id(store, id, call).await
    }

    pub(in crate::store) async fn reserve_job(
        store: &RedisStore,
        id: &JobId,
        now: UnixMillis,
    ) -> StoreResult<Job> {
        let call = store
            .shard_fcall(&RESERVE_JOB, store.shard(id), now)
            .arg(id.as_str());
        let job = by_id(store, id, call).await?;
        store
            .inner
            .finishing
            .handed(std::slice::from_ref(&job), now);
        Ok(job)
    }

    /// The job's new due time names its far window list, when it is far (`keys.rs`
    /// `far_window`), which goes in KEYS[10].
    pub(in crate::store) async fn reschedule(
        store: &RedisStore,
        id: &JobId,
        change: Reschedule,
        now: UnixMillis,
    ) -> StoreResult<(Job, JobState)> {
        let run_at = change.run_at.min(MAX_RUN_AT);
        let far = far_window(run_at, now);
        let windows: Vec<u64> = far.into_iter().collect();
        let call = store
            .shard_fcall_windows(&RESCHEDULE, store.shard(id), &windows, now)
            .arg(id.as_str())
            .arg(run_at)
            .arg(if change.body.is_some() { "1" } else { "0" })
            .arg(change.body.as_deref().unwrap_or(""))
            .arg(change.priority.map(|p| p.to_string()).unwrap_or_default())
            .arg(far.map(|w| w.to_string()).unwrap_or_default());
        not_held(store, id).await;
        let v = store.fcall_one(call).await?;
        let (job, rest) = by_id_reply(id, &v)?;
        let previous = match rest {
            [code] => state_from_code(string(code)?)?,
            _ => return Err(unexpected(&v)),
        };
        Ok((job, previous))
    }

    pub(in crate::store) async fn get(store: &RedisStore, id: &JobId) -> StoreResult<Job> {
        store.inner.finishing.settle([id]).await;
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(&store.shard(id).jobs).arg(id.as_str());
        let mut v = store.inner.conn.query(&pipe).await?;
        let raw = match v.pop() {
            Some(Value::Nil) => return Err(StoreError::NotFound),
            Some(v) => v,
            None => return Err(unexpected(&Value::Nil)),
        };
        let raw = bytes(&raw)?;
        let mut job = decode_job(id.as_str(), raw)?;
        if placed_ahead(raw) {
            // Delayed while its group waits for its tick, ready after (lib.lua).
            let group = keys::group(&job.spec.queue(), job.spec.priority, job.spec.run_at)
                .ok_or_else(|| StoreError::Corrupt(format!("job record {id:?}").into()))?;
            let mut pipe = redis::pipe();
            pipe.cmd("HEXISTS").arg(&store.shard(id).due).arg(group);
            if int(&store.inner.conn.query(&pipe).await?[0])? == 0 {
                job.state = JobState::Ready;
            }
        }
        Ok(job)
    }
}

/// Sends a by-id function call and decodes its reply into the job.
async fn by_id(store: &RedisStore, id: &JobId, call: Call) -> StoreResult<Job> {
    not_held(store, id).await;
    let v = store.fcall_one(call).await?;
    by_id_reply(id, &v).map(|(job, _)| job)
}

/// A job the read-ahead holds (`read_ahead.rs`) is given back before a call names it, so the
/// call finds it as it would without the read-ahead: ready. A finish of it answered a moment
/// ago has run before (`finishing.rs`).
async fn not_held(store: &RedisStore, id: &JobId) {
    store.inner.finishing.settle([id]).await;
    let held = store.inner.read_ahead.forget(std::slice::from_ref(id));
    reserve::give_back(store, held).await;
}
