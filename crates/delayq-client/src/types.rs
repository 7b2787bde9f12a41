//! The JSON shapes of the /v1 API (docs/api.md), as plain serde types: what a request carries
//! and what a response holds.
//!
//! These mirror the wire format field for field; they do not validate. Limits (topic length,
//! TTR range, ...) are the server's to enforce, and its 400 `invalid_field` answer names the
//! field. This crate does not depend on `delayq`, so nothing here is shared with the server's
//! own types: the unit tests below pin the names against the JSON in docs/api.md instead.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Where a job is in its life (`"state"` in a [`Job`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for `run_at_ms`.
    Delayed,
    /// Due; waiting for a consumer.
    Ready,
    /// Handed to a consumer until `reserved_until_ms`.
    Reserved,
    /// Out of attempts, or buried; waits for `kick` or `delete`.
    Dead,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Delayed => "delayed",
            JobState::Ready => "ready",
            JobState::Reserved => "reserved",
            JobState::Dead => "dead",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored job, as every endpoint that answers with a job returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: String,
    pub topic: String,
    /// Stored and returned byte-for-byte.
    pub body: String,
    pub state: JobState,
    /// When the job is (or was) due, Unix ms.
    pub run_at_ms: u64,
    pub ttr_ms: u64,
    /// 0 is the most urgent.
    pub priority: u32,
    /// Deliveries before the job is dead; 0 = unlimited.
    pub max_attempts: u32,
    /// Delay before the n-th redelivery; the last step repeats.
    pub backoff_ms: Vec<u64>,
    /// Deliveries so far.
    pub attempts: u32,
    /// Deadline of the current reservation; set only when `state` is `reserved`.
    pub reserved_until_ms: Option<u64>,
    /// Set only for a callback job: delayq calls it instead of handing the job out.
    #[serde(default)]
    pub callback: Option<Callback>,
}

/// A callback job's destination (docs/delivery.md): the body is POSTed to `url` when the job is
/// due, and a 2xx within `timeout_ms` finishes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Callback {
    pub url: String,
    /// Server default when pushing: 30 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// A recurring schedule to create or replace (`PUT /v1/schedules/{id}`, docs/schedules.md):
/// exactly one of `cron` and `every_ms`. Every optional field left unset is omitted, so the
/// server's default applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSchedule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    /// An IANA zone for `cron`; the server's default is `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// The job each tick pushes: a [`NewJob`] without `id`, `delay_ms`, `run_at_ms` or
    /// `replace` (the server refuses them, naming `job.id`...).
    pub job: NewJob,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at_ms: Option<u64>,
    /// `latest` (the server's default), `none` or `all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up: Option<String>,
    /// `allow` (the server's default) or `skip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<String>,
    /// Sent only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
}

/// A schedule's job template, as the server answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTemplate {
    pub topic: String,
    pub body: String,
    pub ttr_ms: u64,
    pub priority: u32,
    pub max_attempts: u32,
    pub backoff_ms: Vec<u64>,
    #[serde(default)]
    pub callback: Option<Callback>,
}

/// A stored recurring schedule (`GET /v1/schedules/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    pub id: String,
    #[serde(default)]
    pub cron: Option<String>,
    #[serde(default)]
    pub every_ms: Option<u64>,
    pub tz: String,
    pub job: JobTemplate,
    pub start_at_ms: Option<u64>,
    pub end_at_ms: Option<u64>,
    pub catch_up: String,
    pub overlap: String,
    pub paused: bool,
    /// The next 10 fire times (none while paused).
    pub next_runs_ms: Vec<u64>,
    /// The last tick that pushed a job.
    pub last_tick_ms: Option<u64>,
}

/// One page of `GET /v1/schedules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulesPage {
    pub schedules: Vec<Schedule>,
    /// Where the next page starts; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// A job to push (`POST /v1/jobs`, or one entry of a batch). Only `topic` and `body` are always
/// sent; every optional field left unset is omitted from the JSON, so the server's default
/// applies (docs/api.md, "NewJob").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewJob {
    pub topic: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default)]
    pub body: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttr_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<Callback>,
    /// Sent only when true (the server's default is false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace: bool,
}

