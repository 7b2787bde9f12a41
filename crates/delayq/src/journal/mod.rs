//! The recovery journal (`--journal`): a copy of every job and every acknowledged state
//! change in PostgreSQL or MySQL/MariaDB, and of every recurring schedule and topic's flow
//! control settings, from which [`Journal::restore`] puts back what a store lost (a Redis
//! restart without persistence, a failover, a FLUSHALL, a lost data dir). docs/journal.md
//! describes it for operators.
//!
//! Written once over [`Store`], for every store: [`Journal`] is a [`StoreHook`], so
//! [`Journaled`] (`Hooked<Journal>`) sees each call and its answer. From each answer it
//! makes [`row::Op`]s (the job's row as it now is, or its end) and queues them to the single
//! writer (`writer.rs`), which writes everything queued in one transaction. In
//! [`JournalMode::Sync`] the call's answer waits for that write ([`StoreHook::settle`]), and
//! while the journal cannot be written every changing call is refused; in
//! [`JournalMode::Async`] nothing waits and nothing is refused.
//!
//! Not seen by hooks, and not written: the timer's moves (a delayed job falling due, a
//! reservation running out). The restore recomputes them from the recorded due time and
//! reservation deadline with job.rs's rules, so they need no row.
//!
//! Modules: `row.rs` what is written, `writer.rs` group commit, `restore.rs` the restore;
//! the database: `connect.rs` the URL, the pool and opening, `schema.rs` the tables and
//! migrations, `sql.rs` what both dialects share, `postgres.rs` and `mysql.rs` how each
//! writes a batch, `lock.rs` the restore lock.

mod connect;
mod lock;
mod mysql;
mod postgres;
pub mod restore;
pub mod row;
pub mod schema;
mod sql;
mod writer;

pub use connect::check_url;
pub use restore::{Overdue, RestoreCounts, RestoreError, RestoreOptions};
pub use sql::{Event, HISTORY_LIMIT};
pub use writer::LagGauges;

use crate::clock::Clock;
use crate::job::{JobId, JobSpec, JobState, UnixMillis};
use crate::schedule::ScheduleFire;
use crate::store::hook::{Call, Hooked, Reply, StoreHook};
use crate::store::{CallKind, Cause, FireOutcome, PushOutcome, StoreError, StoreResult};
use connect::Db;
use row::{Fired, JobRow, Moved, Op, RowState};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use writer::Writer;

/// A store whose acknowledged transitions are journaled: `Journaled::new(store, journal)`.
pub type Journaled = Hooked<Journal>;

/// Whether a call's answer waits for its journal rows (`--journal-mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum JournalMode {
    /// Every acknowledged transition is in the journal before its answer.
    #[default]
    Sync,
    /// Answers do not wait; the journal follows, its lag a metric.
    Async,
}

impl JournalMode {
    pub fn parse(s: &str) -> Option<JournalMode> {
        match s {
            "sync" => Some(JournalMode::Sync),
            "async" => Some(JournalMode::Async),
            _ => None,
        }
    }
}

impl fmt::Display for JournalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JournalMode::Sync => "sync",
            JournalMode::Async => "async",
        })
    }
}

/// Why the journal could not be opened or read. Each says `journal` (the setting) first. A
/// database's error is kept typed in the [`Cause`] (`Cause::downcast_ref::<sqlx::Error>()`),
/// its text already in the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// Not a journal URL (its scheme or its form). Only a message: sqlx's parse error may
    /// quote the URL, password included.
    #[error("journal: {0}")]
    Url(String),
    /// No connection: the URL without its credentials, and the database's error.
    #[error("journal: cannot connect to the database at {0}")]
    Unreachable(Cause),
    /// The database was migrated by a newer delayq.
    #[error(
        "journal: the database's journal schema is version {found}, newer than this delayq \
         knows ({supported}), and was left untouched; run a delayq at least as new as the one \
         that migrated it, or, to go back to this one, restore a backup of the database taken \
         before the upgrade (docs/upgrading.md)"
    )]
    NewerSchema { found: i64, supported: i64 },
    /// A statement failed: what was being done, and the database's error.
    #[error("journal: {0}")]
    Database(Cause),
    /// A row that does not read as a job or an event.
    #[error("journal: corrupt row: {0}")]
    Corrupt(Cause),
}

