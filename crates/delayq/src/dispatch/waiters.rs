//! The long-poll waiters: the wait list, registration, and the one task that serves it.
//!
//! [`Waiters::poll`] first asks the store (which never waits), unless older callers already
//! wait on one of its topics: then it queues behind them. If nothing is ready and the caller
//! may wait, it registers a waiter (topics, max, a oneshot sender) in arrival order and awaits
//! the oneshot with its timeout. No store connection is held while waiting. A single serving
//! task reacts to the store's events: on `Ready(topic)` it serves the waiters interested in
//! that topic; on `Resync`/lag it serves every waiter. Which waiters each store call serves,
//! and who gets which job, is the serving plan's (plan.rs): first come first served, one
//! `reserve` for all the waiters asking for the same topic list, so a busy topic costs one store
//! call per batch of consumers, not per consumer. This file only performs the plan.
//!
//! The lost wake-up (a job becomes ready between the caller's first try and its registration)
//! is closed by having the serving task also serve every newly registered waiter once, unless
//! no store event has been taken from the channel since the caller's first try began: a job
//! that became ready after that try comes with an event still to be taken, and that event's
//! pass serves the waiter. So a consumer that waits for the next job costs one `reserve` that
//! finds nothing, not two (the serving task counts the events it takes, the caller reads the
//! count before its try). While a
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
//! Not here: the timer that makes delayed jobs ready (timer.rs), the HTTP long-poll parameters
//! (api/).

mod plan;

use super::error_log::ErrorLog;
use super::{DispatchError, WAITER_SAFETY_INTERVAL};
use crate::clock::Clock;
use crate::job::{Job, Topic};
use crate::store::{Store, StoreError, StoreEvent};
use foldhash::{HashSet, HashSetExt};
use plan::{Candidate, Pass, Scope, Step};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{Notify, broadcast, oneshot};
use tokio_util::sync::CancellationToken;

/// A registered waiter. Ids increase with registration, so their order is arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct WaiterId(u64);

/// One waiting `reserve` call.
struct Waiter {
    topics: Vec<Topic>,
    max: usize,
    /// Where the serving task delivers; closed when the caller stopped waiting.
    answer: oneshot::Sender<Vec<Job>>,
    /// Registered since the serving task last looked: it must be served once even without an
    /// event (closes the lost wake-up window), unless `looked` says it need not.
    newcomer: bool,
    /// The caller asked the store itself and found nothing, having read
    /// [`Waiters::events_taken`] just before: while no event has been taken since, the newcomer
    /// pass has nothing to find for it and skips its store call. `None`: it queued behind older
    /// waiters without asking.
    looked: Option<u64>,
}

/// The waiters in arrival order.
#[derive(Default)]
struct WaitList {
    next_id: u64,
    waiting: BTreeMap<WaiterId, Waiter>,
}

impl WaitList {
    /// The waiters as the serving plan sees them, in arrival order.
    fn candidates(&self) -> impl Iterator<Item = Candidate<'_>> {
        self.waiting.iter().map(|(&id, w)| Candidate {
            id,
            topics: &w.topics,
            max: w.max,
            gone: w.answer.is_closed(),
        })
    }

    /// The scope of a pass for the newcomers, who are no longer newcomers once it is taken:
    /// one registering meanwhile stays a newcomer for the next pass. A newcomer that found
    /// nothing in the store when no event has been taken since (`events_taken`) adds no
    /// topic: anything that became ready after its look comes with an event not yet taken,
    /// whose pass serves it.
    fn take_newcomers(&mut self, events_taken: u64) -> Scope {
        let mut topics = HashSet::new();
        for w in self.waiting.values_mut().filter(|w| w.newcomer) {
            w.newcomer = false;
            if w.looked != Some(events_taken) {
                topics.extend(w.topics.iter().cloned());
            }
        }
        Scope::Newcomers(topics)
    }

    /// Records a step of the plan: the waiters it looked at are no longer newcomers, those
    /// that stopped waiting leave the list.
    fn apply(&mut self, step: &Step) {
        for id in &step.looked_at {
            if let Some(w) = self.waiting.get_mut(id) {
                w.newcomer = false;
            }
        }
        for id in &step.gone {
            self.waiting.remove(id);
        }
    }
}

/// The wait list of a dispatcher, and what registers in it and serves it.
pub(super) struct Waiters {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    /// Cap on registered waiters; one more is refused with [`DispatchError::TooManyWaiters`].
    max_waiters: usize,
    list: Mutex<WaitList>,
    /// Wakes the serving task when a waiter registers, so it serves the newcomer once.
    newcomer_registered: Notify,
    /// Store events the serving task has taken from its channel (each counted before it is
    /// served): a caller that reads it before asking the store, finds nothing and registers
    /// needs no newcomer pass while it is unchanged (see `take_newcomers`).
    events_taken: AtomicU64,
    /// Cancelled on shutdown: the serving task answers every waiter with nothing and stops;
    /// later polls do not wait.
    stopping: CancellationToken,
}

