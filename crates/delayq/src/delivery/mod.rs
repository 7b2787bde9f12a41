//! Push delivery: delayq calls a callback job's URL, or publishes a publish job to RabbitMQ
//! ([`crate::amqp`]), when the job is due, instead of waiting for a consumer. One loop with two
//! transports, written once over [`Store`], so every store (and every instance sharing one)
//! delivers the same way, with pull's guarantees:
//!
//! 1. The [`Deliverer`] task listens for [`StoreEvent::Ready`] of callback queues
//!    ([`Topic::callback_queue`]), plus a sweep of [`Store::stats`] at start, after missed
//!    events and every [`SWEEP_INTERVAL`].
//! 2. It reserves ready callback jobs like a consumer. The reservation lasts the call's timeout
//!    plus [`job::CALLBACK_GRACE_MS`] (a callback job's `ttr_ms`), so no other instance calls
//!    the job while this call may still run; a crash mid-call leaves the job reserved, and its
//!    TTR running out makes it due again (at least once).
//! 3. Each job is attempted in its own task. A callback job once its host has room
//!    (`max_in_flight_per_host`): `POST` of the body, signed ([`sign`]), redirects not
//!    followed, within the timeout. A publish job at once: published and confirmed within the
//!    publish timeout (its TTR is at least that plus the grace).
//! 4. A 2xx or a confirm finishes the job; anything else releases it ([`Store::release`]): its
//!    backoff schedule, or the `Retry-After` asked for, decides the next attempt, and
//!    `max_attempts` when it is dead.
//!
//! Limits: at most `max_in_flight` jobs held (calling or waiting for their host) per instance,
//! at most `max_in_flight_per_host` calls to one host (`host:port`) at once, and at most that
//! many of one queue's jobs waiting for their host: a queue whose jobs wait for a host at its
//! limit is not read further until they move, so a destination that hangs holds at most twice
//! its limit of jobs per topic, and other destinations go on.
//!
//! Here: the loop, the reservation, the limits, finish or release and the backoff. Not here:
//! one HTTP call and its request's shape ([`callback`]), one publish ([`publish`]), the outcome
//! rules ([`outcome`]), the allowed destinations ([`allow`]), the signature ([`sign`]).

pub mod allow;
mod callback;
pub mod outcome;
mod publish;
pub mod sign;

use crate::amqp::Broker;
use crate::clock::Clock;
use crate::dispatch::error_log::ErrorLog;
use crate::job::{self, Job, Topic};
use crate::metrics::Metrics;
use crate::store::{Store, StoreError, StoreEvent};
use allow::AllowList;
use callback::Caller;
use sign::WebhookSecret;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, broadcast};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Default `callback_max_in_flight`.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;
/// Default `callback_max_in_flight_per_host`.
pub const DEFAULT_MAX_IN_FLIGHT_PER_HOST: usize = 32;
/// How often the store's counts are read for ready callback jobs, whatever the events said
/// (safety net, as the waiters' re-check).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// Most jobs one reserve takes.
const RESERVE_BATCH: usize = 100;
/// A reservation with less than this left beyond the call's timeout is extended before the
/// call (after a wait for the host), so the call never outlives it.
const RESERVATION_MARGIN_MS: u64 = 1_000;
/// How long shutdown waits for calls in flight before leaving them to their TTR.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// What the deliverer is told: the callback settings.
#[derive(Clone)]
pub struct DeliveryOptions {
    pub secrets: Vec<WebhookSecret>,
    pub allow: AllowList,
    pub max_in_flight: usize,
    pub max_in_flight_per_host: usize,
    /// The RabbitMQ bridge publish jobs go through (`--amqp`); without it their attempts fail
    /// as `not_configured`.
    pub amqp: Option<Arc<Broker>>,
}

impl Default for DeliveryOptions {
    fn default() -> Self {
        DeliveryOptions {
            secrets: Vec::new(),
            allow: AllowList::default(),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_in_flight_per_host: DEFAULT_MAX_IN_FLIGHT_PER_HOST,
            amqp: None,
        }
    }
}

/// Why push delivery could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// The callbacks' HTTP client could not be built (only without a TLS provider).
    #[error("cannot build the callback HTTP client")]
    Client(#[source] reqwest::Error),
}

/// The push-delivery task of one server (module docs). Cheap to build; [`Deliverer::start`]
/// runs it.
pub struct Deliverer {
    shared: Arc<Shared>,
}

