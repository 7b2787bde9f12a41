//! Prometheus metrics, served at `GET /metrics` (docs/metrics.md lists them).
//!
//! Two kinds. What this instance did: counters of the transitions it made and the histogram of
//! how late it handed jobs out, kept by [`Metered`], a [`Store`] that wraps the real one, so
//! every path that changes jobs (both APIs, the dispatcher's long polls and its timer) is
//! counted once, whatever the backend. What the store holds: job counts by topic and state,
//! read from [`Store::stats`] when scraped, so they are the whole store's, the same on every
//! instance sharing it.
//!
//! Lateness is the time from a job's due time to its delivery, as W1 of the benchmark measures
//! it (docs/benchmarks.md): the time a due job waited for the timer and for a consumer. It is
//! taken from the `now` each reserve is made with, so an injected clock drives it too.

use crate::job::{Job, JobId, JobSpec, JobState, Topic, UnixMillis};
use crate::store::{
    PushMode, PushOutcome, Reschedule, Stats, Store, StoreError, StoreEvent, StoreResult,
    TickOutcome, TopicCounts,
};
use async_trait::async_trait;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::sync::Arc;
use tokio::sync::broadcast;

/// The media type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the lateness histogram's buckets, in seconds: sub-millisecond (the timer's
/// own precision) up to an hour (a backlog nobody consumes).
const LATENESS_BUCKETS: [f64; 18] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0, 3600.0,
];

/// A topic's counts by state, under the API's names of the states (the `state` label).
fn by_state(c: &TopicCounts) -> [(&'static str, u64); 4] {
    [
        ("delayed", c.delayed),
        ("ready", c.ready),
        ("reserved", c.reserved),
        ("dead", c.dead),
    ]
}

/// `value` as the text between a label's quotes: prometheus-client writes label values as
/// they are, and a topic may hold `"` and `\`, which would end the value early and break the
/// whole exposition. The format's third escape, of a newline, is never needed: every topic
/// passed `Topic::parse`, which refuses control characters.
fn label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    topic: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    store: &'static str,
}

/// Every metric of one server, and the registry that renders them.
pub struct Metrics {
    registry: Registry,
    pushed: Counter,
    delivered: Counter,
    redelivered: Counter,
    finished: Counter,
    deleted: Counter,
    released: Counter,
    buried: Counter,
    kicked: Counter,
    rescheduled: Counter,
    touched: Counter,
    promoted: Counter,
    expired: Counter,
    lateness: Histogram,
    store_errors: Family<ErrorLabels, Counter>,
    jobs: Family<JobLabels, Gauge>,
    store_up: Gauge,
    waiting: Gauge,
    /// One scrape at a time: each clears and refills the job gauges.
    scrape: tokio::sync::Mutex<()>,
}

