//! The embedded store's group commit: how queued job changes become durable, many callers per
//! fsync; and the checkpoint thread behind it that owns the redb [`Database`].
//!
//! **The writer thread.** A transition queues a [`Commit`] (while holding the engine lock, so
//! the queue is in engine order, `engine_store.rs`) and then waits for its [`Ticket`] outside
//! the lock. The writer thread takes everything queued (up to [`MAX_CHANGES_PER_COMMIT`]
//! changes), appends the last state of each job it touches to the write-ahead log as one frame
//! (`wal.rs`), `fdatasync`s it, and only then answers every commit in the batch and publishes
//! their events, in queue order; then it takes what was queued meanwhile, as long as an
//! acknowledged commit is among it. So the requests in flight share each fsync, the next
//! fsync starts as soon as the last one ends, and no request's task blocks on the disk. An
//! acknowledged commit wakes the writer only when it is idle.
//!
//! The writer also does what no request waits for: every [`HOUSEKEEPING_EVERY`] it writes
//! and syncs lazy commits left queued and starts a checkpoint that is due; and when the store
//! stops it writes what is left and checkpoints everything. It decides nothing about jobs;
//! nothing here reads (the store loads at open).
//!
//! **Checkpoints.** Every [`CHECKPOINT_EVERY`] (or [`CHECKPOINT_BYTES`] of log), the writer
//! starts a new log after its batch and hands the changes logged since the last checkpoint to
//! the checkpoint thread, which writes them to redb in one durable transaction and then
//! retires the old log (kept as the spare the next new log is written over, `wal.rs`).
//! Appending a frame is one small sequential write, where a redb commit per group of requests
//! would rewrite many pages of the B-tree; redb gets one transaction per checkpoint instead.
//! Opening the store replays whatever logs are left (`embedded.rs`).
//!
//! **Lazy commits** (the timer's passes: promotions and TTR expiries, which a restart redoes by
//! itself; and reservations, touches and finishes of reserved jobs, `CommitMode::Lazy`) have
//! no acknowledgement and no events to hold back, and do not wake the writer. They wait in the
//! queue for the next acknowledged commit, whose fsync covers them, as every commit queued
//! before it; so an acknowledged transition still never depends on an unwritten one, and a
//! crash loses at most timer work that is redone or a reservation or finish whose job is
//! delivered again. No fsync is made for lazy commits alone while requests come (one would
//! delay the next push by up to a whole fsync); when none comes, the writer takes them within
//! [`HOUSEKEEPING_EVERY`]; stopping the store checkpoints
//! everything, so a graceful stop leaves nothing to redo (`embedded_store.rs` checks that).
//!
//! After a failed commit or checkpoint the store never writes again: later commits may depend
//! on the lost one (a finish whose push was not written, or a push whose earlier removal was
//! not), so it refuses them all and records why in [`Failure`]; the store then refuses every
//! request until a restart reloads the last durable state (redb, then the logs).

use super::cold::{self, ColdStore};
use super::{backup, record, wal};
use crate::job::{Job, JobId, Topic};
use crate::store::engine::{Change, Effects};
use crate::store::engine_store::CommitMode;
use crate::store::{Cause, StoreError, StoreEvent, StoreResult, TopicSettings};
use foldhash::{HashMap, HashMapExt};
use redb::{Database, Durability, TableDefinition};
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, oneshot};

/// Job records: id → [`record::encode`]d job.
pub const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("jobs");
/// Store metadata: `format_version` → [`record::FORMAT_VERSION`].
pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Recurring schedules: id → [`record::encode_schedule`]d schedule. In the logs, a schedule's
/// entry is keyed by [`record::schedule_key`], which no job id can be.
pub const SCHEDULES: TableDefinition<&str, &[u8]> = TableDefinition::new("schedules");
pub const FORMAT_VERSION_KEY: &str = "format_version";

/// The writer stops taking queued commits into one batch past this many changes, so one batch
/// (and the latency of everyone in it) stays bounded under a flood of batch pushes.
const MAX_CHANGES_PER_COMMIT: usize = 50_000;

/// How often the writer looks for work no request woke it for (see the module docs): the
/// longest a lazy commit waits for its write and fsync on an idle store.
const HOUSEKEEPING_EVERY: Duration = Duration::from_millis(250);