/// What the task and every call task share.
struct Shared {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    caller: Caller,
    amqp: Option<Arc<Broker>>,
    per_host: usize,
    /// Permits for jobs held: reserved and not yet finished or released.
    held: Arc<Semaphore>,
    /// One semaphore per host with calls running or waiting; removed when idle.
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Per queue, its jobs waiting for their host.
    parked: Mutex<HashMap<Topic, usize>>,
    /// Woken when a job is done with or leaves the wait for its host.
    room: Notify,
}

impl Deliverer {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        options: DeliveryOptions,
    ) -> Result<Deliverer, DeliveryError> {
        let caller = Caller::new(options.secrets, options.allow)?;
        Ok(Deliverer {
            shared: Arc::new(Shared {
                store,
                clock,
                metrics,
                caller,
                amqp: options.amqp,
                per_host: options.max_in_flight_per_host.max(1),
                held: Arc::new(Semaphore::new(options.max_in_flight.max(1))),
                hosts: Mutex::new(HashMap::new()),
                parked: Mutex::new(HashMap::new()),
                room: Notify::new(),
            }),
        })
    }

    /// Starts delivering until `stop` is cancelled; the handle ends once calls in flight have
    /// ended (or after [`STOP_TIMEOUT`], leaving the rest to their reservations' TTR).
    pub fn start(&self, stop: CancellationToken) -> JoinHandle<()> {
        let shared = self.shared.clone();
        let events = shared.store.subscribe();
        tokio::spawn(async move {
            let calls = tokio_util::task::TaskTracker::new();
            run(&shared, events, &stop, &calls).await;
            calls.close();
            if tokio::time::timeout(STOP_TIMEOUT, calls.wait())
                .await
                .is_err()
            {
                tracing::info!(
                    "callbacks still running at shutdown; their jobs are called again after their TTR"
                );
            }
        })
    }
}

/// Callback queues that may have ready jobs, served in turn, each once.
#[derive(Default)]
struct Pending {
    order: VecDeque<Topic>,
    queued: HashSet<Topic>,
}

impl Pending {
    fn add(&mut self, queue: Topic) {
        if self.queued.insert(queue.clone()) {
            self.order.push_back(queue);
        }
    }

    fn take(&mut self) -> Option<Topic> {
        let queue = self.order.pop_front()?;
        self.queued.remove(&queue);
        Some(queue)
    }

    fn len(&self) -> usize {
        self.order.len()
    }
}

async fn run(
    shared: &Arc<Shared>,
    mut events: broadcast::Receiver<StoreEvent>,
    stop: &CancellationToken,
    calls: &tokio_util::task::TaskTracker,
) {
    let mut pending = Pending::default();
    let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sweep_errors = ErrorLog::new("callback sweep");
    let mut errors = ErrorLog::new("callback reserve");
    loop {
        let mut sweep_now = false;
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            ev = events.recv() => match ev {
                Ok(StoreEvent::Ready(queue)) if queue.callback_topic().is_some() => pending.add(queue),
                Ok(StoreEvent::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => sweep_now = true,
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = sweep.tick() => sweep_now = true,
            _ = shared.room.notified() => {}
        }
        if sweep_now {
            match shared.store.stats().await {
                Ok(stats) => {
                    sweep_errors.recovered();
                    for (topic, counts) in stats.callbacks {
                        if counts.ready > 0 {
                            pending.add(topic.callback_queue());
                        }
                    }
                }
                Err(e) => sweep_errors.failed(&e),
            }
        }
        serve(shared, &mut pending, calls, &mut errors).await;
    }
}

/// Reserves what the limits allow from each pending queue in turn and starts its calls.
async fn serve(
    shared: &Arc<Shared>,
    pending: &mut Pending,
    calls: &tokio_util::task::TaskTracker,
    errors: &mut ErrorLog,
) {
    let mut turns = pending.len();
    while turns > 0 {
        turns -= 1;
        let Some(queue) = pending.take() else {
            return;
        };
        let free = shared.held.available_permits();
        let parked = shared.parked(&queue);
        let room = free
            .min(shared.per_host.saturating_sub(parked))
            .min(RESERVE_BATCH);
        if room == 0 {
            // Kept for when a job is done with (`room` wakes the loop).
            pending.add(queue);
            if free == 0 {
                return;
            }
            continue;
        }
        let now = shared.clock.now();
        let jobs = match shared
            .store
            .reserve(std::slice::from_ref(&queue), room, now)
            .await
        {
            Ok(jobs) => {
                errors.recovered();
                jobs
            }
            Err(e) => {
                errors.failed(&e);
                pending.add(queue);
                return;
            }
        };
        if jobs.len() == room {
            // There may be more: this queue's turn comes again.
            pending.add(queue.clone());
            turns += 1;
        }
        for job in jobs {
            // Only this task takes permits, and `room` is at most what was free.
            let Ok(permit) = shared.held.clone().try_acquire_owned() else {
                tracing::error!("callback permits ran out; the job is called after its TTR");
                break;
            };
            shared.park(&queue, 1);
            shared.metrics.callbacks_held(1);
            let shared = shared.clone();
            let queue = queue.clone();
            calls.spawn(async move {
                attempt(&shared, job, &queue).await;
                shared.metrics.callbacks_held(-1);
                drop(permit);
                shared.room.notify_one();
            });
        }
    }
}

impl Shared {
    fn parked(&self, queue: &Topic) -> usize {
        let parked = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        parked.get(queue).copied().unwrap_or(0)
    }

    /// Adds `delta` (±1) to a queue's jobs waiting for their host.
    fn park(&self, queue: &Topic, delta: isize) {
        let mut parked = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        let n = parked.entry(queue.clone()).or_default();
        *n = n.saturating_add_signed(delta);
        if *n == 0 {
            parked.remove(queue);
        }
    }

    /// Waits for room to call `host`.
    async fn host_permit(&self, host: &str) -> OwnedSemaphorePermit {
        let sem = {
            let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
            hosts
                .entry(host.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_host)))
                .clone()
        };
        // The semaphore is never closed.
        sem.acquire_owned()
            .await
            .expect("host semaphores are never closed")
    }

    /// Forgets a host's semaphore once nobody calls or waits for it.
    fn host_done(&self, host: &str) {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sem) = hosts.get(host)
            && Arc::strong_count(sem) == 1
            && sem.available_permits() == self.per_host
        {
            hosts.remove(host);
        }
    }
}

