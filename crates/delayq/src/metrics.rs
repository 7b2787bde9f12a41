//! Prometheus metrics, served at `GET /metrics` (docs/metrics.md lists them), in OpenMetrics
//! or the Prometheus text format 0.0.4 as the scraper's `Accept` asks ([`Format`]).
//!
//! Two kinds. What this instance did: counters of the transitions it made and the histogram of
//! how late it handed jobs out, kept by [`Metrics`] as a hook around the real store
//! ([`Metered`]), so every path that changes jobs (both APIs, the dispatcher's long polls and
//! its timer) is counted once, whatever the backend. What the store holds: job counts by topic and state,
//! read from [`Store::stats`] when scraped, so they are the whole store's, the same on every
//! instance sharing it.
//!
//! Lateness is the time from a job's due time to its delivery, as W1 of the benchmark measures
//! it (docs/benchmarks.md): the time a due job waited for the timer and for a consumer. It is
//! taken from the `now` each reserve is made with, so an injected clock drives it too.

use crate::job::{Job, JobState, UnixMillis};
use crate::store::hook::{Call, Hooked, Reply, StoreHook};
use crate::store::{FireOutcome, Store, StoreError, StoreResult, TopicCounts};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// The two exposition formats of `/metrics`, chosen by the scraper's `Accept` as the
/// Prometheus client libraries choose: OpenMetrics when asked for, else the Prometheus text
/// format 0.0.4, which every Prometheus-compatible parser reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text, as prometheus-client encodes it (Prometheus itself asks for it).
    OpenMetrics,
    /// The Prometheus text format 0.0.4 (promtool, older Prometheus, other classic parsers).
    Text,
}

impl Format {
    /// The format asked for by `Accept` header values: OpenMetrics when one of the media
    /// ranges is `application/openmetrics-text` (any version, but not with `q=0`), else text.
    pub fn negotiate<'a>(accept: impl IntoIterator<Item = &'a str>) -> Format {
        let openmetrics = accept
            .into_iter()
            .flat_map(|value| value.split(','))
            .any(|range| {
                let mut parts = range.split(';').map(str::trim);
                let media = parts.next().unwrap_or_default();
                let refused = parts.any(|p| {
                    p.split_once('=').is_some_and(|(k, v)| {
                        k.trim().eq_ignore_ascii_case("q") && v.trim().parse::<f64>() == Ok(0.0)
                    })
                });
                media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
            });
        if openmetrics {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The Prometheus text format 0.0.4 of an OpenMetrics text as prometheus-client writes it
/// (that crate writes only OpenMetrics). The samples are the same; what differs is the
/// metadata: a counter family is named after its samples (`x_total`, where OpenMetrics says
/// `x`), an info family is a gauge named `x_info`, `unknown` is `untyped`, and there is no
/// `# UNIT` and no `# EOF`. Exemplars and `_created` samples have no place in 0.0.4 and are left
/// out (delayq's metrics have neither). HELP texts pass unchanged: prometheus-client writes them
/// as given, and delayq's have no backslash or newline to escape.
fn openmetrics_to_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // The HELP line waits for its TYPE line, which decides the family's name in 0.0.4.
    let mut help: Option<(&str, &str)> = None;
    // The current family's OpenMetrics name and type.
    let mut family: (&str, &str) = ("", "");
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            family = (name, kind);
            let (suffix, kind) = match kind {
                "counter" => ("_total", "counter"),
                "info" => ("_info", "gauge"),
                "stateset" => ("", "gauge"),
                "gaugehistogram" => ("", "histogram"),
                "unknown" => ("", "untyped"),
                other => ("", other),
            };
            if let Some((_, text)) = help.take().filter(|(n, _)| *n == name) {
                out.push_str(&format!("# HELP {name}{suffix} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name}{suffix} {kind}\n"));
        } else if line.starts_with('#') {
            // `# UNIT`, `# EOF`.
        } else if !line.is_empty() {
            // An exemplar follows ` # `; no label value holds a space (topics cannot).
            let sample = line.split_once(" # ").map_or(line, |(s, _)| s);
            let name_end = sample.find(['{', ' ']).unwrap_or(sample.len());
            let created = matches!(family.1, "counter" | "histogram" | "summary")
                && sample[..name_end].strip_suffix("_created") == Some(family.0);
            if !created {
                out.push_str(sample);
                out.push('\n');
            }
        }
    }
    out
}

