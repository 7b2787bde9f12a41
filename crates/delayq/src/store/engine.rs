//! The state machine over in-memory indexes: job.rs's transitions applied to every job at once,
//! with no I/O, no clock and no locking.
//!
//! [`Engine`] is synchronous and single-threaded (its store holds it behind a lock,
//! `engine_store.rs`). Each transition records its [`Effects`]: the job records it wrote or
//! removed (so a durable store can persist them) and the [`StoreEvent`]s it caused. It decides
//! nothing that job.rs does not say; it does not persist, publish or wait (the store around it
//! does).
//!
//! Each `Store` call is the `Engine` method of the same name, with the call's arguments and,
//! unless the call is a read, the `Effects` last; it returns what the call returns, or a
//! `StoreResult` of it when it can refuse. `EngineStore` calls them without a line of its own
//! (store/define.rs), so a call declared in `store_calls!` without its method here does not
//! compile.
//!
//! Indexes: `timeline` orders delayed jobs by due time and reserved jobs by TTR deadline (the
//! timer reads its head); `ready` orders each queue's ready jobs by (priority, run_at, seq);
//! `dead` orders each queue's dead jobs by burial stamp; `delayed` and `reserved` order each
//! queue's delayed and reserved jobs by due time and TTR deadline (the listings, `list`); `due`
//! counts each topic's delayed jobs (pull and callback) by the minute they fall due, and
//! `due_all` every topic's (the schedules, `schedule`). A queue is a topic, or a topic's
//! callback queue for its callback jobs (`JobSpec::queue`); `counts` are by queue too. Every index entry points at a job in
//! `jobs` in the matching state: `Engine::take` and `Engine::put` keep them in step.

use crate::job::{self, Job, JobId, JobSpec, JobState, Topic, UnixMillis};
use crate::schedule::{Schedule, ScheduleFire, ScheduleId};
use crate::store::{
    DueSchedules, FireOutcome, HeldBack, JobPage, ListKey, PushMode, PushOutcome, RATE_UNIT,
    Reschedule, SCHEDULE_BUCKET_MS, SettingsChange, Stats, StoreError, StoreEvent, StoreResult,
    TickOutcome, TopicCounts, TopicSettings, schedule_step_of, schedule_steps,
};
use foldhash::{HashMap, HashSet};
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, btree_map};
use std::hash::{Hash, Hasher};
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub mod cold;

/// A job record written or removed by a transition, or a topic's settings written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Put(Job),
    Remove(JobId),
    /// A topic's flow control settings (the defaults: none kept).
    Settings(Topic, TopicSettings),
    /// A recurring schedule written (created, changed or fired).
    PutSchedule(Schedule),
    RemoveSchedule(ScheduleId),
    /// A delayed job written to the cold tier (`engine/cold.rs`), not to the hot records;
    /// `fresh` when the tier holds no copy of it (so its writer need not look for one); `seq`
    /// names this write in the checkpoint's report.
    PutCold {
        job: Job,
        fresh: bool,
        seq: u64,
    },
    /// A job's copy in the cold tier removed; `seq` names the removal in the report.
    RemoveCold(JobId, u64),
}

/// What a transition did besides its return value.
#[derive(Debug, Default)]
pub struct Effects {
    /// Job records to persist, in order.
    pub changes: Vec<Change>,
    /// Events to publish once the changes are durable.
    pub events: Vec<StoreEvent>,
    /// Whether the caller may have its answer before the changes are durable: set by a
    /// reservation, a touch and the finish of a reserved job, which a crash may undo under
    /// at-least-once delivery (the job is delivered again: at once, with the same attempt
    /// number, if its reservation was undone; after its TTR if only its finish was); never by
    /// a push, a delete, release, bury or kick (docs/reliability.md).
    pub answer_before_durable: bool,
}

impl Effects {
    fn ready(&mut self, topic: &Topic) {
        let ev = StoreEvent::Ready(topic.clone());
        if !self.events.contains(&ev) {
            self.events.push(ev);
        }
    }
}

type ReadyKey = (u32, UnixMillis, u64, JobId);

/// A job in [`Engine`]'s table, found by its id. The table holds each job once, without a
/// second copy of its id as a key, and boxed, so the table's spare capacity (up to half of it,
/// just after it grows) costs a pointer per slot instead of a whole job. Ids and topics are
/// shared with the index entries (job.rs, [`Engine::index`]); `examples/pending_memory.rs`
/// measures what a pending job costs.
#[derive(Debug)]
struct Stored(Box<Job>);

// Hash and Eq are the id's, as `Borrow<JobId>` requires.
impl PartialEq for Stored {
    fn eq(&self, other: &Stored) -> bool {
        self.0.spec.id == other.0.spec.id
    }
}

impl Eq for Stored {}

impl Hash for Stored {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.spec.id.hash(state);
    }
}

impl Borrow<JobId> for Stored {
    fn borrow(&self) -> &JobId {
        &self.0.spec.id
    }
}

/// A run of promotions of one queue's jobs due in one minute, counted together when it ends
/// ([`Engine::end_promotions`]): a tick of many schedules promotes thousands of jobs of one
/// queue and minute, and pays for their counts and their event once. Empty (`None`s) or
/// holding at least one promotion.
#[derive(Debug, Default)]
struct Promotions {
    queue: Option<Topic>,
    topic: Option<Topic>,
    minute: u64,
    n: u64,
}

impl Promotions {
    fn of(queue: Topic, topic: Topic, minute: u64) -> Promotions {
        Promotions {
            queue: Some(queue),
            topic: Some(topic),
            minute,
            n: 0,
        }
    }

    /// Whether a promotion of `queue` in `minute` continues this run.
    fn extends(&self, queue: &Topic, minute: u64) -> bool {
        self.minute == minute && self.queue.as_ref() == Some(queue)
    }
}

/// A group of jobs placed ahead ([`Engine`]'s `ahead`): (tick, queue, priority).
type GroupKey = (UnixMillis, Topic, u32);

/// Takes `id` out of `groups`' group `key`, dropping a group left empty; `false` when it was
/// not there.
fn leave_group(
    groups: &mut BTreeMap<GroupKey, HashSet<JobId>>,
    key: &GroupKey,
    id: &JobId,
) -> bool {
    let Some(group) = groups.get_mut(key) else {
        return false;
    };
    if !group.remove(id) {
        return false;
    }
    if group.is_empty() {
        groups.remove(key);
    }
    true
}