/// How often the log is checkpointed into redb, at most; and after how many bytes of log.
/// Bounds the log's size and the memory holding its changes until their checkpoint.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
const CHECKPOINT_BYTES: u64 = wal::PREALLOCATED;
/// Checkpoints handed over and not yet written to redb before the writer waits for one: if
/// redb ever fell behind, commits slow down instead of logs and memory piling up.
const CHECKPOINTS_PENDING: usize = 2;

/// Set once, by the writer or the checkpoint thread, when a write fails: the reason every later
/// request is refused with.
pub type Failure = Arc<OnceLock<Cause>>;

/// What a change writes: a job's record, or a topic's settings (`record.rs`).
#[derive(PartialEq, Eq, Hash)]
enum Key {
    Job(JobId),
    Settings(Topic),
    /// A job's copy in the cold tier (`cold.rs`): only the last change of a batch is kept,
    /// as for a job's record; the engine waits only for its last one's report.
    Cold(JobId),
}

enum Value {
    Job(Job),
    Settings(TopicSettings),
    /// A job's copy in the cold tier (`cold::encode`'s arguments).
    Cold(Job, bool, u64),
    /// A job's copy removed from the cold tier, and the removal's number.
    ColdRemoved(u64),
}

/// Changes logged since the last checkpoint: each job's last state (`None`: removed).
type Changes = HashMap<String, Option<Vec<u8>>>;

/// The most entries a new checkpoint window's [`Changes`] is made room for up front.
const CHANGES_KEPT: usize = 1 << 16;

/// How far [`GroupCommit::write_queued`] goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Drain {
    /// Until no acknowledged commit was queued since its last batch.
    Acknowledged,
    /// Until nothing is queued (the store is stopping).
    All,
}

/// What a log rotation is followed by.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rotation {
    /// A new log, for the commits to come (a checkpoint is due).
    Continue,
    /// No log: the store is stopping and this checkpoint takes everything.
    Last,
}

/// One transition's changes, queued for the writer.
struct Commit {
    changes: Vec<Change>,
    /// Published only once `changes` are durable (empty for a lazy commit: its caller
    /// published them when it queued it).
    events: Vec<StoreEvent>,
    /// Where its waiter is told the result. `None` for a lazy commit, which nobody waits for.
    turn: Option<oneshot::Sender<StoreResult<()>>>,
    /// An online backup (`backup.rs`), which has no changes: once its batch is written, the
    /// log is rotated and the backup handed to the checkpoint thread behind that rotation,
    /// so the copy holds every commit queued before it.
    backup: Option<backup::Request>,
}

/// What the writer hands the checkpoint thread, in order.
enum Handed {
    /// Changes to write to redb, and the log that holds them (retired once they are).
    Checkpoint(Changes, PathBuf),
    /// An online backup: a copy of redb as of every checkpoint handed before it.
    Backup(backup::Request),
}

/// The queue, under the lock every commit takes (briefly, inside the engine lock).
struct Queue {
    pending: VecDeque<Commit>,
    /// An acknowledged commit was queued since the writer last looked: it writes again
    /// before it sleeps.
    wanted: bool,
    /// The writer is writing (not waiting on [`GroupCommit::wake`]): no commit needs to wake it.
    writing: bool,
    /// Set when the store is dropped: the writer writes what is left and stops.
    stopping: bool,
}

/// What only the writer thread touches (it owns it): the log it appends to and the changes
/// the next checkpoint takes.
struct Io {
    log: Option<wal::Log>,
    /// Changes in the logs not yet handed to a checkpoint.
    changes: Changes,
    /// When the last checkpoint was handed over.
    since: Instant,
    /// To the checkpoint thread; `None` once the store has stopped.
    checkpoints: Option<mpsc::SyncSender<Handed>>,
}

/// The write-ahead log's group commit, shared by the store, the tickets of the requests in
/// flight and the writer thread.
pub struct GroupCommit {
    queue: Mutex<Queue>,
    /// Wakes the idle writer: an acknowledged commit was queued, or the store stops.
    wake: Condvar,
    failure: Failure,
    /// Makes the next commit fail as if the disk had refused it (tests of the failure path).
    pub inject_failure: AtomicBool,
    /// Log syncs made so far: the store's `Stats::log_syncs` (the engine holds a copy of this
    /// counter, `Engine::with_log_syncs`).
    syncs: Arc<AtomicU64>,
    events: broadcast::Sender<StoreEvent>,
    /// The redb file (for messages) and the data directory (for the logs).
    file: PathBuf,
    dir: PathBuf,
    intervals: Intervals,
}

