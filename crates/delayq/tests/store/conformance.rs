//! The store conformance suite: delayq's job state machine (job.rs, docs/semantics.md) as
//! executable examples, run against every backend by `backend_tests!`.
//!
//! Time is explicit: every call passes `now`, so nothing here sleeps. Each test uses its own
//! topic and id names; backends are fresh per test.

use crate::support;

use delayq::job::{Callback, Job, JobId, JobSpec, JobState, Publish, Topic, UnixMillis};
use delayq::store::{JobPage, ListKey, PushMode, PushOutcome, Reschedule, StoreError, StoreEvent};
use std::collections::HashSet;
use std::time::Duration;
use support::backends::Backend;

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

async fn push_then_get_returns_every_field(b: &Backend) {
    let mut spec = job("mail", "m1", "  {\"to\": \"ü\"}\n ", T0 + 5 * SEC);
    spec.ttr_ms = 30 * SEC;
    spec.priority = 7;
    spec.max_attempts = 3;
    spec.backoff_ms = vec![15 * SEC, 180 * SEC];
    assert_eq!(push(b, spec.clone(), T0).await, PushOutcome::Created);

    let got = b.store.get(&id("m1")).await.unwrap();
    assert_eq!(
        got.spec, spec,
        "stored fields differ (body must be byte-for-byte)"
    );
    assert_eq!(got.state, JobState::Delayed);
    assert_eq!(got.attempts, 0);
    assert_eq!(got.reserved_until, None);
}

async fn unknown_job_is_not_found(b: &Backend) {
    assert_eq!(state(b, "nope").await, Err(StoreError::NotFound));
    assert_eq!(b.store.finish(&id("nope")).await, Err(StoreError::NotFound));
    assert_eq!(b.store.delete(&id("nope")).await, Err(StoreError::NotFound));
    assert_eq!(
        b.store.release(&id("nope"), None, T0).await.unwrap_err(),
        StoreError::NotFound
    );
    assert_eq!(
        b.store.touch(&id("nope"), T0).await.unwrap_err(),
        StoreError::NotFound
    );
}

async fn job_due_now_or_earlier_is_ready_at_once(b: &Backend) {
    push(b, job("t", "now", "", T0), T0).await;
    push(b, job("t", "past", "", T0 - 10 * SEC), T0).await;
    assert_eq!(state(b, "now").await, Ok(JobState::Ready));
    assert_eq!(state(b, "past").await, Ok(JobState::Ready));
    let mut got = reserve_ids(b, &["t"], 10, T0).await;
    got.sort();
    assert_eq!(got, vec!["now", "past"]);
}

async fn delayed_job_is_never_handed_out_before_run_at(b: &Backend) {
    push(b, job("t", "later", "", T0 + 1_500), T0).await;
    assert!(reserve_ids(b, &["t"], 1, T0 + 1_499).await.is_empty());

    let tick = b.store.tick(T0 + 1_499, 100).await.unwrap();
    assert_eq!(tick.promoted, 0);
    assert_eq!(tick.next_due, Some(T0 + 1_500));
    assert!(reserve_ids(b, &["t"], 1, T0 + 1_499).await.is_empty());
    assert_eq!(state(b, "later").await, Ok(JobState::Delayed));

    let tick = b.store.tick(T0 + 1_500, 100).await.unwrap();
    assert_eq!(tick.promoted, 1);
    assert_eq!(tick.next_due, None);
    assert_eq!(reserve_ids(b, &["t"], 1, T0 + 1_500).await, vec!["later"]);
}

async fn reserve_orders_by_priority_then_run_at_then_push_order(b: &Backend) {
    let spec = |i: &str, pri: u32, run_at: UnixMillis| {
        let mut s = job("q", i, "", run_at);
        s.priority = pri;
        s
    };
    // Pushed in an order that differs from the expected delivery order.
    push(b, spec("p5-early", 5, T0 - 3 * SEC), T0).await;
    push(b, spec("p1-late", 1, T0 - SEC), T0).await;
    push(b, spec("p1-early-second", 1, T0 - 2 * SEC), T0).await;
    push(b, spec("p1-early-first", 1, T0 - 2 * SEC), T0).await;
    push(b, spec("p0", 0, T0), T0).await;
    let mut order = Vec::new();
    for _ in 0..5 {
        order.extend(reserve_ids(b, &["q"], 1, T0).await);
    }
    assert_eq!(
        order,
        vec![
            "p0",
            "p1-early-second",
            "p1-early-first",
            "p1-late",
            "p5-early"
        ]
    );
}

async fn reserve_prefers_topics_in_the_order_given(b: &Backend) {
    push(b, job("low", "l1", "", T0), T0).await;
    push(b, job("high", "h1", "", T0), T0).await;
    push(b, job("high", "h2", "", T0), T0).await;
    assert_eq!(reserve_ids(b, &["high", "low"], 1, T0).await, vec!["h1"]);
    assert_eq!(
        reserve_ids(b, &["high", "low"], 5, T0).await,
        vec!["h2", "l1"]
    );
    assert!(reserve_ids(b, &["high", "low"], 5, T0).await.is_empty());
}

async fn reserve_counts_attempts_and_sets_the_ttr_deadline(b: &Backend) {
    let mut spec = job("t", "j", "", T0);
    spec.ttr_ms = 30 * SEC;
    push(b, spec, T0).await;
    let jobs = b.store.reserve(&[topic("t")], 1, T0 + 7).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].state, JobState::Reserved);
    assert_eq!(jobs[0].attempts, 1);
    assert_eq!(jobs[0].reserved_until, Some(T0 + 7 + 30 * SEC));
    let got = b.store.get(&id("j")).await.unwrap();
    assert_eq!(got.reserved_until, Some(T0 + 7 + 30 * SEC));
    assert_eq!(got.attempts, 1);
}

async fn reserved_job_is_not_handed_out_again_within_its_ttr(b: &Backend) {
    let mut spec = job("t", "j", "", T0);
    spec.ttr_ms = 10 * SEC;
    push(b, spec, T0).await;
    assert_eq!(reserve_ids(b, &["t"], 1, T0).await, vec!["j"]);
    let tick = b.store.tick(T0 + 10 * SEC - 1, 100).await.unwrap();
    assert_eq!(tick.expired, 0);
    assert!(
        reserve_ids(b, &["t"], 1, T0 + 10 * SEC - 1)
            .await
            .is_empty()
    );
}

async fn unfinished_job_is_redelivered_after_ttr(b: &Backend) {
    let mut spec = job("t", "j", "body", T0);
    spec.ttr_ms = 10 * SEC;
    push(b, spec, T0).await;
    assert_eq!(reserve_ids(b, &["t"], 1, T0).await, vec!["j"]);
    let tick = b.store.tick(T0 + 10 * SEC, 100).await.unwrap();
    assert_eq!(tick.expired, 1);
    assert_eq!(state(b, "j").await, Ok(JobState::Ready));
    let again = b
        .store
        .reserve(&[topic("t")], 1, T0 + 10 * SEC)
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempts, 2);
    assert_eq!(again[0].spec.body, "body");
}

