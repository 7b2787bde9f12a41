//! The job and its state machine: what a job is, which inputs are valid, and which state a job
//! moves to on each event. This is the single definition of delayq's semantics
//! (docs/semantics.md describes it for users).
//!
//! This module does no I/O and knows nothing of HTTP or storage. The stores *perform* the
//! transitions decided here: the embedded store calls these functions through `store::engine::Engine`, the Redis store's
//! Lua scripts implement the same rules, and the conformance suite (tests/store/conformance/) checks
//! that both agree with this file.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// Milliseconds since the Unix epoch. Every time in delayq has this unit.
pub type UnixMillis = u64;

/// Default time-to-run: how long a consumer may hold a job before it is handed out again.
pub const DEFAULT_TTR_MS: u64 = 60_000;
/// Default priority; 0 is the most urgent (beanstalkd's convention).
pub const DEFAULT_PRIORITY: u32 = 1024;
/// Default body limit (1 MiB); configurable with `--max-body-bytes`.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// Longest accepted TTR (one day, as the compat API allows).
pub const MAX_TTR_MS: u64 = 86_400_000;
/// Latest accepted due time: year 9999. Delays of centuries are fine; this only keeps
/// arithmetic (and Lua's doubles) exact.
pub const MAX_RUN_AT: UnixMillis = 253_402_300_799_000;
/// Longest backoff schedule.
pub const MAX_BACKOFF_STEPS: usize = 64;
/// Longest topic name in characters.
pub const MAX_TOPIC_CHARS: usize = 128;
/// Longest job id in characters.
pub const MAX_ID_CHARS: usize = 256;
/// How long a callback may take to answer when the push does not say.
pub const DEFAULT_CALLBACK_TIMEOUT_MS: u64 = 30_000;
/// Longest accepted callback timeout (10 minutes).
pub const MAX_CALLBACK_TIMEOUT_MS: u64 = 600_000;
/// What a callback job's reservation adds to its timeout: one attempt holds the job for
/// `timeout_ms + CALLBACK_GRACE_MS`, so no other instance calls it while a call may still be
/// running.
pub const CALLBACK_GRACE_MS: u64 = 5_000;
/// The retry schedule of a callback job pushed without its own.
pub const CALLBACK_BACKOFF_MS: [u64; 8] = [
    15_000, 180_000, 600_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 54_000_000,
];
/// The attempts of a callback job pushed without its own limit: the first call and one per
/// step of [`CALLBACK_BACKOFF_MS`].
pub const CALLBACK_MAX_ATTEMPTS: u32 = 9;
/// The shortest wait before a callback is called again after a failed call, whatever its
/// backoff says (an empty schedule, a step of 0 or `Retry-After: 0`): a failing destination is
/// never called in a loop.
pub const CALLBACK_MIN_RETRY_MS: u64 = 1_000;
/// Ends the name of a topic's callback queue ([`Topic::callback_queue`]).
const CALLBACK_QUEUE_SUFFIX: &str = ",callback";

/// A validation failure, naming the field it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidField {
    pub field: &'static str,
    pub message: String,
}

impl InvalidField {
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        InvalidField {
            field,
            message: message.into(),
        }
    }
}

/// A topic name: 1–128 characters, no whitespace, control characters or commas. Shared, not
/// copied, by its clones (the engine gives every job of a topic the same one).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Topic(Arc<str>);