/// How often the writer checkpoints, at most, and looks for work no request woke it for.
#[derive(Clone, Copy)]
pub struct Intervals {
    checkpoint: Duration,
    housekeeping: Duration,
}

impl Intervals {
    /// Checkpoints every `checkpoint` ([`CHECKPOINT_EVERY`] if `None`), housekeeping every
    /// [`HOUSEKEEPING_EVERY`].
    pub fn checkpoint_every(checkpoint: Option<Duration>) -> Intervals {
        Intervals {
            checkpoint: checkpoint.unwrap_or(CHECKPOINT_EVERY),
            housekeeping: HOUSEKEEPING_EVERY,
        }
    }
}

/// What an acknowledged commit's caller holds until the commit is durable: the writer's
/// answer to come. A caller that goes away (a request cancelled while it waits) drops it; its
/// commit is written all the same.
pub struct Ticket {
    turn: oneshot::Receiver<StoreResult<()>>,
}

/// Locks `m`, ignoring poisoning: every section under these locks leaves the state whole
/// (the writes that may panic, redb's, run under none of them).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The error of a call that found the store stopping.
fn stopped() -> StoreError {
    StoreError::Unavailable("the embedded store has stopped".into())
}

impl GroupCommit {
    /// Starts the group commit of the store in `dir` over `db`: the checkpoint thread (which
    /// owns `db`), the first log (of `generation`) and the writer thread, whose handle is
    /// returned. A log or checkpoint thread that cannot be made leaves the store failed
    /// (refusing every call), not unopened.
    pub fn start(
        db: Database,
        file: PathBuf,
        dir: PathBuf,
        generation: u64,
        events: broadcast::Sender<StoreEvent>,
        cold: Option<Arc<ColdStore>>,
        intervals: Intervals,
    ) -> StoreResult<(Arc<GroupCommit>, JoinHandle<()>)> {
        let failure = Failure::default();
        let (checkpoints, to_apply) = mpsc::sync_channel::<Handed>(CHECKPOINTS_PENDING);
        let spawned = {
            let (file, dir, failure) = (file.clone(), dir.clone(), failure.clone());
            std::thread::Builder::new()
                .name("delayq-embedded-checkpoint".into())
                .spawn(move || checkpoint_loop(db, cold, &file, &dir, &failure, to_apply))
        };
        let checkpointer = match spawned {
            Ok(handle) => Some(handle),
            Err(e) => {
                let reason = Cause::with_source("cannot start the checkpoint thread", e);
                fail(&failure, &file, reason);
                None
            }
        };
        let log = match wal::Log::create(&dir, generation, true) {
            Ok(log) => Some(log),
            Err(e) => {
                let reason =
                    Cause::with_source(format_args!("cannot create a log in {}", dir.display()), e);
                fail(&failure, &file, reason);
                None
            }
        };
        let group = Arc::new(GroupCommit {
            queue: Mutex::new(Queue {
                pending: VecDeque::new(),
                wanted: false,
                writing: false,
                stopping: false,
            }),
            wake: Condvar::new(),
            failure,
            inject_failure: AtomicBool::new(false),
            syncs: Arc::default(),
            events,
            file,
            dir,
            intervals,
        });
        let io = Io {
            log,
            changes: Changes::new(),
            since: Instant::now(),
            checkpoints: Some(checkpoints),
        };
        let writer = {
            let group = group.clone();
            std::thread::Builder::new()
                .name("delayq-embedded-writer".into())
                .spawn(move || group.write_loop(io, checkpointer))
                .map_err(|e| StoreError::unavailable("cannot start the embedded store writer", e))?
        };
        Ok((group, writer))
    }

    /// How many times the writer has synced the log.
    #[cfg(test)]
    fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// The writer's count of log syncs, shared: for the store's stats.
    pub fn syncs_counter(&self) -> Arc<AtomicU64> {
        self.syncs.clone()
    }

    /// Whether the store still takes calls.
    pub fn check(&self) -> StoreResult<()> {
        match self.failure.get() {
            Some(reason) => Err(failed_error(reason)),
            None => Ok(()),
        }
    }

