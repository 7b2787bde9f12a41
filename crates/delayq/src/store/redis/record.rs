//! The stored form of a job: a cmsgpack array (format in `lib.lua`), read and written here
//! with `rmp`'s msgpack primitives, and the state codes in it. Also the small reply decoders
//! shared by the store's modules.
//!
//! Writers: the scripts write every record, except a new job's, which [`encode_new`] packs
//! here so `push.lua` only stores it (packing in Lua would cost the push function a table,
//! number parsing and the pack per job). [`encode_new`] writes byte for byte what lib.lua's
//! `encode` writes for the same job: `tests/store/redis_store/layout.rs`
//! `pushed_records_are_what_the_scripts_would_write` has Redis's own `encode` re-pack
//! records pushed this way and compares.
//!
//! A record's elements are read in place ([`fields`]): a reserve's reply carries one record
//! per job, so what reading one costs is paid on every delivery.

use crate::job::{Callback, Job, JobId, JobSpec, JobState, Publish, Topic};
use crate::store::{StoreError, StoreResult};
use redis::Value;
use rmp::Marker;
use rmp::decode::{RmpRead, read_marker};

/// One element of a stored record, its text borrowed from the record.
#[derive(Debug)]
enum Field<'a> {
    Int(u64),
    Text(&'a str),
    List(Vec<u64>),
}

/// The elements of a stored record: a msgpack array whose elements are non-negative integers,
/// UTF-8 strings and arrays of non-negative integers, as cmsgpack packs what `lib.lua` stores
/// (any other element, a float, a negative number or a map, is an error naming it).
fn fields(raw: &[u8]) -> Result<Vec<Field<'_>>, String> {
    let mut rd = raw;
    let marker = read_marker(&mut rd).map_err(|e| e.0.to_string())?;
    let n = array_len(marker, &mut rd)?.ok_or_else(|| format!("not an array: {marker:?}"))?;
    // At most 14 elements in any layout; a bad length fails on the bytes that are not there.
    let mut out = Vec::with_capacity(n.min(16) as usize);
    for _ in 0..n {
        let marker = read_marker(&mut rd).map_err(|e| e.0.to_string())?;
        let field = if let Some(n) = uint(marker, &mut rd)? {
            Field::Int(n)
        } else if let Some(len) = text_len(marker, &mut rd)? {
            let (text, rest) = rd
                .split_at_checked(len as usize)
                .ok_or("a string longer than the record")?;
            rd = rest;
            Field::Text(std::str::from_utf8(text).map_err(|e| e.to_string())?)
        } else if let Some(len) = array_len(marker, &mut rd)? {
            let mut list = Vec::with_capacity(len.min(64) as usize);
            for _ in 0..len {
                let marker = read_marker(&mut rd).map_err(|e| e.0.to_string())?;
                list.push(uint(marker, &mut rd)?.ok_or_else(|| format!("a list of {marker:?}"))?);
            }
            Field::List(list)
        } else {
            return Err(format!("an element {marker:?}"));
        };
        out.push(field);
    }
    Ok(out)
}

/// The integer `marker` starts, read from `rd`: `None` when it starts no integer, an error for
/// a negative one.
fn uint(marker: Marker, rd: &mut &[u8]) -> Result<Option<u64>, String> {
    let n = match marker {
        Marker::FixPos(n) => Ok(i128::from(n)),
        Marker::U8 => rd.read_data_u8().map(i128::from),
        Marker::U16 => rd.read_data_u16().map(i128::from),
        Marker::U32 => rd.read_data_u32().map(i128::from),
        Marker::U64 => rd.read_data_u64().map(i128::from),
        Marker::FixNeg(n) => Ok(i128::from(n)),
        Marker::I8 => rd.read_data_i8().map(i128::from),
        Marker::I16 => rd.read_data_i16().map(i128::from),
        Marker::I32 => rd.read_data_i32().map(i128::from),
        Marker::I64 => rd.read_data_i64().map(i128::from),
        _ => return Ok(None),
    }
    .map_err(|e| e.to_string())?;
    u64::try_from(n)
        .map(Some)
        .map_err(|_| format!("a negative number {n}"))
}

/// The length of the string (or byte string) `marker` starts: `None` when it starts none.
fn text_len(marker: Marker, rd: &mut &[u8]) -> Result<Option<u32>, String> {
    match marker {
        Marker::FixStr(n) => Ok(u32::from(n)),
        Marker::Str8 | Marker::Bin8 => rd.read_data_u8().map(u32::from),
        Marker::Str16 | Marker::Bin16 => rd.read_data_u16().map(u32::from),
        Marker::Str32 | Marker::Bin32 => rd.read_data_u32(),
        _ => return Ok(None),
    }
    .map(Some)
    .map_err(|e| e.to_string())
}

