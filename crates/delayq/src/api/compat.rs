//! The compat API: `/push`, `/pop`, `/finish`, `/delete`, `/get`, compatible with
//! ouqiang/delay-queue v0.4, so that project's existing clients keep working. docs/compat.md
//! is the user-facing description and lists every deliberate difference from the original.
//!
//! What this file reproduces: any HTTP method; the body read as JSON whatever its
//! Content-Type, decoded with Go `encoding/json` rules (keys matched case-insensitively,
//! unknown keys ignored, `null` leaves a field at its zero value, `delay`/`ttr` must be JSON
//! integers, strings must be strings; but a field given twice is refused, naming it); every
//! answer HTTP 200 with a compact `{"code","message","data"}` envelope; the original messages,
//! in the original order.
//!
//! What it does not do: decide job semantics (job.rs, the store), wait (the dispatcher does),
//! or log bodies (only ids and topics are logged).

use super::{AppState, request_body_limit};
use crate::dispatch::DispatchError;
use crate::job::{self, Callback, InvalidField, Job, JobId, JobSpec, JobState, Topic};
use crate::store::{PushMode, StoreError, StoreResult};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde::Serialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use std::cell::Cell;
use std::fmt;
use std::time::Duration;

/// The original success messages.
const MSG_PUSHED: &str = "添加成功";
const MSG_OK: &str = "操作成功";
/// The original failure messages, in the order the original checks them.
const MSG_BAD_JSON: &str = "解析json失败";
const MSG_READ_FAILED: &str = "读取request body失败";
const MSG_ID_EMPTY: &str = "job id不能为空";
const MSG_TOPIC_EMPTY: &str = "topic 不能为空";
/// `/pop`'s own wording (no space), as in the original.
const MSG_POP_TOPIC_EMPTY: &str = "topic不能为空";
/// The original said `1 - (2^31 - 1)`; delay 0 (ready now) is allowed here.
const MSG_DELAY_RANGE: &str = "delay 取值范围0 - (2^31 - 1)";
const MSG_TTR_RANGE: &str = "ttr 取值范围1 - 86400";
/// The original's fallback when its response could not be encoded (its `code` is a string).
const FALLBACK_BODY: &str = r#"{"code":"1", "message": "生成响应body异常", "data":[]}"#;

/// Longest delay in seconds: 2^31 - 1 (the original's bound, without its off-by-one).
const MAX_DELAY_SECS: i64 = (1 << 31) - 1;
/// TTR bounds in seconds.
const MIN_TTR_SECS: i64 = 1;
const MAX_TTR_SECS: i64 = 86_400;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/push", any(push))
        .route("/pop", any(pop))
        .route("/finish", any(finish))
        .route("/delete", any(delete))
        .route("/get", any(get))
}

// ---------------------------------------------------------------------------------------------
// Replies

/// The response envelope; field order is the wire order.
#[derive(Serialize)]
struct Envelope<'a, T> {
    code: u8,
    message: &'a str,
    data: Option<T>,
}

/// HTTP 200, `application/json`, `{"code":code,"message":message,"data":data}`.
fn reply<T: Serialize>(code: u8, message: &str, data: Option<T>) -> Response {
    let body = serde_json::to_vec(&Envelope {
        code,
        message,
        data,
    })
    .unwrap_or_else(|_| FALLBACK_BODY.as_bytes().to_vec());
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

fn success<T: Serialize>(message: &str, data: Option<T>) -> Response {
    reply(0, message, data)
}

/// A request answered with code 1 and `data: null`: the message says why.
#[derive(Debug)]
struct Refusal(String);

impl Refusal {
    fn new(message: impl Into<String>) -> Refusal {
        Refusal(message.into())
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        reply::<()>(1, &self.0, None)
    }
}

impl From<InvalidField> for Refusal {
    /// `field: message` under this API's name for the field, e.g. `topic: must not contain
    /// whitespace ...`.
    fn from(e: InvalidField) -> Refusal {
        Refusal(format!("{}: {}", field_of_spec(e.field), e.message))
    }
}

/// This API's request field for a field of `JobSpec` (as job.rs's validation errors name it):
/// `ttr` for `ttr_ms`, `delay` for `run_at`; `topic`, `id` and `body` are the same word.
fn field_of_spec(spec_field: &'static str) -> &'static str {
    match spec_field {
        "ttr_ms" => Field::Ttr.name(),
        "run_at" => Field::Delay.name(),
        other => other,
    }
}

impl From<StoreError> for Refusal {
    /// `store unavailable: ...` for an outage; logged.
    fn from(e: StoreError) -> Refusal {
        tracing::warn!(error = %e, "compat api: store call failed");
        Refusal(e.to_string())
    }
}

impl From<DispatchError> for Refusal {
    fn from(e: DispatchError) -> Refusal {
        match e {
            DispatchError::Store(e) => e.into(),
            e => Refusal(e.to_string()),
        }
    }
}

type Answer = Result<Response, Refusal>;

/// `/pop`'s job: the original's `{"id","body"}` plus the topic it came from.
#[derive(Serialize)]
struct PoppedJob<'a> {
    id: &'a str,
    body: &'a str,
    topic: &'a str,
}

/// `/get`'s job, in the original's field order. `delay` is the due time in Unix seconds;
/// `url`, a callback job's URL, is there only for a callback job.
#[derive(Serialize)]
struct StoredJob<'a> {
    topic: &'a str,
    id: &'a str,
    delay: u64,
    ttr: u64,
    body: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
}