async fn finish_removes_the_job_for_good(b: &Backend) {
    let mut spec = job("t", "j", "", T0);
    spec.ttr_ms = SEC;
    push(b, spec, T0).await;
    reserve_ids(b, &["t"], 1, T0).await;
    assert_eq!(b.store.finish(&id("j")).await, Ok(JobState::Reserved));
    assert_eq!(state(b, "j").await, Err(StoreError::NotFound));
    // Its TTR deadline passing later must not bring it back.
    let tick = b.store.tick(T0 + 60 * SEC, 100).await.unwrap();
    assert_eq!(tick.expired, 0);
    assert!(reserve_ids(b, &["t"], 1, T0 + 60 * SEC).await.is_empty());
    assert!(b.store.stats().await.unwrap().topics.is_empty());
}

async fn finish_batch_answers_each_id_in_order(b: &Backend) {
    push(b, job("t", "delayed", "", T0 + SEC), T0).await;
    push(b, job("t", "ready", "", T0), T0).await;
    push(b, job("t", "reserved", "", T0 - 1), T0).await;
    assert_eq!(reserve_ids(b, &["t"], 1, T0).await, vec!["reserved"]);
    let ids: Vec<JobId> = ["reserved", "nope", "ready", "delayed", "ready"]
        .into_iter()
        .map(id)
        .collect();
    let out = b.store.finish_batch(&ids).await.unwrap();
    assert_eq!(
        out,
        vec![
            Ok(JobState::Reserved),
            Err(StoreError::NotFound),
            Ok(JobState::Ready),
            Ok(JobState::Delayed),
            // Given twice: gone the second time.
            Err(StoreError::NotFound),
        ]
    );
    b.store.tick(T0 + 600 * SEC, 100).await.unwrap();
    assert!(reserve_ids(b, &["t"], 10, T0 + 600 * SEC).await.is_empty());
    assert!(b.store.stats().await.unwrap().topics.is_empty());
    assert_eq!(b.store.finish_batch(&[]).await, Ok(Vec::new()));
}

async fn delete_removes_a_job_in_any_state(b: &Backend) {
    push(b, job("t", "delayed", "", T0 + SEC), T0).await;
    push(b, job("t", "ready", "", T0), T0).await;
    push(b, job("t", "reserved", "", T0 - 1), T0).await;
    push(b, job("t", "dead", "", T0 + SEC), T0).await;
    assert_eq!(reserve_ids(b, &["t"], 1, T0).await, vec!["reserved"]);
    b.store.bury(&id("dead"), T0).await.unwrap();
    for (i, s) in [
        ("delayed", JobState::Delayed),
        ("ready", JobState::Ready),
        ("reserved", JobState::Reserved),
        ("dead", JobState::Dead),
    ] {
        assert_eq!(b.store.delete(&id(i)).await, Ok(s), "{i}");
        assert_eq!(state(b, i).await, Err(StoreError::NotFound), "{i}");
    }
    b.store.tick(T0 + 600 * SEC, 100).await.unwrap();
    assert!(reserve_ids(b, &["t"], 10, T0 + 600 * SEC).await.is_empty());
    assert!(b.store.stats().await.unwrap().topics.is_empty());
}

async fn pushing_an_existing_id_is_refused_without_replace(b: &Backend) {
    push(b, job("t", "j", "first", T0 + SEC), T0).await;
    let err = b
        .store
        .push(job("t", "j", "second", T0), PushMode::Reject, T0)
        .await;
    assert_eq!(err, Err(StoreError::Exists));
    // Ids are unique across topics.
    let err = b
        .store
        .push(job("other", "j", "third", T0), PushMode::Reject, T0)
        .await;
    assert_eq!(err, Err(StoreError::Exists));
    let got = b.store.get(&id("j")).await.unwrap();
    assert_eq!(got.spec.body, "first");
    assert_eq!(got.state, JobState::Delayed);
}

async fn replace_delivers_the_new_version_once_and_the_old_never(b: &Backend) {
    // Old version ready, new version delayed: nothing before the new due time.
    push(b, job("t", "a", "old", T0), T0).await;
    let out = b
        .store
        .push(job("t", "a", "new", T0 + SEC), PushMode::Replace, T0)
        .await
        .unwrap();
    assert_eq!(out, PushOutcome::Replaced(JobState::Ready));
    assert!(reserve_ids(b, &["t"], 10, T0).await.is_empty());

    // Old version delayed earlier than the new: the old due time must not fire.
    push(b, job("t", "b", "old", T0 + SEC), T0).await;
    b.store
        .push(job("t", "b", "new", T0 + 50 * SEC), PushMode::Replace, T0)
        .await
        .unwrap();
    b.store.tick(T0 + 2 * SEC, 100).await.unwrap();
    let got = b
        .store
        .reserve(&[topic("t")], 10, T0 + 2 * SEC)
        .await
        .unwrap();
    let got: Vec<_> = got.iter().map(|j| j.spec.id.as_str().to_string()).collect();
    assert_eq!(got, vec!["a"], "only a (due at T0+1s) is due at T0+2s");

    // Old version reserved: its TTR deadline must not redeliver anything.
    let mut spec = job("t", "c", "old", T0);
    spec.ttr_ms = SEC;
    push(b, spec, T0).await;
    b.store.tick(T0 + 2 * SEC, 100).await.unwrap();
    assert_eq!(reserve_ids(b, &["t"], 1, T0 + 2 * SEC).await, vec!["c"]);
    let out = b
        .store
        .push(
            job("t", "c", "new", T0 + 60 * SEC),
            PushMode::Replace,
            T0 + 2 * SEC,
        )
        .await
        .unwrap();
    assert_eq!(out, PushOutcome::Replaced(JobState::Reserved));
    b.store.tick(T0 + 10 * SEC, 100).await.unwrap();
    assert!(reserve_ids(b, &["t"], 10, T0 + 10 * SEC).await.is_empty());

    b.store.tick(T0 + 60 * SEC, 100).await.unwrap();
    let got = b
        .store
        .reserve(&[topic("t")], 10, T0 + 60 * SEC)
        .await
        .unwrap();
    let mut bodies: Vec<_> = got
        .iter()
        .map(|j| {
            (
                j.spec.id.as_str().to_string(),
                j.spec.body.clone(),
                j.attempts,
            )
        })
        .collect();
    bodies.sort();
    assert_eq!(
        bodies,
        vec![
            ("b".to_string(), "new".to_string(), 1),
            ("c".to_string(), "new".to_string(), 1)
        ]
    );
    let counts = b.store.stats().await.unwrap().topics[&topic("t")];
    assert_eq!(counts.reserved, 3, "a, b and c, once each");
    assert_eq!(counts.total(), 3);
}

