//! The Redis store: delayq's production backend, safe for several delayq instances running
//! against one Redis at once (active-active).
//!
//! Every state transition is one Lua function (`*.lua` here, one file per transition, loaded
//! as one Redis function library by `scripts.rs`), so each is atomic on the Redis side: no
//! locks, no read-modify-write across round trips, and a job is never handed to two consumers
//! within its TTR however many instances race. The functions implement job.rs's rules (see
//! `lib.lua` for the record format and index upkeep); this file only routes calls to shards,
//! batches them into pipelines, merges shards for `reserve`, and decodes replies. It does not
//! decide transitions and never reads the clock.
//!
//! Layout (`keys.rs`): jobs are spread over `shards` shards by FNV-1a of the id; each shard is
//! one hash tag `{<prefix>:<s>}` (one Redis Cluster slot) holding a jobs HASH (one field per
//! job: no key per job, ids never become key names), a timeline ZSET (near delayed and
//! reserved jobs by exact deadline), far-future window LISTs with their index ZSET (delayed
//! jobs due two or more [`WINDOW_MS`] windows ahead; the timer drains a window into the
//! timeline one window before it starts, see `lib.lua`), a ready and a dead ZSET (all
//! topics, ordered topic-first) and a counts HASH for cheap stats. Rust names the window list
//! a push or reschedule needs (it knows the new run_at) and passes it in KEYS.
//!
//! Connections (`conn.rs`, `events.rs`): one multiplexed connection for all commands (a
//! consumer in a long poll holds none: waiting lives in dispatch.rs) and one pub/sub connection
//! for events. With Redis down every call fails within about 2 s with
//! [`StoreError::Unavailable`]; both connections come back by themselves.
//!
//! Memory (`tests/redis_store.rs` `memory_per_pending_job_is_at_most_200_bytes`: 100,000 jobs
//! an hour ahead, 30-byte body, 8 shards, Redis 7.0, jemalloc): about 138 bytes per pending
//! job with 12-character ids (`r1234-567890`) and 194 with 36-character UUIDs (before the
//! window lists and the short record: 252 and 316). Per job: the jobs HASH field (24-byte
//! dict entry, ~10 of bucket array, the id's sds, a 59-byte record in a 64-byte allocation)
//! plus a window list entry (the id's length + 2). A job within two windows of its time costs
//! a timeline entry more (~144). Deleted or rescheduled far jobs leave their id in the old
//! list until that window is drained. Going lower would take listpack-sized buckets for the
//! jobs HASH (the dict entry and sds headers are most of what is left).
//!
//! Redis Cluster ([`RedisTarget::Cluster`]): the same functions and layout, each shard's keys
//! on one slot with tags chosen to spread the shards evenly over the slot space
//! ([`keys::cluster_tag`]), so one busy topic's jobs are spread over every master. Calls that
//! cover several shards (reserve's peek, stats, tick) send one command per shard concurrently
//! instead of one pipeline (`conn.rs`); events are heard on one node (`events.rs`).
//!
//! Not here: TLS options beyond what the URL says, and any retry of writes by delayq (a failed
//! write is reported, never repeated blindly: it may have run; see [`conn::Conn::Cluster`] for
//! the cluster client's own resend after a dropped connection).

mod coalesce;
mod conn;
mod events;
mod keys;
mod record;
mod scripts;

pub use keys::{MAX_SHARDS, ShardKeys, key_slot, shard_of, validate_prefix};
use keys::{WINDOW_MS, far_window};

use crate::job::{Job, JobId, JobSpec, JobState, MAX_RUN_AT, Topic, UnixMillis};
use crate::store::{
    EVENT_CHANNEL_CAPACITY, PushMode, PushOutcome, Reschedule, Stats, Store, StoreError,
    StoreEvent, StoreResult, TickOutcome, TopicCounts,
};
use async_trait::async_trait;
use coalesce::Coalescer;
use conn::{Call, Conn};
use record::{
    array, by_id_reply, bytes, decode_job, encode_new, int, state_from_code, string, unexpected,
};
use redis::Value;
use scripts::LIBRARY;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

/// Which Redis deployment to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server (or a primary behind a fixed address):
    /// `redis://[user:password@]host:port[/db]` or `rediss://...` for TLS.
    Server(String),
    /// A Redis Cluster, given by seed URLs (`redis://host:port`, a few nodes are enough: the
    /// rest are discovered). Shard keys use the cluster tag format (`keys.rs`), so a prefix's
    /// data is not shared between a server and a cluster deployment.
    Cluster(Vec<String>),
}

/// How to reach Redis and where delayq's keys live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisOptions {
    pub target: RedisTarget,
    /// Prefix of every key (and of the event channel), so several delayq namespaces can share
    /// one Redis. Must not contain `{` or `}` (it is inside the hash tag).
    pub prefix: String,
    /// Number of shards (hash slots) jobs are spread over; 0 counts as 1. Every instance
    /// sharing a prefix must use the same value: changing it strands existing jobs.
    pub shards: u16,
}

/// Most jobs one push function call carries: bounds how long one call blocks Redis.
const PUSH_CHUNK: usize = 256;
/// Group commit of pushes, removes and reserves (`coalesce.rs`): most jobs joined into one batch, and
/// most batches of one kind on the wire at once. Two in flight keep Redis busy while the next
/// batch forms; more would only make batches smaller.
const COALESCE_MAX_JOBS: usize = 1000;
const COALESCE_IN_FLIGHT: usize = 2;
/// Most far windows per shard one tick looks at (and drains, if due); more due windows just
/// make the tick report `next_due = now` and the timer go again.
const TICK_WINDOWS: u64 = 16;
/// On one shard, the longest a tick goes without looking for far windows to drain.
const WINDOW_CHECK_MS: u64 = 1000;
/// After a window drain is refused (Redis full), how long ticks leave the windows alone, only
/// promoting and expiring, before they try to drain again.
const DRAIN_RETRY_MS: u64 = 1000;
/// Most dead jobs one `kick_topic` round moves.
const KICK_CHUNK: u64 = 1000;
/// `reserve` gives up after this many rounds that found jobs in a peek but reserved none
/// (every one lost to a concurrent consumer).
const RESERVE_IDLE_ROUNDS: u32 = 3;
/// Seq stamps are `now << SEQ_SHIFT` or the last stamp + 1, whichever is larger.
const SEQ_SHIFT: u32 = 10;
/// Largest `now` whose stamp stays below 2^53 (exact in Lua): 8.8e12 ms, the year 2248.
const SEQ_MAX_NOW: u64 = (1 << (53 - SEQ_SHIFT)) - 1;

