//! Recurring schedules through real `delayq serve` processes (docs/schedules.md): exactly one
//! job per tick with three instances on one Redis and on a Redis Cluster, and with one instance
//! on the embedded store across a kill -9 and restart, while consumers reserve and finish each
//! job at once (a finished job's id is free again); and the catch-up policies after every
//! instance was stopped for 10 s.
//!
//! These tests run while no backend test does (the conformance suite's load is not what they
//! are about), but at the same time as each other: each is a few mostly idle processes firing
//! one job a second, and one after another they took over two minutes of the binary's time.

use crate::support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use support::load::now_ms;
use support::process::DelayqProcess;
use support::redis_cluster::RedisCluster;
use support::redis_server::RedisServer;

/// The write guard of [`TIMING`](crate::support::backends::TIMING) the schedule tests running
/// at the moment share.
static TOGETHER: tokio::sync::Mutex<Weak<tokio::sync::OwnedRwLockWriteGuard<()>>> =
    tokio::sync::Mutex::const_new(Weak::new());

/// Holds the backend tests off, as `multi_instance` does, but shares that with the other
/// schedule tests: the first takes the write guard, those starting while it is held join it.
async fn apart_from_backend_tests() -> Arc<tokio::sync::OwnedRwLockWriteGuard<()>> {
    let mut together = TOGETHER.lock().await;
    if let Some(guard) = together.upgrade() {
        return guard;
    }
    let guard = Arc::new(crate::support::backends::TIMING.clone().write_owned().await);
    *together = Arc::downgrade(&guard);
    guard
}

/// One delivery: the job's id, due time, attempt, and when it was received.
#[derive(Debug, Clone)]
struct Delivery {
    run_at: u64,
    attempts: u64,
    at_ms: u64,
}

type Ledger = Arc<Mutex<BTreeMap<String, Vec<Delivery>>>>;

async fn put_schedule(base: &str, id: &str, body: Value) -> Value {
    let r = reqwest::Client::new()
        .put(format!("{base}/v1/schedules/{id}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    r.json().await.unwrap()
}

/// A consumer on `base`: reserves `topic` (long polls of 1 s) and finishes each job at once,
/// until `stop`. Connection errors (an instance being killed) are waited out.
fn consume(
    base: String,
    topic: &'static str,
    ledger: Ledger,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let http = reqwest::Client::new();
        while !stop.load(Ordering::Relaxed) {
            let r = http
                .post(format!("{base}/v1/reserve"))
                .json(&json!({"topics": [topic], "max": 10, "timeout_ms": 1000}))
                .send()
                .await;
            let Ok(r) = r else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let Ok(body) = r.json::<Value>().await else {
                continue;
            };
            let at_ms = now_ms();
            for j in body["jobs"].as_array().cloned().unwrap_or_default() {
                let id = j["id"].as_str().unwrap().to_string();
                ledger
                    .lock()
                    .unwrap()
                    .entry(id.clone())
                    .or_default()
                    .push(Delivery {
                        run_at: j["run_at_ms"].as_u64().unwrap(),
                        attempts: j["attempts"].as_u64().unwrap(),
                        at_ms,
                    });
                let path = format!("{base}/v1/jobs/{}/finish", id.replace('@', "%40"));
                let _ = http.post(path).send().await;
            }
        }
    })
}

/// The next whole second at least `ahead_ms` from now.
fn second_after(ahead_ms: u64) -> u64 {
    (now_ms() + ahead_ms).div_ceil(1000) * 1000
}

/// Checks that the ledger holds exactly the jobs `<id>@<t>` of `ticks`, each due at its tick,
/// received no earlier, and pushed once (delivered again only as a redelivery, attempt 2 or
/// later).
#[track_caller]
fn assert_one_job_per_tick(ledger: &Ledger, id: &str, ticks: &[u64]) {
    let ledger = ledger.lock().unwrap();
    let mine: BTreeMap<&String, &Vec<Delivery>> = ledger
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{id}@")))
        .collect();
    let want: Vec<String> = ticks.iter().map(|t| format!("{id}@{t}")).collect();
    let got: Vec<String> = mine.keys().map(|k| k.to_string()).collect();
    assert_eq!(
        got.len(),
        want.len(),
        "{id}: ticks delivered {got:?}, want {want:?}"
    );
    assert_eq!(
        got,
        {
            let mut w = want.clone();
            w.sort();
            w
        },
        "{id}"
    );
    for (job, deliveries) in mine {
        let tick: u64 = job.rsplit('@').next().unwrap().parse().unwrap();
        // A first delivery (attempt 1) is due at its tick. A job handed back by a long poll
        // that gave up in the instant it was reserved (dispatch/waiters.rs) comes again as
        // attempt 2 or later, ready from its hand-back; a second push would be attempt 1 again.
        let firsts: Vec<&Delivery> = deliveries.iter().filter(|d| d.attempts == 1).collect();
        assert!(firsts.len() <= 1, "{job} pushed twice: {deliveries:?}");
        for d in firsts {
            assert_eq!(d.run_at, tick, "{job} due at its tick: {deliveries:?}");
        }
        for d in deliveries {
            assert!(d.at_ms >= tick, "{job} early: {deliveries:?}");
        }
    }
}

