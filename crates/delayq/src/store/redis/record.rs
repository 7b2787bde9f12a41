//! The stored form of a job: a cmsgpack array (format in `lib.lua`), decoded here with
//! `rmp-serde`, and the state codes in it. Also the small reply decoders shared by the
//! store's modules.
//!
//! Writers: the scripts write every record, except a new job's, which [`encode_new`] packs
//! here so `push.lua` only stores it (packing in Lua would cost the push function a table,
//! number parsing and the pack per job). [`encode_new`] writes byte for byte what lib.lua's
//! `encode` writes for the same job: `tests/store/redis_store/layout.rs`
//! `pushed_records_are_what_the_scripts_would_write` has Redis's own `encode` re-pack
//! records pushed this way and compares.

use crate::job::{Callback, Job, JobId, JobSpec, JobState, Publish, Topic};
use crate::store::{StoreError, StoreResult};
use redis::Value;
use serde::{Deserialize, Serialize};

/// One element of a stored record.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Field {
    Int(u64),
    Text(String),
    List(Vec<u64>),
}

/// One element of a record being written.
#[derive(Serialize)]
#[serde(untagged)]
enum Out<'a> {
    Int(u64),
    Text(&'a str),
    List(&'a [u64]),
}

/// The stored layout's defaults for omitted trailing fields (`lib.lua`): part of the storage
/// format, not job.rs's defaults. Never change them.
const STORED_DEFAULT_TTR_MS: u64 = 60_000;
const STORED_DEFAULT_PRIORITY: u64 = 1024;

/// Decodes the record of job `id`, in either layout `lib.lua` describes: the current one
/// (`state, topic, body, run_at, seq`, then `ttr_ms, priority, max_attempts, backoff_ms,
/// attempts, reserved_until` with trailing defaults omitted, then `callback_url,
/// callback_timeout_ms` for a callback job, and `"", 0, publish` for a publish job) or the 11-element one (always 11 elements, the 11th
/// the backoff array).
pub fn decode_job(id: &str, raw: &[u8]) -> StoreResult<Job> {
    let corrupt = |why: String| StoreError::Corrupt(format!("job record {id:?}: {why}").into());
    let mut r: Vec<Field> = rmp_serde::from_slice(raw)
        .map_err(|e| StoreError::corrupt(format!("job record {id:?}"), e))?;
    if r.len() == 11 && matches!(r[10], Field::List(_)) {
        // The 11-element layout, reordered into the current one.
        let backoff = r.pop();
        let seq = r.remove(9);
        r.insert(4, seq);
        let (ru, att) = (r.pop(), r.pop());
        r.extend(backoff);
        r.extend(att);
        r.extend(ru);
    }
    if !(5..=11).contains(&r.len()) && r.len() != 13 && r.len() != 14 {
        return Err(corrupt(format!("{} fields", r.len())));
    }
    let text = |i: usize| match r.get(i) {
        Some(Field::Text(s)) => Ok(s.clone()),
        other => Err(corrupt(format!("field {i}: {other:?}"))),
    };
    let num = |i: usize, default: u64| match r.get(i) {
        None => Ok(default),
        Some(Field::Int(n)) => Ok(*n),
        other => Err(corrupt(format!("field {i}: {other:?}"))),
    };
    let small = |i: usize, default: u64| {
        u32::try_from(num(i, default)?).map_err(|_| corrupt(format!("field {i} out of range")))
    };
    let code = text(0)?;
    // A job placed ahead (`p`) is delayed until its group's tick, ready after: the scripts
    // resolve it in what they return, and `get` asks its group ([`placed_ahead`]).
    let state = match code.as_str() {
        "p" => JobState::Delayed,
        _ => state_from_code(&code).map_err(|_| corrupt(format!("state code {code:?}")))?,
    };
    let topic = Topic::parse(text(1)?).map_err(|e| corrupt(e.to_string()))?;
    let id = JobId::parse(id).map_err(|e| corrupt(e.to_string()))?;
    let backoff_ms = match r.get(8) {
        None => Vec::new(),
        Some(Field::List(b)) => b.clone(),
        other => return Err(corrupt(format!("field 8: {other:?}"))),
    };
    Ok(Job {
        spec: JobSpec {
            topic,
            id,
            body: text(2)?,
            run_at: num(3, 0)?,
            ttr_ms: num(5, STORED_DEFAULT_TTR_MS)?,
            priority: small(6, STORED_DEFAULT_PRIORITY)?,
            max_attempts: small(7, 0)?,
            backoff_ms,
            callback: match r.len() {
                13 => Some(Callback {
                    url: text(11)?,
                    timeout_ms: num(12, 0)?,
                }),
                _ => None,
            },
            publish: match r.len() {
                14 => Some(Box::new(Publish::unpack(&text(13)?).map_err(corrupt)?)),
                _ => None,
            },
        },
        state,
        attempts: small(9, 0)?,
        reserved_until: (state == JobState::Reserved)
            .then(|| num(10, 0))
            .transpose()?,
        seq: num(4, 0)?,
    })
}

/// Whether a stored record is a job placed ahead (`lib.lua`): state `p`, the byte after
/// the array header and the one-byte string's header. [`decode_job`] reads it as delayed;
/// it is ready once its group ([`super::keys::group`]) has left the `due` HASH.
pub fn placed_ahead(raw: &[u8]) -> bool {
    raw.get(1..3) == Some(&[0xa1, b'p'])
}

/// The record of a job being pushed (or restored with `attempts`), in `state` (delayed or
/// ready) with push stamp `seq`: `state, topic, body, run_at, seq`, then `ttr_ms, priority,
/// max_attempts, backoff_ms, attempts` down to the last that differs from its stored default
/// (reserved_until is 0 for a job that is not reserved, so omitted); a callback job has all of
/// them, then `reserved_until, callback_url, callback_timeout_ms`, and a publish job
/// `reserved_until, "", 0, publish` ([`Publish::pack`]). msgpack's smallest form for every integer, string and
/// array length, as Lua's cmsgpack packs them. `run_at`, `ttr_ms` and the backoff steps must
/// already be clamped below 2^53 (exact in Lua), as every caller does with `MAX_RUN_AT`.
pub fn encode_new(job: &JobSpec, state: JobState, seq: u64, attempts: u32) -> Vec<u8> {
    let code = state_code(state);
    let mut r = vec![
        Out::Text(code),
        Out::Text(job.topic.as_str()),
        Out::Text(&job.body),
        Out::Int(job.run_at),
        Out::Int(seq),
        Out::Int(job.ttr_ms),
        Out::Int(u64::from(job.priority)),
        Out::Int(u64::from(job.max_attempts)),
        Out::List(&job.backoff_ms),
        Out::Int(u64::from(attempts)),
    ];
    let default = |i: usize, o: &Out| match (i, o) {
        (5, Out::Int(n)) => *n == STORED_DEFAULT_TTR_MS,
        (6, Out::Int(n)) => *n == STORED_DEFAULT_PRIORITY,
        (7, Out::Int(n)) => *n == 0,
        (8, Out::List(b)) => b.is_empty(),
        (9, Out::Int(n)) => *n == 0,
        _ => false,
    };
    let packed = job.publish.as_ref().map(|p| p.pack());
    if let Some(cb) = &job.callback {
        r.extend([Out::Int(0), Out::Text(&cb.url), Out::Int(cb.timeout_ms)]);
    } else if let Some(p) = &packed {
        r.extend([Out::Int(0), Out::Text(""), Out::Int(0), Out::Text(p)]);
    }
    while r.len() > 5 && r.len() <= 10 && default(r.len() - 1, &r[r.len() - 1]) {
        r.pop();
    }
    // Serializing a Vec of these cannot fail: every element is a plain value.
    rmp_serde::to_vec(&r).unwrap_or_default()
}

/// A state's code in records, index keys (`counts` fields) and replies: part of the storage
/// format, never change it.
fn state_code(state: JobState) -> &'static str {
    match state {
        JobState::Delayed => "d",
        JobState::Ready => "r",
        JobState::Reserved => "x",
        JobState::Dead => "b",
    }
}

