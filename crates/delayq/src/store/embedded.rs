//! The embedded store: delayq's zero-setup default, durable on local disk in one redb file
//! (`<data_dir>/delayq.redb`) and the write-ahead logs beside it (`wal-<generation>.log`).
//!
//! It is an [`EngineStore`] whose durability, [`WriteAhead`], is the write-ahead log. State
//! lives in memory in the engine behind a mutex; every job record is also on disk, in redb's
//! `jobs` table as of the last checkpoint and in the logs since, and [`EmbeddedStore::open`]
//! replays the logs into redb and rebuilds the engine from it. A transition runs under the lock
//! and queues its changes before the lock is released, so disk order is engine order; the
//! caller then waits outside the lock. The log's group commit (`group_commit.rs`) is one
//! writer thread: it appends everything queued as one frame and fsyncs it, answers those
//! callers, and goes on with what was queued meanwhile; so concurrent callers share one
//! fsync. A checkpoint thread moves the logged changes into redb every second. A transition
//! that changed nothing (a refusal, a reserve that found no job, a tick with nothing due)
//! answers at once. The timer's
//! passes (`tick`) do not wait at all: a promotion is not written (the engine records no
//! change for it: the first pass after a restart promotes the delayed record again), and an
//! expiry is a lazy commit (`group_commit.rs`), made durable by the next acknowledged
//! transition, since a restart redoes a lost expiry by itself. So are a reservation and the
//! finish of a reserved job: a crash that loses them delivers the job again, as at-least-once
//! delivery allows.
//!
//! Guarantees: an acknowledged transition survives a crash (kill -9, power loss as far as fsync
//! goes), except the reservations and finishes of the last 250 ms (docs/reliability.md). Reads (`get`, `stats`, and refusals) see the engine, which may be ahead of the disk by
//! the commits in flight: a read can see a push whose acknowledgement is still on its way.
//! After a failed commit the store refuses every request with `Unavailable` until restart
//! (memory may then hold changes the disk does not; restarting reloads the last commit).
//!
//! With a memory window (`EmbeddedOptions::memory_window`), delayed jobs due beyond it are
//! kept on disk only, in the cold tier (`embedded/cold.rs`, `<data_dir>/cold/`), which the
//! checkpoint thread writes from the log and the engine reads (`engine/cold.rs`); a directory
//! holding a cold tier always opens it, window or not.
//!
//! Not here: the state machine (job.rs, `engine.rs`), the locking and the `Store` methods
//! (`engine_store.rs`), the timer (dispatch/), the record layout (`embedded/record.rs`), the
//! log and redb writes (`embedded/group_commit.rs`, `embedded/wal.rs`). One process per data
//! directory: redb's file lock refuses a second opener, in this process or another.

mod backup;
pub(crate) mod cold;
mod group_commit;
pub(crate) mod record;
mod wal;

use crate::job::{Job, Topic};
use crate::schedule::Schedule;
use crate::store::engine::{Effects, Engine};
use crate::store::engine_store::{CommitMode, Durability, EngineStore};
use crate::store::{
    BackupError, BackupReport, EVENT_CHANNEL_CAPACITY, OnlineBackup, StoreError, StoreResult,
    TopicSettings,
};
use cold::ColdStore;
use group_commit::{FORMAT_VERSION_KEY, GroupCommit, Intervals, JOBS, META, Ticket};
use redb::{
    Database, DatabaseError, ReadableDatabase, ReadableTable, ReadableTableMetadata, StorageError,
};
use std::error::Error;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use tokio::sync::broadcast;

pub use record::FORMAT_VERSION;

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
    /// Delayed jobs due this far ahead or more are kept on disk only, in the cold tier
    /// (`<data_dir>/cold/`), and loaded back into memory ahead of their time. `None`: every
    /// job in memory (a cold tier left by an earlier run is loaded back).
    pub memory_window: Option<std::time::Duration>,
    /// How often the write-ahead log is checkpointed (`None`: every second). Tests of the cold
    /// tier checkpoint after every commit, so jobs move to disk at once.
    pub checkpoint_every: Option<std::time::Duration>,
}

impl EmbeddedOptions {
    /// The store in `data_dir`, every job in memory.
    pub fn new(data_dir: impl Into<PathBuf>) -> EmbeddedOptions {
        EmbeddedOptions {
            data_dir: data_dir.into(),
            memory_window: None,
            checkpoint_every: None,
        }
    }
}