// ---------------------------------------------------------------------------------------------
// Request decoding, after Go encoding/json

/// The request fields any route knows; each route reads a subset and ignores the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Topic,
    Id,
    Delay,
    Ttr,
    Body,
    /// Our extension to `/pop`: seconds to wait.
    Timeout,
    /// `/push`: the callback URL that makes the job a callback job (our extension, `url`).
    Url,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Topic => "topic",
            Field::Id => "id",
            Field::Delay => "delay",
            Field::Ttr => "ttr",
            Field::Body => "body",
            Field::Timeout => "timeout",
            Field::Url => "url",
        }
    }
}

const PUSH_FIELDS: &[Field] = &[
    Field::Topic,
    Field::Id,
    Field::Delay,
    Field::Ttr,
    Field::Body,
    Field::Url,
];
const POP_FIELDS: &[Field] = &[Field::Topic, Field::Timeout];
const ID_FIELDS: &[Field] = &[Field::Id];

/// A decoded request: Go's zero values for what was absent or `null`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Request {
    topic: String,
    id: String,
    delay: i64,
    ttr: i64,
    body: String,
    timeout: Option<i64>,
    url: String,
}

/// Why a body could not be decoded.
#[derive(Debug)]
enum Undecodable {
    /// Not JSON, or not of the shape Go would accept: the original's message.
    Json,
    /// One of the route's fields given twice (Go would keep the last): refused naming it.
    Repeated(Field),
}

/// Decodes a body as Go's `json.Unmarshal` into a struct with `fields` would: a JSON object
/// (or `null`, which sets nothing), keys matched case-insensitively to the fields (our field
/// names are lowercase ASCII without `k`/`s`, so ASCII folding is exactly Go's folding),
/// unknown keys skipped whatever their value, `null` values leaving the field as it is,
/// strings only into string fields, integers only into integer fields (`1e3`, `1.5`, `"1"` and
/// out-of-range numbers refused). Unlike Go, a field given twice (`{"id":"a","ID":"b"}`) is
/// refused rather than the later key winning.
fn decode(bytes: &[u8], fields: &[Field]) -> Result<Request, Undecodable> {
    let repeated = Cell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let decoded = GoStruct {
        fields,
        repeated: &repeated,
    }
    .deserialize(&mut de)
    .and_then(|r| de.end().map(|()| r));
    match (decoded, repeated.get()) {
        (Ok(r), _) => Ok(r),
        (Err(_), Some(field)) => Err(Undecodable::Repeated(field)),
        (Err(_), None) => Err(Undecodable::Json),
    }
}

struct GoStruct<'f> {
    fields: &'f [Field],
    /// Set to the field found twice, when decoding stops for that.
    repeated: &'f Cell<Option<Field>>,
}

