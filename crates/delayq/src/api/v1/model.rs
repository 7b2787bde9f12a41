//! The JSON shapes /v1 answers with (`Job`, `PushResult`, `Stats`, ...), as docs/api.md and
//! openapi.rs describe them. Conversions from the domain types only; no validation here (that is
//! input.rs and the handlers).

use crate::job::{Job, JobState, UnixMillis};
use crate::store::{self, PushOutcome, TopicCounts};
use serde::Serialize;
use std::collections::BTreeMap;

/// The job object of docs/api.md.
#[derive(Debug, Serialize)]
pub struct JobView {
    pub id: String,
    pub topic: String,
    pub body: String,
    pub state: JobState,
    pub run_at_ms: UnixMillis,
    pub ttr_ms: u64,
    pub priority: u32,
    pub max_attempts: u32,
    pub backoff_ms: Vec<u64>,
    pub attempts: u32,
    /// Set only while reserved.
    pub reserved_until_ms: Option<UnixMillis>,
    /// Set only for a callback job.
    pub callback: Option<CallbackView>,
    /// Set only for a publish job (RabbitMQ).
    pub publish: Option<PublishView>,
}

/// A publish job's `publish` object.
#[derive(Debug, Serialize)]
pub struct PublishView {
    pub exchange: String,
    pub routing_key: String,
    /// An intake message's content type, published with the body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// `body` is the base64 of the bytes to publish (an intake message's body that is not
    /// UTF-8).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub body_base64: bool,
}

/// A callback job's `callback` object.
#[derive(Debug, Serialize)]
pub struct CallbackView {
    pub url: String,
    pub timeout_ms: u64,
}

impl From<Job> for JobView {
    fn from(j: Job) -> JobView {
        JobView {
            id: j.spec.id.into(),
            topic: j.spec.topic.into(),
            body: j.spec.body,
            state: j.state,
            run_at_ms: j.spec.run_at,
            ttr_ms: j.spec.ttr_ms,
            priority: j.spec.priority,
            max_attempts: j.spec.max_attempts,
            backoff_ms: j.spec.backoff_ms,
            attempts: j.attempts,
            reserved_until_ms: j.reserved_until,
            callback: j.spec.callback.map(|c| CallbackView {
                url: c.url,
                timeout_ms: c.timeout_ms,
            }),
            publish: j.spec.publish.map(|p| {
                let p = *p;
                PublishView {
                    exchange: p.exchange,
                    routing_key: p.routing_key,
                    content_type: p.content_type,
                    body_base64: p.body_base64,
                }
            }),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct PushResult {
    pub id: String,
    /// `created`, `replaced` or `exists`.
    pub status: &'static str,
}

impl PushResult {
    pub fn status_of(outcome: PushOutcome) -> &'static str {
        match outcome {
            PushOutcome::Created => "created",
            PushOutcome::Replaced(_) => "replaced",
        }
    }
}

#[derive(Debug, Serialize)]
pub struct BatchPushReply {
    pub results: Vec<PushResult>,
}

#[derive(Debug, Serialize)]
pub struct RescheduleReply {
    pub job: JobView,
    pub previous_state: JobState,
}

#[derive(Debug, Serialize)]
pub struct ReserveReply {
    pub jobs: Vec<JobView>,
    /// How many of the request's `finish` ids were finished (0 without any) ...
    pub finished: u64,
    /// ... and which were not found.
    pub missing: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct FinishBatchReply {
    pub finished: u64,
    pub missing: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct KickTopicReply {
    pub kicked: u64,
}

#[derive(Debug, Serialize)]
pub struct StatsView {
    pub topics: BTreeMap<String, TopicCounts>,
    /// Callback jobs' counts by topic.
    pub callbacks: BTreeMap<String, TopicCounts>,
    /// Flow control of the topics that have some.
    pub settings: BTreeMap<String, SettingsView>,
    pub next_due_ms: Option<UnixMillis>,
}

/// A topic's flow control, `GET`/`PUT /v1/topics/{topic}/settings`: the settings in force,
/// `burst` the bucket's size in force (set or default) when there is a rate.
#[derive(Debug, Serialize)]
pub struct SettingsView {
    pub paused: bool,
    pub rate_per_s: Option<f64>,
    pub burst: Option<u64>,
    pub max_in_flight: Option<u32>,
}

impl From<store::TopicSettings> for SettingsView {
    fn from(s: store::TopicSettings) -> SettingsView {
        SettingsView {
            paused: s.paused,
            rate_per_s: s.rate_per_s(),
            burst: s.burst(),
            max_in_flight: s.max_in_flight,
        }
    }
}

impl From<store::Stats> for StatsView {
    fn from(s: store::Stats) -> StatsView {
        StatsView {
            topics: s
                .topics
                .into_iter()
                .map(|(t, c)| (String::from(t), c))
                .collect(),
            callbacks: s
                .callbacks
                .into_iter()
                .map(|(t, c)| (String::from(t), c))
                .collect(),
            settings: s
                .settings
                .into_iter()
                .map(|(t, c)| (String::from(t), c.into()))
                .collect(),
            next_due_ms: s.next_due,
        }
    }
}

/// A topic of `GET /v1/topics`: its pull jobs' counts, and its callback jobs' counts.
#[derive(Debug, Serialize)]
pub struct TopicView {
    pub topic: String,
    #[serde(flatten)]
    pub counts: TopicCounts,
    pub callbacks: TopicCounts,
}

#[derive(Debug, Serialize)]
pub struct TopicsView {
    pub topics: Vec<TopicView>,
    pub next_due_ms: Option<UnixMillis>,
}

impl From<store::Stats> for TopicsView {
    fn from(mut s: store::Stats) -> TopicsView {
        let mut names: Vec<_> = s.topics.keys().chain(s.callbacks.keys()).cloned().collect();
        names.sort();
        names.dedup();
        let topics = names
            .into_iter()
            .map(|t| TopicView {
                counts: s.topics.remove(&t).unwrap_or_default(),
                callbacks: s.callbacks.remove(&t).unwrap_or_default(),
                topic: t.into(),
            })
            .collect();
        TopicsView {
            topics,
            next_due_ms: s.next_due,
        }
    }
}

/// A page of `GET /v1/topics/{topic}/jobs`.
#[derive(Debug, Serialize)]
pub struct JobsPage {
    pub jobs: Vec<JobView>,
    pub next_cursor: Option<String>,
}

/// `GET /v1/topics/{topic}/schedule` and `GET /v1/schedule`.
#[derive(Debug, Serialize)]
pub struct ScheduleView {
    pub from: UnixMillis,
    pub to: UnixMillis,
    pub step: u64,
    pub counts: Vec<u64>,
    /// The coming ticks of recurring schedules in each step (their jobs do not exist yet).
    pub ticks: Vec<u64>,
    /// Not every schedule's ticks were counted (too many schedules or ticks).
    pub ticks_partial: bool,
}
