//! The firing task of recurring schedules (docs/schedules.md), written once over `Store`: it
//! sleeps until the earliest next tick of the store's schedules (at most
//! [`MAX_SLEEP`], so a schedule another instance created or changed is seen within it; a
//! change made through this instance wakes it at once), reads the due ones
//! (`Store::due_schedules`), plans each one's handling (schedule.rs: catch-up and overlap) and
//! applies it with `Store::fire_schedule`, a compare-and-set on the schedule's version: when
//! several instances handle the same tick, one fire moves the schedule on and pushes the tick's
//! job, and the others change nothing.

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::schedule::{Overlap, Recurrence, Rule, Schedule};
use crate::store::{FireOutcome, Store, StoreError};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The longest the task sleeps without looking at the store: how soon a schedule created or
/// changed on another instance is seen.
pub const MAX_SLEEP: Duration = Duration::from_millis(500);
/// Due schedules read per store call.
const BATCH: usize = 1_000;
/// Due schedules handled at once: the embedded store commits concurrent fires together, and
/// Redis answers them over one connection, so a minute's thousands of ticks are not one fsync
/// or round trip after another.
const CONCURRENT_FIRES: usize = 256;
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
}

impl Scheduler {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, metrics: Arc<Metrics>) -> Scheduler {
        Scheduler {
            store,
            clock,
            metrics,
            wake: Notify::new(),
            rules: Mutex::new(HashMap::new()),
        }
    }

    /// `rule`, parsed (from the cache when seen before); `None` if it does not parse. The
    /// dashboard's count of coming ticks uses it too.
    pub fn recurrence(&self, rule: &Rule) -> Option<Arc<Recurrence>> {
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = rules.get(rule) {
            return Some(r.clone());
        }
        let parsed = Arc::new(rule.recurrence().ok()?);
        if rules.len() >= MAX_CACHED_RULES {
            rules.clear();
        }
        rules.insert(rule.clone(), parsed.clone());
        Some(parsed)
    }

    /// Makes the task look at the store now (a schedule was created or changed here).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    pub fn start(self: &Arc<Self>, stop: CancellationToken) -> JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let sleep = match me.pass().await {
                    Ok(sleep) => sleep,
                    Err(e) => {
                        tracing::warn!(error = %e, "recurring schedules: store error");
                        RETRY_AFTER
                    }
                };
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = me.wake.notified() => {}
                    _ = sleep_precisely(sleep) => {}
                }
            }
        })
    }

    /// Handles every due schedule; returns how long to sleep.
    async fn pass(&self) -> Result<Duration, StoreError> {
        loop {
            let now = self.clock.now();
            let due = self.store.due_schedules(now, BATCH).await?;
            let full = due.due.len() >= BATCH;
            // CONCURRENT_FIRES at a time, the next starting as soon as one ends.
            let mut waiting = due.due.iter();
            let mut running = FuturesUnordered::new();
            for sc in waiting.by_ref().take(CONCURRENT_FIRES) {
                running.push(self.handle(sc));
            }
            while let Some(result) = running.next().await {
                result?;
                if let Some(sc) = waiting.next() {
                    running.push(self.handle(sc));
                }
            }
            if full {
                continue;
            }
            let now = self.clock.now();
            let until = due
                .next
                .map_or(MAX_SLEEP, |t| Duration::from_millis(t.saturating_sub(now)));
            return Ok(until.min(MAX_SLEEP));
        }
    }

    /// Plans and fires one due schedule.
    async fn handle(&self, sc: &Schedule) -> Result<(), StoreError> {
        let Some(rule) = self.recurrence(&sc.spec.rule) else {
            // Only checked rules are stored; one that no longer parses (a zone removed from
            // the tz database) is left as it is.
            tracing::warn!(schedule = %sc.spec.id, "recurring schedule's rule does not parse");
            return Ok(());
        };
        let previous_exists = match (sc.spec.overlap, sc.last_tick) {
            (Overlap::Skip, Some(t)) => match self.store.get(&sc.spec.id.job_id(t)).await {
                Ok(_) => true,
                Err(StoreError::NotFound) => false,
                Err(e) => return Err(e),
            },
            _ => false,
        };
        let now = self.clock.now();
        let plan = sc.plan(&rule, now, previous_exists);
        let Some(fire) = plan.fire else {
            return Ok(());
        };
        match self.store.fire_schedule(&fire, now).await? {
            FireOutcome::Fired { .. } => self.metrics.schedule_handled(
                plan.caught_up,
                plan.skipped_overlap,
                plan.skipped_missed,
            ),
            // Another instance handled it, or it was changed meanwhile: the next pass reads it
            // again.
            FireOutcome::Stale => {}
        }
        Ok(())
    }
}

/// Sleeps `d`; tokio's timer rounds up to its 1 ms ticks, which is precise enough for ticks
/// of whole seconds.
async fn sleep_precisely(d: Duration) {
    tokio::time::sleep(d).await;
}
