//! `reserve` on Redis: hands out ready jobs in global delivery order although each shard only
//! knows its own. On one shard, one `reserve` function call, joined with the reserves running
//! at the same moment (`coalesce.rs`); on several, a peek at every shard's first ready
//! entries, a merge, then one call per shard that holds some of the best. The peek
//! ([`peek`]) serves `kick_topic.rs` too, on the dead zsets.
//!
//! It decides nothing about the jobs: `reserve.lua` takes a shard's best ready jobs and
//! reserves them.

use super::conn::Call;
use super::keys::{self, ShardKeys};
use super::read_ahead::{self, HeldJob, ReadAhead};
use super::record::{array, bytes, decode_job, string, unexpected};
use super::scripts::{Function, Memory};
use super::{Calls, Inner, RedisStore, gone};
use crate::job::{Job, Topic, UnixMillis};
use crate::store::StoreResult;
use redis::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

/// The function that reserves a shard's best ready jobs (`reserve.lua`): it moves jobs, so
/// it runs when Redis is full.
static RESERVE: Function = Function::new("reserve", include_str!("reserve.lua"), Memory::Neutral);

/// The function that gives back jobs reserved ahead and handed to no one (`unreserve.lua`,
/// `read_ahead.rs`).
static UNRESERVE: Function =
    Function::new("unreserve", include_str!("unreserve.lua"), Memory::Neutral);

/// The functions this file calls, for the library (`scripts.rs`).
pub(super) static FUNCTIONS: [&Function; 2] = [&RESERVE, &UNRESERVE];

/// `reserve` gives up after this many rounds that found jobs in a peek but reserved none
/// (every one lost to a concurrent consumer).
const RESERVE_IDLE_ROUNDS: u32 = 3;

/// One caller's `reserve` on a one-shard server (see [`run_batch`]).
pub(super) struct ReserveRequest {
    pub topics: Vec<Topic>,
    pub max: usize,
    pub now: UnixMillis,
}

impl Calls {
    /// With one shard: one function call, shared with the reserves running at the same moment
    /// ([`run_batch`]). With several: a pipelined peek at every shard's first ready entries
    /// (read-only), a merge into the global order, then one pipelined reserve call per shard that
    /// holds some of the best `max` (each takes its own shard's best, so a race lost to another
    /// consumer just leaves a gap that the next round fills); repeated until `max` jobs or nothing
    /// is ready. Two round trips in the common case.
    ///
    /// Ordering caveat with several shards: the order is exact as of the peek; a job that becomes
    /// ready on another shard between the peek and the reserve (a few hundred µs) may be passed
    /// over by this call, never lost. Each shard is asked only for the topics of its chosen
    /// jobs; a topic none of whose chosen jobs came out (held back by its flow control, or
    /// taken by another consumer) is left out of the next rounds, so its jobs do not hide the
    /// other topics'.
    /// The jobs handed out are remembered, so that their finish is answered at once
    /// (`finishing.rs`).
    pub(in crate::store) async fn reserve(
        store: &RedisStore,
        topics: &[Topic],
        max: usize,
        now: UnixMillis,
    ) -> StoreResult<Vec<Job>> {
        let jobs = reserve(store, topics, max, now).await?;
        store.inner.finishing.handed(&jobs, now);
        Ok(jobs)
    }
}

