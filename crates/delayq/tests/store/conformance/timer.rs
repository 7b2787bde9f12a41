//! The timer's transitions (`tick`): due jobs promoted in batches, the events that announce
//! ready jobs and new deadlines, and far-future jobs ready exactly on time, leaving no ghost
//! when deleted, rescheduled, replaced or buried.

use super::*;

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
    b.store
        .bury(&id("buried"), None, T0 + 3 * SEC)
        .await
        .unwrap();
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

backend_tests!(
    tick_moves_due_jobs_in_batches,
    store_events_announce_ready_jobs_and_new_deadlines,
    far_future_job_becomes_ready_exactly_at_run_at,
    far_jobs_deleted_rescheduled_replaced_or_buried_leave_no_ghost,
    far_job_rescheduled_near_is_ready_on_time_and_near_job_moved_far_waits,
);
