//! The data in Redis: every key under the prefix with one hash tag per shard, prefixes that do
//! not see each other, the format version recorded per prefix (a newer one refused untouched,
//! data from before it was recorded given version 1), ids that look like internal keys, bodies byte for byte, records packed
//! by Rust as the scripts would pack them, and foreign values reported as corrupt without
//! blocking the timer or reserve.

use super::*;

#[tokio::test]
async fn every_key_is_under_the_prefix_with_one_hash_tag_per_shard() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 4).await;
    let mut jobs = Vec::new();
    for i in 0..40 {
        let run_at = if i % 2 == 0 { NOW } else { NOW + 1000 };
        jobs.push(job("orders", &format!("job-{i}"), "x", run_at));
    }
    s.push_batch(jobs, PushMode::Reject, NOW).await.unwrap();
    let r = s.reserve(&[topic("orders")], 5, NOW).await.unwrap();
    s.bury(&r[0].spec.id, None, NOW).await.unwrap();
    // And far-future jobs, in two windows.
    let far: Vec<JobSpec> = (0..40)
        .map(|i| {
            job(
                "orders",
                &format!("far-{i}"),
                "x",
                NOW + 3_600_000 + i * 1_000,
            )
        })
        .collect();
    s.push_batch(far, PushMode::Reject, NOW).await.unwrap();

    let keys = all_keys(&server).await;
    assert!(!keys.is_empty());
    let allowed = [
        "jobs", "timeline", "ready", "dead", "counts", "windows", "due", "dueidx",
    ];
    let windows = [(NOW + 3_600_000) / 60_000, (NOW + 3_639_000) / 60_000];
    // Besides the shards, one key records the layout (shard count and tag format), one the
    // format version.
    assert!(keys.contains(&"{dq:layout}".to_string()), "{keys:?}");
    assert!(keys.contains(&"{dq:format}".to_string()), "{keys:?}");
    for k in keys
        .iter()
        .filter(|k| *k != "{dq:layout}" && *k != "{dq:format}")
    {
        let rest = k
            .strip_prefix("{dq:")
            .unwrap_or_else(|| panic!("{k} not under the prefix"));
        let (shard, name) = rest.split_once("}:").unwrap();
        assert!(shard.parse::<u16>().unwrap() < 4, "{k}");
        let window = name
            .strip_prefix("w:")
            .is_some_and(|w| windows.contains(&w.parse().unwrap()));
        assert!(allowed.contains(&name) || window, "{k}: unexpected key");
    }
    // No key per job: 80 jobs in 4 shards make at most 8 keys plus 2 window lists per shard,
    // and the layout and format keys.
    assert!(keys.len() <= 42, "{keys:?}");
}

#[tokio::test]
async fn two_prefixes_on_one_redis_do_not_see_each_other() {
    let server = RedisServer::start();
    let a = store(&server, "a", 2).await;
    let b = store(&server, "b", 2).await;
    a.push(job("t", "same-id", "from a", NOW), PushMode::Reject, NOW)
        .await
        .unwrap();
    assert_eq!(b.get(&id("same-id")).await, Err(StoreError::NotFound));
    assert!(b.reserve(&[topic("t")], 10, NOW).await.unwrap().is_empty());
    assert!(b.stats().await.unwrap().topics.is_empty());
    b.push(job("t", "same-id", "from b", NOW), PushMode::Reject, NOW)
        .await
        .unwrap();
    assert_eq!(a.get(&id("same-id")).await.unwrap().spec.body, "from a");
    assert_eq!(b.get(&id("same-id")).await.unwrap().spec.body, "from b");
}

