//! The embedded store: delayq's zero-setup default, durable on local disk in one redb file
//! (`<data_dir>/delayq.redb`) and the write-ahead logs beside it (`wal-<generation>.log`).
//!
//! State lives in memory in a [`memory::Engine`] behind a mutex; every job record is also on
//! disk, in redb's `jobs` table as of the last checkpoint and in the logs since, and
//! [`EmbeddedStore::open`] replays the logs into redb and rebuilds the engine from it. A
//! transition runs under the lock and queues its changes to the single writer thread
//! (`writer.rs`) before the lock is released, so disk order is engine order; the caller then
//! waits for the writer's acknowledgement. The writer appends everything queued to the log as
//! one frame and fsyncs it, so concurrent callers share one fsync; a checkpoint thread moves
//! the logged changes into redb every second. A transition that changed nothing (a refusal, a
//! reserve that found no job, a tick with nothing due) answers at once. The timer's passes (`tick`)
//! do not wait at all: their changes are lazy commits (`writer.rs`), made durable by the next
//! acknowledged transition, since a restart redoes a lost promotion or expiry by itself.
//!
//! Guarantees: an acknowledged transition survives a crash (kill -9, power loss as far as fsync
//! goes). Reads (`get`, `stats`, and refusals) see the engine, which may be ahead of the disk by
//! the commits in flight: a read can see a push whose acknowledgement is still on its way.
//! After a failed commit the store refuses every request with `Unavailable` until restart
//! (memory may then hold changes the disk does not; restarting reloads the last commit).
//!
//! Not here: the state machine (job.rs, memory.rs), the timer (dispatch.rs), the record layout
//! (`embedded/record.rs`), the log and redb writes (`embedded/writer.rs`, `embedded/wal.rs`).
//! One process per data directory: redb's file lock refuses a second opener, in this process
//! or another.

mod record;
mod wal;
mod writer;

use crate::job::{Job, JobId, JobSpec, JobState, Topic, UnixMillis};
use crate::store::memory::{Effects, Engine};
use crate::store::{
    EVENT_CHANNEL_CAPACITY, PushMode, PushOutcome, Reschedule, Stats, Store, StoreError,
    StoreEvent, StoreResult, TickOutcome,
};
use async_trait::async_trait;
use redb::{
    Database, DatabaseError, ReadableDatabase, ReadableTable, ReadableTableMetadata, StorageError,
};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use tokio::sync::{broadcast, oneshot};
use writer::{Commit, FORMAT_VERSION_KEY, Failure, JOBS, META, Writer};

/// Name of the redb file inside the data directory.
pub const DB_FILE_NAME: &str = "delayq.redb";

/// redb's page cache. Every job is also in the engine, so the cache only needs the pages a write
/// walks through, not the whole file (redb's default is 1 GiB).
const CACHE_BYTES: usize = 64 << 20;

/// Where and how to open the embedded store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedOptions {
    /// Created if missing. Holds `delayq.redb`; one delayq process at a time.
    pub data_dir: PathBuf,
}

/// A [`Store`] kept in memory and made durable in redb. See the module docs for its guarantees.
pub struct EmbeddedStore {
    state: Mutex<Locked>,
    events: broadcast::Sender<StoreEvent>,
    /// Why the store stopped, once a commit failed (set by the writer).
    failure: Failure,
    inject_failure: Arc<AtomicBool>,
    /// Joined on drop, so the database (and its lock) is closed when the store is gone and the
    /// directory can be opened again at once.
    writer: Option<JoinHandle<()>>,
}

/// What the engine lock guards: the engine and the queue to the writer, so a transition and
/// the queueing of its changes are one step.
struct Locked {
    engine: Engine,
    /// `None` only while dropping.
    queue: Option<mpsc::Sender<Commit>>,
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in `opts.data_dir` and loads every job. Runs the
    /// file work on a blocking thread.
    ///
    /// Errors: `Unavailable` when the directory cannot be created or is in use by another
    /// process or store handle; `Corrupt` naming the file (and the job id, for a record that
    /// does not decode) when the data cannot be read.
    pub async fn open(opts: EmbeddedOptions) -> StoreResult<EmbeddedStore> {
        tokio::task::spawn_blocking(move || EmbeddedStore::open_blocking(&opts))
            .await
            .map_err(|e| {
                StoreError::Unavailable(format!("embedded store open task failed: {e}").into())
            })?
    }