impl Waiters {
    pub(super) fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        max_waiters: usize,
        stopping: CancellationToken,
    ) -> Waiters {
        Waiters {
            store,
            clock,
            max_waiters,
            list: Mutex::new(WaitList::default()),
            newcomer_registered: Notify::new(),
            events_taken: AtomicU64::new(0),
            stopping,
        }
    }

    /// How many `reserve` calls are waiting now.
    pub(super) fn count(&self) -> usize {
        self.lock().waiting.len()
    }

    /// [`Dispatcher::poll`](super::Dispatcher::poll): the store at once, else a wait in the
    /// list (see the module docs).
    pub(super) async fn poll(
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
        let mut looked = None;
        if wait.is_zero() || !self.anyone_waits_on(&topics) {
            let events_taken = self.events_taken.load(Ordering::SeqCst);
            let jobs = self.store.reserve(&topics, max, self.clock.now()).await?;
            if !jobs.is_empty() || wait.is_zero() || self.stopping.is_cancelled() {
                return Ok(jobs);
            }
            looked = Some(events_taken);
        }
        let (id, mut rx) = self.register(topics.clone(), max, looked)?;
        // Deregisters on every exit, including the future being dropped mid-wait.
        let _registration = Registration { waiters: self, id };
        self.newcomer_registered.notify_one();
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
            .waiting
            .values()
            .any(|w| !w.answer.is_closed() && w.topics.iter().any(|t| topics.contains(t)))
    }

    fn lock(&self) -> MutexGuard<'_, WaitList> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a newcomer at the end of the list, unless `max_waiters` are already there.
    fn register(
        &self,
        topics: Vec<Topic>,
        max: usize,
        looked: Option<u64>,
    ) -> Result<(WaiterId, oneshot::Receiver<Vec<Job>>), DispatchError> {
        let mut list = self.lock();
        if list.waiting.len() >= self.max_waiters {
            return Err(DispatchError::TooManyWaiters {
                limit: self.max_waiters,
            });
        }
        let (answer, rx) = oneshot::channel();
        let id = WaiterId(list.next_id);
        list.next_id += 1;
        list.waiting.insert(
            id,
            Waiter {
                topics,
                max,
                answer,
                newcomer: true,
                looked,
            },
        );
        Ok((id, rx))
    }

    /// The serving task: serves on events, newcomers and the safety re-check until shutdown,
    /// then answers every waiter with nothing. `events` is subscribed before the task starts.
    pub(super) async fn serve_until_shutdown(&self, mut events: broadcast::Receiver<StoreEvent>) {
        // The first re-check one interval from now (an interval's first tick is at once).
        let mut safety = tokio::time::interval_at(
            tokio::time::Instant::now() + WAITER_SAFETY_INTERVAL,
            WAITER_SAFETY_INTERVAL,
        );
        safety.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut errors = ErrorLog::new("reserve for waiters");
        let mut events_open = true;
        loop {
            tokio::select! {
                _ = self.stopping.cancelled() => break,
                _ = self.newcomer_registered.notified() => {
                    // Without events, every newcomer is looked at.
                    let events_taken = if events_open {
                        self.events_taken.load(Ordering::SeqCst)
                    } else {
                        u64::MAX
                    };
                    let newcomers = self.lock().take_newcomers(events_taken);
                    self.serve(newcomers, &mut errors).await;
                }
                ev = events.recv(), if events_open => {
                    // Counted before it is served: a caller that looked at the store before
                    // this event was taken is served by this pass or by the newcomer pass.
                    self.events_taken.fetch_add(1, Ordering::SeqCst);
                    match ev {
                    Ok(StoreEvent::Ready(topic)) => self.serve(Scope::Topic(topic), &mut errors).await,
                    Ok(StoreEvent::Due(_)) => {}
                    Ok(StoreEvent::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        self.serve(Scope::All, &mut errors).await;
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        tracing::warn!("store event channel closed; waiters now rely on the safety re-check");
                        events_open = false;
                    }
                }},
                _ = safety.tick() => {
                    if self.count() > 0 {
                        self.serve(Scope::All, &mut errors).await;
                    }
                }
            }
        }
        // Shutdown: every waiter gets "nothing" now.
        let waiting = std::mem::take(&mut self.lock().waiting);
        for (_, w) in waiting {
            let _ = w.answer.send(Vec::new());
        }
    }

    /// One serving pass over the waiters in `scope`: each batch the plan makes is one
    /// `reserve`, its jobs handed out as the plan says, until the plan has no batch left.
    async fn serve(&self, scope: Scope, errors: &mut ErrorLog) {
        let mut pass = Pass::new(scope);
        loop {
            let batch = {
                let mut list = self.lock();
                let step = pass.next_batch(list.candidates());
                list.apply(&step);
                step.batch
            };
            let Some(batch) = batch else {
                return;
            };
            match self
                .store
                .reserve(&batch.topics, batch.ask, self.clock.now())
                .await
            {
                Ok(jobs) => {
                    errors.recovered();
                    for (id, jobs) in pass.share(batch, jobs) {
                        self.deliver(id, jobs).await;
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
    async fn deliver(&self, id: WaiterId, jobs: Vec<Job>) {
        let waiter = self.lock().waiting.remove(&id);
        let undelivered = match waiter {
            Some(w) => w.answer.send(jobs).err(),
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

/// Removes a waiter when its `reserve` call ends, however it ends.
struct Registration<'a> {
    waiters: &'a Waiters,
    id: WaiterId,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.waiters.lock().waiting.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::super::Dispatcher;
    use super::super::test_fixture::*;
    use super::super::timer::tests::FlakyTicks;
    use super::super::{DispatchError, DispatchOptions};
    use super::*;
    use crate::clock::SystemClock;
    use crate::job::{JobId, JobSpec, JobState};
    use crate::store::hook::{Hooked, StoreHook};
    use crate::store::memory::MemoryStore;
    use crate::store::{Call, PushMode, Reply};
    use tokio::time::Instant;
    use tokio_util::sync::CancellationToken;

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

    /// Counts the reserves that reach the store. With `race` set, the answer of the first one
    /// waits until a job due now was pushed and the serving task took its event: the job
    /// became ready between a caller's try and its registration.
    struct Reserves {
        calls: AtomicU64,
        race: bool,
        memory: Arc<MemoryStore>,
        waiters: std::sync::OnceLock<Arc<Waiters>>,
    }

    impl StoreHook for Reserves {
        fn before(&self, call: &Call<'_>) -> Result<(), StoreError> {
            if let Call::Reserve { .. } = call {
                self.calls.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        }

        fn settle(
            &self,
            call: &Call<'_>,
            _: Result<Reply<'_>, &StoreError>,
            _: &[JobSpec],
        ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send + 'static {
            let first =
                matches!(call, Call::Reserve { .. }) && self.calls.load(Ordering::SeqCst) == 1;
            let race =
                (self.race && first).then(|| (self.memory.clone(), self.waiters.get().cloned()));
            async move {
                if let Some((memory, Some(waiters))) = race {
                    memory
                        .push(spec("j1", 0), PushMode::Reject, SystemClock.now())
                        .await
                        .unwrap();
                    while waiters.events_taken.load(Ordering::SeqCst) == 0 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                Ok(())
            }
        }
    }

    /// Waiters over a memory store behind [`Reserves`], their serving task running.
    fn counted(race: bool) -> (Arc<Waiters>, Arc<Reserves>) {
        let memory = Arc::new(MemoryStore::new());
        let hook = Arc::new(Reserves {
            calls: AtomicU64::new(0),
            race,
            memory: memory.clone(),
            waiters: std::sync::OnceLock::new(),
        });
        let store = Arc::new(Hooked::new(memory, hook.clone()));
        let waiters = Arc::new(Waiters::new(
            store.clone(),
            Arc::new(SystemClock),
            100,
            CancellationToken::new(),
        ));
        let _ = hook.waiters.set(waiters.clone());
        let events = store.subscribe();
        let serving = waiters.clone();
        tokio::spawn(async move { serving.serve_until_shutdown(events).await });
        (waiters, hook)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_consumer_costs_one_empty_reserve_not_two() {
        let (waiters, hook) = counted(false);
        let waiting = {
            let w = waiters.clone();
            tokio::spawn(async move { w.poll(vec![topic("t")], 1, Duration::from_secs(30)).await })
        };
        while waiters.count() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The serving task has been woken for the newcomer; give it time to ask the store.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            hook.calls.load(Ordering::SeqCst),
            1,
            "only the caller's own try; events taken: {}",
            waiters.events_taken.load(Ordering::SeqCst)
        );
        hook.memory
            .push(spec("j1", 0), PushMode::Reject, SystemClock.now())
            .await
            .unwrap();
        assert_eq!(ids(&joined(waiting).await.unwrap()), ["j1"]);
        assert_eq!(hook.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_ready_between_the_try_and_the_registration_is_served_at_once() {
        let (waiters, _hook) = counted(true);
        let started = Instant::now();
        let jobs = waiters
            .poll(vec![topic("t")], 1, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(ids(&jobs), ["j1"]);
        // Not by the safety re-check (every second): by the newcomer pass.
        assert!(
            started.elapsed() < WAITER_SAFETY_INTERVAL / 2,
            "{:?}",
            started.elapsed()
        );
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
        let (id, rx) = f
            .dispatcher
            .waiters
            .register(vec![topic("t")], 1, None)
            .unwrap();
        drop(rx);
        let jobs = f
            .store
            .reserve(&[topic("t")], 1, f.clock.now())
            .await
            .unwrap();
        f.dispatcher.waiters.deliver(id, jobs).await;
        let job = f.store.get(&JobId::parse("j1").unwrap()).await.unwrap();
        assert_eq!(job.state, JobState::Ready);
        assert_eq!(job.attempts, 1, "the handed-back delivery is counted");
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

    /// A newcomer's registration pass must not hand a job to the newcomer while an older waiter
    /// of the same topic waits, even when the job's Ready event never arrived.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_newcomer_does_not_overtake_an_older_waiter_of_its_topic() {
        let store = FlakyTicks::store(false, Some(broadcast::channel(1).0));
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