async fn backoff_schedule_delays_each_redelivery(b: &Backend) {
    let mut spec = job("pay", "n1", "", T0);
    spec.ttr_ms = SEC;
    spec.backoff_ms = vec![15 * SEC, 180 * SEC];
    push(b, spec, T0).await;

    let mut now = T0;
    for (attempt, backoff) in [(1, 15 * SEC), (2, 180 * SEC), (3, 180 * SEC)] {
        let got = b.store.reserve(&[topic("pay")], 1, now).await.unwrap();
        assert_eq!(got.len(), 1, "delivery {attempt}");
        assert_eq!(got[0].attempts, attempt);
        now += SEC;
        let tick = b.store.tick(now, 100).await.unwrap();
        assert_eq!(tick.expired, 1);
        let j = b.store.get(&id("n1")).await.unwrap();
        assert_eq!(j.state, JobState::Delayed);
        assert_eq!(j.spec.run_at, now + backoff, "after delivery {attempt}");
        assert!(
            reserve_ids(b, &["pay"], 1, now + backoff - 1)
                .await
                .is_empty()
        );
        now += backoff;
        assert_eq!(b.store.tick(now, 100).await.unwrap().promoted, 1);
    }
}

async fn job_out_of_attempts_becomes_dead(b: &Backend) {
    let mut spec = job("t", "j", "", T0);
    spec.ttr_ms = SEC;
    spec.max_attempts = 2;
    push(b, spec, T0).await;
    assert_eq!(reserve_ids(b, &["t"], 1, T0).await, vec!["j"]);
    b.store.tick(T0 + SEC, 100).await.unwrap();
    assert_eq!(reserve_ids(b, &["t"], 1, T0 + SEC).await, vec!["j"]);
    b.store.tick(T0 + 2 * SEC, 100).await.unwrap();
    assert_eq!(state(b, "j").await, Ok(JobState::Dead));
    assert!(reserve_ids(b, &["t"], 1, T0 + 3 * SEC).await.is_empty());
    let counts = b.store.stats().await.unwrap().topics[&topic("t")];
    assert_eq!(counts.dead, 1);
    assert_eq!(counts.total(), 1);

    // A release that uses up the last attempt also kills the job.
    let mut spec = job("t", "k", "", T0);
    spec.max_attempts = 1;
    push(b, spec, T0).await;
    assert_eq!(reserve_ids(b, &["t"], 1, T0).await, vec!["k"]);
    let j = b.store.release(&id("k"), None, T0).await.unwrap();
    assert_eq!(j.state, JobState::Dead);
}

async fn release_returns_a_reserved_job_now_or_later(b: &Backend) {
    push(b, job("t", "j", "", T0), T0).await;
    assert_eq!(
        b.store.release(&id("j"), None, T0).await.unwrap_err(),
        StoreError::WrongState(JobState::Ready)
    );
    reserve_ids(b, &["t"], 1, T0).await;
    let j = b.store.release(&id("j"), None, T0 + 5).await.unwrap();
    assert_eq!(j.state, JobState::Ready);
    assert_eq!(j.reserved_until, None);
    assert_eq!(reserve_ids(b, &["t"], 1, T0 + 5).await, vec!["j"]);

    let j = b
        .store
        .release(&id("j"), Some(30 * SEC), T0 + 10)
        .await
        .unwrap();
    assert_eq!(j.state, JobState::Delayed);
    assert_eq!(j.spec.run_at, T0 + 10 + 30 * SEC);
    assert_eq!(j.attempts, 2);
    assert!(
        reserve_ids(b, &["t"], 1, T0 + 10 + 30 * SEC - 1)
            .await
            .is_empty()
    );
    b.store.tick(T0 + 10 + 30 * SEC, 100).await.unwrap();
    assert_eq!(
        reserve_ids(b, &["t"], 1, T0 + 10 + 30 * SEC).await,
        vec!["j"]
    );
}

async fn touch_extends_a_reservation_by_its_ttr(b: &Backend) {
    let mut spec = job("t", "j", "", T0);
    spec.ttr_ms = 10 * SEC;
    push(b, spec, T0).await;
    reserve_ids(b, &["t"], 1, T0).await;
    let j = b.store.touch(&id("j"), T0 + 8 * SEC).await.unwrap();
    assert_eq!(j.reserved_until, Some(T0 + 18 * SEC));
    // The old deadline passes without a redelivery.
    assert_eq!(b.store.tick(T0 + 12 * SEC, 100).await.unwrap().expired, 0);
    assert_eq!(state(b, "j").await, Ok(JobState::Reserved));
    assert_eq!(b.store.tick(T0 + 18 * SEC, 100).await.unwrap().expired, 1);
    assert_eq!(state(b, "j").await, Ok(JobState::Ready));
    assert_eq!(
        b.store.touch(&id("j"), T0).await.unwrap_err(),
        StoreError::WrongState(JobState::Ready)
    );
}

async fn bury_and_kick_move_jobs_through_dead(b: &Backend) {
    push(b, job("t", "d", "", T0 + 60 * SEC), T0).await;
    push(b, job("t", "r", "", T0), T0).await;
    push(b, job("t", "x", "", T0), T0).await;
    assert_eq!(reserve_ids(b, &["t"], 1, T0).await, vec!["r"]);
    for i in ["d", "r", "x"] {
        let j = b.store.bury(&id(i), T0).await.unwrap();
        assert_eq!(j.state, JobState::Dead, "{i}");
    }
    assert_eq!(
        b.store.bury(&id("d"), T0).await.unwrap_err(),
        StoreError::WrongState(JobState::Dead)
    );
    b.store.tick(T0 + 120 * SEC, 100).await.unwrap();
    assert!(reserve_ids(b, &["t"], 10, T0 + 120 * SEC).await.is_empty());

    let j = b.store.kick(&id("r"), T0 + 1).await.unwrap();
    assert_eq!(j.state, JobState::Ready);
    assert_eq!(j.attempts, 0);
    assert_eq!(
        b.store.kick(&id("r"), T0).await.unwrap_err(),
        StoreError::WrongState(JobState::Ready)
    );
    // kick_topic takes the oldest burials first: d, then x.
    assert_eq!(b.store.kick_topic(&topic("t"), 1, T0 + 2).await, Ok(1));
    assert_eq!(state(b, "d").await, Ok(JobState::Ready));
    assert_eq!(state(b, "x").await, Ok(JobState::Dead));
    assert_eq!(b.store.kick_topic(&topic("t"), 10, T0 + 3).await, Ok(1));
    assert_eq!(b.store.kick_topic(&topic("t"), 10, T0 + 4).await, Ok(0));
    assert_eq!(reserve_ids(b, &["t"], 10, T0 + 5).await.len(), 3);
}