    fn open_blocking(opts: &EmbeddedOptions) -> StoreResult<EmbeddedStore> {
        let dir = &opts.data_dir;
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Unavailable(
                format!("cannot create data directory {}: {e}", dir.display()).into(),
            )
        })?;
        let file = dir.join(DB_FILE_NAME);
        // redb checks what it can and reports corruption as errors, but a damaged page can
        // still make it panic: that must be a clear error too, never a crash.
        let started = std::time::Instant::now();
        let (db, jobs, generation) = catch_unwind(AssertUnwindSafe(|| {
            let db = open_db(dir, &file)?;
            let generation = replay_logs(&db, dir, &file)?;
            let jobs = load(&db, &file)?;
            Ok::<_, StoreError>((db, jobs, generation))
        }))
        .map_err(|panic| {
            let msg = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("unknown panic");
            StoreError::Corrupt(format!("{}: cannot be read: {msg}", file.display()).into())
        })??;
        let n = jobs.len();
        let engine = Engine::load(jobs);

        let events = broadcast::channel(EVENT_CHANNEL_CAPACITY).0;
        let failure = Failure::default();
        let inject_failure = Arc::new(AtomicBool::new(false));
        let (queue, rx) = mpsc::channel();
        let writer = Writer {
            db: Some(db),
            file: file.clone(),
            dir: dir.clone(),
            generation,
            queue: rx,
            events: events.clone(),
            failure: failure.clone(),
            inject_failure: inject_failure.clone(),
        };
        let writer = std::thread::Builder::new()
            .name("delayq-embedded-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| {
                StoreError::Unavailable(
                    format!("cannot start the embedded store writer: {e}").into(),
                )
            })?;
        tracing::info!(
            file = %file.display(),
            jobs = n,
            load_ms = started.elapsed().as_millis() as u64,
            "embedded store opened"
        );
        Ok(EmbeddedStore {
            state: Mutex::new(Locked {
                engine,
                queue: Some(queue),
            }),
            events,
            failure,
            inject_failure,
            writer: Some(writer),
        })
    }

    fn lock(&self) -> StoreResult<MutexGuard<'_, Locked>> {
        let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match self.failure.get() {
            Some(reason) => Err(writer::failed_error(reason)),
            None => Ok(guard),
        }
    }

    /// Runs one transition under the lock and, if it changed anything, queues the changes
    /// before releasing the lock. Returns the result and the acknowledgement to wait for
    /// (none if nothing changed or the commit is `lazy`: then its events are published now).
    fn begin<T>(
        &self,
        lazy: bool,
        f: impl FnOnce(&mut Engine, &mut Effects) -> T,
    ) -> StoreResult<(T, Option<oneshot::Receiver<StoreResult<()>>>)> {
        let mut locked = self.lock()?;
        let mut fx = Effects::default();
        let out = f(&mut locked.engine, &mut fx);
        let mut acked = None;
        if !fx.changes.is_empty() {
            // A lazy commit has no acknowledgement and leaves its events to go out now.
            let (ack, events) = if lazy {
                (None, Vec::new())
            } else {
                let (ack, rx) = oneshot::channel();
                acked = Some(rx);
                (Some(ack), std::mem::take(&mut fx.events))
            };
            let commit = Commit {
                changes: fx.changes,
                events,
                ack,
            };
            if !matches!(locked.queue.as_ref().map(|q| q.send(commit)), Some(Ok(()))) {
                return Err(StoreError::Unavailable(
                    "the embedded store writer has stopped".into(),
                ));
            }
        }
        // Events not held back for a commit go out now, still under the lock: a transition
        // they prompt queues its commit after this one.
        for ev in fx.events {
            let _ = self.events.send(ev);
        }
        Ok((out, acked))
    }

    /// Runs one transition and waits until it is durable.
    async fn apply<T>(&self, f: impl FnOnce(&mut Engine, &mut Effects) -> T) -> StoreResult<T> {
        let (out, acked) = self.begin(false, f)?;
        if let Some(acked) = acked {
            acked.await.map_err(|_| {
                StoreError::Unavailable("the embedded store writer has stopped".into())
            })??;
        }
        Ok(out)
    }

    /// Reads the engine without changing it.
    fn read<T>(&self, f: impl FnOnce(&Engine) -> T) -> StoreResult<T> {
        Ok(f(&self.lock()?.engine))
    }

    /// Makes the next commit fail, to exercise the failure path.
    #[doc(hidden)]
    pub fn fail_next_commit_for_tests(&self) {
        self.inject_failure
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        // Closing the queue lets the writer finish what is queued and close the database.
        let locked = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        locked.queue = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

/// Opens or creates the redb file and checks its format version.
fn open_db(dir: &Path, file: &Path) -> StoreResult<Database> {
    let shown = file.display();
    let db = Database::builder()
        .set_cache_size(CACHE_BYTES)
        .create(file)
        .map_err(|e| match e {
            DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
                StoreError::Unavailable(
                    format!(
                        "data directory {} is in use by another delayq process",
                        dir.display()
                    )
                    .into(),
                )
            }
            // redb reports a foreign or truncated file as InvalidData/UnexpectedEof; other I/O
            // errors (permissions, a full disk) are about the machine, not the data.
            DatabaseError::Storage(StorageError::Io(e))
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
                ) =>
            {
                StoreError::Unavailable(format!("cannot open {shown}: {e}").into())
            }
            e => {
                StoreError::Corrupt(format!("{shown}: not a readable delayq data file: {e}").into())
            }
        })?;
    let corrupt = |e: &dyn std::fmt::Display| StoreError::Corrupt(format!("{shown}: {e}").into());
    let tx = db.begin_write().map_err(|e| corrupt(&e))?;
    {
        let mut meta = tx.open_table(META).map_err(|e| corrupt(&e))?;
        let version = meta
            .get(FORMAT_VERSION_KEY)
            .map_err(|e| corrupt(&e))?
            .map(|v| v.value());
        match version {
            Some(record::FORMAT_VERSION) => {}
            Some(v) => {
                return Err(StoreError::Corrupt(
                    format!(
                        "{shown}: data format version {v}, but this delayq reads version {}",
                        record::FORMAT_VERSION
                    )
                    .into(),
                ));
            }
            None => {
                meta.insert(FORMAT_VERSION_KEY, record::FORMAT_VERSION)
                    .map_err(|e| corrupt(&e))?;
            }
        }
        tx.open_table(JOBS).map_err(|e| corrupt(&e))?;
    }
    tx.commit().map_err(|e| corrupt(&e))?;
    Ok(db)
}

