//! The timer's pass on Redis: promotion and expiry by the rules, a tick that hits its limit, a
//! backlog moved 250 jobs per call, far windows drained on time, and a deadline announced only
//! when it is its shard's earliest.

use super::*;

#[tokio::test]
async fn timer_promotes_due_jobs_and_expires_reservations_by_the_rules() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 3).await;
    let mut j = job("t", "retry", "b", NOW + 1000);
    j.ttr_ms = 500;
    j.max_attempts = 3;
    j.backoff_ms = vec![100, 200];
    s.push(j, PushMode::Reject, NOW).await.unwrap();
    s.push(job("t", "later", "b", NOW + 5000), PushMode::Reject, NOW)
        .await
        .unwrap();

    let out = s.tick(NOW + 999, 100).await.unwrap();
    assert_eq!(
        (out.promoted, out.expired, out.next_due),
        (0, 0, Some(NOW + 1000))
    );
    assert!(
        s.reserve(&[topic("t")], 1, NOW + 999)
            .await
            .unwrap()
            .is_empty()
    );

    let out = s.tick(NOW + 1000, 100).await.unwrap();
    assert_eq!((out.promoted, out.expired), (1, 0));
    let t = NOW + 1000;
    let r = s.reserve(&[topic("t")], 1, t).await.unwrap();
    assert_eq!(r[0].reserved_until, Some(t + 500));

    // TTR runs out: attempt 1 failed, backoff 100.
    let out = s.tick(t + 500, 100).await.unwrap();
    assert_eq!((out.promoted, out.expired), (0, 1));
    let g = s.get(&id("retry")).await.unwrap();
    assert_eq!(
        (g.state, g.spec.run_at, g.attempts),
        (JobState::Delayed, t + 600, 1)
    );
    assert_eq!(out.next_due, Some(t + 600));

    // Attempt 2, released without delay: backoff 200.
    s.tick(t + 600, 100).await.unwrap();
    s.reserve(&[topic("t")], 1, t + 600).await.unwrap();
    let g = s.release(&id("retry"), None, t + 700).await.unwrap();
    assert_eq!((g.state, g.spec.run_at), (JobState::Delayed, t + 900));

    // Attempt 3 fails: dead.
    s.tick(t + 900, 100).await.unwrap();
    s.reserve(&[topic("t")], 1, t + 900).await.unwrap();
    let out = s.tick(t + 1400, 100).await.unwrap();
    assert_eq!(out.expired, 1);
    let g = s.get(&id("retry")).await.unwrap();
    assert_eq!(
        (g.state, g.attempts, g.reserved_until),
        (JobState::Dead, 3, None)
    );

    // Kick: ready now with attempts reset.
    let k = s.kick(&id("retry"), t + 2000).await.unwrap();
    assert_eq!(
        (k.state, k.attempts, k.spec.run_at),
        (JobState::Ready, 0, t + 2000)
    );
    let st = s.stats().await.unwrap();
    let c = st.topics[&topic("t")];
    assert_eq!((c.delayed, c.ready, c.reserved, c.dead), (1, 1, 0, 0));
    assert_eq!(st.next_due, Some(NOW + 5000));
}

#[tokio::test]
async fn tick_reports_now_when_its_limit_is_hit() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    push_one_a_ms(&s, 5).await;
    let out = s.tick(NOW + 10, 3).await.unwrap();
    assert_eq!((out.promoted, out.next_due), (3, Some(NOW + 10)));
    let out = s.tick(NOW + 10, 3).await.unwrap();
    assert_eq!((out.promoted, out.next_due), (2, None));
}

/// A function call holds Redis while it runs, so a backlog due at once is moved in passes of
/// at most 250 jobs whatever the timer's limit, each reporting the rest as due now; the passes
/// together promote every job, in due order.
#[tokio::test]
async fn a_backlog_due_at_once_is_promoted_250_jobs_per_call() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    let want = push_one_a_ms(&s, 600).await;
    let now = NOW + 1000;
    let mut passes = Vec::new();
    loop {
        let out = s.tick(now, 1000).await.unwrap();
        passes.push(out.promoted);
        if out.next_due.is_none_or(|t| t > now) {
            break;
        }
        assert_eq!(out.next_due, Some(now), "work left is due now");
    }
    assert_eq!(passes, vec![250, 250, 100]);
    let got = s.reserve(&[topic("t")], 1000, now).await.unwrap();
    assert_eq!(ids(&got), want);
}

