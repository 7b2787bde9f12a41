//! Jobs placed ahead (lib.lua): a tick's jobs that schedules fire before the tick wait in one
//! group per (queue, priority, tick), promoted in one step by the timer or by a reserve that
//! meets the group once due; a group not due holds back its priority only, on one shard and on
//! several; a job fired into a group another clock already promoted is not counted twice.

use super::*;
use crate::conformance::schedules::every_second_from;
use delayq::store::FireOutcome;

const SEC: u64 = 1_000;
/// The first tick of the schedules below.
const TICK: u64 = NOW + SEC;

/// Puts `n` schedules every second from NOW (`prefix`0, `prefix`1, ...), their jobs on topic
/// `t` with priority `prio`, and fires their first tick (TICK) at `now`: ahead when `now` is
/// before it. The ticks' job ids.
async fn fire(s: &RedisStore, prefix: &str, n: usize, prio: u32, now: u64) -> Vec<String> {
    let mut fires = Vec::new();
    let mut ids = Vec::new();
    for i in 0..n {
        let name = format!("{prefix}{i}");
        let mut sc = every_second_from(&name, NOW);
        sc.spec.job.priority = prio;
        let sc = s.put_schedule(&sc, None).await.unwrap();
        let recurrence = sc.spec.rule.recurrence().unwrap();
        fires.push(sc.plan_ahead(&recurrence, now, false).fire.unwrap());
        ids.push(format!("{name}@{TICK}"));
    }
    for f in s.fire_schedules(&fires, now).await.unwrap() {
        assert_eq!(
            f,
            FireOutcome::Fired {
                pushed: 1,
                existed: 0
            }
        );
    }
    ids
}

async fn counts(s: &RedisStore) -> (u64, u64, u64) {
    let stats = s.stats().await.unwrap();
    let c = stats.topics.get(&topic("t")).copied().unwrap_or_default();
    (c.delayed, c.ready, c.reserved)
}

async fn zcard(server: &RedisServer, key: &str) -> u64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query_async(&mut raw(server).await)
        .await
        .unwrap()
}

/// The state code stored in job `id`'s record (shard 0 of prefix dq).
async fn stored_state(server: &RedisServer, id: &str) -> char {
    let raw_record: Vec<u8> = redis::cmd("HGET")
        .arg("{dq:0}:jobs")
        .arg(id)
        .query_async(&mut raw(server).await)
        .await
        .unwrap();
    char::from(raw_record[2])
}

#[tokio::test]
async fn a_tick_s_jobs_wait_in_one_group_promoted_in_one_step() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    let ids = fire(&s, "g", 300, 1024, NOW + 100).await;
    // One timeline entry for the 300: the group.
    assert_eq!(zcard(&server, "{dq:0}:timeline").await, 1);
    assert_eq!(counts(&s).await, (300, 0, 0));
    assert_eq!(s.stats().await.unwrap().next_due, Some(TICK));
    assert_eq!(s.get(&id(&ids[7])).await.unwrap().state, JobState::Delayed);

    // A pass whose limit is far below 300 promotes them all: one entry.
    let out = s.tick(TICK, 10).await.unwrap();
    assert_eq!(out.promoted, 300);
    assert_eq!(out.next_due, None);
    assert_eq!(zcard(&server, "{dq:0}:timeline").await, 0);
    assert_eq!(counts(&s).await, (0, 300, 0));
    // Their records were not rewritten: still stored as placed ahead, read as ready.
    assert_eq!(stored_state(&server, &ids[7]).await, 'p');
    assert_eq!(s.get(&id(&ids[7])).await.unwrap().state, JobState::Ready);

    let got = s.reserve(&[topic("t")], 1000, TICK).await.unwrap();
    let mut got: Vec<String> = got.iter().map(|j| j.spec.id.as_str().to_string()).collect();
    got.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(counts(&s).await, (0, 0, 300));
    assert_eq!(stored_state(&server, &ids[7]).await, 'x');
}

#[tokio::test]
async fn a_reserve_promotes_a_due_group_the_timer_has_not_reached() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    fire(&s, "g", 3, 1024, NOW + 100).await;
    assert!(
        s.reserve(&[topic("t")], 10, TICK - 1)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.reserve(&[topic("t")], 10, TICK).await.unwrap().len(), 3);
    assert_eq!(counts(&s).await, (0, 0, 3));
    // The group is gone: the timer has nothing left to promote, only the reservations.
    assert_eq!(s.tick(TICK, 100).await.unwrap().promoted, 0);
    assert_eq!(zcard(&server, "{dq:0}:timeline").await, 3);
    assert_eq!(counts(&s).await, (0, 0, 3));
}

#[tokio::test]
async fn a_group_not_due_holds_back_its_priority_only_on_one_shard_and_on_several() {
    for shards in [1, 8] {
        let server = RedisServer::start();
        let s = store(&server, "dq", shards).await;
        // Due at TICK with priority 1, ahead of a job ready now with priority 5.
        fire(&s, "g", 20, 1, NOW + 100).await;
        let mut now_job = job("t", "now", "", NOW);
        now_job.priority = 5;
        s.push(now_job, PushMode::Reject, NOW).await.unwrap();
        let got = s.reserve(&[topic("t")], 10, NOW + 200).await.unwrap();
        assert_eq!(
            got.iter().map(|j| j.spec.id.as_str()).collect::<Vec<_>>(),
            ["now"],
            "{shards} shards"
        );
        assert_eq!(counts(&s).await, (20, 0, 1), "{shards} shards");
        s.tick(TICK, 100).await.unwrap();
        assert_eq!(
            s.reserve(&[topic("t")], 100, TICK).await.unwrap().len(),
            20,
            "{shards} shards"
        );
    }
}

#[tokio::test]
async fn a_job_fired_into_a_group_a_clock_ahead_promoted_is_counted_once() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    fire(&s, "a", 1, 1024, NOW + 100).await;
    s.tick(TICK, 100).await.unwrap();
    assert_eq!(counts(&s).await, (0, 1, 0));
    // Another instance, its clock 600 ms behind, fires another schedule's job of that tick.
    let late = fire(&s, "b", 1, 1024, TICK - 600).await;
    assert_eq!(counts(&s).await, (1, 1, 0));
    assert_eq!(stored_state(&server, &late[0]).await, 'd');
    assert_eq!(s.get(&id(&late[0])).await.unwrap().state, JobState::Delayed);
    // By that clock the tick comes later: promoted then, once.
    assert_eq!(s.tick(TICK, 100).await.unwrap().promoted, 1);
    assert_eq!(counts(&s).await, (0, 2, 0));
    assert_eq!(s.reserve(&[topic("t")], 10, TICK).await.unwrap().len(), 2);
    assert_eq!(counts(&s).await, (0, 0, 2));
}

#[tokio::test]
async fn a_group_whose_jobs_are_all_deleted_leaves_the_timeline() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    let ids = fire(&s, "g", 2, 1024, NOW + 100).await;
    for i in &ids {
        assert_eq!(s.delete(&id(i)).await, Ok(JobState::Delayed));
    }
    assert_eq!(counts(&s).await, (0, 0, 0));
    assert_eq!(zcard(&server, "{dq:0}:timeline").await, 0);
    assert_eq!(zcard(&server, "{dq:0}:ready").await, 0);
    assert_eq!(s.stats().await.unwrap().next_due, None);
    assert_eq!(s.tick(TICK, 100).await.unwrap().promoted, 0);
}