/// [`Calls::reserve`]'s reservation.
async fn reserve(
    store: &RedisStore,
    topics: &[Topic],
    max: usize,
    now: UnixMillis,
) -> StoreResult<Vec<Job>> {
    if topics.is_empty() || max == 0 {
        return Ok(Vec::new());
    }
    if store.inner.shards.len() == 1 {
        // First what a busy batch reserved ahead for these topics (`read_ahead.rs`), then
        // the rest joined with the reserves running at the same moment (group commit; a
        // lone one, e.g. the dispatcher serving its waiters, which batches by itself, runs
        // at once), then jobs of these topics held for other topic lists; the reply then in
        // the topics' order of preference, as one call's would be.
        let mut out = store.inner.read_ahead.take(topics, max);
        if out.len() == max {
            return Ok(out);
        }
        let request = ReserveRequest {
            topics: topics.to_vec(),
            max: max - out.len(),
            now,
        };
        let more = store
            .inner
            .reserves
            .call(request)
            .await
            .unwrap_or_else(|| Err(gone()));
        return match more {
            Ok(more) => {
                out.extend(more);
                if out.len() < max {
                    let left = max - out.len();
                    out.extend(store.inner.read_ahead.take_matching(topics, left));
                }
                read_ahead::in_preference_order(topics, &mut out);
                Ok(out)
            }
            // Jobs already taken from the read-ahead are handed out: the error shows on
            // the next call.
            Err(_) if !out.is_empty() => Ok(out),
            Err(e) => Err(e),
        };
    }
    let mut out: Vec<Job> = Vec::new();
    let mut idle = 0;
    // The topics still asked for: one whose peeked jobs all stayed ready (its flow control
    // held them back, or other consumers were first) is left out of the next rounds, so
    // its heads do not hide the other topics' jobs.
    let mut live: Vec<Topic> = topics.to_vec();
    while out.len() < max && !live.is_empty() {
        let want = max - out.len();
        let heads = peek_ready(store, &live, want, now).await?;
        if heads.is_empty() {
            break;
        }
        // Per shard: how many of its jobs the peek chose, and of which topics (each shard
        // is asked only for the topics it holds some of the best of, in the asked order).
        let mut per_shard: BTreeMap<usize, (usize, Vec<bool>)> = BTreeMap::new();
        let mut asked = vec![0usize; live.len()];
        for (position, _, shard) in &heads {
            let i = (*position - 1) as usize;
            let (n, of) = per_shard
                .entry(*shard)
                .or_insert_with(|| (0, vec![false; live.len()]));
            *n += 1;
            of[i] = true;
            asked[i] += 1;
        }
        let calls: Vec<Call> = per_shard
            .iter()
            .map(|(&shard, (n, of))| {
                let these: Vec<Topic> = live
                    .iter()
                    .zip(of)
                    .filter(|(_, on)| **on)
                    .map(|(t, _)| t.clone())
                    .collect();
                reserve_call(store, shard, &these, *n, now)
            })
            .collect();
        let mut got = 0;
        let mut served = vec![false; live.len()];
        for reply in store.inner.conn.fcall(&calls).await? {
            let jobs = decode_reserved(&reply)?;
            got += jobs.len();
            for j in &jobs {
                if let Some(i) = read_ahead::preference(&live, j) {
                    served[i] = true;
                }
            }
            out.extend(jobs);
        }
        if heads.len() < want && got == heads.len() {
            // The peek saw everything that was ready, and we got all of it.
            break;
        }
        let before = live.len();
        let mut i = 0;
        live.retain(|_| {
            let keep = asked[i] == 0 || served[i];
            i += 1;
            keep
        });
        if live.len() < before {
            continue;
        }
        if got == 0 {
            idle += 1;
            if idle >= RESERVE_IDLE_ROUNDS {
                break;
            }
        }
    }
    out.sort_by_key(|j| {
        let place = read_ahead::preference(topics, j).unwrap_or(usize::MAX);
        (place, j.ready_key())
    });
    Ok(out)
}