impl NewJob {
    /// A job for `topic` with this body and the server's defaults for everything else.
    pub fn new(topic: impl Into<String>, body: impl Into<String>) -> NewJob {
        NewJob {
            topic: topic.into(),
            id: None,
            body: body.into(),
            delay_ms: None,
            run_at_ms: None,
            ttr_ms: None,
            priority: None,
            max_attempts: None,
            backoff_ms: None,
            callback: None,
            replace: false,
        }
    }

    /// Chooses the id instead of letting the server generate a UUIDv7.
    pub fn id(mut self, id: impl Into<String>) -> NewJob {
        self.id = Some(id.into());
        self
    }

    /// Due this long after the server receives the push. The server refuses a job that has both
    /// this and [`NewJob::run_at_ms`].
    pub fn delay_ms(mut self, delay_ms: u64) -> NewJob {
        self.delay_ms = Some(delay_ms);
        self
    }

    /// Due at this Unix time in ms (a past time is ready now).
    pub fn run_at_ms(mut self, run_at_ms: u64) -> NewJob {
        self.run_at_ms = Some(run_at_ms);
        self
    }

    /// How long a consumer may hold the job before it is handed out again.
    pub fn ttr_ms(mut self, ttr_ms: u64) -> NewJob {
        self.ttr_ms = Some(ttr_ms);
        self
    }

    /// 0 is the most urgent.
    pub fn priority(mut self, priority: u32) -> NewJob {
        self.priority = Some(priority);
        self
    }

    /// Deliveries before the job is dead; 0 = unlimited.
    pub fn max_attempts(mut self, max_attempts: u32) -> NewJob {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// Delay before the n-th redelivery; the last step repeats.
    pub fn backoff_ms(mut self, backoff_ms: impl Into<Vec<u64>>) -> NewJob {
        self.backoff_ms = Some(backoff_ms.into());
        self
    }

    /// Makes it a callback job: the server POSTs its body to `url` when due instead of handing
    /// it to consumers (a `timeout_ms` of `None` is the server's default, 30 s).
    pub fn callback(mut self, url: impl Into<String>, timeout_ms: Option<u64>) -> NewJob {
        self.callback = Some(Callback {
            url: url.into(),
            timeout_ms,
        });
        self
    }

    /// Replaces an existing job with the same id instead of failing with 409 `exists`.
    pub fn replace(mut self, replace: bool) -> NewJob {
        self.replace = replace;
        self
    }
}

/// What a batch push did with one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PushStatus {
    Created,
    Replaced,
    /// A job with this id exists and the batch did not ask to replace it; nothing was changed.
    Exists,
}

impl PushStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PushStatus::Created => "created",
            PushStatus::Replaced => "replaced",
            PushStatus::Exists => "exists",
        }
    }
}

/// One entry of `POST /v1/jobs/batch`'s `results`, in the order of the request's jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushResult {
    pub id: String,
    pub status: PushStatus,
}

/// The answer of `POST /v1/finish`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FinishResult {
    /// How many of the ids were finished.
    pub finished: u64,
    /// The ids that named no job.
    pub missing: Vec<String>,
}

/// The body of `POST /v1/jobs/{id}/reschedule`: a new due time, and optionally a new body and
/// priority. Build it with [`Reschedule::delay_ms`] or [`Reschedule::run_at_ms`], so it always
/// carries exactly one due time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reschedule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
}

impl Reschedule {
    /// Due this long after the server receives the request.
    pub fn delay_ms(delay_ms: u64) -> Reschedule {
        Reschedule {
            delay_ms: Some(delay_ms),
            run_at_ms: None,
            body: None,
            priority: None,
        }
    }

    /// Due at this Unix time in ms.
    pub fn run_at_ms(run_at_ms: u64) -> Reschedule {
        Reschedule {
            delay_ms: None,
            run_at_ms: Some(run_at_ms),
            body: None,
            priority: None,
        }
    }

    /// Also replaces the body.
    pub fn body(mut self, body: impl Into<String>) -> Reschedule {
        self.body = Some(body.into());
        self
    }