/// The Redis-backed [`Store`]. Cheap to clone; clones share connections and event channel.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Conn,
    /// Keys of each shard, indexed by shard number.
    shards: Vec<ShardKeys>,
    /// Pub/sub channel the functions publish events on.
    channel: String,
    /// This instance's id in the events its ticks publish (events.rs drops their echo).
    origin: String,
    /// Fed by the subscriber task; every `subscribe()` is a receiver of it.
    events: broadcast::Sender<StoreEvent>,
    /// Last seq stamp handed out by this instance (see [`RedisStore::stamp`]).
    last_seq: AtomicU64,
    /// Rotates which shard gets the odd units of a tick's limit (see [`share_out`]).
    tick_rotation: AtomicUsize,
    /// On one shard: until when ticks skip the look at the far windows (see `tick`).
    window_check_at: AtomicU64,
    /// Until when ticks drain no far window, after a drain was refused (see `tick`); 0: none.
    drains_refused_until: AtomicU64,
    /// The pub/sub forwarding task; stopped when the last clone of the store is dropped.
    subscriber: JoinHandle<()>,
    /// Concurrent pushes and removes joined into shared round trips (`coalesce.rs`).
    pushes: Coalescer<PushRequest, PushReply>,
    removes: Coalescer<Vec<JobId>, StoreResult<Vec<StoreResult<JobState>>>>,
    /// Concurrent reserves on a one-shard server, joined the same way.
    reserves: Coalescer<ReserveRequest, StoreResult<Vec<Job>>>,
}

/// One caller's `reserve` (one-shard servers: see [`RedisStore::reserve_now`]).
struct ReserveRequest {
    topics: Vec<Topic>,
    max: usize,
    now: UnixMillis,
}

/// One caller's `push_batch`: its jobs, stamped `seq..seq + len`.
struct PushRequest {
    jobs: Vec<JobSpec>,
    seq: u64,
    mode: PushMode,
    now: UnixMillis,
}

type PushReply = StoreResult<Vec<StoreResult<PushOutcome>>>;

/// The store behind a coalescer's batch, or `None` once it was dropped.
fn upgrade(weak: &Weak<Inner>) -> Option<RedisStore> {
    weak.upgrade().map(|inner| RedisStore { inner })
}

/// A [`Coalescer`] whose batches `run` on the store, or are answered "shutting down" once the
/// store is gone (the coalescer's task holds only `weak`).
fn joined<R, T, F, Fut>(
    weak: &Weak<Inner>,
    units: fn(&R) -> usize,
    run: F,
) -> Coalescer<R, StoreResult<T>>
where
    R: Send + 'static,
    T: Send + 'static,
    F: Fn(RedisStore, Vec<R>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Vec<StoreResult<T>>> + Send + 'static,
{
    let weak = weak.clone();
    Coalescer::spawn(
        COALESCE_IN_FLIGHT,
        COALESCE_MAX_JOBS,
        units,
        move |batch: Vec<R>| {
            let n = batch.len();
            let running = upgrade(&weak).map(|s| run(s, batch));
            async move {
                match running {
                    Some(f) => f.await,
                    None => (0..n).map(|_| Err(gone())).collect(),
                }
            }
        },
    )
}

/// Records this instance's layout under the prefix if none is, and fails if a different one
/// is: a second instance (or a restart) with another `shards` or deployment kind would strand
/// the jobs laid out the other way.
///
/// Data written before the layout was recorded (no layout key) is checked too, on one server:
/// jobs in a shard at or beyond this instance's count mean the data was written with more
/// shards (the default was 8 then), and starting would strand them.
async fn check_layout(
    conn: &Conn,
    prefix: &str,
    mine: &str,
    shards: u16,
    cluster: bool,
) -> StoreResult<()> {
    let key = keys::layout_key(prefix);
    let mut get = redis::pipe();
    get.cmd("GET").arg(&key);
    let recorded = match conn.query(&get).await?.first() {
        Some(v) if *v != Value::Nil => string(v)?.to_string(),
        _ => {
            if !cluster {
                refuse_unrecorded_shards(conn, prefix, shards).await?;
            }
            // Another instance may record its layout at the same moment: the first SET wins,
            // and the re-read tells which.
            let mut set = redis::pipe();
            set.cmd("SET").arg(&key).arg(mine).arg("NX");
            conn.query(&set).await?;
            let replies = conn.query(&get).await?;
            replies
                .first()
                .map(string)
                .transpose()?
                .unwrap_or(mine)
                .to_string()
        }
    };
    if recorded == mine {
        return Ok(());
    }
    Err(StoreError::Unavailable(
        format!(
            "Redis already holds delayq data under prefix {prefix:?} laid out as {recorded:?}, \
         not {mine:?}: start every instance with the same --shards (and server or cluster \
         mode), or use another --prefix"
        )
        .into(),
    ))
}

/// On one server without a recorded layout: fails if jobs sit in a shard at or beyond
/// `shards` (written before the layout was recorded, with more shards).
async fn refuse_unrecorded_shards(conn: &Conn, prefix: &str, shards: u16) -> StoreResult<()> {
    let mut probe = redis::pipe();
    let exists = probe.cmd("EXISTS");
    for s in shards..MAX_SHARDS {
        exists.arg(ShardKeys::new(prefix, s).jobs);
    }
    let found = conn.query(&probe).await?;
    if found.first().map(int).transpose()?.unwrap_or(0) > 0 {
        return Err(StoreError::Unavailable(
            format!(
                "Redis holds delayq jobs under prefix {prefix:?} in shards beyond the {shards} \
             configured: they were written with more shards (before delayq recorded its \
             layout the default was 8); start with the --shards they were written with"
            )
            .into(),
        ));
    }
    Ok(())
}

/// A batch call's reply (or its error) as one value per item sent, `n` of them.
fn per_item(reply: &StoreResult<Value>, n: usize) -> StoreResult<&[Value]> {
    let v = reply.as_ref().map_err(Clone::clone)?;
    let a = array(v)?;
    if a.len() == n {
        Ok(a)
    } else {
        Err(unexpected(v))
    }
}

fn corrupt_record(id: &JobId) -> StoreError {
    StoreError::Corrupt(format!("job record {:?} does not decode", id.as_str()).into())
}

fn gone() -> StoreError {
    StoreError::Unavailable("the Redis store is shutting down".into())
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.subscriber.abort();
    }
}