/// Three instances on `args` (a Redis or a Redis Cluster), a schedule every second for
/// `n` ticks, three consumers finishing at once: exactly `n` jobs.
async fn three_instances_one_job_per_tick(args: &[&str], n: u64) {
    let _apart = apart_from_backend_tests().await;
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(DelayqProcess::start(args).await);
    }
    let ledger: Ledger = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = servers
        .iter()
        .map(|s| consume(s.base_url.clone(), "ticks", ledger.clone(), stop.clone()))
        .collect();
    let start = second_after(2_000);
    let end = start + (n - 1) * 1000;
    put_schedule(
        &servers[1].base_url,
        "every-second",
        json!({"every_ms": 1000, "start_at_ms": start, "end_at_ms": end, "job": {"topic": "ticks"}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(end + 3_000 - now_ms())).await;
    stop.store(true, Ordering::Relaxed);
    for c in consumers {
        c.await.unwrap();
    }
    let ticks: Vec<u64> = (0..n).map(|k| start + k * 1000).collect();
    assert_one_job_per_tick(&ledger, "every-second", &ticks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_one_redis_push_exactly_one_job_per_tick_for_60_s() {
    let redis = RedisServer::start();
    three_instances_one_job_per_tick(&["--redis", &redis.url(), "--shards", "4"], 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_a_redis_cluster_push_exactly_one_job_per_tick() {
    let cluster = RedisCluster::start(3, 0);
    let seeds = cluster.urls().join(",");
    three_instances_one_job_per_tick(&["--redis-cluster", &seeds, "--prefix", "sched"], 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_pushes_one_job_per_tick_across_kill_9_and_restart() {
    let _apart = apart_from_backend_tests().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = DelayqProcess::start(&["--data-dir", data.to_str().unwrap()]).await;
    let ledger: Ledger = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let consumer = consume(
        server.base_url.clone(),
        "ticks",
        ledger.clone(),
        stop.clone(),
    );
    let start = second_after(2_000);
    let n = 20;
    let end = start + (n - 1) * 1000;
    put_schedule(
        &server.base_url,
        "every-second",
        json!({"every_ms": 1000, "start_at_ms": start, "end_at_ms": end, "catch_up": "all",
               "job": {"topic": "ticks", "ttr_ms": 1000}}),
    )
    .await;
    // Killed in the middle, down for 3 s (three ticks missed, caught up at restart).
    tokio::time::sleep(Duration::from_millis(start + 7_500 - now_ms())).await;
    server.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.restart().await;
    tokio::time::sleep(Duration::from_millis(end + 4_000 - now_ms())).await;
    stop.store(true, Ordering::Relaxed);
    consumer.await.unwrap();
    let ticks: Vec<u64> = (0..n).map(|k| start + k * 1000).collect();
    assert_one_job_per_tick(&ledger, "every-second", &ticks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_every_instance_was_stopped_10_s_each_catch_up_policy_fires_what_it_says() {
    let _apart = apart_from_backend_tests().await;
    let redis = RedisServer::start();
    let args = ["--redis", &redis.url(), "--shards", "4"];
    let mut a = DelayqProcess::start(&args).await;
    let mut b = DelayqProcess::start(&args).await;
    let start = second_after(1_000);
    for (id, catch_up) in [("latest", "latest"), ("none", "none"), ("all", "all")] {
        put_schedule(
            &a.base_url,
            id,
            json!({"every_ms": 1000, "start_at_ms": start, "catch_up": catch_up, "job": {"topic": id}}),
        )
        .await;
    }
    // Both instances stopped for 10 s, from about 2.5 s after the first tick.
    tokio::time::sleep(Duration::from_millis(start + 2_500 - now_ms())).await;
    a.kill();
    b.kill();
    let stopped_at = now_ms();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let restart_begin = now_ms();
    a.restart().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    b.restart().await;
    let http = reqwest::Client::new();
    for id in ["latest", "none", "all"] {
        // Every job the schedule pushed (nobody consumed them).
        let r: Value = http
            .get(format!(
                "{}/v1/topics/{id}/jobs?state=ready&limit=1000",
                b.base_url
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut ticks: Vec<u64> = r["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| {
                let t = j["run_at_ms"].as_u64().unwrap();
                assert_eq!(j["id"], format!("{id}@{t}"));
                t
            })
            .collect();
        ticks.sort();
        // Every tick before the stop fired, once.
        let before: Vec<u64> = (0..)
            .map(|k| start + k * 1000)
            .take_while(|&t| t < stopped_at)
            .collect();
        assert_eq!(&ticks[..before.len()], &before[..], "{id}: {ticks:?}");
        let mut rest = &ticks[before.len()..];
        // The tick fired ahead before the stop (the next one, pushed when the one before it
        // passed) is not a missed one: its job was stored, due at it, and is delivered after
        // the restart whatever the catch-up policy (docs/schedules.md).
        let ahead = rest.first().copied().filter(|&t| t < stopped_at + 1000);
        if ahead.is_some() {
            rest = &rest[1..];
        }
        let last_before = ahead.or(before.last().copied()).unwrap();
        assert!(rest.len() >= 2, "{id} fires again: {ticks:?}");
        // After the restart, one tick a second again.
        let gaps: Vec<u64> = rest.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|&g| g == 1000), "{id}: {ticks:?}");
        let first_after = rest[0];
        let missed = (first_after - last_before) / 1000 - 1;
        if id == "all" {
            assert_eq!(missed, 0, "all: every missed tick fired: {ticks:?}");
        } else {
            // The ticks of the outage are skipped; the first fired is at most a second older
            // than the instance that handled it (the tick due on time, or the most recent).
            assert!(missed >= 8, "{id}: {missed} skipped: {ticks:?}");
            assert!(
                first_after + 1000 > restart_begin,
                "{id}: nothing of the outage fires: {ticks:?}"
            );
        }
    }
}
