//! Several delayq instances and concurrent callers on one Redis: events reach every instance,
//! no job handed out twice, reserves joined into shared script calls (coalescing) each get their
//! own jobs, two timers draining the same far windows, and an idle event subscription that stays
//! up.

use super::*;

#[tokio::test]
async fn events_reach_every_instance_sharing_the_redis() {
    let server = RedisServer::start();
    let a = store(&server, "dq", 4).await;
    let b = store(&server, "dq", 4).await;
    let other = store(&server, "other", 4).await;
    let mut rx_b = b.subscribe();
    let mut rx_a = a.subscribe();
    let mut rx_other = other.subscribe();

    a.push(job("orders", "r1", "", NOW), PushMode::Reject, NOW)
        .await
        .unwrap();
    expect_event(&mut rx_b, StoreEvent::Ready(topic("orders"))).await;
    expect_event(&mut rx_a, StoreEvent::Ready(topic("orders"))).await;

    a.push(job("orders", "d1", "", NOW + 5000), PushMode::Reject, NOW)
        .await
        .unwrap();
    expect_event(&mut rx_b, StoreEvent::Due(NOW + 5000)).await;

    // The timer on b promotes it: a hears the Ready, and b has it as soon as its tick returns,
    // once (the pub/sub echo of its own tick is dropped).
    let mut rx_b = b.subscribe();
    b.tick(NOW + 5000, 100).await.unwrap();
    assert_eq!(
        rx_b.try_recv().ok(),
        Some(StoreEvent::Ready(topic("orders"))),
        "b's own tick must announce its ready topic before returning"
    );
    expect_event(&mut rx_a, StoreEvent::Ready(topic("orders"))).await;
    a.ping().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), rx_b.recv())
            .await
            .is_err(),
        "b heard its own tick's event twice"
    );

    // Nothing leaks to another prefix.
    other.ping().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), rx_other.recv())
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_instances_never_hand_out_a_job_twice() {
    let server = RedisServer::start();
    let a = store(&server, "dq", 4).await;
    let b = store(&server, "dq", 4).await;
    let jobs: Vec<JobSpec> = (0..600)
        .map(|i| job("t", &format!("c{i}"), "", NOW))
        .collect();
    for out in a.push_batch(jobs, PushMode::Reject, NOW).await.unwrap() {
        assert_eq!(out, Ok(PushOutcome::Created));
    }
    let mut tasks = Vec::new();
    for k in 0..6 {
        let s = if k % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let r = s.reserve(&[topic("t")], 1 + k, NOW).await.unwrap();
                if r.is_empty() {
                    return got;
                }
                got.extend(ids(&r));
            }
        }));
    }
    each_once(tasks, 600).await;
}

/// On one shard, concurrent reserves are joined into shared script calls, one per distinct
/// topic list (reserve.rs `run_batch`): each caller still gets at most its `max`, only jobs of its
/// topics in its order of preference, and no job goes to two callers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_reserves_on_one_shard_each_get_their_own_jobs() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    let mut jobs: Vec<JobSpec> = Vec::new();
    for i in 0..400 {
        jobs.push(job("a", &format!("a{i}"), "", NOW));
        jobs.push(job("b", &format!("b{i}"), "", NOW));
    }
    for out in s.push_batch(jobs, PushMode::Reject, NOW).await.unwrap() {
        assert_eq!(out, Ok(PushOutcome::Created));
    }
    let lists: [&[&str]; 4] = [&["a"], &["b"], &["a", "b"], &["b", "a"]];
    let mut tasks = Vec::new();
    for k in 0..12usize {
        let s = s.clone();
        let wanted: Vec<Topic> = lists[k % 4].iter().map(|t| topic(t)).collect();
        let max = 1 + k % 3;
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let r = s.reserve(&wanted, max, NOW).await.unwrap();
                if r.is_empty() {
                    return got;
                }
                assert!(r.len() <= max, "asked for {max}, got {}", r.len());
                let rank: Vec<usize> = r
                    .iter()
                    .map(|j| {
                        wanted
                            .iter()
                            .position(|t| *t == j.spec.topic)
                            .expect("a topic not asked for")
                    })
                    .collect();
                assert!(rank.is_sorted(), "topics out of preference order: {rank:?}");
                got.extend(ids(&r));
            }
        }));
    }
    each_once(tasks, 800).await;
}

/// Two instances run their timers and consumers at once over far-future jobs: both drain the
/// same windows (in small batches), yet each job is handed out once, never before its run_at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_windows_drained_by_two_instances_at_once_deliver_each_job_once() {
    let server = RedisServer::start();
    let a = store(&server, "dq", 4).await;
    let b = store(&server, "dq", 4).await;
    const N: u64 = 1_500;
    let jobs: Vec<JobSpec> = (0..N)
        .map(|i| {
            let mut j = job("t", &format!("f{i}"), "", NOW + 3_600_000 + i * 97);
            // Longer than the run: an instance ahead of another never expires its reservations.
            j.ttr_ms = 86_400_000;
            j
        })
        .collect();
    for out in a.push_batch(jobs, PushMode::Reject, NOW).await.unwrap() {
        assert_eq!(out, Ok(PushOutcome::Created));
    }
    let last = NOW + 3_600_000 + N * 97;
    // The latest time any instance has reached: their clocks step independently, and a job
    // promoted by one instance may be reserved by another that is behind.
    let clock = Arc::new(AtomicU64::new(NOW));
    let mut tasks = Vec::new();
    for s in [a.clone(), b.clone(), a.clone(), b.clone()] {
        let clock = clock.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let mut now = NOW;
            while now < last + 20_000 {
                clock.fetch_max(now, Ordering::SeqCst);
                loop {
                    let out = s.tick(now, 50).await.unwrap();
                    if out.next_due.is_none_or(|t| t > now) {
                        break;
                    }
                }
                loop {
                    let r = s.reserve(&[topic("t")], 20, now).await.unwrap();
                    if r.is_empty() {
                        break;
                    }
                    for j in r {
                        let latest = clock.load(Ordering::SeqCst);
                        assert!(j.spec.run_at <= latest, "{} handed out early", j.spec.id);
                        assert_eq!(s.finish(&j.spec.id).await, Ok(JobState::Reserved));
                        got.push(j.spec.id.to_string());
                    }
                }
                now += 20_000;
            }
            got
        }));
    }
    assert_eq!(joined_distinct(tasks).await.len(), N as usize);
    // An instance's stats wait only for the finishes it answered and has not yet run
    // (finishing.rs): b's own first, then both must see nothing left.
    b.stats().await.unwrap();
    assert!(a.stats().await.unwrap().topics.is_empty());
    assert!(b.stats().await.unwrap().topics.is_empty());
    // Every window list and index entry is gone.
    for k in all_keys(&server).await {
        assert!(
            !k.contains(":w:") && !k.ends_with(":windows"),
            "{k} left over"
        );
    }
}

/// The subscription's heartbeat (every 5 s) must not mistake a healthy idle connection for a
/// lost one: that would flood dispatch with `Resync`. Waits 6 s of real time, on purpose.
#[tokio::test]
async fn an_idle_event_subscription_stays_up_without_resyncs() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    let mut rx = s.subscribe();
    tokio::time::sleep(Duration::from_millis(6_000)).await;
    s.push(job("t", "j", "", NOW), PushMode::Reject, NOW)
        .await
        .unwrap();
    assert_eq!(next_event(&mut rx).await, StoreEvent::Ready(topic("t")));
}