/// A [`Store`](crate::store::Store) kept in memory and made durable in redb. See the module
/// docs for its guarantees.
pub type EmbeddedStore = EngineStore<WriteAhead>;

/// The embedded store's durability: the write-ahead log's group commit (`group_commit.rs`), in
/// which one writer thread writes and syncs the log for every request queued meanwhile.
pub struct WriteAhead {
    log: Arc<GroupCommit>,
    /// Joined on drop, after it has checkpointed everything, so the database (and its lock)
    /// is closed when the store is gone and the directory can be opened again at once.
    writer: Option<JoinHandle<()>>,
    /// Set while an online backup runs: one at a time.
    backing_up: Arc<AtomicBool>,
    cold: Option<Arc<ColdStore>>,
}

impl Durability for WriteAhead {
    const KIND: &'static str = "embedded";

    type Ack = Ticket;

    fn check(&self) -> StoreResult<()> {
        self.log.check()
    }

    /// Queues the changes for the writer. A lazy commit has no acknowledgement and
    /// leaves its events to go out now; any other holds its events back until it is synced.
    fn commit(&self, fx: &mut Effects, mode: CommitMode) -> StoreResult<Option<Self::Ack>> {
        self.log.commit(fx, mode)
    }

    async fn wait(ack: Self::Ack) -> StoreResult<()> {
        ack.wait().await
    }

    fn online_backup(&self) -> Option<&dyn OnlineBackup> {
        Some(self)
    }

    fn prepare(&self, engine: &mut Engine) {
        let Some(cold) = &self.cold else {
            return;
        };
        for report in cold.take_reports() {
            engine.cold_applied(report.applied);
        }
    }
}

#[async_trait::async_trait]
impl OnlineBackup for WriteAhead {
    /// See `embedded/backup.rs`. Runs in a task of its own: a caller that goes away (a
    /// cancelled request) leaves it to finish, so it never leaves a half-named copy.
    async fn backup(&self, dir: &Path) -> Result<BackupReport, BackupError> {
        if self.backing_up.swap(true, Ordering::SeqCst) {
            return Err(BackupError::Running);
        }
        let running = BackingUp(self.backing_up.clone());
        let (log, dir) = (self.log.clone(), dir.to_path_buf());
        tokio::spawn(async move {
            let _running = running;
            run_backup(log, dir).await
        })
        .await
        .map_err(|e| BackupError::Store(StoreError::unavailable("backup task failed", e)))?
    }
}

/// Clears [`WriteAhead::backing_up`] when the backup ends, however it ends.
struct BackingUp(Arc<AtomicBool>);

impl Drop for BackingUp {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// One online backup into `dir` (`embedded/backup.rs`).
async fn run_backup(log: Arc<GroupCommit>, dir: PathBuf) -> Result<BackupReport, BackupError> {
    let started = std::time::Instant::now();
    let blocking = |e| BackupError::Store(StoreError::unavailable("backup task failed", e));
    let target = dir.clone();
    let partial = tokio::task::spawn_blocking(move || backup::prepare(&target))
        .await
        .map_err(blocking)??;
    let (req, done) = backup::Request::new(partial.clone());
    let ticket = log.backup(req).map_err(BackupError::Store)?;
    ticket.wait().await.map_err(BackupError::Store)?;
    let copied = done
        .await
        .unwrap_or_else(|_| Err("the embedded store stopped during the backup".into()));
    let mut report = copied.map_err(|cause| BackupError::Write(cause.to_string()))?;
    let target = dir.clone();
    tokio::task::spawn_blocking(move || backup::finish(&target, &partial))
        .await
        .map_err(blocking)?
        .map_err(|cause| BackupError::Write(cause.to_string()))?;
    report.took_ms = started.elapsed().as_millis() as u64;
    tracing::info!(
        dir = %dir.display(),
        jobs = report.jobs,
        schedules = report.schedules,
        bytes = report.bytes,
        took_ms = report.took_ms,
        "online backup written"
    );
    Ok(report)
}

impl Drop for WriteAhead {
    fn drop(&mut self) {
        self.log.stop();
        if let Some(h) = self.writer.take() {
            let _ = h.join();
        }
    }
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
            .map_err(|e| StoreError::unavailable("embedded store open task failed", e))?
    }

