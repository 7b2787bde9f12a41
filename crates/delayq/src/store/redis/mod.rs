//! The Redis store: delayq's production backend, safe for several delayq instances running
//! against one Redis at once (active-active).
//!
//! Every state transition is one Lua function (`*.lua` here, one file per transition, loaded
//! as one Redis function library by `scripts.rs`), so each is atomic on the Redis side: no
//! locks, no read-modify-write across round trips, and a job is never handed to two consumers
//! within its TTR however many instances race. The functions implement job.rs's rules (see
//! `lib.lua` for the record format and index upkeep); the Rust side only routes calls to
//! shards, batches them into pipelines, merges shards for `reserve`, and decodes replies. It
//! does not decide transitions and never reads the clock.
//!
//! This file holds the store's type, `connect`, `Calls` (each `Store` call's function, in
//! the module that owns it; the `Store` impl that calls them is derived, store/define.rs) and
//! the helpers every module shares: the shard of an id, the FCALL of a function on a shard and
//! the coalescers' wiring. Beside it: `layout.rs` (the start-up layout check), `push.rs`,
//! `reserve.rs`, `remove.rs` (finish and delete), `by_id.rs` (the other one-job transitions and
//! `get`), `kick_topic.rs`, `flow.rs` (flow control settings), `stats.rs`, `list.rs` (the listings), `tick.rs` (the timer pass,
//! planned by `tick/plan.rs`), `seq.rs` (seq stamps), `record.rs` (records and reply
//! decoding), `keys.rs`, `scripts.rs` (the function library, gathered from each module's
//! `FUNCTIONS`), `conn.rs`, `events.rs`, `coalesce.rs`, `read_ahead.rs` (jobs busy reserves
//! reserved ahead, one shard), `finishing.rs` (finishes answered before Redis runs them).
//!
//! Layout (`keys.rs`): jobs are spread over `shards` shards by FNV-1a of the id; each shard is
//! one hash tag `{<prefix>:<s>}` (one Redis Cluster slot) holding a jobs HASH (one field per
//! job: no key per job, ids never become key names), a timeline ZSET (near delayed and
//! reserved jobs by exact deadline), far-future window LISTs with their index ZSET (delayed
//! jobs due two or more [`keys::WINDOW_MS`] windows ahead; the timer drains a window into the
//! timeline one window before it starts, see `lib.lua`), a ready and a dead ZSET (all
//! topics, ordered topic-first) and a counts HASH for cheap stats. Rust names the window list
//! a push or reschedule needs (it knows the new run_at) and passes it in KEYS.
//!
//! Connections (`conn.rs`, `events.rs`): one multiplexed connection for all commands (a
//! consumer in a long poll holds none: waiting lives in dispatch/) and one pub/sub connection
//! for events. With Redis down every call fails within about 2 s with
//! [`StoreError::Unavailable`]; both connections come back by themselves.
//!
//! Memory per pending job: see `keys.rs`.
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

mod by_id;
mod coalesce;
mod conn;
mod events;
mod finishing;
mod flow;
mod keys;
mod kick_topic;
mod layout;
mod list;
mod push;
mod read_ahead;
mod record;
mod remove;
mod reserve;
mod schedules;
mod scripts;
mod seq;
mod stats;
mod tick;

pub use keys::{MAX_SHARDS, ShardKeys, key_slot, shard_of, validate_prefix};
pub use layout::FORMAT_VERSION;

use crate::job::{Job, JobId, JobState, UnixMillis};
use crate::store::{EVENT_CHANNEL_CAPACITY, StoreError, StoreEvent, StoreResult};
use coalesce::Coalescer;
use conn::{Call, Conn};
use finishing::Finishing;
use push::{PushReply, PushRequest};
use read_ahead::ReadAhead;
use record::unexpected;
use redis::Value;
use remove::Removal;
use reserve::ReserveRequest;
use scripts::Function;
use seq::Stamps;
use std::sync::atomic::{AtomicU64, AtomicUsize};
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

/// Group commit of pushes, removes and reserves (`coalesce.rs`): most jobs joined into one batch, and
/// most batches of one kind on the wire at once. Two in flight keep Redis busy while the next
/// batch forms; more would only make batches smaller.
const COALESCE_MAX_JOBS: usize = 1000;
const COALESCE_IN_FLIGHT: usize = 2;

/// The Redis-backed [`Store`](crate::store::Store). Cheap to clone; clones share connections
/// and event channel.
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
    /// This instance's seq stamps (`seq.rs`).
    stamps: Stamps,
    /// Rotates which shard gets the odd units of a tick's limit (`tick/plan.rs`).
    tick_rotation: AtomicUsize,
    /// On one shard: until when ticks skip the look at the far windows (`tick.rs`).
    window_check_at: AtomicU64,
    /// Until when ticks drain no far window, after a drain was refused (`tick.rs`); 0: none.
    drains_refused_until: AtomicU64,
    /// The pub/sub forwarding task; stopped when the last clone of the store is dropped.
    subscriber: JoinHandle<()>,
    /// Concurrent pushes and removes joined into shared round trips (`coalesce.rs`).
    pushes: Coalescer<PushRequest, PushReply>,
    removes: Coalescer<Vec<Removal>, StoreResult<Vec<StoreResult<JobState>>>>,
    /// Jobs this instance handed out, and finishes answered before Redis ran them
    /// (`finishing.rs`).
    finishing: Finishing,
    /// Concurrent reserves on a one-shard server, joined the same way.
    reserves: Coalescer<ReserveRequest, StoreResult<Vec<Job>>>,
    /// What busy reserve batches on a one-shard server reserved ahead (`read_ahead.rs`).
    read_ahead: Arc<ReadAhead>,
    /// Gives back what the read-ahead held too long; stopped with the store.
    sweeper: JoinHandle<()>,
}

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
    F: Fn(RedisStore, Vec<R>, coalesce::Queued) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Vec<StoreResult<T>>> + Send + 'static,
{
    let weak = weak.clone();
    Coalescer::spawn(
        COALESCE_IN_FLIGHT,
        COALESCE_MAX_JOBS,
        units,
        move |batch: Vec<R>, queued| {
            let n = batch.len();
            let running = upgrade(&weak).map(|s| run(s, batch, queued));
            async move {
                match running {
                    Some(f) => f.await,
                    None => (0..n).map(|_| Err(gone())).collect(),
                }
            }
        },
    )
}

