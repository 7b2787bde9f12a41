//! The restore: puts back into a store every journaled job it lost. Insert-if-absent: each
//! job is restored with [`Store::restore_batch`], so a job still in the store is left as it is
//! ([`StoreError::Exists`] counts as `already_present`), and running it twice, or on a store
//! that lost nothing, changes nothing.
//!
//! What comes back, from each row (job.rs's rules; the timer's moves were never written):
//! - delayed and ready jobs as pushed, at their due time (a delayed one stays delayed until
//!   then, never early);
//! - a reserved job as its reservation's expiry at its deadline would have left it
//!   ([`job::after_delivery_failed`] at `reserved_until`): ready from the deadline on, delayed
//!   by its backoff, or dead when out of attempts;
//! - dead jobs dead (restored, then buried);
//! - finished, deleted and skipped jobs never.
//!
//! Recurring schedules and topics' flow control settings come back the same way, when the
//! whole journal is restored (not one job by id): each schedule the store lacks, as the
//! journal last saw it (its spec, next and last tick), and each topic's settings where the
//! store keeps none. A fire's jobs and the schedule's new place are journaled together, so a
//! restored schedule neither fires a tick again whose job the journal has, nor skips one.
//!
//! Overdue jobs (due before the restore began: ready jobs, delayed ones whose time passed,
//! reservations whose deadline passed) fire at once with [`Overdue::Fire`]; with
//! [`Overdue::Skip`] those the store lost are left out and marked `skipped` in the journal,
//! so no later restore brings them back. Each job comes back with its attempts
//! (`Store::restore_batch`).

use super::row::{JobRow, Op, RowState};
use super::{Journal, JournalError};
use crate::job::{self, Job, JobId, JobSpec, JobState, UnixMillis};
use crate::store::{PushOutcome, SettingsChange, Store, StoreError};

/// Rows read from the journal per query, and jobs pushed per call.
const PAGE: usize = 1_000;

/// What to do with jobs whose due time passed before the restore began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overdue {
    /// Put them back ready: they fire at once.
    Fire,
    /// Leave them out, and mark them skipped in the journal.
    Skip,
}

#[derive(Debug, Clone)]
pub struct RestoreOptions {
    pub overdue: Overdue,
    /// Only this job.
    pub id: Option<JobId>,
}

/// What a restore did, job by job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RestoreCounts {
    /// Put back into the store.
    pub restored: u64,
    /// Still in the store: left alone.
    pub already_present: u64,
    /// Overdue and left out (`overdue: skip`, now or by an earlier restore).
    pub skipped_overdue: u64,
    /// Finished or deleted: never restored.
    pub skipped_finished: u64,
    /// Recurring schedules put back into the store.
    #[serde(default)]
    pub schedules_restored: u64,
    /// Recurring schedules still in the store: left alone.
    #[serde(default)]
    pub schedules_already_present: u64,
    /// Topics whose flow control settings were put back.
    #[serde(default)]
    pub settings_restored: u64,
    /// Topics that still had settings in the store: left alone.
    #[serde(default)]
    pub settings_already_present: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    #[error("a restore is already running")]
    Running,
    #[error("the journal has no job with this id")]
    NotFound,
    #[error("{0}")]
    Journal(#[from] JournalError),
    #[error("the journal could not be brought up to date: {0}")]
    Flush(String),
    #[error("{0}")]
    Store(StoreError),
    #[error("the restore stopped: {0}")]
    Stopped(String),
}

/// What to do with one row.
enum Plan {
    Ended,
    Skipped,
    /// Restore this spec with its attempts; bury it after when `dead`.
    Push {
        spec: JobSpec,
        attempts: u32,
        dead: bool,
        overdue: bool,
    },
}

/// The job a row stands for, as it should be back in a store at `now`.
fn plan(row: JobRow, now: UnixMillis) -> Plan {
    let state = match row.state {
        RowState::Finished | RowState::Deleted => return Plan::Ended,
        RowState::Skipped => return Plan::Skipped,
        RowState::Live(s) => s,
    };
    let mut spec = row.spec;
    let state = match state {
        JobState::Reserved => {
            let deadline = row.reserved_until.unwrap_or(now);
            let (state, run_at) = job::after_delivery_failed(&spec, row.attempts, None, deadline);
            spec.run_at = run_at;
            state
        }
        s => s,
    };
    let dead = state == JobState::Dead;
    Plan::Push {
        overdue: !dead && spec.run_at < now,
        spec,
        attempts: row.attempts,
        dead,
    }
}