/// The state of a code ([`state_code`]'s inverse), `None` for an unknown code.
fn state_of_code(code: &str) -> Option<JobState> {
    Some(match code {
        "d" => JobState::Delayed,
        "r" => JobState::Ready,
        "x" => JobState::Reserved,
        "b" => JobState::Dead,
        _ => return None,
    })
}

/// The state of a code read from Redis; an unknown code is corrupt data.
pub fn state_from_code(code: &str) -> StoreResult<JobState> {
    state_of_code(code).ok_or_else(|| StoreError::Corrupt(format!("state code {code:?}").into()))
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

/// A batch call's reply (or its error) as one value per item sent, `n` of them.
pub fn per_item(reply: &StoreResult<Value>, n: usize) -> StoreResult<&[Value]> {
    let v = reply.as_ref().map_err(Clone::clone)?;
    let a = array(v)?;
    if a.len() == n {
        Ok(a)
    } else {
        Err(unexpected(v))
    }
}

/// A job record its function could not decode (status `k`).
pub fn corrupt_record(id: &JobId) -> StoreError {
    StoreError::Corrupt(format!("job record {:?} does not decode", id.as_str()).into())
}

/// A zset score reply (a decimal string in RESP2, a double in RESP3) as milliseconds.
pub fn score_ms(v: &Value) -> StoreResult<u64> {
    let s = match v {
        Value::Double(d) => return Ok(d.max(0.0) as u64),
        v => string(v)?,
    };
    s.parse::<f64>()
        .map(|f| f.max(0.0) as u64)
        .map_err(|_| unexpected(v))
}

pub fn unexpected(v: &Value) -> StoreError {
    StoreError::Corrupt(format!("unexpected reply from Redis: {v:?}").into())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_code_reads_back_as_its_state() {
        for state in [
            JobState::Delayed,
            JobState::Ready,
            JobState::Reserved,
            JobState::Dead,
        ] {
            assert_eq!(state_from_code(state_code(state)), Ok(state));
        }
        assert_eq!(
            ["d", "r", "x", "b"].map(|c| state_from_code(c).map(state_code)),
            ["d", "r", "x", "b"].map(Ok)
        );
        assert!(matches!(state_from_code("z"), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn both_record_layouts_decode_to_the_same_job() {
        // The 11-element layout: backoff last, nothing omitted.
        let old = rmp_serde::to_vec(&(
            "x",
            "t",
            "body",
            5u64,
            30_000u64,
            7u32,
            3u32,
            2u32,
            99u64,
            1234u64,
            vec![10u64, 20],
        ))
        .unwrap();
        let new = rmp_serde::to_vec(&(
            "x",
            "t",
            "body",
            5u64,
            1234u64,
            30_000u64,
            7u32,
            3u32,
            vec![10u64, 20],
            2u32,
            99u64,
        ))
        .unwrap();
        let a = decode_job("j", &old).unwrap();
        assert_eq!(a, decode_job("j", &new).unwrap());
        assert_eq!(
            (
                a.spec.ttr_ms,
                a.spec.priority,
                a.spec.max_attempts,
                a.attempts,
                a.seq
            ),
            (30_000, 7, 3, 2, 1234)
        );
        assert_eq!(
            (a.reserved_until, a.spec.backoff_ms),
            (Some(99), vec![10, 20])
        );
    }

    #[test]
    fn callback_and_publish_jobs_round_trip() {
        let mut spec = JobSpec::new(
            Topic::parse("t").unwrap(),
            JobId::parse("j").unwrap(),
            "aGk=",
            5,
        );
        spec.publish = Some(Box::new(Publish {
            exchange: String::new(),
            routing_key: "q".into(),
            content_type: Some("text/x".into()),
            headers: None,
            body_base64: true,
        }));
        let j = decode_job("j", &encode_new(&spec, JobState::Ready, 7, 2)).unwrap();
        assert_eq!((j.spec, j.attempts, j.seq), (spec.clone(), 2, 7));
        spec.publish = None;
        spec.callback = Some(Callback {
            url: "http://a/".into(),
            timeout_ms: 9,
        });
        let j = decode_job("j", &encode_new(&spec, JobState::Delayed, 7, 0)).unwrap();
        assert_eq!(j.spec, spec);
    }

    #[test]
    fn omitted_trailing_fields_take_the_stored_defaults() {
        let short = rmp_serde::to_vec(&("d", "t", "b", 5u64, 1234u64)).unwrap();
        let j = decode_job("j", &short).unwrap();
        assert_eq!(j.state, JobState::Delayed);
        assert_eq!(
            (
                j.spec.ttr_ms,
                j.spec.priority,
                j.spec.max_attempts,
                j.attempts
            ),
            (60_000, 1024, 0, 0)
        );
        assert!(j.spec.backoff_ms.is_empty());
        assert!(decode_job("j", &rmp_serde::to_vec(&("d", "t", "b", 5u64)).unwrap()).is_err());
    }
}