async fn reschedule_changes_a_pending_job_atomically(b: &Backend) {
    let mut spec = job("t", "j", "old", T0 + 60 * SEC);
    spec.priority = 9;
    push(b, spec, T0).await;
    let (j, prev) = b
        .store
        .reschedule(
            &id("j"),
            Reschedule {
                run_at: T0 + 10 * SEC,
                body: Some("new".into()),
                priority: Some(1),
            },
            T0,
        )
        .await
        .unwrap();
    assert_eq!(prev, JobState::Delayed);
    assert_eq!(j.state, JobState::Delayed);
    assert_eq!(
        (j.spec.run_at, j.spec.body.as_str(), j.spec.priority),
        (T0 + 10 * SEC, "new", 1)
    );
    assert_eq!(b.store.stats().await.unwrap().next_due, Some(T0 + 10 * SEC));

    // To a past time: ready at once. From ready back to the future: delayed again.
    let change = |run_at| Reschedule {
        run_at,
        ..Reschedule::default()
    };
    let (j, prev) = b.store.reschedule(&id("j"), change(T0), T0).await.unwrap();
    assert_eq!((prev, j.state), (JobState::Delayed, JobState::Ready));
    let (j, prev) = b
        .store
        .reschedule(&id("j"), change(T0 + 5 * SEC), T0)
        .await
        .unwrap();
    assert_eq!((prev, j.state), (JobState::Ready, JobState::Delayed));
    assert!(reserve_ids(b, &["t"], 1, T0).await.is_empty());
    b.store.tick(T0 + 5 * SEC, 100).await.unwrap();
    assert_eq!(reserve_ids(b, &["t"], 1, T0 + 5 * SEC).await, vec!["j"]);

    // Lost the race against delivery: refused, nothing changed.
    let err = b
        .store
        .reschedule(&id("j"), change(T0 + 99 * SEC), T0 + 5 * SEC)
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::WrongState(JobState::Reserved));
    let j = b.store.get(&id("j")).await.unwrap();
    assert_eq!((j.state, j.spec.run_at), (JobState::Reserved, T0 + 5 * SEC));
    assert_eq!(
        b.store
            .reschedule(&id("missing"), change(T0), T0)
            .await
            .unwrap_err(),
        StoreError::NotFound
    );
}

async fn stats_count_jobs_by_topic_and_state(b: &Backend) {
    push(b, job("a", "a1", "", T0 + 30 * SEC), T0).await;
    push(b, job("a", "a2", "", T0 + 20 * SEC), T0).await;
    push(b, job("a", "a3", "", T0), T0).await;
    push(b, job("b", "b1", "", T0), T0).await;
    push(b, job("b", "b2", "", T0), T0).await;
    reserve_ids(b, &["b"], 1, T0).await;
    b.store.bury(&id("b2"), T0).await.unwrap();
    let stats = b.store.stats().await.unwrap();
    let a = stats.topics[&topic("a")];
    let bb = stats.topics[&topic("b")];
    assert_eq!((a.delayed, a.ready, a.reserved, a.dead), (2, 1, 0, 0));
    assert_eq!((bb.delayed, bb.ready, bb.reserved, bb.dead), (0, 0, 1, 1));
    assert_eq!(stats.next_due, Some(T0 + 20 * SEC));
}

async fn tick_moves_due_jobs_in_batches(b: &Backend) {
    for i in 0..25 {
        push(b, job("t", &format!("j{i:02}"), "", T0 + 1 + i), T0).await;
    }
    let now = T0 + 100;
    let mut promoted = 0;
    let mut passes = 0;
    loop {
        let out = b.store.tick(now, 10).await.unwrap();
        promoted += out.promoted;
        passes += 1;
        match out.next_due {
            Some(t) if t <= now => continue,
            other => {
                assert_eq!(other, None);
                break;
            }
        }
    }
    assert_eq!(promoted, 25);
    assert!(
        passes >= 3,
        "a limit of 10 needs at least 3 passes, took {passes}"
    );
    assert_eq!(reserve_ids(b, &["t"], 100, now).await.len(), 25);
}

async fn push_batch_reports_each_outcome(b: &Backend) {
    push(b, job("t", "dup", "", T0), T0).await;
    let out = b
        .store
        .push_batch(
            vec![
                job("t", "n1", "", T0),
                job("t", "dup", "", T0),
                job("u", "n2", "", T0 + SEC),
            ],
            PushMode::Reject,
            T0,
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        vec![
            Ok(PushOutcome::Created),
            Err(StoreError::Exists),
            Ok(PushOutcome::Created)
        ]
    );
    assert_eq!(state(b, "n2").await, Ok(JobState::Delayed));
}

async fn bodies_round_trip_byte_for_byte(b: &Backend) {
    let bodies = [
        "",
        " ",
        "  padded  ",
        "line\nbreak\ttab\r\n",
        "nul\u{0}inside",
        "emoji 🎉 中文 ключ",
        "{\"json\": [1, 2, {\"a\": null}]}",
    ];
    for (i, body) in bodies.iter().enumerate() {
        push(b, job("t", &format!("b{i}"), body, T0), T0).await;
    }
    let big = "x".repeat(1 << 20);
    push(b, job("t", "big", &big, T0), T0).await;
    for (i, body) in bodies.iter().enumerate() {
        let j = b.store.get(&id(&format!("b{i}"))).await.unwrap();
        assert_eq!(j.spec.body, *body);
    }
    let got = b.store.reserve(&[topic("t")], 100, T0).await.unwrap();
    let big_got = got.iter().find(|j| j.spec.id.as_str() == "big").unwrap();
    assert_eq!(big_got.spec.body.len(), big.len());
}

async fn ids_and_topics_that_look_like_internal_names_are_plain_data(b: &Backend) {
    for (t, i) in [
        ("delayq", "delayq:{delayq:0}:jobs"),
        ("jobs", "{0}"),
        ("t:ready:x", "dq_queue_t"),
    ] {
        push(b, job(t, i, "x", T0), T0).await;
        assert_eq!(reserve_ids(b, &[t], 1, T0).await, vec![i.to_string()]);
        assert_eq!(b.store.finish(&id(i)).await, Ok(JobState::Reserved));
    }
    assert!(b.store.stats().await.unwrap().topics.is_empty());
}

async fn concurrent_consumers_never_get_the_same_job(b: &Backend) {
    let n = 200;
    let specs = (0..n).map(|i| job("c", &format!("j{i}"), "", T0)).collect();
    b.store
        .push_batch(specs, PushMode::Reject, T0)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = b.store.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = store.reserve(&[topic("c")], 3, T0).await.unwrap();
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got.into_iter().map(|j| j.spec.id.as_str().to_string()));
            }
        }));
    }
    let mut seen = HashSet::new();
    for t in tasks {
        for i in t.await.unwrap() {
            assert!(seen.insert(i.clone()), "{i} delivered twice");
        }
    }
    assert_eq!(seen.len(), n);
}

