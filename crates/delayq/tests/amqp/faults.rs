//! Faults under load: the broker's connection cut for 10 s (through a loopback proxy), kill -9
//! of delayq, and two instances on one Redis sharing the intake and the publishing.

use crate::bridge::{assert_once_never_early, metrics, post, sample};
use crate::rabbit::{self, Collector, Proxy, delay_headers, now_ms};
use crate::support::process::DelayqProcess;
use crate::support::redis_server::RedisServer;
use lapin::options::BasicPublishOptions;
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

/// Sends `n` intake messages `prefix-<k>` with delays 0..=`max_delay` ms over `spread`,
/// confirmed; returns each id's earliest allowed arrival.
async fn send_intake(
    intake: &str,
    target: &str,
    prefix: &str,
    n: usize,
    max_delay: i64,
    spread: Duration,
) -> HashMap<String, u64> {
    let producer = rabbit::IntakeProducer::new(intake).await;
    let mut due = HashMap::new();
    let chunks = 20;
    for c in 0..chunks {
        let sent = now_ms();
        for i in 0..n / chunks {
            let k = c * (n / chunks) + i;
            let delay = (k as i64 * 7919) % (max_delay + 1);
            let id = format!("{prefix}-{k}");
            due.insert(id.clone(), sent + delay as u64);
            let props = lapin::BasicProperties::default()
                .with_message_id(id.as_str().into())
                .with_delivery_mode(2)
                .with_headers(delay_headers(delay, target));
            drop(
                producer
                    .ch
                    .basic_publish(
                        "".into(),
                        intake.into(),
                        BasicPublishOptions::default(),
                        id.as_bytes(),
                        props,
                    )
                    .await
                    .unwrap(),
            );
        }
        producer.ch.wait_for_confirms().await.unwrap();
        tokio::time::sleep(spread / chunks as u32).await;
    }
    due
}

/// Every id of `due` arrived at least once, none early; returns how many arrived twice.
fn assert_all_at_least_once(got: &[rabbit::Received], due: &HashMap<String, u64>) -> usize {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for r in got {
        *seen.entry(r.id.as_str()).or_default() += 1;
        if let Some(&at) = due.get(&r.id) {
            assert!(r.at_ms >= at, "{} arrived {} ms early", r.id, at - r.at_ms);
        }
    }
    let missing: Vec<&String> = due
        .keys()
        .filter(|id| !seen.contains_key(id.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} never arrived, e.g. {:?}",
        missing.len(),
        due.len(),
        &missing[..missing.len().min(5)]
    );
    seen.values().filter(|&&n| n > 1).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_cut_for_10_s_under_load_loses_nothing_and_both_sides_resume() {
    let queues = rabbit::queues().await;
    let (target, intake) = (queues.target.clone(), queues.intake.clone());
    let collector = Collector::start(&target).await;
    let proxy = Proxy::start().await;
    let dir = tempfile::TempDir::new().unwrap();
    let d = crate::bridge::delayq(&dir, &proxy.url(), &intake).await;

    // /v1 publish jobs due during the cut, and intake messages sent before, during and after.
    let sent = now_ms();
    let mut due = HashMap::new();
    let jobs: Vec<_> = (0..1000)
        .map(|k| {
            let delay = 1000 + (k * 13) % 4000;
            due.insert(format!("v1-{k}"), sent + delay);
            json!({"topic": "cut", "id": format!("v1-{k}"), "delay_ms": delay,
                   "publish": {"routing_key": target}})
        })
        .collect();
    let (s, b) = post(&d.base_url, "/v1/jobs/batch", json!({"jobs": jobs})).await;
    assert_eq!(s, 200, "{b}");
    let cut = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.cut_and_refuse();
        tokio::time::sleep(Duration::from_secs(10)).await;
        proxy.restore();
    };
    let load = send_intake(&intake, &target, "in", 3000, 3000, Duration::from_secs(16));
    let ((), intake_due) = tokio::join!(cut, load);
    due.extend(intake_due);
    let got = collector.settled(due.len(), Duration::from_secs(60)).await;
    let twice = assert_all_at_least_once(&got, &due);
    eprintln!(
        "{} messages, {twice} published twice (at least once across the cut)",
        due.len()
    );
    let m = metrics(&d.base_url).await;
    assert_eq!(sample(&m, "delayq_amqp_up"), 1.0, "reconnected");
    drop(d);
    queues.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_publishes_every_acked_intake_message() {
    let queues = rabbit::queues().await;
    let (target, intake) = (queues.target.clone(), queues.intake.clone());
    let collector = Collector::start(&target).await;
    let dir = tempfile::TempDir::new().unwrap();
    let mut d = crate::bridge::delayq(&dir, rabbit::URL, &intake).await;

    let kill = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        d.kill();
        tokio::time::sleep(Duration::from_secs(1)).await;
        d.restart().await;
    };
    let load = send_intake(&intake, &target, "k", 4000, 4000, Duration::from_secs(6));
    let ((), due) = tokio::join!(kill, load);
    // Messages taken before the kill and not acked are redelivered; jobs reserved at the kill
    // are published again after their TTR (publish timeout 5 s + 5 s).
    let got = collector.settled(due.len(), Duration::from_secs(60)).await;
    let twice = assert_all_at_least_once(&got, &due);
    eprintln!(
        "{} messages, {twice} published twice (at least once across kill -9)",
        due.len()
    );
    drop(d);
    queues.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_share_the_intake_and_publish_each_once() {
    let queues = rabbit::queues().await;
    let (target, intake) = (queues.target.clone(), queues.intake.clone());
    let collector = Collector::start(&target).await;
    let redis = RedisServer::start();
    let args = [
        "--redis",
        &redis.url(),
        "--amqp",
        rabbit::URL,
        "--amqp-intake",
        &intake,
    ];
    let a = DelayqProcess::start(&args).await;
    let b = DelayqProcess::start(&args).await;

    let due = send_intake(&intake, &target, "two", 4000, 3000, Duration::from_secs(2)).await;
    let got = collector.settled(due.len(), Duration::from_secs(60)).await;
    assert_once_never_early(&got, &due);
    let (ma, mb) = (metrics(&a.base_url).await, metrics(&b.base_url).await);
    let stored = |m: &str| sample(m, "delayq_amqp_intake_messages_total{outcome=\"stored\"}");
    let published = |m: &str| sample(m, "delayq_amqp_publishes_total{outcome=\"confirmed\"}");
    assert_eq!(stored(&ma) + stored(&mb), 4000.0);
    assert!(
        stored(&ma) > 0.0 && stored(&mb) > 0.0,
        "both took intake messages"
    );
    assert_eq!(published(&ma) + published(&mb), 4000.0);
    assert!(
        published(&ma) > 0.0 && published(&mb) > 0.0,
        "both published"
    );
    drop((a, b));
    queues.delete().await;
}