    /// Also changes the priority.
    pub fn priority(mut self, priority: u32) -> Reschedule {
        self.priority = Some(priority);
        self
    }
}

/// The answer of `POST /v1/jobs/{id}/reschedule`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rescheduled {
    pub job: Job,
    /// The state the job was in before: `delayed` or `ready`.
    pub previous_state: JobState,
}

/// Job counts of one topic, by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TopicStats {
    pub delayed: u64,
    pub ready: u64,
    pub reserved: u64,
    pub dead: u64,
}

/// The answer of `GET /v1/stats`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Stats {
    /// Counts per topic, in name order.
    pub topics: BTreeMap<String, TopicStats>,
    /// Callback jobs' counts per topic.
    #[serde(default)]
    pub callbacks: BTreeMap<String, TopicStats>,
    /// Flow control of the topics that have some, with or without jobs.
    #[serde(default)]
    pub settings: BTreeMap<String, TopicSettings>,
    /// The earliest due time of any delayed job; `null` when none is delayed.
    #[serde(default)]
    pub next_due_ms: Option<u64>,
}

/// A topic's flow control, `GET`/`PUT /v1/topics/{topic}/settings`: the settings in force.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct TopicSettings {
    /// Nothing of the topic is handed out.
    pub paused: bool,
    /// Hand-outs per second; `None`: no rate limit.
    pub rate_per_s: Option<f64>,
    /// The token bucket's size in force; `None` without a rate.
    pub burst: Option<u64>,
    /// Most of the topic's jobs reserved at once; `None`: no limit.
    pub max_in_flight: Option<u64>,
}

/// A change of a topic's flow control (`PUT /v1/topics/{topic}/settings`): a field left `None`
/// is unchanged; `Some(None)` removes the limit.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct SettingsChange {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<Option<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<Option<u64>>,
}

/// The answer of `POST /v1/restore`: what the restore did, job by job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Restored {
    /// Put back into the store.
    pub restored: u64,
    /// Still in the store: left alone.
    pub already_present: u64,
    /// Due before the restore began and left out (`skip_overdue`, now or earlier).
    pub skipped_overdue: u64,
    /// Finished or deleted: never restored.
    pub skipped_finished: u64,
    /// Recurring schedules put back (a restore of the whole journal only).
    #[serde(default)]
    pub schedules_restored: u64,
    /// Recurring schedules still in the store: left alone.
    #[serde(default)]
    pub schedules_already_present: u64,
    /// Topics whose flow control settings were put back.
    #[serde(default)]
    pub settings_restored: u64,
    /// Topics with settings still in the store: left alone.
    #[serde(default)]
    pub settings_already_present: u64,
}

/// The answer of `POST /v1/backup`: what the online backup wrote.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BackedUp {
    /// The directory written, absolute, on the server's machine.
    pub dir: String,
    /// Jobs in the copy.
    pub jobs: u64,
    /// Recurring schedules in the copy.
    pub schedules: u64,
    /// Size of the copy's file.
    pub bytes: u64,
    /// How long the backup took.
    pub took_ms: u64,
}

/// The answer of `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `"ok"`.
    pub status: String,
}

/// The answer of `GET /readyz` when the store is reachable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    /// `"ok"`.
    pub status: String,
    /// Which store the server uses (`"redis"`, `"embedded"`), if it says.
    #[serde(default)]
    pub store: Option<String>,
}

// Request and response envelopes that the public methods unwrap.

#[derive(Serialize)]
pub(crate) struct PushBatchRequest<'a> {
    pub jobs: &'a [NewJob],
    pub replace: bool,
}

#[derive(Deserialize)]
pub(crate) struct PushBatchResponse {
    pub results: Vec<PushResult>,
}

#[derive(Serialize)]
pub(crate) struct ReleaseRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

#[derive(Serialize)]
pub(crate) struct ReserveRequest<'a> {
    pub topics: &'a [String],
    pub max: u32,
    pub timeout_ms: u64,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub finish: &'a [String],
}

#[derive(Deserialize)]
pub(crate) struct ReserveResponse {
    pub jobs: Vec<Job>,
    /// Absent from servers older than `finish` in a reserve.
    #[serde(default)]
    pub finished: u64,
    #[serde(default)]
    pub missing: Vec<String>,
}