    fn open_blocking(opts: &EmbeddedOptions) -> StoreResult<EmbeddedStore> {
        let dir = &opts.data_dir;
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::unavailable(
                format_args!("cannot create data directory {}", dir.display()),
                e,
            )
        })?;
        let file = dir.join(DB_FILE_NAME);
        // redb checks what it can and reports corruption as errors, but a damaged page can
        // still make it panic: that must be a clear error too, never a crash.
        let started = std::time::Instant::now();
        let (db, (jobs, settings, schedules), generation, cold) =
            catch_unwind(AssertUnwindSafe(|| {
                let db = open_db(dir, &file)?;
                let cold = match opts.memory_window.is_some() || dir.join(cold::COLD_DIR).exists() {
                    true => Some(Arc::new(
                        ColdStore::open(dir).map_err(StoreError::Unavailable)?,
                    )),
                    false => None,
                };
                let generation = replay_logs(&db, cold.as_deref(), dir, &file)?;
                let (jobs, settings) = load(&db, &file)?;
                let schedules = load_schedules(&db, &file)?;
                Ok::<_, StoreError>((db, (jobs, settings, schedules), generation, cold))
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
        let mut engine = Engine::load(jobs, settings);
        engine.load_schedules(schedules);
        if let Some(c) = &cold {
            // Without a window, nothing more goes to disk and what is there comes back.
            let window = opts.memory_window.map_or(u64::MAX / 4, |w| {
                w.as_millis().min(u64::MAX as u128 / 4) as u64
            });
            engine = engine.with_cold(c.clone(), window, c.counts());
        }

        let events = broadcast::channel(EVENT_CHANNEL_CAPACITY).0;
        let (log, writer) = GroupCommit::start(
            db,
            file.clone(),
            dir.clone(),
            generation,
            events.clone(),
            cold.clone(),
            Intervals::checkpoint_every(opts.checkpoint_every),
        )?;
        let engine = engine.with_log_syncs(log.syncs_counter());
        tracing::info!(
            file = %file.display(),
            jobs = n,
            format_version = record::FORMAT_VERSION,
            load_ms = started.elapsed().as_millis() as u64,
            "embedded store opened"
        );
        let durability = WriteAhead {
            log,
            writer: Some(writer),
            backing_up: Arc::default(),
            cold,
        };
        Ok(EngineStore::with_durability(engine, events, durability))
    }

    /// Makes the next commit fail, to exercise the failure path.
    #[doc(hidden)]
    pub fn fail_next_commit_for_tests(&self) {
        self.durability()
            .log
            .inject_failure
            .store(true, Ordering::SeqCst);
    }
}

/// `Corrupt`, naming `file`, caused by a redb error reading it.
fn corrupt(file: &Path, e: impl Error + Send + Sync + 'static) -> StoreError {
    StoreError::corrupt(file.display(), e)
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
                StoreError::unavailable(format_args!("cannot open {shown}"), e)
            }
            e => StoreError::corrupt(format_args!("{shown}: not a readable delayq data file"), e),
        })?;
    let tx = db.begin_write().map_err(|e| corrupt(file, e))?;
    {
        let mut meta = tx.open_table(META).map_err(|e| corrupt(file, e))?;
        let version = meta
            .get(FORMAT_VERSION_KEY)
            .map_err(|e| corrupt(file, e))?
            .map(|v| v.value());
        match version {
            Some(record::FORMAT_VERSION) => {}
            Some(v) if v > record::FORMAT_VERSION => {
                return Err(StoreError::Unavailable(
                    format!(
                        "{shown}: data format version {v} was written by a newer delayq; this \
                         delayq ({}) reads version {} and left it untouched: run the newer \
                         delayq, or, to go back to this one, restore a backup taken before \
                         the upgrade (docs/upgrading.md)",
                        env!("CARGO_PKG_VERSION"),
                        record::FORMAT_VERSION
                    )
                    .into(),
                ));
            }
            // Version 1 had no cold tier: nothing to change but the number.
            Some(1) => {
                meta.insert(FORMAT_VERSION_KEY, record::FORMAT_VERSION)
                    .map_err(|e| corrupt(file, e))?;
                tracing::info!(
                    file = %shown,
                    from = 1,
                    to = record::FORMAT_VERSION,
                    "data directory format migrated"
                );
            }
            Some(v) => {
                return Err(StoreError::Corrupt(
                    format!(
                        "{shown}: data format version {v} is not one delayq ever wrote (the \
                         first is 1)"
                    )
                    .into(),
                ));
            }
            // A new file. (Every data directory delayq wrote has a version: the first build
            // recorded version 1.)
            None => {
                meta.insert(FORMAT_VERSION_KEY, record::FORMAT_VERSION)
                    .map_err(|e| corrupt(file, e))?;
            }
        }
        tx.open_table(JOBS).map_err(|e| corrupt(file, e))?;
    }
    tx.commit().map_err(|e| corrupt(file, e))?;
    Ok(db)
}

