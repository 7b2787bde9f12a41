//! The on-disk form of one job: a compact MessagePack array, keyed by the job's id in the redb
//! `jobs` table (so the id is not repeated in the value).
//!
//! This file owns the encoding and its version ([`FORMAT_VERSION`]) and nothing else: it does
//! not open files or decide states. Fields are positional, so any change to [`Record`] must
//! bump [`FORMAT_VERSION`] and teach [`decode`] the old layout, except a new optional field at
//! the end (`#[serde(default)]`): records written before it decode with its default, and a
//! build that does not know it refuses a record that has it (too long an array) rather than
//! misread it. `callback` came that way, then `publish`.

use crate::job::{Callback, Job, JobId, JobSpec, JobState, Publish, Topic};
use crate::schedule::{CatchUp, Overlap, Rule, Schedule, ScheduleId, ScheduleSpec};
use crate::store::TopicSettings;
use serde::{Deserialize, Serialize};

/// Version of the data directory's format (this file's records, the tables, the write-ahead
/// log's frames), stored in the `meta` table; docs/upgrading.md lists each release's. A
/// directory of a newer version is refused, untouched, with what to do; every build has
/// refused one since version 1, the first. A change that older builds would misread (or
/// silently drop, as a table they do not know) bumps it; the build that bumps it opens the
/// previous version by migrating it at open (`embedded.rs` `open_db`, in the transaction that
/// records the new version), and the fixture of each version (`tests/fixtures/`) must go on
/// opening with every job. Version 2 added the cold tier (`cold.rs`, `<data_dir>/cold/`), which
/// a build reading version 1 would not see; version 1 migrates by raising the number.
pub const FORMAT_VERSION: u64 = 2;

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
    /// A callback job's URL and timeout; absent (not even nil) for a pull job, nil for a
    /// publish job (so `publish` stays the 13th element).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    callback: Option<Option<(String, u64)>>,
    /// A publish job's target ([`Publish::pack`]); absent for other jobs. Written after
    /// `callback`, as nil when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    publish: Option<String>,
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

/// Keys of settings records start with this: a job id has no control character, so no job's
/// key does. Builds before settings existed refuse such a key (a bad job id) rather than
/// misread it.
const SETTINGS_PREFIX: &str = "\u{0}settings\u{0}";

/// The key of a topic's settings record.
pub fn settings_key(topic: &Topic) -> String {
    format!("{SETTINGS_PREFIX}{topic}")
}

/// The topic a key holds the settings of, or `None` for a job's key.
pub fn settings_topic(key: &str) -> Option<Result<Topic, String>> {
    key.strip_prefix(SETTINGS_PREFIX)
        .map(|t| Topic::parse(t).map_err(|e| e.to_string()))
}

/// A topic's settings, in the order written: paused, rate (millionths per second, 0: none),
/// burst (0: the default), max_in_flight (0: none).
#[derive(Debug, Serialize, Deserialize)]
struct SettingsRecord(bool, u64, u32, u32);

pub fn encode_settings(s: &TopicSettings) -> Vec<u8> {
    let r = SettingsRecord(
        s.paused,
        s.rate_micros.unwrap_or(0),
        s.burst.unwrap_or(0),
        s.max_in_flight.unwrap_or(0),
    );
    rmp_serde::to_vec(&r).expect("a settings record always encodes")
}

pub fn decode_settings(bytes: &[u8]) -> Result<TopicSettings, String> {
    let SettingsRecord(paused, rate, burst, max_in_flight) =
        rmp_serde::from_slice(bytes).map_err(|e| e.to_string())?;
    Ok(TopicSettings {
        paused,
        rate_micros: (rate > 0).then_some(rate),
        burst: (burst > 0).then_some(burst),
        max_in_flight: (max_in_flight > 0).then_some(max_in_flight),
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
        callback: match (spec.callback, &spec.publish) {
            (Some(c), _) => Some(Some((c.url, c.timeout_ms))),
            (None, Some(_)) => Some(None),
            (None, None) => None,
        },
        publish: spec.publish.map(|p| p.pack()),
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
            callback: r
                .callback
                .flatten()
                .map(|(url, timeout_ms)| Callback { url, timeout_ms }),
            publish: r
                .publish
                .as_deref()
                .map(Publish::unpack)
                .transpose()?
                .map(Box::new),
        },
        state,
        attempts: r.attempts,
        reserved_until: r.reserved_until,
        seq: r.seq,
    })
}

/// A recurring schedule's value (its id is the key), in the order written. The job template
/// is a job record ([`encode`]) of the template with id `<id>@0` and due time 0.
#[derive(Debug, Serialize, Deserialize)]
struct ScheduleRecord {
    cron: Option<String>,
    tz: String,
    every_ms: Option<u64>,
    anchor: u64,
    job: Vec<u8>,
    start_at: Option<u64>,
    end_at: Option<u64>,
    /// 0 latest, 1 none, 2 all.
    catch_up: u8,
    /// 0 allow, 1 skip.
    overlap: u8,
    paused: bool,
    next_tick: Option<u64>,
    last_tick: Option<u64>,
    version: u64,
}

/// Starts a schedule's key in the write-ahead logs, which hold jobs and schedules: a control
/// character, which no job id has.
const SCHEDULE_KEY_PREFIX: char = '\u{1}';

