//! Jobs spread over shards: reserve order and topic preference across shards, replace,
//! reschedule, bury and `kick_topic` across shards, and the recorded shard count (another count
//! refused, older data not stranded).

use super::*;

#[tokio::test]
async fn reserve_follows_priority_due_time_and_push_order_across_shards() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 8).await;
    // Push order p0..p19 with equal priority and due time, spread over all shards.
    let names: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
    let shards: HashSet<u16> = names.iter().map(|n| shard_of(n, 8)).collect();
    assert!(shards.len() > 3, "ids should land on several shards");
    for n in &names {
        s.push(job("t", n, "", NOW - 5), PushMode::Reject, NOW)
            .await
            .unwrap();
    }
    // One urgent job, and one due earlier, pushed last.
    let mut urgent = job("t", "urgent", "", NOW);
    urgent.priority = 1;
    s.push(urgent, PushMode::Reject, NOW).await.unwrap();
    s.push(job("t", "earlier", "", NOW - 10), PushMode::Reject, NOW)
        .await
        .unwrap();
    let mut want = vec!["urgent".to_string(), "earlier".to_string()];
    want.extend(names.iter().cloned());

    let mut got = Vec::new();
    got.extend(ids(&s.reserve(&[topic("t")], 3, NOW).await.unwrap()));
    got.extend(ids(&s.reserve(&[topic("t")], 1, NOW).await.unwrap()));
    got.extend(ids(&s.reserve(&[topic("t")], 100, NOW).await.unwrap()));
    assert_eq!(got, want);
}

#[tokio::test]
async fn reserve_prefers_topics_in_the_order_given() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 4).await;
    for i in 0..6 {
        s.push(
            job("low", &format!("l{i}"), "", NOW - 100),
            PushMode::Reject,
            NOW,
        )
        .await
        .unwrap();
        s.push(
            job("high", &format!("h{i}"), "", NOW),
            PushMode::Reject,
            NOW,
        )
        .await
        .unwrap();
    }
    let got = s
        .reserve(&[topic("high"), topic("low")], 8, NOW)
        .await
        .unwrap();
    assert_eq!(ids(&got), ["h0", "h1", "h2", "h3", "h4", "h5", "l0", "l1"]);
    for j in &got {
        assert_eq!(j.state, JobState::Reserved);
        assert_eq!(j.attempts, 1);
        assert_eq!(j.reserved_until, Some(NOW + j.spec.ttr_ms));
    }
}

#[tokio::test]
async fn replace_drops_every_trace_of_the_old_version() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 2).await;
    // Old version reserved under topic a; new version ready under topic b.
    s.push(job("a", "x", "old", NOW), PushMode::Reject, NOW)
        .await
        .unwrap();
    s.reserve(&[topic("a")], 1, NOW).await.unwrap();
    assert_eq!(
        s.push(job("a", "x", "dup", NOW), PushMode::Reject, NOW)
            .await,
        Err(StoreError::Exists)
    );
    let out = s
        .push(job("b", "x", "new", NOW + 50), PushMode::Replace, NOW)
        .await;
    assert_eq!(out, Ok(PushOutcome::Replaced(JobState::Reserved)));
    // The old reservation's deadline passes: nothing is redelivered on topic a.
    s.tick(NOW + 120_000, 100).await.unwrap();
    assert!(
        s.reserve(&[topic("a")], 10, NOW + 120_000)
            .await
            .unwrap()
            .is_empty()
    );
    let r = s.reserve(&[topic("b")], 10, NOW + 120_000).await.unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].spec.body, "new");
    let st = s.stats().await.unwrap();
    assert!(!st.topics.contains_key(&topic("a")));
}

#[tokio::test]
async fn reschedule_bury_and_kick_topic_across_shards() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 4).await;
    for i in 0..10 {
        s.push(
            job("t", &format!("d{i}"), "", NOW + 1000),
            PushMode::Reject,
            NOW,
        )
        .await
        .unwrap();
    }
    let (j, prev) = s
        .reschedule(
            &id("d0"),
            Reschedule {
                run_at: NOW,
                body: Some("changed".into()),
                priority: Some(7),
            },
            NOW,
        )
        .await
        .unwrap();
    assert_eq!(prev, JobState::Delayed);
    assert_eq!(
        (j.state, j.spec.body.as_str(), j.spec.priority),
        (JobState::Ready, "changed", 7)
    );
    s.reserve(&[topic("t")], 1, NOW).await.unwrap();
    assert_eq!(
        s.reschedule(
            &id("d0"),
            Reschedule {
                run_at: NOW,
                ..Default::default()
            },
            NOW
        )
        .await
        .unwrap_err(),
        StoreError::WrongState(JobState::Reserved)
    );
    // Bury in a known order (burial time increases), then kick the oldest 4 across shards.
    for (k, i) in [3, 1, 4, 9, 5, 2].iter().enumerate() {
        s.bury(&id(&format!("d{i}")), None, NOW + 10 + k as u64)
            .await
            .unwrap();
    }
    assert_eq!(s.kick_topic(&topic("t"), 4, NOW + 100).await.unwrap(), 4);
    for i in [3, 1, 4, 9] {
        assert_eq!(
            s.get(&id(&format!("d{i}"))).await.unwrap().state,
            JobState::Ready
        );
    }
    for i in [5, 2] {
        assert_eq!(
            s.get(&id(&format!("d{i}"))).await.unwrap().state,
            JobState::Dead
        );
    }
    assert_eq!(s.kick_topic(&topic("t"), 100, NOW + 100).await.unwrap(), 2);
    assert_eq!(s.kick_topic(&topic("t"), 100, NOW + 100).await.unwrap(), 0);
}

#[tokio::test]
async fn an_instance_with_another_shard_count_is_refused_and_strands_nothing() {
    let server = RedisServer::start();
    let first = store(&server, "dq", 2).await;
    first
        .push(job("t", "a", "", NOW), PushMode::Reject, NOW)
        .await
        .unwrap();
    let refused = refused(&server, "dq", 1, "a second layout under the same prefix").await;
    let msg = refused.to_string();
    assert!(
        msg.contains("shards=2") && msg.contains("--shards"),
        "{msg}"
    );
    // Same layout: accepted, and it sees the first instance's job.
    let second = store(&server, "dq", 2).await;
    assert_eq!(second.get(&id("a")).await.unwrap().state, JobState::Ready);
    // Another prefix is another namespace with its own layout.
    store(&server, "other", 1).await;
}

#[tokio::test]
async fn jobs_written_before_the_layout_was_recorded_are_not_stranded_by_fewer_shards() {
    let server = RedisServer::start();
    let old = store(&server, "dq", 8).await;
    let jobs: Vec<JobSpec> = (0..40)
        .map(|i| job("t", &format!("j{i}"), "", NOW))
        .collect();
    old.push_batch(jobs, PushMode::Reject, NOW).await.unwrap();
    drop(old);
    // As a build before the layout key left it.
    let mut c = raw(&server).await;
    command(&mut c, &["DEL", "{dq:layout}"]).await;
    let refused = refused(&server, "dq", 1, "jobs in shards 1..7 stranded by 1 shard").await;
    assert!(refused.to_string().contains("--shards"), "{refused}");
    // With the shard count they were written with, every job is there.
    let s = store(&server, "dq", 8).await;
    assert_eq!(s.reserve(&[topic("t")], 100, NOW).await.unwrap().len(), 40);
}
