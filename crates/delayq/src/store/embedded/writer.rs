//! The embedded store's single writer: a thread that turns queued job changes into durable
//! commits, many callers per fsync (group commit), and the checkpoint thread behind it that
//! owns the redb [`Database`].
//!
//! Callers queue a [`Commit`] (while holding the engine lock, so the queue is in engine order)
//! and wait for its acknowledgement. The writer takes everything queued, appends the last state
//! of each job it touches to the write-ahead log as one frame (`wal.rs`), `fdatasync`s it, and
//! only then acknowledges each commit and publishes its events. It decides nothing about jobs;
//! it does not read (the store loads at open, before this thread starts).
//!
//! **Checkpoints.** Every [`CHECKPOINT_EVERY`] (or [`CHECKPOINT_BYTES`] of log), the writer
//! starts a new log and hands the changes logged since the last checkpoint to the checkpoint
//! thread, which writes them to redb in one durable transaction and then retires the old log
//! (kept as the spare the next new log is written over, `wal.rs`). Appending a frame is one
//! small sequential write, where a redb commit per group of requests would rewrite many pages
//! of the B-tree; redb gets one transaction per checkpoint instead. Opening the store replays
//! whatever logs are left (`embedded.rs`).
//!
//! **Lazy commits** (the timer's passes: promotions and TTR expiries, which a restart redoes by
//! itself) have no acknowledgement and no events to hold back. A batch of only lazy commits is
//! appended without an fsync; the next acknowledged commit's fsync covers it, as every frame
//! before it. So an acknowledged transition still never depends on an unwritten one, and a
//! crash loses at most timer work that is redone. A lazy commit stays without an fsync for at
//! most [`LAZY_WINDOW`] (then the thread syncs the log); stopping the store checkpoints
//! everything, so a graceful stop leaves nothing to redo (`embedded_store.rs` checks that).
//!
//! After a failed commit or checkpoint the store never writes again: later commits may depend
//! on the lost one (a finish whose push was not written, or a push whose earlier removal was
//! not), so it refuses them all and records why in [`Failure`]; the store then refuses every
//! request until a restart reloads the last durable state (redb, then the logs).

use super::{record, wal};
use crate::job::{Job, JobId};
use crate::store::engine::Change;
use crate::store::{Cause, StoreError, StoreEvent};
use redb::{Database, Durability, TableDefinition};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, oneshot};

/// Job records: id → [`record::encode`]d job.
pub const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("jobs");
/// Store metadata: `format_version` → [`record::FORMAT_VERSION`].
pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub const FORMAT_VERSION_KEY: &str = "format_version";

/// Stop draining the queue into one commit past this many changes, so one commit (and the
/// latency of everyone in it) stays bounded under a flood of batch pushes.
const MAX_CHANGES_PER_COMMIT: usize = 50_000;

/// Longest a lazy commit goes without an fsync after it (see the module docs).
const LAZY_WINDOW: Duration = Duration::from_secs(1);

/// How often the log is checkpointed into redb, at most; and after how many bytes of log.
/// Bounds the log's size and the memory holding its changes until their checkpoint.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
const CHECKPOINT_BYTES: u64 = 16 << 20;
/// Checkpoints handed over and not yet written to redb before the writer waits for one: if
/// redb ever fell behind, commits slow down instead of logs and memory piling up.
const CHECKPOINTS_PENDING: usize = 2;

/// One transition's changes, queued for the writer.
pub struct Commit {
    pub changes: Vec<Change>,
    /// Published only once `changes` are durable (empty for a lazy commit: its caller
    /// published them when it queued it).
    pub events: Vec<StoreEvent>,
    /// Answered after the commit that contains `changes`; `None` for a lazy commit, which
    /// nobody waits for and which may be written without an fsync.
    pub ack: Option<oneshot::Sender<Result<(), StoreError>>>,
}

/// Set once, by the writer or the checkpoint thread, when a write fails: the reason every
/// later request is refused with.
pub type Failure = Arc<OnceLock<Cause>>;

/// Changes logged since the last checkpoint: each job's last state (`None`: removed).
type Changes = HashMap<String, Option<Vec<u8>>>;

