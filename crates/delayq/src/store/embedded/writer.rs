//! The embedded store's single writer: a thread that owns the redb [`Database`] and turns queued
//! job changes into durable commits, many callers per fsync (group commit).
//!
//! Callers queue a [`Commit`] (while holding the engine lock, so the queue is in engine order)
//! and wait for its acknowledgement. The thread takes everything queued, writes it in one redb
//! write transaction with [`Durability::Immediate`], and only then acknowledges each commit and
//! publishes its events. It decides nothing about jobs; it does not read (the store loads at
//! open, before this thread starts).
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
use std::sync::{Arc, OnceLock, mpsc};
use tokio::sync::{broadcast, oneshot};

/// Job records: id → [`record::encode`]d job.
pub const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("jobs");
/// Store metadata: `format_version` → [`record::FORMAT_VERSION`].
pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub const FORMAT_VERSION_KEY: &str = "format_version";

/// Stop draining the queue into one transaction past this many changes, so one commit (and the
/// latency of everyone in it) stays bounded under a flood of batch pushes.
const MAX_CHANGES_PER_COMMIT: usize = 50_000;

/// One transition's changes, queued for the writer.
pub struct Commit {
    pub changes: Vec<Change>,
    /// Published only once `changes` are durable.
    pub events: Vec<StoreEvent>,
    /// Answered after the commit that contains `changes`.
    pub ack: oneshot::Sender<Result<(), StoreError>>,
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
        while let Ok(first) = self.queue.recv() {
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
            self.commit(batch);
        }
        tracing::debug!(file = %self.file.display(), "embedded store writer stopped");
    }

    fn commit(&self, batch: Vec<Commit>) {
        let mut changes = Vec::new();
        let mut waiting = Vec::with_capacity(batch.len());
        for c in batch {
            changes.extend(c.changes);
            waiting.push((c.events, c.ack));
        }
        let result = match self.failure.get() {
            Some(reason) => Err(reason.clone()),
            None => catch_unwind(AssertUnwindSafe(|| self.write(changes)))
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
                    let _ = ack.send(Ok(()));
                }
                Err(reason) => {
                    let _ = ack.send(Err(failed_error(reason)));
                }
            }
        }
    }

    /// Writes the changes in one transaction. Only the last change of each id matters, so a job
    /// pushed and finished within one batch costs nothing on disk.
    fn write(&self, changes: Vec<Change>) -> Result<(), String> {
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
        tx.set_durability(Durability::Immediate)
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
