//! Redis in trouble: unreachable at start, down and back, its function library flushed or left
//! by another build, and full (`maxmemory`): what adds memory is refused, what drains it still
//! works, and every shard's due jobs are still promoted.

use super::*;

#[tokio::test]
async fn connect_fails_fast_when_redis_is_unreachable() {
    let port = support::free_port();
    let started = Instant::now();
    let r = RedisStore::connect(RedisOptions {
        target: RedisTarget::Server(format!("redis://127.0.0.1:{port}/")),
        prefix: "dq".into(),
        shards: 1,
    })
    .await;
    assert!(matches!(r, Err(StoreError::Unavailable(_))));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_fails_fast_while_redis_is_down_and_recovers_after_restart() {
    let mut server = RedisServer::start();
    let s = store(&server, "dq", 2).await;
    let mut rx = s.subscribe();
    s.push(job("t", "before", "", NOW), PushMode::Reject, NOW)
        .await
        .unwrap();

    server.stop();
    for _ in 0..3 {
        let started = Instant::now();
        let results = [
            s.ping().await.err(),
            s.push(job("t", "during", "", NOW), PushMode::Reject, NOW)
                .await
                .err(),
            s.reserve(&[topic("t")], 1, NOW).await.err(),
            s.get(&id("before")).await.err(),
            s.stats().await.err(),
            s.tick(NOW, 10).await.err(),
        ];
        for r in results {
            assert!(matches!(r, Some(StoreError::Unavailable(_))), "{r:?}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "six calls took {:?}",
            started.elapsed()
        );
    }

    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.ping().await.is_err() {
        assert!(Instant::now() < deadline, "store did not recover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A fresh Redis (no persistence here): the function library is loaded again when a call
    // finds it missing.
    s.push(job("t", "after", "", NOW), PushMode::Reject, NOW)
        .await
        .unwrap();
    assert_eq!(
        ids(&s.reserve(&[topic("t")], 5, NOW).await.unwrap()),
        ["after"]
    );
    expect_event(&mut rx, StoreEvent::Resync).await;
    // And events flow again.
    s.push(job("u", "after2", "", NOW), PushMode::Reject, NOW)
        .await
        .unwrap();
    expect_event(&mut rx, StoreEvent::Ready(topic("u"))).await;
}

#[tokio::test]
async fn the_function_library_is_reloaded_after_a_function_flush() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 2).await;
    let mut c = raw(&server).await;
    command(&mut c, &["FUNCTION", "FLUSH"]).await;
    let jobs: Vec<JobSpec> = (0..10)
        .map(|i| job("t", &format!("j{i}"), "", NOW))
        .collect();
    for out in s.push_batch(jobs, PushMode::Reject, NOW).await.unwrap() {
        assert_eq!(out, Ok(PushOutcome::Created));
    }
    assert_eq!(s.reserve(&[topic("t")], 20, NOW).await.unwrap().len(), 10);
}

/// The names of the function libraries in the Redis behind `c`, sorted.
async fn libraries(c: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let listed: Vec<HashMap<String, redis::Value>> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(c)
        .await
        .unwrap();
    let mut names: Vec<String> = listed
        .iter()
        .map(|l| redis::from_redis_value_ref(&l["library_name"]).unwrap())
        .collect();
    names.sort();
    names
}

/// With several shards, a full Redis and a far window due on one shard: that shard's due jobs
/// are promoted on time all the same (its pass is run again without the drain).
#[tokio::test]
async fn a_full_redis_with_a_window_to_drain_still_promotes_every_shard_s_due_jobs() {
    const SHARDS: u16 = 4;
    const FAR: u64 = NOW + 600_000;
    let server = RedisServer::start();
    let s = store(&server, "dq", SHARDS).await;
    // Two due jobs on every shard; the far job on shard 0, beside two of them.
    let mut due: Vec<String> = Vec::new();
    for shard in 0..SHARDS {
        let mine = (0..)
            .map(|i| format!("d{shard}-{i}"))
            .filter(|i| shard_of(i, SHARDS) == shard)
            .take(2);
        due.extend(mine);
    }
    let far = (0..)
        .map(|i| format!("far{i}"))
        .find(|i| shard_of(i, SHARDS) == 0)
        .unwrap();
    s.push(job("t", &far, "", FAR), PushMode::Reject, NOW)
        .await
        .unwrap();
    for i in &due {
        s.push(
            job("t", i, "", FAR - 60_005),
            PushMode::Reject,
            FAR - 70_000,
        )
        .await
        .unwrap();
    }
    let mut c = raw(&server).await;
    fill(&mut c).await;

    let pass = s.tick(FAR - 60_000, 100).await.unwrap();
    assert_eq!(pass.promoted, due.len() as u64);
    assert_eq!(pass.next_due, Some(FAR - 59_000));
    let got = s.reserve(&[topic("t")], 100, FAR - 60_000).await.unwrap();
    let mut got = ids(&got);
    got.sort();
    due.sort();
    assert_eq!(got, due);
    assert_eq!(s.get(&id(&far)).await.unwrap().state, JobState::Delayed);

    command(&mut c, &["CONFIG", "SET", "maxmemory", "0"]).await;
    s.tick(FAR - 59_000, 100).await.unwrap();
    s.tick(FAR, 100).await.unwrap();
    assert_eq!(ids(&s.reserve(&[topic("t")], 1, FAR).await.unwrap()), [far]);
}

#[tokio::test]
async fn a_start_deletes_the_libraries_of_other_builds_and_they_come_back_when_used() {
    let server = RedisServer::start();
    let mut c = raw(&server).await;
    // Left by an earlier build, and a library of the user's that only looks similar.
    let old = "delayq_0123456789abcdef";
    for (lib, f) in [
        (old, "delayq_0123456789abcdef_push"),
        ("delayq_tools", "mine"),
    ] {
        let code =
            format!("#!lua name={lib}\nredis.register_function('{f}', function() return 1 end)");
        command(&mut c, &["FUNCTION", "LOAD", &code]).await;
    }
    let a = store(&server, "dq", 1).await;
    let after = libraries(&mut c).await;
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(after.contains(&"delayq_tools".to_string()), "{after:?}");
    assert!(!after.contains(&old.to_string()), "{after:?}");
    let ours = after.iter().find(|n| *n != "delayq_tools").unwrap().clone();

    // An instance of a newer build starting deletes this build's library while `a` runs:
    // `a` loads it again on its next call and goes on.
    command(&mut c, &["FUNCTION", "DELETE", &ours]).await;
    assert_eq!(libraries(&mut c).await, ["delayq_tools"]);
    let out = a.push(job("t", "j", "", NOW), PushMode::Reject, NOW).await;
    assert_eq!(out, Ok(PushOutcome::Created));
    assert_eq!(ids(&a.reserve(&[topic("t")], 1, NOW).await.unwrap()), ["j"]);
    let mut both = vec!["delayq_tools".to_string(), ours];
    both.sort();
    assert_eq!(libraries(&mut c).await, both);
}

/// Makes the Redis behind `c` full: a `maxmemory` below what it already holds, with
/// `noeviction`, so every write that may add memory is refused.
async fn fill(c: &mut redis::aio::MultiplexedConnection) {
    command(c, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]).await;
    command(c, &["CONFIG", "SET", "maxmemory", "100000"]).await;
}

/// Asserts a refusal by a full Redis.
fn oom(e: StoreError) {
    match e {
        StoreError::Unavailable(m) if m.contains("OOM") => {}
        other => panic!("expected Unavailable naming OOM, got {other:?}"),
    }
}

/// A Redis at its `maxmemory` (noeviction) refuses what adds memory (a push, a reschedule: with
/// `Unavailable` naming the cause; a timer pass's drain of a far window: retried a second
/// later), and nothing changes; what moves or removes the jobs it holds still works (timer
/// passes that promote,
/// reserve, touch, release, bury, kick, finish, delete), which is how a full Redis keeps
/// delivering and gets drained. The function library, if missing meanwhile, cannot be loaded
/// while memory is full (`FUNCTION LOAD` is refused like any write). Once memory is free
/// everything works again, with no restart.
#[tokio::test]
async fn a_full_redis_refuses_what_adds_memory_and_serves_the_jobs_it_holds() {
    // Ten minutes out: in a far window, drained into the timeline a minute before it is due.
    const FAR: u64 = NOW + 600_000;
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    let jobs = [
        ("a", NOW),
        ("b", NOW),
        ("c", NOW),
        ("later", NOW + 1_000),
        ("far", FAR),
    ];
    for (i, run_at) in jobs {
        s.push(job("t", i, "", run_at), PushMode::Reject, NOW)
            .await
            .unwrap();
    }
    // Due 10 ms before the far window's drain, pushed late enough to be in the timeline.
    let mid = job("t", "mid", "", FAR - 60_010);
    s.push(mid, PushMode::Reject, FAR - 70_000).await.unwrap();
    let mut c = raw(&server).await;
    fill(&mut c).await;

    oom(s
        .push(job("t", "during", "", NOW), PushMode::Reject, NOW)
        .await
        .unwrap_err());
    let sooner = Reschedule {
        run_at: NOW + 500,
        body: None,
        priority: None,
    };
    oom(s.reschedule(&id("later"), sooner, NOW).await.unwrap_err());
    // Jobs keep falling due; a far window's drain waits. The pass that finds its drain refused
    // still promotes what the timeline has due, at once, and has the timer come back for the
    // window a second later (not at once: that would spin on it).
    assert_eq!(s.tick(NOW + 2_000, 100).await.unwrap().promoted, 1);
    let pass = s.tick(FAR - 60_000, 100).await.unwrap();
    assert_eq!((pass.promoted, pass.next_due), (1, Some(FAR - 59_000)));
    assert_eq!(s.get(&id("mid")).await.unwrap().state, JobState::Ready);
    assert_eq!(s.get(&id("far")).await.unwrap().state, JobState::Delayed);
    // Meanwhile passes leave the window alone; the retry is refused again, and waits again.
    let pass = s.tick(FAR - 59_500, 100).await.unwrap();
    assert_eq!(pass.next_due, Some(FAR - 59_000));
    let pass = s.tick(FAR - 59_000, 100).await.unwrap();
    assert_eq!(pass.next_due, Some(FAR - 58_000));
    assert_eq!(s.get(&id("far")).await.unwrap().state, JobState::Delayed);

    let got = s.reserve(&[topic("t")], 1, NOW).await.unwrap();
    assert_eq!(ids(&got), ["a"]);
    assert_eq!(
        s.touch(&id("a"), NOW).await.unwrap().state,
        JobState::Reserved
    );
    assert_eq!(
        s.release(&id("a"), None, NOW).await.unwrap().state,
        JobState::Ready
    );
    assert_eq!(ids(&s.reserve(&[topic("t")], 1, NOW).await.unwrap()), ["a"]);
    assert_eq!(s.finish(&id("a")).await.unwrap(), JobState::Reserved);
    assert_eq!(
        s.bury(&id("c"), None, NOW).await.unwrap().state,
        JobState::Dead
    );
    assert_eq!(s.kick(&id("c"), NOW).await.unwrap().state, JobState::Ready);
    assert_eq!(s.delete(&id("b")).await.unwrap(), JobState::Ready);
    command(&mut c, &["FUNCTION", "FLUSH"]).await;
    oom(s.reserve(&[topic("t")], 1, NOW).await.unwrap_err());

    command(&mut c, &["CONFIG", "SET", "maxmemory", "0"]).await;
    s.push(job("t", "after", "", NOW), PushMode::Reject, NOW)
        .await
        .unwrap();
    s.tick(FAR, 100).await.unwrap();
    let got = s.reserve(&[topic("t")], 10, FAR).await.unwrap();
    assert_eq!(
        ids(&got),
        ["c", "after", "later", "mid", "far"],
        "nothing pushed while full"
    );
}

/// On several shards, a timer pass in which one shard's call fails (here: it must drain a far
/// window while Redis is full) still does the other shards' work and wakes this instance's
/// waiters for what they promoted (and, for a refused drain, retries that shard without it).
#[tokio::test]
async fn a_drain_refused_on_one_shard_still_announces_the_others_promotions() {
    const FAR: u64 = NOW + 600_000;
    let server = RedisServer::start();
    let s = store(&server, "dq", 2).await;
    let on_shard = |prefix: &str, shard: u16| {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .find(|i| shard_of(i, 2) == shard)
            .unwrap()
    };
    let (far, near) = (on_shard("far", 0), on_shard("near", 1));
    s.push(job("far", &far, "", FAR), PushMode::Reject, NOW)
        .await
        .unwrap();
    // Due 10 ms before the far window's drain, pushed late enough to be in the timeline.
    s.push(
        job("near", &near, "", FAR - 60_010),
        PushMode::Reject,
        FAR - 70_000,
    )
    .await
    .unwrap();
    let mut events = s.subscribe();
    fill(&mut raw(&server).await).await;

    let pass = s.tick(FAR - 60_000, 100).await.unwrap();
    assert_eq!(pass.promoted, 1);
    expect_event(&mut events, StoreEvent::Ready(topic("near"))).await;
    assert_eq!(s.get(&id(&near)).await.unwrap().state, JobState::Ready);
    assert_eq!(s.get(&id(&far)).await.unwrap().state, JobState::Delayed);
}
