//! The listings on Redis: one page of a queue's jobs in one state (`list`) and the schedule
//! counts (`schedule`). Read-only; each call reads one shard (the `list_*` and `due_range`
//! functions), bounded by the page or a budget, never the whole shard.
//!
//! A page is merged across shards as `reserve.rs` merges its peeks: every shard is asked for
//! up to `limit` jobs after the cursor, and a shard that filled its page may hold more after
//! its last job, so the merged page stops at the earliest such last job ([`merge`]); the next
//! page starts after the merged page's last job. Each shard's order is the key order of
//! [`ListKey`]: ready and dead from their lexicographic zsets (the cursor becomes the member to
//! start after, keys.rs), reserved from the timeline (`list_reserved.lua`, a budget of entries
//! per call), delayed from the minutes `dueidx` lists for the queue's topic
//! (`list_delayed.lua`, given the minutes and their far window lists).
//!
//! The schedule sums each shard's per-minute counts (`due_range.lua`, the `due` HASH through
//! its `dueidx` index) into the steps: a bounded number of minutes per call, as many calls as
//! the range has minutes with delayed jobs divided by [`DUE_CHUNK`].

use super::conn::Call;
use super::keys::{self, ShardKeys};
use super::record::{array, bytes, decode_job, int, score_ms, string, unexpected};
use super::scripts::{Function, Memory};
use super::{Calls, RedisStore};
use crate::job::{Job, JobState, MAX_RUN_AT, Topic, UnixMillis};
use crate::store::{
    JobPage, ListKey, SCHEDULE_BUCKET_MS, StoreError, StoreResult, schedule_step_of, schedule_steps,
};
use redis::Value;

// The listings' reads, registered `no-writes`.
static LIST_LEX: Function = Function::new("list_lex", include_str!("list_lex.lua"), Memory::Reads);
static LIST_DELAYED: Function = Function::new(
    "list_delayed",
    include_str!("list_delayed.lua"),
    Memory::Reads,
);
static LIST_RESERVED: Function = Function::new(
    "list_reserved",
    include_str!("list_reserved.lua"),
    Memory::Reads,
);
static DUE_RANGE: Function =
    Function::new("due_range", include_str!("due_range.lua"), Memory::Reads);

/// The functions this file calls, for the library (`scripts.rs`).
pub(super) static FUNCTIONS: [&Function; 4] =
    [&LIST_LEX, &LIST_DELAYED, &LIST_RESERVED, &DUE_RANGE];

/// Most minutes one `due_range` call reads.
const DUE_CHUNK: usize = 2_000;
/// Most timeline entries one `list_reserved` call reads.
const RESERVED_BUDGET: usize = 2_000;
/// The end of every minute range: past the minute of [`MAX_RUN_AT`].
const END_MINUTE: u64 = MAX_RUN_AT / SCHEDULE_BUCKET_MS + 1;

/// One shard's part of a page: its jobs after the cursor in key order, and whether it may hold
/// more after the last of them (it filled its page).
struct ShardPage {
    jobs: Vec<Job>,
    full: bool,
}

impl Calls {
    pub(in crate::store) async fn list(
        store: &RedisStore,
        queue: &Topic,
        state: JobState,
        after: Option<&ListKey>,
        limit: usize,
    ) -> StoreResult<JobPage> {
        let limit = limit.max(1);
        // Finishes this instance answered have run (`finishing.rs`).
        store.inner.finishing.settle_all().await;
        let pages = match state {
            JobState::Ready | JobState::Dead => list_lex(store, queue, state, after, limit).await?,
            JobState::Reserved => list_reserved(store, queue, after, limit).await?,
            JobState::Delayed => list_delayed(store, queue, after, limit).await?,
        };
        Ok(merge(pages, limit))
    }

