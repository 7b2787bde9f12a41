//! Model-based property test: random sequences of operations and clock advances run against
//! each store and against `Model`, a deliberately naive reference of the state machine (a map of
//! jobs and linear scans, using only job.rs's rules); every observable result must agree.
//!
//! Each generated case works in its own topics and ids (prefixed with the case number), so one
//! backend instance serves all cases. `PROPTEST_CASES` sets the number of cases (default 48).

use crate::support;

use delayq::job::{self, Job, JobId, JobSpec, JobState, Topic, UnixMillis};
use delayq::store::{PushMode, PushOutcome, Reschedule, StoreError, TopicCounts};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use support::backends::Backend;

const T0: UnixMillis = 1_800_000_000_000;
const TOPICS: usize = 3;
const IDS: usize = 6;

#[derive(Debug, Clone)]
enum Op {
    Push {
        topic: usize,
        id: usize,
        delay: u64,
        ttr: u64,
        priority: u32,
        max_attempts: u32,
        backoff: Vec<u64>,
        replace: bool,
    },
    Reserve {
        topics: Vec<usize>,
        max: usize,
    },
    Finish(usize),
    Delete(usize),
    Release(usize, Option<u64>),
    Touch(usize),
    Bury(usize),
    Kick(usize),
    KickTopic(usize),
    Reschedule(usize, u64, Option<u32>),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let ms = prop_oneof![Just(0u64), 1u64..50, Just(1_000), 1_000u64..5_000];
    prop_oneof![
        4 => (0..TOPICS, 0..IDS, ms.clone(), 1u64..4_000, 0u32..3, 0u32..4,
              prop::collection::vec(0u64..3_000, 0..3), any::<bool>())
            .prop_map(|(topic, id, delay, ttr, priority, max_attempts, backoff, replace)| Op::Push {
                topic, id, delay, ttr, priority, max_attempts, backoff, replace,
            }),
        4 => (prop::collection::vec(0..TOPICS, 1..3), 1usize..4)
            .prop_map(|(topics, max)| Op::Reserve { topics, max }),
        1 => (0..IDS).prop_map(Op::Finish),
        1 => (0..IDS).prop_map(Op::Delete),
        1 => (0..IDS, prop::option::of(0u64..3_000)).prop_map(|(i, d)| Op::Release(i, d)),
        1 => (0..IDS).prop_map(Op::Touch),
        1 => (0..IDS).prop_map(Op::Bury),
        1 => (0..IDS).prop_map(Op::Kick),
        1 => (0..TOPICS).prop_map(Op::KickTopic),
        1 => (0..IDS, ms.clone(), prop::option::of(0u32..3)).prop_map(|(i, d, p)| Op::Reschedule(i, d, p)),
        3 => ms.prop_map(Op::Advance),
    ]
}

/// The reference: jobs in a map, every question answered by a scan.
#[derive(Default)]
struct Model {
    jobs: BTreeMap<JobId, Job>,
    seq: u64,
}