impl RedisStore {
    /// Connects, loads the function library and subscribes to events. Fails with
    /// [`StoreError::Unavailable`] (within about 2 s) if Redis cannot be reached or the options
    /// are unusable; the caller may retry.
    pub async fn connect(opts: RedisOptions) -> StoreResult<RedisStore> {
        keys::validate_prefix(&opts.prefix)
            .map_err(|e| StoreError::Unavailable(format!("Redis key prefix {e}").into()))?;
        let open = |url: &str| {
            redis::Client::open(url)
                .map_err(|e| StoreError::Unavailable(format!("invalid Redis URL: {e}").into()))
        };
        let count = opts.shards.max(1);
        let (conn, clients, shards) = match &opts.target {
            RedisTarget::Server(url) => {
                let client = open(url)?;
                let conn = Conn::connect(&client).await?;
                let shards: Vec<ShardKeys> = (0..count)
                    .map(|s| ShardKeys::new(&opts.prefix, s))
                    .collect();
                (conn, vec![client], shards)
            }
            RedisTarget::Cluster(seeds) => {
                let clients = seeds
                    .iter()
                    .map(|u| open(u))
                    .collect::<StoreResult<Vec<_>>>()?;
                if clients.is_empty() {
                    return Err(StoreError::Unavailable(
                        "no Redis Cluster seed URL given".into(),
                    ));
                }
                let client = conn::cluster_client(seeds).map_err(|e| {
                    StoreError::Unavailable(format!("invalid Redis Cluster seeds: {e}").into())
                })?;
                let conn = Conn::connect_cluster(&client).await?;
                let shards: Vec<ShardKeys> = (0..count)
                    .map(|s| ShardKeys::cluster(&opts.prefix, s, count))
                    .collect();
                (conn, clients, shards)
            }
        };
        let cluster = matches!(opts.target, RedisTarget::Cluster(_));
        check_layout(
            &conn,
            &opts.prefix,
            &keys::layout(count, cluster),
            count,
            cluster,
        )
        .await?;
        // After a first small command: Redis answers an unauthenticated client's large
        // argument (the library is ~30 KB) with a protocol error, not with NOAUTH.
        conn.load().await?;
        // Not worth failing a start over: the next start tries again.
        match conn.prune().await {
            Ok(deleted) if !deleted.is_empty() => tracing::info!(
                libraries = ?deleted,
                "deleted the Redis function libraries of other delayq builds"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot delete other builds' function libraries"),
        }
        let channel = keys::event_channel(&opts.prefix);
        let (used, first) = events::subscribe_any(&clients, 0, &channel).await?;
        let (tx, _) = broadcast::channel(EVENT_CHANNEL_CAPACITY);
        let origin = uuid::Uuid::now_v7().simple().to_string();
        let subscriber = events::spawn(
            clients,
            used,
            channel.clone(),
            origin.clone(),
            tx.clone(),
            first,
        );
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| Inner {
            conn,
            shards,
            channel,
            origin,
            events: tx,
            last_seq: AtomicU64::new(0),
            tick_rotation: AtomicUsize::new(0),
            window_check_at: AtomicU64::new(0),
            drains_refused_until: AtomicU64::new(0),
            subscriber,
            pushes: joined(
                weak,
                |r: &PushRequest| r.jobs.len(),
                |s, b| async move { s.push_now(&b).await },
            ),
            removes: joined(
                weak,
                |ids: &Vec<JobId>| ids.len(),
                |s, b| async move { s.remove_now(&b).await },
            ),
            reserves: joined(
                weak,
                |r: &ReserveRequest| r.max,
                |s, b| async move { s.reserve_now(&b).await },
            ),
        });
        Ok(RedisStore { inner })
    }