/// Pushes `n` jobs of topic `t`, `j000`, `j001`, ..., due one a millisecond from `NOW + 1`;
/// returns their ids in due order.
async fn push_one_a_ms(s: &RedisStore, n: u64) -> Vec<String> {
    let mut pushed = Vec::new();
    for i in 0..n {
        let id = format!("j{i:03}");
        s.push(job("t", &id, "", NOW + 1 + i), PushMode::Reject, NOW)
            .await
            .unwrap();
        pushed.push(id);
    }
    pushed
}

/// On one shard a tick skips the look at the far windows for a second after making one; a
/// window whose drain time comes within that second is drained all the same, on time.
#[tokio::test]
async fn a_window_due_right_after_a_full_tick_is_still_drained_on_time() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    let run_at = NOW + 10 * 60_000 + 500;
    s.push(job("t", "far", "", run_at), PushMode::Reject, NOW)
        .await
        .unwrap();
    // A window is drained a window (60 s) ahead of its earliest job.
    let drain_at = run_at - 60_000;
    let t = s.tick(drain_at - 1, 100).await.unwrap();
    assert_eq!(t.next_due, Some(drain_at));
    let t = s.tick(drain_at, 100).await.unwrap();
    assert_eq!(
        t.next_due,
        Some(run_at),
        "the window was not drained into the timeline at its drain time"
    );
    assert_eq!(s.tick(run_at - 1, 100).await.unwrap().promoted, 0);
    assert_eq!(s.tick(run_at, 100).await.unwrap().promoted, 1);
}

/// Pushes job `i` of topic `t`, ready at NOW with TTR `ttr_ms`, sees its `Ready` event next,
/// and reserves it at NOW.
async fn reserve_new(
    s: &RedisStore,
    rx: &mut broadcast::Receiver<StoreEvent>,
    i: &str,
    ttr_ms: u64,
) {
    let mut spec = job("t", i, "", NOW);
    spec.ttr_ms = ttr_ms;
    s.push(spec, PushMode::Reject, NOW).await.unwrap();
    assert_eq!(next_event(rx).await, StoreEvent::Ready(topic("t")));
    assert_eq!(ids(&s.reserve(&[topic("t")], 1, NOW).await.unwrap()), [i]);
}

/// A deadline is announced (`Due`) exactly when it comes before every timer the shard had: the
/// timeline's head and the far windows' drain times. Each step that must announce nothing is
/// followed by one that must, and the next event is checked to be that one.
#[tokio::test]
async fn a_deadline_is_announced_only_when_it_is_the_shard_s_earliest() {
    let server = RedisServer::start();
    let a = store(&server, "dq", 1).await;
    let b = store(&server, "dq", 1).await;
    let mut rx = b.subscribe();
    let minute = 60_000;

    // A far job alone: its window's drain time (a minute before it) is the earliest.
    let far = NOW + 10 * minute;
    a.push(job("f", "far", "", far), PushMode::Reject, NOW)
        .await
        .unwrap();
    assert_eq!(next_event(&mut rx).await, StoreEvent::Due(far - minute));

    // Timeline empty: a reservation due after that drain time announces nothing...
    reserve_new(&a, &mut rx, "r1", 9 * minute + 30_000).await;
    // ...and a near job before it does.
    a.push(job("d", "d1", "", NOW + minute), PushMode::Reject, NOW)
        .await
        .unwrap();
    assert_eq!(next_event(&mut rx).await, StoreEvent::Due(NOW + minute));

    // After the head: nothing. Before it: announced.
    a.push(job("d", "d2", "", NOW + 90_000), PushMode::Reject, NOW)
        .await
        .unwrap();
    reserve_new(&a, &mut rx, "r2", 30_000).await;
    assert_eq!(next_event(&mut rx).await, StoreEvent::Due(NOW + 30_000));

    reserve_new(&a, &mut rx, "r3", 45_000).await;
    a.push(job("d", "d3", "", NOW + 10_000), PushMode::Reject, NOW)
        .await
        .unwrap();
    assert_eq!(next_event(&mut rx).await, StoreEvent::Due(NOW + 10_000));
}
