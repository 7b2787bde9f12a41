//! The embedded store's online backup (`POST /v1/backup`, `delayq backup`): a copy of the
//! store, made while it serves, that `delayq serve --data-dir <copy>` opens with every change
//! acknowledged before the backup was asked for.
//!
//! **How.** The request queues a commit with no changes behind every commit already queued
//! (`group_commit.rs`), so it is written after all of them; every change whose answer has been
//! sent is by then in a log or in redb. Right after that batch the writer rotates the log (a
//! checkpoint of everything logged so far, due or not) and hands the backup to the checkpoint
//! thread behind it. When the checkpoint thread reaches it, redb holds every checkpoint before
//! it, so a read transaction taken then is the state the copy must have: the checkpoint thread
//! starts a backup thread with that read transaction and goes on. The backup thread copies the
//! snapshot's tables into a new redb file (`delayq.redb.partial`, renamed to `delayq.redb`
//! once committed and synced), while checkpoints go on: redb keeps the pages a read
//! transaction sees until it ends.
//!
//! **Why not under the engine lock.** A copy of the engine's state would be exact too, but it
//! is taken under the lock every request needs: with a million jobs, cloning them takes far
//! longer than the 100 ms a request may be held up. Here no request waits for the copy: the
//! writer's extra work is one log rotation (a file rename and a header), and the copy runs
//! on its own thread from a snapshot.
//!
//! With a cold tier (`cold.rs`), the checkpoint thread takes a snapshot of it beside the read
//! transaction: it writes the tier only in checkpoints, so the two match. The backup thread
//! bulk-loads the snapshot into a new tier (`cold.partial`, renamed to `cold` before the redb
//! file gets its name).
//!
//! What it does not copy: the write-ahead logs (the copy is a checkpoint, so it needs none),
//! lazy commits queued after the request (the timer's promotions and expiries, which a start
//! on the copy redoes), and anything of the journal (its database has its own backups).

use super::cold::{COLD_DIR, ColdSnapshot, ColdStore};
use super::group_commit::{JOBS, META, SCHEDULES};
use super::{DB_FILE_NAME, record};
use crate::store::{BackupError, BackupReport, Cause};
use redb::backends::FileBackend;
use redb::{
    Database, Durability, ReadTransaction, ReadableDatabase, ReadableTable, TableError, TableHandle,
};
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use tokio::sync::oneshot;

/// The copy's file while it is written; renamed to [`DB_FILE_NAME`] once it is complete, so a
/// backup interrupted by a crash is never taken for a data directory.
pub const PARTIAL_FILE_NAME: &str = "delayq.redb.partial";

/// The copy of the cold tier while it is written; renamed to [`COLD_DIR`] once complete.
const PARTIAL_COLD_DIR: &str = "cold.partial";

/// Rows copied between two looks at whether the store is stopping.
const CANCEL_CHECK_EVERY: u64 = 4096;

/// A backup on its way to the checkpoint thread: the file to write, and where to answer.
pub struct Request {
    file: PathBuf,
    done: oneshot::Sender<Result<BackupReport, Cause>>,
}

impl Request {
    /// A backup into `file` (which must not exist), and the receiver of its outcome.
    pub fn new(file: PathBuf) -> (Request, oneshot::Receiver<Result<BackupReport, Cause>>) {
        let (done, rx) = oneshot::channel();
        (Request { file, done }, rx)
    }

    /// Answers that the backup was not made, and why.
    pub fn refuse(self, reason: Cause) {
        let _ = self.done.send(Err(reason));
    }
}

