//! `tick` on Redis: one timer pass over the shards, performed as `tick/plan.rs` plans it.
//! This file reads the shards (the look), sends the planned `tick` function calls, adds up
//! their replies and wakes this instance's waiters for the topics that gained ready jobs.
//!
//! It decides neither which jobs are due (`tick.lua` does, from each record) nor which shards
//! to call (the plan does).

mod plan;

use super::conn::Call;
use super::record::{array, int, score_ms, string, unexpected};
use super::scripts::{Function, Memory};
use super::{Calls, RedisStore};
use crate::job::{Topic, UnixMillis};
use crate::store::{StoreError, StoreEvent, StoreResult, TickOutcome};
use plan::{Look, Pass, Window};
use std::sync::atomic::Ordering;

/// The timer's pass (`tick.lua`), registered twice (scripts.rs): as `tick`, which promotes and
/// expires (moves jobs) and so runs when Redis is full, and as `tick_drain`, for the passes
/// that also drain far windows, which add memory.
static TICK: Function = Function::new("tick", include_str!("tick.lua"), Memory::Neutral);
static TICK_DRAIN: Function = Function::new("tick_drain", include_str!("tick.lua"), Memory::Adds);

/// The functions this file calls, for the library (`scripts.rs`).
pub(super) static FUNCTIONS: [&Function; 2] = [&TICK, &TICK_DRAIN];

/// Most timeline entries one shard's tick function call moves, whatever the timer's `limit`:
/// a function call holds its Redis server for as long as it runs, so a backlog falling due at
/// once is moved in calls this size (each reports the rest as due now), with every other
/// client's calls served in between.
const TICK_MAX_MOVES: usize = 250;
/// Most far windows per shard one tick looks at (and drains, if due); more due windows just
/// make the tick report `next_due = now` and the timer go again.
const TICK_WINDOWS: u64 = 16;
/// On one shard, the longest a tick goes without looking for far windows to drain.
const WINDOW_CHECK_MS: u64 = 1000;
/// After a window drain is refused (Redis full), how long ticks leave the windows alone, only
/// promoting and expiring, before they try to drain again.
const DRAIN_RETRY_MS: u64 = 1000;

impl Calls {
    /// `limit` bounds the whole pass, across shards (promotions and expiries; and separately the
    /// ids drained from far window lists). Two round trips when work is due: a pipelined look at
    /// every shard's due count, timeline head and first far windows, then the tick functions of
    /// the shards the plan calls, in one pipeline. An idle pass is one round trip. Ready events
    /// are published by the functions themselves.
    ///
    /// On one shard the look is made at most every [`WINDOW_CHECK_MS`] (and at once when a pass
    /// reports due work it did not do); the passes in between are the function alone, one round
    /// trip.
    ///
    /// `next_due` is the earliest timeline deadline or window drain time (a window's score minus
    /// `WINDOW_MS`): the timer wakes a window ahead of a far job, drains it into the timeline,
    /// then wakes at its exact run_at.
    pub(in crate::store) async fn tick(
        store: &RedisStore,
        now: UnixMillis,
        limit: usize,
    ) -> StoreResult<TickOutcome> {
        let inner = &store.inner;
        // No more than every shard's call can move (`tick_call` bounds each).
        let mut limit = limit.min(TICK_MAX_MOVES * inner.shards.len());
        let mut done = TickOutcome::default();
        let check_at = inner.window_check_at.load(Ordering::Relaxed);
        if plan::skips_look(inner.shards.len(), now, check_at) {
            let call = tick_call(store, &plan::direct(limit), now, store.stamp(now, 1));
            done = run_ticks(store, &[call], done).await?;
            match plan::left_after_direct(&done, now, limit) {
                None => return Ok(done),
                Some(left) => {
                    limit = left;
                    done.next_due = None;
                }
            }
        }
        let looks = look(store, now).await?;
        let refused_until = inner.drains_refused_until.load(Ordering::Relaxed);
        let start = inner.tick_rotation.fetch_add(1, Ordering::Relaxed);
        let planned = plan::plan(&looks, now, limit, refused_until, start)?;
        let mut out = done;
        if let Some(t) = planned.next_due {
            out.next_due = Some(out.next_due.map_or(t, |d| d.min(t)));
        }
        inner
            .window_check_at
            .store(now.saturating_add(WINDOW_CHECK_MS), Ordering::Relaxed);
        if planned.passes.is_empty() {
            return Ok(out);
        }
        let seq = store.stamp(now, 1);
        let calls: Vec<Call> = planned
            .passes
            .iter()
            .map(|p| tick_call(store, p, now, seq))
            .collect();
        let (out, failed) = run_ticks_each(store, &calls, out).await?;
        let Some((again, refused)) = plan::after_refusal(&planned.passes, failed)? else {
            return Ok(out);
        };
        let retry_at = now.saturating_add(DRAIN_RETRY_MS);
        inner
            .drains_refused_until
            .store(retry_at, Ordering::Relaxed);
        tracing::warn!(
            error = %refused,
            retry_in_ms = DRAIN_RETRY_MS,
            "far-future jobs cannot be moved to the timeline now; due jobs are still promoted"
        );
        let calls: Vec<Call> = again
            .iter()
            .map(|p| tick_call(store, p, now, seq))
            .collect();
        let mut out = run_ticks(store, &calls, out).await?;
        out.next_due = Some(out.next_due.map_or(retry_at, |d| d.min(retry_at)));
        Ok(out)
    }
}