    pub(in crate::store) async fn schedule(
        store: &RedisStore,
        topic: Option<&Topic>,
        from: UnixMillis,
        to: UnixMillis,
        step: u64,
    ) -> StoreResult<Vec<u64>> {
        let steps = schedule_steps(from, to, step);
        let mut counts = vec![0u64; usize::try_from(steps).unwrap_or(0)];
        if counts.is_empty() {
            return Ok(counts);
        }
        let topic = topic.map_or("", |t| t.as_str());
        let first = from.div_ceil(SCHEDULE_BUCKET_MS);
        let end = to.div_ceil(SCHEDULE_BUCKET_MS).min(END_MINUTE);
        let shards = &store.inner.shards;
        // Per shard: the last field read (none at first).
        until_every_shard_is_done(
            store,
            &mut counts,
            Vec::new(),
            |_, s, after: &Vec<u8>| {
                due_call_after(store, &shards[s], topic, first, end, after, DUE_CHUNK)
            },
            |counts, _, reply| {
                let a = array(reply)?;
                for pair in a.chunks(2) {
                    let [field, n] = pair else {
                        return Err(unexpected(reply));
                    };
                    let start = minute_of(bytes(field)?)?.saturating_mul(SCHEDULE_BUCKET_MS);
                    if let Some(c) =
                        schedule_step_of(start, from, to, step).and_then(|i| counts.get_mut(i))
                    {
                        *c += int(n)?.max(0) as u64;
                    }
                }
                match a.len() / 2 >= DUE_CHUNK {
                    true => a
                        .get(a.len() - 2)
                        .map(|f| bytes(f).map(<[u8]>::to_vec))
                        .transpose(),
                    false => Ok(None),
                }
            },
        )
        .await?;
        Ok(counts)
    }
}

/// The first `limit` jobs of all shards' pages that no shard can have missed: those up to the
/// earliest last job of a shard that filled its page.
fn merge(pages: Vec<ShardPage>, limit: usize) -> JobPage {
    let cut = pages
        .iter()
        .filter(|p| p.full)
        .filter_map(|p| p.jobs.last().map(ListKey::of))
        .min();
    let mut jobs: Vec<(ListKey, Job)> = pages
        .into_iter()
        .flat_map(|p| p.jobs)
        .map(|j| (ListKey::of(&j), j))
        .filter(|(k, _)| cut.as_ref().is_none_or(|c| k <= c))
        .collect();
    jobs.sort_by(|a, b| a.0.cmp(&b.0));
    let more = cut.is_some() || jobs.len() > limit;
    jobs.truncate(limit);
    let next = if more {
        jobs.last().map(|(k, _)| k.clone())
    } else {
        None
    };
    JobPage {
        jobs: jobs.into_iter().map(|(_, j)| j).collect(),
        next,
    }
}

/// Decodes `{id, record, ...}` pairs of a listing reply.
fn decode_pairs(pairs: &[Value]) -> StoreResult<Vec<Job>> {
    pairs
        .chunks(2)
        .map(|pair| match pair {
            [id, rec] => decode_job(string(id)?, bytes(rec)?),
            _ => Err(StoreError::Corrupt("odd listing reply".into())),
        })
        .collect()
}

/// Ready or dead: one `list_lex` call per shard, in one pipeline.
async fn list_lex(
    store: &RedisStore,
    queue: &Topic,
    state: JobState,
    after: Option<&ListKey>,
    limit: usize,
) -> StoreResult<Vec<ShardPage>> {
    let start = match after {
        None => Vec::new(),
        Some(k) => {
            let member = match state {
                JobState::Ready => keys::ready_member(queue, k.a, k.b, k.c, k.id.as_str()),
                _ => keys::dead_member(queue, k.a, k.id.as_str()),
            };
            match member {
                Some(m) => m,
                // Past every member: nothing follows.
                None => return Ok(Vec::new()),
            }
        }
    };
    let code = if state == JobState::Ready { "r" } else { "b" };
    let calls: Vec<Call> = store
        .inner
        .shards
        .iter()
        .map(|k| {
            store
                .shard_fcall(&LIST_LEX, k, 0)
                .arg(code)
                .arg(queue.as_str())
                .arg(start.as_slice())
                .arg(limit)
        })
        .collect();
    let mut pages = Vec::new();
    for reply in store.inner.conn.fcall(&calls).await? {
        let a = array(&reply)?;
        let (n, pairs) = a.split_first().ok_or_else(|| unexpected(&reply))?;
        let jobs = decode_pairs(pairs)?;
        pages.push(ShardPage {
            full: int(n)? as usize >= limit && !jobs.is_empty(),
            jobs,
        });
    }
    Ok(pages)
}