    /// Reserves `n` consecutive seq stamps and returns the first.
    ///
    /// Decision: seq (the push-order tie-break, and the burial order of dead jobs) is stamped
    /// by the calling instance, not by a Redis counter: a counter per shard would not order
    /// pushes that land on different shards, and one shared counter would be a key outside
    /// the shards' slots. Stamps are `now · 1024` or the instance's last stamp + 1, whichever
    /// is larger: strictly increasing per instance, ordered by time across instances (whose
    /// relative push order is only defined by their clocks anyway) and below 2^53.
    fn stamp(&self, now: UnixMillis, n: u64) -> u64 {
        let floor = now.min(SEQ_MAX_NOW) << SEQ_SHIFT;
        let mut base = floor;
        let _ = self
            .inner
            .last_seq
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
                base = floor.max(last + 1);
                Some(base + n.max(1) - 1)
            });
        base
    }

    /// The keys of each shard, indexed by shard number (for tests and tools that inspect the
    /// layout, e.g. which cluster node holds which shard).
    pub fn shard_keys(&self) -> &[ShardKeys] {
        &self.inner.shards
    }

    fn shard(&self, id: &JobId) -> &ShardKeys {
        &self.inner.shards[usize::from(shard_of(id.as_str(), self.shard_count()))]
    }

    fn shard_count(&self) -> u16 {
        self.inner.shards.len() as u16
    }

    /// A transition's call on one shard (`function`, a name from [`LIBRARY`]): KEYS and the
    /// common ARGV (channel, now).
    fn eval(&self, function: &str, keys: &ShardKeys, now: UnixMillis) -> Call {
        self.eval_windows(function, keys, &[], now)
    }

    /// [`RedisStore::eval`] with far window lists `windows` after the shard's keys (push,
    /// tick: KEYS[7..]).
    fn eval_windows(
        &self,
        function: &str,
        keys: &ShardKeys,
        windows: &[u64],
        now: UnixMillis,
    ) -> Call {
        let window_keys: Vec<String> = windows.iter().map(|&w| keys.window(w)).collect();
        let mut all_keys: Vec<&str> = keys.all().to_vec();
        all_keys.extend(window_keys.iter().map(String::as_str));
        Call::new(function, &all_keys)
            .arg(&self.inner.channel)
            .arg(now)
    }

    async fn eval_one(&self, call: Call) -> StoreResult<Value> {
        let mut out = self.inner.conn.eval(&[call]).await?;
        out.pop().ok_or_else(|| unexpected(&Value::Nil))
    }

    /// Pushes a batch of requests (from concurrent callers) in one pipeline: per shard and
    /// mode, one function call per [`PUSH_CHUNK`] jobs, in request order. The batch runs at the
    /// latest of the requests' `now`s (all of them past, so no job is ready early). A request
    /// fails as a whole if a call carrying some of its jobs failed (as a lone call would).
    async fn push_now(&self, requests: &[PushRequest]) -> Vec<PushReply> {
        let now = requests.iter().map(|r| r.now).max().unwrap_or(0);
        // (request, job) positions per (shard, mode), in order.
        let mut groups: BTreeMap<(u16, bool), Vec<(usize, usize)>> = BTreeMap::new();
        for (r, req) in requests.iter().enumerate() {
            let replace = req.mode == PushMode::Replace;
            for (i, j) in req.jobs.iter().enumerate() {
                groups
                    .entry((shard_of(j.id.as_str(), self.shard_count()), replace))
                    .or_default()
                    .push((r, i));
            }
        }
        let mut calls = Vec::new();
        let mut slots: Vec<&[(usize, usize)]> = Vec::new();
        for ((shard, replace), members) in &groups {
            let keys = &self.inner.shards[usize::from(*shard)];
            for chunk in members.chunks(PUSH_CHUNK) {
                let job = |&(r, i): &(usize, usize)| &requests[r].jobs[i];
                // The distinct far windows of the chunk, in first-use order: KEYS[7..].
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
                let mut call = self
                    .eval_windows(&LIBRARY.push, keys, &windows, now)
                    .arg(if *replace { "replace" } else { "reject" })
                    .arg(windows.len());
                for w in &windows {
                    call = call.arg(*w);
                }
                for (m, &slot) in chunk.iter().zip(&slot_of) {
                    let j = job(m);
                    let seq = requests[m.0].seq + m.1 as u64;
                    let stored = stored_spec(j);
                    let state = stored.initial_state(now);
                    call = call
                        .arg(j.id.as_str())
                        .arg(encode_new(&stored, state, seq))
                        .arg(j.topic.as_str())
                        .arg(stored.run_at)
                        .arg(j.priority)
                        .arg(seq)
                        .arg(slot);
                }
                calls.push(call);
                slots.push(chunk);
            }
        }
        let mut out: Vec<PushReply> = requests
            .iter()
            .map(|r| Ok(vec![Err(gone()); r.jobs.len()]))
            .collect();
        let replies = match self.inner.conn.eval_each(&calls).await {
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

    async fn remove(&self, id: &JobId) -> StoreResult<JobState> {
        let mut out = self.remove_many(vec![id.clone()]).await?;
        out.pop().ok_or_else(|| unexpected(&Value::Nil))?
    }

    /// Removes ids in order, joined with concurrent removes (`coalesce.rs`).
    async fn remove_many(&self, ids: Vec<JobId>) -> StoreResult<Vec<StoreResult<JobState>>> {
        self.inner
            .removes
            .call(ids)
            .await
            .unwrap_or_else(|| Err(gone()))
    }

    /// Removes the ids of a batch of requests (from concurrent callers) in one pipeline: one
    /// remove function call per shard with its ids in order; one answer per id.
    async fn remove_now(
        &self,
        requests: &[Vec<JobId>],
    ) -> Vec<StoreResult<Vec<StoreResult<JobState>>>> {
        let ids: Vec<&JobId> = requests.iter().flatten().collect();
        let mut flat = self.remove_flat(&ids).await;
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

    async fn remove_flat(&self, ids: &[&JobId]) -> Vec<StoreResult<JobState>> {
        let mut by_shard: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, id) in ids.iter().enumerate() {
            by_shard
                .entry(shard_of(id.as_str(), self.shard_count()))
                .or_default()
                .push(i);
        }
        let calls: Vec<Call> = by_shard
            .iter()
            .map(|(&shard, idxs)| {
                let mut call =
                    self.eval(&LIBRARY.remove, &self.inner.shards[usize::from(shard)], 0);
                for &i in idxs {
                    call = call.arg(ids[i].as_str());
                }
                call
            })
            .collect();
        let mut out: Vec<StoreResult<JobState>> = vec![Err(gone()); ids.len()];
        let replies = match self.inner.conn.eval_each(&calls).await {
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

    /// Runs a by-id function (`{'ok', record} | {'nf'} | {'ws', code}` reply) and decodes it.
    async fn by_id(&self, id: &JobId, call: Call) -> StoreResult<Job> {
        let v = self.eval_one(call).await?;
        by_id_reply(id, &v).map(|(job, _)| job)
    }

    /// One shard's tick function call: `share` of the limit, the window lists `drains` to drain
    /// (up to `drain_budget` ids), `seq` for burials.
    fn tick_call(
        &self,
        shard: usize,
        drains: &[u64],
        now: UnixMillis,
        share: u64,
        seq: u64,
        drain_budget: usize,
    ) -> Call {
        // A pass that drains windows may add memory; one that does not is run even when Redis
        // is full (scripts.rs).
        let function = if drains.is_empty() {
            &LIBRARY.tick
        } else {
            &LIBRARY.tick_drain
        };
        let mut call = self
            .eval_windows(function, &self.inner.shards[shard], drains, now)
            .arg(share)
            .arg(seq)
            .arg(drain_budget)
            .arg(&self.inner.origin)
            .arg(self.inner.drains_refused_until.load(Ordering::Relaxed));
        for &w in drains {
            call = call.arg(w);
        }
        call
    }

    /// Runs tick function calls and adds what they did to `out`; wakes this instance's waiters
    /// for the topics that gained ready jobs. When some calls fail (a shard whose pass must
    /// drain a window while Redis is full), the others' work is done all the same: their
    /// waiters are woken before the first failure is returned.
    async fn run_ticks(&self, calls: &[Call], out: TickOutcome) -> StoreResult<TickOutcome> {
        let (out, failed) = self.run_ticks_each(calls, out).await?;
        match failed.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(out),
        }
    }

    /// [`RedisStore::run_ticks`], returning the calls that failed (by index, with their error)
    /// beside what the others did.
    async fn run_ticks_each(
        &self,
        calls: &[Call],
        mut out: TickOutcome,
    ) -> StoreResult<(TickOutcome, Vec<(usize, StoreError)>)> {
        let mut next_due = |t: UnixMillis| {
            out.next_due = Some(out.next_due.map_or(t, |d| d.min(t)));
        };
        let (mut promoted, mut expired) = (0, 0);
        let mut ready: Vec<Topic> = Vec::new();
        let mut failed = Vec::new();
        for (i, reply) in self
            .inner
            .conn
            .eval_each(calls)
            .await?
            .into_iter()
            .enumerate()
        {
            let parsed = reply.and_then(|reply| {
                let a = array(&reply)?;
                let [p, e, next, topics @ ..] = a else {
                    return Err(unexpected(&reply));
                };
                let topics = topics
                    .iter()
                    .map(|t| Topic::parse(string(t)?).map_err(|_| unexpected(t)))
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
            let _ = self.inner.events.send(StoreEvent::Ready(t));
        }
        Ok((out, failed))
    }

    /// Reserves for a batch of requests (from concurrent callers) on a one-shard server, in
    /// one pipeline: one reserve function call per distinct topic list, for the sum of its
    /// requests' `max`, its jobs handed out in arrival order (as the calls one after another
    /// would have). The batch runs at the latest of the requests' `now`s.
    async fn reserve_now(&self, requests: &[ReserveRequest]) -> Vec<StoreResult<Vec<Job>>> {
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
                let max = members.iter().map(|&i| requests[i].max).sum();
                self.reserve_call(0, topics, max, now)
            })
            .collect();
        let replies = match self.inner.conn.eval_each(&calls).await {
            Ok(r) => r,
            Err(e) => return vec![Err(e); requests.len()],
        };
        let mut out: Vec<StoreResult<Vec<Job>>> = vec![Ok(Vec::new()); requests.len()];
        for (reply, (_, members)) in replies.iter().zip(&groups) {
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

    /// One reserve function call on `shard` for up to `max` jobs.
    fn reserve_call(&self, shard: usize, topics: &[Topic], max: usize, now: UnixMillis) -> Call {
        let mut call = self
            .eval(&LIBRARY.reserve, &self.inner.shards[shard], now)
            .arg(max);
        for t in topics {
            call = call.arg(t.as_str());
        }
        call
    }

    /// Each shard's first `want` ready entries for `topics`: (topic position, member, shard),
    /// merged into global delivery order. Plain ZRANGEBYLEX reads, one per shard and topic, in
    /// one pipeline: a read needs no function, and a function call costs Redis several times more.
    async fn peek_ready(
        &self,
        topics: &[Topic],
        want: usize,
    ) -> StoreResult<Vec<(i64, Vec<u8>, usize)>> {
        let ranges: Vec<(Vec<u8>, Vec<u8>)> = topics.iter().map(topic_range).collect();
        let mut pipe = redis::pipe();
        for k in &self.inner.shards {
            for (lo, hi) in &ranges {
                pipe.cmd("ZRANGEBYLEX")
                    .arg(&k.ready)
                    .arg(lo)
                    .arg(hi)
                    .arg("LIMIT")
                    .arg(0)
                    .arg(want);
            }
        }
        let replies = self.inner.conn.query(&pipe).await?;
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

/// A job as it is stored: times and backoff steps clamped at [`MAX_RUN_AT`] (below 2^53, so
/// exact in Lua's doubles).
fn stored_spec(j: &JobSpec) -> std::borrow::Cow<'_, JobSpec> {
    let over = |t: u64| t > MAX_RUN_AT;
    if !over(j.run_at) && !over(j.ttr_ms) && !j.backoff_ms.iter().copied().any(over) {
        return std::borrow::Cow::Borrowed(j);
    }
    let mut s = j.clone();
    s.run_at = s.run_at.min(MAX_RUN_AT);
    s.ttr_ms = s.ttr_ms.min(MAX_RUN_AT);
    for b in &mut s.backoff_ms {
        *b = (*b).min(MAX_RUN_AT);
    }
    std::borrow::Cow::Owned(s)
}

/// A topic's range in a ready or dead zset (`lib.lua`): `[topic\0` to `(topic\1`.
fn topic_range(topic: &Topic) -> (Vec<u8>, Vec<u8>) {
    let t = topic.as_str().as_bytes();
    ([b"[", t, b"\0"].concat(), [b"(", t, b"\x01"].concat())
}

#[async_trait]
impl Store for RedisStore {
    fn kind(&self) -> &'static str {
        "redis"
    }

    /// Joined with concurrent pushes into shared round trips (`coalesce.rs`, [`RedisStore::push_now`]).
    /// Jobs keep their batch order within a shard, so a repeated id behaves as if pushed one
    /// after the other.
    async fn push_batch(
        &self,
        jobs: Vec<JobSpec>,
        mode: PushMode,
        now: UnixMillis,
    ) -> StoreResult<Vec<StoreResult<PushOutcome>>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let seq = self.stamp(now, jobs.len() as u64);
        let request = PushRequest {
            jobs,
            seq,
            mode,
            now,
        };
        self.inner
            .pushes
            .call(request)
            .await
            .unwrap_or_else(|| Err(gone()))
    }

    /// With one shard: one function call, shared with the reserves running at the same moment
    /// ([`RedisStore::reserve_now`]). With several: a pipelined peek at every shard's first
    /// ready entries (read-only), a merge into the global order, then one pipelined reserve
    /// call per shard that holds some of the best `max` (each takes its own shard's best, so a
    /// race lost to another consumer just leaves a gap that the next round fills); repeated
    /// until `max` jobs or nothing is ready. Two round trips in the common case.
    ///
    /// Ordering caveat with several shards: the order is exact as of the peek; a job that
    /// becomes ready on another shard between the peek and the reserve (a few hundred µs) may
    /// be passed over by this call, never lost.
    async fn reserve(
        &self,
        topics: &[Topic],
        max: usize,
        now: UnixMillis,
    ) -> StoreResult<Vec<Job>> {
        if topics.is_empty() || max == 0 {
            return Ok(Vec::new());
        }
        if self.inner.shards.len() == 1 {
            // Joined with the reserves running at the same moment (group commit); a lone one
            // (e.g. the dispatcher serving its waiters, which batches by itself) runs at once.
            let request = ReserveRequest {
                topics: topics.to_vec(),
                max,
                now,
            };
            return self
                .inner
                .reserves
                .call(request)
                .await
                .unwrap_or_else(|| Err(gone()));
        }
        let mut out: Vec<Job> = Vec::new();
        let mut idle = 0;
        while out.len() < max {
            let want = max - out.len();
            let heads = self.peek_ready(topics, want).await?;
            if heads.is_empty() {
                break;
            }
            let mut per_shard: BTreeMap<usize, usize> = BTreeMap::new();
            for (_, _, shard) in &heads {
                *per_shard.entry(*shard).or_default() += 1;
            }
            let calls: Vec<Call> = per_shard
                .iter()
                .map(|(&shard, &n)| self.reserve_call(shard, topics, n, now))
                .collect();
            let mut got = 0;
            for reply in self.inner.conn.eval(&calls).await? {
                let jobs = decode_reserved(&reply)?;
                got += jobs.len();
                out.extend(jobs);
            }
            if heads.len() < want && got == heads.len() {
                // The peek saw everything that was ready, and we got all of it.
                break;
            }
            if got == 0 {
                idle += 1;
                if idle >= RESERVE_IDLE_ROUNDS {
                    break;
                }
            }
        }
        let position = |t: &Topic| topics.iter().position(|x| x == t).unwrap_or(usize::MAX);
        out.sort_by_key(|j| (position(&j.spec.topic), j.ready_key()));
        Ok(out)
    }

    async fn delete(&self, id: &JobId) -> StoreResult<JobState> {
        self.remove(id).await
    }

    async fn finish_batch(&self, ids: &[JobId]) -> StoreResult<Vec<StoreResult<JobState>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.remove_many(ids.to_vec()).await
    }

    async fn release(
        &self,
        id: &JobId,
        delay_ms: Option<u64>,
        now: UnixMillis,
    ) -> StoreResult<Job> {
        let delay = delay_ms
            .map(|d| d.min(MAX_RUN_AT).to_string())
            .unwrap_or_default();
        let call = self
            .eval(&LIBRARY.release, self.shard(id), now)
            .arg(id.as_str())
            .arg(delay)
            .arg(self.stamp(now, 1));
        self.by_id(id, call).await
    }

    async fn touch(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
        let call = self
            .eval(&LIBRARY.touch, self.shard(id), now)
            .arg(id.as_str());
        self.by_id(id, call).await
    }

    async fn bury(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
        let call = self
            .eval(&LIBRARY.bury, self.shard(id), now)
            .arg(id.as_str())
            .arg(self.stamp(now, 1));
        self.by_id(id, call).await
    }

    async fn kick(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
        let call = self
            .eval(&LIBRARY.kick, self.shard(id), now)
            .arg(id.as_str());
        self.by_id(id, call).await
    }

    /// Oldest burial first across shards: with several shards each round peeks at every
    /// shard's oldest dead entries of the topic (pipelined), merges them, and asks each shard
    /// to kick its share of the oldest [`KICK_CHUNK`].
    async fn kick_topic(&self, topic: &Topic, max: u64, now: UnixMillis) -> StoreResult<u64> {
        let mut total = 0;
        while total < max {
            let chunk = (max - total).min(KICK_CHUNK);
            let (per_shard, available) = if self.inner.shards.len() == 1 {
                (vec![(0usize, chunk)], chunk)
            } else {
                let (lo, hi) = topic_range(topic);
                let mut pipe = redis::pipe();
                for k in &self.inner.shards {
                    pipe.cmd("ZRANGEBYLEX")
                        .arg(&k.dead)
                        .arg(&lo)
                        .arg(&hi)
                        .arg("LIMIT")
                        .arg(0)
                        .arg(chunk);
                }
                let mut heads: Vec<(Vec<u8>, usize)> = Vec::new();
                for (shard, reply) in self.inner.conn.query(&pipe).await?.iter().enumerate() {
                    for m in array(reply)? {
                        heads.push((bytes(m)?.to_vec(), shard));
                    }
                }
                heads.sort();
                heads.truncate(chunk as usize);
                let mut per: BTreeMap<usize, u64> = BTreeMap::new();
                for (_, shard) in &heads {
                    *per.entry(*shard).or_default() += 1;
                }
                (per.into_iter().collect(), heads.len() as u64)
            };
            if per_shard.is_empty() {
                break;
            }
            let calls: Vec<Call> = per_shard
                .iter()
                .map(|&(shard, n)| {
                    self.eval(&LIBRARY.kick_topic, &self.inner.shards[shard], now)
                        .arg(topic.as_str())
                        .arg(n)
                })
                .collect();
            let mut kicked = 0;
            for reply in self.inner.conn.eval(&calls).await? {
                kicked += int(&reply)? as u64;
            }
            total += kicked;
            if kicked == 0 || available < chunk || kicked < chunk && self.inner.shards.len() == 1 {
                break;
            }
        }
        Ok(total)
    }

    async fn reschedule(
        &self,
        id: &JobId,
        change: Reschedule,
        now: UnixMillis,
    ) -> StoreResult<(Job, JobState)> {
        let run_at = change.run_at.min(MAX_RUN_AT);
        let keys = self.shard(id);
        let far = far_window(run_at, now);
        let window_key = far.map(|w| keys.window(w));
        let mut all_keys: Vec<&str> = keys.all().to_vec();
        all_keys.extend(window_key.as_deref());
        let call = Call::new(&LIBRARY.reschedule, &all_keys)
            .arg(&self.inner.channel)
            .arg(now)
            .arg(id.as_str())
            .arg(run_at)
            .arg(if change.body.is_some() { "1" } else { "0" })
            .arg(change.body.as_deref().unwrap_or(""))
            .arg(change.priority.map(|p| p.to_string()).unwrap_or_default())
            .arg(far.map(|w| w.to_string()).unwrap_or_default());
        let v = self.eval_one(call).await?;
        let (job, rest) = by_id_reply(id, &v)?;
        let previous = match rest {
            [code] => state_from_code(string(code)?)?,
            _ => return Err(unexpected(&v)),
        };
        Ok((job, previous))
    }

    async fn get(&self, id: &JobId) -> StoreResult<Job> {
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(&self.shard(id).jobs).arg(id.as_str());
        let mut v = self.inner.conn.query(&pipe).await?;
        match v.pop() {
            Some(Value::Nil) => Err(StoreError::NotFound),
            Some(v) => decode_job(id.as_str(), bytes(&v)?),
            None => Err(unexpected(&Value::Nil)),
        }
    }

    /// One pipeline: every shard's counts HASH, timeline head and first far window.
    ///
    /// `next_due` is exact while the earliest deadline is in a timeline; when a far window
    /// comes first it is that window's score, the earliest run_at ever pushed into it: exact
    /// unless that job has since been deleted or moved, then a lower bound (lib.lua).
    async fn stats(&self) -> StoreResult<Stats> {
        let mut pipe = redis::pipe();
        for k in &self.inner.shards {
            pipe.cmd("HGETALL").arg(&k.counts);
            pipe.cmd("ZRANGE")
                .arg(&k.timeline)
                .arg(0)
                .arg(0)
                .arg("WITHSCORES");
            pipe.cmd("ZRANGE")
                .arg(&k.windows)
                .arg(0)
                .arg(0)
                .arg("WITHSCORES");
        }
        let replies = self.inner.conn.query(&pipe).await?;
        let mut stats = Stats::default();
        for triple in replies.chunks(3) {
            let [counts, head, window] = triple else {
                return Err(StoreError::Corrupt("short stats reply".into()));
            };
            for kv in array(counts)?.chunks(2) {
                let [field, n] = kv else {
                    return Err(unexpected(counts));
                };
                let field = string(field)?;
                let (code, topic) = field
                    .split_at_checked(1)
                    .ok_or_else(|| unexpected(counts))?;
                let topic = Topic::parse(topic).map_err(|e| {
                    StoreError::Corrupt(format!("counts field {field:?}: {e}").into())
                })?;
                let n = int(n)?.max(0) as u64;
                let c = stats
                    .topics
                    .entry(topic)
                    .or_insert_with(TopicCounts::default);
                match state_from_code(code)? {
                    JobState::Delayed => c.delayed += n,
                    JobState::Ready => c.ready += n,
                    JobState::Reserved => c.reserved += n,
                    JobState::Dead => c.dead += n,
                }
            }
            for first in [head, window] {
                if let [_, score] = array(first)? {
                    let t = score_ms(score)?;
                    stats.next_due = Some(stats.next_due.map_or(t, |d| d.min(t)));
                }
            }
        }
        stats.topics.retain(|_, c| c.total() > 0);
        Ok(stats)
    }

    /// `limit` bounds the whole pass, across shards (promotions and expiries; and separately
    /// the ids drained from far window lists). Two round trips when work is due: a pipelined
    /// look at every shard's due count, timeline head and first far windows, then the tick
    /// functions of the shards that get a share of `limit` (shared out by what each has due,
    /// the remainder rotating between passes so no shard starves) or have a window to drain
    /// (one whose score is within [`WINDOW_MS`] of now), in one pipeline. An idle pass is one
    /// round trip. Ready events are published by the functions themselves.
    ///
    /// On one shard there is nothing to share out, so the look is only needed for the far
    /// windows: it is made at most every [`WINDOW_CHECK_MS`] (and at once when a pass reports
    /// due work it did not do), and the passes in between are the function alone, one round
    /// trip. A window drained that much late delays no job: it is drained a whole
    /// [`WINDOW_MS`] before its first job is due.
    ///
    /// `next_due` is the earliest timeline deadline or window drain time (a window's score
    /// minus [`WINDOW_MS`]): the timer wakes a window ahead of a far job, drains it into the
    /// timeline, then wakes at its exact run_at.
    async fn tick(&self, now: UnixMillis, mut limit: usize) -> StoreResult<TickOutcome> {
        let mut done = TickOutcome::default();
        if self.inner.shards.len() == 1 && now < self.inner.window_check_at.load(Ordering::Relaxed)
        {
            // One shard, windows looked at recently: straight to the function, one round trip.
            let call = self.tick_call(0, &[], now, limit as u64, self.stamp(now, 1), 0);
            done = self.run_ticks(&[call], done).await?;
            let used = (done.promoted + done.expired) as usize;
            if done.next_due.is_none_or(|t| t > now) || used >= limit {
                return Ok(done);
            }
            // Due work left though the limit was not reached: a far window is due to be
            // drained, which only the full pass below does, with what is left of the limit.
            limit -= used;
            done.next_due = None;
        }
        let mut pipe = redis::pipe();
        for k in &self.inner.shards {
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
        let replies = self.inner.conn.query(&pipe).await?;
        let refused_until = self.inner.drains_refused_until.load(Ordering::Relaxed);
        let n = self.inner.shards.len();
        let mut due = Vec::with_capacity(n);
        let mut heads = Vec::with_capacity(n);
        // Per shard: the window numbers to drain now and the first window's drain time.
        let mut drains: Vec<Vec<u64>> = Vec::with_capacity(n);
        let mut first_drain: Vec<Option<UnixMillis>> = Vec::with_capacity(n);
        for triple in replies.chunks(3) {
            let [count, head, windows] = triple else {
                return Err(StoreError::Corrupt("short tick reply".into()));
            };
            let mut due_now = int(count)?.max(0) as u64;
            heads.push(match array(head)? {
                [_, score] => Some(score_ms(score)?),
                _ => None,
            });
            let mut mine = Vec::new();
            let mut first = None;
            for pair in array(windows)?.chunks(2) {
                let [member, score] = pair else {
                    return Err(unexpected(windows));
                };
                let score = score_ms(score)?;
                let mut drain_at = score.saturating_sub(WINDOW_MS);
                if drain_at <= now && now < refused_until {
                    // A drain was refused lately: leave the window until the retry.
                    drain_at = refused_until;
                }
                first = Some(first.map_or(drain_at, |t: u64| t.min(drain_at)));
                if drain_at <= now {
                    mine.push(string(member)?.parse().map_err(|_| unexpected(member))?);
                    if score <= now {
                        // Some of its jobs may be due now: give the shard a promotion share.
                        due_now += limit as u64;
                    }
                }
            }
            due.push(due_now);
            drains.push(mine);
            first_drain.push(first);
        }
        let start = self.inner.tick_rotation.fetch_add(1, Ordering::Relaxed);
        let shares = share_out(limit as u64, &due, start);
        let draining = drains.iter().filter(|d| !d.is_empty()).count().max(1);
        let drain_budget = (limit / draining).max(1);

        let mut out = done;
        let mut next_due = |t: UnixMillis| {
            out.next_due = Some(out.next_due.map_or(t, |d| d.min(t)));
        };
        let mut calls = Vec::new();
        for (shard, &share) in shares.iter().enumerate() {
            if share == 0 && drains[shard].is_empty() {
                // Not run: its head is its next deadline (<= now if work is left over).
                for t in [heads[shard], first_drain[shard]].into_iter().flatten() {
                    next_due(t);
                }
                continue;
            }
            calls.push((shard, share));
        }
        // The windows are looked at again at the latest this much later (see `tick`).
        self.inner
            .window_check_at
            .store(now.saturating_add(WINDOW_CHECK_MS), Ordering::Relaxed);
        if calls.is_empty() {
            return Ok(out);
        }
        let seq = self.stamp(now, 1);
        let planned: Vec<Call> = calls
            .iter()
            .map(|&(shard, share)| {
                self.tick_call(shard, &drains[shard], now, share, seq, drain_budget)
            })
            .collect();
        let (out, failed) = self.run_ticks_each(&planned, out).await?;
        // A shard whose call failed while it had windows to drain (Redis full: a drain may add
        // memory, so it is refused) runs again without them, so its due jobs are still
        // promoted now; the windows wait DRAIN_RETRY_MS. Any other failure is the pass's.
        let mut again = Vec::new();
        let mut refused = None;
        for (i, e) in failed {
            let (shard, share) = calls[i];
            if drains[shard].is_empty() {
                return Err(e);
            }
            again.push((shard, share));
            refused.get_or_insert(e);
        }
        let Some(refused) = refused else {
            return Ok(out);
        };
        let retry_at = now.saturating_add(DRAIN_RETRY_MS);
        self.inner
            .drains_refused_until
            .store(retry_at, Ordering::Relaxed);
        tracing::warn!(
            error = %refused,
            retry_in_ms = DRAIN_RETRY_MS,
            "far-future jobs cannot be moved to the timeline now; due jobs are still promoted"
        );
        let calls: Vec<Call> = again
            .into_iter()
            .map(|(shard, share)| self.tick_call(shard, &[], now, share, seq, 0))
            .collect();
        let mut out = self.run_ticks(&calls, out).await?;
        out.next_due = Some(out.next_due.map_or(retry_at, |d| d.min(retry_at)));
        Ok(out)
    }

    fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.inner.events.subscribe()
    }

    async fn ping(&self) -> StoreResult<()> {
        let mut pipe = redis::pipe();
        pipe.cmd("PING");
        self.inner.conn.query(&pipe).await.map(|_| ())
    }
}

/// Shares `limit` out over shards with `due[s]` due entries each: every shard gets what it
/// has due if that fits, else equal shares of what is left (water-filling); units that do not
/// divide evenly go to shards in rotation from `start`. Never more than `limit` in total.
fn share_out(limit: u64, due: &[u64], start: usize) -> Vec<u64> {
    let n = due.len();
    let mut shares = vec![0u64; n];
    let mut left = limit;
    while left > 0 {
        let needy: Vec<usize> = (0..n)
            .map(|i| (start + i) % n)
            .filter(|&s| shares[s] < due[s])
            .collect();
        if needy.is_empty() {
            break;
        }
        let each = (left / needy.len() as u64).max(1);
        for s in needy {
            let give = each.min(due[s] - shares[s]).min(left);
            shares[s] += give;
            left -= give;
            if left == 0 {
                break;
            }
        }
    }
    shares
}

/// A zset score reply (a decimal string in RESP2) as milliseconds.
fn score_ms(v: &Value) -> StoreResult<UnixMillis> {
    let s = match v {
        Value::Double(d) => return Ok(d.max(0.0) as u64),
        v => string(v)?,
    };
    s.parse::<f64>()
        .map(|f| f.max(0.0) as u64)
        .map_err(|_| unexpected(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_limit_is_shared_out_without_exceeding_it() {
        assert_eq!(share_out(10, &[3, 3, 3], 0), vec![3, 3, 3]);
        assert_eq!(share_out(10, &[0, 20, 1], 0), vec![0, 9, 1]);
        assert_eq!(share_out(10, &[8, 8, 8], 0).iter().sum::<u64>(), 10);
        assert_eq!(share_out(2, &[5, 5, 5, 5], 1), vec![0, 1, 1, 0]);
        assert_eq!(share_out(0, &[5], 0), vec![0]);
        assert_eq!(share_out(5, &[], 0), Vec::<u64>::new());
    }
}
