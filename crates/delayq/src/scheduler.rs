//! The firing task of recurring schedules (docs/schedules.md), written once over `Store`: it
//! sleeps until the earliest next tick of the store's schedules (at most
//! [`MAX_SLEEP`], so a schedule another instance created or changed is seen within it; a
//! change made through this instance wakes it at once), reads the due ones
//! (`Store::due_schedules`), plans each one's handling (schedule.rs: catch-up and overlap) and
//! applies the plans with `Store::fire_schedules`, many per call, each fire a compare-and-set on
//! its schedule's version: when several instances handle the same tick, one fire moves the
//! schedule on and pushes the tick's job, and the others change nothing.
//!
//! Ticks fire ahead: the task reads the schedules due within [`FIRE_AHEAD_MS`] and pushes
//! each one's next tick up to that long before it, as a job delayed until the tick
//! (`Schedule::plan_ahead`), so that at a tick shared by many schedules the only work left is
//! the timer promoting stored jobs, in batches. Schedules with `overlap: skip` are handled at
//! their tick, as the skip is judged then.

use crate::clock::Clock;
use crate::job::{InvalidField, JobId, UnixMillis};
use crate::metrics::Metrics;
use crate::schedule::{FIRE_AHEAD_MS, FirePlan, Overlap, Recurrence, Rule, Schedule, ScheduleFire};
use crate::store::{FireOutcome, Store, StoreError};
use futures::{StreamExt, TryStreamExt};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The longest the task sleeps without looking at the store: how soon a schedule created or
/// changed on another instance is seen.
pub const MAX_SLEEP: Duration = Duration::from_millis(500);
/// Due schedules read per store call.
const BATCH: usize = 4_000;
/// Fires per `Store::fire_schedules` call: one engine transition and commit, or one round of
/// Lua calls per step on Redis, for this many schedules.
const FIRES_PER_CALL: usize = 500;
/// `fire_schedules` calls in flight at once: the embedded store commits them together, and
/// Redis answers them over one connection, so a minute's ticks are not one fsync or round trip
/// after another.
const CONCURRENT_CALLS: usize = 4;
/// Reads of previous ticks' jobs (`overlap: skip`) in flight at once.
const CONCURRENT_READS: usize = 256;
/// Parsed rules kept (a cron expression parsed once, not at every tick of every schedule);
/// past this many distinct rules the cache starts afresh.
const MAX_CACHED_RULES: usize = 10_000;
/// How long the task waits after a store error before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

pub struct Scheduler {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    wake: Notify,
    /// Each rule seen, parsed: schedules sharing a cron expression and zone (most do) share
    /// one parse.
    rules: Mutex<HashMap<Rule, Arc<Recurrence>>>,
    /// When the task looks at the store next: `UnixMillis::MAX` while it is looking (a change
    /// then wakes it again, as the pass may have read the store before it).
    asleep_until: AtomicU64,
}