pub struct Writer {
    /// Handed to the checkpoint thread when the writer starts.
    pub db: Option<Database>,
    /// The redb file (for messages) and the data directory (for the logs).
    pub file: PathBuf,
    pub dir: PathBuf,
    /// The generation of the first log this writer creates (above every existing one).
    pub generation: u64,
    pub queue: mpsc::Receiver<Commit>,
    pub events: broadcast::Sender<StoreEvent>,
    pub failure: Failure,
    /// Makes the next commit fail as if the disk had refused it (tests of the failure path).
    pub inject_failure: Arc<AtomicBool>,
}

/// What the writer thread keeps between batches: the log it appends to and the changes the
/// next checkpoint takes.
struct WriterState {
    log: Option<wal::Log>,
    /// Changes in the logs not yet handed to a checkpoint.
    changes: Changes,
    since: Instant,
    checkpoints: mpsc::SyncSender<(Changes, PathBuf)>,
}

impl Writer {
    /// Runs until every sender is dropped and the queue is empty, then checkpoints everything
    /// and closes the database (releasing its lock).
    pub fn run(mut self) {
        let (checkpoints, to_apply) = mpsc::sync_channel::<(Changes, PathBuf)>(CHECKPOINTS_PENDING);
        let checkpointer = self.db.take().map(|db| {
            let (file, dir, failure) = (self.file.clone(), self.dir.clone(), self.failure.clone());
            std::thread::Builder::new()
                .name("delayq-embedded-checkpoint".into())
                .spawn(move || checkpoint_loop(db, &file, &dir, &failure, to_apply))
        });
        let checkpointer = match checkpointer {
            Some(Ok(handle)) => Some(handle),
            None => None,
            Some(Err(e)) => {
                self.fail(Cause::with_source("cannot start the checkpoint thread", e));
                None
            }
        };
        let log = match wal::Log::create(&self.dir, self.generation) {
            Ok(log) => Some(log),
            Err(e) => {
                self.fail(Cause::with_source(
                    format_args!("cannot create a log in {}", self.dir.display()),
                    e,
                ));
                None
            }
        };
        let mut state = WriterState {
            log,
            changes: Changes::new(),
            since: Instant::now(),
            checkpoints,
        };
        // Since when lazy commits have been logged without an fsync (None: all synced).
        let mut lazy_since: Option<Instant> = None;
        loop {
            let next = match lazy_since {
                None => self
                    .queue
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected),
                Some(t) => self
                    .queue
                    .recv_timeout(LAZY_WINDOW.saturating_sub(t.elapsed())),
            };
            let first = match next {
                Ok(c) => c,
                Err(RecvTimeoutError::Timeout) => {
                    // Lazy commits have waited long enough for their fsync.
                    if let Some(Err(reason)) = state.log.as_mut().map(wal::Log::sync) {
                        self.fail(reason);
                    }
                    lazy_since = None;
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let mut batch = vec![first];
            let mut changes = batch[0].changes.len();
            while changes < MAX_CHANGES_PER_COMMIT {
                match self.queue.try_recv() {
                    Ok(c) => {
                        changes += c.changes.len();
                        batch.push(c);
                    }
                    Err(_) => break,
                }
            }
            let durable = batch.iter().any(|c| c.ack.is_some());
            if self.commit(&mut state, batch, durable) {
                lazy_since = if durable {
                    None
                } else {
                    lazy_since.or_else(|| Some(Instant::now()))
                };
                let full = state
                    .log
                    .as_ref()
                    .is_some_and(|l| l.bytes >= CHECKPOINT_BYTES);
                if full || state.since.elapsed() >= CHECKPOINT_EVERY {
                    self.rotate(&mut state, true);
                }
            }
        }
        // Stopping: everything logged goes to redb now, then the database closes.
        if self.failure.get().is_none() {
            self.rotate(&mut state, false);
        }
        drop(state);
        if let Some(handle) = checkpointer {
            let _ = handle.join();
        }
        tracing::debug!(file = %self.file.display(), "embedded store writer stopped");
    }

    fn fail(&self, reason: Cause) {
        fail(&self.failure, &self.file, reason);
    }

    /// Hands the changes logged so far to the checkpoint thread, with the log that holds them
    /// (retired once they are in redb), and starts a new log if `more` are to come.
    fn rotate(&self, state: &mut WriterState, more: bool) {
        state.since = Instant::now();
        if state.changes.is_empty() {
            // Nothing logged since the last checkpoint: a last log can go (it is empty).
            if !more && let Some(log) = state.log.take() {
                let _ = std::fs::remove_file(&log.path);
            }
            return;
        }
        let next = match (more, state.log.as_ref()) {
            (true, Some(log)) => match wal::Log::create(&self.dir, log.generation + 1) {
                Ok(next) => Some(next),
                Err(e) => {
                    // Keep logging to the current one; the next rotation tries again.
                    tracing::warn!(error = %e, dir = %self.dir.display(), "cannot start a new log");
                    return;
                }
            },
            _ => None,
        };
        let Some(old) = std::mem::replace(&mut state.log, next) else {
            return;
        };
        if let Err(e) = old.trim() {
            // Only space: the file stays as large as the largest log it held.
            tracing::warn!(error = %e, log = %old.path.display(), "cannot trim a log");
        }
        let changes = std::mem::take(&mut state.changes);
        let _ = state.checkpoints.send((changes, old.path.clone()));
    }

    /// Logs a batch, with an fsync if `durable`; answers and publishes. Returns whether it
    /// was written.
    fn commit(&self, state: &mut WriterState, batch: Vec<Commit>, durable: bool) -> bool {
        let mut changes = Vec::new();
        let mut waiting = Vec::with_capacity(batch.len());
        for c in batch {
            changes.extend(c.changes);
            waiting.push((c.events, c.ack));
        }
        let result = match self.failure.get() {
            Some(reason) => Err(reason.clone()),
            None => self
                .write(state, changes, durable)
                .inspect_err(|reason| self.fail(reason.clone())),
        };
        for (events, ack) in waiting {
            match &result {
                Ok(()) => {
                    for ev in events {
                        let _ = self.events.send(ev);
                    }
                    // The caller may have gone away; the change is durable all the same.
                    if let Some(ack) = ack {
                        let _ = ack.send(Ok(()));
                    }
                }
                Err(reason) => {
                    if let Some(ack) = ack {
                        let _ = ack.send(Err(failed_error(reason)));
                    }
                }
            }
        }
        result.is_ok()
    }

    /// Appends the changes to the log as one frame, synced if `durable`, and keeps them for
    /// the next checkpoint. Only the last change of each id matters, so a job pushed and
    /// finished within one batch costs nothing on disk.
    fn write(
        &self,
        state: &mut WriterState,
        changes: Vec<Change>,
        durable: bool,
    ) -> Result<(), Cause> {
        let mut last: HashMap<JobId, Option<Job>> = HashMap::with_capacity(changes.len());
        for change in changes {
            match change {
                Change::Put(j) => last.insert(j.spec.id.clone(), Some(j)),
                Change::Remove(id) => last.insert(id, None),
            };
        }
        if self.inject_failure.swap(false, Ordering::SeqCst) {
            return Err("injected commit failure".into());
        }
        let Some(log) = state.log.as_mut() else {
            return Err(format!("no log to write in {}", self.dir.display()).into());
        };
        let entries: Vec<wal::Entry> = last
            .into_iter()
            .map(|(id, job)| (id.as_str().to_string(), job.map(record::encode)))
            .collect();
        log.append(&entries)?;
        if durable {
            log.sync()?;
        }
        state.changes.extend(entries);
        Ok(())
    }
}

/// The checkpoint thread: writes each handed-over set of changes to redb durably, then
/// retires the log that held them (`wal::retire`). Owns the database; closes it when the
/// writer is done.
fn checkpoint_loop(
    db: Database,
    file: &Path,
    dir: &Path,
    failure: &Failure,
    to_apply: mpsc::Receiver<(Changes, PathBuf)>,
) {
    for (changes, log) in to_apply {
        if failure.get().is_some() {
            continue;
        }
        match apply(&db, file, changes) {
            Ok(()) => {
                // A log left behind is only replayed again (same final state) at the next open.
                if let Err(e) = wal::retire(dir, &log) {
                    tracing::warn!(error = %e, log = %log.display(), "cannot retire a checkpointed log");
                }
            }
            Err(reason) => fail(failure, file, reason),
        }
    }
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

/// Writes jobs' last states to redb in one durable transaction. Used by checkpoints and by
/// the replay of leftover logs at open.
pub fn apply(
    db: &Database,
    file: &Path,
    changes: impl IntoIterator<Item = wal::Entry>,
) -> Result<(), Cause> {
    let shown = file.display();
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
            for (id, rec) in changes {
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
