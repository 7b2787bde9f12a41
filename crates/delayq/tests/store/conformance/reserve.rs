//! `reserve` and the time-to-run: only due jobs, in priority, due-time and push order, topics in
//! the order asked; attempts and the TTR deadline; redelivery after the TTR along the backoff,
//! dead when out of attempts; never one job to two consumers.

use super::*;

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

backend_tests!(
    job_due_now_or_earlier_is_ready_at_once,
    delayed_job_is_never_handed_out_before_run_at,
    reserve_orders_by_priority_then_run_at_then_push_order,
    reserve_prefers_topics_in_the_order_given,
    reserve_counts_attempts_and_sets_the_ttr_deadline,
    reserved_job_is_not_handed_out_again_within_its_ttr,
    unfinished_job_is_redelivered_after_ttr,
    backoff_schedule_delays_each_redelivery,
    job_out_of_attempts_becomes_dead,
    concurrent_consumers_never_get_the_same_job,
);