fn gone() -> StoreError {
    StoreError::Unavailable("the Redis store is shutting down".into())
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.subscriber.abort();
        self.sweeper.abort();
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
            redis::Client::open(url).map_err(|e| StoreError::unavailable("invalid Redis URL", e))
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
                let client = conn::cluster_client(seeds)
                    .map_err(|e| StoreError::unavailable("invalid Redis Cluster seeds", e))?;
                let conn = Conn::connect_cluster(&client).await?;
                let shards: Vec<ShardKeys> = (0..count)
                    .map(|s| ShardKeys::cluster(&opts.prefix, s, count))
                    .collect();
                (conn, clients, shards)
            }
        };
        let cluster = matches!(opts.target, RedisTarget::Cluster(_));
        layout::check_format(&conn, &opts.prefix).await?;
        layout::check_layout(
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
        let read_ahead = Arc::new(ReadAhead::default());
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| Inner {
            sweeper: tokio::spawn(reserve::sweep(weak.clone(), read_ahead.clone())),
            read_ahead,
            finishing: Finishing::default(),
            conn,
            shards,
            channel,
            origin,
            events: tx,
            stamps: Stamps::default(),
            tick_rotation: AtomicUsize::new(0),
            window_check_at: AtomicU64::new(0),
            drains_refused_until: AtomicU64::new(0),
            subscriber,
            pushes: joined(
                weak,
                |r: &PushRequest| r.jobs.len(),
                |s, b, _| async move { push::run_batch(&s, &b).await },
            ),
            removes: joined(
                weak,
                |jobs: &Vec<Removal>| jobs.len(),
                |s, b, _| async move { remove::run_batch(&s, &b).await },
            ),
            reserves: joined(
                weak,
                |r: &ReserveRequest| r.max,
                |s, b, queued| async move { reserve::run_batch(&s, &b, queued).await },
            ),
        });
        Ok(RedisStore { inner })
    }

    /// Reserves `n` consecutive seq stamps at `now` and returns the first (`seq.rs`).
    fn stamp(&self, now: UnixMillis, n: u64) -> u64 {
        self.inner.stamps.take(now, n)
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

    /// An FCALL of `function` on one shard, not yet sent: its KEYS and the common ARGV
    /// (channel, now).
    fn shard_fcall(&self, function: &Function, keys: &ShardKeys, now: UnixMillis) -> Call {
        self.shard_fcall_windows(function, keys, &[], now)
    }

    /// [`RedisStore::shard_fcall`] with far window lists `windows` after the shard's keys
    /// (push, tick: KEYS[10..]).
    fn shard_fcall_windows(
        &self,
        function: &Function,
        keys: &ShardKeys,
        windows: &[u64],
        now: UnixMillis,
    ) -> Call {
        let window_keys: Vec<String> = windows.iter().map(|&w| keys.window(w)).collect();
        let mut all_keys: Vec<&str> = keys.all().to_vec();
        all_keys.extend(window_keys.iter().map(String::as_str));
        Call::new(function.registered(), &all_keys)
            .arg(&self.inner.channel)
            .arg(now)
    }

    /// Sends one FCALL and returns its reply.
    async fn fcall_one(&self, call: Call) -> StoreResult<Value> {
        let mut out = self.inner.conn.fcall(&[call]).await?;
        out.pop().ok_or_else(|| unexpected(&Value::Nil))
    }
}

/// The Redis side of each [`Store`](crate::store::Store) call: one associated function per
/// call, of the call's name, taking the store and the call's arguments, in the module that owns
/// that kind of call (`impl Calls` blocks in `push.rs`, `by_id.rs`, ...). `RedisStore`'s `Store`
/// impl is derived from `store_calls!` and calls these (store/define.rs). They are on a type of
/// their own, not `RedisStore`'s methods, so that a call without its function does not compile
/// (a `RedisStore` method missing would resolve to the trait's own, which would call itself).
pub(in crate::store) struct Calls;

impl Calls {
    pub(in crate::store) fn kind(_: &RedisStore) -> &'static str {
        "redis"
    }

    pub(in crate::store) fn subscribe(store: &RedisStore) -> broadcast::Receiver<StoreEvent> {
        store.inner.events.subscribe()
    }

    /// Gives back every job the read-ahead holds (`read_ahead.rs`).
    pub(in crate::store) async fn stop(store: &RedisStore) {
        reserve::give_back(store, store.inner.read_ahead.expired(true)).await;
        store.inner.finishing.settle_all().await;
    }

    pub(in crate::store) async fn ping(store: &RedisStore) -> StoreResult<()> {
        let mut pipe = redis::pipe();
        pipe.cmd("PING");
        store.inner.conn.query(&pipe).await.map(|_| ())
    }
}
