//! The store conformance suite: delayq's job state machine (job.rs, docs/semantics.md) as
//! executable examples, run against every backend by `backend_tests!`. One file per group of
//! transitions (below); this file holds the helpers they share. A test of a new transition
//! goes in the file of its group, a new group gets its own file.
//!
//! Time is explicit: every call passes `now`, so nothing here sleeps. Each test uses its own
//! topic and id names; backends are fresh per test.

use crate::support;

use delayq::job::{Callback, Job, JobId, JobSpec, JobState, Publish, Topic, UnixMillis};
use delayq::store::{JobPage, ListKey, PushMode, PushOutcome, Reschedule, StoreError, StoreEvent};
use std::collections::HashSet;
use std::time::Duration;
use support::backends::Backend;

mod by_id;
mod delivery;
mod finish;
mod flow;
mod listings;
mod push;
mod reserve;
mod restore;
pub(crate) mod schedules;
mod timer;

const T0: UnixMillis = 1_700_000_000_000;

const SEC: u64 = 1_000;

const HOUR: u64 = 3_600 * SEC;

fn topic(s: &str) -> Topic {
    Topic::parse(s).unwrap()
}

fn id(s: &str) -> JobId {
    JobId::parse(s).unwrap()
}

fn job(t: &str, i: &str, body: &str, run_at: UnixMillis) -> JobSpec {
    JobSpec::new(topic(t), id(i), body, run_at)
}

async fn push(b: &Backend, spec: JobSpec, now: UnixMillis) -> PushOutcome {
    b.store.push(spec, PushMode::Reject, now).await.unwrap()
}

async fn reserve_ids(b: &Backend, topics: &[&str], max: usize, now: UnixMillis) -> Vec<String> {
    let topics: Vec<Topic> = topics.iter().map(|t| topic(t)).collect();
    b.store
        .reserve(&topics, max, now)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.spec.id.as_str().to_string())
        .collect()
}

async fn state(b: &Backend, i: &str) -> Result<JobState, StoreError> {
    b.store.get(&id(i)).await.map(|j| j.state)
}

/// A callback job: `url` called with a 10 s timeout, one retry after 15 s, then dead.
fn callback_job(t: &str, i: &str, run_at: UnixMillis) -> JobSpec {
    let mut spec = job(t, i, "{\"order\":42}", run_at);
    spec.with_callback_defaults(
        Callback {
            url: "https://hooks.example.com/due".into(),
            timeout_ms: 10 * SEC,
        },
        None,
        Some(2),
        Some(vec![15 * SEC]),
    );
    spec
}

/// Every page of `queue`'s jobs in `state`, `limit` at a time: the ids in the order listed.
async fn walk(b: &Backend, queue: &str, state: JobState, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut after: Option<ListKey> = None;
    for _ in 0..10_000 {
        let JobPage { jobs, next } = b
            .store
            .list(
                &Topic::parse_queue(queue).unwrap(),
                state,
                after.as_ref(),
                limit,
            )
            .await
            .unwrap();
        assert!(jobs.len() <= limit, "{} > {limit}", jobs.len());
        for j in &jobs {
            assert_eq!(j.state, state, "{j:?}");
            assert_eq!(j.spec.queue().as_str(), queue, "{j:?}");
            if let Some(a) = &after {
                assert!(ListKey::of(j) > *a, "{j:?} not after the cursor {a:?}");
            }
            out.push(j.spec.id.as_str().to_string());
        }
        match next {
            None => return out,
            Some(k) => after = Some(k),
        }
    }
    panic!("the listing never ended");
}
