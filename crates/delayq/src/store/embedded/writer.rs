//! The embedded store's single writer: a thread that owns the redb [`Database`] and turns queued
//! job changes into durable commits, many callers per fsync (group commit).
//!
//! Callers queue a [`Commit`] (while holding the engine lock, so the queue is in engine order)
//! and wait for its acknowledgement. The thread takes everything queued, writes it in one redb
//! write transaction with [`Durability::Immediate`], and only then acknowledges each commit and
//! publishes its events. It decides nothing about jobs; it does not read (the store loads at
//! open, before this thread starts).
//!
//! **Lazy commits** (the timer's passes: promotions and TTR expiries, which a restart redoes by
//! itself) have no acknowledgement and no events to hold back. A batch of only lazy commits is
//! written with [`Durability::None`]: no fsync; redb makes it durable with the next
//! [`Durability::Immediate`] commit, which every acknowledged transition is. So an
//! acknowledged transition still never depends on an unwritten one, and a crash loses at most
//! timer work that is redone. A lazy commit stays without an fsync for at most [`LAZY_WINDOW`]
//! (then the thread makes an empty durable commit); closing the database (redb, when this
//! thread ends) makes a pending lazy commit durable too, so a graceful stop leaves nothing to
//! redo (`embedded_store.rs` checks that).
//!
//! After a failed commit the thread never writes again: later commits may depend on the lost
//! one (a finish whose push was not written, or a push whose earlier removal was not), so it
//! refuses them all and records why in [`Failure`]; the store then refuses every request until
//! a restart reloads the last committed state.

use super::record;
use crate::job::{Job, JobId};
use crate::store::memory::Change;
use crate::store::{StoreError, StoreEvent};
use redb::{Database, Durability, TableDefinition};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
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

/// Stop draining the queue into one transaction past this many changes, so one commit (and the
/// latency of everyone in it) stays bounded under a flood of batch pushes.
const MAX_CHANGES_PER_COMMIT: usize = 50_000;

/// Longest a lazy commit goes without a durable commit after it (see the module docs).
const LAZY_WINDOW: Duration = Duration::from_secs(1);

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

/// Set once, by the writer, when a commit fails: the reason every later request is refused
/// with.
pub type Failure = Arc<OnceLock<String>>;

pub struct Writer {
    pub db: Database,
    pub file: PathBuf,
    pub queue: mpsc::Receiver<Commit>,
    pub events: broadcast::Sender<StoreEvent>,
    pub failure: Failure,
    /// Makes the next commit fail as if the disk had refused it (tests of the failure path).
    pub inject_failure: Arc<AtomicBool>,
}

impl Writer {
    /// Runs until every sender is dropped and the queue is empty, then closes the database
    /// (releasing its lock).
    pub fn run(self) {
        // Since when lazy commits have been written without an fsync (None: everything
        // written is durable).
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
                    // Lazy commits have waited long enough: an empty durable commit keeps them.
                    // (On failure the store has stopped; nothing more is waited for.)
                    self.commit(Vec::new(), true);
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
            if self.commit(batch, durable) {
                lazy_since = if durable {
                    None
                } else {
                    lazy_since.or_else(|| Some(Instant::now()))
                };
            }
        }
        tracing::debug!(file = %self.file.display(), "embedded store writer stopped");
    }

    /// Writes a batch, with an fsync if `durable`; answers and publishes. Returns whether it
    /// was written.
    fn commit(&self, batch: Vec<Commit>, durable: bool) -> bool {
        let mut changes = Vec::new();
        let mut waiting = Vec::with_capacity(batch.len());
        for c in batch {
            changes.extend(c.changes);
            waiting.push((c.events, c.ack));
        }
        let result = match self.failure.get() {
            Some(reason) => Err(reason.clone()),
            None => catch_unwind(AssertUnwindSafe(|| self.write(changes, durable)))
                .unwrap_or_else(|_| Err("redb panicked while writing (damaged file?)".into()))
                .inspect_err(|reason| {
                    tracing::error!(
                        file = %self.file.display(),
                        %reason,
                        "embedded store commit failed; refusing all further requests"
                    );
                    let _ = self.failure.set(reason.clone());
                }),
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

    /// Writes the changes in one transaction, fsynced if `durable`. Only the last change of
    /// each id matters, so a job pushed and finished within one batch costs nothing on disk.
    fn write(&self, changes: Vec<Change>, durable: bool) -> Result<(), String> {
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
        let file = self.file.display();
        let mut tx = self
            .db
            .begin_write()
            .map_err(|e| format!("cannot begin a write transaction on {file}: {e}"))?;
        tx.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        })
        .map_err(|e| format!("cannot set durability on {file}: {e}"))?;
        {
            let mut table = tx
                .open_table(JOBS)
                .map_err(|e| format!("cannot open the jobs table of {file}: {e}"))?;
            for (id, job) in last {
                let written = match job {
                    Some(j) => table
                        .insert(id.as_str(), record::encode(j).as_slice())
                        .map(drop),
                    None => table.remove(id.as_str()).map(drop),
                };
                written.map_err(|e| format!("cannot write job {id:?} to {file}: {e}"))?;
            }
        }
        tx.commit()
            .map_err(|e| format!("commit to {file} failed: {e}"))
    }
}

/// The error of every request after a failed commit.
pub fn failed_error(reason: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "the embedded store stopped after a failed commit ({reason}); the last acknowledged \
         changes are on disk, later ones may not be: restart delayq to reload them"
    ))
}
