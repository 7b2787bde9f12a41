//! The storage interface: one method per state transition of job.rs, implemented by each backend
//! (`redis` for the production store, `embedded` for the zero-setup default, `memory` for tests).
//! The memory and embedded stores are one [`engine_store::EngineStore`] over
//! [`engine::Engine`]'s rules, differing only in how a commit becomes durable; the Redis store
//! runs the same rules in Lua. Wrappers around a store (metrics, test stores that fail) are
//! [`hook::Hooked`]: one forwarding of every method, with a hook around each call.
//!
//! Stores never read the clock: every method that depends on time takes `now`, so the
//! conformance suite drives time explicitly and the server injects a [`crate::clock::Clock`].
//! Stores never wait: long polls and the timer's sleeping live in `dispatch/`, woken by the
//! store's [`StoreEvent`]s.

pub mod embedded;
pub mod engine;
pub mod engine_store;
mod error;
pub mod hook;
pub mod memory;
pub mod redis;

pub use error::{Cause, StoreError, StoreResult};

use crate::job::{Job, JobId, JobSpec, JobState, Topic, UnixMillis};
use async_trait::async_trait;
use std::collections::BTreeMap;
use tokio::sync::broadcast;

/// What to do when a pushed id already exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushMode {
    /// Refuse with [`StoreError::Exists`] (the /v1 default).
    Reject,
    /// Atomically replace the old job, whatever its state: the new version is delivered as if
    /// pushed fresh and the old one never again (the compat API's behaviour).
    Replace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    Created,
    /// An existing job was replaced; its state at the time is given.
    Replaced(JobState),
}

/// Optional changes to a pending job, applied atomically with its new due time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reschedule {
    pub run_at: UnixMillis,
    pub body: Option<String>,
    pub priority: Option<u32>,
}

/// Counts of one topic's jobs by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TopicCounts {
    pub delayed: u64,
    pub ready: u64,
    pub reserved: u64,
    pub dead: u64,
}

impl TopicCounts {
    pub fn total(&self) -> u64 {
        self.delayed + self.ready + self.reserved + self.dead
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Topics with at least one pull job (one without a callback).
    pub topics: BTreeMap<Topic, TopicCounts>,
    /// Topics with at least one callback job, and those jobs' counts.
    pub callbacks: BTreeMap<Topic, TopicCounts>,
    /// The earliest time the timer has work: a delayed job's due time or a reservation's
    /// deadline. Exact on the embedded store; on Redis a lower bound when the earliest far-future
    /// job (one due two or more one-minute windows ahead) was deleted or moved since it was
    /// pushed.
    pub next_due: Option<UnixMillis>,
}

impl Stats {
    /// The counts of a queue ([`JobSpec::queue`]): a topic's in `topics`, a callback queue's
    /// under its topic in `callbacks`; zero when new.
    pub fn counts_of(&mut self, queue: Topic) -> &mut TopicCounts {
        match queue.callback_topic() {
            Some(topic) => self.callbacks.entry(topic).or_default(),
            None => self.topics.entry(queue).or_default(),
        }
    }
}

/// What one timer pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickOutcome {
    /// Delayed jobs that became ready.
    pub promoted: u64,
    /// Reservations whose TTR ran out (now ready, delayed for backoff, or dead).
    pub expired: u64,
    /// The earliest remaining timer deadline, if any. When the pass hit its batch limit this is
    /// `<= now`, meaning "call again at once".
    pub next_due: Option<UnixMillis>,
}

/// Something other parts of the server (on this instance or, for the Redis store, on any
/// instance sharing the store) must react to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreEvent {
    /// Jobs of this topic became ready: waiting consumers should try again.
    Ready(Topic),
    /// A job's timer deadline was set to this time; the timer must wake by then.
    Due(UnixMillis),
    /// Events may have been missed (e.g. a reconnect): re-check everything.
    Resync,
}

/// Capacity of each store's event channel; a receiver that falls behind gets `Lagged`, which
/// dispatch treats as [`StoreEvent::Resync`].
pub const EVENT_CHANNEL_CAPACITY: usize = 4096;

