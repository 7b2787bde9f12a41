//! The timer: one loop that calls [`Store::tick`] and then sleeps until the `next_due` it
//! returned. There is no fixed scan period.
//!
//! A [`StoreEvent::Due`] earlier than the current target moves the wake-up forward; `Resync`
//! (or a lagged event receiver) ticks at once. The store only promotes jobs with
//! `run_at <= now`, so the timer can be late but never early; sleeps are computed in µs to the
//! start of the due millisecond and slept on a precise alarm thread (alarm.rs; tokio's timer
//! would round up to its own 1 ms ticks), so they end at or just after it. A failing tick is
//! logged (rate-limited) and retried with a growing backoff (100 ms to 1 s); the loop never
//! spins and never exits before shutdown. While nothing is due it still ticks every
//! [`TIMER_SAFETY_INTERVAL`], a safety net for a `Due` event lost on the way (Redis pub/sub is
//! at-most-once), not the mechanism.
//!
//! Not here: moving jobs (the store's `tick` does, in batches of `tick_batch`), serving the
//! consumers the promoted jobs are for (waiters.rs, on the store's `Ready` events).

use super::TIMER_SAFETY_INTERVAL;
use super::error_log::ErrorLog;
use crate::alarm::Alarm;
use crate::clock::Clock;
use crate::job::UnixMillis;
use crate::store::{Store, StoreEvent};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// First retry delay after a failed tick; it doubles with each failure in a row.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest retry delay after failed ticks.
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The timer loop over one store.
pub(super) struct Timer {
    pub(super) store: Arc<dyn Store>,
    pub(super) clock: Arc<dyn Clock>,
    /// `limit` of each [`Store::tick`].
    pub(super) tick_batch: usize,
    /// Cancelled on shutdown: the loop returns.
    pub(super) stopping: CancellationToken,
}