/// A schedule's key in the write-ahead logs.
pub fn schedule_key(id: &ScheduleId) -> String {
    format!("{SCHEDULE_KEY_PREFIX}{id}")
}

/// A log key's first character when it is a job's copy in the cold tier (`cold.rs`); no job
/// id has it.
const COLD_KEY_PREFIX: char = '\u{2}';

/// The log key of job `id`'s copy in the cold tier.
pub fn cold_key(id: &str) -> String {
    format!("{COLD_KEY_PREFIX}{id}")
}

/// The job id of a log key, if it is a cold copy's.
pub fn cold_of_key(key: &str) -> Option<&str> {
    key.strip_prefix(COLD_KEY_PREFIX)
}

/// The schedule id of a log key, if it is a schedule's.
pub fn schedule_of_key(key: &str) -> Option<&str> {
    key.strip_prefix(SCHEDULE_KEY_PREFIX)
}

/// Encodes a schedule's value (its id is the key). Also the Redis store's schedule record.
pub fn encode_schedule(sc: &Schedule) -> Vec<u8> {
    let (cron, tz, every_ms, anchor) = match &sc.spec.rule {
        Rule::Cron { expr, tz } => (Some(expr.clone()), tz.clone(), None, 0),
        Rule::Every { every_ms, anchor } => (None, String::new(), Some(*every_ms), *anchor),
    };
    let mut template = sc.spec.job.clone();
    template.id = sc.spec.id.job_id(0);
    template.run_at = 0;
    let r = ScheduleRecord {
        cron,
        tz,
        every_ms,
        anchor,
        job: encode(Job::new(template, 0, 0)),
        start_at: sc.spec.start_at,
        end_at: sc.spec.end_at,
        catch_up: match sc.spec.catch_up {
            CatchUp::Latest => 0,
            CatchUp::None => 1,
            CatchUp::All => 2,
        },
        overlap: match sc.spec.overlap {
            Overlap::Allow => 0,
            Overlap::Skip => 1,
        },
        paused: sc.spec.paused,
        next_tick: sc.next_tick,
        last_tick: sc.last_tick,
        version: sc.version,
    };
    rmp_serde::to_vec(&r).expect("a schedule record always encodes")
}

/// Decodes the schedule stored under `id`; the error says what is wrong.
pub fn decode_schedule(id: &str, bytes: &[u8]) -> Result<Schedule, String> {
    let sid = ScheduleId::parse(id).map_err(|e| format!("bad key: {e}"))?;
    let r: ScheduleRecord = rmp_serde::from_slice(bytes).map_err(|e| e.to_string())?;
    let rule = match (r.cron, r.every_ms) {
        (Some(expr), None) => Rule::Cron { expr, tz: r.tz },
        (None, Some(every_ms)) => Rule::Every {
            every_ms,
            anchor: r.anchor,
        },
        _ => return Err("neither cron nor every_ms, or both".into()),
    };
    let job = decode(sid.job_id(0).as_str(), &r.job)?.spec;
    let catch_up = match r.catch_up {
        0 => CatchUp::Latest,
        1 => CatchUp::None,
        2 => CatchUp::All,
        c => return Err(format!("bad catch_up code {c}")),
    };
    let overlap = match r.overlap {
        0 => Overlap::Allow,
        1 => Overlap::Skip,
        c => return Err(format!("bad overlap code {c}")),
    };
    Ok(Schedule {
        spec: ScheduleSpec {
            id: sid,
            rule,
            job,
            start_at: r.start_at,
            end_at: r.end_at,
            catch_up,
            overlap,
            paused: r.paused,
        },
        next_tick: r.next_tick,
        last_tick: r.last_tick,
        version: r.version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any msgpack value, to cut a record short.
    mod rmpv_like {
        #[derive(serde::Deserialize, serde::Serialize)]
        #[serde(untagged)]
        pub enum Any {
            Int(u64),
            Text(String),
            List(Vec<u64>),
            Pair((String, u64)),
            Nil(Option<u64>),
        }
    }

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
    fn a_callback_round_trips_and_records_without_one_still_decode() {
        let mut j = job(JobState::Reserved, Some(1_767_225_605_000));
        j.spec.callback = Some(Callback {
            url: "https://hooks.example.com/due?x=1".into(),
            timeout_ms: 12_000,
        });
        let with = encode(j.clone());
        assert_eq!(decode("order 42", &with).unwrap(), j);

        // A record written before callbacks existed: the 11 fields, no 12th.
        let mut old = j.clone();
        old.spec.callback = None;
        let v: Vec<rmpv_like::Any> = rmp_serde::from_slice(&with).unwrap();
        let eleven = rmp_serde::to_vec(&v[..11]).unwrap();
        assert_eq!(decode("order 42", &eleven).unwrap(), old);
    }

    #[test]
    fn a_publish_round_trips_with_its_intake_fields() {
        let mut j = job(JobState::Dead, None);
        j.spec.publish = Some(Box::new(Publish {
            exchange: "orders".into(),
            routing_key: "order.cancel".into(),
            content_type: Some("application/octet-stream".into()),
            headers: Some(r#"{"k":{"LongString":[1,2]}}"#.into()),
            body_base64: true,
        }));
        let bytes = encode(j.clone());
        assert_eq!(decode("order 42", &bytes).unwrap(), j);
        let v: Vec<rmpv_like::Any> = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(v.len(), 13, "callback is written as nil before publish");
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