#[derive(Debug, Default)]
pub struct Engine {
    jobs: HashSet<Stored>,
    timeline: BTreeSet<(UnixMillis, JobId)>,
    ready: HashMap<Topic, BTreeSet<ReadyKey>>,
    dead: HashMap<Topic, BTreeSet<(u64, JobId)>>,
    delayed: HashMap<Topic, BTreeSet<(UnixMillis, JobId)>>,
    reserved: HashMap<Topic, BTreeSet<(UnixMillis, JobId)>>,
    due: HashMap<Topic, BTreeMap<u64, u64>>,
    due_all: BTreeMap<u64, u64>,
    counts: BTreeMap<Topic, TopicCounts>,
    next_seq: u64,
    /// Flow control of the topics that have settings, by topic name (empty: `reserve` pays
    /// nothing for it).
    flow: HashMap<Box<str>, Flow>,
    /// When a rate-limited queue's bucket has its next token: the timer's pass announces the
    /// queue's ready jobs then.
    wakes: BTreeSet<(UnixMillis, Topic)>,
    /// Queues whose reserved jobs left their reservation in this transition (only while some
    /// topic has settings): a `max_in_flight` may let their topic's ready jobs out now.
    freed: Vec<Topic>,
    held: BTreeMap<Topic, HeldBack>,
    /// Recurring schedules by id, and the due index: (next tick, id) of each one not paused.
    schedules: BTreeMap<ScheduleId, Schedule>,
    schedule_due: BTreeSet<(UnixMillis, ScheduleId)>,
    /// Far-future delayed jobs kept on disk only (`engine/cold.rs`); `None`: all in memory.
    cold: Option<Box<cold::Cold>>,
    /// The embedded store's count of log syncs ([`Engine::with_log_syncs`]), for `stats`.
    log_syncs: Option<Arc<AtomicU64>>,
    /// Jobs placed ahead: the delayed jobs a tick's schedules fire before it
    /// ([`Engine::fire_schedule`]), grouped by (tick, queue, priority). Each has its ready
    /// entry in `ready` from the fire on, and no timeline or `delayed` entry: the tick makes a
    /// group ready by state alone, counted once ([`Engine::promote_group`]), where a delayed
    /// job takes its timeline entry, its delayed entry and a ready entry at its due time.
    /// While the group waits its jobs are delayed in every view: `reserve` passes over their
    /// entries (with the rest of their priority, due later still) and the listings show them
    /// as delayed. A job leaves its group in [`Engine::unindex`]; a group left empty goes.
    ahead: BTreeMap<GroupKey, HashSet<JobId>>,
    /// The groups placed ahead whose tick came: their jobs are ready, though their records
    /// still say delayed (nothing is written per job at the tick). [`Engine::state_of`] reads
    /// a job's state through it; [`Engine::take`] takes a job out of it (and the job's state
    /// from it), so every transition sees the job as ready.
    promoted: BTreeMap<GroupKey, HashSet<JobId>>,
}

/// A topic's flow control: its settings and its token bucket (not durable: a restart starts
/// each bucket full).
#[derive(Debug)]
struct Flow {
    topic: Topic,
    settings: TopicSettings,
    tokens: f64,
    /// When `tokens` was last refilled.
    stamp: UnixMillis,
}

fn count_of(c: &mut TopicCounts, state: JobState) -> &mut u64 {
    match state {
        JobState::Delayed => &mut c.delayed,
        JobState::Ready => &mut c.ready,
        JobState::Reserved => &mut c.reserved,
        JobState::Dead => &mut c.dead,
    }
}

impl Engine {
    pub fn new() -> Engine {
        Engine::default()
    }

    /// Rebuilds an engine from stored job records (the embedded store's start-up). A reserved
    /// record without a deadline is treated as expired.
    pub fn load(
        jobs: impl IntoIterator<Item = Job>,
        settings: impl IntoIterator<Item = (Topic, TopicSettings)>,
    ) -> Engine {
        let mut e = Engine::new();
        for (topic, s) in settings {
            e.write_settings(&topic, s, 0);
        }
        for mut j in jobs {
            if j.state == JobState::Reserved && j.reserved_until.is_none() {
                j.reserved_until = Some(0);
            }
            if j.state != JobState::Reserved {
                j.reserved_until = None;
            }
            e.next_seq = e.next_seq.max(j.seq + 1);
            e.index(&mut j);
            e.jobs.replace(Stored(Box::new(j)));
        }
        e
    }