impl Journal {
    /// Puts back into `store` the journaled jobs it lacks (all, or `options.id`), as of `now`.
    /// Refused with [`RestoreError::Running`] while another restore runs, on this delayq or on
    /// any other sharing the journal (a lock in the database).
    pub async fn restore(
        &self,
        store: &dyn Store,
        options: RestoreOptions,
        now: UnixMillis,
    ) -> Result<RestoreCounts, RestoreError> {
        let _one = self
            .inner
            .restoring
            .try_lock()
            .map_err(|_| RestoreError::Running)?;
        // Across every delayq sharing the journal, too.
        let Some(lock) = self.inner.db.try_restore_lock().await? else {
            return Err(RestoreError::Running);
        };
        let result = self.restore_locked(store, options, now).await;
        lock.release().await;
        result
    }

    async fn restore_locked(
        &self,
        store: &dyn Store,
        options: RestoreOptions,
        now: UnixMillis,
    ) -> Result<RestoreCounts, RestoreError> {
        self.flush().await.map_err(RestoreError::Flush)?;
        let mut counts = RestoreCounts::default();
        if options.id.is_none() {
            // Before the jobs: a paused or limited topic's restored jobs are held back at once.
            self.restore_settings(store, now, &mut counts).await?;
        }
        let only = options.id.as_ref().map(|id| id.as_str());
        let mut after: Option<String> = None;
        loop {
            let rows = self.inner.db.rows(after.as_deref(), only, PAGE).await?;
            if only.is_some() && rows.is_empty() {
                return Err(RestoreError::NotFound);
            }
            let Some(last) = rows.last() else { break };
            after = Some(last.spec.id.as_str().to_string());
            let full = rows.len() == PAGE;
            self.restore_page(store, rows, options.overdue, now, &mut counts)
                .await?;
            if !full || only.is_some() {
                break;
            }
        }
        if options.id.is_none() {
            // After the jobs: an `overlap: skip` schedule finds its last tick's job back.
            self.restore_schedules(store, &mut counts).await?;
        }
        self.flush().await.map_err(RestoreError::Flush)?;
        tracing::info!(?counts, "journal: restore done");
        Ok(counts)
    }

