//! The storage interface: one call per state transition of job.rs (and the reads), implemented
//! by each backend (`redis` for the production store, `embedded` for the zero-setup default,
//! `memory` for tests). The memory and embedded stores are one [`engine_store::EngineStore`]
//! over [`engine::Engine`]'s rules, differing only in how a commit becomes durable; the Redis
//! store runs the same rules in Lua. Wrappers around a store (metrics, the journal, test stores
//! that fail) are [`hook::Hooked`]: one forwarding of every call, with a hook around each.
//!
//! Each call is declared once, in `store_calls!` at the end of this file; `define.rs` derives
//! from it the [`Store`] method, the hooks' [`Call`] and [`Reply`], the call's [`CallKind`] and
//! the forwarding of the three `Store` impls (to the hook's wrapped store, to the engine, to
//! `redis::Calls`). What each store does for a call is written where that store's rules are.
//!
//! Stores never read the clock: every method that depends on time takes `now`, so the
//! conformance suite drives time explicitly and the server injects a [`crate::clock::Clock`].
//! Stores never wait: long polls and the timer's sleeping live in `dispatch/`, woken by the
//! store's [`StoreEvent`]s.

mod define;
pub mod embedded;
pub mod engine;
pub mod engine_store;
mod error;
pub mod hook;
pub mod memory;
pub mod redis;

pub use define::CallKind;
pub use error::{Cause, StoreError, StoreResult};

use crate::job::{Job, JobId, JobSpec, JobState, Topic, UnixMillis};
use crate::schedule::{Schedule, ScheduleFire, ScheduleId};
use define::store_calls;
use std::collections::BTreeMap;

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

/// A store that can copy itself while it serves (`POST /v1/backup`): the embedded store.
/// Redis has backups of its own (RDB snapshots, AOF); the memory store keeps nothing.
#[async_trait::async_trait]
pub trait OnlineBackup: Send + Sync {
    /// Writes a copy of the store into `dir` (created with its missing parents, or an empty
    /// directory) that, opened as a data directory, holds every change acknowledged before
    /// this call. Serves meanwhile; one backup at a time.
    async fn backup(&self, dir: &std::path::Path) -> Result<BackupReport, BackupError>;
}

/// What an online backup wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackupReport {
    /// Jobs in the copy.
    pub jobs: u64,
    /// Recurring schedules in the copy.
    pub schedules: u64,
    /// Size of the copy: its redb file and its cold tier.
    pub bytes: u64,
    /// How long the backup took, from the call to the copy's last sync.
    pub took_ms: u64,
}

/// Why an online backup was not made. Whatever it wrote is removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    /// The directory cannot take a backup (not empty, not a directory, cannot be created).
    #[error("{0}")]
    Target(String),
    /// Another backup of this store is running.
    #[error("a backup of this store is already running")]
    Running,
    /// The copy could not be written (the destination's disk, most likely).
    #[error("the backup could not be written: {0}")]
    Write(String),
    /// The store has failed or stopped.
    #[error(transparent)]
    Store(StoreError),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Topics with at least one pull job (one without a callback).
    pub topics: BTreeMap<Topic, TopicCounts>,
    /// Topics with at least one callback job, and those jobs' counts.
    pub callbacks: BTreeMap<Topic, TopicCounts>,
    /// Topics with flow control settings ([`Store::set_settings`]), whether or not they have
    /// jobs. A topic without an entry has the defaults.
    pub settings: BTreeMap<Topic, TopicSettings>,
    /// Per topic, how many hand-outs its limits held back since the store started (engine
    /// stores) or since the settings were first written (Redis: shared by every instance).
    pub held: BTreeMap<Topic, HeldBack>,
    /// The earliest time the timer has work: a delayed job's due time or a reservation's
    /// deadline. Exact on the embedded store; on Redis a lower bound when the earliest far-future
    /// job (one due two or more one-minute windows ahead) was deleted or moved since it was
    /// pushed.
    pub next_due: Option<UnixMillis>,
    /// How many recurring schedules there are (paused ones included).
    pub schedules: u64,
    /// Delayed jobs kept on disk only, not in memory: the embedded store's cold tier
    /// (`--memory-window`); `None` for a store without one.
    pub on_disk: Option<u64>,
    /// How many times the embedded store has synced (`fdatasync`) its write-ahead log since
    /// it opened; `None` for a store without one.
    pub log_syncs: Option<u64>,
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

