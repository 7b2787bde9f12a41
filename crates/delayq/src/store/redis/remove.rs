//! `finish`, `finish_batch` and `delete` on Redis: all remove jobs whatever their state,
//! through the `remove` function. Concurrent calls are joined (`coalesce.rs`) and each batch is one
//! pipeline with one call per shard, its ids in order.
//!
//! It decides nothing about the jobs: `remove.lua` reports each one's state (or that it is
//! missing or does not decode).

use super::conn::Call;
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

impl Calls {
    pub(in crate::store) async fn finish(store: &RedisStore, id: &JobId) -> StoreResult<JobState> {
        remove(store, id).await
    }

    pub(in crate::store) async fn delete(store: &RedisStore, id: &JobId) -> StoreResult<JobState> {
        remove(store, id).await
    }

    pub(in crate::store) async fn finish_batch(store: &RedisStore, ids: &[JobId]) -> Removed {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        remove_many(store, ids.to_vec()).await
    }
}

/// Removes one job.
async fn remove(store: &RedisStore, id: &JobId) -> StoreResult<JobState> {
    let mut out = remove_many(store, vec![id.clone()]).await?;
    out.pop().ok_or_else(|| unexpected(&Value::Nil))?
}

/// Removes ids in order, joined with concurrent removes (`coalesce.rs`). A job the read-ahead
/// holds (`read_ahead.rs`) is no longer held: it is removed as it is.
async fn remove_many(store: &RedisStore, ids: Vec<JobId>) -> Removed {
    store.inner.read_ahead.forget(&ids);
    store
        .inner
        .removes
        .call(ids)
        .await
        .unwrap_or_else(|| Err(gone()))
}

/// Removes the ids of a batch of requests (from concurrent callers) in one pipeline: one
/// remove function call per shard with its ids in order; one answer per id.
pub(super) async fn run_batch(store: &RedisStore, requests: &[Vec<JobId>]) -> Vec<Removed> {
    let ids: Vec<&JobId> = requests.iter().flatten().collect();
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

async fn remove_flat(store: &RedisStore, ids: &[&JobId]) -> Vec<StoreResult<JobState>> {
    let mut by_shard: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
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
                call = call.arg(ids[i].as_str());
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
                        Ok("k") => Err(corrupt_record(ids[i])),
                        Ok(code) => state_from_code(code),
                        Err(e) => Err(e),
                    },
                },
            };
        }
    }
    out
}