    /// Queues a transition's changes (under the engine lock). A lazy commit has no ticket and
    /// leaves its events to go out now; any other holds its events back until it is durable.
    pub fn commit(&self, fx: &mut Effects, mode: CommitMode) -> StoreResult<Option<Ticket>> {
        let mut q = lock(&self.queue);
        if q.stopping {
            return Err(stopped());
        }
        let changes = std::mem::take(&mut fx.changes);
        if mode == CommitMode::Lazy {
            q.pending.push_back(Commit {
                changes,
                events: Vec::new(),
                turn: None,
                backup: None,
            });
            return Ok(None);
        }
        let events = std::mem::take(&mut fx.events);
        Ok(Some(self.queue_acknowledged(&mut q, changes, events, None)))
    }

    /// Queues a commit somebody waits for, and wakes the writer if it is idle.
    fn queue_acknowledged(
        &self,
        q: &mut Queue,
        changes: Vec<Change>,
        events: Vec<StoreEvent>,
        backup: Option<backup::Request>,
    ) -> Ticket {
        let (tx, rx) = oneshot::channel();
        q.pending.push_back(Commit {
            changes,
            events,
            turn: Some(tx),
            backup,
        });
        q.wanted = true;
        if !q.writing {
            self.wake.notify_one();
        }
        Ticket { turn: rx }
    }

    /// Queues an online backup behind every commit queued so far (`backup.rs`). The ticket
    /// resolves once they are all written and the backup is handed to the checkpoint thread;
    /// `req.done` then tells how the copy went. Takes no engine lock: the copy is made from
    /// redb, off every request's path.
    pub fn backup(&self, req: backup::Request) -> StoreResult<Ticket> {
        self.check()?;
        let mut q = lock(&self.queue);
        if q.stopping {
            return Err(stopped());
        }
        Ok(self.queue_acknowledged(&mut q, Vec::new(), Vec::new(), Some(req)))
    }

    /// Writes what is queued, then again while acknowledged commits were queued meanwhile
    /// ([`Drain::Acknowledged`]: lazy commits queued alone wait for the next acknowledged one or
    /// the housekeeping, so an fsync nobody waits for never delays one somebody does) or until
    /// nothing is queued ([`Drain::All`]).
    fn write_queued(&self, io: &mut Io, drain: Drain) {
        loop {
            let batch = self.take_batch();
            if batch.is_empty() {
                return;
            }
            self.write_batch(io, batch);
            if drain == Drain::Acknowledged && !std::mem::take(&mut lock(&self.queue).wanted) {
                return;
            }
        }
    }

    /// Starts a checkpoint if one is due (by time or by the log's size).
    fn checkpoint_if_due(&self, io: &mut Io) {
        if self.failure.get().is_none() {
            let full = io.log.as_ref().is_some_and(|l| l.bytes >= CHECKPOINT_BYTES);
            if full || io.since.elapsed() >= self.intervals.checkpoint {
                self.rotate(io, Rotation::Continue);
            }
        }
    }

    /// Takes the oldest queued commits, up to [`MAX_CHANGES_PER_COMMIT`] changes (at least
    /// one commit if any is queued).
    fn take_batch(&self) -> Vec<Commit> {
        let mut q = lock(&self.queue);
        let mut batch = Vec::new();
        let mut changes = 0;
        while changes < MAX_CHANGES_PER_COMMIT
            && let Some(c) = q.pending.pop_front()
        {
            changes += c.changes.len();
            batch.push(c);
        }
        // Acknowledged commits left for the next batch: the writer goes on with them.
        if q.pending
            .iter()
            .any(|c| c.turn.is_some() || c.backup.is_some())
        {
            q.wanted = true;
        }
        batch
    }

    /// Writes one batch (unless the store has failed), then answers each commit in it and
    /// publishes the events of each, in order.
    fn write_batch(&self, io: &mut Io, batch: Vec<Commit>) {
        let mut changes = Vec::new();
        let mut waiting = Vec::with_capacity(batch.len());
        let mut backups = Vec::new();
        for c in batch {
            changes.extend(c.changes);
            waiting.push((c.events, c.turn));
            backups.extend(c.backup);
        }
        let result = match self.failure.get() {
            Some(reason) => Err(reason.clone()),
            None => self
                .write(io, changes)
                .inspect_err(|reason| self.fail(reason.clone())),
        };
        for req in backups {
            match &result {
                Ok(()) => self.hand_backup(io, req),
                Err(reason) => req.refuse(reason.clone()),
            }
        }
        let result = result.map_err(|reason| failed_error(&reason));
        for (events, turn) in waiting {
            if result.is_ok() {
                for ev in events {
                    let _ = self.events.send(ev);
                }
            }
            // The caller may have gone away; the change is durable all the same.
            if let Some(turn) = turn {
                let _ = turn.send(result.clone());
            }
        }
    }