impl Scheduler {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, metrics: Arc<Metrics>) -> Scheduler {
        Scheduler {
            store,
            clock,
            metrics,
            wake: Notify::new(),
            rules: Mutex::new(HashMap::new()),
            asleep_until: AtomicU64::new(UnixMillis::MAX),
        }
    }

    /// `rule`, parsed (from the cache when seen before); `None` if it does not parse. The
    /// dashboard's count of coming ticks and the schedules' API use it too.
    pub fn recurrence(&self, rule: &Rule) -> Option<Arc<Recurrence>> {
        self.checked(rule).ok()
    }

    /// `rule`, parsed (from the cache when seen before), or why it does not parse. A cron
    /// rule is parsed once; an interval (its anchor differs from one schedule to the next) is
    /// built each time, which costs nothing, and not kept.
    pub fn checked(&self, rule: &Rule) -> Result<Arc<Recurrence>, InvalidField> {
        if let Rule::Every { .. } = rule {
            return Ok(Arc::new(rule.recurrence()?));
        }
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = rules.get(rule) {
            return Ok(r.clone());
        }
        let parsed = Arc::new(rule.recurrence()?);
        if rules.len() >= MAX_CACHED_RULES {
            rules.clear();
        }
        rules.insert(rule.clone(), parsed.clone());
        Ok(parsed)
    }

    /// Makes the task look at the store now (a schedule was created or changed here).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// A schedule was created or changed here with this next tick (`None`: paused, or none
    /// left): wakes the task if it is asleep past that tick (and if it is not asleep, so that
    /// the pass under way is not the last look before the tick).
    pub fn changed(&self, next_tick: Option<UnixMillis>) {
        // It may fire ahead: from FIRE_AHEAD_MS before the tick.
        let from = next_tick.map(|t| t.saturating_sub(FIRE_AHEAD_MS));
        if from.is_some_and(|t| t < self.asleep_until.load(Ordering::SeqCst)) {
            self.wake();
        }
    }

    pub fn start(self: &Arc<Self>, stop: CancellationToken) -> JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                me.asleep_until.store(UnixMillis::MAX, Ordering::SeqCst);
                let sleep = match me.pass().await {
                    Ok(sleep) => sleep,
                    Err(e) => {
                        tracing::warn!(error = %e, "recurring schedules: store error");
                        RETRY_AFTER
                    }
                };
                let until = me.clock.now().saturating_add(sleep.as_millis() as u64);
                me.asleep_until.store(until, Ordering::SeqCst);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = me.wake.notified() => {}
                    _ = sleep_precisely(sleep) => {}
                }
            }
        })
    }

    /// Handles every schedule due now or within [`FIRE_AHEAD_MS`]; returns how long to sleep.
    async fn pass(&self) -> Result<Duration, StoreError> {
        loop {
            let now = self.clock.now();
            let due = self
                .store
                .due_schedules(now.saturating_add(FIRE_AHEAD_MS), BATCH)
                .await?;
            let full = due.due.len() >= BATCH;
            let (fired, wake) = self.handle(&due.due).await?;
            // A full batch of which nothing could be handled yet (schedules waiting for their
            // tick: `overlap: skip`, or one tick ahead already) is waited for: the schedules
            // listed after them are then handled late, at the latest at their tick.
            if full && fired > 0 {
                continue;
            }
            let next = due
                .next
                .map(|t| t.saturating_sub(FIRE_AHEAD_MS))
                .into_iter()
                .chain(wake)
                .min();
            let now = self.clock.now();
            let until = next.map_or(MAX_SLEEP, |t| Duration::from_millis(t.saturating_sub(now)));
            return Ok(until.min(MAX_SLEEP));
        }
    }

    /// Plans and fires the schedules listed due: [`FIRES_PER_CALL`] per
    /// `Store::fire_schedules`, [`CONCURRENT_CALLS`] calls at a time, all planned from one
    /// `now` (so schedules sharing a rule share its next-tick searches: `Recurrence`'s memo).
    /// Returns how many fired, and when the earliest of those not handled yet (waiting for
    /// their tick, or for their tick ahead to pass) is to be handled.
    async fn handle(&self, due: &[Schedule]) -> Result<(usize, Option<UnixMillis>), StoreError> {
        // One `now` for both: a skip schedule is asked about only when it is due at it.
        let now = self.clock.now();
        let overlapping = self.previous_jobs(due, now).await?;
        let mut fires = Vec::new();
        let mut plans = Vec::new();
        let mut wake: Option<UnixMillis> = None;
        for (sc, previous_exists) in due.iter().zip(overlapping) {
            let Some(rule) = self.recurrence(&sc.spec.rule) else {
                // Only checked rules are stored; one that no longer parses (a zone removed
                // from the tz database) is left as it is.
                tracing::warn!(schedule = %sc.spec.id, "recurring schedule's rule does not parse");
                continue;
            };
            let mut plan = sc.plan_ahead(&rule, now, previous_exists);
            if let Some(fire) = plan.fire.take() {
                fires.push(fire);
                plans.push(plan);
            } else if let Some(t) = sc.handle_at() {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        }
        let fired = fires.len();
        // Collected first: a stream over a lazy `map` of borrowed chunks is not `Send` enough
        // for the spawned task (rustc's higher-ranked closure limits).
        let calls: Vec<_> = fires
            .chunks(FIRES_PER_CALL)
            .zip(plans.chunks(FIRES_PER_CALL))
            .map(|(fires, plans)| self.fire(fires, plans, now))
            .collect();
        let mut running = futures::stream::iter(calls).buffer_unordered(CONCURRENT_CALLS);
        while running.try_next().await?.is_some() {}
        Ok((fired, wake))
    }

    /// Fires `fires` in one store call and counts what each fire's plan did.
    async fn fire(
        &self,
        fires: &[ScheduleFire],
        plans: &[FirePlan],
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        let out = self.store.fire_schedules(fires, now).await?;
        for (plan, outcome) in plans.iter().zip(out) {
            match outcome {
                FireOutcome::Fired { .. } => self.metrics.schedule_handled(
                    plan.caught_up,
                    plan.skipped_overlap,
                    plan.skipped_missed,
                ),
                // Another instance handled it, or it was changed meanwhile: the next pass
                // reads it again.
                FireOutcome::Stale => {}
            }
        }
        Ok(())
    }

    /// For each due schedule, whether the job of its last fired tick still exists: only asked
    /// of the store for schedules with `overlap: skip` whose tick came (`CONCURRENT_READS` at a
    /// time).
    async fn previous_jobs(
        &self,
        due: &[Schedule],
        now: UnixMillis,
    ) -> Result<Vec<bool>, StoreError> {
        let mut out = vec![false; due.len()];
        let asks: Vec<_> = due
            .iter()
            .enumerate()
            .filter_map(|(i, sc)| match (sc.spec.overlap, sc.last_tick) {
                (Overlap::Skip, Some(t)) if sc.is_due(now) => {
                    Some(self.exists(i, sc.spec.id.job_id(t)))
                }
                _ => None,
            })
            .collect();
        let mut answers = futures::stream::iter(asks).buffer_unordered(CONCURRENT_READS);
        while let Some((i, exists)) = answers.try_next().await? {
            out[i] = exists;
        }
        Ok(out)
    }

    /// Whether job `id` exists, with `i`.
    async fn exists(&self, i: usize, id: JobId) -> Result<(usize, bool), StoreError> {
        match self.store.get(&id).await {
            Ok(_) => Ok((i, true)),
            Err(StoreError::NotFound) => Ok((i, false)),
            Err(e) => Err(e),
        }
    }
}

/// Sleeps `d`; tokio's timer rounds up to its 1 ms ticks, which is precise enough for ticks
/// of whole seconds.
async fn sleep_precisely(d: Duration) {
    tokio::time::sleep(d).await;
}