/// Begins the message of every call refused or failed because the journal cannot be
/// written (the API recognises it by this).
pub const UNWRITABLE: &str = "the journal (--journal) cannot be written";
/// What /v1 answers (503 `store_unavailable`) when the journal cannot be written: the
/// database's own error is logged, not sent.
pub const UNWRITABLE_ANSWER: &str = "the journal (--journal) cannot be written, so the change \
    is not acknowledged; if it was made, it is journaled once the journal is back. Retry with \
    the same id";

/// How often finished, deleted and skipped rows older than the retention are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

struct Inner {
    db: Db,
    mode: JournalMode,
    writer: Writer,
    clock: Arc<dyn Clock>,
    /// One restore at a time.
    restoring: tokio::sync::Mutex<()>,
}

/// The journal: a handle on its database and writer (cheap to clone), and the hook that
/// feeds it.
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

/// This process, as the events' `instance` column names it: host and process id.
fn instance_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "delayq".into());
    let name = format!("{host}:{}", std::process::id());
    name.chars().take(128).collect()
}

impl Journal {
    /// Connects to the journal at `url`, creates or migrates its tables, and starts its
    /// writer (which prunes ended rows older than `retention`). Must run in a tokio runtime.
    pub async fn open(
        url: &str,
        mode: JournalMode,
        retention: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Journal, JournalError> {
        let db = Db::open(url).await?;
        let inner = Arc::new(Inner {
            db: db.clone(),
            mode,
            writer: Writer::new(),
            clock,
            restoring: tokio::sync::Mutex::new(()),
        });
        let task = inner.clone();
        let instance = instance_name();
        // The writer lives as long as the runtime: it holds the journal it writes.
        tokio::spawn(async move { task.writer.run(task.db.clone(), instance).await });
        let clock = inner.clock.clone();
        // Pruning runs beside the writer, so a long delete never holds up a write.
        tokio::spawn(async move {
            let keep = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
            let mut every = tokio::time::interval(PRUNE_EVERY);
            loop {
                every.tick().await;
                match db.prune(clock.now().saturating_sub(keep)).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(rows = n, "journal: pruned ended jobs and old events"),
                    Err(e) => tracing::warn!(error = %e, "journal: pruning failed"),
                }
            }
        });
        Ok(Journal { inner })
    }

    pub fn mode(&self) -> JournalMode {
        self.inner.mode
    }

    /// The lag gauges, for the metrics.
    pub fn gauges(&self) -> LagGauges {
        self.inner.writer.gauges.clone()
    }

    /// Waits until everything queued so far is written (or a write of it failed).
    pub async fn flush(&self) -> Result<(), String> {
        match self.inner.writer.enqueue(Vec::new(), true) {
            Some(rx) => rx
                .await
                .unwrap_or_else(|_| Err("the journal writer stopped".into())),
            None => Ok(()),
        }
    }

    /// The journaled state changes of job `id`, oldest first (the latest
    /// [`HISTORY_LIMIT`]); empty when the journal has none (never pushed while journaled, or
    /// pruned).
    pub async fn history(&self, id: &JobId) -> Result<Vec<Event>, JournalError> {
        self.inner.db.history(id.as_str()).await
    }

    /// Closes the database connections (tests drop their database after).
    pub async fn close(&self) {
        self.inner.db.close().await;
    }
}

/// Whether a call changes jobs (and so is journaled, and refused while the journal is down in
/// `sync` mode), as its declaration says ([`CallKind`]). The timer's `tick` changes jobs too,
/// but only as job.rs's rules say from what is recorded, so it is neither journaled nor
/// refused.
fn changes(call: &Call<'_>) -> bool {
    match call.kind() {
        CallKind::Change => true,
        CallKind::Read | CallKind::Timer => false,
    }
}