/// A backend for delayq's jobs. Every method is one atomic transition: concurrent callers (and,
/// for Redis, other server instances) see each one happen entirely or not at all.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// A short name for logs and `/readyz`: `redis`, `embedded`, `memory`.
    fn kind(&self) -> &'static str;

    /// Pushes a batch of jobs; each gets its own outcome (a conflict on one does not stop the
    /// others). The outer error means the store could not be asked at all.
    async fn push_batch(
        &self,
        jobs: Vec<JobSpec>,
        mode: PushMode,
        now: UnixMillis,
    ) -> StoreResult<Vec<StoreResult<PushOutcome>>>;

    /// Puts back jobs a store lost (a restore from the journal): each is stored only if its id
    /// is absent (else `Exists`, and nothing changes), delayed or ready by its `run_at`, with
    /// its `attempts` kept; its state, reservation and push stamp are the store's, as for a
    /// push. The outer error means the store could not be asked at all.
    async fn restore_batch(
        &self,
        jobs: &[Job],
        now: UnixMillis,
    ) -> StoreResult<Vec<StoreResult<PushOutcome>>>;

    /// Hands out up to `max` ready jobs, preferring `topics` in the order given and, within a
    /// topic, (priority, run_at, push order). Each is `Reserved` until `now + ttr` with
    /// `attempts` incremented. Never waits.
    async fn reserve(&self, topics: &[Topic], max: usize, now: UnixMillis)
    -> StoreResult<Vec<Job>>;

    /// Removes a job (whatever its state: the compat API's `/finish` is `/delete`). Returns the
    /// state it was in.
    async fn finish(&self, id: &JobId) -> StoreResult<JobState> {
        self.delete(id).await
    }

    /// [`Store::finish`] of several ids at once, in order (an id given twice is `NotFound`
    /// the second time): one answer per id, `Err` as a whole only when the store could not be
    /// asked. The stores do it in one round trip or commit; this default, one call after
    /// another, is the reference.
    async fn finish_batch(&self, ids: &[JobId]) -> StoreResult<Vec<StoreResult<JobState>>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match self.finish(id).await {
                Err(e @ StoreError::Unavailable(_)) => return Err(e),
                r => out.push(r),
            }
        }
        Ok(out)
    }

    /// Removes a job in any state. Returns the state it was in.
    async fn delete(&self, id: &JobId) -> StoreResult<JobState>;

    /// Returns a reserved job early (a negative acknowledgement): ready now, delayed by
    /// `delay_ms` (or by the backoff schedule when `None`), or dead when out of attempts.
    /// Returns the job as it now is. Only for `Reserved` jobs.
    async fn release(&self, id: &JobId, delay_ms: Option<u64>, now: UnixMillis)
    -> StoreResult<Job>;

    /// Extends a reservation to `now + ttr`. Only for `Reserved` jobs.
    async fn touch(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job>;

    /// Moves a delayed, ready or reserved job to `Dead`.
    async fn bury(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job>;

    /// Returns one dead job to `Ready` (attempts reset to 0).
    async fn kick(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job>;

    /// Returns up to `max` dead jobs of a topic, oldest burial first, to `Ready`. Returns how
    /// many.
    async fn kick_topic(&self, topic: &Topic, max: u64, now: UnixMillis) -> StoreResult<u64>;

    /// Atomically changes the due time (and optionally body and priority) of a delayed or
    /// ready job. Returns the job as it is now and the state it was in before. A job that is
    /// reserved or dead is refused with `WrongState`, so a caller that lost the race against
    /// delivery learns it.
    async fn reschedule(
        &self,
        id: &JobId,
        change: Reschedule,
        now: UnixMillis,
    ) -> StoreResult<(Job, JobState)>;

    /// Every field of a job, or `NotFound`.
    async fn get(&self, id: &JobId) -> StoreResult<Job>;

    /// Per-topic counts and the next timer deadline; cheap (no scan of jobs).
    async fn stats(&self) -> StoreResult<Stats>;

    /// One timer pass: handles up to `limit` due timer entries in all (delayed jobs become
    /// ready; expired reservations move on to ready, delayed or dead), and emits `Ready` events
    /// for the topics that gained ready jobs.
    async fn tick(&self, now: UnixMillis, limit: usize) -> StoreResult<TickOutcome>;

    /// A receiver of this store's events (from every instance sharing it).
    fn subscribe(&self) -> broadcast::Receiver<StoreEvent>;

    /// Checks that the store answers (for `/readyz`).
    async fn ping(&self) -> StoreResult<()>;

    /// Pushes one job.
    async fn push(
        &self,
        job: JobSpec,
        mode: PushMode,
        now: UnixMillis,
    ) -> StoreResult<PushOutcome> {
        let mut out = self.push_batch(vec![job], mode, now).await?;
        out.pop()
            .unwrap_or_else(|| Err(StoreError::Unavailable("empty push reply".into())))
    }
}