impl Metrics {
    /// The metrics of a server over a store of `store_kind` (`Store::kind`).
    pub fn new(store_kind: &'static str) -> Metrics {
        let mut registry = Registry::with_prefix("delayq");
        let mut counter = |name: &str, help: &str| {
            let c = Counter::default();
            registry.register(name, help, c.clone());
            c
        };
        let pushed = counter(
            "jobs_pushed",
            "Jobs stored by a push (created, or replacing one)",
        );
        let delivered = counter(
            "jobs_delivered",
            "Jobs handed to a consumer (reserve, seed /pop), redeliveries included",
        );
        let redelivered = counter(
            "jobs_redelivered",
            "Deliveries of a job that had been delivered before (attempt 2 or later)",
        );
        let finished = counter(
            "jobs_finished",
            "Jobs finished (acknowledged) by a consumer",
        );
        let deleted = counter(
            "jobs_deleted",
            "Jobs deleted (seed /delete, DELETE /v1/jobs)",
        );
        let released = counter(
            "jobs_released",
            "Reserved jobs handed back by their consumer",
        );
        let buried = counter(
            "jobs_buried",
            "Jobs buried (dead), by a consumer or max_attempts",
        );
        let kicked = counter("jobs_kicked", "Dead jobs kicked back to ready");
        let rescheduled = counter("jobs_rescheduled", "Jobs given a new due time");
        let touched = counter("jobs_touched", "Reservations extended by their consumer");
        let promoted = counter(
            "jobs_promoted",
            "Delayed jobs this instance's timer made ready when they fell due",
        );
        let expired = counter(
            "reservations_expired",
            "Reservations this instance's timer ended because their TTR ran out",
        );
        let lateness = Histogram::new(LATENESS_BUCKETS);
        registry.register_with_unit(
            "delivery_lateness",
            "Time from a job's due time to its delivery to a consumer",
            Unit::Seconds,
            lateness.clone(),
        );
        let store_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "store_errors",
            "Store calls that failed: unavailable (unreachable, refusing, timed out) or corrupt",
            store_errors.clone(),
        );
        let jobs = Family::<JobLabels, Gauge>::default();
        registry.register(
            "jobs",
            "Jobs in the store by topic and state (the whole store's, read at scrape time)",
            jobs.clone(),
        );
        let store_up = Gauge::default();
        registry.register(
            "store_up",
            "1 if the store answered this scrape's count query, else 0",
            store_up.clone(),
        );
        let waiting = Gauge::default();
        registry.register(
            "waiting_consumers",
            "Long polls (reserve, seed /pop) waiting in this instance for a job",
            waiting.clone(),
        );
        registry.register(
            "build",
            "The running delayq: its version and store",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                store: store_kind,
            }),
        );
        Metrics {
            registry,
            pushed,
            delivered,
            redelivered,
            finished,
            deleted,
            released,
            buried,
            kicked,
            rescheduled,
            touched,
            promoted,
            expired,
            lateness,
            store_errors,
            jobs,
            store_up,
            waiting,
            scrape: tokio::sync::Mutex::new(()),
        }
    }

    /// The exposition text: the job gauges read from `store` now, `waiting` long polls, and
    /// every counter.
    pub async fn render(&self, store: &dyn Store, waiting: usize) -> String {
        let _one = self.scrape.lock().await;
        self.jobs.clear();
        match store.stats().await {
            Ok(stats) => {
                self.store_up.set(1);
                for (topic, counts) in &stats.topics {
                    for (state, count) in by_state(counts) {
                        let labels = JobLabels {
                            topic: label_value(topic.as_str()),
                            state,
                        };
                        self.jobs
                            .get_or_create(&labels)
                            .set(i64::try_from(count).unwrap_or(i64::MAX));
                    }
                }
            }
            Err(e) => {
                self.store_up.set(0);
                tracing::debug!(error = %e, "metrics: the store did not answer its counts");
            }
        }
        self.waiting.set(i64::try_from(waiting).unwrap_or(i64::MAX));
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// Counts the jobs a reserve made at `now` handed out, and how late each was.
    fn count_deliveries(&self, jobs: &[Job], now: UnixMillis) {
        self.delivered.inc_by(jobs.len() as u64);
        for j in jobs {
            if j.attempts > 1 {
                self.redelivered.inc();
            }
            let late_ms = now.saturating_sub(j.spec.run_at);
            self.lateness.observe(late_ms as f64 / 1000.0);
        }
    }

    /// Counts a failed store call by kind; refusals about one job (not found, wrong state,
    /// exists) are answers, not failures.
    fn failed(&self, e: &StoreError) {
        let error = match e {
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Corrupt(_) => "corrupt",
            _ => return,
        };
        self.store_errors
            .get_or_create(&ErrorLabels { error })
            .inc();
    }

    /// Passes `r` through, counting an error.
    fn seen<T>(&self, r: StoreResult<T>) -> StoreResult<T> {
        if let Err(e) = &r {
            self.failed(e);
        }
        r
    }

    /// Passes `r` through, counting an error, or `counter` once if it is `Ok`.
    fn one<T>(&self, counter: &Counter, r: StoreResult<T>) -> StoreResult<T> {
        if r.is_ok() {
            counter.inc();
        }
        self.seen(r)
    }

    /// Passes a batch's results through, counting its `Ok` items on `counter` and its errors.
    fn each<T>(
        &self,
        counter: &Counter,
        r: StoreResult<Vec<StoreResult<T>>>,
    ) -> StoreResult<Vec<StoreResult<T>>> {
        if let Ok(items) = &r {
            for e in items.iter().filter_map(|i| i.as_ref().err()) {
                self.failed(e);
            }
            counter.inc_by(items.iter().filter(|i| i.is_ok()).count() as u64);
        }
        self.seen(r)
    }
}