#[tokio::test]
async fn ids_that_look_like_internal_keys_are_just_ids() {
    let server = RedisServer::start();
    let s = store(&server, "delayq", 2).await;
    let nasty = [
        "{delayq:0}:jobs",
        "{delayq:1}:ready",
        "{delayq:0}:timeline",
        "delayq:events",
        "delayq:",
        "{delayq:0}:counts",
        "*",
        "rorders",
    ];
    for (i, n) in nasty.iter().enumerate() {
        let run_at = if i % 2 == 0 { NOW } else { NOW + 10 };
        let out = s
            .push(job("orders", n, n, run_at), PushMode::Reject, NOW)
            .await;
        assert_eq!(out, Ok(PushOutcome::Created), "{n}");
    }
    let keys_before = all_keys(&server).await;
    for n in nasty {
        assert_eq!(s.get(&id(n)).await.unwrap().spec.body, n);
    }
    s.tick(NOW + 10, 100).await.unwrap();
    let got = s.reserve(&[topic("orders")], 100, NOW + 10).await.unwrap();
    let mut got_ids = ids(&got);
    got_ids.sort();
    let mut want: Vec<String> = nasty.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(got_ids, want);
    for n in nasty {
        assert_eq!(s.finish(&id(n)).await, Ok(JobState::Reserved));
    }
    // Nothing was created or clobbered under those names.
    let keys_after = all_keys(&server).await;
    for k in &keys_after {
        assert!(keys_before.contains(k), "new key {k}");
    }
    assert!(s.stats().await.unwrap().topics.is_empty());
}

#[tokio::test]
async fn bodies_round_trip_byte_for_byte() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    let bodies = [
        "",
        "plain",
        "  padded  ",
        "ünïcödé ✓ 🚀 中文",
        "nul\0inside",
        "12345",
        "1e3",
        "{\"json\":[1,2,3]}",
    ];
    let long = "é".repeat(70_000);
    for (i, b) in bodies.iter().copied().chain([long.as_str()]).enumerate() {
        let i = format!("b{i}");
        s.push(job("t", &i, b, NOW), PushMode::Reject, NOW)
            .await
            .unwrap();
        assert_eq!(s.get(&id(&i)).await.unwrap().spec.body, b);
    }
}

/// Pushed records are packed by Rust (record.rs `encode_new`), every later version by the
/// scripts' `encode` (lib.lua): the two must write the same bytes, or a record would change
/// form on its first transition and the memory figures would not hold. Redis's own `encode`
/// re-packs each pushed record here, for jobs at every msgpack size boundary.
#[tokio::test]
async fn pushed_records_are_what_the_scripts_would_write() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    // lib.lua run as a plain script: its own `ARGV` (bound per call by `begin`) shadows the
    // script's, so the record is taken before it.
    let repack = format!(
        "local record = ARGV[1]\n{}\nreturn encode(decode(cmsgpack.unpack(record)))",
        include_str!("../../../src/store/redis/lib.lua")
    );
    let mut specs = Vec::new();
    for (n, len) in [0usize, 31, 32, 255, 256, 65_535, 65_536]
        .into_iter()
        .enumerate()
    {
        specs.push(job("t", &format!("len{n}"), &"b".repeat(len), NOW + 1));
    }
    let mut custom = job("t", "custom", "body", NOW + 3_600_000);
    custom.ttr_ms = 127;
    custom.priority = u32::MAX;
    custom.max_attempts = 65_536;
    custom.backoff_ms = vec![0, 128, 256, 65_536, 4_294_967_296, delayq::job::MAX_RUN_AT];
    specs.push(custom);
    let mut only_prio = job("ü-topic", "only_prio", "", 0);
    only_prio.priority = 0;
    specs.push(only_prio);
    let mut only_attempts = job("t", "only_attempts", "x", u64::MAX);
    only_attempts.max_attempts = 3;
    specs.push(only_attempts);
    let mut callback = job("t", "callback", "{}", NOW + 1);
    callback.callback = Some(delayq::job::Callback {
        url: "https://hooks.example.com/ü?x=1".into(),
        timeout_ms: 30_000,
    });
    specs.push(callback);
    let mut publish = job("t", "publish", "AP8=", NOW + 1);
    publish.publish = Some(Box::new(delayq::job::Publish {
        exchange: "ex".into(),
        routing_key: "ü.key".into(),
        content_type: Some("application/octet-stream".into()),
        headers: Some(r#"{"a":{"LongInt":-7}}"#.into()),
        body_base64: true,
    }));
    specs.push(publish);
    // Restored jobs keep their attempts (`restore_batch`).
    let mut restored = Vec::new();
    for (name, cb) in [
        ("restored", None),
        ("restored_cb", Some("https://h.example/x")),
    ] {
        let mut spec = job("t", name, "r", NOW + 1);
        spec.callback = cb.map(|url| delayq::job::Callback {
            url: url.into(),
            timeout_ms: 5_000,
        });
        restored.push(delayq::job::Job {
            state: JobState::Delayed,
            spec,
            attempts: 6,
            reserved_until: None,
            seq: 0,
        });
    }
    let mut c = raw(&server).await;
    for (k, spec) in specs.into_iter().enumerate() {
        let mode = if k % 2 == 0 {
            PushMode::Reject
        } else {
            PushMode::Replace
        };
        let jid = spec.id.clone();
        s.push(spec.clone(), mode, NOW).await.unwrap();
        assert_repacks_alike(&mut c, &s.shard_keys()[0].jobs, &jid, &repack).await;
        let stored = s.get(&jid).await.unwrap();
        assert_eq!(stored.spec.body, spec.body);
        assert_eq!(stored.spec.backoff_ms, spec.backoff_ms);
        assert_eq!(stored.spec.run_at, spec.run_at.min(delayq::job::MAX_RUN_AT));
        assert_eq!(stored.state, spec.initial_state(NOW));
    }
    for job in restored {
        let jid = job.spec.id.clone();
        let out = s
            .restore_batch(std::slice::from_ref(&job), NOW)
            .await
            .unwrap();
        assert!(out[0].is_ok(), "{out:?}");
        assert_repacks_alike(&mut c, &s.shard_keys()[0].jobs, &jid, &repack).await;
        let stored = s.get(&jid).await.unwrap();
        assert_eq!((stored.spec, stored.attempts), (job.spec, 6));
    }
}