/// Many producers and finishers at once, with overlapping ids: the stores that join concurrent
/// calls into shared round trips or commits (Redis, embedded) must answer each caller as if the
/// calls had run one after the other.
async fn concurrent_pushes_and_finishes_of_the_same_ids_each_win_once(b: &Backend) {
    let ids = 50;
    let callers = 8;
    // Every caller pushes every id (in its own order, some one at a time, some in batches):
    // each id is created exactly once, and every other push of it is refused.
    let mut tasks = Vec::new();
    for c in 0..callers {
        let store = b.store.clone();
        tasks.push(tokio::spawn(async move {
            let mut order: Vec<usize> = (0..ids).collect();
            order.rotate_left(c * 7 % ids);
            let mut created = Vec::new();
            for chunk in order.chunks(if c % 2 == 0 { 1 } else { 5 }) {
                let specs = chunk
                    .iter()
                    .map(|i| job("cc", &format!("j{i}"), &format!("from {c}"), T0 + SEC))
                    .collect();
                let out = store.push_batch(specs, PushMode::Reject, T0).await.unwrap();
                for (i, r) in chunk.iter().zip(out) {
                    match r {
                        Ok(PushOutcome::Created) => created.push(*i),
                        Err(StoreError::Exists) => {}
                        other => panic!("push of j{i}: {other:?}"),
                    }
                }
            }
            created
        }));
    }
    let mut created = Vec::new();
    for t in tasks {
        created.extend(t.await.unwrap());
    }
    created.sort_unstable();
    assert_eq!(
        created,
        (0..ids).collect::<Vec<_>>(),
        "each id created exactly once"
    );
    // Every caller finishes every id: each is removed exactly once.
    let mut tasks = Vec::new();
    for c in 0..callers {
        let store = b.store.clone();
        tasks.push(tokio::spawn(async move {
            let all: Vec<JobId> = (0..ids).map(|i| id(&format!("j{i}"))).collect();
            let out = if c % 2 == 0 {
                let mut out = Vec::new();
                for i in &all {
                    out.push(store.finish(i).await);
                }
                out
            } else {
                store.finish_batch(&all).await.unwrap()
            };
            out.iter().filter(|r| r.is_ok()).count()
        }));
    }
    let mut removed = 0;
    for t in tasks {
        removed += t.await.unwrap();
    }
    assert_eq!(removed, ids, "each id finished exactly once");
    assert!(b.store.stats().await.unwrap().topics.is_empty());
}

async fn store_events_announce_ready_jobs_and_new_deadlines(b: &Backend) {
    let mut rx = b.store.subscribe();
    push(b, job("ev", "later", "", T0 + 5 * SEC), T0).await;
    push(b, job("ev", "now", "", T0), T0).await;
    let mut saw_due = false;
    let mut saw_ready = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(saw_due && saw_ready) {
        let ev = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("events within 10 s")
            .unwrap();
        match ev {
            StoreEvent::Due(t) if t == T0 + 5 * SEC => saw_due = true,
            StoreEvent::Ready(t) if t == topic("ev") => saw_ready = true,
            _ => {}
        }
    }
}

/// Runs the timer as dispatch/ does, from `from` until nothing is due by `until`: a tick,
/// then a sleep until the `next_due` it reported (at once if that is not after now). Returns
/// the times it woke at.
async fn run_timer(b: &Backend, from: UnixMillis, until: UnixMillis) -> Vec<UnixMillis> {
    let mut now = from;
    let mut wakes = Vec::new();
    loop {
        let out = b.store.tick(now, 100).await.unwrap();
        match out.next_due {
            Some(t) if t <= now => continue,
            Some(t) if t <= until => {
                now = t;
                wakes.push(t);
            }
            _ => return wakes,
        }
    }
}

async fn far_future_job_becomes_ready_exactly_at_run_at(b: &Backend) {
    let run_at = T0 + HOUR + 123;
    push(b, job("far", "f", "body", run_at), T0).await;
    let j = b.store.get(&id("f")).await.unwrap();
    assert_eq!((j.state, j.spec.run_at), (JobState::Delayed, run_at));
    let stats = b.store.stats().await.unwrap();
    assert_eq!(stats.topics[&topic("far")].delayed, 1);
    assert_eq!(stats.next_due, Some(run_at));

    // The timer may wake earlier than run_at (to prepare), never promote early.
    let out = b.store.tick(T0, 100).await.unwrap();
    assert_eq!(out.promoted, 0);
    assert!(
        out.next_due.is_some_and(|t| t > T0 && t <= run_at),
        "{out:?}"
    );
    let wakes = run_timer(b, T0, run_at - 1).await;
    assert!(wakes.iter().all(|&t| t < run_at), "{wakes:?}");
    assert_eq!(state(b, "f").await, Ok(JobState::Delayed));
    assert!(reserve_ids(b, &["far"], 1, run_at - 1).await.is_empty());
    let out = b.store.tick(run_at - 1, 100).await.unwrap();
    assert_eq!((out.promoted, out.next_due), (0, Some(run_at)));

    let out = b.store.tick(run_at, 100).await.unwrap();
    assert_eq!((out.promoted, out.next_due), (1, None));
    let got = b.store.reserve(&[topic("far")], 10, run_at).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].spec.body.as_str(), got[0].spec.run_at),
        ("body", run_at)
    );
    assert_eq!(b.store.finish(&id("f")).await, Ok(JobState::Reserved));

    // A timer that wakes long after a far job's time catches up in one pass.
    push(b, job("far", "g", "", T0 + 2 * HOUR), run_at).await;
    let out = b.store.tick(T0 + 3 * HOUR, 100).await.unwrap();
    assert_eq!(out.promoted, 1);
    assert_eq!(reserve_ids(b, &["far"], 10, T0 + 3 * HOUR).await, vec!["g"]);
}

async fn far_jobs_deleted_rescheduled_replaced_or_buried_leave_no_ghost(b: &Backend) {
    for i in ["del", "resched", "replaced", "buried", "moved"] {
        push(b, job("t", i, "old", T0 + HOUR), T0).await;
    }
    assert_eq!(b.store.delete(&id("del")).await, Ok(JobState::Delayed));
    let change = |run_at| Reschedule {
        run_at,
        ..Reschedule::default()
    };
    // To another far window, and within the same one.
    b.store
        .reschedule(&id("resched"), change(T0 + 2 * HOUR), T0)
        .await
        .unwrap();
    b.store
        .reschedule(&id("moved"), change(T0 + HOUR + 5 * SEC), T0 + SEC)
        .await
        .unwrap();
    let out = b
        .store
        .push(
            job("other", "replaced", "new", T0 + HOUR + 10),
            PushMode::Replace,
            T0 + 2 * SEC,
        )
        .await;
    assert_eq!(out, Ok(PushOutcome::Replaced(JobState::Delayed)));
    b.store.bury(&id("buried"), T0 + 3 * SEC).await.unwrap();
    let stats = b.store.stats().await.unwrap();
    let t = stats.topics[&topic("t")];
    assert_eq!((t.delayed, t.ready, t.reserved, t.dead), (2, 0, 0, 1));
    assert_eq!(stats.topics[&topic("other")].delayed, 1);

    // Each live version once, on time; the old ones never.
    let mut delivered = Vec::new();
    let mut now = T0 + 3 * SEC;
    while now <= T0 + 3 * HOUR {
        run_timer(b, now, now).await;
        for j in b
            .store
            .reserve(&[topic("t"), topic("other")], 10, now)
            .await
            .unwrap()
        {
            assert!(j.spec.run_at <= now, "{} handed out early", j.spec.id);
            assert_eq!(b.store.finish(&j.spec.id).await, Ok(JobState::Reserved));
            delivered.push((j.spec.id.as_str().to_string(), j.spec.body, j.spec.run_at));
        }
        now += 5 * SEC;
    }
    assert_eq!(
        delivered,
        vec![
            ("replaced".to_string(), "new".to_string(), T0 + HOUR + 10),
            ("moved".to_string(), "old".to_string(), T0 + HOUR + 5 * SEC),
            ("resched".to_string(), "old".to_string(), T0 + 2 * HOUR),
        ]
    );
    assert_eq!(state(b, "del").await, Err(StoreError::NotFound));
    assert_eq!(state(b, "buried").await, Ok(JobState::Dead));
    let stats = b.store.stats().await.unwrap();
    assert_eq!(stats.topics.len(), 1);
    assert_eq!(stats.topics[&topic("t")].dead, 1);
}