/// One pipeline: every shard's count of due timeline entries, timeline head and first
/// [`TICK_WINDOWS`] far windows.
async fn look(store: &RedisStore, now: UnixMillis) -> StoreResult<Vec<Look>> {
    let mut pipe = redis::pipe();
    for k in &store.inner.shards {
        pipe.cmd("ZCOUNT").arg(&k.timeline).arg("-inf").arg(now);
        pipe.cmd("ZRANGE")
            .arg(&k.timeline)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES");
        pipe.cmd("ZRANGE")
            .arg(&k.windows)
            .arg(0)
            .arg(TICK_WINDOWS - 1)
            .arg("WITHSCORES");
    }
    let replies = store.inner.conn.query(&pipe).await?;
    let mut looks = Vec::with_capacity(store.inner.shards.len());
    for triple in replies.chunks(3) {
        let [count, head, windows] = triple else {
            return Err(StoreError::Corrupt("short tick reply".into()));
        };
        let head = match array(head)? {
            [_, score] => Some(score_ms(score)?),
            _ => None,
        };
        let windows = array(windows)?
            .chunks(2)
            .map(|pair| match pair {
                [member, score] => Ok(Window {
                    number: string(member).and_then(|s| s.parse().map_err(|_| unexpected(member))),
                    score: score_ms(score)?,
                }),
                _ => Err(unexpected(windows)),
            })
            .collect::<StoreResult<Vec<Window>>>()?;
        looks.push(Look {
            due: int(count)?.max(0) as u64,
            head,
            windows,
        });
    }
    Ok(looks)
}

/// A pass's tick function call, with `seq` for burials. The window floor is the time drains
/// are refused until, read as the call is built.
fn tick_call(store: &RedisStore, pass: &Pass, now: UnixMillis, seq: u64) -> Call {
    let inner = &store.inner;
    // A pass that drains windows may add memory; one that does not is run even when Redis is
    // full (scripts.rs).
    let function = if pass.drains.is_empty() {
        &TICK
    } else {
        &TICK_DRAIN
    };
    let mut call = store
        .shard_fcall_windows(function, &inner.shards[pass.shard], &pass.drains, now)
        .arg(pass.limit.min(TICK_MAX_MOVES as u64))
        .arg(seq)
        .arg(pass.drain_budget)
        .arg(&inner.origin)
        .arg(inner.drains_refused_until.load(Ordering::Relaxed));
    for &w in &pass.drains {
        call = call.arg(w);
    }
    call
}

/// Runs tick function calls and adds what they did to `out`; wakes this instance's waiters
/// for the topics that gained ready jobs. When some calls fail, the others' work is done all
/// the same: their waiters are woken before the first failure is returned.
async fn run_ticks(
    store: &RedisStore,
    calls: &[Call],
    out: TickOutcome,
) -> StoreResult<TickOutcome> {
    let (out, failed) = run_ticks_each(store, calls, out).await?;
    match failed.into_iter().next() {
        Some((_, e)) => Err(e),
        None => Ok(out),
    }
}

/// [`run_ticks`], returning the calls that failed (by index, with their error) beside what
/// the others did.
async fn run_ticks_each(
    store: &RedisStore,
    calls: &[Call],
    mut out: TickOutcome,
) -> StoreResult<(TickOutcome, Vec<(usize, StoreError)>)> {
    let mut next_due = |t: UnixMillis| {
        out.next_due = Some(out.next_due.map_or(t, |d| d.min(t)));
    };
    let (mut promoted, mut expired) = (0, 0);
    let mut ready: Vec<Topic> = Vec::new();
    let mut failed = Vec::new();
    let replies = store.inner.conn.fcall_each(calls).await?;
    for (i, reply) in replies.into_iter().enumerate() {
        let parsed = reply.and_then(|reply| {
            let a = array(&reply)?;
            let [p, e, next, topics @ ..] = a else {
                return Err(unexpected(&reply));
            };
            let topics = topics
                .iter()
                .map(|t| Topic::parse_queue(string(t)?).map_err(|_| unexpected(t)))
                .collect::<StoreResult<Vec<Topic>>>()?;
            Ok((int(p)?, int(e)?, int(next)?, topics))
        });
        let (p, e, next, topics) = match parsed {
            Ok(x) => x,
            Err(e) => {
                failed.push((i, e));
                continue;
            }
        };
        for t in topics {
            if !ready.contains(&t) {
                ready.push(t);
            }
        }
        promoted += p.max(0) as u64;
        expired += e.max(0) as u64;
        if next >= 0 {
            next_due(next as u64);
        }
    }
    out.promoted += promoted;
    out.expired += expired;
    // This instance's waiters hear of the new ready jobs now, not after the pub/sub echo
    // (which events.rs drops); other instances hear the published event.
    for t in ready {
        let _ = store.inner.events.send(StoreEvent::Ready(t));
    }
    Ok((out, failed))
}