/// Reserves for a batch of requests (from concurrent callers) on a one-shard server, in one
/// pipeline: one reserve function call per distinct topic list, for the sum of its requests'
/// `max`, its jobs handed out in arrival order (as the calls one after another would have).
/// A batch of queued requests (they came while others ran: consumers are busy) reads ahead:
/// each topic list's call asks for up to [`read_ahead::AHEAD`] times as many jobs again (within
/// the read-ahead's room), and what its requests do not take is held for the next reserves of
/// that list (`read_ahead.rs`). The batch runs at the latest of the requests' `now`s.
pub(super) async fn run_batch(
    store: &RedisStore,
    requests: &[ReserveRequest],
    queued: bool,
) -> Vec<StoreResult<Vec<Job>>> {
    let now = requests.iter().map(|r| r.now).max().unwrap_or(0);
    let mut groups: Vec<(&[Topic], Vec<usize>)> = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        match groups.iter_mut().find(|(t, _)| *t == r.topics.as_slice()) {
            Some((_, members)) => members.push(i),
            None => groups.push((&r.topics, vec![i])),
        }
    }
    let calls: Vec<Call> = groups
        .iter()
        .map(|(topics, members)| {
            let asked: usize = members.iter().map(|&i| requests[i].max).sum();
            let ahead = if queued {
                store
                    .inner
                    .read_ahead
                    .room(topics)
                    .min(asked * read_ahead::AHEAD)
            } else {
                0
            };
            reserve_call(store, 0, topics, asked + ahead, now)
        })
        .collect();
    let replies = match store.inner.conn.fcall_each(&calls).await {
        Ok(r) => r,
        Err(e) => return vec![Err(e); requests.len()],
    };
    let mut out: Vec<StoreResult<Vec<Job>>> = vec![Ok(Vec::new()); requests.len()];
    for (reply, (topics, members)) in replies.iter().zip(&groups) {
        match reply
            .as_ref()
            .map_err(Clone::clone)
            .and_then(decode_reserved)
        {
            Ok(jobs) => {
                let mut jobs = jobs.into_iter();
                for &i in members {
                    out[i] = Ok(jobs.by_ref().take(requests[i].max).collect());
                }
                let over = store.inner.read_ahead.keep(topics, jobs.collect());
                if !over.is_empty() {
                    // Not on this batch's answer: its callers need not wait for it.
                    let store = store.clone();
                    tokio::spawn(async move { give_back(&store, over).await });
                }
            }
            Err(e) => {
                for &i in members {
                    out[i] = Err(e.clone());
                }
            }
        }
    }
    out
}

/// Each shard's first `want` entries of `topics` in one of its lexicographic zsets (ready
/// or dead, chosen by `zset`): (topic position + 1, member, shard), merged into the zset's
/// global order. Plain ZRANGEBYLEX reads, one per shard and topic, in one pipeline: a read
/// needs no function, and a function call costs Redis several times more.
pub(super) async fn peek(
    store: &RedisStore,
    zset: fn(&ShardKeys) -> &str,
    topics: &[Topic],
    want: usize,
) -> StoreResult<Vec<(i64, Vec<u8>, usize)>> {
    let ranges: Vec<(Vec<u8>, Vec<u8>)> = topics.iter().map(keys::topic_range).collect();
    let mut pipe = redis::pipe();
    for k in &store.inner.shards {
        for (lo, hi) in &ranges {
            pipe.cmd("ZRANGEBYLEX")
                .arg(zset(k))
                .arg(lo)
                .arg(hi)
                .arg("LIMIT")
                .arg(0)
                .arg(want);
        }
    }
    let replies = store.inner.conn.query(&pipe).await?;
    let mut heads = Vec::new();
    for (i, reply) in replies.iter().enumerate() {
        let (shard, topic) = (i / topics.len(), i % topics.len());
        for member in array(reply)? {
            heads.push((topic as i64 + 1, bytes(member)?.to_vec(), shard));
        }
    }
    heads.sort();
    heads.truncate(want);
    Ok(heads)
}