async fn far_job_rescheduled_near_is_ready_on_time_and_near_job_moved_far_waits(b: &Backend) {
    push(b, job("t", "was-far", "", T0 + HOUR), T0).await;
    push(b, job("t", "was-near", "", T0 + 5 * SEC), T0).await;
    let change = |run_at| Reschedule {
        run_at,
        ..Reschedule::default()
    };
    b.store
        .reschedule(&id("was-far"), change(T0 + 5 * SEC), T0)
        .await
        .unwrap();
    b.store
        .reschedule(&id("was-near"), change(T0 + HOUR), T0)
        .await
        .unwrap();
    let out = b.store.tick(T0 + 5 * SEC - 1, 100).await.unwrap();
    assert_eq!((out.promoted, out.next_due), (0, Some(T0 + 5 * SEC)));
    let out = b.store.tick(T0 + 5 * SEC, 100).await.unwrap();
    assert_eq!(out.promoted, 1);
    assert_eq!(
        reserve_ids(b, &["t"], 10, T0 + 5 * SEC).await,
        vec!["was-far"]
    );
    assert_eq!(b.store.finish(&id("was-far")).await, Ok(JobState::Reserved));

    run_timer(b, T0 + 5 * SEC, T0 + HOUR - 1).await;
    assert!(reserve_ids(b, &["t"], 10, T0 + HOUR - 1).await.is_empty());
    run_timer(b, T0 + HOUR - 1, T0 + HOUR).await;
    assert_eq!(
        reserve_ids(b, &["t"], 10, T0 + HOUR).await,
        vec!["was-near"]
    );
    assert_eq!(
        b.store.finish(&id("was-near")).await,
        Ok(JobState::Reserved)
    );
    // The far window's stale entry for was-far delivers nothing.
    run_timer(b, T0 + HOUR, T0 + 2 * HOUR).await;
    assert!(reserve_ids(b, &["t"], 10, T0 + 2 * HOUR).await.is_empty());
    assert!(b.store.stats().await.unwrap().topics.is_empty());
}

/// A restore puts back absent jobs with their attempts, delayed or ready by their due time,
/// and leaves a present id alone.
async fn restore_keeps_attempts_and_leaves_present_jobs_alone(b: &Backend) {
    push(b, job("r", "present", "kept", T0 + HOUR), T0).await;
    let lost = |i: &str, run_at, attempts| Job {
        spec: job("r", i, "back", run_at),
        state: JobState::Ready,
        attempts,
        reserved_until: None,
        seq: 0,
    };
    let mut cb = lost("cb", T0, 4);
    cb.spec = callback_job("r", "cb", T0);
    let out = b
        .store
        .restore_batch(
            &[
                lost("due", T0, 3),
                lost("later", T0 + HOUR, 7),
                lost("present", T0, 1),
                cb,
            ],
            T0,
        )
        .await
        .unwrap();
    assert_eq!(out[0], Ok(PushOutcome::Created));
    assert_eq!(out[1], Ok(PushOutcome::Created));
    assert_eq!(out[2], Err(StoreError::Exists));
    assert_eq!(out[3], Ok(PushOutcome::Created));
    let present = b.store.get(&id("present")).await.unwrap();
    assert_eq!((present.spec.body.as_str(), present.attempts), ("kept", 0));
    let later = b.store.get(&id("later")).await.unwrap();
    assert_eq!((later.state, later.attempts), (JobState::Delayed, 7));
    let got = b.store.reserve(&[topic("r")], 10, T0).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].spec.id.as_str(), got[0].attempts), ("due", 4));
    let queue = topic("r").callback_queue();
    let got = b.store.reserve(&[queue], 10, T0).await.unwrap();
    assert_eq!((got[0].spec.id.as_str(), got[0].attempts), ("cb", 5));
    assert_eq!(got[0].spec, callback_job("r", "cb", T0));
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

/// Callback jobs wait in their topic's callback queue: a consumer of the topic never gets one;
/// the callback queue hands them out, with a reservation of the timeout plus 5 s, and they
/// are counted apart.
async fn callback_jobs_are_only_in_their_topics_callback_queue(b: &Backend) {
    push(b, callback_job("orders", "cb1", T0), T0).await;
    push(b, job("orders", "pull1", "p", T0), T0).await;
    let got = b.store.get(&id("cb1")).await.unwrap();
    assert_eq!(
        got.spec,
        callback_job("orders", "cb1", T0),
        "every field kept"
    );
    let stats = b.store.stats().await.unwrap();
    assert_eq!(stats.topics[&topic("orders")].ready, 1);
    assert_eq!(stats.callbacks[&topic("orders")].ready, 1);

    assert_eq!(reserve_ids(b, &["orders"], 10, T0).await, ["pull1"]);
    assert!(reserve_ids(b, &["orders"], 10, T0).await.is_empty());
    let queue = topic("orders").callback_queue();
    let jobs = b
        .store
        .reserve(std::slice::from_ref(&queue), 10, T0)
        .await
        .unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].spec.id.as_str(), "cb1");
    assert_eq!(jobs[0].reserved_until, Some(T0 + 15 * SEC));
    assert_eq!(jobs[0].attempts, 1);
    assert!(b.store.reserve(&[queue], 10, T0).await.unwrap().is_empty());
}

