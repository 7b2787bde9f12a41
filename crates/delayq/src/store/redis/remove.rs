//! `finish`, `finish_batch` and `delete` on Redis: all remove jobs whatever their state,
//! through the `remove` function. Concurrent calls are joined (`coalesce.rs`) and each batch is one
//! pipeline with one call per shard, its ids in order. The finish of a job this instance handed
//! out is answered at once and its removal runs after (`finishing.rs`).
//!
//! It decides nothing about the jobs: `remove.lua` reports each one's state (or that it is
//! missing or does not decode).

use super::conn::Call;
use super::finishing::Early;
use super::keys::shard_of;
use super::record::{corrupt_record, per_item, state_from_code, string, unexpected};
use super::scripts::{Function, Memory};
use super::{Calls, RedisStore, gone};
use crate::job::{JobId, JobState};
use crate::store::{StoreError, StoreResult};
use redis::Value;
use std::collections::BTreeMap;

/// The function that removes jobs (`remove.lua`): it only frees memory.
static REMOVE: Function = Function::new("remove", include_str!("remove.lua"), Memory::Neutral);

/// The functions this file calls, for the library (`scripts.rs`).
pub(super) static FUNCTIONS: [&Function; 1] = [&REMOVE];

type Removed = StoreResult<Vec<StoreResult<JobState>>>;

/// One job to remove: its id and, for an early finish, the push stamp the record must have
/// (`remove.lua`).
pub(super) type Removal = (JobId, Option<u64>);

impl Calls {
    /// A job this instance handed out is answered as reserved at once, and removed by a task
    /// ([`finish_later`]); any other waits for Redis.
    pub(in crate::store) async fn finish(store: &RedisStore, id: &JobId) -> StoreResult<JobState> {
        only(Calls::finish_batch(store, std::slice::from_ref(id)).await)
    }

    pub(in crate::store) async fn delete(store: &RedisStore, id: &JobId) -> StoreResult<JobState> {
        store.inner.finishing.settle([id]).await;
        only(remove_many(store, vec![(id.clone(), None)]).await)
    }

    /// As [`Calls::finish`] for each id: the jobs this instance handed out are answered at
    /// once and removed by one task; the others wait for Redis, in one call.
    pub(in crate::store) async fn finish_batch(store: &RedisStore, ids: &[JobId]) -> Removed {
        let mut out: Vec<StoreResult<JobState>> = Vec::with_capacity(ids.len());
        let mut early = Vec::new();
        let mut rest = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            match store.inner.finishing.early(id) {
                Some(e) => {
                    early.push((id.clone(), e));
                    out.push(Ok(JobState::Reserved));
                }
                None => {
                    rest.push((i, id.clone()));
                    out.push(Err(gone()));
                }
            }
        }
        if !early.is_empty() {
            tokio::spawn(finish_later(store.clone(), early));
        }
        if rest.is_empty() {
            return Ok(out);
        }
        store
            .inner
            .finishing
            .settle(rest.iter().map(|(_, id)| id))
            .await;
        let removals = rest.iter().map(|(_, id)| (id.clone(), None)).collect();
        let removed = remove_many(store, removals).await?;
        for ((i, _), r) in rest.into_iter().zip(removed) {
            out[i] = r;
        }
        Ok(out)
    }
}

/// The answer of a removal made for one job.
fn only(out: Removed) -> StoreResult<JobState> {
    out?.pop().ok_or_else(|| unexpected(&Value::Nil))?
}