    /// Appends the changes to the log as one frame and syncs it, and keeps them for the next
    /// checkpoint. Only the last change of each id matters, so a job pushed and finished
    /// within one batch costs nothing on disk.
    fn write(&self, io: &mut Io, changes: Vec<Change>) -> Result<(), Cause> {
        let mut last: HashMap<Key, Option<Value>> = HashMap::with_capacity(changes.len());
        let mut schedules: HashMap<String, Option<Vec<u8>>> = HashMap::new();
        for change in changes {
            match change {
                Change::Put(j) => {
                    last.insert(Key::Job(j.spec.id.clone()), Some(Value::Job(j)));
                }
                Change::Remove(id) => {
                    last.insert(Key::Job(id), None);
                }
                Change::Settings(topic, s) if s.is_default() => {
                    last.insert(Key::Settings(topic), None);
                }
                Change::Settings(topic, s) => {
                    last.insert(Key::Settings(topic), Some(Value::Settings(s)));
                }
                Change::PutSchedule(sc) => {
                    schedules.insert(
                        record::schedule_key(&sc.spec.id),
                        Some(record::encode_schedule(&sc)),
                    );
                }
                Change::RemoveSchedule(id) => {
                    schedules.insert(record::schedule_key(&id), None);
                }
                Change::PutCold { job, fresh, seq } => {
                    last.insert(
                        Key::Cold(job.spec.id.clone()),
                        Some(Value::Cold(job, fresh, seq)),
                    );
                }
                Change::RemoveCold(id, seq) => {
                    last.insert(Key::Cold(id), Some(Value::ColdRemoved(seq)));
                }
            }
        }
        if self.inject_failure.swap(false, Ordering::SeqCst) {
            return Err("injected commit failure".into());
        }
        let Some(log) = io.log.as_mut() else {
            return Err(format!("no log to write in {}", self.dir.display()).into());
        };
        let entries: Vec<wal::Entry> = last
            .into_iter()
            .map(|(key, value)| {
                let key = match key {
                    Key::Job(id) => id.as_str().to_string(),
                    Key::Settings(topic) => record::settings_key(&topic),
                    Key::Cold(id) => record::cold_key(id.as_str()),
                };
                let value = value.map(|v| match v {
                    Value::Job(j) => record::encode(j),
                    Value::Settings(s) => record::encode_settings(&s),
                    Value::Cold(j, fresh, seq) => cold::encode(j, fresh, seq),
                    Value::ColdRemoved(seq) => cold::encode_removal(seq),
                });
                (key, value)
            })
            .chain(schedules)
            .collect();
        log.append(&entries)?;
        log.sync()?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        io.changes.extend(entries);
        Ok(())
    }

    fn fail(&self, reason: Cause) {
        fail(&self.failure, &self.file, reason);
    }

    /// Hands a backup to the checkpoint thread right behind a checkpoint of everything
    /// logged so far (a rotation, even if none is due), so its copy of redb holds all of it.
    fn hand_backup(&self, io: &mut Io, req: backup::Request) {
        self.rotate(io, Rotation::Continue);
        if !io.changes.is_empty() {
            // No new log could be started: the changes are still only in the log.
            req.refuse(format!("cannot start a new log in {}", self.dir.display()).into());
            return;
        }
        match &io.checkpoints {
            Some(checkpoints) => {
                if let Err(mpsc::SendError(Handed::Backup(req))) =
                    checkpoints.send(Handed::Backup(req))
                {
                    req.refuse("the checkpoint thread has stopped".into());
                }
            }
            None => req.refuse("the embedded store has stopped".into()),
        }
    }

