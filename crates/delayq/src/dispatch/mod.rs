//! The timer and the long-poll waiters, written once for every store: the [`Dispatcher`] handle
//! that starts and stops them, its options and errors.
//!
//! Two independent loops run over one store, each subscribed to the store's events:
//!
//! - **The timer** (`timer.rs`) calls [`Store::tick`] and sleeps until the next deadline it
//!   returned, woken early by a [`StoreEvent::Due`] for an earlier time. It has no fixed tick.
//! - **The waiters** (`waiters.rs`): [`Dispatcher::poll`] asks the store, and if nothing is
//!   ready, parks the caller in a wait list (holding no store connection) that one serving task
//!   answers on [`StoreEvent::Ready`], first come first served. Which waiters a store call
//!   serves, and with which jobs, is decided by a pure plan (`waiters/plan.rs`).
//!
//! **Shutdown.** [`Dispatcher::shutdown`] (or cancelling the token given to
//! [`Dispatcher::start`]) stops the timer and answers every waiting `reserve` with nothing.
//!
//! Not here: HTTP (api/), job rules (job.rs), storage (store/), the alarm thread the timer
//! sleeps on (alarm.rs).
//!
//! [`Store::tick`]: crate::store::Store::tick
//! [`StoreEvent::Due`]: crate::store::StoreEvent::Due
//! [`StoreEvent::Ready`]: crate::store::StoreEvent::Ready

pub(crate) mod error_log;
mod timer;
mod waiters;

#[cfg(test)]
mod test_fixture;

use crate::clock::Clock;
use crate::job::{Job, Topic};
use crate::store::{Store, StoreError};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use timer::Timer;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use waiters::Waiters;

/// Most jobs one timer pass moves (each direction); a full pass loops at once.
pub const DEFAULT_TICK_BATCH: usize = 1000;
/// Default cap on concurrently waiting `reserve` calls.
pub const DEFAULT_MAX_WAITERS: usize = 10_000;
/// Longest the timer sleeps without ticking, even when nothing is due (safety net).
pub const TIMER_SAFETY_INTERVAL: Duration = Duration::from_secs(5);
/// How often every waiter is re-checked while any exist (safety net).
pub const WAITER_SAFETY_INTERVAL: Duration = Duration::from_secs(1);

/// Why [`Dispatcher::poll`] did not answer with jobs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// The store failed (the caller maps it as usual, e.g. 503 for `Unavailable`).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The caller would have to wait, and `max_waiters` callers already are. Nothing was
    /// reserved. An overload answer (the /v1 API should say 503 with this message).
    #[error("too many waiting consumers (limit {limit}); retry later or poll without waiting")]
    TooManyWaiters { limit: usize },
}

/// Tunables of a [`Dispatcher`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchOptions {
    /// Cap on concurrently waiting `reserve` calls; one more fails fast with
    /// [`DispatchError::TooManyWaiters`]. Default [`DEFAULT_MAX_WAITERS`].
    pub max_waiters: usize,
    /// `limit` of each [`Store::tick`]. Default [`DEFAULT_TICK_BATCH`].
    pub tick_batch: usize,
}

impl Default for DispatchOptions {
    fn default() -> Self {
        DispatchOptions {
            max_waiters: DEFAULT_MAX_WAITERS,
            tick_batch: DEFAULT_TICK_BATCH,
        }
    }
}

/// The timer and the waiters over one store. Create with [`Dispatcher::new`], then
/// [`Dispatcher::start`] its background tasks once.
pub struct Dispatcher {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    /// `limit` of each timer pass.
    tick_batch: usize,
    /// The parked `reserve` calls and the task that serves them.
    waiters: Waiters,
    /// Cancelled on shutdown: stops both loops and answers every waiter with nothing.
    stopping: CancellationToken,
    /// `start` runs the background tasks only once.
    started: AtomicBool,
}

impl Dispatcher {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Arc<Dispatcher> {
        Dispatcher::with_options(store, clock, DispatchOptions::default())
    }

    pub fn with_options(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        options: DispatchOptions,
    ) -> Arc<Dispatcher> {
        let stopping = CancellationToken::new();
        Arc::new(Dispatcher {
            waiters: Waiters::new(
                store.clone(),
                clock.clone(),
                options.max_waiters,
                stopping.clone(),
            ),
            store,
            clock,
            tick_batch: options.tick_batch,
            stopping,
            started: AtomicBool::new(false),
        })
    }

    /// Spawns the timer and the waiter-serving task. They run until `shutdown` is cancelled
    /// or [`Dispatcher::shutdown`] is called; the handle completes when both have stopped
    /// (every waiter answered). Call once; later calls only return a handle that completes at
    /// shutdown.
    pub fn start(self: &Arc<Self>, shutdown: CancellationToken) -> JoinHandle<()> {
        let stopping = self.stopping.clone();
        // Relay the caller's token to ours; ends at whichever comes first.
        let relay = {
            let stopping = stopping.clone();
            async move {
                tokio::select! {
                    _ = shutdown.cancelled() => stopping.cancel(),
                    _ = stopping.cancelled() => {}
                }
            }
        };
        if self.started.swap(true, Ordering::SeqCst) {
            tracing::warn!("dispatcher already started; ignoring a second start");
            return tokio::spawn(relay);
        }
        // Subscribe before spawning: no event between now and the first tick is lost.
        let timer = Timer {
            store: self.store.clone(),
            clock: self.clock.clone(),
            tick_batch: self.tick_batch,
            stopping,
        };
        let timer = tokio::spawn(timer.run(self.store.subscribe()));
        let serving = {
            let this = self.clone();
            let events = self.store.subscribe();
            tokio::spawn(async move { this.waiters.serve_until_shutdown(events).await })
        };
        tokio::spawn(async move {
            let relay = tokio::spawn(relay);
            for (name, task) in [("timer", timer), ("waiters", serving)] {
                if let Err(e) = task.await {
                    tracing::error!(task = name, error = %e, "dispatcher task failed");
                }
            }
            relay.abort();
        })
    }

    /// Stops the timer and answers every waiting `reserve` with nothing, at once. Later
    /// `reserve` calls still try the store but do not wait.
    pub fn shutdown(&self) {
        self.stopping.cancel();
    }

    /// How many `reserve` calls are waiting now (for metrics).
    pub fn waiters(&self) -> usize {
        self.waiters.count()
    }

    /// Reserves up to `max` jobs from `topics` (preferred in order), waiting up to `wait` for
    /// one to become ready. Returns an empty vector when none did in time or the server is
    /// shutting down; [`DispatchError::TooManyWaiters`] when it would have to wait and
    /// `max_waiters` callers already are.
    pub async fn poll(
        &self,
        topics: Vec<Topic>,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Job>, DispatchError> {
        self.waiters.poll(topics, max, wait).await
    }
}

#[cfg(test)]
mod tests {
    use super::test_fixture::*;
    use std::time::Duration;
    use tokio::time::Instant;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_answers_waiters_with_nothing_at_once() {
        let f = fixture();
        let waiting = f.spawn_reserve(&["t"], Duration::from_secs(120));
        f.until_waiters(1).await;
        let started = Instant::now();
        f.shutdown.cancel();
        assert!(joined(waiting).await.unwrap().is_empty());
        assert!(started.elapsed() < PROMPT);
        joined(f.task).await;
        assert_eq!(f.dispatcher.waiters(), 0);
        // After shutdown, reserve still answers from the store but does not wait.
        let got = f
            .dispatcher
            .poll(vec![topic("t")], 1, Duration::from_secs(120))
            .await
            .unwrap();
        assert!(got.is_empty());
    }
}
