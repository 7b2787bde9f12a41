//! The timer and the long-poll waiters, written once for every store.
//!
//! **Timer.** One loop calls [`Store::tick`] and then sleeps until the `next_due` it returned:
//! there is no fixed scan period. A [`StoreEvent::Due`] earlier than the current target moves
//! the wake-up forward; `Resync` (or a lagged event receiver) ticks at once. The store only
//! promotes jobs with `run_at <= now`, so the timer can be late but never early; sleeps are
//! computed in µs to the start of the due millisecond and slept on a precise alarm thread
//! (alarm.rs; tokio's timer would round up to its own 1 ms ticks), so they end at or just
//! after it. A failing tick is logged (rate-limited) and retried with a growing backoff
//! (100 ms to 1 s); the loop never spins and never exits before shutdown. While nothing is due
//! it still ticks every [`TIMER_SAFETY_INTERVAL`], a safety net for a `Due` event lost on the
//! way (Redis pub/sub is at-most-once), not the mechanism.
//!
//! **Waiters.** [`Dispatcher::poll`] first asks the store (which never waits), unless
//! older callers already wait on one of its topics: then it queues behind them. If nothing is
//! ready and the caller may wait, it registers a waiter (topics, max, a oneshot sender) in
//! arrival order and awaits the oneshot with its timeout. No store connection is held while
//! waiting. A single serving task reacts to the store's events: on `Ready(topic)` it walks the
//! waiters interested in that topic in arrival order (first come, first served) until the store
//! has nothing more; on `Resync`/lag it serves every waiter. Waiters asking for the same topic
//! list are served together: one `reserve` for all of them (up to `SERVE_BATCH` jobs), handed
//! out in arrival order, so a busy topic costs one store call per batch of consumers, not per
//! consumer. Between waiters of different, overlapping topic lists the order is that of each
//! list's oldest waiter.
//!
//! The lost wake-up (a job becomes ready between the caller's first try and its registration)
//! is closed by having the serving task also serve every newly registered waiter once. While a
//! waiter is registered only the serving task reserves for it, so it is never served twice.
//! While waiters exist the serving task also re-checks all of them every
//! [`WAITER_SAFETY_INTERVAL`], and a waiter that times out asks the store once more (after
//! closing its oneshot) before answering "nothing": safety nets for lost pub/sub messages,
//! not the mechanism.
//!
//! **Abandoned waiters.** A caller that stops waiting (timeout, or the HTTP client went away and
//! axum dropped the handler future) closes its oneshot and deregisters. If jobs were reserved
//! for it in that instant, the serving task cannot deliver them and hands them back at once
//! with [`Store::release`] (`delay` 0). That delivery attempt *is counted* in the jobs'
//! `attempts` (it may matter with `max_attempts`): the store cannot tell a handed-back
//! reservation from a real one.
//!
//! **Shutdown.** [`Dispatcher::shutdown`] (or cancelling the token given to
//! [`Dispatcher::start`]) stops the timer and answers every waiting `reserve` with nothing.
//!
//! Not here: HTTP (api/), job rules (job.rs), storage (store/).

