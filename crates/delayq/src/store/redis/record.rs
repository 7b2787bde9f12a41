//! The stored form of a job: a cmsgpack array written by the Lua scripts (format in
//! `lib.lua`), decoded here with `rmp-serde`. Also the small reply decoders shared by the
//! store's methods. Rust never writes records: only the scripts do, so there is one writer of
//! the format.

use crate::job::{Job, JobId, JobSpec, JobState, Topic};
use crate::store::{StoreError, StoreResult};
use redis::Value;
use serde::Deserialize;

/// The record as packed by `lib.lua`'s `put`; field order is the format.
#[derive(Debug, Deserialize)]
struct Record(
    String,   // state code
    String,   // topic
    String,   // body
    u64,      // run_at
    u64,      // ttr_ms
    u32,      // priority
    u32,      // max_attempts
    u32,      // attempts
    u64,      // reserved_until (0 = none)
    u64,      // seq
    Vec<u64>, // backoff_ms
);

/// Decodes the record of job `id`.
pub fn decode_job(id: &str, raw: &[u8]) -> StoreResult<Job> {
    let corrupt = |why: String| StoreError::Corrupt(format!("job record {id:?}: {why}"));
    let r: Record = rmp_serde::from_slice(raw).map_err(|e| corrupt(e.to_string()))?;
    let state = state_from_code(&r.0).map_err(|_| corrupt(format!("state code {:?}", r.0)))?;
    let topic = Topic::parse(r.1).map_err(|e| corrupt(e.to_string()))?;
    let id = JobId::parse(id).map_err(|e| corrupt(e.to_string()))?;
    Ok(Job {
        spec: JobSpec {
            topic,
            id,
            body: r.2,
            run_at: r.3,
            ttr_ms: r.4,
            priority: r.5,
            max_attempts: r.6,
            backoff_ms: r.10,
        },
        state,
        attempts: r.7,
        reserved_until: (state == JobState::Reserved).then_some(r.8),
        seq: r.9,
    })
}

pub fn state_from_code(code: &str) -> StoreResult<JobState> {
    JobState::from_code(code).ok_or_else(|| StoreError::Corrupt(format!("state code {code:?}")))
}

/// A reply that must be a byte string.
pub fn bytes(v: &Value) -> StoreResult<&[u8]> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.as_bytes()),
        other => Err(unexpected(other)),
    }
}

/// A reply that must be a UTF-8 string.
pub fn string(v: &Value) -> StoreResult<&str> {
    std::str::from_utf8(bytes(v)?).map_err(|_| StoreError::Corrupt("non-UTF-8 reply".into()))
}

/// A reply that must be an integer.
pub fn int(v: &Value) -> StoreResult<i64> {
    match v {
        Value::Int(n) => Ok(*n),
        Value::BulkString(_) | Value::SimpleString(_) => {
            string(v)?.parse().map_err(|_| unexpected(v))
        }
        other => Err(unexpected(other)),
    }
}

/// A reply that must be an array (nil counts as empty).
pub fn array(v: &Value) -> StoreResult<&[Value]> {
    match v {
        Value::Array(a) => Ok(a),
        Value::Nil => Ok(&[]),
        other => Err(unexpected(other)),
    }
}

pub fn unexpected(v: &Value) -> StoreError {
    StoreError::Corrupt(format!("unexpected reply from Redis: {v:?}"))
}

/// Decodes the `{'ok', record, ...} | {'nf'} | {'ws', code}` reply of a by-id script into the
/// job (and the rest of the reply).
pub fn by_id_reply<'a>(id: &JobId, v: &'a Value) -> StoreResult<(Job, &'a [Value])> {
    let a = array(v)?;
    match a.first().map(string).transpose()? {
        Some("ok") if a.len() >= 2 => Ok((decode_job(id.as_str(), bytes(&a[1])?)?, &a[2..])),
        Some("nf") => Err(StoreError::NotFound),
        Some("ws") if a.len() == 2 => Err(StoreError::WrongState(state_from_code(string(&a[1])?)?)),
        _ => Err(unexpected(v)),
    }
}