/// Applies the write-ahead logs left in `dir` (by a crash, or a checkpoint that did not
/// finish) to redb, oldest first, each in one durable transaction, and retires them (the last
/// is kept as the spare, `wal.rs`). Returns the generation the next log takes: above every one
/// seen, the spare's included, so no generation is ever written twice into one file.
fn replay_logs(
    db: &Database,
    cold: Option<&ColdStore>,
    dir: &Path,
    file: &Path,
) -> StoreResult<u64> {
    let logs = wal::existing(dir).map_err(|e| {
        StoreError::unavailable(format_args!("cannot list the logs in {}", dir.display()), e)
    })?;
    for (generation, log) in &logs {
        let entries = wal::read(log, *generation).map_err(|e| {
            StoreError::unavailable(format_args!("cannot read {}", log.display()), e)
        })?;
        let n = entries.len();
        group_commit::apply(db, cold, file, entries, false).map_err(StoreError::Corrupt)?;
        wal::retire(dir, log).map_err(|e| {
            StoreError::unavailable(format_args!("cannot retire {}", log.display()), e)
        })?;
        tracing::info!(log = %log.display(), changes = n, "replayed a write-ahead log");
    }
    let spare = wal::spare_generation(dir).map_err(|e| {
        StoreError::unavailable(
            format_args!("cannot read the spare log in {}", dir.display()),
            e,
        )
    })?;
    let last = logs.last().map(|(g, _)| *g).max(spare);
    Ok(last.map_or(0, |g| g + 1))
}

/// What the store holds on disk: every job, and every topic's settings.
type Loaded = (Vec<Job>, Vec<(Topic, TopicSettings)>);

/// Reads and decodes every job record and every topic's settings.
fn load(db: &Database, file: &Path) -> StoreResult<Loaded> {
    let shown = file.display();
    let tx = db.begin_read().map_err(|e| corrupt(file, e))?;
    let table = tx.open_table(JOBS).map_err(|e| corrupt(file, e))?;
    let mut jobs = Vec::with_capacity(table.len().map_err(|e| corrupt(file, e))? as usize);
    let mut settings = Vec::new();
    for entry in table.iter().map_err(|e| corrupt(file, e))? {
        let (k, v) = entry.map_err(|e| corrupt(file, e))?;
        let id = k.value();
        if let Some(topic) = record::settings_topic(id) {
            let bad = |e: String| {
                StoreError::Corrupt(
                    format!("{shown}: settings {id:?} cannot be decoded: {e}").into(),
                )
            };
            let topic = topic.map_err(bad)?;
            settings.push((topic, record::decode_settings(v.value()).map_err(bad)?));
            continue;
        }
        let job = record::decode(id, v.value()).map_err(|e| {
            StoreError::Corrupt(format!("{shown}: job {id:?} cannot be decoded: {e}").into())
        })?;
        jobs.push(job);
    }
    Ok((jobs, settings))
}

/// Reads and decodes every schedule record (none in a store written before schedules).
fn load_schedules(db: &Database, file: &Path) -> StoreResult<Vec<Schedule>> {
    let shown = file.display();
    let tx = db.begin_read().map_err(|e| corrupt(file, e))?;
    let table = match tx.open_table(group_commit::SCHEDULES) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(corrupt(file, e)),
    };
    let mut out = Vec::new();
    for entry in table.iter().map_err(|e| corrupt(file, e))? {
        let (k, v) = entry.map_err(|e| corrupt(file, e))?;
        let id = k.value();
        let sc = record::decode_schedule(id, v.value()).map_err(|e| {
            StoreError::Corrupt(format!("{shown}: schedule {id:?} cannot be decoded: {e}").into())
        })?;
        out.push(sc);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_data_directory_that_cannot_be_created_is_unavailable_with_its_io_error() {
        let parent = tempfile::tempdir().unwrap();
        let file = parent.path().join("a-file");
        std::fs::write(&file, b"").unwrap();
        let opened = EmbeddedStore::open(EmbeddedOptions::new(file.clone())).await;
        let Err(StoreError::Unavailable(cause)) = opened else {
            panic!("{:?}", opened.err())
        };
        let io = cause
            .downcast_ref::<std::io::Error>()
            .expect("an io::Error");
        let want = format!("cannot create data directory {}: {io}", file.display());
        assert_eq!(cause.message(), want);
    }
}