use crate::alarm::Alarm;
use crate::clock::Clock;
use crate::job::{Job, Topic};
use crate::store::{Store, StoreError, StoreEvent};
use std::collections::{BTreeMap, HashSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{Notify, broadcast, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Most jobs one timer pass moves (each direction); a full pass loops at once.
pub const DEFAULT_TICK_BATCH: usize = 1000;
/// Default cap on concurrently waiting `reserve` calls.
pub const DEFAULT_MAX_WAITERS: usize = 10_000;
/// Longest the timer sleeps without ticking, even when nothing is due (safety net).
pub const TIMER_SAFETY_INTERVAL: Duration = Duration::from_secs(5);
/// How often every waiter is re-checked while any exist (safety net).
pub const WAITER_SAFETY_INTERVAL: Duration = Duration::from_secs(1);
/// Most jobs one serving step reserves at once for waiters asking for the same topics.
const SERVE_BATCH: usize = 1000;
/// First and last retry delay after a failed store call in the timer.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one log line per this interval for a store that keeps failing.
const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

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

/// One waiting `reserve` call.
struct Waiter {
    topics: Vec<Topic>,
    max: usize,
    /// Where the serving task delivers; closed when the caller stopped waiting.
    tx: oneshot::Sender<Vec<Job>>,
    /// Registered since the serving task last looked: it must be served once even without an
    /// event (closes the lost wake-up window).
    fresh: bool,
}

/// The waiters in arrival order (keys increase with registration).
#[derive(Default)]
struct WaitList {
    next_id: u64,
    by_id: BTreeMap<u64, Waiter>,
}

/// Which waiters one serving pass looks at.
enum Serve {
    /// Those interested in a topic that gained ready jobs.
    Topic(Topic),
    /// Those interested in a topic of a waiter registered since the last pass: the newcomers,
    /// and before them every older waiter of the same topics, so a job that became ready just
    /// before the pass still goes to the oldest waiter (first come, first served).
    Fresh,
    /// All of them (resync, lag, safety re-check).
    All,
}

/// The timer and the waiters over one store. Create with [`Dispatcher::new`], then
/// [`Dispatcher::start`] its background tasks once.
pub struct Dispatcher {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    options: DispatchOptions,
    waiters: Mutex<WaitList>,
    /// Wakes the serving task when a waiter registers, so it serves the newcomer once.
    registered: Notify,
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
        Arc::new(Dispatcher {
            store,
            clock,
            options,
            waiters: Mutex::new(WaitList::default()),
            registered: Notify::new(),
            stopping: CancellationToken::new(),
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
        let timer = tokio::spawn(self.clone().run_timer(self.store.subscribe()));
        let serving = tokio::spawn(self.clone().run_waiters(self.store.subscribe()));
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
        self.lock().by_id.len()
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
        if topics.is_empty() || max == 0 {
            return Ok(Vec::new());
        }
        // First come, first served: while older callers wait on one of these topics, a caller
        // that is willing to wait queues behind them instead of taking a job first. A caller
        // that will not wait is not queued and tries the store directly.
        if wait.is_zero() || !self.anyone_waits_on(&topics) {
            let jobs = self.store.reserve(&topics, max, self.clock.now()).await?;
            if !jobs.is_empty() || wait.is_zero() || self.stopping.is_cancelled() {
                return Ok(jobs);
            }
        }
        let (id, mut rx) = self.register(topics.clone(), max)?;
        // Deregisters on every exit, including the future being dropped mid-wait.
        let _registration = Registration {
            dispatcher: self,
            id,
        };
        self.registered.notify_one();
        let timed_out = tokio::select! {
            delivered = &mut rx => return Ok(delivered.unwrap_or_default()),
            _ = tokio::time::sleep(wait) => true,
            _ = self.stopping.cancelled() => false,
        };
        // Jobs sent in the instant before we stopped listening are still ours; after
        // `close` the serving task cannot send and hands anything back itself.
        rx.close();
        if let Ok(jobs) = rx.try_recv() {
            return Ok(jobs);
        }
        if timed_out && !self.stopping.is_cancelled() {
            // One last look, so a timeout never answers "nothing" while a job is ready (its
            // event may have been lost or still be queued).
            return Ok(self.store.reserve(&topics, max, self.clock.now()).await?);
        }
        Ok(Vec::new())
    }

    /// Whether a registered caller waits on one of `topics` (a scan: waiters are few, at most
    /// `max_waiters`).
    fn anyone_waits_on(&self, topics: &[Topic]) -> bool {
        self.lock()
            .by_id
            .values()
            .any(|w| !w.tx.is_closed() && w.topics.iter().any(|t| topics.contains(t)))
    }

    fn lock(&self) -> MutexGuard<'_, WaitList> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(
        &self,
        topics: Vec<Topic>,
        max: usize,
    ) -> Result<(u64, oneshot::Receiver<Vec<Job>>), DispatchError> {
        let mut list = self.lock();
        if list.by_id.len() >= self.options.max_waiters {
            return Err(DispatchError::TooManyWaiters {
                limit: self.options.max_waiters,
            });
        }
        let (tx, rx) = oneshot::channel();
        let id = list.next_id;
        list.next_id += 1;
        list.by_id.insert(
            id,
            Waiter {
                topics,
                max,
                tx,
                fresh: true,
            },
        );
        Ok((id, rx))
    }

    /// The timer loop (see the module docs).
    async fn run_timer(self: Arc<Self>, mut events: broadcast::Receiver<StoreEvent>) {
        let mut errors = ErrorLog::new("timer tick");
        let mut backoff = BACKOFF_MIN;
        let mut events_open = true;
        let mut sleeper = Sleeper::new();
        while !self.stopping.is_cancelled() {
            let now = self.clock.now();
            let mut target = match self.store.tick(now, self.options.tick_batch).await {
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
    fn wake_at(&self, due: Option<u64>) -> Instant {
        let wait = match due {
            Some(t) => Duration::from_micros(
                t.saturating_mul(1000)
                    .saturating_sub(self.clock.now_micros()),
            ),
            None => TIMER_SAFETY_INTERVAL,
        };
        Instant::now() + wait.min(TIMER_SAFETY_INTERVAL)
    }

    /// The waiter-serving loop (see the module docs).
    async fn run_waiters(self: Arc<Self>, mut events: broadcast::Receiver<StoreEvent>) {
        let mut safety = tokio::time::interval(WAITER_SAFETY_INTERVAL);
        safety.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut errors = ErrorLog::new("reserve for waiters");
        let mut events_open = true;
        loop {
            tokio::select! {
                _ = self.stopping.cancelled() => break,
                _ = self.registered.notified() => self.serve(Serve::Fresh, &mut errors).await,
                ev = events.recv(), if events_open => match ev {
                    Ok(StoreEvent::Ready(topic)) => self.serve(Serve::Topic(topic), &mut errors).await,
                    Ok(StoreEvent::Due(_)) => {}
                    Ok(StoreEvent::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        self.serve(Serve::All, &mut errors).await;
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        tracing::warn!("store event channel closed; waiters now rely on the safety re-check");
                        events_open = false;
                    }
                },
                _ = safety.tick() => {
                    if self.waiters() > 0 {
                        self.serve(Serve::All, &mut errors).await;
                    }
                }
            }
        }
        // Shutdown: every waiter gets "nothing" now.
        let waiting = std::mem::take(&mut self.lock().by_id);
        for (_, w) in waiting {
            let _ = w.tx.send(Vec::new());
        }
    }

    /// One serving pass: the matching waiters in arrival order, each given what the store has
    /// for its topics, until the store has nothing more for them.
    async fn serve(&self, which: Serve, errors: &mut ErrorLog) {
        // Topics the store just answered "nothing" for, within this pass.
        let mut drained: HashSet<Topic> = HashSet::new();
        // For a Fresh pass: the newcomers' topics. Marking them seen here, before any reserve,
        // keeps a waiter registering meanwhile fresh for the next pass.
        let fresh_topics: HashSet<Topic> = match &which {
            Serve::Fresh => {
                let mut list = self.lock();
                let mut topics = HashSet::new();
                for w in list.by_id.values_mut().filter(|w| w.fresh) {
                    w.fresh = false;
                    topics.extend(w.topics.iter().cloned());
                }
                topics
            }
            _ => HashSet::new(),
        };
        // Waiters already looked at in this pass (served, or their topics found empty).
        let mut visited: HashSet<u64> = HashSet::new();
        loop {
            // The oldest eligible waiter, and with it every later one asking for the same
            // topics: one store call serves them all, handed out in arrival order.
            let batch = {
                let mut list = self.lock();
                let mut lead: Option<Vec<Topic>> = None;
                let mut members: Vec<(u64, usize)> = Vec::new();
                let mut total = 0usize;
                let mut gone = Vec::new();
                for (&id, w) in list.by_id.iter_mut() {
                    if visited.contains(&id) {
                        continue;
                    }
                    if w.tx.is_closed() {
                        gone.push(id);
                        continue;
                    }
                    let wanted = match &which {
                        Serve::Topic(t) => w.topics.contains(t),
                        Serve::Fresh => w.topics.iter().any(|t| fresh_topics.contains(t)),
                        Serve::All => true,
                    };
                    if !wanted {
                        continue;
                    }
                    match &lead {
                        None => {
                            // Served now, or its topics were just found empty: either way seen.
                            w.fresh = false;
                            visited.insert(id);
                            if w.topics.iter().all(|t| drained.contains(t)) {
                                continue;
                            }
                            lead = Some(w.topics.clone());
                        }
                        Some(topics) if *topics == w.topics && total < SERVE_BATCH => {
                            w.fresh = false;
                            visited.insert(id);
                        }
                        Some(_) => continue,
                    }
                    members.push((id, w.max));
                    total += w.max;
                }
                for id in gone {
                    list.by_id.remove(&id);
                }
                lead.map(|topics| (topics, members, total))
            };
            let Some((topics, members, total)) = batch else {
                return;
            };
            match self.store.reserve(&topics, total, self.clock.now()).await {
                Ok(jobs) => {
                    errors.recovered();
                    if jobs.len() < total {
                        drained.extend(topics);
                    }
                    let mut jobs = jobs.into_iter();
                    for (id, max) in members {
                        let mine: Vec<Job> = jobs.by_ref().take(max).collect();
                        if mine.is_empty() {
                            break;
                        }
                        self.deliver(id, mine).await;
                    }
                }
                Err(e) => {
                    // Leave the waiters be; the safety re-check tries again.
                    errors.failed(&e);
                    return;
                }
            }
        }
    }

    /// Hands reserved jobs to waiter `id`, or back to the store if it stopped waiting.
    async fn deliver(&self, id: u64, jobs: Vec<Job>) {
        let waiter = self.lock().by_id.remove(&id);
        let undelivered = match waiter {
            Some(w) => w.tx.send(jobs).err(),
            None => Some(jobs),
        };
        for job in undelivered.unwrap_or_default() {
            let job_id = &job.spec.id;
            match self.store.release(job_id, Some(0), self.clock.now()).await {
                Ok(_) => tracing::debug!(job_id = %job_id, "waiter gone; job handed back"),
                // Not reserved any more (finished, replaced...): nothing to hand back.
                Err(StoreError::NotFound | StoreError::WrongState(_)) => {}
                Err(e) => tracing::warn!(
                    job_id = %job_id,
                    error = %e,
                    "waiter gone and the job could not be handed back; it is redelivered after its ttr"
                ),
            }
        }
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

/// Removes a waiter when its `reserve` call ends, however it ends.
struct Registration<'a> {
    dispatcher: &'a Dispatcher,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.dispatcher.lock().by_id.remove(&self.id);
    }
}

/// Logs a failing store call at most once per [`ERROR_LOG_INTERVAL`] (with how many failures
/// were not logged), and once when it recovers.
struct ErrorLog {
    what: &'static str,
    failing_since: Option<Instant>,
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl ErrorLog {
    fn new(what: &'static str) -> ErrorLog {
        ErrorLog {
            what,
            failing_since: None,
            last_logged: None,
            unlogged: 0,
        }
    }

    fn failed(&mut self, e: &StoreError) {
        let now = Instant::now();
        self.failing_since.get_or_insert(now);
        if self
            .last_logged
            .is_none_or(|t| now.duration_since(t) >= ERROR_LOG_INTERVAL)
        {
            tracing::warn!(
                what = self.what,
                error = %e,
                failures_not_logged = self.unlogged,
                "store call failed; retrying"
            );
            self.last_logged = Some(now);
            self.unlogged = 0;
        } else {
            self.unlogged += 1;
        }
    }

    fn recovered(&mut self) {
        if let Some(since) = self.failing_since.take() {
            tracing::info!(what = self.what, after = ?since.elapsed(), "store call recovered");
            self.last_logged = None;
            self.unlogged = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::job::{JobId, JobSpec, JobState, UnixMillis};
    use crate::store::memory::MemoryStore;
    use crate::store::{PushMode, PushOutcome, Reschedule, Stats, StoreResult, TickOutcome};
    use async_trait::async_trait;
    use std::sync::atomic::AtomicU64;

    /// Generous bound for "promptly" on a loaded 2-core machine.
    const PROMPT: Duration = Duration::from_secs(5);

    fn topic(s: &str) -> Topic {
        Topic::parse(s).unwrap()
    }

    fn spec(id: &str, run_at: UnixMillis) -> JobSpec {
        JobSpec::new(topic("t"), JobId::parse(id).unwrap(), id, run_at)
    }

    struct Fixture {
        store: Arc<MemoryStore>,
        clock: Arc<SystemClock>,
        dispatcher: Arc<Dispatcher>,
        shutdown: CancellationToken,
        task: JoinHandle<()>,
    }

    fn fixture_with(options: DispatchOptions) -> Fixture {
        let store = Arc::new(MemoryStore::new());
        let clock = Arc::new(SystemClock);
        let dispatcher = Dispatcher::with_options(store.clone(), clock.clone(), options);
        let shutdown = CancellationToken::new();
        let task = dispatcher.start(shutdown.clone());
        Fixture {
            store,
            clock,
            dispatcher,
            shutdown,
            task,
        }
    }

    fn fixture() -> Fixture {
        fixture_with(DispatchOptions::default())
    }

    impl Fixture {
        async fn push(&self, s: JobSpec) {
            self.store
                .push(s, PushMode::Reject, self.clock.now())
                .await
                .unwrap();
        }

        /// Waits until `n` reserve calls are registered as waiters.
        async fn until_waiters(&self, n: usize) {
            let deadline = Instant::now() + PROMPT;
            while self.dispatcher.waiters() != n {
                assert!(Instant::now() < deadline, "never saw {n} waiters");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }

        fn spawn_reserve(
            &self,
            topics: &[&str],
            wait: Duration,
        ) -> JoinHandle<Result<Vec<Job>, DispatchError>> {
            let d = self.dispatcher.clone();
            let topics = topics.iter().map(|t| topic(t)).collect();
            tokio::spawn(async move { d.poll(topics, 1, wait).await })
        }
    }

    fn ids(jobs: &[Job]) -> Vec<&str> {
        jobs.iter().map(|j| j.spec.id.as_str()).collect()
    }

    async fn joined<T>(h: JoinHandle<T>) -> T {
        tokio::time::timeout(PROMPT, h)
            .await
            .expect("task did not finish in time")
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiter_is_woken_by_a_push_from_another_task() {
        let f = fixture();
        let waiting = f.spawn_reserve(&["t"], Duration::from_secs(30));
        f.until_waiters(1).await;
        f.push(spec("j1", 0)).await;
        let jobs = joined(waiting).await.unwrap();
        assert_eq!(ids(&jobs), ["j1"]);
        assert_eq!(jobs[0].state, JobState::Reserved);
        assert_eq!(f.dispatcher.waiters(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_are_served_first_come_first_served() {
        let f = fixture();
        let first = f.spawn_reserve(&["t"], Duration::from_secs(30));
        f.until_waiters(1).await;
        let second = f.spawn_reserve(&["t"], Duration::from_secs(30));
        f.until_waiters(2).await;

        f.push(spec("j1", 0)).await;
        assert_eq!(ids(&joined(first).await.unwrap()), ["j1"]);
        f.until_waiters(1).await;
        f.push(spec("j2", 0)).await;
        assert_eq!(ids(&joined(second).await.unwrap()), ["j2"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiter_only_gets_jobs_of_its_topics() {
        let f = fixture();
        let waiting = f.spawn_reserve(&["a", "b"], Duration::from_secs(30));
        f.until_waiters(1).await;
        f.push(JobSpec::new(
            topic("c"),
            JobId::parse("other").unwrap(),
            "",
            0,
        ))
        .await;
        f.push(JobSpec::new(
            topic("b"),
            JobId::parse("mine").unwrap(),
            "",
            0,
        ))
        .await;
        assert_eq!(ids(&joined(waiting).await.unwrap()), ["mine"]);
        assert_eq!(f.store.stats().await.unwrap().topics[&topic("c")].ready, 1);
    }

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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn timed_out_waiter_gets_nothing_and_is_removed() {
        let f = fixture();
        let got = f
            .dispatcher
            .poll(vec![topic("t")], 1, Duration::from_millis(50))
            .await
            .unwrap();
        assert!(got.is_empty());
        assert_eq!(f.dispatcher.waiters(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn timed_out_waiter_takes_a_last_look_at_the_store() {
        // Not started: no event ever reaches the waiter, as if its pub/sub message was lost.
        let store = Arc::new(MemoryStore::new());
        let dispatcher = Dispatcher::new(store.clone(), Arc::new(SystemClock));
        let waiting = {
            let d = dispatcher.clone();
            tokio::spawn(async move {
                d.poll(vec![topic("t")], 1, Duration::from_millis(300))
                    .await
            })
        };
        while dispatcher.waiters() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        store
            .push(spec("j1", 0), PushMode::Reject, SystemClock.now())
            .await
            .unwrap();
        assert_eq!(ids(&joined(waiting).await.unwrap()), ["j1"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropped_reserve_call_removes_its_waiter() {
        let f = fixture();
        let waiting = f.spawn_reserve(&["t"], Duration::from_secs(30));
        f.until_waiters(1).await;
        waiting.abort();
        f.until_waiters(0).await;
        // A job pushed now stays ready for the next consumer.
        f.push(spec("j1", 0)).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            f.store
                .get(&JobId::parse("j1").unwrap())
                .await
                .unwrap()
                .state,
            JobState::Ready
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_reserved_for_a_waiter_that_left_are_handed_back() {
        let f = fixture();
        f.push(spec("j1", 0)).await;
        let (id, rx) = f.dispatcher.register(vec![topic("t")], 1).unwrap();
        drop(rx);
        let jobs = f
            .store
            .reserve(&[topic("t")], 1, f.clock.now())
            .await
            .unwrap();
        f.dispatcher.deliver(id, jobs).await;
        let job = f.store.get(&JobId::parse("j1").unwrap()).await.unwrap();
        assert_eq!(job.state, JobState::Ready);
        assert_eq!(job.attempts, 1, "the handed-back delivery is counted");
    }

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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_beyond_the_cap_are_refused_fast() {
        let f = fixture_with(DispatchOptions {
            max_waiters: 1,
            ..DispatchOptions::default()
        });
        let _first = f.spawn_reserve(&["t"], Duration::from_secs(30));
        f.until_waiters(1).await;
        let refused = f
            .dispatcher
            .poll(vec![topic("t")], 1, Duration::from_secs(30))
            .await;
        assert_eq!(refused, Err(DispatchError::TooManyWaiters { limit: 1 }));
        // Without waiting there is no cap.
        assert_eq!(
            f.dispatcher.poll(vec![topic("t")], 1, Duration::ZERO).await,
            Ok(vec![])
        );
    }

    /// A MemoryStore whose `tick` can be made to fail, counting calls.
    struct FlakyTicks {
        inner: MemoryStore,
        failing: AtomicBool,
        ticks: AtomicU64,
        /// When set, `subscribe` hands out this channel, on which nothing is ever sent: the
        /// dispatcher hears of no event (as when a pub/sub message is lost).
        silence: Option<broadcast::Sender<StoreEvent>>,
    }

    #[async_trait]
    impl Store for FlakyTicks {
        fn kind(&self) -> &'static str {
            "flaky"
        }
        async fn push_batch(
            &self,
            jobs: Vec<JobSpec>,
            mode: PushMode,
            now: UnixMillis,
        ) -> StoreResult<Vec<StoreResult<PushOutcome>>> {
            self.inner.push_batch(jobs, mode, now).await
        }
        async fn reserve(&self, t: &[Topic], max: usize, now: UnixMillis) -> StoreResult<Vec<Job>> {
            self.inner.reserve(t, max, now).await
        }
        async fn finish(&self, id: &JobId) -> StoreResult<JobState> {
            self.inner.finish(id).await
        }
        async fn delete(&self, id: &JobId) -> StoreResult<JobState> {
            self.inner.delete(id).await
        }
        async fn release(&self, id: &JobId, d: Option<u64>, now: UnixMillis) -> StoreResult<Job> {
            self.inner.release(id, d, now).await
        }
        async fn touch(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
            self.inner.touch(id, now).await
        }
        async fn bury(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
            self.inner.bury(id, now).await
        }
        async fn kick(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
            self.inner.kick(id, now).await
        }
        async fn kick_topic(&self, t: &Topic, max: u64, now: UnixMillis) -> StoreResult<u64> {
            self.inner.kick_topic(t, max, now).await
        }
        async fn reschedule(
            &self,
            id: &JobId,
            c: Reschedule,
            now: UnixMillis,
        ) -> StoreResult<(Job, JobState)> {
            self.inner.reschedule(id, c, now).await
        }
        async fn get(&self, id: &JobId) -> StoreResult<Job> {
            self.inner.get(id).await
        }
        async fn stats(&self) -> StoreResult<Stats> {
            self.inner.stats().await
        }
        async fn tick(&self, now: UnixMillis, limit: usize) -> StoreResult<TickOutcome> {
            self.ticks.fetch_add(1, Ordering::SeqCst);
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("test outage".into()));
            }
            self.inner.tick(now, limit).await
        }
        fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
            match &self.silence {
                Some(quiet) => quiet.subscribe(),
                None => self.inner.subscribe(),
            }
        }
        async fn ping(&self) -> StoreResult<()> {
            self.inner.ping().await
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn timer_backs_off_while_the_store_fails_and_recovers_after() {
        let store = Arc::new(FlakyTicks {
            inner: MemoryStore::new(),
            failing: AtomicBool::new(true),
            ticks: AtomicU64::new(0),
            silence: None,
        });
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
        let during_outage = store.ticks.load(Ordering::SeqCst);
        // 100 + 200 + 400 ms backoff: about 4 calls in 800 ms; a hot loop makes thousands.
        assert!(
            during_outage <= 10,
            "{during_outage} tick calls during the outage"
        );
        store.failing.store(false, Ordering::SeqCst);
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
        let store = Arc::new(FlakyTicks {
            inner: MemoryStore::new(),
            failing: AtomicBool::new(false),
            ticks: AtomicU64::new(0),
            silence: None,
        });
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
        let ticks = store.ticks.load(Ordering::SeqCst);
        assert!(ticks <= 3, "{ticks} ticks while idle");
        shutdown.cancel();
        joined(task).await;
    }

    /// A newcomer's registration pass must not hand a job to the newcomer while an older waiter
    /// of the same topic waits, even when the job's Ready event never arrived.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_newcomer_does_not_overtake_an_older_waiter_of_its_topic() {
        let store = Arc::new(FlakyTicks {
            inner: MemoryStore::new(),
            failing: AtomicBool::new(false),
            ticks: AtomicU64::new(0),
            silence: Some(broadcast::channel(1).0),
        });
        let clock = Arc::new(SystemClock);
        let dispatcher = Dispatcher::new(store.clone(), clock.clone());
        let shutdown = CancellationToken::new();
        let task = dispatcher.start(shutdown.clone());
        let reserve = |d: &Arc<Dispatcher>| {
            let d = d.clone();
            tokio::spawn(async move { d.poll(vec![topic("t")], 1, Duration::from_secs(30)).await })
        };
        let until = |n: usize| {
            let d = dispatcher.clone();
            async move {
                let deadline = Instant::now() + PROMPT;
                while d.waiters() != n {
                    assert!(Instant::now() < deadline, "never saw {n} waiters");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        };
        let first = reserve(&dispatcher);
        until(1).await;
        // Ready now, but no event tells the dispatcher.
        store
            .push(spec("j1", 0), PushMode::Reject, clock.now())
            .await
            .unwrap();
        let second = reserve(&dispatcher);
        assert_eq!(
            ids(&joined(first).await.unwrap()),
            ["j1"],
            "the older waiter first"
        );
        until(1).await;
        shutdown.cancel();
        assert!(joined(second).await.unwrap().is_empty());
        joined(task).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_of_one_topic_are_served_together_in_arrival_order() {
        let f = fixture();
        let mut waiting = Vec::new();
        for n in 1..=4 {
            waiting.push(f.spawn_reserve(&["t"], Duration::from_secs(30)));
            f.until_waiters(n).await;
        }
        let specs = ["j1", "j2", "j3"].map(|id| spec(id, 0)).to_vec();
        f.store
            .push_batch(specs, PushMode::Reject, f.clock.now())
            .await
            .unwrap();
        let mut got = Vec::new();
        for w in waiting.drain(..3) {
            got.push(ids(&joined(w).await.unwrap()).join(","));
        }
        assert_eq!(got, ["j1", "j2", "j3"], "oldest waiter, best job");
        f.until_waiters(1).await;
        f.shutdown.cancel();
        assert!(joined(waiting.pop().unwrap()).await.unwrap().is_empty());
    }
}