/// Largest `rate_per_s` a topic takes.
pub const MAX_RATE_PER_S: u64 = 1_000_000;
/// Rates are kept in millionths of a hand-out per second.
pub const RATE_UNIT: u64 = 1_000_000;

/// A topic's flow control (docs/flow-control.md), kept by the store and applied by its
/// `reserve` to every hand-out of the topic: its pull jobs and its callback queue's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicSettings {
    /// Nothing of the topic is handed out.
    pub paused: bool,
    /// The token bucket's refill, in millionths of a hand-out per second ([`RATE_UNIT`]);
    /// `None`: no rate limit.
    pub rate_micros: Option<u64>,
    /// The bucket's size as set; `None`: the default, [`TopicSettings::burst`]. Only kept with
    /// a rate.
    pub burst: Option<u32>,
    /// At most this many of the topic's jobs reserved at once (pull and callback).
    pub max_in_flight: Option<u32>,
}

impl TopicSettings {
    /// No limit and not paused: the store keeps nothing for the topic.
    pub fn is_default(&self) -> bool {
        *self == TopicSettings::default()
    }

    /// The bucket's size in force: the burst set, else `max(1, floor(rate))`; `None` without
    /// a rate.
    pub fn burst(&self) -> Option<u64> {
        let rate = self.rate_micros?;
        Some(self.burst.map_or((rate / RATE_UNIT).max(1), u64::from))
    }

    /// The rate in hand-outs per second.
    pub fn rate_per_s(&self) -> Option<f64> {
        self.rate_micros.map(|r| r as f64 / RATE_UNIT as f64)
    }
}

/// A change of a topic's settings ([`Store::set_settings`]): each field `None` is left as it
/// is; `Some(None)` removes a limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SettingsChange {
    pub paused: Option<bool>,
    pub rate_micros: Option<Option<u64>>,
    pub burst: Option<Option<u32>>,
    pub max_in_flight: Option<Option<u32>>,
}

impl SettingsChange {
    /// `old` changed as asked. Without a rate no burst is kept.
    pub fn apply(&self, old: TopicSettings) -> TopicSettings {
        let mut s = TopicSettings {
            paused: self.paused.unwrap_or(old.paused),
            rate_micros: self.rate_micros.unwrap_or(old.rate_micros),
            burst: self.burst.unwrap_or(old.burst),
            max_in_flight: self.max_in_flight.unwrap_or(old.max_in_flight),
        };
        if s.rate_micros.is_none() {
            s.burst = None;
        }
        s
    }
}

/// Hand-outs a topic's limits held back ([`Stats::held`]): each time a `reserve` found a
/// ready job of the topic and handed it out later, counted once per call and limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldBack {
    pub paused: u64,
    pub rate: u64,
    pub max_in_flight: u64,
}

/// Where a job sorts in the listing of its queue's jobs in its state ([`Store::list`]), and
/// so where the next page of a listing resumes: delayed jobs by `(run_at, id)`, reserved ones
/// by `(reserved_until, id)`, ready ones in delivery order `(priority, run_at, seq, id)`, dead
/// ones in burial order `(seq, id)`. Unused places are 0. A job that stays in its state keeps
/// its key (a `touch` or a `reschedule` gives it a new one).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListKey {
    pub a: u64,
    pub b: u64,
    pub c: u64,
    pub id: JobId,
}

impl ListKey {
    /// The key of `job` in its current state.
    pub fn of(job: &Job) -> ListKey {
        let id = job.spec.id.clone();
        let (a, b, c) = match job.state {
            JobState::Delayed => (job.spec.run_at, 0, 0),
            JobState::Reserved => (job.reserved_until.unwrap_or(0), 0, 0),
            JobState::Ready => (u64::from(job.spec.priority), job.spec.run_at, job.seq),
            JobState::Dead => (job.seq, 0, 0),
        };
        ListKey { a, b, c, id }
    }
}