/// Reserved: `list_reserved` calls, each reading up to [`RESERVED_BUDGET`] timeline entries,
/// repeated on the shards whose budget ran out until each filled its page or reached its end.
async fn list_reserved(
    store: &RedisStore,
    queue: &Topic,
    after: Option<&ListKey>,
    limit: usize,
) -> StoreResult<Vec<ShardPage>> {
    let shards = &store.inner.shards;
    let mut pages: Vec<ShardPage> = shards
        .iter()
        .map(|_| ShardPage {
            jobs: Vec::new(),
            full: false,
        })
        .collect();
    // Per shard: where to resume (None: from the start).
    let start = after.map(|k| (k.a.to_string(), k.id.as_str().to_string()));
    until_every_shard_is_done(
        store,
        &mut pages,
        start,
        |pages, s, resume: &Option<(String, String)>| {
            let (a, id) = resume.clone().unwrap_or_default();
            store
                .shard_fcall(&LIST_RESERVED, &shards[s], 0)
                .arg(queue.as_str())
                .arg(a)
                .arg(id)
                .arg(limit - pages[s].jobs.len())
                .arg(RESERVED_BUDGET)
        },
        |pages, s, reply| {
            let a = array(reply)?;
            let [status, score, id, pairs @ ..] = a else {
                return Err(unexpected(reply));
            };
            pages[s].jobs.extend(decode_pairs(pairs)?);
            Ok(match string(status)? {
                "full" => {
                    pages[s].full = true;
                    None
                }
                "more" => Some(Some((
                    score_ms(score)?.to_string(),
                    string(id)?.to_string(),
                ))),
                _ => None,
            })
        },
    )
    .await?;
    Ok(pages)
}

/// Calls every shard, all together, round after round, until each is done: `call` makes a
/// shard's call from where it resumes (`start` the first time), `take` reads its reply into
/// `state` and answers where it resumes next, or `None` when that shard is done.
async fn until_every_shard_is_done<S, R: Clone>(
    store: &RedisStore,
    state: &mut S,
    start: R,
    call: impl Fn(&S, usize, &R) -> Call,
    mut take: impl FnMut(&mut S, usize, &Value) -> StoreResult<Option<R>>,
) -> StoreResult<()> {
    let mut resume: Vec<Option<R>> = vec![Some(start); store.inner.shards.len()];
    loop {
        let todo: Vec<usize> = (0..resume.len()).filter(|&s| resume[s].is_some()).collect();
        if todo.is_empty() {
            return Ok(());
        }
        let calls: Vec<Call> = todo
            .iter()
            .filter_map(|&s| resume[s].as_ref().map(|r| call(state, s, r)))
            .collect();
        let replies = store.inner.conn.fcall(&calls).await?;
        for (&s, reply) in todo.iter().zip(&replies) {
            resume[s] = take(state, s, reply)?;
        }
    }
}