#[derive(Serialize)]
pub(crate) struct FinishBatchRequest<'a> {
    pub ids: &'a [String],
}

#[derive(Serialize)]
pub(crate) struct KickTopicRequest {
    pub max: u64,
}

#[derive(Serialize)]
pub(crate) struct BackupRequest<'a> {
    pub dir: &'a str,
}

#[derive(Serialize)]
pub(crate) struct RestoreRequest<'a> {
    pub overdue: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
}

#[derive(Deserialize)]
pub(crate) struct KickTopicResponse {
    pub kicked: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn to_json<T: Serialize>(v: &T) -> Value {
        serde_json::to_value(v).unwrap()
    }

    #[test]
    fn job_example_from_the_api_doc_decodes() {
        // docs/api.md, "The job object", with the id completed.
        let text = r#"{
          "id": "0190f3c2-aaaa", "topic": "orders", "body": "{\"order\":42}",
          "state": "delayed", "run_at_ms": 1767225600000, "ttr_ms": 60000,
          "priority": 1024, "max_attempts": 0, "backoff_ms": [], "attempts": 0,
          "reserved_until_ms": null, "callback": null
        }"#;
        let job: Job = serde_json::from_str(text).unwrap();
        assert_eq!(job.topic, "orders");
        assert_eq!(job.body, r#"{"order":42}"#);
        assert_eq!(job.state, JobState::Delayed);
        assert_eq!(job.run_at_ms, 1_767_225_600_000);
        assert_eq!(job.reserved_until_ms, None);
        // And it encodes back to the same object, names and all.
        assert_eq!(to_json(&job), serde_json::from_str::<Value>(text).unwrap());
    }

    #[test]
    fn job_decoding_ignores_fields_added_later() {
        let mut v = to_json(&Job {
            id: "j".into(),
            topic: "t".into(),
            body: String::new(),
            state: JobState::Reserved,
            run_at_ms: 1,
            ttr_ms: 2,
            priority: 3,
            max_attempts: 4,
            backoff_ms: vec![5],
            attempts: 6,
            reserved_until_ms: Some(7),
            callback: None,
        });
        v["seq"] = json!(99);
        let job: Job = serde_json::from_value(v).unwrap();
        assert_eq!(job.reserved_until_ms, Some(7));
    }

    #[test]
    fn new_job_sends_only_topic_and_body_by_default() {
        assert_eq!(
            to_json(&NewJob::new("orders", "")),
            json!({"topic": "orders", "body": ""})
        );
    }

    #[test]
    fn new_job_setters_use_the_documented_field_names() {
        let job = NewJob::new("orders", r#"{"order":42}"#)
            .id("order-42")
            .delay_ms(15_000)
            .ttr_ms(60_000)
            .priority(0)
            .max_attempts(3)
            .backoff_ms(vec![15_000, 180_000])
            .replace(true);
        assert_eq!(
            to_json(&job),
            json!({
                "topic": "orders", "id": "order-42", "body": "{\"order\":42}",
                "delay_ms": 15000, "ttr_ms": 60000, "priority": 0, "max_attempts": 3,
                "backoff_ms": [15000, 180000], "replace": true
            })
        );
        assert_eq!(
            to_json(&NewJob::new("t", "b").run_at_ms(1_767_225_600_000)),
            json!({"topic": "t", "body": "b", "run_at_ms": 1767225600000u64})
        );
    }

    #[test]
    fn replace_false_is_omitted() {
        let v = to_json(&NewJob::new("t", "b").replace(false));
        assert!(v.get("replace").is_none(), "{v}");
    }

    #[test]
    fn batch_request_matches_the_api_doc() {
        let jobs = [NewJob::new("a", "1"), NewJob::new("b", "2").id("x")];
        assert_eq!(
            to_json(&PushBatchRequest {
                jobs: &jobs,
                replace: false
            }),
            json!({"jobs": [{"topic": "a", "body": "1"}, {"topic": "b", "id": "x", "body": "2"}],
                   "replace": false})
        );
        let r: PushBatchResponse = serde_json::from_value(json!({"results": [
            {"id": "1", "status": "created"}, {"id": "2", "status": "replaced"},
            {"id": "3", "status": "exists"}]}))
        .unwrap();
        let statuses: Vec<_> = r.results.iter().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [
                PushStatus::Created,
                PushStatus::Replaced,
                PushStatus::Exists
            ]
        );
    }