    /// Hands the changes logged so far to the checkpoint thread, with the log that holds them
    /// (retired once they are in redb), and starts a new log unless this is the last rotation.
    fn rotate(&self, io: &mut Io, rotation: Rotation) {
        io.since = Instant::now();
        if io.changes.is_empty() {
            // Nothing logged since the last checkpoint: a last log can go (it is empty).
            if rotation == Rotation::Last
                && let Some(log) = io.log.take()
            {
                let _ = std::fs::remove_file(&log.path);
            }
            return;
        }
        let next = match (rotation, io.log.as_ref()) {
            (Rotation::Continue, Some(log)) => {
                match wal::Log::create(&self.dir, log.generation + 1, false) {
                    Ok(next) => Some(next),
                    Err(e) => {
                        // Keep logging to the current one; the next rotation tries again.
                        tracing::warn!(error = %e, dir = %self.dir.display(), "cannot start a new log");
                        return;
                    }
                }
            }
            _ => None,
        };
        let Some(old) = std::mem::replace(&mut io.log, next) else {
            return;
        };
        if let Err(e) = old.trim() {
            // Only space: the file stays as large as the largest log it held.
            tracing::warn!(error = %e, log = %old.path.display(), "cannot trim a log");
        }
        // The next window's map starts at this one's size rather than growing to it again (up
        // to a bound: a burst's size is not kept for the quiet windows after it).
        let size = io.changes.len().min(CHANGES_KEPT);
        let changes = std::mem::replace(&mut io.changes, Changes::with_capacity(size));
        if let Some(checkpoints) = &io.checkpoints {
            let handed = Instant::now();
            let _ = checkpoints.send(Handed::Checkpoint(changes, old.path.clone()));
            let waited = handed.elapsed();
            if waited > self.intervals.checkpoint.max(CHECKPOINT_EVERY) {
                // Every commit waited meanwhile: redb is behind the log.
                tracing::warn!(
                    waited_ms = waited.as_millis() as u64,
                    "the log waited for a checkpoint into redb"
                );
            }
        }
    }

    /// Asks the writer to write what is left, checkpoint everything and stop.
    pub fn stop(&self) {
        lock(&self.queue).stopping = true;
        self.wake.notify_all();
    }

    /// The writer thread (see the module docs). Writes whenever an acknowledged commit is
    /// queued, and every [`HOUSEKEEPING_EVERY`] whatever is; runs until
    /// [`GroupCommit::stop`], then writes what is queued, checkpoints everything and waits for
    /// the checkpoint thread, which closes the database (releasing its lock).
    fn write_loop(self: Arc<Self>, mut io: Io, checkpointer: Option<JoinHandle<()>>) {
        let mut q = lock(&self.queue);
        loop {
            if q.stopping {
                break;
            }
            if !q.wanted {
                let (woken, wait) = self
                    .wake
                    .wait_timeout(q, self.intervals.housekeeping)
                    .unwrap_or_else(|p| p.into_inner());
                q = woken;
                if q.stopping || (!q.wanted && !wait.timed_out()) {
                    continue;
                }
            }
            q.wanted = false;
            q.writing = true;
            drop(q);
            self.write_queued(&mut io, Drain::Acknowledged);
            self.checkpoint_if_due(&mut io);
            q = lock(&self.queue);
            q.writing = false;
        }
        // Stopping: commits are refused now, so what is queued is the last.
        drop(q);
        self.write_queued(&mut io, Drain::All);
        if self.failure.get().is_none() {
            self.rotate(&mut io, Rotation::Last);
        }
        io.checkpoints = None;
        drop(io);
        if let Some(handle) = checkpointer {
            let _ = handle.join();
        }
        tracing::debug!(file = %self.file.display(), "embedded store group commit stopped");
    }
}

impl Ticket {
    /// Resolves once the commit is durable, or failed.
    pub async fn wait(self) -> StoreResult<()> {
        self.turn.await.unwrap_or_else(|_| Err(stopped()))
    }
}

