//! Finishes answered before Redis has run them (store/redis/finishing.rs): the instance that
//! answered behaves as if the finish had run, a job pushed again with the same id is never
//! taken by the removal, `stop` runs every finish it answered, and a finish of a job this
//! instance did not hand out answers the state Redis found.

use super::*;
use delayq::store::TopicCounts;

/// `n` ready jobs `j0..` of topic `t`, pushed through `s`.
async fn push_ready(s: &RedisStore, n: usize) {
    let jobs = (0..n)
        .map(|i| job("t", &format!("j{i}"), "v1", NOW))
        .collect();
    for out in s.push_batch(jobs, PushMode::Reject, NOW).await.unwrap() {
        assert_eq!(out, Ok(PushOutcome::Created));
    }
}

/// Topic `t`'s counts as `s` sees them.
async fn counts(s: &RedisStore) -> TopicCounts {
    let stats = s.stats().await.unwrap();
    stats.topics.get(&topic("t")).copied().unwrap_or_default()
}

/// Reserves one job of `t` through `s`.
async fn reserve_one(s: &RedisStore) -> JobId {
    let got = s.reserve(&[topic("t")], 1, NOW).await.unwrap();
    assert_eq!(got.len(), 1, "a job to reserve");
    got[0].spec.id.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_is_gone_for_every_next_call_of_the_instance() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    let n = 300;
    push_ready(&s, n).await;

    for i in 0..n {
        let id = reserve_one(&s).await;
        assert_eq!(s.finish(&id).await, Ok(JobState::Reserved));
        // Each kind of next call, in turn, right after the answer.
        match i % 4 {
            0 => assert_eq!(s.get(&id).await.map(drop), Err(StoreError::NotFound)),
            1 => assert_eq!(s.delete(&id).await, Err(StoreError::NotFound)),
            2 => assert_eq!(s.touch(&id, NOW).await.map(drop), Err(StoreError::NotFound)),
            _ => assert_eq!(counts(&s).await.reserved, 0, "after finishing {id}"),
        }
    }
    assert_eq!(counts(&s).await.total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_pushed_again_right_after_its_finish_is_kept() {
    let server = RedisServer::start();
    let a = store(&server, "dq", 1).await;
    let b = store(&server, "dq", 1).await;
    let n = 200;
    push_ready(&a, n).await;

    let mut again = Vec::new();
    for i in 0..n {
        let id = reserve_one(&a).await;
        assert_eq!(a.finish(&id).await, Ok(JobState::Reserved));
        // Half through the same instance, half through another one, whose push may reach
        // Redis before the removal does.
        let by = if i % 2 == 0 { &a } else { &b };
        let pushed = by
            .push_batch(
                vec![job("t", id.as_str(), "v2", NOW + 60_000)],
                PushMode::Replace,
                NOW,
            )
            .await
            .unwrap();
        assert!(pushed[0].is_ok(), "{id}: {pushed:?}");
        again.push(id);
    }
    a.stop().await;
    for id in &again {
        let j = b.get(id).await.unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(
            (j.state, j.spec.body.as_str()),
            (JobState::Delayed, "v2"),
            "{id}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_runs_every_finish_it_answered() {
    let server = RedisServer::start();
    let a = store(&server, "dq", 1).await;
    let other = store(&server, "dq", 1).await;
    let n = 500;
    push_ready(&a, n).await;

    let mut tasks = Vec::new();
    for _ in 0..10 {
        let a = a.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..n / 10 {
                let id = reserve_one(&a).await;
                assert_eq!(a.finish(&id).await, Ok(JobState::Reserved));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    a.stop().await;
    assert_eq!(counts(&other).await.total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_of_a_job_not_handed_out_here_answers_the_state_it_found() {
    let server = RedisServer::start();
    let (a, b) = two_instances(&server, 2).await;

    // Reserved through the other instance: this one waits for Redis, which removes it.
    let theirs = reserve_one(&b).await;
    assert_eq!(a.finish(&theirs).await, Ok(JobState::Reserved));
    assert_eq!(b.get(&theirs).await.map(drop), Err(StoreError::NotFound));
    assert_eq!(a.finish(&id("later")).await, Ok(JobState::Delayed));
    let ready = if theirs.as_str() == "j0" { "j1" } else { "j0" };
    assert_eq!(a.finish(&id(ready)).await, Ok(JobState::Ready));
    // Handed out here, then released: the release named it, so its finish waits for Redis and
    // finds it ready again.
    push_ready_one(&a, "k").await;
    let k = reserve_one(&a).await;
    a.release(&k, Some(0), NOW).await.unwrap();
    assert_eq!(a.finish(&k).await, Ok(JobState::Ready));
}

/// `finish_batch` as `finish` per id: the jobs handed out here are answered at once (while
/// Redis holds every write back) and gone for this instance's next calls, and for any after
/// `stop`; the others get what Redis found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_finish_answers_the_jobs_handed_out_here_at_once_and_the_rest_from_redis() {
    let server = RedisServer::start();
    let (a, b) = two_instances(&server, 4).await;
    let mine = [reserve_one(&a).await, reserve_one(&a).await];
    let theirs = reserve_one(&b).await;

    command(
        &mut raw(&server).await,
        &["CLIENT", "PAUSE", "2000", "WRITE"],
    )
    .await;
    let paused = std::time::Instant::now();
    let got = a.finish_batch(&mine).await.unwrap();
    assert!(
        paused.elapsed() < std::time::Duration::from_millis(1_000),
        "answered without waiting for Redis: {:?}",
        paused.elapsed()
    );
    assert_eq!(got, [Ok(JobState::Reserved), Ok(JobState::Reserved)]);

    let ids = [id("nope"), theirs.clone(), id("later"), mine[0].clone()];
    let got = a.finish_batch(&ids).await.unwrap();
    assert_eq!(
        got,
        [
            Err(StoreError::NotFound),
            Ok(JobState::Reserved),
            Ok(JobState::Delayed),
            // Finished a moment ago: a finish like any other, which finds nothing.
            Err(StoreError::NotFound),
        ]
    );
    for gone in mine.iter().chain([&theirs, &id("later")]) {
        assert_eq!(
            a.get(gone).await.map(drop),
            Err(StoreError::NotFound),
            "{gone:?}"
        );
    }
    a.stop().await;
    let left = counts(&b).await;
    assert_eq!(
        (left.ready, left.reserved, left.delayed),
        (1, 0, 0),
        "{left:?}"
    );
}

/// Two instances on `server`, `n` ready jobs `j0..` of `t` and the delayed job `later`.
async fn two_instances(server: &RedisServer, n: usize) -> (RedisStore, RedisStore) {
    let a = store(server, "dq", 1).await;
    let b = store(server, "dq", 1).await;
    push_ready(&a, n).await;
    a.push_batch(
        vec![job("t", "later", "", NOW + 60_000)],
        PushMode::Reject,
        NOW,
    )
    .await
    .unwrap();
    (a, b)
}

async fn push_ready_one(s: &RedisStore, name: &str) {
    let out = s
        .push_batch(vec![job("t", name, "", NOW)], PushMode::Reject, NOW)
        .await
        .unwrap();
    assert_eq!(out, vec![Ok(PushOutcome::Created)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_unreachable_finishes_fail_as_every_call_does() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let s = store(&server, "dq", 1).await;
    let n = 20;
    push_ready(&s, n).await;
    let mut handed = Vec::new();
    for _ in 0..n {
        handed.push(reserve_one(&s).await);
    }

    server.stop();
    // The finishes answered before a removal found Redis gone are undone (their jobs come back
    // after their TTR); from then on each one fails.
    let mut left = handed.into_iter();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let id = left
            .next()
            .expect("a finish that fails while Redis is down");
        if matches!(s.finish(&id).await, Err(StoreError::Unavailable(_))) {
            break;
        }
        assert!(Instant::now() < deadline, "finishes still answered early");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let later: Vec<JobId> = left.collect();
    let (failing, after) = later.split_at(later.len() / 2);
    for id in failing {
        assert!(
            matches!(s.finish(id).await, Err(StoreError::Unavailable(_))),
            "{id}"
        );
    }

    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.ping().await.is_err() {
        assert!(Instant::now() < deadline, "store did not recover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The first finish after the outage waits for Redis; once one reached it, they are
    // answered at once again, and every one is done.
    for id in after {
        assert_eq!(s.finish(id).await, Ok(JobState::Reserved), "{id}");
    }
    for id in after.iter().chain(failing) {
        let expect = if after.contains(id) {
            Err(StoreError::NotFound)
        } else {
            Ok(JobState::Reserved)
        };
        assert_eq!(s.get(id).await.map(|j| j.state), expect, "{id}");
    }
}