    #[test]
    fn release_sends_delay_only_when_given() {
        assert_eq!(
            to_json(&ReleaseRequest {
                delay_ms: Some(5000)
            }),
            json!({"delay_ms": 5000})
        );
        assert_eq!(to_json(&ReleaseRequest { delay_ms: None }), json!({}));
    }

    #[test]
    fn reschedule_carries_one_due_time_and_optional_fields() {
        assert_eq!(
            to_json(&Reschedule::delay_ms(1000)),
            json!({"delay_ms": 1000})
        );
        assert_eq!(
            to_json(&Reschedule::run_at_ms(5).body("b").priority(7)),
            json!({"run_at_ms": 5, "body": "b", "priority": 7})
        );
        let r: Rescheduled = serde_json::from_value(json!({
            "job": to_json(&sample_job()), "previous_state": "delayed"}))
        .unwrap();
        assert_eq!(r.previous_state, JobState::Delayed);
    }

    #[test]
    fn reserve_finish_and_kick_bodies_match_the_api_doc() {
        let topics = ["a".to_string(), "b".to_string()];
        assert_eq!(
            to_json(&ReserveRequest {
                topics: &topics,
                max: 1,
                timeout_ms: 0,
                finish: &[]
            }),
            json!({"topics": ["a", "b"], "max": 1, "timeout_ms": 0})
        );
        let done = ["x".to_string()];
        assert_eq!(
            to_json(&ReserveRequest {
                topics: &topics,
                max: 2,
                timeout_ms: 5,
                finish: &done
            }),
            json!({"topics": ["a", "b"], "max": 2, "timeout_ms": 5, "finish": ["x"]})
        );
        assert_eq!(
            to_json(&FinishBatchRequest { ids: &topics }),
            json!({"ids": ["a", "b"]})
        );
        let f: FinishResult =
            serde_json::from_value(json!({"finished": 1, "missing": ["b"]})).unwrap();
        assert_eq!(
            f,
            FinishResult {
                finished: 1,
                missing: vec!["b".into()]
            }
        );
        assert_eq!(to_json(&KickTopicRequest { max: 100 }), json!({"max": 100}));
        let k: KickTopicResponse = serde_json::from_value(json!({"kicked": 3})).unwrap();
        assert_eq!(k.kicked, 3);
    }

    #[test]
    fn stats_example_from_the_api_doc_decodes() {
        let s: Stats = serde_json::from_str(
            r#"{"topics": {"orders": {"delayed": 10, "ready": 2, "reserved": 1, "dead": 0}}, "next_due_ms": 1767225600000}"#,
        )
        .unwrap();
        assert_eq!(
            s.topics["orders"],
            TopicStats {
                delayed: 10,
                ready: 2,
                reserved: 1,
                dead: 0
            }
        );
        assert_eq!(s.next_due_ms, Some(1_767_225_600_000));
        let empty: Stats = serde_json::from_str(r#"{"topics": {}, "next_due_ms": null}"#).unwrap();
        assert_eq!(empty, Stats::default());
    }

    #[test]
    fn health_and_readiness_decode() {
        let h: Health = serde_json::from_str(r#"{"status":"ok"}"#).unwrap();
        assert_eq!(h.status, "ok");
        let r: Readiness = serde_json::from_str(r#"{"status":"ok","store":"redis"}"#).unwrap();
        assert_eq!(r.store.as_deref(), Some("redis"));
    }

    fn sample_job() -> Job {
        Job {
            id: "j".into(),
            topic: "t".into(),
            body: "b".into(),
            state: JobState::Ready,
            run_at_ms: 1,
            ttr_ms: 60_000,
            priority: 1024,
            max_attempts: 0,
            backoff_ms: vec![],
            attempts: 0,
            reserved_until_ms: None,
            callback: None,
        }
    }
}