impl<'de> DeserializeSeed<'de> for GoStruct<'_> {
    type Value = Request;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Request, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for GoStruct<'_> {
    type Value = Request;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    /// Go: unmarshalling `null` into a struct is a no-op.
    fn visit_unit<E: de::Error>(self) -> Result<Request, E> {
        Ok(Request::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Request, A::Error> {
        let mut r = Request::default();
        // The fields seen so far, one bit per `Field`.
        let mut seen = 0u32;
        while let Some(key) = map.next_key_seed(Key(self.fields))? {
            let Some(field) = key else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let bit = 1u32 << field as u32;
            if seen & bit != 0 {
                self.repeated.set(Some(field));
                return Err(de::Error::custom("a field is given more than once"));
            }
            seen |= bit;
            match field {
                Field::Topic | Field::Id | Field::Body | Field::Url => {
                    if let Some(s) = map.next_value::<Option<String>>()? {
                        *match field {
                            Field::Topic => &mut r.topic,
                            Field::Id => &mut r.id,
                            Field::Url => &mut r.url,
                            _ => &mut r.body,
                        } = s;
                    }
                }
                Field::Delay | Field::Ttr | Field::Timeout => {
                    if let Some(n) = map.next_value::<Option<i64>>()? {
                        match field {
                            Field::Delay => r.delay = n,
                            Field::Ttr => r.ttr = n,
                            _ => r.timeout = Some(n),
                        }
                    }
                }
            }
        }
        Ok(r)
    }
}

/// A key of the object: which of the fields it names (ASCII case folded), `None` for any
/// other. Read without copying the key when it has no escapes.
struct Key<'f>(&'f [Field]);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = Option<Field>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<Field>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = Option<Field>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Option<Field>, E> {
        Ok(self
            .0
            .iter()
            .find(|f| key.eq_ignore_ascii_case(f.name()))
            .copied())
    }
}

/// Reads and decodes a request, or refuses it with the original's message.
fn parse(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
    fields: &[Field],
) -> Result<Request, Refusal> {
    let bytes = match body {
        Ok(b) => b,
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return Err(Refusal::new(format!(
                "body: the request is larger than {} bytes (a job body may have up to \
                 max_body_bytes = {} bytes)",
                request_body_limit(&state.config),
                state.config.max_body_bytes
            )));
        }
        Err(_) => return Err(Refusal::new(MSG_READ_FAILED)),
    };
    decode(&bytes, fields).map_err(|e| match e {
        Undecodable::Json => Refusal::new(MSG_BAD_JSON),
        Undecodable::Repeated(f) => Refusal::new(format!("{}: is given more than once", f.name())),
    })
}

/// A job id: not trimmed, but refused when blank.
fn job_id(raw: String) -> Result<JobId, Refusal> {
    if raw.trim().is_empty() {
        return Err(Refusal::new(MSG_ID_EMPTY));
    }
    Ok(JobId::parse(raw)?)
}

// ---------------------------------------------------------------------------------------------
// Handlers