/// A [`Store`] that counts what the store it wraps does in [`Metrics`] and changes nothing.
pub struct Metered {
    inner: Arc<dyn Store>,
    metrics: Arc<Metrics>,
}

impl Metered {
    pub fn new(inner: Arc<dyn Store>, metrics: Arc<Metrics>) -> Metered {
        Metered { inner, metrics }
    }
}

#[async_trait]
impl Store for Metered {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    async fn push_batch(
        &self,
        jobs: Vec<JobSpec>,
        mode: PushMode,
        now: UnixMillis,
    ) -> StoreResult<Vec<StoreResult<PushOutcome>>> {
        let r = self.inner.push_batch(jobs, mode, now).await;
        self.metrics.each(&self.metrics.pushed, r)
    }

    async fn reserve(
        &self,
        topics: &[Topic],
        max: usize,
        now: UnixMillis,
    ) -> StoreResult<Vec<Job>> {
        let r = self.inner.reserve(topics, max, now).await;
        if let Ok(jobs) = &r {
            self.metrics.count_deliveries(jobs, now);
        }
        self.metrics.seen(r)
    }

    async fn finish(&self, id: &JobId) -> StoreResult<JobState> {
        let r = self.inner.finish(id).await;
        self.metrics.one(&self.metrics.finished, r)
    }

    async fn finish_batch(&self, ids: &[JobId]) -> StoreResult<Vec<StoreResult<JobState>>> {
        let r = self.inner.finish_batch(ids).await;
        self.metrics.each(&self.metrics.finished, r)
    }

    async fn delete(&self, id: &JobId) -> StoreResult<JobState> {
        let r = self.inner.delete(id).await;
        self.metrics.one(&self.metrics.deleted, r)
    }

    async fn release(
        &self,
        id: &JobId,
        delay_ms: Option<u64>,
        now: UnixMillis,
    ) -> StoreResult<Job> {
        let r = self.inner.release(id, delay_ms, now).await;
        if let Ok(job) = &r {
            // Released past max_attempts: buried instead.
            let dead = job.state == JobState::Dead;
            let m = &self.metrics;
            (if dead { &m.buried } else { &m.released }).inc();
        }
        self.metrics.seen(r)
    }

    async fn touch(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
        let r = self.inner.touch(id, now).await;
        self.metrics.one(&self.metrics.touched, r)
    }

    async fn bury(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
        let r = self.inner.bury(id, now).await;
        self.metrics.one(&self.metrics.buried, r)
    }

    async fn kick(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job> {
        let r = self.inner.kick(id, now).await;
        self.metrics.one(&self.metrics.kicked, r)
    }

    async fn kick_topic(&self, topic: &Topic, max: u64, now: UnixMillis) -> StoreResult<u64> {
        let r = self.inner.kick_topic(topic, max, now).await;
        if let Ok(n) = &r {
            self.metrics.kicked.inc_by(*n);
        }
        self.metrics.seen(r)
    }

    async fn reschedule(
        &self,
        id: &JobId,
        change: Reschedule,
        now: UnixMillis,
    ) -> StoreResult<(Job, JobState)> {
        let r = self.inner.reschedule(id, change, now).await;
        self.metrics.one(&self.metrics.rescheduled, r)
    }

    async fn get(&self, id: &JobId) -> StoreResult<Job> {
        let r = self.inner.get(id).await;
        self.metrics.seen(r)
    }

    async fn stats(&self) -> StoreResult<Stats> {
        let r = self.inner.stats().await;
        self.metrics.seen(r)
    }

    async fn tick(&self, now: UnixMillis, limit: usize) -> StoreResult<TickOutcome> {
        let r = self.inner.tick(now, limit).await;
        if let Ok(t) = &r {
            self.metrics.promoted.inc_by(t.promoted);
            self.metrics.expired.inc_by(t.expired);
        }
        self.metrics.seen(r)
    }

    fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.inner.subscribe()
    }

    async fn ping(&self) -> StoreResult<()> {
        let r = self.inner.ping().await;
        self.metrics.seen(r)
    }
}