/// One page of a listing ([`Store::list`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobPage {
    /// In the listing's order, each after the `after` key asked for.
    pub jobs: Vec<Job>,
    /// Where the next page starts (exclusive), or `None` when the listing is complete. May be
    /// `Some` after a page shorter than asked for, even an empty one (a store that bounds the
    /// work of one call).
    pub next: Option<ListKey>,
}

/// Width of a schedule bucket ([`Store::schedule`]): a minute.
pub const SCHEDULE_BUCKET_MS: u64 = 60_000;

/// The steps of a schedule from `from` to `to` by `step` (`step > 0`): `ceil((to - from) /
/// step)`, 0 when `to <= from`.
pub fn schedule_steps(from: UnixMillis, to: UnixMillis, step: u64) -> u64 {
    to.saturating_sub(from).div_ceil(step.max(1))
}

/// The step of a schedule a bucket (the minute starting at `minute_start`) is counted in, if
/// any: the one its start falls in.
pub fn schedule_step_of(
    minute_start: UnixMillis,
    from: UnixMillis,
    to: UnixMillis,
    step: u64,
) -> Option<usize> {
    (minute_start >= from && minute_start < to)
        .then(|| ((minute_start - from) / step.max(1)) as usize)
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

/// The due recurring schedules ([`Store::due_schedules`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DueSchedules {
    /// Schedules not paused whose next tick is at or before `now`, earliest first.
    pub due: Vec<Schedule>,
    /// The earliest next tick of the schedules not listed (not paused), if any: when the
    /// firing task must look again.
    pub next: Option<UnixMillis>,
}

/// What [`Store::fire_schedule`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FireOutcome {
    /// The schedule moved on and its jobs were pushed: `pushed` created, `existed` left as they
    /// were (a job of that id existed already).
    Fired { pushed: u64, existed: u64 },
    /// The schedule is gone or not at the version the fire was planned from (another instance
    /// fired it, or it was changed): nothing changed.
    Stale,
}

/// Capacity of each store's event channel; a receiver that falls behind gets `Lagged`, which
/// dispatch treats as [`StoreEvent::Resync`].
pub const EVENT_CHANNEL_CAPACITY: usize = 4096;