/// Applies the write-ahead logs left in `dir` (by a crash, or a checkpoint that did not
/// finish) to redb, oldest first, each in one durable transaction, and retires them (the last
/// is kept as the spare, `wal.rs`). Returns the generation the next log takes: above every one
/// seen, the spare's included, so no generation is ever written twice into one file.
fn replay_logs(db: &Database, dir: &Path, file: &Path) -> StoreResult<u64> {
    let logs = wal::existing(dir).map_err(|e| {
        StoreError::Unavailable(format!("cannot list the logs in {}: {e}", dir.display()).into())
    })?;
    for (generation, log) in &logs {
        let entries = wal::read(log, *generation).map_err(|e| {
            StoreError::Unavailable(format!("cannot read {}: {e}", log.display()).into())
        })?;
        let n = entries.len();
        writer::apply(db, file, entries).map_err(|e| StoreError::Corrupt(e.into()))?;
        wal::retire(dir, log).map_err(|e| {
            StoreError::Unavailable(format!("cannot retire {}: {e}", log.display()).into())
        })?;
        tracing::info!(log = %log.display(), changes = n, "replayed a write-ahead log");
    }
    let spare = wal::spare_generation(dir).map_err(|e| {
        StoreError::Unavailable(
            format!("cannot read the spare log in {}: {e}", dir.display()).into(),
        )
    })?;
    let last = logs.last().map(|(g, _)| *g).max(spare);
    Ok(last.map_or(0, |g| g + 1))
}