/// `/push {"topic","id","delay","ttr","body","url"}`: adds a job, replacing one with the same
/// id. With a `url` it is a callback job (the callback's defaults; `ttr` is not used then and
/// may be left out).
async fn push(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Answer {
    let r = parse(&state, body, PUSH_FIELDS)?;
    let id = job_id(r.id)?;
    if r.topic.trim().is_empty() {
        return Err(Refusal::new(MSG_TOPIC_EMPTY));
    }
    let topic = Topic::parse(r.topic)?;
    if !(0..=MAX_DELAY_SECS).contains(&r.delay) {
        return Err(Refusal::new(MSG_DELAY_RANGE));
    }
    let callback = match r.url.as_str() {
        "" => None,
        url => {
            state
                .config
                .callback_allow
                .check_url(url)
                .map_err(|e| Refusal::new(format!("url: {e}")))?;
            Some(Callback {
                url: r.url.clone(),
                timeout_ms: job::DEFAULT_CALLBACK_TIMEOUT_MS,
            })
        }
    };
    let ttr_unused = callback.is_some() && r.ttr == 0;
    if !ttr_unused && !(MIN_TTR_SECS..=MAX_TTR_SECS).contains(&r.ttr) {
        return Err(Refusal::new(MSG_TTR_RANGE));
    }
    let at = state.clock.read();
    let now = at.millis();
    // Both ranges were checked above: the casts cannot wrap. Never early: clock.rs `due_after`.
    let run_at = at.due_after(r.delay as u64 * 1000).min(job::MAX_RUN_AT);
    let mut spec = JobSpec::new(topic, id, r.body, run_at);
    spec.ttr_ms = r.ttr as u64 * 1000;
    if let Some(cb) = callback {
        spec.with_callback_defaults(cb, Some(spec.ttr_ms), None, None);
    }
    spec.validate(state.config.max_body_bytes)?;
    let (job_id, topic) = (spec.id.clone(), spec.topic.clone());
    let outcome = state.store.push(spec, PushMode::Replace, now).await?;
    tracing::debug!(job_id = %job_id, topic = %topic, ?outcome, "compat api: push");
    Ok(success::<()>(MSG_PUSHED, None))
}

/// `/pop {"topic":"a,b","timeout":secs}`: reserves one ready job, waiting for one up to the
/// timeout; `data: null` when none became ready.
async fn pop(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Answer {
    let r = parse(&state, body, POP_FIELDS)?;
    let mut topics: Vec<Topic> = Vec::new();
    for item in r.topic.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let topic = Topic::parse(item)?;
        if !topics.contains(&topic) {
            topics.push(topic);
        }
    }
    if topics.is_empty() {
        return Err(Refusal::new(MSG_POP_TOPIC_EMPTY));
    }
    if topics.len() > state.config.max_batch {
        return Err(Refusal::new(format!(
            "topic: at most {} topics in one pop, got {}",
            state.config.max_batch,
            topics.len()
        )));
    }
    let wait_secs = match r.timeout {
        None => state.config.compat_pop_timeout_secs,
        Some(n) => u64::try_from(n)
            .map_err(|_| Refusal::new(format!("timeout: must be 0 or more seconds, got {n}")))?,
    }
    .min(state.config.max_wait_secs);
    let jobs = state
        .dispatch
        .poll(topics, 1, Duration::from_secs(wait_secs))
        .await?;
    let Some(j) = jobs.first() else {
        return Ok(success::<()>(MSG_OK, None));
    };
    tracing::debug!(job_id = %j.spec.id, topic = %j.spec.topic, "compat api: pop");
    let popped = PoppedJob {
        id: j.spec.id.as_str(),
        body: &j.spec.body,
        topic: j.spec.topic.as_str(),
    };
    Ok(success(MSG_OK, Some(popped)))
}

/// `/finish {"id"}`: remove the job, whatever its state; succeed for an unknown id too (the
/// original ran the same handler as for `/delete`; only the metrics tell the two apart).
async fn finish(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Answer {
    let id = job_id(parse(&state, body, ID_FIELDS)?.id)?;
    removed(state.store.finish(&id).await)
}

/// `/delete {"id"}`: as `/finish`.
async fn delete(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Answer {
    let id = job_id(parse(&state, body, ID_FIELDS)?.id)?;
    removed(state.store.delete(&id).await)
}

/// The answer to `/finish` and `/delete`: success whether or not the job existed.
fn removed(r: StoreResult<JobState>) -> Answer {
    match r {
        Ok(_) | Err(StoreError::NotFound) => Ok(success::<()>(MSG_OK, None)),
        Err(e) => Err(e.into()),
    }
}

/// `/get {"id"}`: the stored job, `data: null` when there is none.
async fn get(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Answer {
    let id = job_id(parse(&state, body, ID_FIELDS)?.id)?;
    match state.store.get(&id).await {
        Ok(job) => Ok(success(MSG_OK, Some(stored_job(&job)))),
        Err(StoreError::NotFound) => Ok(success::<()>(MSG_OK, None)),
        Err(e) => Err(e.into()),
    }
}

fn stored_job(job: &Job) -> StoredJob<'_> {
    StoredJob {
        topic: job.spec.topic.as_str(),
        id: job.spec.id.as_str(),
        delay: job.spec.run_at / 1000,
        ttr: job.spec.ttr_ms.div_ceil(1000),
        body: &job.spec.body,
        url: job.spec.callback.as_ref().map(|c| c.url.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(s: &str) -> Result<Request, Undecodable> {
        decode(s.as_bytes(), PUSH_FIELDS)
    }

    #[test]
    fn spec_validation_errors_name_this_apis_fields() {
        let topic = Topic::parse("t").unwrap();
        let spec = JobSpec::new(topic, JobId::parse("j").unwrap(), "four", 0);
        let refusal =
            |spec: &JobSpec, max_body| Refusal::from(spec.validate(max_body).unwrap_err()).0;
        assert_eq!(
            refusal(&spec, 3),
            "body: is 4 bytes, more than the limit of 3"
        );
        let mut long_ttr = spec.clone();
        long_ttr.ttr_ms = job::MAX_TTR_MS + 1;
        assert!(refusal(&long_ttr, 4).starts_with("ttr: "));
        let mut late = spec.clone();
        late.run_at = job::MAX_RUN_AT + 1;
        assert!(refusal(&late, 4).starts_with("delay: "));
        let r = Refusal::from(Topic::parse("a b").unwrap_err()).0;
        assert!(r.starts_with("topic: "), "{r}");
    }

    #[test]
    fn keys_match_case_insensitively() {
        let r = push(r#"{"ID":"b","Topic":"t","DELAY":3,"tTr":4,"body":"x"}"#).unwrap();
        assert_eq!(
            (r.id.as_str(), r.topic.as_str(), r.delay, r.ttr),
            ("b", "t", 3, 4)
        );
    }

    #[test]
    fn a_field_given_twice_in_any_case_is_refused_naming_it() {
        for (json, field) in [
            (r#"{"topic":"first","topic":"second"}"#, Field::Topic),
            (r#"{"ID":"a","Topic":"t","id":"b"}"#, Field::Id),
            (r#"{"id":"a","id":null}"#, Field::Id),
            (r#"{"delay":1,"x":0,"Delay":1}"#, Field::Delay),
        ] {
            match push(json) {
                Err(Undecodable::Repeated(f)) => assert_eq!(f, field, "{json}"),
                other => panic!("{json}: {other:?}"),
            }
        }
        // Unknown keys are skipped, repeated or not; `/pop` does not know `id`.
        assert_eq!(push(r#"{"x":1,"x":2,"id":"a"}"#).unwrap().id, "a");
        assert!(decode(br#"{"id":1,"id":2,"topic":"t"}"#, POP_FIELDS).is_ok());
    }

    #[test]
    fn null_leaves_a_field_as_it_is_and_a_null_body_sets_nothing() {
        let r = push(r#"{"id":"a","delay":null}"#).unwrap();
        assert_eq!((r.id.as_str(), r.delay), ("a", 0));
        assert_eq!(push("null").unwrap(), Request::default());
    }

    #[test]
    fn unknown_keys_are_skipped_whatever_their_value() {
        let r = push(r#"{"x":{"deep":[1,2.5,"s"]},"id":"a","timeout":"not mine"}"#).unwrap();
        assert_eq!(r.id, "a");
        assert_eq!(r.timeout, None);
    }

    #[test]
    fn integers_must_be_json_integers_in_range() {
        for bad in ["1e3", "1.5", "\"1\"", "9223372036854775808", "true", "[]"] {
            assert!(push(&format!(r#"{{"delay":{bad}}}"#)).is_err(), "{bad}");
        }
        assert_eq!(push(r#"{"delay":-5}"#).unwrap().delay, -5);
    }

    #[test]
    fn corner_cases_where_go_differs_are_refused() {
        // Listed in docs/compat.md: Go reads `-0` as 0 and replaces bad characters.
        assert!(push(r#"{"delay":-0}"#).is_err());
        assert!(push(r#"{"body":"\ud800"}"#).is_err());
        assert!(decode(b"{\"body\":\"\xff\"}", PUSH_FIELDS).is_err());
    }

    #[test]
    fn deep_nesting_cannot_overflow_the_stack() {
        let (open, close) = ("[".repeat(1_000_000), "]".repeat(1_000_000));
        assert_eq!(
            push(&format!(r#"{{"x":{open}{close},"id":"a"}}"#))
                .unwrap()
                .id,
            "a"
        );
        assert!(push(&format!(r#"{{"x":{open}"#)).is_err());
        assert!(push(&format!(r#"{{"body":{open}{close}}}"#)).is_err());
        assert!(push(&format!("{open}{close}")).is_err());
    }

    #[test]
    fn strings_must_be_json_strings() {
        for bad in ["1", "{}", "[\"a\"]", "false"] {
            assert!(push(&format!(r#"{{"body":{bad}}}"#)).is_err(), "{bad}");
        }
    }

    #[test]
    fn non_objects_empty_bodies_and_trailing_data_are_refused() {
        for bad in ["", "  ", "[1]", "\"s\"", "1", "{} {}", "{", "topic=a"] {
            assert!(push(bad).is_err(), "{bad:?}");
        }
    }
}