// Each entry is one call: its kind (`Read`: changes no job; `Change`: changes jobs as asked,
// journaled; `Timer`: the timer's pass, see `CallKind`), the name of its variant of the hooks'
// `Call` and `Reply`, and its signature without `&self` and without the `StoreResult` around
// what it returns (`'a` is the call's borrow, which `Call` and `Reply` hold). `define.rs`
// derives from it the trait method, `Call`, `Reply` and the call's forwarding in the three
// impls; the compiler then asks for the call's `Engine` method (engine.rs), its
// `redis::Calls` function (store/redis/) and how metrics.rs and journal/mod.rs treat it.
store_calls! {
    /// A backend for delayq's jobs. Every call is one atomic transition: concurrent callers
    /// (and, for Redis, other server instances) see each one happen entirely or not at all.
    pub trait Store {
        /// Pushes a batch of jobs; each gets its own outcome (a conflict on one does not stop
        /// the others). The outer error means the store could not be asked at all.
        Change PushBatch fn push_batch(jobs: Vec<JobSpec>, mode: PushMode, now: UnixMillis)
            -> Vec<StoreResult<PushOutcome>>;

        /// Puts back jobs a store lost (a restore from the journal): each is stored only if its
        /// id is absent (else `Exists`, and nothing changes), delayed or ready by its `run_at`,
        /// with its `attempts` kept; its state, reservation and push stamp are the store's, as
        /// for a push. The outer error means the store could not be asked at all.
        Change RestoreBatch fn restore_batch(jobs: &'a [Job], now: UnixMillis)
            -> Vec<StoreResult<PushOutcome>>;

        /// Hands out up to `max` ready jobs, preferring `topics` in the order given and, within
        /// a topic, (priority, run_at, push order). Each is `Reserved` until `now + ttr` with
        /// `attempts` incremented. Never waits.
        Change Reserve fn reserve(topics: &'a [Topic], max: usize, now: UnixMillis) -> Vec<Job>;

        /// Reserves one job named by its id, whatever its topic's order and flow control (the
        /// beanstalkd front end's `reserve-job`): a ready or dead job becomes `Reserved` until
        /// `now + ttr` with `attempts` incremented. A delayed job (nothing is handed out before
        /// its due time) or a reserved one is refused with `WrongState`. Returns the job as it
        /// now is.
        Change ReserveJob fn reserve_job(id: &'a JobId, now: UnixMillis) -> Job;

        /// Removes a job (whatever its state: the compat API's `/finish` is `/delete`).
        /// Returns the state it was in.
        Change Finish fn finish(id: &'a JobId) -> JobState;

        /// [`Store::finish`] of several ids at once, in order (an id given twice is `NotFound`
        /// the second time): one answer per id, `Err` as a whole only when the store could not
        /// be asked. Each store does it in one round trip or commit, with the same answers as
        /// one `finish` after another.
        Change FinishBatch fn finish_batch(ids: &'a [JobId]) -> Vec<StoreResult<JobState>>;

        /// Removes a job in any state. Returns the state it was in.
        Change Delete fn delete(id: &'a JobId) -> JobState;

        /// Returns a reserved job early (a negative acknowledgement): ready now, delayed by
        /// `delay_ms` (or by the backoff schedule when `None`), or dead when out of attempts.
        /// Returns the job as it now is. Only for `Reserved` jobs.
        Change Release fn release(id: &'a JobId, delay_ms: Option<u64>, now: UnixMillis) -> Job;

        /// Extends a reservation to `now + ttr`. Only for `Reserved` jobs.
        Change Touch fn touch(id: &'a JobId, now: UnixMillis) -> Job;

        /// Moves a delayed, ready or reserved job to `Dead`, with a new priority when `priority`
        /// says one (beanstalkd's `bury <id> <pri>`), else keeping its own.
        Change Bury fn bury(id: &'a JobId, priority: Option<u32>, now: UnixMillis) -> Job;

        /// Returns one dead job to `Ready` (attempts reset to 0).
        Change Kick fn kick(id: &'a JobId, now: UnixMillis) -> Job;

        /// Returns up to `max` dead jobs of a topic, oldest burial first, to `Ready`. Returns
        /// how many.
        Change KickTopic fn kick_topic(topic: &'a Topic, max: u64, now: UnixMillis) -> u64;

        /// Changes a topic's flow control as `change` says, atomically (fields not given stay
        /// as they are), and returns the settings now in force. A topic may be set before it
        /// has jobs. Resuming or loosening a limit announces the topic's ready jobs
        /// (`StoreEvent::Ready` for the topic and its callback queue). `now` starts a new rate
        /// bucket full.
        Change SetSettings fn set_settings(topic: &'a Topic, change: SettingsChange, now: UnixMillis)
            -> TopicSettings;

        /// Atomically changes the due time (and optionally body and priority) of a delayed or
        /// ready job. Returns the job as it is now and the state it was in before. A job that
        /// is reserved or dead is refused with `WrongState`, so a caller that lost the race
        /// against delivery learns it.
        Change Reschedule fn reschedule(id: &'a JobId, change: Reschedule, now: UnixMillis)
            -> (Job, JobState);

        /// Every field of a job, or `NotFound`.
        Read Get fn get(id: &'a JobId) -> Job;

        /// Per-topic counts and the next timer deadline; cheap (no scan of jobs).
        Read Stats fn stats() -> Stats;

        /// A topic's flow control settings (the defaults if never set).
        Read Settings fn settings(topic: &'a Topic) -> TopicSettings;

        /// One page of the jobs of `queue` (a topic, or a topic's callback queue) in `state`,
        /// in the order of [`ListKey`], starting after `after` (from the start when `None`): at
        /// most `limit` (at least 1) jobs. A job that stays in `state` (with the same key)
        /// during a walk over the pages is listed exactly once, whatever else changes
        /// meanwhile. Costs O(page + log n) on the engine; on Redis see docs/api.md.
        Read List fn list(
            queue: &'a Topic,
            state: JobState,
            after: Option<&'a ListKey>,
            limit: usize,
        ) -> JobPage;

        /// How many delayed jobs (pull and callback) of `topic` (of every topic when `None`)
        /// fall due in each step of `step` ms from `from` to `to`: `counts[i]` counts the jobs
        /// whose run_at's minute ([`SCHEDULE_BUCKET_MS`]) starts in `[from + i·step, min(from +
        /// (i+1)·step, to))`, which is run_at itself in that range when `from`, `to` and `step`
        /// are whole minutes. [`schedule_steps`] steps; the caller bounds their number. Costs
        /// the number of minutes with delayed jobs in the range, never a scan of jobs.
        Read Schedule fn schedule(
            topic: Option<&'a Topic>,
            from: UnixMillis,
            to: UnixMillis,
            step: u64,
        ) -> Vec<u64>;

        /// One timer pass: handles up to `limit` due timer entries in all (delayed jobs become
        /// ready; expired reservations move on to ready, delayed or dead), and emits `Ready`
        /// events for the topics that gained ready jobs.
        Timer Tick fn tick(now: UnixMillis, limit: usize) -> TickOutcome;

        /// Checks that the store answers (for `/readyz`).
        Read Ping fn ping() -> ();

        /// Creates or replaces a recurring schedule (schedule.rs) with the next tick and last
        /// tick given. With `expect` set, only if the stored schedule is at that version:
        /// `NotFound` when there is none, `Exists` when it is at another version; `Some(0)`
        /// (no schedule has version 0): only if there is none, else `Exists` (a restore's
        /// insert-if-absent). Returns the schedule as stored, with its new version (one more
        /// than the replaced one's, 1 when created). A replace withdraws the job of the
        /// replaced schedule's tick fired ahead if it does not keep that tick and the job still
        /// waits for it (`Schedule::withdraws`): in the same transition on the engine, in a
        /// call of its own before the schedule's on Redis (the job may be on another shard).
        Change PutSchedule fn put_schedule(schedule: &'a Schedule, expect: Option<u64>)
            -> Schedule;

        /// A schedule, or `NotFound`.
        Read GetSchedule fn get_schedule(id: &'a ScheduleId) -> Schedule;

        /// Up to `limit` (at least 1) schedules in id order (byte order), after `after`.
        Read ListSchedules fn list_schedules(after: Option<&'a ScheduleId>, limit: usize)
            -> Vec<Schedule>;

        /// Deletes a schedule, or `NotFound`. Its jobs stay, but for the job of a tick fired
        /// ahead still waiting for it, which is withdrawn as by `put_schedule`.
        Change DeleteSchedule fn delete_schedule(id: &'a ScheduleId) -> ();

        /// Up to `limit` due schedules (not paused, next tick at or before `now`), and the
        /// next tick of the others.
        Read DueSchedules fn due_schedules(now: UnixMillis, limit: usize) -> DueSchedules;

        /// One handling of a due schedule: if the schedule is still at `fire.version`, pushes
        /// `fire.jobs` (an id that exists is left as it is) and sets its next and last tick (its
        /// version goes up by one); else `Stale`. Two instances firing the same tick push its job
        /// once, and one of them gets `Fired`. The engine does it in one transition (a `Stale`
        /// fire changes nothing); Redis stores the ticks' jobs before it claims the schedule, so
        /// a `Stale` racer may be the one that stored a tick's job the winner counts.
        Change FireSchedule fn fire_schedule(fire: &'a ScheduleFire, now: UnixMillis)
            -> FireOutcome;

        /// [`Store::fire_schedule`] of several due schedules at once (a tick of many
        /// schedules): one outcome per fire, in order, each as that fire alone would have had
        /// it (a fire of a schedule deleted or moved on meanwhile is `Stale` and changes
        /// nothing; the others go ahead). The fires name distinct schedules. Each store does it
        /// in one transition (engine: one commit) or one round of Lua calls per step (Redis:
        /// the version check, the jobs' push per shard, the claims per shard), with the
        /// guarantees of `fire_schedule` for each fire. `Err` as a whole only when the store
        /// could not be asked.
        Change FireSchedules fn fire_schedules(fires: &'a [ScheduleFire], now: UnixMillis)
            -> Vec<FireOutcome>;
    }
}
