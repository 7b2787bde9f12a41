//! The transitions of one job by its id: `release` (now or later), `touch`, `bury` and `kick`
//! (and `kick_topic`) through dead, `reserve_job` of a ready or dead job, and
//! `reschedule` of a pending job.

use super::*;

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
        let j = b.store.bury(&id(i), None, T0).await.unwrap();
        assert_eq!(j.state, JobState::Dead, "{i}");
    }
    assert_eq!(
        b.store.bury(&id("d"), None, T0).await.unwrap_err(),
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

async fn bury_with_a_priority_sets_it_and_without_one_keeps_it(b: &Backend) {
    for (i, priority) in [("a", 5), ("b", 5), ("c", 5)] {
        let mut spec = job("t", i, "", T0);
        spec.priority = priority;
        push(b, spec, T0).await;
    }
    assert_eq!(reserve_ids(b, &["t"], 2, T0).await, vec!["a", "b"]);
    let a = b.store.bury(&id("a"), Some(1), T0 + 1).await.unwrap();
    assert_eq!((a.state, a.spec.priority), (JobState::Dead, 1));
    let b_job = b.store.bury(&id("b"), None, T0 + 2).await.unwrap();
    assert_eq!((b_job.state, b_job.spec.priority), (JobState::Dead, 5));
    assert_eq!(b.store.get(&id("a")).await.unwrap().spec.priority, 1);
    // Kicked, each goes out in its priority's order: a (1) before c (5) before b (5, later).
    b.store.kick(&id("b"), T0 + 3).await.unwrap();
    b.store.kick(&id("a"), T0 + 4).await.unwrap();
    assert_eq!(reserve_ids(b, &["t"], 3, T0 + 5).await, vec!["a", "c", "b"]);
}

async fn reserve_job_reserves_a_ready_or_dead_job_by_its_id_never_a_delayed_one(b: &Backend) {
    push(b, job("t", "d", "", T0 + 60 * SEC), T0).await;
    let mut spec = job("t", "r", "", T0);
    spec.ttr_ms = 10 * SEC;
    push(b, spec, T0).await;
    push(b, job("t", "x", "", T0), T0).await;
    b.store.bury(&id("x"), None, T0).await.unwrap();
    for i in ["r", "x"] {
        let j = b.store.reserve_job(&id(i), T0 + 1).await.unwrap();
        assert_eq!(j.state, JobState::Reserved, "{i}");
        assert_eq!(j.attempts, 1, "{i}");
        assert_eq!(j.reserved_until, Some(T0 + 1 + j.spec.ttr_ms), "{i}");
        assert_eq!(state(b, i).await, Ok(JobState::Reserved), "{i}");
    }
    // Never early: a delayed job stays delayed.
    assert_eq!(
        b.store.reserve_job(&id("d"), T0 + 1).await.unwrap_err(),
        StoreError::WrongState(JobState::Delayed)
    );
    assert_eq!(state(b, "d").await, Ok(JobState::Delayed));
    assert_eq!(
        b.store.reserve_job(&id("r"), T0 + 2).await.unwrap_err(),
        StoreError::WrongState(JobState::Reserved)
    );
    assert_eq!(
        b.store.reserve_job(&id("missing"), T0).await.unwrap_err(),
        StoreError::NotFound
    );
    // Nothing is left for a reserve by topic; the reservation runs out as any other.
    assert!(reserve_ids(b, &["t"], 10, T0 + 2).await.is_empty());
    assert_eq!(
        b.store.tick(T0 + 1 + 10 * SEC, 100).await.unwrap().expired,
        1
    );
    assert_eq!(
        reserve_ids(b, &["t"], 10, T0 + 1 + 10 * SEC).await,
        vec!["r"]
    );
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

backend_tests!(
    release_returns_a_reserved_job_now_or_later,
    touch_extends_a_reservation_by_its_ttr,
    bury_and_kick_move_jobs_through_dead,
    bury_with_a_priority_sets_it_and_without_one_keeps_it,
    reserve_job_reserves_a_ready_or_dead_job_by_its_id_never_a_delayed_one,
    reschedule_changes_a_pending_job_atomically,
);