impl Timer {
    /// Ticks and sleeps until shutdown (see the module docs). `events` is subscribed before
    /// the task starts, so no event between the subscription and the first tick is lost.
    pub(super) async fn run(self, mut events: broadcast::Receiver<StoreEvent>) {
        let mut errors = ErrorLog::new("timer tick");
        let mut backoff = BACKOFF_MIN;
        let mut events_open = true;
        let mut sleeper = Sleeper::new();
        while !self.stopping.is_cancelled() {
            let now = self.clock.now();
            let mut target = match self.store.tick(now, self.tick_batch).await {
                Ok(out) => {
                    errors.recovered();
                    backoff = BACKOFF_MIN;
                    if out.promoted + out.expired > 0 {
                        tracing::debug!(
                            promoted = out.promoted,
                            expired = out.expired,
                            next_due = ?out.next_due,
                            "timer pass"
                        );
                    }
                    out.next_due
                }
                Err(e) => {
                    errors.failed(&e);
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = self.stopping.cancelled() => return,
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
            };
            if target.is_some_and(|t| t <= now) {
                // A full batch: more is due. Go again, but let other tasks run.
                tokio::task::yield_now().await;
                continue;
            }
            sleeper.set(self.wake_at(target));
            loop {
                tokio::select! {
                    _ = sleeper.wait() => break,
                    _ = self.stopping.cancelled() => return,
                    ev = events.recv(), if events_open => match ev {
                        Ok(StoreEvent::Due(t)) if target.is_none_or(|cur| t < cur) => {
                            if t <= self.clock.now() {
                                break;
                            }
                            target = Some(t);
                            sleeper.set(self.wake_at(target));
                        }
                        Ok(StoreEvent::Due(_) | StoreEvent::Ready(_)) => {}
                        Ok(StoreEvent::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => {
                            break;
                        }
                        Err(broadcast::error::RecvError::Closed) => {
                            tracing::warn!("store event channel closed; the timer now relies on its safety interval");
                            events_open = false;
                        }
                    },
                }
            }
        }
    }

    /// When the timer should wake for a deadline: at the start of millisecond `due`, measured
    /// in µs from the clock's `now_micros` (the alarm then wakes at or just after it, never
    /// before), at most [`TIMER_SAFETY_INTERVAL`] ahead. Counting from a floored millisecond
    /// instead would add up to a millisecond of lateness.
    fn wake_at(&self, due: Option<UnixMillis>) -> Instant {
        let wait = match due {
            Some(t) => Duration::from_micros(
                t.saturating_mul(1000)
                    .saturating_sub(self.clock.now_micros()),
            ),
            None => TIMER_SAFETY_INTERVAL,
        };
        Instant::now() + wait.min(TIMER_SAFETY_INTERVAL)
    }
}

/// How the timer sleeps: on the precise [`Alarm`] thread, or on tokio's 1 ms timer if that
/// thread could not be started (logged once).
enum Sleeper {
    Alarm(Alarm),
    Tokio(Pin<Box<tokio::time::Sleep>>),
}

impl Sleeper {
    fn new() -> Sleeper {
        match Alarm::start() {
            Ok(alarm) => Sleeper::Alarm(alarm),
            Err(e) => {
                tracing::warn!(error = %e, "could not start the alarm thread; the timer wakes up to 2 ms late");
                Sleeper::Tokio(Box::pin(tokio::time::sleep(TIMER_SAFETY_INTERVAL)))
            }
        }
    }

    /// Sets the next wake-up, replacing the previous one.
    fn set(&mut self, at: Instant) {
        match self {
            Sleeper::Alarm(alarm) => alarm.set(at.into_std()),
            Sleeper::Tokio(sleep) => sleep.as_mut().reset(at),
        }
    }

    /// Completes at the wake-up last set (see [`Alarm::fired`] for its one early case).
    async fn wait(&mut self) {
        match self {
            Sleeper::Alarm(alarm) => alarm.fired().await,
            Sleeper::Tokio(sleep) => sleep.as_mut().await,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::Dispatcher;
    use super::super::test_fixture::*;
    use super::*;
    use crate::clock::SystemClock;
    use crate::store::hook::{Call, Hooked, StoreHook};
    use crate::store::memory::MemoryStore;
    use crate::store::{PushMode, StoreError, StoreResult};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn timer_promotes_a_delayed_job_and_a_waiting_consumer_receives_it() {
        let f = fixture();
        let run_at = f.clock.now() + 300;
        f.push(spec("later", run_at)).await;
        let got = f
            .dispatcher
            .poll(vec![topic("t")], 1, Duration::from_secs(30))
            .await
            .unwrap();
        let received_at = f.clock.now();
        assert_eq!(ids(&got), ["later"]);
        assert!(
            received_at >= run_at,
            "delivered {} ms early",
            run_at - received_at
        );
        assert!(
            received_at < run_at + PROMPT.as_millis() as u64,
            "far too late"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_job_is_delivered_before_its_run_at() {
        let f = fixture();
        let run_at = f.clock.now() + 1_000;
        f.push(spec("later", run_at)).await;
        let now = f
            .dispatcher
            .poll(vec![topic("t")], 1, Duration::ZERO)
            .await
            .unwrap();
        assert!(now.is_empty());
        let short = f
            .dispatcher
            .poll(vec![topic("t")], 1, Duration::from_millis(100))
            .await
            .unwrap();
        if f.clock.now() < run_at {
            assert!(short.is_empty(), "delivered before run_at");
        }
        let got = f
            .dispatcher
            .poll(vec![topic("t")], 1, Duration::from_secs(30))
            .await
            .unwrap();
        let got = if short.is_empty() { got } else { short };
        assert_eq!(ids(&got), ["later"]);
        assert!(f.clock.now() >= run_at);
    }

    /// A hook over a MemoryStore whose `tick` can be made to fail, counting calls.
    pub(in crate::dispatch) struct FlakyTicks {
        pub(in crate::dispatch) failing: AtomicBool,
        pub(in crate::dispatch) ticks: AtomicU64,
        /// When set, `subscribe` hands out this channel, on which nothing is ever sent: the
        /// dispatcher hears of no event (as when a pub/sub message is lost).
        pub(in crate::dispatch) silence: Option<broadcast::Sender<StoreEvent>>,
    }

    impl FlakyTicks {
        /// A MemoryStore behind this hook, its ticks failing while `failing` is set.
        pub(in crate::dispatch) fn store(
            failing: bool,
            silence: Option<broadcast::Sender<StoreEvent>>,
        ) -> Arc<Hooked<FlakyTicks>> {
            let hook = FlakyTicks {
                failing: AtomicBool::new(failing),
                ticks: AtomicU64::new(0),
                silence,
            };
            Arc::new(Hooked::new(Arc::new(MemoryStore::new()), hook))
        }
    }

    impl StoreHook for FlakyTicks {
        fn before(&self, call: &Call<'_>) -> StoreResult<()> {
            if let Call::Tick { .. } = call {
                self.ticks.fetch_add(1, Ordering::SeqCst);
                if self.failing.load(Ordering::SeqCst) {
                    return Err(StoreError::Unavailable("test outage".into()));
                }
            }
            Ok(())
        }

        fn kind(&self, _inner: &dyn Store) -> &'static str {
            "flaky"
        }

        fn subscribe(&self, inner: &dyn Store) -> broadcast::Receiver<StoreEvent> {
            match &self.silence {
                Some(quiet) => quiet.subscribe(),
                None => inner.subscribe(),
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn timer_backs_off_while_the_store_fails_and_recovers_after() {
        let store = FlakyTicks::store(true, None);
        let clock = Arc::new(SystemClock);
        let dispatcher = Dispatcher::new(store.clone(), clock.clone());
        let shutdown = CancellationToken::new();
        let task = dispatcher.start(shutdown.clone());
        let run_at = clock.now() + 100;
        store
            .push(spec("j1", run_at), PushMode::Reject, clock.now())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(800)).await;
        let during_outage = store.hook().ticks.load(Ordering::SeqCst);
        // 100 + 200 + 400 ms backoff: about 4 calls in 800 ms; a hot loop makes thousands.
        assert!(
            during_outage <= 10,
            "{during_outage} tick calls during the outage"
        );
        store.hook().failing.store(false, Ordering::SeqCst);
        let got = dispatcher
            .poll(vec![topic("t")], 1, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(ids(&got), ["j1"]);
        shutdown.cancel();
        joined(task).await;
    }

    /// The fallback used when the alarm thread cannot start: it wakes at the time last set
    /// (a later setting replaces an earlier one), never before it.
    #[tokio::test]
    async fn the_tokio_sleeper_wakes_at_the_time_last_set_never_before() {
        let hour = Duration::from_secs(3600);
        let mut sleeper = Sleeper::Tokio(Box::pin(tokio::time::sleep(hour)));
        for ms in [0u64, 1, 20] {
            sleeper.set(Instant::now() + hour);
            let at = Instant::now() + Duration::from_millis(ms);
            sleeper.set(at);
            tokio::time::timeout(PROMPT, sleeper.wait())
                .await
                .expect("the sleeper wakes at the later setting, the hour-long one is gone");
            assert!(Instant::now() >= at, "woke before its time");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_timer_does_not_spin() {
        let store = FlakyTicks::store(false, None);
        let dispatcher = Dispatcher::new(store.clone(), Arc::new(SystemClock));
        let shutdown = CancellationToken::new();
        let task = dispatcher.start(shutdown.clone());
        // Something due far away: the timer sleeps (at most its safety interval at a time).
        store
            .push(
                spec("far", SystemClock.now() + 3_600_000),
                PushMode::Reject,
                SystemClock.now(),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let ticks = store.hook().ticks.load(Ordering::SeqCst);
        assert!(ticks <= 3, "{ticks} ticks while idle");
        shutdown.cancel();
        joined(task).await;
    }
}