/// [`peek`] at the ready zsets as of `now`: an entry due later (a job placed ahead whose group
/// waits for its tick, lib.lua, or one made ready by a clock ahead of `now`) is passed over
/// with the rest of its priority, whose entries are due later still (they are in run_at
/// order), and that shard's read of the topic goes on at the next priority, in another round
/// of reads.
async fn peek_ready(
    store: &RedisStore,
    topics: &[Topic],
    want: usize,
    now: UnixMillis,
) -> StoreResult<Vec<(i64, Vec<u8>, usize)>> {
    let ranges: Vec<(Vec<u8>, Vec<u8>)> = topics.iter().map(keys::topic_range).collect();
    // (shard, topic position, where the read starts)
    let mut reads: Vec<(usize, usize, Vec<u8>)> = (0..store.inner.shards.len())
        .flat_map(|s| {
            ranges
                .iter()
                .enumerate()
                .map(move |(t, r)| (s, t, r.0.clone()))
        })
        .collect();
    let mut heads = Vec::new();
    while !reads.is_empty() {
        let mut pipe = redis::pipe();
        for (s, t, lo) in &reads {
            pipe.cmd("ZRANGEBYLEX")
                .arg(&store.inner.shards[*s].ready)
                .arg(lo)
                .arg(&ranges[*t].1)
                .arg("LIMIT")
                .arg(0)
                .arg(want);
        }
        let replies = store.inner.conn.query(&pipe).await?;
        let mut next = Vec::new();
        for ((s, t, _), reply) in reads.iter().zip(&replies) {
            let topic = topics[*t].as_str().as_bytes();
            let at = topic.len() + 1;
            for member in array(reply)? {
                let m = bytes(member)?;
                if let (Some(prio), Some(run_at)) = (m.get(at..at + 4), m.get(at + 4..at + 10)) {
                    let prio = u32::from_be_bytes([prio[0], prio[1], prio[2], prio[3]]);
                    let run_at = run_at.iter().fold(0u64, |n, b| n << 8 | u64::from(*b));
                    if run_at > now {
                        if let Some(p) = prio.checked_add(1) {
                            next.push((*s, *t, [b"[", topic, b"\0", &p.to_be_bytes()].concat()));
                        }
                        break;
                    }
                }
                heads.push((*t as i64 + 1, m.to_vec(), *s));
            }
        }
        reads = next;
    }
    heads.sort();
    heads.truncate(want);
    Ok(heads)
}

/// One reserve function call on `shard` for up to `max` jobs.
fn reserve_call(
    store: &RedisStore,
    shard: usize,
    topics: &[Topic],
    max: usize,
    now: UnixMillis,
) -> Call {
    let mut call = store
        .shard_fcall(&RESERVE, &store.inner.shards[shard], now)
        .arg(max);
    for t in topics {
        call = call.arg(t.as_str());
    }
    call
}

/// Decodes a reserve call's `{id, record, ...}` reply.
fn decode_reserved(v: &Value) -> StoreResult<Vec<Job>> {
    array(v)?
        .chunks(2)
        .map(|pair| match pair {
            [id, rec] => decode_job(string(id)?, bytes(rec)?),
            _ => Err(unexpected(v)),
        })
        .collect()
}

/// Gives back jobs reserved ahead and handed to no one (`unreserve.lua`): each still reserved
/// as the read-ahead took it becomes ready again with its attempts as before. One shard (the
/// read-ahead runs only there), one call per 500 jobs, at the time the latest of them was
/// reserved (its deadline less its TTR: the store never reads the clock).
async fn unreserve(store: &RedisStore, held: &[HeldJob]) -> StoreResult<()> {
    for chunk in held.chunks(500) {
        let reserved_at = |h: &HeldJob| {
            let until = h.job.reserved_until.unwrap_or(0);
            until.saturating_sub(h.job.spec.ttr_ms)
        };
        let now = chunk.iter().map(reserved_at).max().unwrap_or(0);
        let mut call = store.shard_fcall(&UNRESERVE, &store.inner.shards[0], now);
        for h in chunk {
            call = call
                .arg(h.job.spec.id.as_str())
                .arg(h.job.reserved_until.unwrap_or(0));
        }
        store.fcall_one(call).await?;
    }
    Ok(())
}

/// Gives back each held job once it has been held for [`read_ahead::HOLD`]: sleeps until the
/// longest-held one has, or while none is held. Holds the store only while giving back;
/// aborted when the store is dropped.
pub(super) async fn sweep(weak: Weak<Inner>, held: Arc<ReadAhead>) {
    loop {
        held.until_one_expires().await;
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let store = RedisStore { inner };
        give_back(&store, held.expired(false)).await;
    }
}

/// Gives back `held` (taken off the read-ahead), logging a failure: a job not given back is
/// delivered again when its TTR ends, as any reserved job whose consumer went away.
pub(super) async fn give_back(store: &RedisStore, held: Vec<HeldJob>) {
    if held.is_empty() {
        return;
    }
    if let Err(e) = unreserve(store, &held).await {
        tracing::warn!(
            error = %e,
            jobs = held.len(),
            "cannot give back jobs reserved ahead; they are delivered again when their TTR ends"
        );
    }
}
