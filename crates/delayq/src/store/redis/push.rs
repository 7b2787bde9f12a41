//! `push_batch` on Redis: stamps a request's jobs, joins it with concurrent pushes
//! (`coalesce.rs`) and sends each batch as one pipeline of `push` function calls, one per
//! shard, mode and [`PUSH_CHUNK`] jobs, each job's record packed here (`record.rs`
//! `encode_new`) and its far window, if any, named here (`keys.rs` `far_window`).
//!
//! It does not decide anything about the jobs: `push.lua` creates or replaces them.

use super::conn::Call;
use super::keys::{far_window, shard_of};
use super::record::{corrupt_record, encode_new, per_item, state_from_code, string};
use super::scripts::{Function, Memory};
use super::{Calls, RedisStore, gone};
use crate::job::{Job, JobSpec, MAX_RUN_AT, UnixMillis};
use crate::store::{PushMode, PushOutcome, StoreError, StoreResult};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The function that creates or replaces jobs (`push.lua`).
static PUSH: Function = Function::new("push", include_str!("push.lua"), Memory::Adds);

/// The functions this file calls, for the library (`scripts.rs`).
pub(super) static FUNCTIONS: [&Function; 1] = [&PUSH];

/// Most jobs one push function call carries: bounds how long one call blocks Redis.
const PUSH_CHUNK: usize = 256;

/// One caller's `push_batch` (or `restore_batch`): its jobs, stamped `seq..seq + len`.
pub(super) struct PushRequest {
    pub jobs: Vec<JobSpec>,
    /// Each job's attempts (a restore); empty for a push, whose jobs start at 0.
    pub attempts: Vec<u32>,
    pub seq: u64,
    pub mode: PushMode,
    pub now: UnixMillis,
}

pub(super) type PushReply = StoreResult<Vec<StoreResult<PushOutcome>>>;

impl Calls {
    /// Joined with concurrent pushes into shared round trips ([`run_batch`]). Jobs keep their
    /// batch order within a shard, so a repeated id behaves as if pushed one after the other.
    pub(in crate::store) async fn push_batch(
        store: &RedisStore,
        jobs: Vec<JobSpec>,
        mode: PushMode,
        now: UnixMillis,
    ) -> PushReply {
        submit(store, jobs, Vec::new(), mode, now).await
    }

    /// A push that refuses present ids and keeps each job's attempts, joined with concurrent
    /// pushes like any other.
    pub(in crate::store) async fn restore_batch(
        store: &RedisStore,
        jobs: &[Job],
        now: UnixMillis,
    ) -> PushReply {
        let (jobs, attempts) = jobs.iter().map(|j| (j.spec.clone(), j.attempts)).unzip();
        submit(store, jobs, attempts, PushMode::Reject, now).await
    }
}

/// Stamps the jobs and hands them to the push coalescer.
async fn submit(
    store: &RedisStore,
    jobs: Vec<JobSpec>,
    attempts: Vec<u32>,
    mode: PushMode,
    now: UnixMillis,
) -> PushReply {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    // A job of this id finished a moment ago is removed before this one arrives.
    store
        .inner
        .finishing
        .settle(jobs.iter().map(|j| &j.id))
        .await;
    let seq = store.stamp(now, jobs.len() as u64);
    let request = PushRequest {
        jobs,
        attempts,
        seq,
        mode,
        now,
    };
    store
        .inner
        .pushes
        .call(request)
        .await
        .unwrap_or_else(|| Err(gone()))
}