/// Checks that the stored record of `jid` is byte for byte what lib.lua's `encode` (the
/// script `repack`) writes for it.
async fn assert_repacks_alike(
    c: &mut redis::aio::MultiplexedConnection,
    jobs_key: &str,
    jid: &JobId,
    repack: &str,
) {
    let record: Vec<u8> = redis::cmd("HGET")
        .arg(jobs_key)
        .arg(jid.as_str())
        .query_async(c)
        .await
        .unwrap();
    let repacked: Vec<u8> = redis::cmd("EVAL")
        .arg(repack)
        .arg(0)
        .arg(&record)
        .query_async(c)
        .await
        .unwrap();
    assert_eq!(record, repacked, "job {jid} is packed differently");
}

#[tokio::test]
async fn a_foreign_value_in_a_job_field_is_reported_as_corrupt() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    let mut c = raw(&server).await;
    command(&mut c, &["HSET", "{dq:0}:jobs", "junk", "not msgpack"]).await;
    assert!(matches!(
        s.get(&id("junk")).await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        s.delete(&id("junk")).await,
        Err(StoreError::Corrupt(_))
    ));
}

#[tokio::test]
async fn a_foreign_value_in_the_indexes_never_blocks_the_timer_or_reserve() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    s.push(job("t", "good", "", NOW + 5), PushMode::Reject, NOW)
        .await
        .unwrap();
    let mut c = raw(&server).await;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg("{dq:0}:jobs")
        .arg("junk")
        .arg("not msgpack")
        .cmd("ZADD")
        .arg("{dq:0}:timeline")
        .arg(1)
        .arg("junk")
        .cmd("ZADD")
        .arg("{dq:0}:ready")
        .arg(0)
        .arg(b"t\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0junk".as_slice())
        .query_async(&mut c)
        .await
        .unwrap();
    let out = s.tick(NOW + 5, 100).await.unwrap();
    assert_eq!((out.promoted, out.next_due), (1, None));
    assert_eq!(
        ids(&s.reserve(&[topic("t")], 10, NOW + 5).await.unwrap()),
        ["good"]
    );
    assert_eq!(
        s.tick(NOW + 6, 100).await.unwrap().next_due,
        Some(NOW + 5 + 60_000)
    );
}

/// A record in the 11-element layout {state, topic, body, run_at, ttr_ms, priority,
/// max_attempts, attempts, reserved_until, seq, backoff_ms}, as earlier builds wrote every
/// record: topic `t`, body `body`, ttr 5,000, priority 1,024, 3 attempts at most, seq 7.
fn record_of_11(state: u8, run_at: u64, attempts: u8) -> Vec<u8> {
    let mut record = vec![0x9b, 0xa1, state, 0xa1, b't', 0xa4];
    record.extend_from_slice(b"body");
    record.push(0xcf);
    record.extend_from_slice(&run_at.to_be_bytes());
    record.extend_from_slice(&[0xcd, 0x13, 0x88]); // ttr 5,000
    record.extend_from_slice(&[0xcd, 0x04, 0x00]); // priority 1,024
    record.extend_from_slice(&[0x03, attempts, 0x00, 0x07, 0x90]); // max, attempts, seq 7
    record
}