/// The removal of finishes answered early: each job with its push stamp only, in one call. A
/// failure is logged: the job stays reserved and is delivered again when its TTR ends.
async fn finish_later(store: RedisStore, jobs: Vec<(JobId, Early)>) {
    let removals = jobs
        .iter()
        .map(|(id, (seq, _))| (id.clone(), Some(*seq)))
        .collect();
    let mut results: Vec<Option<StoreError>> = match remove_many(&store, removals).await {
        Ok(states) => states.into_iter().map(|s| s.err()).collect(),
        Err(e) => vec![Some(e); jobs.len()],
    };
    results.resize(jobs.len(), Some(gone()));
    for ((id, (_, done)), failed) in jobs.into_iter().zip(results) {
        // Not found: the job is gone or was pushed again since, as the finish wanted.
        if let Some(e) = failed.filter(|e| *e != StoreError::NotFound) {
            tracing::warn!(
                job_id = %id,
                error = %e,
                "a finish answered before Redis ran it was not run; the job is delivered again when its TTR ends"
            );
        }
        store.inner.finishing.done(&id, done);
    }
}

/// Removes jobs in order, joined with concurrent removes (`coalesce.rs`). A job the read-ahead
/// holds (`read_ahead.rs`) is no longer held: it is removed as it is (an early finish's job was
/// handed out, so none is held).
async fn remove_many(store: &RedisStore, jobs: Vec<Removal>) -> Removed {
    let ids: Vec<JobId> = jobs
        .iter()
        .filter(|(_, seq)| seq.is_none())
        .map(|(id, _)| id.clone())
        .collect();
    if !ids.is_empty() {
        store.inner.read_ahead.forget(&ids);
    }
    let removed = store
        .inner
        .removes
        .call(jobs)
        .await
        .unwrap_or_else(|| Err(gone()));
    // A request Redis could not be asked fails as a whole (`run_batch`).
    let unreachable = matches!(removed, Err(StoreError::Unavailable(_)));
    store.inner.finishing.reached(!unreachable);
    removed
}

/// Removes the ids of a batch of requests (from concurrent callers) in one pipeline: one
/// remove function call per shard with its ids in order; one answer per id.
pub(super) async fn run_batch(store: &RedisStore, requests: &[Vec<Removal>]) -> Vec<Removed> {
    let ids: Vec<&Removal> = requests.iter().flatten().collect();
    let mut flat = remove_flat(store, &ids).await;
    let mut out = Vec::with_capacity(requests.len());
    for r in requests.iter().rev() {
        let mine = flat.split_off(flat.len() - r.len());
        // A request fails as a whole when Redis could not be asked at all.
        out.push(
            match mine.iter().find_map(|x| match x {
                Err(e @ StoreError::Unavailable(_)) => Some(e.clone()),
                _ => None,
            }) {
                Some(e) => Err(e),
                None => Ok(mine),
            },
        );
    }
    out.reverse();
    out
}

async fn remove_flat(store: &RedisStore, ids: &[&Removal]) -> Vec<StoreResult<JobState>> {
    let mut by_shard: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, (id, _)) in ids.iter().enumerate() {
        by_shard
            .entry(shard_of(id.as_str(), store.shard_count()))
            .or_default()
            .push(i);
    }
    let calls: Vec<Call> = by_shard
        .iter()
        .map(|(&shard, idxs)| {
            let keys = &store.inner.shards[usize::from(shard)];
            let mut call = store.shard_fcall(&REMOVE, keys, 0);
            for &i in idxs {
                let (id, seq) = ids[i];
                call = call
                    .arg(id.as_str())
                    .arg(seq.map(|s| s.to_string()).unwrap_or_default());
            }
            call
        })
        .collect();
    let mut out: Vec<StoreResult<JobState>> = vec![Err(gone()); ids.len()];
    let replies = match store.inner.conn.fcall_each(&calls).await {
        Ok(r) => r,
        Err(e) => return vec![Err(e); ids.len()],
    };
    for (reply, idxs) in replies.iter().zip(by_shard.values()) {
        let states = per_item(reply, idxs.len());
        for (k, &i) in idxs.iter().enumerate() {
            out[i] = match &states {
                Err(e) => Err(e.clone()),
                Ok(a) => match &a[k] {
                    Value::Nil => Err(StoreError::NotFound),
                    v => match string(v) {
                        Ok("k") => Err(corrupt_record(&ids[i].0)),
                        Ok(code) => state_from_code(code),
                        Err(e) => Err(e),
                    },
                },
            };
        }
    }
    out
}