    /// Puts back every journaled topic's flow control settings into a store that keeps
    /// none for the topic (a topic whose settings are the defaults is left out: there is
    /// nothing to put back).
    async fn restore_settings(
        &self,
        store: &dyn Store,
        now: UnixMillis,
        counts: &mut RestoreCounts,
    ) -> Result<(), RestoreError> {
        let mut after: Option<String> = None;
        loop {
            let rows = self.inner.db.topic_settings(after.as_deref(), PAGE).await?;
            let full = rows.len() == PAGE;
            after = rows.last().map(|(t, _)| t.as_str().to_string());
            for (topic, settings) in rows {
                if settings.is_default() {
                    continue;
                }
                let current = store.settings(&topic).await.map_err(RestoreError::Store)?;
                if !current.is_default() {
                    counts.settings_already_present += 1;
                    continue;
                }
                let change = SettingsChange {
                    paused: Some(settings.paused),
                    rate_micros: Some(settings.rate_micros),
                    burst: Some(settings.burst),
                    max_in_flight: Some(settings.max_in_flight),
                };
                store
                    .set_settings(&topic, change, now)
                    .await
                    .map_err(RestoreError::Store)?;
                counts.settings_restored += 1;
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// Puts back every journaled schedule the store lacks, as the journal last saw it: its
    /// spec, next tick and last tick (the version is the store's). Insert-if-absent
    /// (`Store::put_schedule` expecting version 0): a schedule still in the store is left as
    /// it is. Its next tick may have passed: the firing task then handles the missed ticks
    /// by its catch-up policy, as after any outage.
    async fn restore_schedules(
        &self,
        store: &dyn Store,
        counts: &mut RestoreCounts,
    ) -> Result<(), RestoreError> {
        let mut after: Option<String> = None;
        loop {
            let rows = self.inner.db.schedules(after.as_deref(), PAGE).await?;
            let full = rows.len() == PAGE;
            after = rows.last().map(|sc| sc.spec.id.as_str().to_string());
            for sc in rows {
                match store.put_schedule(&sc, Some(0)).await {
                    Ok(_) => counts.schedules_restored += 1,
                    Err(StoreError::Exists) => counts.schedules_already_present += 1,
                    Err(e) => return Err(RestoreError::Store(e)),
                }
            }
            if !full {
                return Ok(());
            }
        }
    }

    async fn restore_page(
        &self,
        store: &dyn Store,
        rows: Vec<JobRow>,
        overdue: Overdue,
        now: UnixMillis,
        counts: &mut RestoreCounts,
    ) -> Result<(), RestoreError> {
        let mut push = Vec::new();
        let mut dead = Vec::new();
        let mut skipped = Vec::new();
        for row in rows {
            match plan(row, now) {
                Plan::Ended => counts.skipped_finished += 1,
                Plan::Skipped => counts.skipped_overdue += 1,
                Plan::Push {
                    overdue: true,
                    spec,
                    ..
                } if overdue == Overdue::Skip => {
                    // Only a job the store lost is skipped; one it still has is left alone.
                    match store.get(&spec.id).await {
                        Ok(_) => counts.already_present += 1,
                        Err(StoreError::NotFound) => skipped.push(spec.id),
                        Err(e) => return Err(RestoreError::Store(e)),
                    }
                }
                Plan::Push {
                    spec,
                    attempts,
                    dead: d,
                    ..
                } => {
                    dead.push(d);
                    push.push(Job {
                        state: spec.initial_state(now),
                        spec,
                        attempts,
                        reserved_until: None,
                        seq: 0,
                    });
                }
            }
        }
        if !skipped.is_empty() {
            counts.skipped_overdue += skipped.len() as u64;
            let ops = skipped
                .into_iter()
                .map(|id| Op::End {
                    id,
                    from: None,
                    to: RowState::Skipped,
                    at: now,
                })
                .collect();
            self.inner.writer.enqueue(ops, false);
        }
        if push.is_empty() {
            return Ok(());
        }
        let ids: Vec<JobId> = push.iter().map(|j| j.spec.id.clone()).collect();
        let out = store
            .restore_batch(&push, now)
            .await
            .map_err(RestoreError::Store)?;
        for ((id, result), dead) in ids.iter().zip(out).zip(dead) {
            match result {
                Ok(PushOutcome::Created) | Ok(PushOutcome::Replaced(_)) => {
                    counts.restored += 1;
                    if dead {
                        store
                            .bury(id, None, now)
                            .await
                            .map_err(RestoreError::Store)?;
                    }
                }
                Err(StoreError::Exists) => counts.already_present += 1,
                Err(e) => return Err(RestoreError::Store(e)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Topic;

    fn row(state: RowState, run_at: UnixMillis) -> JobRow {
        let spec = JobSpec::new(
            Topic::parse("t").unwrap(),
            JobId::parse("a").unwrap(),
            "b",
            run_at,
        );
        JobRow {
            spec,
            state,
            attempts: 1,
            reserved_until: None,
            seq: 0,
            changed_at: 0,
        }
    }

    #[test]
    fn a_reservation_comes_back_as_its_expiry_at_the_deadline_would_leave_it() {
        let mut r = row(RowState::Live(JobState::Reserved), 100);
        r.reserved_until = Some(5_000);
        let Plan::Push {
            spec,
            dead,
            overdue,
            ..
        } = plan(r.clone(), 1_000)
        else {
            panic!("not pushed")
        };
        assert_eq!((spec.run_at, dead, overdue), (5_000, false, false));
        r.spec.backoff_ms = vec![10_000];
        let Plan::Push { spec, .. } = plan(r.clone(), 1_000) else {
            panic!()
        };
        assert_eq!(spec.run_at, 15_000, "its backoff after the deadline");
        r.spec.max_attempts = 1;
        let Plan::Push { dead, overdue, .. } = plan(r, 1_000) else {
            panic!()
        };
        assert!(dead && !overdue, "out of attempts: dead, never overdue");
    }

    #[test]
    fn ended_rows_never_come_back_and_past_due_ones_are_overdue() {
        assert!(matches!(plan(row(RowState::Finished, 0), 10), Plan::Ended));
        assert!(matches!(plan(row(RowState::Deleted, 0), 10), Plan::Ended));
        assert!(matches!(plan(row(RowState::Skipped, 0), 10), Plan::Skipped));
        let ready = plan(row(RowState::Live(JobState::Ready), 5), 10);
        assert!(matches!(ready, Plan::Push { overdue: true, .. }));
        let later = plan(row(RowState::Live(JobState::Delayed), 50), 10);
        assert!(matches!(later, Plan::Push { overdue: false, .. }));
    }
}