/// The backup threads of one store, stopped together when the store stops.
#[derive(Default)]
pub struct Running {
    cancel: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Running {
    /// Starts copying `db` and the cold tier as they are now (a read transaction, a snapshot)
    /// into the request's file and a tier beside it, in a thread of its own. `file` is the
    /// store's redb file, for messages.
    pub fn start(&mut self, db: &Database, cold: Option<&ColdStore>, file: &Path, req: Request) {
        self.threads.retain(|t| !t.is_finished());
        let snapshot = match db.begin_read() {
            Ok(tx) => tx,
            Err(e) => {
                let reason = Cause::with_source(
                    format_args!("cannot begin a read transaction on {}", file.display()),
                    e,
                );
                return req.refuse(reason);
            }
        };
        let cold = cold.map(ColdStore::snapshot);
        let cancel = self.cancel.clone();
        let spawned = std::thread::Builder::new()
            .name("delayq-embedded-backup".into())
            .spawn(move || {
                let Request { file, done } = req;
                let copied = copy(snapshot, &file, &cancel).and_then(|mut report| {
                    if let Some(cold) = cold {
                        let (jobs, bytes) = copy_cold(&cold, &file, &cancel)?;
                        report.jobs += jobs;
                        report.bytes += bytes;
                    }
                    Ok(report)
                });
                if copied.is_err() {
                    let _ = std::fs::remove_file(&file);
                    let _ = std::fs::remove_dir_all(partial_cold(&file));
                }
                let _ = done.send(copied);
            });
        match spawned {
            Ok(t) => self.threads.push(t),
            // The closure, and the request in it, are dropped: its waiter hears that much.
            Err(e) => tracing::error!(error = %e, "cannot start a backup thread"),
        }
    }

    /// Stops the backups still copying and waits for them (the store is closing).
    pub fn stop(self) {
        self.cancel.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Writes the tables of `snapshot` into a new redb file `to`, in one durable transaction.
fn copy(snapshot: ReadTransaction, to: &Path, cancel: &AtomicBool) -> Result<BackupReport, Cause> {
    let shown = to.display();
    let out = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(to)
        .map_err(|e| Cause::with_source(format_args!("cannot create {shown}"), e))?;
    let backend = FileBackend::new(out)
        .map_err(|e| Cause::with_source(format_args!("cannot create {shown}"), e))?;
    let db = Database::builder()
        .create_with_backend(backend)
        .map_err(|e| Cause::with_source(format_args!("cannot create {shown}"), e))?;
    let mut tx = db
        .begin_write()
        .map_err(|e| Cause::with_source(format_args!("cannot write {shown}"), e))?;
    tx.set_durability(Durability::Immediate)
        .map_err(|e| Cause::with_source(format_args!("cannot write {shown}"), e))?;
    let mut report = BackupReport::default();
    let mut rows = 0u64;
    let mut step = |key: &str| {
        rows += 1;
        if rows.is_multiple_of(CANCEL_CHECK_EVERY) && cancel.load(Ordering::SeqCst) {
            return Err(Cause::from(
                "the store stopped before the backup was complete",
            ));
        }
        Ok::<_, Cause>(key.to_string())
    };
    {
        let failed = |what: &str, e: &dyn std::fmt::Display| -> Cause {
            format!("cannot copy {what} into {shown}: {e}").into()
        };
        let meta_in = snapshot
            .open_table(META)
            .map_err(|e| failed("the meta table", &e))?;
        let mut meta_out = tx
            .open_table(META)
            .map_err(|e| failed("the meta table", &e))?;
        for row in meta_in.iter().map_err(|e| failed("the meta table", &e))? {
            let (k, v) = row.map_err(|e| failed("the meta table", &e))?;
            meta_out
                .insert(k.value(), v.value())
                .map_err(|e| failed("the meta table", &e))?;
        }
        for (table, is_jobs) in [(JOBS, true), (SCHEDULES, false)] {
            let name = table.name().to_string();
            let from = match snapshot.open_table(table) {
                Ok(t) => t,
                // A store written before schedules has no such table: neither has its copy.
                Err(TableError::TableDoesNotExist(_)) => continue,
                Err(e) => return Err(failed(&name, &e)),
            };
            let mut into = tx.open_table(table).map_err(|e| failed(&name, &e))?;
            for row in from.iter().map_err(|e| failed(&name, &e))? {
                let (k, v) = row.map_err(|e| failed(&name, &e))?;
                let key = step(k.value())?;
                into.insert(key.as_str(), v.value())
                    .map_err(|e| failed(&name, &e))?;
                match is_jobs {
                    true if record::settings_topic(&key).is_none() => report.jobs += 1,
                    true => {}
                    false => report.schedules += 1,
                }
            }
        }
    }
    drop(snapshot);
    tx.commit()
        .map_err(|e| Cause::with_source(format_args!("cannot commit {shown}"), e))?;
    drop(db);
    report.bytes = std::fs::metadata(to).map(|m| m.len()).unwrap_or(0);
    Ok(report)
}

/// Where the cold tier's copy is written beside the redb file `partial`.
fn partial_cold(partial: &Path) -> PathBuf {
    partial.with_file_name(PARTIAL_COLD_DIR)
}

/// Copies the cold tier's snapshot beside the redb file `partial`. Returns how many jobs it
/// holds and its size.
fn copy_cold(
    cold: &ColdSnapshot,
    partial: &Path,
    cancel: &AtomicBool,
) -> Result<(u64, u64), Cause> {
    let to = partial_cold(partial);
    let jobs = cold
        .copy_to(&to, &|| !cancel.load(Ordering::SeqCst))
        .map_err(|e| {
            Cause::new(format!(
                "cannot copy the cold tier into {}: {e}",
                to.display()
            ))
        })?;
    Ok((jobs, bytes_under(&to)))
}

/// The size of the files under `dir` (what could be read of it).
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

/// Makes `dir` ready to take a backup: creates it (and its missing parents), or checks that
/// it is an empty directory. Returns the file the copy is written to first.
pub fn prepare(dir: &Path) -> Result<PathBuf, BackupError> {
    let shown = dir.display();
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(BackupError::Target(format!(
                    "{shown} is not empty: a backup goes into a new or empty directory"
                )));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| {
                BackupError::Target(format!("cannot create the directory {shown}: {e}"))
            })?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
            return Err(BackupError::Target(format!("{shown} is not a directory")));
        }
        Err(e) => {
            return Err(BackupError::Target(format!("cannot read {shown}: {e}")));
        }
    }
    Ok(dir.join(PARTIAL_FILE_NAME))
}

/// Gives the complete copy its name (the cold tier's first, if any: a directory without
/// `delayq.redb` is no data directory) and makes the names durable.
pub fn finish(dir: &Path, partial: &Path) -> Result<(), Cause> {
    let cold = partial_cold(partial);
    if cold.exists() {
        std::fs::rename(&cold, dir.join(COLD_DIR))
            .map_err(|e| Cause::with_source(format_args!("cannot rename {}", cold.display()), e))?;
    }
    let done = dir.join(DB_FILE_NAME);
    std::fs::rename(partial, &done)
        .map_err(|e| Cause::with_source(format_args!("cannot rename {}", partial.display()), e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Cause::with_source(format_args!("cannot sync {}", dir.display()), e))
}