    fn stamp(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// Adds a job's index entries and count, and gives a pull job the topic every other job of
    /// its topic holds (the counts' key), so a topic's name is stored once, not once per job.
    fn index(&mut self, j: &mut Job) {
        self.index_as(j, false);
    }

    /// [`Engine::index`]; a delayed job with `ahead` is placed ahead (see `ahead`).
    fn index_as(&mut self, j: &mut Job, ahead: bool) {
        let queue = j.spec.queue();
        let pull = !j.spec.is_pushed();
        let counts = match self.counts.entry(queue.clone()) {
            btree_map::Entry::Occupied(o) => {
                if pull {
                    j.spec.topic = o.key().clone();
                }
                o.into_mut()
            }
            btree_map::Entry::Vacant(v) => v.insert(TopicCounts::default()),
        };
        *count_of(counts, j.state) += 1;
        let id = j.spec.id.clone();
        match j.state {
            JobState::Delayed if ahead => {
                let (p, r, s) = j.ready_key();
                self.ready
                    .entry(queue.clone())
                    .or_default()
                    .insert((p, r, s, id.clone()));
                self.ahead.entry((r, queue, p)).or_default().insert(id);
                self.count_due(&j.spec.topic, j.spec.run_at / SCHEDULE_BUCKET_MS, 1, true);
            }
            JobState::Delayed => {
                self.timeline.insert((j.spec.run_at, id.clone()));
                self.delayed
                    .entry(queue)
                    .or_default()
                    .insert((j.spec.run_at, id));
                self.count_due(&j.spec.topic, j.spec.run_at / SCHEDULE_BUCKET_MS, 1, true);
            }
            JobState::Reserved => {
                let t = j.reserved_until.unwrap_or(0);
                self.timeline.insert((t, id.clone()));
                self.reserved.entry(queue).or_default().insert((t, id));
            }
            JobState::Ready => {
                let (p, r, s) = j.ready_key();
                self.ready.entry(queue).or_default().insert((p, r, s, id));
            }
            JobState::Dead => {
                self.dead.entry(queue).or_default().insert((j.seq, id));
            }
        }
    }

    fn unindex(&mut self, j: &Job) {
        let id = j.spec.id.clone();
        let queue = j.spec.queue();
        let topic = &queue;
        match j.state {
            JobState::Delayed => {
                if !self.leave_ahead(j) {
                    let key = (j.spec.run_at, id);
                    self.timeline.remove(&key);
                    remove_from(&mut self.delayed, topic, &key);
                }
                self.count_due(&j.spec.topic, j.spec.run_at / SCHEDULE_BUCKET_MS, 1, false);
            }
            JobState::Reserved => {
                let key = (j.reserved_until.unwrap_or(0), id);
                self.timeline.remove(&key);
                remove_from(&mut self.reserved, topic, &key);
                if !self.flow.is_empty() {
                    self.freed.push(queue.clone());
                }
            }
            JobState::Ready => {
                let (p, r, s) = j.ready_key();
                if let Some(set) = self.ready.get_mut(topic) {
                    set.remove(&(p, r, s, id));
                    if set.is_empty() {
                        self.ready.remove(topic);
                    }
                }
            }
            JobState::Dead => {
                if let Some(set) = self.dead.get_mut(topic) {
                    set.remove(&(j.seq, id));
                    if set.is_empty() {
                        self.dead.remove(topic);
                    }
                }
            }
        }
        if let Some(c) = self.counts.get_mut(topic) {
            let n = count_of(c, j.state);
            *n = n.saturating_sub(1);
            if c.total() == 0 {
                self.counts.remove(topic);
            }
        }
    }

    /// Takes delayed job `j` out of its group if it is placed ahead (its ready entry with it);
    /// `false` when it is not.
    fn leave_ahead(&mut self, j: &Job) -> bool {
        if self.ahead.is_empty() {
            return false;
        }
        let key = Self::group_of(j);
        if !leave_group(&mut self.ahead, &key, &j.spec.id) {
            return false;
        }
        let (p, r, s) = j.ready_key();
        remove_from(&mut self.ready, &key.1, &(p, r, s, j.spec.id.clone()));
        true
    }

    /// Whether ready entry `k` of `queue` is a job placed ahead (a delayed job: see `ahead`).
    fn is_ahead(&self, queue: &Topic, k: &ReadyKey) -> bool {
        !self.ahead.is_empty()
            && self
                .ahead
                .get(&(k.1, queue.clone(), k.0))
                .is_some_and(|g| g.contains(&k.3))
    }

    /// The first ready entry of `queue` a reserve at `now` may take, in delivery order: one
    /// that is not a job placed ahead whose group waits for a later tick. Such a group's entry
    /// is passed over with the rest of its priority, whose entries are due later still; a due
    /// group's is returned (the reserve promotes it).
    fn next_reservable(&self, queue: &Topic, now: UnixMillis) -> Option<ReadyKey> {
        let set = self.ready.get(queue)?;
        let mut k = set.first()?;
        while k.1 > now && self.is_ahead(queue, k) {
            let from = (k.0.checked_add(1)?, 0, 0, JobId::lowest());
            k = set.range(from..).next()?;
        }
        Some(k.clone())
    }

    /// Whether a reserve at `now` could hand out a job of `queue` (flow control aside).
    fn has_reservable(&self, queue: &Topic, now: UnixMillis) -> bool {
        self.next_reservable(queue, now).is_some()
    }

    /// Makes group `key`'s jobs placed ahead ready (taken out of `ahead` by the caller): the
    /// group moves to `promoted`, no job is touched and no change recorded (as
    /// [`Engine::promote`]); counted once, with one ready event. Returns how many.
    fn promote_group(&mut self, key: GroupKey, ids: HashSet<JobId>, fx: &mut Effects) -> u64 {
        let n = ids.len() as u64;
        let Some(topic) = ids
            .iter()
            .next()
            .and_then(|id| self.jobs.get(id))
            .map(|s| s.0.spec.topic.clone())
        else {
            return 0;
        };
        let mut run = Promotions::of(key.1.clone(), topic, key.0 / SCHEDULE_BUCKET_MS);
        run.n = n;
        self.end_promotions(&mut run, fx);
        // A group of the same key promoted before (a job placed ahead by a clock behind the
        // one that promoted it) gains these; otherwise the set moves as it is.
        match self.promoted.entry(key) {
            btree_map::Entry::Occupied(mut o) => o.get_mut().extend(ids),
            btree_map::Entry::Vacant(v) => {
                v.insert(ids);
            }
        }
        n
    }

    /// The earliest timer deadline: the timeline's first, or a group's placed ahead.
    fn first_timer(&self) -> Option<UnixMillis> {
        let t = self.timeline.first().map(|(t, _)| *t);
        let g = self.ahead.first_key_value().map(|(k, _)| k.0);
        t.into_iter().chain(g).min()
    }

    /// Adds (`add`) or removes `n` delayed jobs due in `minute` to or from their topic's and
    /// the overall minute counts.
    fn count_due(&mut self, topic: &Topic, minute: u64, n: u64, add: bool) {
        bump_minute(&mut self.due_all, minute, n, add);
        if add {
            bump_minute(self.due.entry(topic.clone()).or_default(), minute, n, add);
        } else if let Some(m) = self.due.get_mut(topic) {
            bump_minute(m, minute, n, add);
            if m.is_empty() {
                self.due.remove(topic);
            }
        }
    }

    /// Removes a job and its index entries.
    fn take(&mut self, id: &JobId) -> StoreResult<Job> {
        self.fault_in(id)?;
        let mut j = *self.jobs.take(id).ok_or(StoreError::NotFound)?.0;
        if self.leave_promoted(&j) {
            j.state = JobState::Ready;
        }
        self.unindex(&j);
        Ok(j)
    }

    /// The group key of a job placed ahead: (tick, queue, priority).
    fn group_of(j: &Job) -> GroupKey {
        (j.spec.run_at, j.spec.queue(), j.spec.priority)
    }

    /// A job's state: its record's, but ready for a job of a group placed ahead whose tick
    /// came (see `promoted`).
    fn state_of(&self, j: &Job) -> JobState {
        if j.state == JobState::Delayed
            && !self.promoted.is_empty()
            && self
                .promoted
                .get(&Self::group_of(j))
                .is_some_and(|g| g.contains(&j.spec.id))
        {
            return JobState::Ready;
        }
        j.state
    }

    /// A copy of a stored job, its state as [`Engine::state_of`] reads it.
    fn copy_of(&self, j: &Job) -> Job {
        let mut c = j.clone();
        c.state = self.state_of(j);
        c
    }

    /// Takes job `j` out of its promoted group, if it is in one (a group left empty goes);
    /// `true` when it was: the job is ready.
    fn leave_promoted(&mut self, j: &Job) -> bool {
        j.state == JobState::Delayed
            && !self.promoted.is_empty()
            && leave_group(&mut self.promoted, &Self::group_of(j), &j.spec.id)
    }

    /// Stores a job (new or modified) with its index entries, records the change and the events
    /// it causes; returns a copy for the caller's answer.
    fn put(&mut self, j: Job, fx: &mut Effects) -> Job {
        let copy = j.clone();
        self.put_only(j, fx);
        copy
    }

    /// [`Engine::put`] for a caller that needs no copy back.
    fn put_only(&mut self, j: Job, fx: &mut Effects) {
        self.put_as(j, true, fx);
    }

    /// [`Engine::put_only`]; `hot_record` is false for a new job, which has no hot record to
    /// remove if it goes to the cold tier.
    fn put_as(&mut self, j: Job, hot_record: bool, fx: &mut Effects) {
        self.put_placed(j, hot_record, false, fx);
    }

    /// [`Engine::put_as`]; a delayed job with `ahead` is placed ahead (see `ahead`).
    fn put_placed(&mut self, j: Job, hot_record: bool, ahead: bool, fx: &mut Effects) {
        let Some(mut j) = self.spill(j, hot_record, fx) else {
            return;
        };
        self.enter_as(&mut j, ahead, fx);
        self.jobs.replace(Stored(Box::new(j.clone())));
        self.record(j, fx);
    }

    /// Makes the delayed job `id`, whose timeline entry (due at `t`) the caller took off the
    /// timeline, ready; nothing changes when the entry is not a delayed job's. In
    /// place (the job keeps its allocation), and without recording a change: no store needs to
    /// keep a promotion, which the timer's first pass after a restart makes again from the
    /// delayed record, in the same order (a ready job's order is its priority, due time and
    /// stamp, none of which a promotion changes). The counts, the minute counts and the ready
    /// event are left to `run` ([`Promotions`]), once per run of jobs of one queue and minute.
    /// Gives `id` back when it promoted nothing.
    fn promote(
        &mut self,
        t: UnixMillis,
        id: JobId,
        run: &mut Promotions,
        fx: &mut Effects,
    ) -> Result<(), JobId> {
        let Some(mut stored) = self.jobs.take(&id) else {
            return Err(id);
        };
        let j = &mut *stored.0;
        if j.state != JobState::Delayed || j.spec.run_at != t {
            self.jobs.insert(stored);
            return Err(id);
        }
        let queue = j.spec.queue();
        let minute = t / SCHEDULE_BUCKET_MS;
        if !run.extends(&queue, minute) {
            self.end_promotions(run, fx);
            *run = Promotions::of(queue.clone(), j.spec.topic.clone(), minute);
        }
        run.n += 1;
        let key = (t, id);
        remove_from(&mut self.delayed, &queue, &key);
        j.state = JobState::Ready;
        let (p, r, s) = j.ready_key();
        self.ready
            .entry(queue)
            .or_default()
            .insert((p, r, s, key.1));
        self.jobs.insert(stored);
        Ok(())
    }

    /// Counts the promotions of `run` (delayed to ready, out of the minute counts) and
    /// announces its queue's ready jobs; leaves `run` empty.
    fn end_promotions(&mut self, run: &mut Promotions, fx: &mut Effects) {
        let (Some(queue), Some(topic)) = (run.queue.take(), run.topic.take()) else {
            return;
        };
        if let Some(c) = self.counts.get_mut(&queue) {
            c.delayed = c.delayed.saturating_sub(run.n);
            c.ready += run.n;
        }
        self.count_due(&topic, run.minute, run.n, false);
        fx.ready(&queue);
        run.n = 0;
    }

    /// Adds a job's index entries and count, and the events its new state causes.
    fn enter(&mut self, j: &mut Job, fx: &mut Effects) {
        self.enter_as(j, false, fx);
    }

    /// [`Engine::enter`]; a delayed job with `ahead` is placed ahead (see `ahead`).
    fn enter_as(&mut self, j: &mut Job, ahead: bool, fx: &mut Effects) {
        if let Some(t) = j.timer_at() {
            let earlier = self.first_timer().is_none_or(|head| t < head);
            if earlier {
                fx.events.push(StoreEvent::Due(t));
            }
        }
        if j.state == JobState::Ready {
            fx.ready(&j.spec.queue());
        }
        self.index_as(j, ahead);
    }

    /// The job as dead: out of any reservation, stamped with the burial order (each topic's
    /// dead jobs are kicked oldest burial first).
    fn entomb(&mut self, mut j: Job) -> Job {
        j.state = JobState::Dead;
        j.reserved_until = None;
        j.seq = self.stamp();
        j
    }

    pub fn push_batch(
        &mut self,
        jobs: Vec<JobSpec>,
        mode: PushMode,
        now: UnixMillis,
        fx: &mut Effects,
    ) -> Vec<StoreResult<PushOutcome>> {
        jobs.into_iter()
            .map(|j| self.push(j, mode, now, fx))
            .collect()
    }

    fn push(
        &mut self,
        spec: JobSpec,
        mode: PushMode,
        now: UnixMillis,
        fx: &mut Effects,
    ) -> StoreResult<PushOutcome> {
        self.insert(spec, 0, mode, now, false, fx)
    }

    pub fn restore_batch(
        &mut self,
        jobs: &[Job],
        now: UnixMillis,
        fx: &mut Effects,
    ) -> Vec<StoreResult<PushOutcome>> {
        jobs.iter()
            .map(|j| self.insert(j.spec.clone(), j.attempts, PushMode::Reject, now, false, fx))
            .collect()
    }

    /// A new job in its initial state with `attempts` (a push's 0, a restore's recorded ones);
    /// placed ahead (see `ahead`) with `ahead` when it is delayed.
    fn insert(
        &mut self,
        spec: JobSpec,
        attempts: u32,
        mode: PushMode,
        now: UnixMillis,
        ahead: bool,
        fx: &mut Effects,
    ) -> StoreResult<PushOutcome> {
        self.observe(now);
        let outcome = match (self.exists(&spec.id)?, mode) {
            (false, _) => PushOutcome::Created,
            (true, PushMode::Reject) => return Err(StoreError::Exists),
            (true, PushMode::Replace) => PushOutcome::Replaced(self.take(&spec.id)?.state),
        };
        let seq = self.stamp();
        let mut j = Job::new(spec, now, seq);
        j.attempts = attempts;
        self.put_placed(j, outcome != PushOutcome::Created, ahead, fx);
        Ok(outcome)
    }

    pub fn reserve(
        &mut self,
        topics: &[Topic],
        max: usize,
        now: UnixMillis,
        fx: &mut Effects,
    ) -> Vec<Job> {
        let mut out = Vec::new();
        for topic in topics {
            let room = if self.flow.is_empty() {
                max
            } else {
                out.len() + self.allowance(topic, max - out.len(), now)
            };
            let before = out.len();
            while out.len() < room.min(max) {
                let Some(k) = self.next_reservable(topic, now) else {
                    break;
                };
                if self.is_ahead(topic, &k) {
                    // A due group placed ahead: promoted here (the timer may not have reached
                    // it yet), then taken as any ready jobs.
                    let key = (k.1, topic.clone(), k.0);
                    let Some(ids) = self.ahead.remove(&key) else {
                        break;
                    };
                    self.promote_group(key, ids, fx);
                    continue;
                }
                let id = k.3;
                let Ok(mut j) = self.take(&id) else { break };
                j.state = JobState::Reserved;
                j.attempts = j.attempts.saturating_add(1);
                j.reserved_until = Some(job::after(now, j.spec.ttr_ms));
                out.push(self.put(j, fx));
            }
            if !self.flow.is_empty() {
                self.spend(topic, out.len() - before, now, fx);
            }
        }
        fx.answer_before_durable = true;
        out
    }

    pub fn reserve_job(
        &mut self,
        id: &JobId,
        now: UnixMillis,
        fx: &mut Effects,
    ) -> StoreResult<Job> {
        // Never a delayed job: nothing is handed out before its due time.
        let mut j = self.take_in(id, &[JobState::Ready, JobState::Dead])?;
        j.state = JobState::Reserved;
        j.attempts = j.attempts.saturating_add(1);
        j.reserved_until = Some(job::after(now, j.spec.ttr_ms));
        fx.answer_before_durable = true;
        Ok(self.put(j, fx))
    }

    /// How many of `want` jobs of `queue` its topic's flow control lets out now (refilling its
    /// bucket to `now`), counting each limit that holds one back.
    fn allowance(&mut self, queue: &Topic, want: usize, now: UnixMillis) -> usize {
        let (name, _) = queue.split_queue();
        if want == 0 || !self.flow.contains_key(name) || !self.has_reservable(queue, now) {
            return want;
        }
        let Some(f) = self.flow.get_mut(name) else {
            return want;
        };
        let s = f.settings;
        let held = self.held.entry(f.topic.clone()).or_default();
        if s.paused {
            held.paused += 1;
            return 0;
        }
        let mut room = want;
        if let Some(rate) = s.rate_micros {
            refill(f, rate, now);
            let whole = f.tokens.floor() as usize;
            if whole < room {
                held.rate += 1;
                room = whole;
            }
        }
        if let Some(limit) = s.max_in_flight {
            let topic = f.topic.clone();
            let flying = self.in_flight(&topic);
            let left = usize::try_from(u64::from(limit).saturating_sub(flying)).unwrap_or(0);
            if left < room {
                self.held.entry(topic).or_default().max_in_flight += 1;
                room = left;
            }
        }
        room
    }

    /// A topic's reserved jobs, pull and callback.
    fn in_flight(&self, topic: &Topic) -> u64 {
        let pull = self.counts.get(topic).map_or(0, |c| c.reserved);
        let pushed = self
            .counts
            .get(&topic.callback_queue())
            .map_or(0, |c| c.reserved);
        pull + pushed
    }

    /// Takes `n` hand-outs of `queue` from its topic's bucket; if ready jobs are left waiting
    /// for a token, the timer's pass announces them when the next one comes.
    fn spend(&mut self, queue: &Topic, n: usize, now: UnixMillis, fx: &mut Effects) {
        let (name, _) = queue.split_queue();
        let Some(f) = self.flow.get_mut(name) else {
            return;
        };
        let Some(rate) = f.settings.rate_micros else {
            return;
        };
        f.tokens -= n as f64;
        if f.tokens >= 1.0 || f.settings.paused {
            return;
        }
        let tokens = f.tokens;
        if !self.has_reservable(queue, now) {
            return;
        }
        let missing = 1.0 - tokens.max(0.0);
        let wait = (missing * 1e3 * RATE_UNIT as f64 / rate as f64).ceil() as u64;
        let at = now.saturating_add(wait.max(1));
        let earlier = self.wakes.first().is_none_or(|(t, _)| at < *t)
            && self.first_timer().is_none_or(|t| at < t);
        if self.wakes.insert((at, queue.clone())) && earlier {
            fx.events.push(StoreEvent::Due(at));
        }
    }

    /// Ends a transition: a reservation that ended frees room under its topic's
    /// `max_in_flight`, so the topic's ready jobs are announced. Called by the engine store
    /// after every call.
    pub fn settle(&mut self, fx: &mut Effects) {
        if self.freed.is_empty() {
            return;
        }
        let mut freed = std::mem::take(&mut self.freed);
        freed.sort();
        freed.dedup();
        for queue in freed {
            let (name, _) = queue.split_queue();
            let Some(f) = self.flow.get(name) else {
                continue;
            };
            if f.settings.max_in_flight.is_none() {
                continue;
            }
            let topic = f.topic.clone();
            self.announce(&topic, fx);
        }
    }

    /// `Ready` events for the topic's queues that have ready jobs.
    fn announce(&self, topic: &Topic, fx: &mut Effects) {
        for queue in [topic.clone(), topic.callback_queue()] {
            if self.ready.get(&queue).is_some_and(|s| !s.is_empty()) {
                fx.ready(&queue);
            }
        }
    }

    /// Keeps `s` as `topic`'s settings, its bucket kept (refilled to `now`, within the new
    /// burst) or new and full.
    fn write_settings(&mut self, topic: &Topic, s: TopicSettings, now: UnixMillis) {
        if s.is_default() {
            self.flow.remove(topic.as_str());
            return;
        }
        let burst = s.burst().unwrap_or(0) as f64;
        let f = self
            .flow
            .entry(topic.as_str().into())
            .or_insert_with(|| Flow {
                topic: topic.clone(),
                settings: TopicSettings::default(),
                tokens: burst,
                stamp: now,
            });
        match (f.settings.rate_micros, s.rate_micros) {
            (Some(rate), Some(_)) => {
                refill(f, rate, now);
                f.tokens = f.tokens.min(burst);
            }
            _ => {
                f.tokens = burst;
                f.stamp = now;
            }
        }
        f.settings = s;
    }

    pub fn set_settings(
        &mut self,
        topic: &Topic,
        change: SettingsChange,
        now: UnixMillis,
        fx: &mut Effects,
    ) -> TopicSettings {
        let old = self.settings(topic);
        let new = change.apply(old);
        if new == old {
            return new;
        }
        self.write_settings(topic, new, now);
        fx.changes.push(Change::Settings(topic.clone(), new));
        self.announce(topic, fx);
        new
    }

    pub fn settings(&self, topic: &Topic) -> TopicSettings {
        self.flow
            .get(topic.as_str())
            .map(|f| f.settings)
            .unwrap_or_default()
    }

    /// Removes a job in any state (finish and delete are the same transition).
    pub fn delete(&mut self, id: &JobId, fx: &mut Effects) -> StoreResult<JobState> {
        let j = self.take(id)?;
        self.record_removal(id, fx);
        Ok(j.state)
    }

    /// A finish of a reserved job may be answered before it is durable (a crash delivers the
    /// job again); one of a job in any other state is a delete, which may not.
    pub fn finish(&mut self, id: &JobId, fx: &mut Effects) -> StoreResult<JobState> {
        let out = self.delete(id, fx);
        fx.answer_before_durable = matches!(out, Ok(JobState::Reserved));
        out
    }

    /// One pass for the whole batch (one commit), answered before it is durable only if every
    /// job it removed was reserved.
    pub fn finish_batch(&mut self, ids: &[JobId], fx: &mut Effects) -> Vec<StoreResult<JobState>> {
        let out: Vec<_> = ids.iter().map(|id| self.delete(id, fx)).collect();
        fx.answer_before_durable = out
            .iter()
            .all(|r| !matches!(r, Ok(s) if *s != JobState::Reserved));
        out
    }

    /// Takes a job only if it is in one of `allowed` states.
    fn take_in(&mut self, id: &JobId, allowed: &[JobState]) -> StoreResult<Job> {
        self.fault_in(id)?;
        let state = self.state_of(&self.jobs.get(id).ok_or(StoreError::NotFound)?.0);
        if !allowed.contains(&state) {
            return Err(StoreError::WrongState(state));
        }
        self.take(id)
    }

    /// Applies [`job::after_delivery_failed`] to a reserved job that was taken out.
    fn fail_delivery(&mut self, mut j: Job, delay: Option<u64>, now: UnixMillis) -> Job {
        let (state, run_at) = job::after_delivery_failed(&j.spec, j.attempts, delay, now);
        if state == JobState::Dead {
            return self.entomb(j);
        }
        j.state = state;
        j.spec.run_at = run_at;
        j.reserved_until = None;
        j
    }

    pub fn release(
        &mut self,
        id: &JobId,
        delay_ms: Option<u64>,
        now: UnixMillis,
        fx: &mut Effects,
    ) -> StoreResult<Job> {
        self.observe(now);
        let j = self.take_in(id, &[JobState::Reserved])?;
        let j = self.fail_delivery(j, delay_ms, now);
        Ok(self.put(j, fx))
    }

    pub fn touch(&mut self, id: &JobId, now: UnixMillis, fx: &mut Effects) -> StoreResult<Job> {
        let mut j = self.take_in(id, &[JobState::Reserved])?;
        j.reserved_until = Some(job::after(now, j.spec.ttr_ms));
        fx.answer_before_durable = true;
        Ok(self.put(j, fx))
    }

    /// `now` is not needed: the burial order is the engine's own stamp.
    pub fn bury(
        &mut self,
        id: &JobId,
        priority: Option<u32>,
        _now: UnixMillis,
        fx: &mut Effects,
    ) -> StoreResult<Job> {
        let mut j = self.take_in(
            id,
            &[JobState::Delayed, JobState::Ready, JobState::Reserved],
        )?;
        if let Some(priority) = priority {
            j.spec.priority = priority;
        }
        let j = self.entomb(j);
        Ok(self.put(j, fx))
    }

    pub fn kick(&mut self, id: &JobId, now: UnixMillis, fx: &mut Effects) -> StoreResult<Job> {
        let mut j = self.take_in(id, &[JobState::Dead])?;
        j.state = JobState::Ready;
        j.attempts = 0;
        j.spec.run_at = now;
        Ok(self.put(j, fx))
    }

    pub fn kick_topic(
        &mut self,
        topic: &Topic,
        max: u64,
        now: UnixMillis,
        fx: &mut Effects,
    ) -> u64 {
        let ids: Vec<JobId> = self
            .dead
            .get(topic)
            .map(|s| s.iter().take(max as usize).map(|k| k.1.clone()).collect())
            .unwrap_or_default();
        let mut n = 0;
        for id in ids {
            if self.kick(&id, now, fx).is_ok() {
                n += 1;
            }
        }
        n
    }

    pub fn reschedule(
        &mut self,
        id: &JobId,
        change: Reschedule,
        now: UnixMillis,
        fx: &mut Effects,
    ) -> StoreResult<(Job, JobState)> {
        self.observe(now);
        let mut j = self.take_in(id, &[JobState::Delayed, JobState::Ready])?;
        let previous = j.state;
        j.spec.run_at = change.run_at;
        if let Some(body) = change.body {
            j.spec.body = body;
        }
        if let Some(p) = change.priority {
            j.spec.priority = p;
        }
        j.state = j.spec.initial_state(now);
        Ok((self.put(j, fx), previous))
    }

    /// The engine always answers (its store checks its durability before every call).
    pub fn ping(&self) {}

    /// Adds stored schedules (the embedded store's start-up).
    pub fn load_schedules(&mut self, schedules: impl IntoIterator<Item = Schedule>) {
        for sc in schedules {
            self.set_schedule(sc);
        }
    }

    /// Stores a schedule with its due index entry.
    fn set_schedule(&mut self, sc: Schedule) {
        self.unset_schedule(&sc.spec.id);
        if let Some(t) = sc.next_tick.filter(|_| !sc.spec.paused) {
            self.schedule_due.insert((t, sc.spec.id.clone()));
        }
        self.schedules.insert(sc.spec.id.clone(), sc);
    }

    fn unset_schedule(&mut self, id: &ScheduleId) -> Option<Schedule> {
        let old = self.schedules.remove(id)?;
        if let Some(t) = old.next_tick {
            self.schedule_due.remove(&(t, id.clone()));
        }
        Some(old)
    }

    pub fn put_schedule(
        &mut self,
        schedule: &Schedule,
        expect: Option<u64>,
        fx: &mut Effects,
    ) -> StoreResult<Schedule> {
        let current = self.schedules.get(&schedule.spec.id).map(|s| s.version);
        match (expect, current) {
            (Some(0), None) => {}
            (Some(_), None) => return Err(StoreError::NotFound),
            (Some(v), Some(c)) if v != c => return Err(StoreError::Exists),
            _ => {}
        }
        if let Some(old) = self.schedules.get(&schedule.spec.id)
            && let Some(t) = old.withdraws(Some(schedule))
        {
            self.withdraw(&schedule.spec.id, t, fx);
        }
        let mut sc = schedule.clone();
        sc.version = current.unwrap_or(0) + 1;
        self.set_schedule(sc.clone());
        fx.changes.push(Change::PutSchedule(sc.clone()));
        Ok(sc)
    }

    pub fn get_schedule(&self, id: &ScheduleId) -> StoreResult<Schedule> {
        self.schedules.get(id).cloned().ok_or(StoreError::NotFound)
    }

    pub fn list_schedules(&self, after: Option<&ScheduleId>, limit: usize) -> Vec<Schedule> {
        let from = match after {
            Some(a) => Bound::Excluded(a),
            None => Bound::Unbounded,
        };
        self.schedules
            .range::<ScheduleId, _>((from, Bound::Unbounded))
            .take(limit.max(1))
            .map(|(_, s)| s.clone())
            .collect()
    }

    pub fn delete_schedule(&mut self, id: &ScheduleId, fx: &mut Effects) -> StoreResult<()> {
        let old = self.unset_schedule(id).ok_or(StoreError::NotFound)?;
        if let Some(t) = old.withdraws(None) {
            self.withdraw(id, t, fx);
        }
        fx.changes.push(Change::RemoveSchedule(id.clone()));
        Ok(())
    }

    /// Removes the job of schedule `id`'s tick `tick` if it still waits for it (fired ahead:
    /// delayed, due at the tick, never handed out), in the transition of the schedule's change
    /// ([`Schedule::withdraws`]).
    fn withdraw(&mut self, id: &ScheduleId, tick: UnixMillis, fx: &mut Effects) {
        let job = id.job_id(tick);
        if self.fault_in(&job).is_err() {
            return;
        }
        let waiting = self.jobs.get(&job).is_some_and(|s| {
            self.state_of(&s.0) == JobState::Delayed && s.0.spec.run_at == tick && s.0.attempts == 0
        });
        if waiting {
            let _ = self.delete(&job, fx);
        }
    }

    pub fn due_schedules(&self, now: UnixMillis, limit: usize) -> DueSchedules {
        let mut out = DueSchedules::default();
        for (t, id) in &self.schedule_due {
            if *t > now || out.due.len() >= limit {
                out.next = Some(*t);
                break;
            }
            out.due.extend(self.schedules.get(id).cloned());
        }
        out
    }

    pub fn fire_schedule(
        &mut self,
        fire: &ScheduleFire,
        now: UnixMillis,
        fx: &mut Effects,
    ) -> FireOutcome {
        let Some((old_next, paused)) = self
            .schedules
            .get(&fire.id)
            .filter(|s| s.version == fire.version)
            .map(|s| (s.next_tick, s.spec.paused))
        else {
            return FireOutcome::Stale;
        };
        let (mut pushed, mut existed) = (0, 0);
        for job in &fire.jobs {
            // A tick's job due later is placed ahead: its tick promotes it with its group.
            match self.insert(job.clone(), 0, PushMode::Reject, now, true, fx) {
                Ok(_) => pushed += 1,
                Err(_) => existed += 1,
            }
        }
        // Moved on in place: only its due index entry changes place.
        if let Some(t) = old_next {
            self.schedule_due.remove(&(t, fire.id.clone()));
        }
        if let Some(t) = fire.next_tick.filter(|_| !paused) {
            self.schedule_due.insert((t, fire.id.clone()));
        }
        let Some(sc) = self.schedules.get_mut(&fire.id) else {
            return FireOutcome::Stale;
        };
        sc.next_tick = fire.next_tick;
        sc.last_tick = fire.last_tick;
        sc.version += 1;
        fx.changes.push(Change::PutSchedule(sc.clone()));
        FireOutcome::Fired { pushed, existed }
    }

    /// Each fire as [`Engine::fire_schedule`], in order, in one transition.
    pub fn fire_schedules(
        &mut self,
        fires: &[ScheduleFire],
        now: UnixMillis,
        fx: &mut Effects,
    ) -> Vec<FireOutcome> {
        fires
            .iter()
            .map(|f| self.fire_schedule(f, now, fx))
            .collect()
    }

    pub fn get(&self, id: &JobId) -> StoreResult<Job> {
        match self.jobs.get(id) {
            Some(s) => Ok(self.copy_of(&s.0)),
            None => self.get_cold(id),
        }
    }

    pub fn stats(&self) -> Stats {
        let hot = self.first_timer();
        let mut stats = Stats {
            next_due: [hot, self.first_cold()].into_iter().flatten().min(),
            schedules: self.schedules.len() as u64,
            ..Stats::default()
        };
        for (queue, counts) in &self.counts {
            *stats.counts_of(queue.clone()) = *counts;
        }
        stats.settings = self
            .flow
            .values()
            .map(|f| (f.topic.clone(), f.settings))
            .collect();
        stats.held = self.held.clone();
        stats.on_disk = self.on_disk();
        stats.log_syncs = self.log_syncs.as_ref().map(|c| c.load(Ordering::Relaxed));
        stats
    }

    /// Reports `syncs` (kept by the embedded store's writer) as `Stats::log_syncs`.
    pub fn with_log_syncs(mut self, syncs: Arc<AtomicU64>) -> Engine {
        self.log_syncs = Some(syncs);
        self
    }

    /// [`crate::store::Store::list`].
    pub fn list(
        &self,
        queue: &Topic,
        state: JobState,
        after: Option<&ListKey>,
        limit: usize,
    ) -> JobPage {
        let limit = limit.max(1);
        let ids: Vec<JobId> = match state {
            JobState::Delayed | JobState::Reserved => {
                let index = if state == JobState::Delayed {
                    &self.delayed
                } else {
                    &self.reserved
                };
                let lower =
                    after.map_or(Bound::Unbounded, |k| Bound::Excluded((k.a, k.id.clone())));
                index.get(queue).map_or_else(Vec::new, |s| {
                    s.range((lower, Bound::Unbounded))
                        .take(limit + 1)
                        .map(|k| k.1.clone())
                        .collect()
                })
            }
            JobState::Ready => {
                let lower = match after {
                    None => Bound::Unbounded,
                    Some(k) => match u32::try_from(k.a) {
                        Ok(p) => Bound::Excluded((p, k.b, k.c, k.id.clone())),
                        Err(_) => return JobPage::default(),
                    },
                };
                // Jobs placed ahead are delayed until their group's tick: listed as such.
                self.ready.get(queue).map_or_else(Vec::new, |s| {
                    s.range((lower, Bound::Unbounded))
                        .filter(|k| !self.is_ahead(queue, k))
                        .take(limit + 1)
                        .map(|k| k.3.clone())
                        .collect()
                })
            }
            JobState::Dead => {
                let lower =
                    after.map_or(Bound::Unbounded, |k| Bound::Excluded((k.a, k.id.clone())));
                self.dead.get(queue).map_or_else(Vec::new, |s| {
                    s.range((lower, Bound::Unbounded))
                        .take(limit + 1)
                        .map(|k| k.1.clone())
                        .collect()
                })
            }
        };
        let mut jobs: Vec<Job> = ids
            .iter()
            .take(limit + 1)
            .filter_map(|id| self.jobs.get(id).map(|s| self.copy_of(&s.0)))
            .collect();
        if state == JobState::Delayed && !self.ahead.is_empty() {
            jobs.extend(self.list_ahead(queue, after, limit + 1));
            jobs.sort_by(|a, b| (a.spec.run_at, &a.spec.id).cmp(&(b.spec.run_at, &b.spec.id)));
        }
        if state == JobState::Delayed && self.cold.is_some() {
            let after = after.map(|k| (k.a, &k.id));
            jobs.extend(self.list_cold(queue, after, limit + 1));
            jobs.sort_by(|a, b| (a.spec.run_at, &a.spec.id).cmp(&(b.spec.run_at, &b.spec.id)));
        }
        let more = jobs.len() > limit;
        jobs.truncate(limit);
        let next = if more {
            jobs.last().map(ListKey::of)
        } else {
            None
        };
        JobPage { jobs, next }
    }

    /// The first `n` of `queue`'s jobs placed ahead after `after`, by (run_at, id): the
    /// delayed listing's share of them (every group of the queue is read).
    fn list_ahead(&self, queue: &Topic, after: Option<&ListKey>, n: usize) -> Vec<Job> {
        let mut keys: Vec<(UnixMillis, &JobId)> = self
            .ahead
            .iter()
            .filter(|((t, q, _), _)| q == queue && after.is_none_or(|k| *t >= k.a))
            .flat_map(|((t, _, _), ids)| ids.iter().map(move |id| (*t, id)))
            .filter(|(t, id)| after.is_none_or(|k| (*t, *id) > (k.a, &k.id)))
            .collect();
        keys.sort();
        keys.truncate(n);
        keys.iter()
            .filter_map(|(_, id)| self.jobs.get(*id).map(|s| Job::clone(&s.0)))
            .collect()
    }

    /// [`crate::store::Store::schedule`].
    pub fn schedule(
        &self,
        topic: Option<&Topic>,
        from: UnixMillis,
        to: UnixMillis,
        step: u64,
    ) -> Vec<u64> {
        let steps = schedule_steps(from, to, step);
        let mut counts = vec![0; usize::try_from(steps).unwrap_or(0)];
        let buckets = match topic {
            None => Some(&self.due_all),
            Some(t) => self.due.get(t),
        };
        let Some(buckets) = buckets else {
            return counts;
        };
        let first = from.div_ceil(SCHEDULE_BUCKET_MS);
        for (&minute, &n) in buckets.range(first..) {
            let start = minute.saturating_mul(SCHEDULE_BUCKET_MS);
            match schedule_step_of(start, from, to, step).and_then(|i| counts.get_mut(i)) {
                Some(c) => *c += n,
                None => break,
            }
        }
        counts
    }

    pub fn tick(&mut self, now: UnixMillis, limit: usize, fx: &mut Effects) -> TickOutcome {
        let mut out = TickOutcome::default();
        let load = self.load_ahead(now, fx);
        let mut moved = 0;
        let mut run = Promotions::default();
        // Groups placed ahead first: one entry each, however many jobs.
        while self
            .ahead
            .first_key_value()
            .is_some_and(|(k, _)| k.0 <= now)
        {
            if moved == limit {
                out.next_due = Some(now);
                return out;
            }
            moved += 1;
            let Some((key, ids)) = self.ahead.pop_first() else {
                break;
            };
            out.promoted += self.promote_group(key, ids, fx);
        }
        while self.timeline.first().is_some_and(|(t, _)| *t <= now) {
            if moved == limit {
                self.end_promotions(&mut run, fx);
                out.next_due = Some(now);
                return out;
            }
            moved += 1;
            // Off the timeline first: a promotion has no timer, and `take` below finds the
            // entry of an expired reservation already gone (an entry that is neither is
            // dropped: unreachable while the indexes are consistent; never loop on it).
            let Some((t, id)) = self.timeline.pop_first() else {
                break;
            };
            let Err(id) = self.promote(t, id, &mut run, fx) else {
                out.promoted += 1;
                continue;
            };
            self.end_promotions(&mut run, fx);
            let Ok(j) = self.take(&id) else {
                continue;
            };
            let j = self.fail_delivery(j, None, now);
            out.expired += 1;
            self.put_only(j, fx);
        }
        self.end_promotions(&mut run, fx);
        while let Some((t, queue)) = self.wakes.first().cloned() {
            if t > now {
                break;
            }
            self.wakes.pop_first();
            if self.has_reservable(&queue, now) {
                fx.ready(&queue);
            }
        }
        let wake = self.wakes.first().map(|(t, _)| *t);
        out.next_due = [self.first_timer(), wake, load].into_iter().flatten().min();
        out
    }
}

/// Adds (`add`) or removes `n` to or from `minute`'s count, dropping a count that reaches 0.
fn bump_minute(m: &mut BTreeMap<u64, u64>, minute: u64, n: u64, add: bool) {
    match m.entry(minute) {
        btree_map::Entry::Occupied(mut o) if !add => {
            *o.get_mut() = o.get().saturating_sub(n);
            if *o.get() == 0 {
                o.remove();
            }
        }
        btree_map::Entry::Vacant(_) if !add => {}
        e => *e.or_default() += n,
    }
}

/// Refills a bucket of `rate` millionths per second to `now`, up to its burst.
fn refill(f: &mut Flow, rate: u64, now: UnixMillis) {
    let burst = f.settings.burst().unwrap_or(0) as f64;
    let elapsed = now.saturating_sub(f.stamp) as f64;
    f.tokens = (f.tokens + elapsed * rate as f64 / (1e3 * RATE_UNIT as f64)).min(burst);
    f.stamp = f.stamp.max(now);
}

/// Removes `key` from `queue`'s set in `index`, and the set when it is empty. The set's first
/// entry is taken without a search: the timeline and each queue's delayed and reserved sets
/// share one order, and the timer takes the timeline's first entries first.
fn remove_from<K: Ord>(index: &mut HashMap<Topic, BTreeSet<K>>, queue: &Topic, key: &K) {
    if let Some(set) = index.get_mut(queue) {
        if set.first() == Some(key) {
            set.pop_first();
        } else {
            set.remove(key);
        }
        if set.is_empty() {
            index.remove(queue);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str) -> JobSpec {
        // Every call parses the topic anew, as every request does.
        JobSpec::new(
            Topic::parse("emails").unwrap(),
            JobId::parse(id).unwrap(),
            "body",
            2_000,
        )
    }

    fn topic_at(e: &Engine, id: &str) -> *const u8 {
        let j = e.get(&JobId::parse(id).unwrap()).unwrap();
        j.spec.topic.as_str().as_ptr()
    }

    /// The engine stores a topic's name once, for jobs pushed and for jobs loaded at start.
    #[test]
    fn jobs_of_one_topic_share_one_copy_of_its_name() {
        let mut pushed = Engine::new();
        let mut fx = Effects::default();
        for id in ["a", "b", "c"] {
            pushed
                .push(spec(id), PushMode::Reject, 1_000, &mut fx)
                .unwrap();
        }
        assert_eq!(topic_at(&pushed, "a"), topic_at(&pushed, "b"));
        assert_eq!(topic_at(&pushed, "a"), topic_at(&pushed, "c"));

        let loaded = Engine::load(
            (1..=3).map(|seq| Job::new(spec(&format!("j{seq}")), 1_000, seq)),
            [],
        );
        assert_eq!(topic_at(&loaded, "j1"), topic_at(&loaded, "j2"));
        assert_eq!(topic_at(&loaded, "j1"), topic_at(&loaded, "j3"));
    }

    /// Places `n` jobs of topic `t` ahead (as a fire of schedules does), due at `run_at` with
    /// priority `prio`, at `now`: ids `<prefix>0`, `<prefix>1`, ...
    fn place_ahead(
        e: &mut Engine,
        prefix: &str,
        n: usize,
        prio: u32,
        run_at: UnixMillis,
        now: UnixMillis,
    ) {
        let mut fx = Effects::default();
        for i in 0..n {
            let mut j = spec(&format!("{prefix}{i}"));
            j.priority = prio;
            j.run_at = run_at;
            e.insert(j, 0, PushMode::Reject, now, true, &mut fx)
                .unwrap();
        }
    }

    fn counts(e: &Engine) -> (u64, u64, u64) {
        let c = e
            .stats()
            .topics
            .get(&Topic::parse("emails").unwrap())
            .copied()
            .unwrap_or_default();
        (c.delayed, c.ready, c.reserved)
    }

    /// A group of jobs placed ahead is one entry of the timer's pass, however many it holds,
    /// counted and announced once; until then each job is delayed.
    #[test]
    fn a_group_placed_ahead_is_promoted_in_one_entry_of_a_pass() {
        let mut e = Engine::new();
        place_ahead(&mut e, "g", 300, 1024, 5_000, 1_000);
        assert_eq!(counts(&e), (300, 0, 0));
        assert_eq!(e.stats().next_due, Some(5_000));
        assert_eq!(
            e.get(&JobId::parse("g7").unwrap()).unwrap().state,
            JobState::Delayed
        );
        let mut fx = Effects::default();
        assert_eq!(e.tick(4_999, 1, &mut fx).promoted, 0);
        let out = e.tick(5_000, 1, &mut fx);
        assert_eq!((out.promoted, out.next_due), (300, None));
        assert_eq!(counts(&e), (0, 300, 0));
        assert_eq!(
            e.get(&JobId::parse("g7").unwrap()).unwrap().state,
            JobState::Ready
        );
        let ready = StoreEvent::Ready(Topic::parse("emails").unwrap());
        assert_eq!(fx.events.iter().filter(|ev| **ev == ready).count(), 1);
        // Ready in every transition too, though no record was rewritten.
        let id = |s: &str| JobId::parse(s).unwrap();
        assert_eq!(e.delete(&id("g0"), &mut fx), Ok(JobState::Ready));
        assert_eq!(counts(&e), (0, 299, 0));
        let got = e.reserve_job(&id("g1"), 5_000, &mut fx).unwrap();
        assert_eq!(got.state, JobState::Reserved);
        let topics = [Topic::parse("emails").unwrap()];
        assert_eq!(e.reserve(&topics, 1_000, 5_000, &mut fx).len(), 298);
        assert_eq!(counts(&e), (0, 0, 299));
        assert!(e.promoted.is_empty() && e.ahead.is_empty());
    }

    /// A reserve once a group's tick has come promotes it (the timer may not have reached it);
    /// a group not due holds back its own priority only; a group whose jobs all left is gone.
    #[test]
    fn a_reserve_promotes_a_due_group_and_passes_over_one_not_due() {
        let mut e = Engine::new();
        let mut fx = Effects::default();
        let topics = [Topic::parse("emails").unwrap()];
        place_ahead(&mut e, "soon", 3, 1, 5_000, 1_000);
        let mut later = spec("later-priority");
        later.priority = 5;
        later.run_at = 1_000;
        e.push(later, PushMode::Reject, 1_000, &mut fx).unwrap();
        let got = e.reserve(&topics, 10, 4_999, &mut fx);
        let ids: Vec<&str> = got.iter().map(|j| j.spec.id.as_str()).collect();
        assert_eq!(ids, ["later-priority"]);
        assert_eq!(counts(&e), (3, 0, 1));
        assert_eq!(e.reserve(&topics, 10, 5_000, &mut fx).len(), 3);
        assert_eq!(counts(&e), (0, 0, 4));
        assert_eq!(e.tick(5_000, 100, &mut fx).promoted, 0);

        place_ahead(&mut e, "gone", 2, 1, 9_000, 5_000);
        for id in ["gone0", "gone1"] {
            assert_eq!(
                e.delete(&JobId::parse(id).unwrap(), &mut fx),
                Ok(JobState::Delayed)
            );
        }
        assert!(e.ahead.is_empty());
        assert!(e.ready.is_empty());
        assert_eq!(counts(&e), (0, 0, 4));
        assert_eq!(e.tick(9_000, 100, &mut fx).promoted, 0);
    }

    /// The timer's passes count their promotions in runs (one queue, one minute); passes cut
    /// short by their limit, runs broken by another queue, another minute or an expired
    /// reservation, leave every count, minute count and ready event as one job at a time would.
    #[test]
    fn passes_cut_anywhere_count_every_promotion() {
        let mut e = Engine::new();
        let mut fx = Effects::default();
        let a = Topic::parse("a").unwrap();
        let b = Topic::parse("b").unwrap();
        let job = |topic: &Topic, id: &str, run_at: UnixMillis| {
            JobSpec::new(topic.clone(), JobId::parse(id).unwrap(), "body", run_at)
        };
        // A reservation that runs out at 61,000 (ttr 1 s from 60,000), among jobs due then.
        let mut held = job(&a, "held", 0);
        held.ttr_ms = 1_000;
        e.push(held, PushMode::Reject, 0, &mut fx).unwrap();
        assert_eq!(
            e.reserve(std::slice::from_ref(&a), 1, 60_000, &mut fx)
                .len(),
            1
        );
        let delayed: Vec<(Topic, &str, UnixMillis)> = vec![
            (a.clone(), "a1", 61_000),
            (a.clone(), "a2", 61_000),
            (b.clone(), "b1", 61_000),
            (a.clone(), "a3", 61_000),
            (a.clone(), "a4", 125_000),
            (b.clone(), "b2", 125_000),
            (a.clone(), "a5", 125_000),
        ];
        for (topic, id, run_at) in &delayed {
            e.push(job(topic, id, *run_at), PushMode::Reject, 60_000, &mut fx)
                .unwrap();
        }
        let mut promoted = 0;
        for limit in [2, 1, 3, 2, 10] {
            let before: Vec<JobState> = delayed
                .iter()
                .map(|(_, id, _)| e.get(&JobId::parse(*id).unwrap()).unwrap().state)
                .collect();
            let mut fx = Effects::default();
            let out = e.tick(200_000, limit, &mut fx);
            promoted += out.promoted;
            // What one job at a time would give, read from the jobs themselves.
            let state = |id: &str| e.get(&JobId::parse(id).unwrap()).unwrap().state;
            for ((topic, id, _), was) in delayed.iter().zip(&before) {
                if *was == JobState::Delayed && state(id) == JobState::Ready {
                    let ev = StoreEvent::Ready(topic.clone());
                    assert!(fx.events.contains(&ev), "{id} promoted: {:?}", fx.events);
                }
            }
            let stats = e.stats();
            for topic in [&a, &b] {
                let mine: Vec<&str> = delayed
                    .iter()
                    .filter(|(t, _, _)| t == topic)
                    .map(|(_, id, _)| *id)
                    .collect();
                let count = |s: JobState| mine.iter().filter(|id| state(id) == s).count() as u64;
                let c = stats.topics.get(topic).copied().unwrap_or_default();
                assert_eq!(c.delayed, count(JobState::Delayed), "{topic} delayed");
                let held_ready = u64::from(topic == &a && state("held") == JobState::Ready);
                assert_eq!(
                    c.ready,
                    count(JobState::Ready) + held_ready,
                    "{topic} ready"
                );
            }
            for (minute_start, due) in [(60_000, 61_000), (120_000, 125_000)] {
                let left = delayed
                    .iter()
                    .filter(|(_, id, run_at)| *run_at == due && state(id) == JobState::Delayed)
                    .count() as u64;
                assert_eq!(
                    e.schedule(None, minute_start, minute_start + 60_000, 60_000),
                    [left]
                );
                let of_a = delayed
                    .iter()
                    .filter(|(t, id, r)| t == &a && *r == due && state(id) == JobState::Delayed)
                    .count() as u64;
                assert_eq!(
                    e.schedule(Some(&a), minute_start, minute_start + 60_000, 60_000),
                    [of_a]
                );
            }
        }
        assert_eq!(promoted, 7);
        assert_eq!(
            e.stats().topics[&a].ready,
            6,
            "a1-a5 and the expired reservation"
        );
        assert_eq!(e.stats().topics[&b].ready, 2);
    }
}