/// The checkpoint thread: writes each handed-over set of changes to redb durably, then
/// retires the log that held them (`wal::retire`); starts each backup handed over from a
/// read transaction taken then, in a thread of its own (`backup.rs`), so checkpoints go on
/// while it copies. Owns the database; closes it when the writer is done, after stopping
/// the backups still copying (their read transactions hold the file).
fn checkpoint_loop(
    db: Database,
    cold: Option<Arc<ColdStore>>,
    file: &Path,
    dir: &Path,
    failure: &Failure,
    to_apply: mpsc::Receiver<Handed>,
) {
    let mut backups = backup::Running::default();
    for handed in to_apply {
        let (changes, log) = match handed {
            Handed::Checkpoint(changes, log) => (changes, log),
            Handed::Backup(req) => {
                match failure.get() {
                    Some(reason) => req.refuse(reason.clone()),
                    None => backups.start(&db, cold.as_deref(), file, req),
                }
                continue;
            }
        };
        if failure.get().is_some() {
            continue;
        }
        let (count, started) = (changes.len(), Instant::now());
        match apply(&db, cold.as_deref(), file, changes, true) {
            Ok(()) => {
                tracing::debug!(
                    jobs = count,
                    took_ms = started.elapsed().as_millis() as u64,
                    "checkpoint written to redb"
                );
                // A log left behind is only replayed again (same final state) at the next open.
                if let Err(e) = wal::retire(dir, &log) {
                    tracing::warn!(error = %e, log = %log.display(), "cannot retire a checkpointed log");
                }
            }
            Err(reason) => fail(failure, file, reason),
        }
    }
    backups.stop();
}

/// Records why the store stopped (a failed log write or checkpoint): every later request is
/// refused with it.
fn fail(failure: &Failure, file: &Path, reason: Cause) {
    tracing::error!(
        file = %file.display(),
        %reason,
        "embedded store write failed; refusing all further requests"
    );
    let _ = failure.set(reason);
}

/// Writes jobs' last states to redb in one durable transaction, after writing and syncing
/// the cold tier's entries in one batch of their own (`cold.rs`; `report`: tell the engine).
/// Used by checkpoints and by the replay of leftover logs at open. Applying the same entries
/// again leaves the same state, so a crash between the two commits is repaired by the
/// replay.
pub fn apply(
    db: &Database,
    cold: Option<&ColdStore>,
    file: &Path,
    changes: impl IntoIterator<Item = wal::Entry>,
    report: bool,
) -> Result<(), Cause> {
    let shown = file.display();
    let (colds, changes): (Vec<_>, Vec<_>) = changes
        .into_iter()
        .partition(|(key, _)| record::cold_of_key(key).is_some());
    if !colds.is_empty() {
        let Some(cold) = cold else {
            return Err(format!(
                "{shown}: the logs hold cold tier entries, and no cold tier is open"
            )
            .into());
        };
        let colds = colds
            .into_iter()
            .map(|(key, rec)| {
                (
                    record::cold_of_key(&key).unwrap_or_default().to_string(),
                    rec,
                )
            })
            .collect();
        cold.apply(colds, report)?;
    }
    catch_unwind(AssertUnwindSafe(|| {
        let mut tx = db.begin_write().map_err(|e| {
            Cause::with_source(
                format_args!("cannot begin a write transaction on {shown}"),
                e,
            )
        })?;
        tx.set_durability(Durability::Immediate)
            .map_err(|e| Cause::with_source(format_args!("cannot set durability on {shown}"), e))?;
        {
            let mut table = tx.open_table(JOBS).map_err(|e| {
                Cause::with_source(format_args!("cannot open the jobs table of {shown}"), e)
            })?;
            let mut schedules = tx.open_table(SCHEDULES).map_err(|e| {
                Cause::with_source(
                    format_args!("cannot open the schedules table of {shown}"),
                    e,
                )
            })?;
            for (id, rec) in changes {
                if let Some(sid) = record::schedule_of_key(&id) {
                    let written = match rec {
                        Some(r) => schedules.insert(sid, r.as_slice()).map(drop),
                        None => schedules.remove(sid).map(drop),
                    };
                    written.map_err(|e| {
                        Cause::with_source(
                            format_args!("cannot write schedule {sid:?} to {shown}"),
                            e,
                        )
                    })?;
                    continue;
                }
                let written = match rec {
                    Some(r) => table.insert(id.as_str(), r.as_slice()).map(drop),
                    None => table.remove(id.as_str()).map(drop),
                };
                written.map_err(|e| {
                    Cause::with_source(format_args!("cannot write job {id:?} to {shown}"), e)
                })?;
            }
        }
        tx.commit()
            .map_err(|e| Cause::with_source(format_args!("commit to {shown} failed"), e))
    }))
    .unwrap_or_else(|_| Err("redb panicked while writing (damaged file?)".into()))
}