/// The ops of a call's successful answer, at `at` where the call gives no time. The `match`
/// names every call, so a new one does not compile until it is decided here what it writes.
fn ops_of(reply: Reply<'_>, pushed: &[JobSpec], at: UnixMillis) -> Vec<Op> {
    let moved = |job: &crate::job::Job, from: Option<JobState>| Op::Move {
        moved: Moved::of_job(job, at),
        from,
    };
    let end = |id: &crate::job::JobId, from: JobState, to: RowState| Op::End {
        id: id.clone(),
        from: Some(from),
        to,
        at,
    };
    // A finish of a job no consumer held is a delete (job.rs).
    let finish_end = |from: JobState| {
        if from.finish_is_delivery_done() {
            RowState::Finished
        } else {
            RowState::Deleted
        }
    };
    match reply {
        Reply::PushBatch { now, out, .. } => pushed
            .iter()
            .zip(out)
            .filter_map(|(spec, item)| {
                let from = match item {
                    Ok(PushOutcome::Created) => None,
                    Ok(PushOutcome::Replaced(s)) => Some(*s),
                    Err(_) => return None,
                };
                Some(Op::Put {
                    row: JobRow::of_push(spec, now),
                    from,
                })
            })
            .collect(),
        // A restored job's row again, as it is back: its attempts, its due state.
        Reply::RestoreBatch { jobs, now, out } => jobs
            .iter()
            .zip(out)
            .filter(|(_, item)| item.is_ok())
            .map(|(job, _)| {
                let mut row = JobRow::of_push(&job.spec, now);
                row.attempts = job.attempts;
                Op::Put { row, from: None }
            })
            .collect(),
        Reply::Reserve { out, .. } => out
            .iter()
            .map(|j| moved(j, Some(JobState::Ready)))
            .collect(),
        Reply::Finish { id, out } => vec![end(id, *out, finish_end(*out))],
        Reply::FinishBatch { ids, out } => ids
            .iter()
            .zip(out)
            .filter_map(|(id, r)| r.as_ref().ok().map(|s| end(id, *s, finish_end(*s))))
            .collect(),
        Reply::Delete { id, out } => vec![end(id, *out, RowState::Deleted)],
        Reply::Release { out, .. } | Reply::Touch { out, .. } => {
            vec![moved(out, Some(JobState::Reserved))]
        }
        // A bury that sets a priority changes the spec: the whole row (as a reschedule).
        Reply::Bury {
            priority: Some(_),
            out,
            ..
        } => vec![Op::Put {
            row: JobRow::of_job(out, at),
            from: None,
        }],
        // From delayed, ready or dead: the row's own state says which.
        Reply::Bury { out, .. } | Reply::ReserveJob { out, .. } => vec![moved(out, None)],
        Reply::Kick { out, .. } => vec![moved(out, Some(JobState::Dead))],
        // A reschedule may change the body and priority: the whole row.
        Reply::Reschedule {
            out: (job, previous),
            ..
        } => vec![Op::Put {
            row: JobRow::of_job(job, at),
            from: Some(*previous),
        }],
        // The kicked jobs are ready from the kick's `now` on, as the store made them.
        Reply::KickTopic {
            topic, now, out, ..
        } if *out > 0 => vec![Op::KickTopic {
            queue: topic.clone(),
            n: *out,
            at: now,
        }],
        Reply::KickTopic { .. } => Vec::new(),
        // A topic's settings as they now are.
        Reply::SetSettings {
            topic, now, out, ..
        } => vec![Op::Settings {
            topic: topic.clone(),
            settings: *out,
            at: now,
        }],
        // Not changes (see `changes`): never asked for.
        Reply::Get { .. }
        | Reply::Stats { .. }
        | Reply::List { .. }
        | Reply::Schedule { .. }
        | Reply::Settings { .. }
        | Reply::Tick { .. }
        | Reply::Ping { .. }
        | Reply::GetSchedule { .. }
        | Reply::ListSchedules { .. }
        | Reply::DueSchedules { .. } => Vec::new(),
        // A schedule's jobs are jobs like any other: a row each; then the schedule's new
        // place, in the same batch (one transaction), so the journal holds either both or
        // neither: a restored schedule never fires a tick whose job the journal has, nor
        // skips one whose job it lacks.
        Reply::FireSchedule { fire, now, out } => fired_ops(fire, *out, now),
        // Each fire that went ahead as its own, all in the call's one batch.
        Reply::FireSchedules { fires, now, out } => fires
            .iter()
            .zip(out)
            .flat_map(|(fire, out)| fired_ops(fire, *out, now))
            .collect(),
        Reply::PutSchedule { out, .. } => vec![Op::PutSchedule {
            schedule: out.clone(),
            at,
        }],
        Reply::DeleteSchedule { id, .. } => vec![Op::DeleteSchedule { id: id.clone(), at }],
    }
}