/// Writes job `old` of shard 0 as an earlier build would have: its `record`, its entry in
/// one zset (`(zset, score, member)`) and a count of 1 under `count_field`.
async fn plant_old(
    c: &mut redis::aio::MultiplexedConnection,
    record: Vec<u8>,
    (zset, score, member): (&str, u64, Vec<u8>),
    count_field: &str,
) {
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg("{dq:0}:jobs")
        .arg("old")
        .arg(record)
        .cmd("ZADD")
        .arg(format!("{{dq:0}}:{zset}"))
        .arg(score)
        .arg(member)
        .cmd("HSET")
        .arg("{dq:0}:counts")
        .arg(count_field)
        .arg(1)
        .query_async(c)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_record_in_the_11_element_layout_is_reserved_and_rewritten_in_the_current_one() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    // A ready job due at NOW, as earlier builds wrote every record.
    let record = record_of_11(b'r', NOW, 1);
    let mut member = b"t\0".to_vec();
    member.extend_from_slice(&1024u32.to_be_bytes());
    member.extend_from_slice(&NOW.to_be_bytes()[2..]);
    member.extend_from_slice(&7u64.to_be_bytes()[1..]);
    member.extend_from_slice(b"old");
    let mut c = raw(&server).await;
    plant_old(&mut c, record, ("ready", 0, member), "rt").await;
    let got = s.reserve(&[topic("t")], 10, NOW + 1).await.unwrap();
    assert_eq!(ids(&got), ["old"]);
    let j = &got[0];
    assert_eq!(
        (
            j.spec.body.as_ref(),
            j.spec.ttr_ms,
            j.spec.max_attempts,
            j.attempts
        ),
        (&b"body"[..], 5_000, 3, 2)
    );
    assert_eq!(j.reserved_until, Some(NOW + 1 + 5_000));
    // Read back from Redis: the record the reserve wrote, in the current layout.
    let back = s.get(&id("old")).await.unwrap();
    assert_eq!(back.state, JobState::Reserved);
    assert_eq!((back.attempts, back.reserved_until), (2, Some(NOW + 5_001)));
    let stored: Vec<u8> = redis::cmd("HGET")
        .arg("{dq:0}:jobs")
        .arg("old")
        .query_async(&mut c)
        .await
        .unwrap();
    // The 11-element layout ends with the backoff array (here empty, 0x90); the current one
    // with reserved_until.
    assert_ne!(stored.last(), Some(&0x90), "left in the 11-element layout");
}

/// The timer promotes a delayed record of the current layout without reading it into a working
/// record (tick.lua); one in the 11-element layout, whose positions differ, goes the long way
/// and is promoted with its own priority and stamp (read as the current layout, it would get
/// a ready entry no reserve matches, and be lost).
#[tokio::test]
async fn a_delayed_record_in_the_11_element_layout_is_promoted_and_reserved() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    // A job delayed until NOW + 5.
    let run_at = NOW + 5;
    let record = record_of_11(b'd', run_at, 0);
    let mut c = raw(&server).await;
    plant_old(&mut c, record, ("timeline", run_at, b"old".to_vec()), "dt").await;
    // A job of the current layout due at the same time, pushed after it (a later stamp).
    s.push_batch(
        vec![JobSpec::new(topic("t"), id("new"), "b", run_at)],
        PushMode::Reject,
        NOW,
    )
    .await
    .unwrap();
    assert_eq!(s.tick(run_at, 100).await.unwrap().promoted, 2);
    let stats = s.stats().await.unwrap();
    assert_eq!(stats.topics[&topic("t")].ready, 2);
    assert_eq!(stats.topics[&topic("t")].delayed, 0);
    let got = s.reserve(&[topic("t")], 10, run_at).await.unwrap();
    assert_eq!(
        ids(&got),
        ["old", "new"],
        "both, in (priority, due, stamp) order"
    );
    assert_eq!((got[0].spec.ttr_ms, got[0].spec.max_attempts), (5_000, 3));
}

async fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut raw(server).await)
        .await
        .unwrap()
}

#[tokio::test]
async fn each_prefix_records_its_format_version() {
    let server = RedisServer::start();
    let _a = store(&server, "a", 1).await;
    let _b = store(&server, "b", 2).await;
    let current = delayq::store::redis::FORMAT_VERSION.to_string();
    assert_eq!(
        get(&server, "{a:format}").await.as_deref(),
        Some(current.as_str())
    );
    assert_eq!(
        get(&server, "{b:format}").await.as_deref(),
        Some(current.as_str())
    );
    // A newer format under one prefix does not concern the other.
    let mut c = raw(&server).await;
    command(&mut c, &["SET", "{a:format}", "99"]).await;
    store(&server, "b", 2).await;
}

#[tokio::test]
async fn data_of_a_newer_format_is_refused_untouched_saying_what_to_do() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    s.push(job("t", "kept", "x", NOW + 60_000), PushMode::Reject, NOW)
        .await
        .unwrap();
    drop(s);
    let newer = (delayq::store::redis::FORMAT_VERSION + 1).to_string();
    let mut c = raw(&server).await;
    command(&mut c, &["SET", "{dq:format}", &newer]).await;
    let keys_before = all_keys(&server).await;

    let err = refused(&server, "dq", 1, "a newer format").await;
    let StoreError::Unavailable(cause) = &err else {
        panic!("{err:?}")
    };
    let message = cause.message();
    assert!(
        message.starts_with(&format!(
            "Redis holds delayq data under prefix \"dq\" in format version {newer}, written by a \
             newer delayq; this delayq ({}) reads version {}",
            env!("CARGO_PKG_VERSION"),
            delayq::store::redis::FORMAT_VERSION
        )),
        "{message}"
    );
    assert!(
        message.contains("run the newer delayq on every instance"),
        "{message}"
    );
    assert!(message.contains("docs/upgrading.md"), "{message}");
    assert_eq!(all_keys(&server).await, keys_before);
    assert_eq!(get(&server, "{dq:format}").await, Some(newer));
}

#[tokio::test]
async fn data_written_before_the_format_was_recorded_is_read_as_version_1_and_migrated() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 2).await;
    s.push(job("t", "old", "x", NOW + 60_000), PushMode::Reject, NOW)
        .await
        .unwrap();
    drop(s);
    // As builds before the format key left their data.
    let mut c = raw(&server).await;
    command(&mut c, &["DEL", "{dq:format}"]).await;

    let s = store(&server, "dq", 2).await;
    assert_eq!(get(&server, "{dq:format}").await.as_deref(), Some("2"));
    assert_eq!(s.get(&id("old")).await.unwrap().spec.body, "x");
}

#[tokio::test]
async fn version_1_data_is_migrated_to_version_2_with_every_job() {
    let server = RedisServer::start();
    let s = store(&server, "dq", 1).await;
    s.push(job("t", "later", "x", NOW + 60_000), PushMode::Reject, NOW)
        .await
        .unwrap();
    s.push(job("t", "now", "y", NOW), PushMode::Reject, NOW)
        .await
        .unwrap();
    drop(s);
    let mut c = raw(&server).await;
    command(&mut c, &["SET", "{dq:format}", "1"]).await;

    let s = store(&server, "dq", 1).await;
    assert_eq!(get(&server, "{dq:format}").await.as_deref(), Some("2"));
    assert_eq!(
        s.get(&id("later")).await.map(|j| j.state),
        Ok(JobState::Delayed)
    );
    let got = s.reserve(&[topic("t")], 10, NOW).await.unwrap();
    assert_eq!(
        got.iter().map(|j| j.spec.id.as_str()).collect::<Vec<_>>(),
        ["now"]
    );
}

#[tokio::test]
async fn a_format_key_delayq_did_not_write_is_refused() {
    let server = RedisServer::start();
    let mut c = raw(&server).await;
    command(&mut c, &["SET", "{dq:format}", "banana"]).await;
    let err = refused(&server, "dq", 1, "a foreign format key").await;
    assert!(
        err.to_string().contains("not a delayq format version"),
        "{err}"
    );
}