impl Model {
    fn stamp(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn push(
        &mut self,
        spec: JobSpec,
        mode: PushMode,
        now: UnixMillis,
    ) -> Result<PushOutcome, StoreError> {
        let outcome = match (self.jobs.remove(&spec.id), mode) {
            (None, _) => PushOutcome::Created,
            (Some(old), PushMode::Reject) => {
                self.jobs.insert(old.spec.id.clone(), old);
                return Err(StoreError::Exists);
            }
            (Some(old), PushMode::Replace) => PushOutcome::Replaced(old.state),
        };
        let seq = self.stamp();
        self.jobs.insert(spec.id.clone(), Job::new(spec, now, seq));
        Ok(outcome)
    }

    fn reserve(&mut self, topics: &[Topic], max: usize, now: UnixMillis) -> Vec<Job> {
        let mut out = Vec::new();
        for t in topics {
            while out.len() < max {
                let best = self
                    .jobs
                    .values()
                    .filter(|j| j.state == JobState::Ready && &j.spec.topic == t)
                    .min_by_key(|j| j.ready_key())
                    .map(|j| j.spec.id.clone());
                let Some(id) = best else { break };
                let j = self.jobs.get_mut(&id).unwrap();
                j.state = JobState::Reserved;
                j.attempts += 1;
                j.reserved_until = Some(job::after(now, j.spec.ttr_ms));
                out.push(j.clone());
            }
        }
        out
    }

    fn with_state(&mut self, id: &JobId, allowed: &[JobState]) -> Result<Job, StoreError> {
        let j = self.jobs.get(id).ok_or(StoreError::NotFound)?;
        if allowed.contains(&j.state) {
            Ok(j.clone())
        } else {
            Err(StoreError::WrongState(j.state))
        }
    }

    fn fail(&mut self, mut j: Job, delay: Option<u64>, now: UnixMillis) -> Job {
        let (state, run_at) = job::after_delivery_failed(&j.spec, j.attempts, delay, now);
        j.state = state;
        j.reserved_until = None;
        if state == JobState::Dead {
            j.seq = self.stamp();
        } else {
            j.spec.run_at = run_at;
        }
        self.jobs.insert(j.spec.id.clone(), j.clone());
        j
    }

    fn release(
        &mut self,
        id: &JobId,
        delay: Option<u64>,
        now: UnixMillis,
    ) -> Result<Job, StoreError> {
        let j = self.with_state(id, &[JobState::Reserved])?;
        Ok(self.fail(j, delay, now))
    }

    fn touch(&mut self, id: &JobId, now: UnixMillis) -> Result<Job, StoreError> {
        let mut j = self.with_state(id, &[JobState::Reserved])?;
        j.reserved_until = Some(job::after(now, j.spec.ttr_ms));
        self.jobs.insert(id.clone(), j.clone());
        Ok(j)
    }

    fn bury(&mut self, id: &JobId) -> Result<Job, StoreError> {
        let mut j = self.with_state(
            id,
            &[JobState::Delayed, JobState::Ready, JobState::Reserved],
        )?;
        j.state = JobState::Dead;
        j.reserved_until = None;
        j.seq = self.stamp();
        self.jobs.insert(id.clone(), j.clone());
        Ok(j)
    }

    fn kick(&mut self, id: &JobId, now: UnixMillis) -> Result<Job, StoreError> {
        let mut j = self.with_state(id, &[JobState::Dead])?;
        j.state = JobState::Ready;
        j.attempts = 0;
        j.spec.run_at = now;
        self.jobs.insert(id.clone(), j.clone());
        Ok(j)
    }

    fn reschedule(
        &mut self,
        id: &JobId,
        c: Reschedule,
        now: UnixMillis,
    ) -> Result<(Job, JobState), StoreError> {
        let mut j = self.with_state(id, &[JobState::Delayed, JobState::Ready])?;
        let prev = j.state;
        j.spec.run_at = c.run_at;
        if let Some(p) = c.priority {
            j.spec.priority = p;
        }
        j.state = j.spec.initial_state(now);
        self.jobs.insert(id.clone(), j.clone());
        Ok((j, prev))
    }

    /// The timer: everything due by `now`, in deadline order.
    fn tick(&mut self, now: UnixMillis) {
        loop {
            let next = self
                .jobs
                .values()
                .filter_map(|j| j.timer_at().map(|t| (t, j.spec.id.clone())))
                .filter(|(t, _)| *t <= now)
                .min();
            let Some((_, id)) = next else { break };
            let mut j = self.jobs[&id].clone();
            if j.state == JobState::Delayed {
                j.state = JobState::Ready;
                self.jobs.insert(id, j);
            } else {
                self.fail(j, None, now);
            }
        }
    }

    fn counts(&self) -> BTreeMap<Topic, TopicCounts> {
        let mut out: BTreeMap<Topic, TopicCounts> = BTreeMap::new();
        for j in self.jobs.values() {
            let c = out.entry(j.spec.topic.clone()).or_default();
            match j.state {
                JobState::Delayed => c.delayed += 1,
                JobState::Ready => c.ready += 1,
                JobState::Reserved => c.reserved += 1,
                JobState::Dead => c.dead += 1,
            }
        }
        out
    }
}

/// What a user can observe of a job (the store-internal `seq` is not observable).
fn view(j: &Job) -> (String, JobState, u32, Option<UnixMillis>, JobSpec) {
    (
        j.spec.id.to_string(),
        j.state,
        j.attempts,
        j.reserved_until,
        j.spec.clone(),
    )
}

fn views(
    r: &Result<Job, StoreError>,
) -> Result<(String, JobState, u32, Option<UnixMillis>, JobSpec), StoreError> {
    r.as_ref().map(view).map_err(Clone::clone)
}

static CASE: AtomicU64 = AtomicU64::new(0);

async fn run_case(b: &Backend, ops: &[Op]) -> Result<(), TestCaseError> {
    let case = CASE.fetch_add(1, Ordering::SeqCst);
    let topic = |i: usize| Topic::parse(format!("c{case}-t{i}")).unwrap();
    let id = |i: usize| JobId::parse(format!("c{case}-j{i}")).unwrap();
    let store = &b.store;
    let mut model = Model::default();
    let mut now = T0 + case * 1_000_000;

    for (step, op) in ops.iter().enumerate() {
        // Distinct times per step, as in real life; ties in run_at still occur via delays.
        now += 1;
        let ctx = format!("step {step}: {op:?}");
        match op.clone() {
            Op::Push {
                topic: t,
                id: i,
                delay,
                ttr,
                priority,
                max_attempts,
                backoff,
                replace,
            } => {
                let mut spec = JobSpec::new(topic(t), id(i), format!("body {step}"), now + delay);
                spec.ttr_ms = ttr;
                spec.priority = priority;
                spec.max_attempts = max_attempts;
                spec.backoff_ms = backoff;
                let mode = if replace {
                    PushMode::Replace
                } else {
                    PushMode::Reject
                };
                let got = store.push(spec.clone(), mode, now).await;
                let want = model.push(spec, mode, now);
                prop_assert_eq!(got, want, "{}", ctx);
            }
            Op::Reserve { topics, max } => {
                let ts: Vec<Topic> = topics.iter().map(|&t| topic(t)).collect();
                let got: Vec<_> = store
                    .reserve(&ts, max, now)
                    .await
                    .unwrap()
                    .iter()
                    .map(view)
                    .collect();
                let want: Vec<_> = model.reserve(&ts, max, now).iter().map(view).collect();
                prop_assert_eq!(got, want, "{}", ctx);
            }
            Op::Finish(i) => {
                let want = model
                    .jobs
                    .remove(&id(i))
                    .map(|j| j.state)
                    .ok_or(StoreError::NotFound);
                prop_assert_eq!(store.finish(&id(i)).await, want, "{}", ctx);
            }
            Op::Delete(i) => {
                let want = model
                    .jobs
                    .remove(&id(i))
                    .map(|j| j.state)
                    .ok_or(StoreError::NotFound);
                prop_assert_eq!(store.delete(&id(i)).await, want, "{}", ctx);
            }
            Op::Release(i, d) => {
                let got = store.release(&id(i), d, now).await;
                prop_assert_eq!(
                    views(&got),
                    views(&model.release(&id(i), d, now)),
                    "{}",
                    ctx
                );
            }
            Op::Touch(i) => {
                let got = store.touch(&id(i), now).await;
                prop_assert_eq!(views(&got), views(&model.touch(&id(i), now)), "{}", ctx);
            }
            Op::Bury(i) => {
                let got = store.bury(&id(i), None, now).await;
                prop_assert_eq!(views(&got), views(&model.bury(&id(i))), "{}", ctx);
            }
            Op::Kick(i) => {
                let got = store.kick(&id(i), now).await;
                prop_assert_eq!(views(&got), views(&model.kick(&id(i), now)), "{}", ctx);
            }
            Op::KickTopic(t) => {
                // All of them: which of several same-tick burials is "oldest" is not observable.
                let dead: Vec<JobId> = model
                    .jobs
                    .values()
                    .filter(|j| j.state == JobState::Dead && j.spec.topic == topic(t))
                    .map(|j| j.spec.id.clone())
                    .collect();
                for i in &dead {
                    model.kick(i, now).unwrap();
                }
                let got = store.kick_topic(&topic(t), 1_000, now).await;
                prop_assert_eq!(got, Ok(dead.len() as u64), "{}", ctx);
            }
            Op::Reschedule(i, delay, priority) => {
                let c = Reschedule {
                    run_at: now + delay,
                    body: None,
                    priority,
                };
                let got = store.reschedule(&id(i), c.clone(), now).await;
                let want = model.reschedule(&id(i), c, now);
                let got = got.map(|(j, s)| (view(&j), s));
                let want = want.map(|(j, s)| (view(&j), s));
                prop_assert_eq!(got, want, "{}", ctx);
            }
            Op::Advance(ms) => {
                now += ms;
                loop {
                    let out = store.tick(now, 1_000).await.unwrap();
                    if out.next_due.is_none_or(|t| t > now) {
                        break;
                    }
                }
                model.tick(now);
            }
        }
        // After every step: every job as the model has it, and the counts.
        for i in 0..IDS {
            let got = store.get(&id(i)).await;
            let want = model.jobs.get(&id(i)).cloned().ok_or(StoreError::NotFound);
            prop_assert_eq!(views(&got), views(&want), "{} (get {})", ctx, i);
        }
        let stats = store.stats().await.unwrap();
        let mine: BTreeMap<Topic, TopicCounts> = stats
            .topics
            .into_iter()
            .filter(|(t, _)| t.as_str().starts_with(&format!("c{case}-")))
            .collect();
        prop_assert_eq!(mine, model.counts(), "{} (stats)", ctx);
    }
    Ok(())
}

async fn every_store_agrees_with_the_reference_model(b: &Backend) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let handle = tokio::runtime::Handle::current();
    let result = tokio::task::block_in_place(|| {
        runner.run(&prop::collection::vec(op(), 1..40), |ops| {
            handle.block_on(run_case(b, &ops))
        })
    });
    if let Err(e) = result {
        panic!("{} store disagrees with the model: {e}", b.name);
    }
}

backend_tests!(every_store_agrees_with_the_reference_model);