/// Pushes a batch of requests (from concurrent callers) in one pipeline: per shard and mode,
/// one function call per [`PUSH_CHUNK`] jobs, in request order. The batch runs at the latest
/// of the requests' `now`s (all of them past, so no job is ready early). A request fails as a
/// whole if a call carrying some of its jobs failed (as a lone call would).
pub(super) async fn run_batch(store: &RedisStore, requests: &[PushRequest]) -> Vec<PushReply> {
    let now = requests.iter().map(|r| r.now).max().unwrap_or(0);
    // (request, job) positions per (shard, mode), in order.
    let mut groups: BTreeMap<(u16, bool), Vec<(usize, usize)>> = BTreeMap::new();
    for (r, req) in requests.iter().enumerate() {
        let replace = req.mode == PushMode::Replace;
        for (i, j) in req.jobs.iter().enumerate() {
            groups
                .entry((shard_of(j.id.as_str(), store.shard_count()), replace))
                .or_default()
                .push((r, i));
        }
    }
    let mut calls = Vec::new();
    let mut slots: Vec<&[(usize, usize)]> = Vec::new();
    for ((shard, replace), members) in &groups {
        for chunk in members.chunks(PUSH_CHUNK) {
            calls.push(push_call(store, requests, *shard, *replace, chunk, now));
            slots.push(chunk);
        }
    }
    let mut out: Vec<PushReply> = requests
        .iter()
        .map(|r| Ok(vec![Err(gone()); r.jobs.len()]))
        .collect();
    let replies = match store.inner.conn.fcall_each(&calls).await {
        Ok(r) => r,
        Err(e) => return vec![Err(e); requests.len()],
    };
    for (reply, members) in replies.iter().zip(slots) {
        let statuses = per_item(reply, members.len());
        for (k, &(r, i)) in members.iter().enumerate() {
            let Ok(per_job) = &mut out[r] else { continue };
            let outcome = match &statuses {
                Err(e) => {
                    out[r] = Err(e.clone());
                    continue;
                }
                Ok(a) => match string(&a[k]) {
                    Ok("c") => Ok(PushOutcome::Created),
                    Ok("e") => Err(StoreError::Exists),
                    Ok("k") => Err(corrupt_record(&requests[r].jobs[i].id)),
                    Ok(code) => state_from_code(code).map(PushOutcome::Replaced),
                    Err(e) => Err(e),
                },
            };
            per_job[i] = outcome;
        }
    }
    out
}

/// One push function call on `shard` for the jobs at `chunk`'s (request, job) positions.
fn push_call(
    store: &RedisStore,
    requests: &[PushRequest],
    shard: u16,
    replace: bool,
    chunk: &[(usize, usize)],
    now: UnixMillis,
) -> Call {
    let keys = &store.inner.shards[usize::from(shard)];
    let job = |&(r, i): &(usize, usize)| &requests[r].jobs[i];
    // The distinct far windows of the chunk, in first-use order: KEYS[9..].
    let mut windows: Vec<u64> = Vec::new();
    let slot_of: Vec<usize> = chunk
        .iter()
        .map(|m| match far_window(job(m).run_at.min(MAX_RUN_AT), now) {
            None => 0,
            Some(w) => match windows.iter().position(|&x| x == w) {
                Some(k) => k + 1,
                None => {
                    windows.push(w);
                    windows.len()
                }
            },
        })
        .collect();
    let mut call = store
        .shard_fcall_windows(&PUSH, keys, &windows, now)
        .arg(if replace { "replace" } else { "reject" })
        .arg(windows.len());
    for w in &windows {
        call = call.arg(*w);
    }
    for (m, &slot) in chunk.iter().zip(&slot_of) {
        let j = job(m);
        let seq = requests[m.0].seq + m.1 as u64;
        let attempts = requests[m.0].attempts.get(m.1).copied().unwrap_or(0);
        let stored = stored_spec(j);
        let state = stored.initial_state(now);
        call = call
            .arg(j.id.as_str())
            .arg(encode_new(&stored, state, seq, attempts))
            .arg(j.queue().as_str())
            .arg(stored.run_at)
            .arg(j.priority)
            .arg(seq)
            .arg(slot);
    }
    call
}

/// A job as it is stored: times and backoff steps clamped at [`MAX_RUN_AT`] (below 2^53, so
/// exact in Lua's doubles).
pub(super) fn stored_spec(j: &JobSpec) -> Cow<'_, JobSpec> {
    let over = |t: u64| t > MAX_RUN_AT;
    if !over(j.run_at) && !over(j.ttr_ms) && !j.backoff_ms.iter().copied().any(over) {
        return Cow::Borrowed(j);
    }
    let mut s = j.clone();
    s.run_at = s.run_at.min(MAX_RUN_AT);
    s.ttr_ms = s.ttr_ms.min(MAX_RUN_AT);
    for b in &mut s.backoff_ms {
        *b = (*b).min(MAX_RUN_AT);
    }
    Cow::Owned(s)
}