/// A callback job's failed call follows its backoff, then it dies; kicked, it is in its
/// callback queue again, and `kick_topic` of that queue brings back its dead.
async fn callback_job_retries_dies_and_is_kicked_back_to_its_queue(b: &Backend) {
    let queue = topic("mail").callback_queue();
    push(b, callback_job("mail", "cb", T0), T0).await;
    let mut rx = b.store.subscribe();
    b.store
        .reserve(std::slice::from_ref(&queue), 1, T0)
        .await
        .unwrap();
    let j = b.store.release(&id("cb"), None, T0 + SEC).await.unwrap();
    assert_eq!((j.state, j.spec.run_at), (JobState::Delayed, T0 + 16 * SEC));
    b.store.tick(T0 + 16 * SEC, 100).await.unwrap();
    // The timer's promotion names the callback queue, which the deliverer listens for.
    let mut heard = false;
    while let Ok(Ok(ev)) = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await {
        if ev == StoreEvent::Ready(queue.clone()) {
            heard = true;
            break;
        }
    }
    assert!(heard, "no Ready event for the callback queue");
    assert_eq!(
        b.store
            .reserve(std::slice::from_ref(&queue), 1, T0 + 16 * SEC)
            .await
            .unwrap()
            .len(),
        1
    );
    let j = b
        .store
        .release(&id("cb"), None, T0 + 17 * SEC)
        .await
        .unwrap();
    assert_eq!(j.state, JobState::Dead, "out of its 2 attempts");
    assert_eq!(
        b.store.stats().await.unwrap().callbacks[&topic("mail")].dead,
        1
    );
    assert_eq!(
        b.store
            .kick_topic(&topic("mail"), 10, T0 + 18 * SEC)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        b.store.kick_topic(&queue, 10, T0 + 18 * SEC).await.unwrap(),
        1
    );
    assert!(
        reserve_ids(b, &["mail"], 10, T0 + 18 * SEC)
            .await
            .is_empty()
    );
    let again = b.store.reserve(&[queue], 1, T0 + 18 * SEC).await.unwrap();
    assert_eq!((again.len(), again[0].attempts), (1, 1));
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

/// The listing order of each state, with other topics' and other states' jobs around: delayed
/// by run_at (near and far, ties by id), ready in delivery order, reserved by deadline, dead
/// oldest burial first; callback jobs are listed apart under their topic's callback queue.
async fn listing_pages_each_state_in_its_order(b: &Backend) {
    let t = "lst";
    // Delayed: near and far, two with the same run_at.
    for (i, at) in [
        ("d3", 3 * HOUR),
        ("d1", 30 * SEC),
        ("d2b", 90 * SEC),
        ("d2a", 90 * SEC),
        ("d4", 50 * HOUR),
    ] {
        push(b, job(t, i, "", T0 + at), T0).await;
        push(b, job("other", &format!("o{i}"), "", T0 + at), T0).await;
    }
    // Ready: priorities and push order.
    for (i, p) in [
        ("r1", 5),
        ("r2", 1),
        ("r3", 5),
        ("r4", 9),
        ("x1", 0),
        ("x2", 0),
    ] {
        let mut spec = job(t, i, "", T0);
        spec.priority = p;
        push(b, spec, T0).await;
    }
    // Reserved: x1 and x2 (priority 0) with different TTRs.
    let got = b.store.reserve(&[topic(t)], 1, T0).await.unwrap();
    assert_eq!(got[0].spec.id.as_str(), "x1");
    b.store.touch(&id("x1"), T0 + 20 * SEC).await.unwrap();
    let got = b.store.reserve(&[topic(t)], 1, T0 + SEC).await.unwrap();
    assert_eq!(got[0].spec.id.as_str(), "x2");
    // Dead: buried in this order.
    for (k, i) in ["z2", "z1", "z3"].iter().enumerate() {
        push(b, job(t, i, "", T0 + HOUR), T0).await;
        b.store.bury(&id(i), T0 + 2 * SEC + k as u64).await.unwrap();
    }
    push(b, callback_job(t, "cb2", T0 + 2 * HOUR), T0).await;
    push(b, callback_job(t, "cb1", T0 + 2 * HOUR), T0).await;
    push(b, callback_job(t, "cb0", T0 + HOUR), T0).await;

    for limit in [1, 2, 3, 100] {
        assert_eq!(
            walk(b, t, JobState::Delayed, limit).await,
            ["d1", "d2a", "d2b", "d3", "d4"],
            "limit {limit}"
        );
        assert_eq!(
            walk(b, t, JobState::Ready, limit).await,
            ["r2", "r1", "r3", "r4"]
        );
        assert_eq!(walk(b, t, JobState::Reserved, limit).await, ["x2", "x1"]);
        assert_eq!(walk(b, t, JobState::Dead, limit).await, ["z2", "z1", "z3"]);
        assert_eq!(
            walk(b, "lst,callback", JobState::Delayed, limit).await,
            ["cb0", "cb1", "cb2"]
        );
    }
    assert!(walk(b, "nothing", JobState::Ready, 10).await.is_empty());
    assert!(walk(b, "lst,callback", JobState::Dead, 10).await.is_empty());
    // A full page is followed by a cursor; the last page has none.
    let page = b
        .store
        .list(&topic(t), JobState::Ready, None, 4)
        .await
        .unwrap();
    assert_eq!(page.jobs.len(), 4);
    if let Some(k) = page.next {
        let rest = b
            .store
            .list(&topic(t), JobState::Ready, Some(&k), 4)
            .await
            .unwrap();
        assert_eq!((rest.jobs.len(), rest.next), (0, None));
    }
    // Every field as `get` has it.
    let page = b
        .store
        .list(&topic(t), JobState::Reserved, None, 1)
        .await
        .unwrap();
    assert_eq!(page.jobs[0], b.store.get(&id("x2")).await.unwrap());
}

/// A walk over the pages while other tasks push and finish jobs of the same topic and state
/// (before and after the cursor): every job that stays the whole walk is listed exactly once,
/// in order.
async fn paging_is_stable_under_concurrent_pushes_and_finishes(b: &Backend) {
    let t = "walk";
    let spread = |k: u64| (k * 7_919) % (3 * HOUR);
    let mut specs = Vec::new();
    for k in 0..400u64 {
        let i = format!("s{k:03}");
        // Delayed jobs near and far; ready ones with a spread of priorities.
        specs.push(job(t, &i, "", T0 + 1 + spread(k)));
        let mut r = job(t, &format!("r{k:03}"), "", T0);
        r.priority = (k % 7) as u32;
        specs.push(r);
    }
    b.store
        .push_batch(specs, PushMode::Reject, T0)
        .await
        .unwrap();
    for state in [JobState::Delayed, JobState::Ready] {
        let store = b.store.clone();
        let churn = tokio::spawn(async move {
            for k in 0..300u64 {
                let i = format!("c{}{k:03}", state.as_str());
                let at = if state == JobState::Delayed {
                    T0 + 1 + spread(k * 13)
                } else {
                    T0
                };
                let mut spec = job(t, &i, "", at);
                spec.priority = (k % 5) as u32;
                store.push(spec, PushMode::Reject, T0).await.unwrap();
                if k % 2 == 0 {
                    store.delete(&id(&i)).await.unwrap();
                }
                if k % 10 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        });
        let listed = walk(b, t, state, 7).await;
        churn.await.unwrap();
        let prefix = if state == JobState::Delayed { "s" } else { "r" };
        let mine: Vec<&String> = listed.iter().filter(|i| i.starts_with(prefix)).collect();
        let unique: HashSet<&&String> = mine.iter().collect();
        assert_eq!(unique.len(), mine.len(), "{state:?}: a job listed twice");
        assert_eq!(mine.len(), 400, "{state:?}: a job skipped");
    }
}

/// The schedule counts of a topic and of every topic, minute by minute over an hour and hour
/// by hour over a day, against a count of the same jobs through `get`, after jobs moved
/// between states, were rescheduled, deleted and promoted.
async fn schedule_counts_match_a_brute_force_count(b: &Backend) {
    const MIN: u64 = 60 * SEC;
    let m0 = T0 - T0 % MIN;
    let mut ids = Vec::new();
    let mut specs = Vec::new();
    for k in 0..600u64 {
        let t = ["sa", "sb", "sc"][(k % 3) as usize];
        let at = m0 + (k * 104_729) % (26 * HOUR);
        let i = format!("q{k:03}");
        if k % 11 == 0 {
            specs.push(callback_job(t, &i, at));
        } else {
            specs.push(job(t, &i, "", at));
        }
        ids.push(i);
    }
    b.store
        .push_batch(specs, PushMode::Reject, m0)
        .await
        .unwrap();
    for (n, i) in ids.iter().enumerate() {
        match n % 9 {
            0 => drop(b.store.delete(&id(i)).await),
            1 => drop(b.store.bury(&id(i), m0).await),
            2 => {
                let change = Reschedule {
                    run_at: m0 + (n as u64 * 7_777) % (30 * HOUR),
                    ..Reschedule::default()
                };
                drop(b.store.reschedule(&id(i), change, m0).await);
            }
            _ => {}
        }
    }
    // Promote what falls due in the first ten minutes.
    let now = m0 + 10 * MIN;
    while b
        .store
        .tick(now, 1000)
        .await
        .unwrap()
        .next_due
        .is_some_and(|t| t <= now)
    {}

    let mut jobs = Vec::new();
    for i in &ids {
        if let Ok(j) = b.store.get(&id(i)).await {
            jobs.push(j);
        }
    }
    for (from, to, step) in [
        (m0, m0 + HOUR, MIN),
        (m0, m0 + 24 * HOUR, HOUR),
        (m0 + 5 * MIN, m0 + 31 * HOUR, 7 * MIN),
    ] {
        for t in [Some("sa"), Some("sb"), None, Some("none")] {
            let want: Vec<u64> = (0..(to - from).div_ceil(step))
                .map(|s| {
                    let lo = from + s * step;
                    let hi = (lo + step).min(to);
                    jobs.iter()
                        .filter(|j| j.state == JobState::Delayed)
                        .filter(|j| t.is_none_or(|t| j.spec.topic.as_str() == t))
                        .filter(|j| (lo..hi).contains(&j.spec.run_at))
                        .count() as u64
                })
                .collect();
            let topic = t.map(topic);
            let got = b
                .store
                .schedule(topic.as_ref(), from, to, step)
                .await
                .unwrap();
            assert_eq!(got, want, "{t:?} from {from} to {to} by {step}");
        }
    }
    assert!(
        jobs.iter()
            .any(|j| j.state == JobState::Delayed && j.spec.callback.is_some())
    );
}

/// A publish job (RabbitMQ): every field of its target kept, a binary body's base64 flag
/// included, through every transition and a replace; it waits in its topic's callback queue,
/// never in the topic's, and is counted there; released past its attempts it is dead.
async fn publish_jobs_keep_their_target_and_live_in_the_callback_queue(b: &Backend) {
    let queue = topic("orders").callback_queue();
    let mut spec = job("orders", "p1", "AP8A", T0);
    spec.with_publish_defaults(
        Publish {
            exchange: "orders-x".into(),
            routing_key: "order.cancel".into(),
            content_type: Some("application/octet-stream".into()),
            headers: Some(r#"{"trace":{"LongString":[116]}}"#.into()),
            body_base64: true,
        },
        30 * SEC,
        None,
        Some(2),
        Some(vec![SEC]),
    );
    assert_eq!(spec.ttr_ms, 35 * SEC, "the publish timeout plus the grace");
    push(b, spec.clone(), T0).await;
    assert_eq!(b.store.get(&id("p1")).await.unwrap().spec, spec);
    assert!(reserve_ids(b, &["orders"], 10, T0).await.is_empty());
    assert_eq!(
        b.store.stats().await.unwrap().callbacks[&topic("orders")].ready,
        1
    );
    let got = b
        .store
        .reserve(std::slice::from_ref(&queue), 10, T0)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].spec, spec);
    assert_eq!(got[0].reserved_until, Some(T0 + 35 * SEC));
    let j = b.store.release(&id("p1"), Some(SEC), T0).await.unwrap();
    assert_eq!(
        (j.state, j.spec.clone()),
        (JobState::Delayed, {
            let mut s = spec.clone();
            s.run_at = T0 + SEC;
            s
        })
    );
    b.store.tick(T0 + SEC, 100).await.unwrap();
    let again = b
        .store
        .reserve(std::slice::from_ref(&queue), 10, T0 + SEC)
        .await
        .unwrap();
    assert_eq!(again[0].spec.publish, spec.publish);
    let j = b
        .store
        .release(&id("p1"), None, T0 + 2 * SEC)
        .await
        .unwrap();
    assert_eq!(j.state, JobState::Dead);
    assert_eq!(j.spec.publish, spec.publish);
    assert_eq!(
        b.store.stats().await.unwrap().callbacks[&topic("orders")].dead,
        1
    );

    // Replaced by a plain publish job: the intake's fields are gone with the old version.
    let mut plain = job("orders", "p1", "text", T0 + 3 * SEC);
    plain.with_publish_defaults(
        Publish {
            exchange: String::new(),
            routing_key: "q".into(),
            content_type: None,
            headers: None,
            body_base64: false,
        },
        30 * SEC,
        None,
        None,
        None,
    );
    b.store
        .push(plain.clone(), PushMode::Replace, T0 + 2 * SEC)
        .await
        .unwrap();
    assert_eq!(b.store.get(&id("p1")).await.unwrap().spec, plain);
}

backend_tests!(
    listing_pages_each_state_in_its_order,
    paging_is_stable_under_concurrent_pushes_and_finishes,
    schedule_counts_match_a_brute_force_count,
    publish_jobs_keep_their_target_and_live_in_the_callback_queue,
    restore_keeps_attempts_and_leaves_present_jobs_alone,
    callback_jobs_are_only_in_their_topics_callback_queue,
    callback_job_retries_dies_and_is_kicked_back_to_its_queue,
    push_then_get_returns_every_field,
    unknown_job_is_not_found,
    job_due_now_or_earlier_is_ready_at_once,
    delayed_job_is_never_handed_out_before_run_at,
    reserve_orders_by_priority_then_run_at_then_push_order,
    reserve_prefers_topics_in_the_order_given,
    reserve_counts_attempts_and_sets_the_ttr_deadline,
    reserved_job_is_not_handed_out_again_within_its_ttr,
    unfinished_job_is_redelivered_after_ttr,
    finish_removes_the_job_for_good,
    finish_batch_answers_each_id_in_order,
    delete_removes_a_job_in_any_state,
    pushing_an_existing_id_is_refused_without_replace,
    replace_delivers_the_new_version_once_and_the_old_never,
    backoff_schedule_delays_each_redelivery,
    job_out_of_attempts_becomes_dead,
    release_returns_a_reserved_job_now_or_later,
    touch_extends_a_reservation_by_its_ttr,
    bury_and_kick_move_jobs_through_dead,
    reschedule_changes_a_pending_job_atomically,
    stats_count_jobs_by_topic_and_state,
    tick_moves_due_jobs_in_batches,
    push_batch_reports_each_outcome,
    bodies_round_trip_byte_for_byte,
    ids_and_topics_that_look_like_internal_names_are_plain_data,
    concurrent_consumers_never_get_the_same_job,
    concurrent_pushes_and_finishes_of_the_same_ids_each_win_once,
    store_events_announce_ready_jobs_and_new_deadlines,
    far_future_job_becomes_ready_exactly_at_run_at,
    far_jobs_deleted_rescheduled_replaced_or_buried_leave_no_ghost,
    far_job_rescheduled_near_is_ready_on_time_and_near_job_moved_far_waits,
);