/// The error of every request after a failed commit; keeps the failure's typed source.
pub fn failed_error(reason: &Cause) -> StoreError {
    StoreError::Unavailable(reason.restated(format!(
        "the embedded store stopped after a failed commit ({reason}); the last acknowledged \
         changes are on disk, later ones may not be: restart delayq to reload them"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group commit in `dir` whose writer never wakes by itself: only acknowledged commits
    /// and the stop make it write.
    fn no_housekeeping(dir: &Path) -> (Arc<GroupCommit>, JoinHandle<()>) {
        let file = dir.join("delayq.redb");
        let db = Database::create(&file).expect("a redb file");
        let events = broadcast::channel(16).0;
        let intervals = Intervals {
            checkpoint: CHECKPOINT_EVERY,
            housekeeping: Duration::from_secs(24 * 3600),
        };
        GroupCommit::start(db, file, dir.to_path_buf(), 1, events, None, intervals)
            .expect("the group commit starts")
    }

    fn settings_changes(from: usize, n: usize) -> Effects {
        let changes = (from..from + n)
            .map(|i| {
                let topic = Topic::parse(format!("t{i}")).expect("a valid topic");
                Change::Settings(topic, TopicSettings::default())
            })
            .collect();
        Effects {
            changes,
            ..Effects::default()
        }
    }

    #[test]
    fn acknowledged_commits_left_out_of_a_full_batch_are_written_next_without_a_wake() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (group, writer) = no_housekeeping(dir.path());
        // Queued at once, behind one wake: more changes than one batch takes.
        let tickets: Vec<Ticket> = {
            let mut q = lock(&group.queue);
            (0..3)
                .map(|i| {
                    let fx = settings_changes(i * 30_000, 30_000);
                    group.queue_acknowledged(&mut q, fx.changes, Vec::new(), None)
                })
                .collect()
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for t in tickets {
                let _ = tx.send(t.turn.blocking_recv());
            }
        });
        for i in 0..3 {
            let answer = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("commit {i} was not written"));
            answer.expect("answered").expect("durable");
        }
        assert_eq!(group.syncs(), 2, "two batches");
        group.stop();
        writer.join().expect("the writer stops");
    }

    #[test]
    fn lazy_commits_are_synced_with_acknowledged_ones_and_never_alone_while_those_come() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (group, writer) = no_housekeeping(dir.path());
        const ACKNOWLEDGED: u64 = 300;
        let done = AtomicBool::new(false);
        let lazy = std::thread::scope(|s| {
            // Reservations and finishes: queued all along, waited for by nobody.
            let lazy = s.spawn(|| {
                let mut n = 0;
                while !done.load(Ordering::Relaxed) {
                    let ticket = group
                        .commit(&mut settings_changes(n, 1), CommitMode::Lazy)
                        .expect("queued");
                    assert!(ticket.is_none(), "a lazy commit has no ticket");
                    n += 1;
                    std::thread::sleep(Duration::from_micros(20));
                }
                n
            });
            for n in 0..ACKNOWLEDGED as usize {
                let ticket = group
                    .commit(&mut settings_changes(n, 1), CommitMode::Acknowledged)
                    .expect("queued")
                    .expect("a ticket");
                ticket
                    .turn
                    .blocking_recv()
                    .expect("answered")
                    .expect("durable");
            }
            done.store(true, Ordering::Relaxed);
            lazy.join().expect("the lazy committer")
        });
        let syncs = group.syncs();
        assert!(lazy > 100, "the lazy committer ran ({lazy} commits)");
        assert!(
            syncs <= ACKNOWLEDGED,
            "{syncs} syncs for {ACKNOWLEDGED} acknowledged and {lazy} lazy commits"
        );
        group.stop();
        writer.join().expect("the writer stops");
    }

    #[test]
    fn the_error_after_a_failed_commit_keeps_the_failure_s_source() {
        let io = std::io::Error::new(std::io::ErrorKind::StorageFull, "disk full");
        let reason = Cause::with_source("cannot sync wal-1.log", io);
        let StoreError::Unavailable(cause) = failed_error(&reason) else {
            panic!("not Unavailable")
        };
        assert!(
            cause
                .message()
                .starts_with("the embedded store stopped after a failed commit (cannot sync wal-1.log: disk full); "),
            "{cause}"
        );
        let typed = cause
            .downcast_ref::<std::io::Error>()
            .expect("an io::Error");
        assert_eq!(typed.kind(), std::io::ErrorKind::StorageFull);
    }
}