/// The ops of one fire of a schedule: none when it was `Stale`.
fn fired_ops(fire: &ScheduleFire, out: FireOutcome, now: UnixMillis) -> Vec<Op> {
    if !matches!(out, FireOutcome::Fired { .. }) {
        return Vec::new();
    }
    fire.jobs
        .iter()
        .map(|spec| Op::Put {
            row: JobRow::of_push(spec, now),
            from: None,
        })
        .chain([Op::FireSchedule {
            fired: Fired {
                id: fire.id.clone(),
                version: fire.version + 1,
                next_tick: fire.next_tick,
                last_tick: fire.last_tick,
            },
            at: now,
        }])
        .collect()
}

impl StoreHook for Journal {
    const SEES_PUSHED_JOBS: bool = true;

    /// In `sync` mode, while the journal cannot be written, a changing call is refused before
    /// the store is asked: nothing is acknowledged without its journal row.
    fn before(&self, call: &Call<'_>) -> StoreResult<()> {
        let w = &self.inner.writer;
        if self.inner.mode == JournalMode::Sync && changes(call) && !w.healthy() {
            return Err(StoreError::Unavailable(
                format!("{}; nothing was changed", w.last_error()).into(),
            ));
        }
        Ok(())
    }

    fn settle(
        &self,
        call: &Call<'_>,
        result: Result<Reply<'_>, &StoreError>,
        pushed: &[JobSpec],
    ) -> impl Future<Output = StoreResult<()>> + Send + 'static {
        let ops = match result {
            Ok(reply) if changes(call) => ops_of(reply, pushed, self.inner.clock.now()),
            _ => Vec::new(),
        };
        let wait = self.inner.mode == JournalMode::Sync;
        let written = if ops.is_empty() {
            None
        } else {
            self.inner.writer.enqueue(ops, wait)
        };
        async move {
            let Some(rx) = written else { return Ok(()) };
            match rx.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(message)) => Err(StoreError::Unavailable(
                    format!("{message}; the change was made but is not yet journaled").into(),
                )),
                Err(_) => Err(StoreError::Unavailable(
                    "the journal (--journal) writer stopped".into(),
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Topic;
    use crate::schedule::ScheduleId;

    fn fire(id: &str, ticks: &[UnixMillis]) -> ScheduleFire {
        let sid = ScheduleId::parse(id).unwrap();
        ScheduleFire {
            jobs: ticks
                .iter()
                .map(|&t| JobSpec::new(Topic::parse("t").unwrap(), sid.job_id(t), "b", t))
                .collect(),
            id: sid,
            version: 3,
            next_tick: Some(9_000),
            last_tick: ticks.last().copied(),
        }
    }

    /// A batch of fires is journaled as each fire alone would be, in order, the stale ones
    /// left out.
    #[test]
    fn a_batch_of_fires_is_the_ops_of_each_fired_one() {
        let fires = [fire("a", &[1_000]), fire("b", &[1_000]), fire("c", &[])];
        let out = vec![
            FireOutcome::Fired {
                pushed: 1,
                existed: 0,
            },
            FireOutcome::Stale,
            FireOutcome::Fired {
                pushed: 0,
                existed: 0,
            },
        ];
        let batch = ops_of(
            Reply::FireSchedules {
                fires: &fires,
                now: 1_005,
                out: &out,
            },
            &[],
            1_006,
        );
        let alone: Vec<Op> = fires
            .iter()
            .zip(&out)
            .flat_map(|(fire, out)| {
                ops_of(
                    Reply::FireSchedule {
                        fire,
                        now: 1_005,
                        out,
                    },
                    &[],
                    1_006,
                )
            })
            .collect();
        // (`Op` has no `PartialEq`: its `Debug` shows every field.)
        assert_eq!(format!("{batch:?}"), format!("{alone:?}"));
        assert_eq!(batch.len(), 3, "a's job and move, c's move: {batch:?}");
    }
}