/// Delayed: per shard, the queue's topic's next minutes with delayed jobs (`due_range`), then
/// one `list_delayed` call for those minutes; again from the minute after the last one until
/// the shard filled its page or has no more minutes.
async fn list_delayed(
    store: &RedisStore,
    queue: &Topic,
    after: Option<&ListKey>,
    limit: usize,
) -> StoreResult<Vec<ShardPage>> {
    let shards = &store.inner.shards;
    let topic = queue.split_queue().0.to_string();
    let mut pages: Vec<ShardPage> = shards
        .iter()
        .map(|_| ShardPage {
            jobs: Vec::new(),
            full: false,
        })
        .collect();
    let first = after.map_or(0, |k| k.a / SCHEDULE_BUCKET_MS);
    let mut from: Vec<Option<u64>> = vec![Some(first); shards.len()];
    let (after_at, after_id) = after
        .map(|k| (k.a.to_string(), k.id.as_str().to_string()))
        .unwrap_or_default();
    loop {
        let todo: Vec<usize> = (0..shards.len()).filter(|&s| from[s].is_some()).collect();
        if todo.is_empty() {
            return Ok(pages);
        }
        // The next minutes of each shard, enough to hold the rest of its page.
        let want = (limit + 1).min(DUE_CHUNK);
        let calls: Vec<Call> = todo
            .iter()
            .map(|&s| {
                due_call(
                    store,
                    &shards[s],
                    &topic,
                    from[s].unwrap_or(0),
                    END_MINUTE,
                    want,
                )
            })
            .collect();
        let replies = store.inner.conn.fcall(&calls).await?;
        let mut plans: Vec<(usize, Vec<u64>, bool)> = Vec::new();
        for (&s, reply) in todo.iter().zip(&replies) {
            let buckets = decode_buckets(reply)?;
            let exhausted = buckets.len() < want;
            let need = (limit - pages[s].jobs.len()) as u64;
            let mut minutes = Vec::new();
            let mut sum = 0;
            for (i, (m, n)) in buckets.iter().enumerate() {
                minutes.push(*m);
                // The first minute may hold jobs before the cursor: it does not count.
                if i > 0 {
                    sum += n;
                }
                if sum >= need {
                    break;
                }
            }
            let last_of_all = exhausted && minutes.len() == buckets.len();
            if minutes.is_empty() {
                from[s] = None;
            } else {
                plans.push((s, minutes, last_of_all));
            }
        }
        if plans.is_empty() {
            continue;
        }
        let calls: Vec<Call> = plans
            .iter()
            .map(|(s, minutes, _)| {
                let mut call = store
                    .shard_fcall_windows(&LIST_DELAYED, &shards[*s], minutes, 0)
                    .arg(queue.as_str())
                    .arg(&after_at)
                    .arg(&after_id)
                    .arg(limit - pages[*s].jobs.len());
                for m in minutes {
                    call = call.arg(*m);
                }
                call
            })
            .collect();
        let replies = store.inner.conn.fcall(&calls).await?;
        for ((s, minutes, last_of_all), reply) in plans.iter().zip(&replies) {
            let a = array(reply)?;
            let (full, pairs) = a.split_first().ok_or_else(|| unexpected(reply))?;
            pages[*s].jobs.extend(decode_pairs(pairs)?);
            from[*s] = if int(full)? == 1 {
                pages[*s].full = true;
                None
            } else if *last_of_all {
                None
            } else {
                minutes.last().map(|m| m + 1)
            };
        }
    }
}

/// A `due_range` call: `topic`'s minutes in `[first, end)` ('' = every topic), `limit` at most.
fn due_call(
    store: &RedisStore,
    keys: &ShardKeys,
    topic: &str,
    first: u64,
    end: u64,
    limit: usize,
) -> Call {
    due_call_after(store, keys, topic, first, end, &[], limit)
}

fn due_call_after(
    store: &RedisStore,
    keys: &ShardKeys,
    topic: &str,
    first: u64,
    end: u64,
    after: &[u8],
    limit: usize,
) -> Call {
    store
        .shard_fcall(&DUE_RANGE, keys, 0)
        .arg(topic)
        .arg(first)
        .arg(end)
        .arg(after)
        .arg(limit)
}

/// A `due_range` reply: (minute, count) in minute order, with the last field read.
fn decode_buckets(reply: &Value) -> StoreResult<Vec<(u64, u64)>> {
    array(reply)?
        .chunks(2)
        .map(|pair| match pair {
            [field, n] => Ok((minute_of(bytes(field)?)?, int(n)?.max(0) as u64)),
            _ => Err(unexpected(reply)),
        })
        .collect()
}

/// The minute of a `due` field: its last 5 bytes, big-endian.
fn minute_of(field: &[u8]) -> StoreResult<u64> {
    let tail = field
        .len()
        .checked_sub(5)
        .map(|at| &field[at..])
        .ok_or_else(|| StoreError::Corrupt("short due field".into()))?;
    Ok(tail.iter().fold(0u64, |m, &b| (m << 8) | u64::from(b)))
}