impl Topic {
    pub fn parse(s: impl Into<String>) -> Result<Topic, InvalidField> {
        let s = s.into();
        let n = s.chars().count();
        if n == 0 {
            return Err(InvalidField::new("topic", "must not be empty"));
        }
        if n > MAX_TOPIC_CHARS {
            return Err(InvalidField::new(
                "topic",
                format!("must be at most {MAX_TOPIC_CHARS} characters, got {n}"),
            ));
        }
        // In ASCII the whitespace and control characters are those up to the space, and DEL.
        let refused = if s.is_ascii() {
            s.bytes()
                .find(|&b| b <= b' ' || b == 0x7f || b == b',')
                .map(char::from)
        } else {
            s.chars()
                .find(|c| c.is_whitespace() || c.is_control() || *c == ',')
        };
        if let Some(c) = refused {
            return Err(InvalidField::new(
                "topic",
                format!("must not contain whitespace, control characters or commas (found {c:?})"),
            ));
        }
        Ok(Topic(s.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name of this topic's callback queue, where its callback and publish jobs (the jobs delayq delivers itself) wait when ready and
    /// dead. Stores index and count ready and dead jobs by queue ([`JobSpec::queue`]): a
    /// topic's pull queue is named by the topic, its callback queue `<topic>,callback`.
    /// Consumers name topics, which contain no comma, so no consumer can reach a callback
    /// queue.
    pub fn callback_queue(&self) -> Topic {
        Topic(format!("{}{CALLBACK_QUEUE_SUFFIX}", self.0).into())
    }

    /// For a queue name: the topic it belongs to, and whether it is that topic's callback
    /// queue.
    pub fn split_queue(&self) -> (&str, bool) {
        match self.0.strip_suffix(CALLBACK_QUEUE_SUFFIX) {
            Some(topic) => (topic, true),
            None => (&self.0, false),
        }
    }

    /// The topic of a callback queue's name, or `None` for a pull queue.
    pub fn callback_topic(&self) -> Option<Topic> {
        match self.split_queue() {
            (topic, true) => Some(Topic(topic.into())),
            _ => None,
        }
    }

    /// Parses a queue name as stores keep it: a topic, or a topic's callback queue.
    pub fn parse_queue(s: impl Into<String>) -> Result<Topic, InvalidField> {
        let s = s.into();
        match s.strip_suffix(CALLBACK_QUEUE_SUFFIX) {
            Some(topic) => Ok(Topic::parse(topic)?.callback_queue()),
            None => Topic::parse(s),
        }
    }
}

impl TryFrom<String> for Topic {
    type Error = InvalidField;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Topic::parse(s)
    }
}

impl From<Topic> for String {
    fn from(t: Topic) -> String {
        t.0.to_string()
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A job id: 1–256 characters, no control characters. Unique within a delayq namespace, across
/// all topics. Shared, not copied, by its clones (a job's record and its index entries).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobId(Arc<str>);

impl JobId {
    /// The empty id, which sorts before every id and is never a job's: for the lower bound of
    /// a range of index keys.
    pub(crate) fn lowest() -> JobId {
        JobId(Arc::from(""))
    }

    pub fn parse(s: impl Into<String>) -> Result<JobId, InvalidField> {
        let s = s.into();
        let n = s.chars().count();
        if n == 0 {
            return Err(InvalidField::new("id", "must not be empty"));
        }
        if n > MAX_ID_CHARS {
            return Err(InvalidField::new(
                "id",
                format!("must be at most {MAX_ID_CHARS} characters, got {n}"),
            ));
        }
        if s.chars().any(char::is_control) {
            return Err(InvalidField::new(
                "id",
                "must not contain control characters",
            ));
        }
        Ok(JobId(s.into()))
    }

    /// The id written as a decimal number (the beanstalkd port's jobs): always valid, so not
    /// checked as [`JobId::parse`] checks.
    pub fn from_number(n: u64) -> JobId {
        JobId(Arc::from(itoa::Buffer::new().format(n)))
    }

    /// A new time-ordered id (UUIDv7): ids generated later sort later.
    pub fn generate() -> JobId {
        JobId(uuid::Uuid::now_v7().to_string().into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for JobId {
    type Error = InvalidField;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        JobId::parse(s)
    }
}

impl From<JobId> for String {
    fn from(t: JobId) -> String {
        t.0.to_string()
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a job is in its life. A finished or deleted job no longer exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for `run_at`.
    Delayed,
    /// Due; waiting for a consumer.
    Ready,
    /// Handed to a consumer until `reserved_until`.
    Reserved,
    /// Out of attempts, or buried; waits for `kick` or `delete`.
    Dead,
}

impl JobState {
    /// Whether a `finish` of a job in this state (the state `finish` returns) was the
    /// acknowledgement of a delivery: only a reserved job is held by a consumer, so only its
    /// finish counts as finished. Finishing a job in any other state (never handed out, or
    /// given back since) removes it all the same, and counts as a delete: in the metrics, in
    /// the journal, everywhere a removal is told apart.
    pub fn finish_is_delivery_done(self) -> bool {
        self == JobState::Reserved
    }

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

/// Everything a producer says about a new job, already validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    pub topic: Topic,
    pub id: JobId,
    /// Stored and returned byte-for-byte.
    pub body: String,
    /// When the job becomes ready.
    pub run_at: UnixMillis,
    pub ttr_ms: u64,
    /// 0 is the most urgent.
    pub priority: u32,
    /// 0 means unlimited deliveries.
    pub max_attempts: u32,
    /// Delay before the n-th redelivery (n = 1, 2, ...); the last step repeats. Empty: redeliver
    /// at once.
    pub backoff_ms: Vec<u64>,
    /// Push delivery: delayq calls this URL when the job is due, instead of waiting for a
    /// consumer. `None` for a pull job.
    pub callback: Option<Callback>,
    /// Push delivery to RabbitMQ: delayq publishes the body there when the job is due. A job
    /// has a callback or a publish, never both. Boxed: most jobs have none.
    pub publish: Option<Box<Publish>>,
}

/// Where delayq publishes a publish job when it is due (docs/rabbitmq.md): an AMQP
/// `basic.publish` of its body to `exchange` with `routing_key`, which the broker must confirm
/// within the publish timeout for the job to finish. Jobs from the RabbitMQ intake also carry
/// what goes along with the body unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publish {
    /// "" is the default exchange. At most [`MAX_AMQP_NAME_BYTES`] bytes.
    pub exchange: String,
    /// At most [`MAX_AMQP_NAME_BYTES`] bytes.
    pub routing_key: String,
    /// The intake message's content type, published with the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// The intake message's other headers, published with the body: the JSON form of an AMQP
    /// field table (amqp/ writes and reads it; opaque here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<String>,
    /// The job's body is the standard base64 of the bytes to publish (a body that is not
    /// UTF-8; bodies are strings here).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub body_base64: bool,
}

/// Longest exchange name, routing key or publish job id in bytes (AMQP short strings).
pub const MAX_AMQP_NAME_BYTES: usize = 255;

impl Publish {
    /// The one-string form every store and the journal keep (JSON).
    pub fn pack(&self) -> String {
        // Strings and a bool always serialize.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// [`Publish::pack`]'s inverse; the error says what is wrong.
    pub fn unpack(s: &str) -> Result<Publish, String> {
        serde_json::from_str(s).map_err(|e| format!("publish: {e}"))
    }

    /// Checks the exchange and routing key (the error names `publish.exchange` or
    /// `publish.routing_key`).
    pub fn validate(&self) -> Result<(), InvalidField> {
        for (field, v) in [
            ("publish.exchange", &self.exchange),
            ("publish.routing_key", &self.routing_key),
        ] {
            if v.len() > MAX_AMQP_NAME_BYTES {
                return Err(InvalidField::new(
                    field,
                    format!(
                        "must be at most {MAX_AMQP_NAME_BYTES} bytes, got {}",
                        v.len()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Where and how delayq delivers a callback job: an HTTP `POST` of its body to `url`, which
/// must answer 2xx within `timeout_ms` for the job to finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callback {
    /// An absolute `http` or `https` URL (the API checks it and the allowed destinations).
    pub url: String,
    /// 1 ms to [`MAX_CALLBACK_TIMEOUT_MS`].
    pub timeout_ms: u64,
}

impl Callback {
    /// How long one attempt holds the job: its timeout plus [`CALLBACK_GRACE_MS`]. A callback
    /// job's `ttr_ms`.
    pub fn ttr_ms(&self) -> u64 {
        self.timeout_ms.saturating_add(CALLBACK_GRACE_MS)
    }
}

impl JobSpec {
    /// A job with the defaults for everything but topic, id, body and due time.
    pub fn new(topic: Topic, id: JobId, body: impl Into<String>, run_at: UnixMillis) -> JobSpec {
        JobSpec {
            topic,
            id,
            body: body.into(),
            run_at,
            ttr_ms: DEFAULT_TTR_MS,
            priority: DEFAULT_PRIORITY,
            max_attempts: 0,
            backoff_ms: Vec::new(),
            callback: None,
            publish: None,
        }
    }

    /// Makes this a publish job, with the defaults of a callback job for what the producer
    /// left out ([`JobSpec::with_callback_defaults`]); one attempt (waiting for the broker and
    /// its confirm) takes at most `attempt_ms`, and its TTR is at least that plus
    /// [`CALLBACK_GRACE_MS`].
    pub fn with_publish_defaults(
        &mut self,
        publish: Publish,
        attempt_ms: u64,
        ttr_ms: Option<u64>,
        max_attempts: Option<u32>,
        backoff_ms: Option<Vec<u64>>,
    ) {
        self.ttr_ms = ttr_ms
            .unwrap_or(0)
            .max(attempt_ms.saturating_add(CALLBACK_GRACE_MS))
            .min(MAX_TTR_MS);
        self.max_attempts = max_attempts.unwrap_or(CALLBACK_MAX_ATTEMPTS);
        self.backoff_ms = backoff_ms.unwrap_or_else(|| CALLBACK_BACKOFF_MS.to_vec());
        self.callback = None;
        self.publish = Some(Box::new(publish));
    }

    /// Whether delayq delivers this job itself (a callback or a publish job) rather than a
    /// consumer.
    pub fn is_pushed(&self) -> bool {
        self.callback.is_some() || self.publish.is_some()
    }

    /// Makes this a callback job, with the defaults of one for what the producer left out:
    /// [`CALLBACK_MAX_ATTEMPTS`] attempts and the [`CALLBACK_BACKOFF_MS`] schedule. Its TTR is
    /// at least the callback's ([`Callback::ttr_ms`]), so one call never outlives its
    /// reservation.
    pub fn with_callback_defaults(
        &mut self,
        callback: Callback,
        ttr_ms: Option<u64>,
        max_attempts: Option<u32>,
        backoff_ms: Option<Vec<u64>>,
    ) {
        self.ttr_ms = ttr_ms.unwrap_or(0).max(callback.ttr_ms()).min(MAX_TTR_MS);
        self.max_attempts = max_attempts.unwrap_or(CALLBACK_MAX_ATTEMPTS);
        self.backoff_ms = backoff_ms.unwrap_or_else(|| CALLBACK_BACKOFF_MS.to_vec());
        self.callback = Some(callback);
    }

    /// The queue this job waits in when ready or dead: its topic's, or for a job delayq
    /// delivers itself (a callback or a publish job) its topic's callback queue
    /// ([`Topic::callback_queue`]).
    pub fn queue(&self) -> Topic {
        if self.is_pushed() {
            self.topic.callback_queue()
        } else {
            self.topic.clone()
        }
    }

    /// Checks the limits that do not depend on configuration other than the body size. The
    /// error names the field of `JobSpec` at fault (`body`, `ttr_ms`, `run_at`, `backoff_ms`),
    /// not the field of a request: each API maps it to its own name.
    pub fn validate(&self, max_body_bytes: usize) -> Result<(), InvalidField> {
        if self.body.len() > max_body_bytes {
            return Err(InvalidField::new(
                "body",
                format!(
                    "is {} bytes, more than the limit of {max_body_bytes}",
                    self.body.len()
                ),
            ));
        }
        validate_ttr_ms(self.ttr_ms)?;
        validate_run_at(self.run_at)?;
        validate_backoff(&self.backoff_ms)?;
        if let Some(cb) = &self.callback {
            validate_callback_timeout_ms(cb.timeout_ms)?;
        }
        if let Some(p) = &self.publish {
            if self.callback.is_some() {
                return Err(InvalidField::new(
                    "publish",
                    "a job has a callback or a publish, not both",
                ));
            }
            p.validate()?;
            if self.id.as_str().len() > MAX_AMQP_NAME_BYTES {
                return Err(InvalidField::new(
                    "id",
                    format!(
                        "of a publish job (its message_id) must be at most {MAX_AMQP_NAME_BYTES} bytes"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The state a freshly pushed job starts in.
    pub fn initial_state(&self, now: UnixMillis) -> JobState {
        if self.run_at <= now {
            JobState::Ready
        } else {
            JobState::Delayed
        }
    }
}

/// Checks a time-to-run: 1 ms to [`MAX_TTR_MS`]. The error names [`JobSpec::ttr_ms`]; each API
/// says it in its own words.
pub fn validate_ttr_ms(ttr_ms: u64) -> Result<(), InvalidField> {
    if ttr_ms == 0 || ttr_ms > MAX_TTR_MS {
        return Err(InvalidField::new(
            "ttr_ms",
            format!("must be between 1 ms and {MAX_TTR_MS} ms (1 day), got {ttr_ms} ms"),
        ));
    }
    Ok(())
}

/// Checks a callback's timeout: 1 ms to [`MAX_CALLBACK_TIMEOUT_MS`]. The error names
/// `callback.timeout_ms`.
pub fn validate_callback_timeout_ms(timeout_ms: u64) -> Result<(), InvalidField> {
    if timeout_ms == 0 || timeout_ms > MAX_CALLBACK_TIMEOUT_MS {
        return Err(InvalidField::new(
            "callback.timeout_ms",
            format!(
                "must be between 1 ms and {MAX_CALLBACK_TIMEOUT_MS} ms (10 minutes), got {timeout_ms} ms"
            ),
        ));
    }
    Ok(())
}

/// Checks a due time: at most [`MAX_RUN_AT`]. The error names [`JobSpec::run_at`]; each API
/// says it in its own words (a delay or an absolute time).
pub fn validate_run_at(run_at: UnixMillis) -> Result<(), InvalidField> {
    if run_at > MAX_RUN_AT {
        return Err(InvalidField::new(
            "run_at",
            format!("puts the due time after the year 9999 (run_at {run_at} ms)"),
        ));
    }
    Ok(())
}

/// Checks a backoff schedule: at most [`MAX_BACKOFF_STEPS`] steps of at most `MAX_RUN_AT / 2`
/// ms each. The error names [`JobSpec::backoff_ms`]; each API says it in its own words.
pub fn validate_backoff(backoff_ms: &[u64]) -> Result<(), InvalidField> {
    if backoff_ms.len() > MAX_BACKOFF_STEPS {
        return Err(InvalidField::new(
            "backoff_ms",
            format!(
                "has {} steps, at most {MAX_BACKOFF_STEPS} allowed",
                backoff_ms.len()
            ),
        ));
    }
    if let Some(step) = backoff_ms.iter().find(|&&s| s > MAX_RUN_AT / 2) {
        return Err(InvalidField::new(
            "backoff_ms",
            format!("step {step} ms is too long"),
        ));
    }
    Ok(())
}

/// Adds a delay to a time without overflow, clamping at [`MAX_RUN_AT`].
pub fn after(now: UnixMillis, delay_ms: u64) -> UnixMillis {
    now.saturating_add(delay_ms).min(MAX_RUN_AT)
}

/// A stored job: its spec plus what delayq tracks about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub spec: JobSpec,
    pub state: JobState,
    /// Deliveries so far.
    pub attempts: u32,
    /// Deadline of the current reservation; `Some` exactly when `state` is `Reserved`.
    pub reserved_until: Option<UnixMillis>,
    /// Store-assigned stamp of the push (re-stamped on burial, so dead jobs are oldest burial
    /// first): breaks ties between ready jobs of equal priority and due time.
    pub seq: u64,
}

impl Job {
    /// A new job in its initial state.
    pub fn new(spec: JobSpec, now: UnixMillis, seq: u64) -> Job {
        let state = spec.initial_state(now);
        Job {
            spec,
            state,
            attempts: 0,
            reserved_until: None,
            seq,
        }
    }

    /// The key that orders ready jobs of one topic: (priority, run_at, push order).
    pub fn ready_key(&self) -> (u32, UnixMillis, u64) {
        (self.spec.priority, self.spec.run_at, self.seq)
    }

    /// When the timer must next look at this job: the due time of a delayed job, the TTR
    /// deadline of a reserved one.
    pub fn timer_at(&self) -> Option<UnixMillis> {
        match self.state {
            JobState::Delayed => Some(self.spec.run_at),
            JobState::Reserved => self.reserved_until,
            JobState::Ready | JobState::Dead => None,
        }
    }
}

/// What happens to a reserved job whose consumer gave up on it: its TTR ran out (`delay` is
/// `None`) or it was released (`delay` is the consumer's requested delay, if any).
///
/// Rules, in order:
/// 1. `max_attempts > 0` and `attempts >= max_attempts`: the job is dead.
/// 2. An explicit release delay wins.
/// 3. With a backoff schedule, the n-th redelivery waits `backoff[n-1]` (the last step repeats).
/// 4. Otherwise the job is ready again at once.
///
/// Returns the new state and the job's new `run_at` (`now` for `Ready`; unchanged for `Dead`).
pub fn after_delivery_failed(
    spec: &JobSpec,
    attempts: u32,
    release_delay_ms: Option<u64>,
    now: UnixMillis,
) -> (JobState, UnixMillis) {
    if spec.max_attempts > 0 && attempts >= spec.max_attempts {
        return (JobState::Dead, spec.run_at);
    }
    let delay = match release_delay_ms {
        Some(d) => d,
        None => backoff_delay(&spec.backoff_ms, attempts),
    };
    if delay == 0 {
        (JobState::Ready, now)
    } else {
        (JobState::Delayed, after(now, delay))
    }
}

/// How long a callback job waits after its `attempts`-th call failed: the delay its answer's
/// `Retry-After` asked for, else its backoff step, and at least [`CALLBACK_MIN_RETRY_MS`].
pub fn callback_retry_delay(spec: &JobSpec, attempts: u32, retry_after_ms: Option<u64>) -> u64 {
    retry_after_ms
        .unwrap_or_else(|| backoff_delay(&spec.backoff_ms, attempts))
        .max(CALLBACK_MIN_RETRY_MS)
}

/// The backoff before redelivery after `attempts` deliveries (0 without a schedule).
pub fn backoff_delay(backoff_ms: &[u64], attempts: u32) -> u64 {
    if backoff_ms.is_empty() || attempts == 0 {
        return 0;
    }
    let i = (attempts as usize - 1).min(backoff_ms.len() - 1);
    backoff_ms[i]
}

/// Parses a human duration: `15s`, `3m`, `1h`, `2d`, `250ms`, or a bare number of milliseconds.
pub fn parse_duration_ms(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mul = match unit {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(mul)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> JobSpec {
        JobSpec::new(
            Topic::parse("t").unwrap(),
            JobId::parse("j").unwrap(),
            "b",
            1_000,
        )
    }

    #[test]
    fn topic_rejects_commas_whitespace_and_overlong_names() {
        assert!(Topic::parse("orders").is_ok());
        assert_eq!(Topic::parse("").unwrap_err().field, "topic");
        assert!(Topic::parse("a,b").is_err());
        assert!(Topic::parse("a b").is_err());
        assert!(Topic::parse("a\u{7}").is_err());
        assert!(Topic::parse("é".repeat(128)).is_ok());
        assert!(Topic::parse("x".repeat(129)).is_err());
        // Every ASCII character is judged as in a name that is not ASCII ("é" takes the
        // other path), and named in the refusal.
        for c in (0u8..=0x7f).map(char::from) {
            let refused = c.is_whitespace() || c.is_control() || c == ',';
            for name in [format!("a{c}b"), format!("é{c}b")] {
                match Topic::parse(name.clone()) {
                    Ok(_) => assert!(!refused, "{name:?} accepted"),
                    Err(e) => {
                        assert!(refused, "{name:?} refused: {e:?}");
                        assert!(e.message.contains(&format!("{c:?}")), "{e:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn id_allows_spaces_but_not_control_characters() {
        assert!(JobId::parse("order 42").is_ok());
        assert!(JobId::parse("a\nb").is_err());
        assert!(JobId::parse("x".repeat(257)).is_err());
        assert_eq!(JobId::parse("").unwrap_err().field, "id");
    }

    #[test]
    fn a_number_s_id_is_its_decimal_as_parse_makes_it() {
        for n in [0, 7, 1_000_000, u64::MAX] {
            assert_eq!(JobId::from_number(n), JobId::parse(n.to_string()).unwrap());
        }
    }

    #[test]
    fn generated_ids_sort_in_creation_order() {
        let a = JobId::generate();
        let b = JobId::generate();
        assert!(a < b, "{a} !< {b}");
    }

    #[test]
    fn a_failed_callback_waits_for_retry_after_or_its_backoff_and_at_least_a_second() {
        let mut s = spec();
        s.backoff_ms = vec![15_000, 0];
        assert_eq!(callback_retry_delay(&s, 1, None), 15_000);
        assert_eq!(callback_retry_delay(&s, 1, Some(2_000)), 2_000);
        assert_eq!(callback_retry_delay(&s, 2, None), CALLBACK_MIN_RETRY_MS);
        assert_eq!(callback_retry_delay(&s, 1, Some(0)), CALLBACK_MIN_RETRY_MS);
        s.backoff_ms.clear();
        assert_eq!(callback_retry_delay(&s, 5, None), CALLBACK_MIN_RETRY_MS);
    }

    #[test]
    fn job_due_now_or_earlier_starts_ready() {
        let s = spec();
        assert_eq!(s.initial_state(999), JobState::Delayed);
        assert_eq!(s.initial_state(1_000), JobState::Ready);
    }

    #[test]
    fn failed_delivery_follows_backoff_then_dies_at_max_attempts() {
        let mut s = spec();
        s.backoff_ms = vec![15_000, 180_000];
        s.max_attempts = 3;
        assert_eq!(
            after_delivery_failed(&s, 1, None, 0),
            (JobState::Delayed, 15_000)
        );
        assert_eq!(
            after_delivery_failed(&s, 2, None, 0),
            (JobState::Delayed, 180_000)
        );
        assert_eq!(after_delivery_failed(&s, 3, None, 0).0, JobState::Dead);
        // An explicit release delay overrides the schedule; 0 means ready now.
        assert_eq!(
            after_delivery_failed(&s, 1, Some(0), 5),
            (JobState::Ready, 5)
        );
    }

    #[test]
    fn backoff_repeats_its_last_step() {
        assert_eq!(backoff_delay(&[1, 2], 5), 2);
        assert_eq!(backoff_delay(&[], 5), 0);
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration_ms("15s"), Some(15_000));
        assert_eq!(parse_duration_ms("3m"), Some(180_000));
        assert_eq!(parse_duration_ms("250"), Some(250));
        assert_eq!(parse_duration_ms("1x"), None);
        assert_eq!(parse_duration_ms(""), None);
    }
}