/// Upper bounds of the lateness histogram's buckets, in seconds: sub-millisecond (the timer's
/// own precision) up to an hour (a backlog nobody consumes).
const LATENESS_BUCKETS: [f64; 18] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0, 3600.0,
];

/// Brings a counter that mirrors a count the store keeps (read at each scrape) up to `n`; a
/// count below the counter's leaves it where it is (a counter never goes down).
fn follow(counter: &Counter, n: u64) {
    counter.inc_by(n.saturating_sub(counter.get()));
}

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
struct TopicLabels {
    topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HeldLabels {
    topic: String,
    limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Upper bounds of the callback response-time histogram's buckets, in seconds: a local
/// receiver's fraction of a millisecond up to the longest timeout (10 minutes).
const CALLBACK_DURATION_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    600.0,
];

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
    restored: Counter,
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
    callback_jobs: Family<JobLabels, Gauge>,
    topic_paused: Family<TopicLabels, Gauge>,
    topic_rate: Family<TopicLabels, Gauge<f64, AtomicU64>>,
    topic_burst: Family<TopicLabels, Gauge>,
    topic_max_in_flight: Family<TopicLabels, Gauge>,
    held_back: Family<HeldLabels, Counter>,
    callback_attempts: Family<OutcomeLabels, Counter>,
    callback_duration: Histogram,
    callback_lateness: Histogram,
    callbacks_in_flight: Gauge,
    amqp_intake: Family<OutcomeLabels, Counter>,
    amqp_publishes: Family<OutcomeLabels, Counter>,
    amqp_confirm_duration: Histogram,
    amqp_publish_lateness: Histogram,
    amqp_up: Gauge,
    store_up: Gauge,
    schedules: Gauge,
    jobs_on_disk: Gauge,
    log_syncs: Counter,
    waiting: Gauge,
    schedule_ticks_fired: Counter,
    schedule_ticks_caught_up: Counter,
    schedule_ticks_skipped: Family<ReasonLabels, Counter>,
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
        let restored = counter(
            "jobs_restored",
            "Jobs put back by a restore from the journal",
        );
        let delivered = counter(
            "jobs_delivered",
            "Jobs handed to a consumer (reserve, compat /pop), redeliveries included",
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
            "Jobs deleted (compat /delete, DELETE /v1/jobs)",
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
        let schedule_ticks_fired = counter(
            "schedule_ticks_fired",
            "Ticks of recurring schedules that pushed their job, caught-up ones included",
        );
        let schedule_ticks_caught_up = counter(
            "schedule_ticks_caught_up",
            "Missed ticks of recurring schedules fired late by their catch-up policy",
        );
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
        let callback_jobs = Family::<JobLabels, Gauge>::default();
        registry.register(
            "callback_jobs",
            "Callback jobs in the store by topic and state (the whole store's, read at scrape time)",
            callback_jobs.clone(),
        );
        let topic_paused = Family::<TopicLabels, Gauge>::default();
        registry.register(
            "topic_paused",
            "1 for each paused topic, 0 for a topic with limits that is not paused (flow control, \
             the store's, read at scrape time)",
            topic_paused.clone(),
        );
        let topic_rate = Family::<TopicLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "topic_rate_per_second",
            "Each rate-limited topic's limit: hand-outs per second",
            topic_rate.clone(),
        );
        let topic_burst = Family::<TopicLabels, Gauge>::default();
        registry.register(
            "topic_burst",
            "Each rate-limited topic's burst (the token bucket's size)",
            topic_burst.clone(),
        );
        let topic_max_in_flight = Family::<TopicLabels, Gauge>::default();
        registry.register(
            "topic_max_in_flight",
            "Each topic's limit on jobs reserved at once (pull and callback)",
            topic_max_in_flight.clone(),
        );
        let held_back = Family::<HeldLabels, Counter>::default();
        registry.register(
            "held_back",
            "Hand-outs a topic's flow control held back, by limit: paused, rate, max_in_flight \
             (one per reserve call and limit that kept a ready job back; the store's count, \
             read at scrape time)",
            held_back.clone(),
        );
        let callback_attempts = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "callback_attempts",
            "Callback calls this instance made, by outcome: 2xx, 4xx, 5xx, other_status, \
             timeout, connect_error",
            callback_attempts.clone(),
        );
        let callback_duration = Histogram::new(CALLBACK_DURATION_BUCKETS);
        registry.register_with_unit(
            "callback_duration",
            "Time from sending a callback to its answer (or to the timeout or error)",
            Unit::Seconds,
            callback_duration.clone(),
        );
        let callback_lateness = Histogram::new(LATENESS_BUCKETS);
        registry.register_with_unit(
            "callback_lateness",
            "Time from a callback job's due time to the start of its call",
            Unit::Seconds,
            callback_lateness.clone(),
        );
        let callbacks_in_flight = Gauge::default();
        registry.register(
            "callbacks_in_flight",
            "Callback jobs this instance holds: calling, or waiting for their host's limit",
            callbacks_in_flight.clone(),
        );
        let amqp_intake = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "amqp_intake_messages",
            "RabbitMQ intake messages this instance took, by outcome: stored (then acked), \
             rejected_delay, rejected_routing_key, rejected_message (rejected without requeue), \
             store_error (requeued)",
            amqp_intake.clone(),
        );
        let amqp_publishes = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "amqp_publishes",
            "Publish attempts this instance made, by outcome: confirmed, nacked, unroutable, \
             timeout, connection_error, not_configured",
            amqp_publishes.clone(),
        );
        let amqp_confirm_duration = Histogram::new(CALLBACK_DURATION_BUCKETS);
        registry.register_with_unit(
            "amqp_confirm_duration",
            "Time from a publish to the broker's confirm (or return, nack or timeout)",
            Unit::Seconds,
            amqp_confirm_duration.clone(),
        );
        let amqp_publish_lateness = Histogram::new(LATENESS_BUCKETS);
        registry.register_with_unit(
            "amqp_publish_lateness",
            "Time from a publish job's due time to its publish",
            Unit::Seconds,
            amqp_publish_lateness.clone(),
        );
        let amqp_up = Gauge::default();
        registry.register(
            "amqp_up",
            "1 while this instance is connected to RabbitMQ (--amqp), else 0",
            amqp_up.clone(),
        );
        let store_up = Gauge::default();
        registry.register(
            "store_up",
            "1 if the store answered this scrape's count query, else 0",
            store_up.clone(),
        );
        let schedules = Gauge::default();
        registry.register(
            "schedules",
            "Recurring schedules in the store, paused ones included",
            schedules.clone(),
        );
        let jobs_on_disk = Gauge::default();
        registry.register(
            "jobs_on_disk",
            "Delayed jobs the embedded store keeps on disk only, beyond its memory window \
             (--memory-window); 0 without one",
            jobs_on_disk.clone(),
        );
        let log_syncs = Counter::default();
        registry.register(
            "log_syncs",
            "Times the embedded store synced (fdatasync) its write-ahead log to make the \
             changes that came meanwhile durable, since it opened (group commit); the store's \
             count, read at scrape time; 0 on other stores",
            log_syncs.clone(),
        );
        let waiting = Gauge::default();
        registry.register(
            "waiting_consumers",
            "Long polls (reserve, compat /pop) waiting in this instance for a job",
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
        let schedule_ticks_skipped = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "schedule_ticks_skipped",
            "Ticks of recurring schedules that pushed no job: reason overlap (the previous \
             tick's job still existed) or missed (passed over by the catch-up policy)",
            schedule_ticks_skipped.clone(),
        );
        Metrics {
            registry,
            schedule_ticks_fired,
            schedule_ticks_caught_up,
            schedule_ticks_skipped,
            pushed,
            restored,
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
            callback_jobs,
            topic_paused,
            topic_rate,
            topic_burst,
            topic_max_in_flight,
            held_back,
            callback_attempts,
            callback_duration,
            callback_lateness,
            callbacks_in_flight,
            amqp_intake,
            amqp_publishes,
            amqp_confirm_duration,
            amqp_publish_lateness,
            amqp_up,
            store_up,
            schedules,
            jobs_on_disk,
            log_syncs,
            waiting,
            scrape: tokio::sync::Mutex::new(()),
        }
    }

    /// Adds the journal's gauges (`--journal`): its lag, its queue and whether it is written.
    pub fn register_journal(&mut self, gauges: crate::journal::LagGauges) {
        self.registry.register_with_unit(
            "journal_lag",
            "Age of the oldest acknowledged change not yet written to the journal",
            Unit::Seconds,
            gauges.lag_seconds,
        );
        self.registry.register(
            "journal_pending",
            "Changes queued for the journal and not yet written",
            gauges.pending,
        );
        self.registry.register(
            "journal_up",
            "1 if the journal's last write succeeded, else 0",
            gauges.up,
        );
    }

    /// The exposition text in `format`: the job gauges read from `store` now, `waiting` long
    /// polls, and every counter.
    pub async fn render(&self, store: &dyn Store, waiting: usize, format: Format) -> String {
        let _one = self.scrape.lock().await;
        self.jobs.clear();
        self.callback_jobs.clear();
        self.topic_paused.clear();
        self.topic_rate.clear();
        self.topic_burst.clear();
        self.topic_max_in_flight.clear();
        match store.stats().await {
            Ok(stats) => {
                self.store_up.set(1);
                self.flow_gauges(&stats);
                self.schedules
                    .set(i64::try_from(stats.schedules).unwrap_or(i64::MAX));
                if let Some(n) = stats.on_disk {
                    self.jobs_on_disk.set(i64::try_from(n).unwrap_or(i64::MAX));
                }
                if let Some(n) = stats.log_syncs {
                    follow(&self.log_syncs, n);
                }
                for (gauges, topics) in [
                    (&self.jobs, &stats.topics),
                    (&self.callback_jobs, &stats.callbacks),
                ] {
                    for (topic, counts) in topics {
                        for (state, count) in by_state(counts) {
                            let labels = JobLabels {
                                topic: label_value(topic.as_str()),
                                state,
                            };
                            gauges
                                .get_or_create(&labels)
                                .set(i64::try_from(count).unwrap_or(i64::MAX));
                        }
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
        match format {
            Format::OpenMetrics => out,
            Format::Text => openmetrics_to_text(&out),
        }
    }

    /// The settings of each topic that has some, and the store's counts of hand-outs held
    /// back (added to the counters: a counter only grows).
    fn flow_gauges(&self, stats: &crate::store::Stats) {
        for (topic, s) in &stats.settings {
            let labels = TopicLabels {
                topic: label_value(topic.as_str()),
            };
            self.topic_paused
                .get_or_create(&labels)
                .set(i64::from(s.paused));
            if let Some(rate) = s.rate_per_s() {
                self.topic_rate.get_or_create(&labels).set(rate);
            }
            if let Some(burst) = s.burst() {
                let burst = i64::try_from(burst).unwrap_or(i64::MAX);
                self.topic_burst.get_or_create(&labels).set(burst);
            }
            if let Some(n) = s.max_in_flight {
                self.topic_max_in_flight
                    .get_or_create(&labels)
                    .set(i64::from(n));
            }
        }
        for (topic, held) in &stats.held {
            for (limit, n) in [
                ("paused", held.paused),
                ("rate", held.rate),
                ("max_in_flight", held.max_in_flight),
            ] {
                let labels = HeldLabels {
                    topic: label_value(topic.as_str()),
                    limit,
                };
                follow(&self.held_back.get_or_create(&labels), n);
            }
        }
    }

    /// Counts one callback call: how it ended, how long it took, and how late it started
    /// (`late_ms` after its job's due time).
    pub fn callback_attempt(&self, outcome: &'static str, took: std::time::Duration, late_ms: u64) {
        self.callback_attempts
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        self.callback_duration.observe(took.as_secs_f64());
        self.callback_lateness.observe(late_ms as f64 / 1000.0);
    }

    /// Counts one RabbitMQ intake message by outcome.
    /// A recurring schedule's handling (the firing task): missed ticks fired, and ticks passed
    /// over by the overlap and catch-up policies. Ticks fired are counted by the store call.
    pub fn schedule_handled(&self, caught_up: u64, skipped_overlap: u64, skipped_missed: u64) {
        self.schedule_ticks_caught_up.inc_by(caught_up);
        for (reason, n) in [("overlap", skipped_overlap), ("missed", skipped_missed)] {
            if n > 0 {
                self.schedule_ticks_skipped
                    .get_or_create(&ReasonLabels { reason })
                    .inc_by(n);
            }
        }
    }

    pub fn amqp_intake(&self, outcome: &'static str) {
        self.amqp_intake
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Counts one publish attempt: how it ended, how long the confirm took (`None` when
    /// nothing was published), and how late it was (`late_ms` after its job's due time).
    pub fn amqp_publish(
        &self,
        outcome: &'static str,
        took: Option<std::time::Duration>,
        late_ms: u64,
    ) {
        self.amqp_publishes
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        if let Some(took) = took {
            self.amqp_confirm_duration.observe(took.as_secs_f64());
        }
        self.amqp_publish_lateness.observe(late_ms as f64 / 1000.0);
    }

    /// Whether this instance is connected to RabbitMQ now.
    pub fn amqp_connected(&self, up: bool) {
        self.amqp_up.set(i64::from(up));
    }

    /// Jobs pushed by this instance since it started (every API; beanstalkd's `total-jobs`).
    pub fn pushed_total(&self) -> u64 {
        self.pushed.get()
    }

    /// Reservations whose TTR ran out, handled by this instance's timer since it started
    /// (beanstalkd's `job-timeouts`).
    pub fn expired_total(&self) -> u64 {
        self.expired.get()
    }

    /// Callback jobs held now (`+1` when reserved, `-1` when done with).
    pub fn callbacks_held(&self, delta: i64) {
        self.callbacks_in_flight.inc_by(delta);
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

    /// Counts a batch's `Ok` items on `counter` and its failed ones by kind.
    /// The counter of a finish that found the job in `state`: finished for a reserved job, else
    /// deleted (job.rs, [`JobState::finish_is_delivery_done`]).
    fn finished_or_deleted(&self, state: JobState) -> &Counter {
        if state.finish_is_delivery_done() {
            &self.finished
        } else {
            &self.deleted
        }
    }

    fn each<T>(&self, counter: &Counter, items: &[StoreResult<T>]) {
        for e in items.iter().filter_map(|i| i.as_ref().err()) {
            self.failed(e);
        }
        counter.inc_by(items.iter().filter(|i| i.is_ok()).count() as u64);
    }
}

/// A [`Store`] counted in its [`Metrics`]: `Metered::new(store, metrics)`.
pub type Metered = Hooked<Arc<Metrics>>;

/// Counts what the wrapped store did; changes nothing. A failed call is counted by kind; a
/// success on the counter of its transition. The `match` names every call, so a new one does
/// not compile until it is decided here how it is counted.
impl StoreHook for Metrics {
    fn after(&self, _call: &Call<'_>, result: Result<Reply<'_>, &StoreError>) {
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => return self.failed(e),
        };
        let one = match reply {
            Reply::PushBatch { out, .. } => return self.each(&self.pushed, out),
            Reply::RestoreBatch { out, .. } => return self.each(&self.restored, out),
            Reply::FinishBatch { out, .. } => {
                for item in out.iter() {
                    match item {
                        Ok(state) => {
                            self.finished_or_deleted(*state).inc();
                        }
                        Err(e) => self.failed(e),
                    }
                }
                return;
            }
            Reply::Reserve { out, now, .. } => return self.count_deliveries(out, now),
            Reply::ReserveJob { out, now, .. } => {
                return self.count_deliveries(std::slice::from_ref(out), now);
            }
            Reply::KickTopic { out, .. } => {
                self.kicked.inc_by(*out);
                return;
            }
            Reply::Tick { out, .. } => {
                self.promoted.inc_by(out.promoted);
                self.expired.inc_by(out.expired);
                return;
            }
            Reply::Get { .. }
            | Reply::Stats { .. }
            | Reply::List { .. }
            | Reply::Schedule { .. }
            | Reply::Settings { .. }
            | Reply::SetSettings { .. }
            | Reply::Ping { .. } => return,
            Reply::PutSchedule { .. }
            | Reply::GetSchedule { .. }
            | Reply::ListSchedules { .. }
            | Reply::DeleteSchedule { .. }
            | Reply::DueSchedules { .. } => return,
            Reply::FireSchedule { out, .. } => {
                if let FireOutcome::Fired { pushed, .. } = out {
                    self.schedule_ticks_fired.inc_by(*pushed);
                    self.pushed.inc_by(*pushed);
                }
                return;
            }
            Reply::FireSchedules { out, .. } => {
                let pushed: u64 = out
                    .iter()
                    .map(|o| match o {
                        FireOutcome::Fired { pushed, .. } => *pushed,
                        FireOutcome::Stale => 0,
                    })
                    .sum();
                self.schedule_ticks_fired.inc_by(pushed);
                self.pushed.inc_by(pushed);
                return;
            }
            Reply::Finish { out, .. } => self.finished_or_deleted(*out),
            Reply::Delete { .. } => &self.deleted,
            // Released past max_attempts: buried instead.
            Reply::Release { out, .. } if out.state == JobState::Dead => &self.buried,
            Reply::Release { .. } => &self.released,
            Reply::Touch { .. } => &self.touched,
            Reply::Bury { .. } => &self.buried,
            Reply::Kick { .. } => &self.kicked,
            Reply::Reschedule { .. } => &self.rescheduled,
        };
        one.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_only_when_the_scraper_asks_for_it() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate([prometheus]), Format::OpenMetrics);
        assert_eq!(
            Format::negotiate(["text/html", "Application/OpenMetrics-Text"]),
            Format::OpenMetrics
        );
        for text in [
            "",
            "*/*",
            "text/plain; version=0.0.4",
            "application/openmetrics-text; q=0, text/plain",
            "application/json",
        ] {
            assert_eq!(Format::negotiate([text]), Format::Text, "{text:?}");
        }
        assert_eq!(Format::negotiate([]), Format::Text);
    }

    #[test]
    fn the_text_format_names_families_after_their_samples() {
        let openmetrics = "\
# HELP x_pushed Jobs pushed
# TYPE x_pushed counter
x_pushed_total 3
x_pushed_created 1.7e9
# HELP x_late_seconds Lateness
# TYPE x_late_seconds histogram
# UNIT x_late_seconds seconds
x_late_seconds_sum 0.5
x_late_seconds_count 1
x_late_seconds_bucket{le=\"1.0\"} 1 # {trace=\"a\"} 0.5
x_late_seconds_bucket{le=\"+Inf\"} 1
# HELP x_jobs Jobs
# TYPE x_jobs gauge
x_jobs{topic=\"a#b\",state=\"ready\"} 2
# HELP x_build The build
# TYPE x_build info
x_build_info{version=\"0.1.0\"} 1
# HELP x_other Other
# TYPE x_other unknown
x_other 1
# EOF
";
        let text = "\
# HELP x_pushed_total Jobs pushed
# TYPE x_pushed_total counter
x_pushed_total 3
# HELP x_late_seconds Lateness
# TYPE x_late_seconds histogram
x_late_seconds_sum 0.5
x_late_seconds_count 1
x_late_seconds_bucket{le=\"1.0\"} 1
x_late_seconds_bucket{le=\"+Inf\"} 1
# HELP x_jobs Jobs
# TYPE x_jobs gauge
x_jobs{topic=\"a#b\",state=\"ready\"} 2
# HELP x_build_info The build
# TYPE x_build_info gauge
x_build_info{version=\"0.1.0\"} 1
# HELP x_other Other
# TYPE x_other untyped
x_other 1
";
        assert_eq!(openmetrics_to_text(openmetrics), text);
    }
}