/// Reads and decodes every job record.
fn load(db: &Database, file: &Path) -> StoreResult<Vec<Job>> {
    let shown = file.display();
    let corrupt = |e: &dyn std::fmt::Display| StoreError::Corrupt(format!("{shown}: {e}").into());
    let tx = db.begin_read().map_err(|e| corrupt(&e))?;
    let table = tx.open_table(JOBS).map_err(|e| corrupt(&e))?;
    let mut jobs = Vec::with_capacity(table.len().map_err(|e| corrupt(&e))? as usize);
    for entry in table.iter().map_err(|e| corrupt(&e))? {
        let (k, v) = entry.map_err(|e| corrupt(&e))?;
        let id = k.value();
        let job = record::decode(id, v.value()).map_err(|e| {
            StoreError::Corrupt(format!("{shown}: job {id:?} cannot be decoded: {e}").into())
        })?;
        jobs.push(job);
    }
    Ok(jobs)
}

#[async_trait]
impl Store for EmbeddedStore {
    fn kind(&self) -> &'static str {
        "embedded"
    }

    async fn push_batch(
        &self,
        jobs: Vec<JobSpec>,
        mode: PushMode,
        now: UnixMillis,
    ) -> StoreResult<Vec<StoreResult<PushOutcome>>> {
        self.apply(|e, fx| jobs.into_iter().map(|j| e.push(j, mode, now, fx)).collect())
            .await
    }

    async fn reserve(
        &self,
        topics: &[Topic],
        max: usize,
        now: UnixMillis,
    ) -> StoreResult<Vec<Job>> {
        self.apply(|e, fx| e.reserve(topics, max, now, fx)).await
    }

    async fn delete(&self, id: &JobId) -> StoreResult<JobState> {
        self.apply(|e, fx| e.remove(id, fx)).await?
    }

    /// One engine pass and one commit for the whole batch.
    async fn finish_batch(&self, ids: &[JobId]) -> StoreResult<Vec<StoreResult<JobState>>> {
        self.apply(|e, fx| ids.iter().map(|id| e.remove(id, fx)).collect())
            .await
    }

    async fn release(
        &self,
        id: &JobId,
        delay_ms: Option<u64>,
        now: UnixMillis,
    ) -> StoreResult<Job> {
        self.apply(|e, fx| e.release(id, delay_ms, now, fx)).await?
    }

    async fn touch(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
        self.apply(|e, fx| e.touch(id, now, fx)).await?
    }

    async fn bury(&self, id: &JobId, _now: UnixMillis) -> StoreResult<Job> {
        self.apply(|e, fx| e.bury(id, fx)).await?
    }

    async fn kick(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
        self.apply(|e, fx| e.kick(id, now, fx)).await?
    }

    async fn kick_topic(&self, topic: &Topic, max: u64, now: UnixMillis) -> StoreResult<u64> {
        self.apply(|e, fx| e.kick_topic(topic, max, now, fx)).await
    }

    async fn reschedule(
        &self,
        id: &JobId,
        change: Reschedule,
        now: UnixMillis,
    ) -> StoreResult<(Job, JobState)> {
        self.apply(|e, fx| e.reschedule(id, change, now, fx))
            .await?
    }

    async fn get(&self, id: &JobId) -> StoreResult<Job> {
        self.read(|e| e.get(id))?
    }

    async fn stats(&self) -> StoreResult<Stats> {
        self.read(Engine::stats)
    }

    /// A lazy commit: answers without waiting for the disk (see the module docs).
    async fn tick(&self, now: UnixMillis, limit: usize) -> StoreResult<TickOutcome> {
        Ok(self.begin(true, |e, fx| e.tick(now, limit, fx))?.0)
    }

    fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }

    async fn ping(&self) -> StoreResult<()> {
        self.read(|_| ())
    }
}
