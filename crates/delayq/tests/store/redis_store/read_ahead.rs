//! The read-ahead of busy reserves on one shard (store/redis/read_ahead.rs): jobs reserved ahead
//! for consumers that then do not ask go back as they were, ready with their attempts, on each
//! of the three ways back (the sweeper, a flow control change, the store's stop), and no job is
//! handed out twice.

use super::*;
use delayq::store::SettingsChange;

/// 16 consumers reserve one job at a time, `each` jobs each, at once (so reserves queue behind
/// one another and read ahead); returns the ids they got, checked for duplicates.
async fn busy_consumers(s: &RedisStore, each: usize) -> Vec<String> {
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..each {
                got.extend(ids(&s.reserve(&[topic("t")], 1, NOW).await.unwrap()));
            }
            got
        }));
    }
    joined_distinct(tasks).await
}

fn paused(on: bool) -> SettingsChange {
    SettingsChange {
        paused: Some(on),
        ..Default::default()
    }
}

async fn reserved(s: &RedisStore) -> u64 {
    let stats = s.stats().await.unwrap();
    stats.topics.get(&topic("t")).map_or(0, |c| c.reserved)
}

/// Every job a consumer got is reserved with one attempt; every other one is ready with none,
/// as before the read-ahead took it.
async fn only_handed_out_jobs_are_reserved(s: &RedisStore, n: usize, handed: &[String]) {
    let handed: HashSet<&String> = handed.iter().collect();
    for i in 0..n {
        let j = s.get(&id(&format!("j{i}"))).await.unwrap();
        if handed.contains(&j.spec.id.to_string()) {
            assert_eq!(
                (j.state, j.attempts),
                (JobState::Reserved, 1),
                "{}",
                j.spec.id
            );
        } else {
            assert_eq!((j.state, j.attempts), (JobState::Ready, 0), "{}", j.spec.id);
        }
    }
}

async fn pushed(server: &RedisServer, n: usize) -> RedisStore {
    let s = store(server, "dq", 1).await;
    let jobs = (0..n)
        .map(|i| job("t", &format!("j{i}"), "", NOW))
        .collect();
    for out in s.push_batch(jobs, PushMode::Reject, NOW).await.unwrap() {
        assert_eq!(out, Ok(PushOutcome::Created));
    }
    s
}

/// Runs bursts of busy consumers until one ends with jobs held (more reserved than handed
/// out), so the case under test is there; returns what the consumers got.
async fn burst_leaving_jobs_held(s: &RedisStore) -> Vec<String> {
    let mut handed = Vec::new();
    for _ in 0..20 {
        handed.extend(busy_consumers(s, 4).await);
        if reserved(s).await > handed.len() as u64 {
            return handed;
        }
    }
    panic!("16 concurrent consumers never left a job reserved ahead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_reserved_ahead_and_not_asked_for_go_back_ready_with_their_attempts() {
    let server = RedisServer::start();
    let n = 3000;
    let s = pushed(&server, n).await;
    let handed = burst_leaving_jobs_held(&s).await;
    // The sweeper gives them back a moment later (50 ms held, generous bound here).
    let deadline = Instant::now() + Duration::from_secs(5);
    while reserved(&s).await != handed.len() as u64 {
        assert!(Instant::now() < deadline, "held jobs were never given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    only_handed_out_jobs_are_reserved(&s, n, &handed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_control_change_and_a_stop_give_back_held_jobs_at_once() {
    let server = RedisServer::start();
    let n = 3000;
    let s = pushed(&server, n).await;

    let handed = burst_leaving_jobs_held(&s).await;
    s.set_settings(&topic("t"), paused(true), NOW)
        .await
        .unwrap();
    assert_eq!(reserved(&s).await, handed.len() as u64);
    only_handed_out_jobs_are_reserved(&s, n, &handed).await;
    // Paused: nothing more is handed out, held or not.
    assert!(busy_consumers(&s, 2).await.is_empty());

    s.set_settings(&topic("t"), paused(false), NOW)
        .await
        .unwrap();
    let mut handed = handed;
    handed.extend(burst_leaving_jobs_held(&s).await);
    s.stop().await;
    assert_eq!(reserved(&s).await, handed.len() as u64);
    only_handed_out_jobs_are_reserved(&s, n, &handed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_job_named_by_a_call_is_found_ready() {
    let server = RedisServer::start();
    let n = 6000;
    let s = pushed(&server, n).await;
    let mut handed: HashSet<String> = HashSet::new();
    for _ in 0..20 {
        handed.extend(burst_leaving_jobs_held(&s).await);
        // Jobs are reserved in push order, so the held ones are among the first `reserved`
        // jobs (and all those the consumers did not get).
        let total = reserved(&s).await as usize + handed.len();
        for i in 0..total.min(n) {
            let name = format!("j{i}");
            if handed.contains(&name) {
                continue;
            }
            if s.get(&id(&name)).await.unwrap().state != JobState::Reserved {
                continue;
            }
            // Held (reserved in Redis, no consumer has it): naming it gives it back first,
            // so a bury finds it ready and buries it with its attempts as they were.
            let buried = s.bury(&id(&name), None, NOW).await.unwrap();
            assert_eq!((buried.state, buried.attempts), (JobState::Dead, 0));
            return;
        }
    }
    panic!("never caught a held job before the sweeper gave it back");
}
