//! The on-disk form of one job: a compact MessagePack array, keyed by the job's id in the redb
//! `jobs` table (so the id is not repeated in the value).
//!
//! This file owns the encoding and its version ([`FORMAT_VERSION`]) and nothing else: it does
//! not open files or decide states. Fields are positional, so any change to [`Record`] must
//! bump [`FORMAT_VERSION`] and teach [`decode`] the old layout.

use crate::job::{Job, JobId, JobSpec, JobState, Topic};
use serde::{Deserialize, Serialize};

/// Version of the record layout, stored in the `meta` table. A data directory written with
/// another version is refused rather than misread.
pub const FORMAT_VERSION: u64 = 1;

/// A [`Job`] without its id, in the order written. Owned, so encoding moves the job's strings
/// instead of copying them.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    topic: String,
    body: String,
    run_at: u64,
    ttr_ms: u64,
    priority: u32,
    max_attempts: u32,
    backoff_ms: Vec<u64>,
    /// [`state_code`]: one byte instead of a state name.
    state: u8,
    attempts: u32,
    reserved_until: Option<u64>,
    seq: u64,
}

fn state_code(s: JobState) -> u8 {
    match s {
        JobState::Delayed => 0,
        JobState::Ready => 1,
        JobState::Reserved => 2,
        JobState::Dead => 3,
    }
}

fn state_from_code(c: u8) -> Option<JobState> {
    Some(match c {
        0 => JobState::Delayed,
        1 => JobState::Ready,
        2 => JobState::Reserved,
        3 => JobState::Dead,
        _ => return None,
    })
}

/// Encodes a job's value (its id is the key).
pub fn encode(job: Job) -> Vec<u8> {
    let Job {
        spec,
        state,
        attempts,
        reserved_until,
        seq,
    } = job;
    let r = Record {
        topic: spec.topic.into(),
        body: spec.body,
        run_at: spec.run_at,
        ttr_ms: spec.ttr_ms,
        priority: spec.priority,
        max_attempts: spec.max_attempts,
        backoff_ms: spec.backoff_ms,
        state: state_code(state),
        attempts,
        reserved_until,
        seq,
    };
    // Serializing plain strings and integers into a Vec cannot fail.
    rmp_serde::to_vec(&r).expect("a job record always encodes")
}

/// Decodes the value stored under `id`. The error says what is wrong, without the id or file
/// (the caller adds both).
pub fn decode(id: &str, bytes: &[u8]) -> Result<Job, String> {
    let id = JobId::parse(id).map_err(|e| format!("bad key: {e}"))?;
    let r: Record = rmp_serde::from_slice(bytes).map_err(|e| e.to_string())?;
    let topic = Topic::parse(r.topic).map_err(|e| e.to_string())?;
    let state =
        state_from_code(r.state).ok_or_else(|| format!("unknown state code {}", r.state))?;
    Ok(Job {
        spec: JobSpec {
            topic,
            id,
            body: r.body,
            run_at: r.run_at,
            ttr_ms: r.ttr_ms,
            priority: r.priority,
            max_attempts: r.max_attempts,
            backoff_ms: r.backoff_ms,
        },
        state,
        attempts: r.attempts,
        reserved_until: r.reserved_until,
        seq: r.seq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: JobState, reserved_until: Option<u64>) -> Job {
        let mut spec = JobSpec::new(
            Topic::parse("orders").unwrap(),
            JobId::parse("order 42").unwrap(),
            "{\"x\":\"é\"}",
            1_767_225_600_000,
        );
        spec.ttr_ms = 5_000;
        spec.priority = 7;
        spec.max_attempts = 3;
        spec.backoff_ms = vec![15_000, 180_000];
        Job {
            spec,
            state,
            attempts: 2,
            reserved_until,
            seq: 99,
        }
    }

    #[test]
    fn every_state_round_trips_with_all_fields() {
        for (state, until) in [
            (JobState::Delayed, None),
            (JobState::Ready, None),
            (JobState::Reserved, Some(1_767_225_605_000)),
            (JobState::Dead, None),
        ] {
            let j = job(state, until);
            let bytes = encode(j.clone());
            assert_eq!(decode("order 42", &bytes).unwrap(), j);
        }
    }

    #[test]
    fn record_is_compact() {
        // Array encoding: no field names on disk.
        let bytes = encode(job(JobState::Ready, None));
        assert!(bytes.len() < 64, "{} bytes", bytes.len());
    }

    #[test]
    fn garbage_and_invalid_fields_are_errors_not_panics() {
        assert!(decode("a", b"\xff\x00garbage").is_err());
        assert!(decode("a", b"").is_err());
        let mut j = job(JobState::Ready, None);
        j.spec.topic = Topic::parse("ok").unwrap();
        let mut bytes = encode(j);
        // Corrupt the topic into "o," (a comma is not allowed in topics).
        let pos = bytes.windows(2).position(|w| w == b"ok").unwrap();
        bytes[pos + 1] = b',';
        let err = decode("a", &bytes).unwrap_err();
        assert!(err.contains("topic"), "{err}");
        assert!(decode("a\n", &encode(job(JobState::Ready, None))).is_err());
    }
}