/// How one attempt of either transport ended, for the common ending.
struct Ended {
    finished: bool,
    /// The delay a `Retry-After` asked for (HTTP only).
    retry_after_ms: Option<u64>,
}

/// One attempt of one reserved job by its transport (an HTTP call or an AMQP publish), then
/// finish it on success or release it for its next attempt.
async fn attempt(shared: &Shared, job: Job, queue: &Topic) {
    let ended = if let Some(target) = &job.spec.publish {
        shared.park(queue, -1);
        shared.room.notify_one();
        publish::attempt(shared, &job, target).await
    } else if let Some(cb) = &job.spec.callback {
        callback::attempt(shared, &job, cb, queue).await
    } else {
        // Only callback and publish jobs are in callback queues; a pull job here would be a
        // store bug.
        shared.park(queue, -1);
        tracing::error!(job_id = %job.spec.id, "a pull job in a callback queue");
        return;
    };
    let Some(ended) = ended else {
        return;
    };
    let id = &job.spec.id;
    let now = shared.clock.now();
    let result = if ended.finished {
        shared.store.finish(id).await.map(drop)
    } else {
        let delay = job::callback_retry_delay(&job.spec, job.attempts, ended.retry_after_ms);
        shared.store.release(id, Some(delay), now).await.map(drop)
    };
    match result {
        Ok(()) | Err(StoreError::NotFound) => {}
        Err(e @ StoreError::WrongState(_)) => {
            tracing::debug!(job_id = %id, error = %e, "pushed job changed during its attempt");
        }
        Err(e) => tracing::warn!(
            job_id = %id,
            error = %e,
            "cannot record the attempt's outcome; the job is tried again after its TTR"
        ),
    }
}

/// Makes sure the reservation outlives an attempt of `attempt_ms` starting now (a wait for
/// the host may have used it up); `false` when the job is no longer this attempt's.
async fn hold_for(shared: &Shared, job: &Job, attempt_ms: u64) -> bool {
    let now = shared.clock.now();
    let need = job::after(now, attempt_ms.saturating_add(RESERVATION_MARGIN_MS));
    if job.reserved_until.is_none_or(|until| until < need)
        && let Err(e) = shared.store.touch(&job.spec.id, now).await
    {
        // Deleted, or no longer reserved by this attempt: not ours any more.
        tracing::debug!(job_id = %job.spec.id, error = %e, "pushed job gone before its attempt");
        return false;
    }
    true
}
