//! Several delayq processes on one Redis (active-active), producers and consumers spread over
//! all of them through the compat API: every job is delivered, none twice within its TTR, none
//! before it is due, and lateness stays low.
//!
//! The CI versions are bounded (1,000–1,500 jobs, paced so a debug build on 2 shared cores keeps
//! up: lateness then measures the timer, not a backlog); the soak runs tens of thousands:
//! `DELAYQ_SOAK_JOBS=50000 cargo test --release --test store multi_instance:: -- --ignored`.

use crate::support;

use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::load::now_ms;
use support::process::DelayqProcess;
use support::redis_server::RedisServer;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Delivery {
    instance: usize,
    at_ms: u64,
    due_ms: u64,
}

async fn post(http: &reqwest::Client, url: &str, body: Value) -> Value {
    let r = http
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    r.json().await.unwrap_or_else(|e| panic!("POST {url}: {e}"))
}

/// Runs `jobs` jobs with delays of 0–`max_delay_s` seconds through `instances` servers, pushed
/// at about `rate` jobs a second in all (so the consumers keep up and lateness measures the
/// timer, not a backlog).
async fn every_job_delivered_once(instances: usize, jobs: usize, max_delay_s: u64, rate: u64) {
    // Alone: its lateness bound is about delayq, not about the other tests' load.
    let _alone = crate::support::backends::TIMING.clone().write_owned().await;
    // One scenario at a time: two at once on 2 cores measure the CPU, not delayq.
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let mut servers = Vec::new();
    for _ in 0..instances {
        servers.push(DelayqProcess::start(&["--redis", &redis.url(), "--shards", "4"]).await);
    }
    let urls: Vec<String> = servers.iter().map(|s| s.base_url.clone()).collect();
    let http = reqwest::Client::new();
    let run = format!("{}", now_ms());

    let delivered: Arc<Mutex<HashMap<String, Vec<Delivery>>>> = Arc::default();
    let pushed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let producers_done = Arc::new(std::sync::atomic::AtomicBool::new(false));

    // Producers: 2 per instance, each pushing its share.
    let per_producer = jobs.div_ceil(instances * 2);
    let mut producers = Vec::new();
    for p in 0..instances * 2 {
        let (http, url, run, pushed) = (
            http.clone(),
            urls[p % instances].clone(),
            run.clone(),
            pushed.clone(),
        );
        let producers_n = (instances * 2) as u64;
        producers.push(tokio::spawn(async move {
            // Each producer paces itself to its share of `rate`.
            let interval = Duration::from_micros(1_000_000 * producers_n / rate.max(1));
            let started = Instant::now();
            for k in 0..per_producer {
                tokio::time::sleep_until((started + interval * k as u32).into()).await;
                let n = p * per_producer + k;
                if n >= jobs {
                    break;
                }
                let delay = (n as u64) % (max_delay_s + 1);
                let due = now_ms() + delay * 1000;
                let reply = post(
                    &http,
                    &format!("{url}/push"),
                    json!({"topic": "mi", "id": format!("{run}-{n}"), "delay": delay, "ttr": 120, "body": due.to_string()}),
                )
                .await;
                assert_eq!(reply["code"], 0, "push {n}: {reply}");
                pushed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }));
    }

    // Consumers: 2 per instance, pop with a 1 s long poll and finish.
    let mut consumers = Vec::new();
    for c in 0..instances * 2 {
        let instance = c % instances;
        let (http, url, delivered, done) = (
            http.clone(),
            urls[instance].clone(),
            delivered.clone(),
            producers_done.clone(),
        );
        consumers.push(tokio::spawn(async move {
            let mut idle_since: Option<Instant> = None;
            loop {
                let reply = post(
                    &http,
                    &format!("{url}/pop"),
                    json!({"topic": "mi", "timeout": 1}),
                )
                .await;
                assert_eq!(reply["code"], 0, "pop: {reply}");
                let data = &reply["data"];
                if data.is_null() {
                    // Stop after 3 s without work once every push is in.
                    if done.load(std::sync::atomic::Ordering::SeqCst) {
                        let since = *idle_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > Duration::from_secs(3) {
                            return;
                        }
                    }
                    continue;
                }
                idle_since = None;
                let at_ms = now_ms();
                let id = data["id"].as_str().unwrap().to_string();
                let due_ms: u64 = data["body"].as_str().unwrap().parse().unwrap();
                let reply = post(&http, &format!("{url}/finish"), json!({"id": id})).await;
                assert_eq!(reply["code"], 0, "finish: {reply}");
                delivered
                    .lock()
                    .unwrap()
                    .entry(id)
                    .or_default()
                    .push(Delivery {
                        instance,
                        at_ms,
                        due_ms,
                    });
            }
        }));
    }

    for p in producers {
        p.await.unwrap();
    }
    producers_done.store(true, std::sync::atomic::Ordering::SeqCst);
    for c in consumers {
        c.await.unwrap();
    }

    let delivered = delivered.lock().unwrap();
    let mut lateness: Vec<u64> = Vec::new();
    let mut per_instance = vec![0usize; instances];
    for n in 0..jobs {
        let id = format!("{run}-{n}");
        let d = delivered
            .get(&id)
            .unwrap_or_else(|| panic!("job {id} was never delivered"));
        assert_eq!(
            d.len(),
            1,
            "job {id} delivered {} times within its TTR",
            d.len()
        );
        let d = &d[0];
        assert!(
            d.at_ms >= d.due_ms,
            "job {id} delivered {} ms early",
            d.due_ms - d.at_ms
        );
        lateness.push(d.at_ms - d.due_ms);
        per_instance[d.instance] += 1;
    }
    assert_eq!(delivered.len(), jobs, "deliveries of unknown ids");
    lateness.sort_unstable();
    let pct = |p: f64| lateness[((lateness.len() as f64 * p) as usize).min(lateness.len() - 1)];
    eprintln!(
        "{instances} instances, {jobs} jobs: lateness p50 {} ms, p99 {} ms, max {} ms (compat API: delays in whole seconds, measured from before the push); deliveries per instance {per_instance:?}",
        pct(0.5),
        pct(0.99),
        lateness.last().unwrap()
    );
    // Lateness figures belong to the benchmark (release build, no other load); here, on a
    // debug build sharing 2 cores with other tests, only a timer that stalls (it sleeps at most
    // TIMER_SAFETY_INTERVAL, 5 s, when it misses a wake-up) or a backlog that builds up is
    // caught. Compat-API delays are whole seconds and the due time is taken before the push, so
    // lateness includes the push's own latency; under CI's load (four test threads, Redis
    // Clusters among them) a p99 of 1.4 s has been seen, each consumer's poll lasting 1 s.
    assert!(pct(0.99) < 3_000, "p99 lateness {} ms", pct(0.99));
    assert!(
        per_instance.iter().all(|&n| n > 0),
        "every instance delivered work: {per_instance:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_deliver_every_job_once() {
    every_job_delivered_once(2, 1_000, 2, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_one_redis_deliver_every_job_once() {
    every_job_delivered_once(3, 1_500, 2, 250).await;
}

/// A topic's settings changed through one instance hold on the others at once, and a pause
/// survives a restart (kill -9) of every instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_control_set_on_one_instance_holds_on_all_and_survives_their_restart() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let url = redis.url();
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(DelayqProcess::start(&["--redis", &url]).await);
    }
    let http = reqwest::Client::new();
    let put = http
        .put(format!("{}/v1/topics/t/settings", servers[0].base_url))
        .json(&json!({"paused": true, "max_in_flight": 3}))
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success());
    let settings = json!({"paused": true, "rate_per_s": null, "burst": null, "max_in_flight": 3});
    for s in &servers {
        let got: Value = http
            .get(format!("{}/v1/topics/t/settings", s.base_url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(got, settings);
    }
    post(
        &http,
        &format!("{}/v1/jobs", servers[1].base_url),
        json!({"topic": "t", "id": "a"}),
    )
    .await;
    for s in &mut servers {
        s.restart().await;
    }
    for s in &servers {
        let r = post(
            &http,
            &format!("{}/v1/reserve", s.base_url),
            json!({"topics": ["t"], "timeout_ms": 300}),
        )
        .await;
        assert_eq!(r["jobs"], json!([]), "handed out while paused");
    }
    // A long poll on one instance is answered by a resume through another.
    let waiter = {
        let (http, url) = (http.clone(), servers[2].base_url.clone());
        tokio::spawn(async move {
            post(
                &http,
                &format!("{url}/v1/reserve"),
                json!({"topics": ["t"], "timeout_ms": 10_000}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resumed = Instant::now();
    let put = http
        .put(format!("{}/v1/topics/t/settings", servers[0].base_url))
        .json(&json!({"paused": false}))
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success());
    let r = waiter.await.unwrap();
    assert_eq!(r["jobs"][0]["id"], "a");
    assert!(
        resumed.elapsed() < Duration::from_secs(1),
        "{:?}",
        resumed.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: DELAYQ_SOAK_JOBS=50000 cargo test --release --test store multi_instance:: -- --ignored"]
async fn three_instances_soak() {
    let jobs = std::env::var("DELAYQ_SOAK_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    every_job_delivered_once(3, jobs, 5, 2_000).await;
}