/// The length of the array `marker` starts: `None` when it starts none.
fn array_len(marker: Marker, rd: &mut &[u8]) -> Result<Option<u32>, String> {
    match marker {
        Marker::FixArray(n) => Ok(u32::from(n)),
        Marker::Array16 => rd.read_data_u16().map(u32::from),
        Marker::Array32 => rd.read_data_u32(),
        _ => return Ok(None),
    }
    .map(Some)
    .map_err(|e| e.to_string())
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
    let mut r = fields(raw).map_err(corrupt)?;
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
    let backoff_ms = match r.get_mut(8) {
        None => Vec::new(),
        Some(Field::List(b)) => std::mem::take(b),
        other => return Err(corrupt(format!("field 8: {other:?}"))),
    };
    let text = |i: usize| match r.get(i) {
        Some(Field::Text(s)) => Ok(*s),
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
    let state = match code {
        "p" => JobState::Delayed,
        _ => state_from_code(code).map_err(|_| corrupt(format!("state code {code:?}")))?,
    };
    let topic = Topic::parse(text(1)?).map_err(|e| corrupt(e.to_string()))?;
    let id = JobId::parse(id).map_err(|e| corrupt(e.to_string()))?;
    Ok(Job {
        spec: JobSpec {
            topic,
            id,
            body: text(2)?.to_owned(),
            run_at: num(3, 0)?,
            ttr_ms: num(5, STORED_DEFAULT_TTR_MS)?,
            priority: small(6, STORED_DEFAULT_PRIORITY)?,
            max_attempts: small(7, 0)?,
            backoff_ms,
            callback: match r.len() {
                13 => Some(Callback {
                    url: text(11)?.to_owned(),
                    timeout_ms: num(12, 0)?,
                }),
                _ => None,
            },
            publish: match r.len() {
                14 => Some(Box::new(Publish::unpack(text(13)?).map_err(corrupt)?)),
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
    use rmp::encode::{write_array_len, write_str, write_uint};
    let packed = job.publish.as_ref().map(|p| p.pack());
    // Of the first ten elements, all are written before a callback's or publish's tail; else
    // down to the last of `ttr_ms, priority, max_attempts, backoff_ms, attempts` that differs
    // from its stored default.
    let default = [
        job.ttr_ms == STORED_DEFAULT_TTR_MS,
        u64::from(job.priority) == STORED_DEFAULT_PRIORITY,
        job.max_attempts == 0,
        job.backoff_ms.is_empty(),
        attempts == 0,
    ];
    let mut n = 10;
    if job.callback.is_none() && packed.is_none() {
        while n > 5 && default[n - 6] {
            n -= 1;
        }
    }
    let len = match (&job.callback, &packed) {
        (Some(_), _) => 13,
        (None, Some(_)) => 14,
        (None, None) => n,
    };
    let mut buf = Vec::with_capacity(64 + job.topic.as_str().len() + job.body.len());
    // Writing into a Vec cannot fail: the results are only `Ok`.
    let _ = write_array_len(&mut buf, len as u32);
    let _ = write_str(&mut buf, state_code(state));
    let _ = write_str(&mut buf, job.topic.as_str());
    let _ = write_str(&mut buf, &job.body);
    let _ = write_uint(&mut buf, job.run_at);
    let _ = write_uint(&mut buf, seq);
    if n > 5 {
        let _ = write_uint(&mut buf, job.ttr_ms);
    }
    if n > 6 {
        let _ = write_uint(&mut buf, u64::from(job.priority));
    }
    if n > 7 {
        let _ = write_uint(&mut buf, u64::from(job.max_attempts));
    }
    if n > 8 {
        let _ = write_array_len(&mut buf, job.backoff_ms.len() as u32);
        for step in &job.backoff_ms {
            let _ = write_uint(&mut buf, *step);
        }
    }
    if n > 9 {
        let _ = write_uint(&mut buf, u64::from(attempts));
    }
    if let Some(cb) = &job.callback {
        let _ = write_uint(&mut buf, 0);
        let _ = write_str(&mut buf, &cb.url);
        let _ = write_uint(&mut buf, cb.timeout_ms);
    } else if let Some(p) = &packed {
        let _ = write_uint(&mut buf, 0);
        let _ = write_str(&mut buf, "");
        let _ = write_uint(&mut buf, 0);
        let _ = write_str(&mut buf, p);
    }
    buf
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

    /// What cmsgpack may write for a stored integer or string, besides the smallest forms:
    /// every width of integer (signed ones when not negative), 16-bit string lengths and byte
    /// strings; all read as the values they hold.
    #[test]
    fn every_integer_width_and_string_form_reads_as_its_value() {
        let body = "b".repeat(300);
        let mut raw = vec![0x9a, 0xa1, b'x', 0xd9, 1, b't', 0xda, 0x01, 0x2c];
        raw.extend(body.as_bytes());
        raw.extend([0xd3, 0, 0, 0, 0, 0, 0, 0, 5]); // run_at, i64
        raw.extend([0xcf, 0, 0, 0, 0, 0, 0, 0x04, 0xd2]); // seq, u64
        raw.extend([0xce, 0, 0, 0x75, 0x30]); // ttr_ms, u32
        raw.extend([0xd0, 7]); // priority, i8
        raw.extend([0xcd, 0, 3]); // max_attempts, u16
        raw.extend([0xdc, 0, 2, 10, 0xcc, 200]); // backoff_ms, array16 of 2
        raw.extend([0xd1, 0, 2]); // attempts, i16
        let j = decode_job("j", &raw).unwrap();
        assert_eq!(
            (j.state, j.spec.topic.as_str(), j.spec.body.as_str()),
            (JobState::Reserved, "t", body.as_str())
        );
        assert_eq!(
            (
                j.spec.run_at,
                j.seq,
                j.spec.ttr_ms,
                j.spec.priority,
                j.spec.max_attempts,
                j.attempts
            ),
            (5, 1234, 30_000, 7, 3, 2)
        );
        assert_eq!(j.spec.backoff_ms, vec![10, 200]);
        // A byte string holding UTF-8 reads as text.
        let bin = [0x95, 0xc4, 1, b'd', 0xa1, b't', 0xc4, 2, b'h', b'i', 5, 9];
        assert_eq!(decode_job("j", &bin).unwrap().spec.body, "hi");
    }

    /// Anything lib.lua never stores is corrupt, named, and not read as something else.
    #[test]
    fn elements_outside_the_stored_layout_are_corrupt() {
        let five = |run_at: &[u8]| {
            let mut raw = vec![0x95, 0xa1, b'd', 0xa1, b't', 0xa1, b'b'];
            raw.extend(run_at);
            raw.push(1);
            raw
        };
        let cases: [(Vec<u8>, &str); 10] = [
            (five(&[0xff]), "negative"),
            (five(&[0xd0, 0x80]), "negative"),
            (five(&[0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0]), "F64"),
            (five(&[0xc0]), "Null"),
            (five(&[0xc3]), "True"),
            (five(&[0x81, 1, 2]), "FixMap"),
            (five(&[0x91, 0xa1, b'a']), "a list of FixStr"),
            (vec![0x85, 0xa1, b'd'], "not an array"),
            (vec![0x95, 0xa1, b'd', 0xa5, b't'], "longer than the record"),
            (
                vec![0x95, 0xa1, b'd', 0xa1, 0xff, 0xa1, b'b', 5, 1],
                "utf-8",
            ),
        ];
        for (raw, why) in cases {
            match decode_job("j", &raw) {
                Err(StoreError::Corrupt(e)) => assert!(
                    e.to_lowercase().contains(&why.to_lowercase()),
                    "{raw:x?}: {e} does not say {why}"
                ),
                other => panic!("{raw:x?} read as {other:?}"),
            }
        }
        // A record cut short, anywhere, is an error and never a panic.
        let whole = encode_new(
            &JobSpec::new(
                Topic::parse("t").unwrap(),
                JobId::parse("j").unwrap(),
                "body",
                5,
            ),
            JobState::Ready,
            7,
            2,
        );
        assert!(decode_job("j", &whole).is_ok());
        for cut in 0..whole.len() {
            assert!(decode_job("j", &whole[..cut]).is_err(), "cut at {cut}");
        }
    }

    /// `encode_new` writes msgpack's smallest form of each value, as cmsgpack (and before
    /// it, rmp-serde) does: checked byte for byte against rmp-serde for long bodies and
    /// large numbers (the layout test against Lua's own `encode` covers the rest).
    #[test]
    fn new_records_are_msgpack_s_smallest_forms() {
        let mut spec = JobSpec::new(
            Topic::parse("t").unwrap(),
            JobId::parse("j").unwrap(),
            "b".repeat(70_000),
            u64::from(u32::MAX) + 1,
        );
        spec.ttr_ms = 300;
        spec.priority = 70_000;
        spec.backoff_ms = vec![1, 255, 65_536];
        let expected = rmp_serde::to_vec(&(
            "d",
            "t",
            &spec.body,
            spec.run_at,
            123_456u64,
            300u64,
            70_000u64,
            0u64,
            &spec.backoff_ms,
            4u64,
        ))
        .unwrap();
        assert_eq!(encode_new(&spec, JobState::Delayed, 123_456, 4), expected);
    }
}
