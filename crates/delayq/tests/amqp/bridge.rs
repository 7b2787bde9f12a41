//! The bridge's behaviour against the real broker: /v1 publish jobs and intake messages
//! arrive once and never early, unroutable targets are retried then dead, bad input is
//! refused with its reason, binary bodies and headers go along unchanged.

use crate::rabbit::{self, Collector, IntakeProducer, delay_headers, now_ms, text, unique};
use crate::support::process::DelayqProcess;
use lapin::options::{BasicPublishOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

/// A delayq process on a fresh embedded store, bridged to the broker at `url`, with intake
/// queue `intake`.
pub async fn delayq(dir: &tempfile::TempDir, url: &str, intake: &str) -> DelayqProcess {
    let data = dir.path().join("data");
    DelayqProcess::start(&[
        "--data-dir",
        data.to_str().unwrap(),
        "--amqp",
        url,
        "--amqp-intake",
        intake,
        "--amqp-publish-timeout",
        "5",
    ])
    .await
}

pub async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

pub async fn get(base: &str, path: &str) -> Value {
    reqwest::get(format!("{base}{path}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

pub async fn metrics(base: &str) -> String {
    reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of one sample in `/metrics` text (0 when absent).
pub fn sample(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Asserts that every id of `due` (id → earliest allowed arrival, ms) arrived exactly once
/// and none before its time.
pub fn assert_once_never_early(got: &[rabbit::Received], due: &HashMap<String, u64>) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut early = Vec::new();
    for r in got {
        *seen.entry(r.id.as_str()).or_default() += 1;
        match due.get(&r.id) {
            Some(&at) if r.at_ms < at => early.push((r.id.clone(), at - r.at_ms)),
            Some(_) => {}
            None => panic!("an unexpected message arrived: {:?}", r.id),
        }
    }
    let missing = due
        .keys()
        .filter(|id| !seen.contains_key(id.as_str()))
        .count();
    let twice = seen.values().filter(|&&n| n > 1).count();
    assert_eq!(
        missing,
        0,
        "{missing} of {} messages never arrived",
        due.len()
    );
    assert_eq!(twice, 0, "{twice} messages arrived more than once");
    assert!(
        early.is_empty(),
        "{} arrived early, e.g. {:?}",
        early.len(),
        &early[..early.len().min(5)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_v1_publish_jobs_arrive_once_never_early() {
    let queues = rabbit::queues().await;
    let (target, intake) = (queues.target.clone(), queues.intake.clone());
    let collector = Collector::start(&target).await;
    let dir = tempfile::TempDir::new().unwrap();
    let d = delayq(&dir, rabbit::URL, &intake).await;

    let n = 10_000usize;
    let mut due = HashMap::new();
    for batch in 0..n / 1000 {
        let sent = now_ms();
        let jobs: Vec<Value> = (0..1000)
            .map(|i| {
                let k = batch * 1000 + i;
                let delay = (k as u64 * 7919) % 5001;
                due.insert(format!("v1-{k}"), sent + delay);
                json!({"topic": "orders", "id": format!("v1-{k}"), "body": format!("order {k}"),
                       "delay_ms": delay,
                       "publish": {"exchange": "", "routing_key": target}})
            })
            .collect();
        let (status, body) = post(&d.base_url, "/v1/jobs/batch", json!({"jobs": jobs})).await;
        assert_eq!(status, 200, "{body}");
    }
    let got = collector.settled(n, Duration::from_secs(60)).await;
    assert!(got.len() >= n);
    assert_once_never_early(&got, &due);
    let r = &got[0];
    assert_eq!(r.header("x-delayq-topic"), Some(text("orders")));
    assert_eq!(
        r.header("x-delayq-attempt"),
        Some(AMQPValue::LongLongInt(1))
    );
    assert_eq!(*r.properties.delivery_mode(), Some(2));
    let m = metrics(&d.base_url).await;
    assert_eq!(
        sample(&m, "delayq_amqp_publishes_total{outcome=\"confirmed\"}"),
        n as f64
    );
    assert!(sample(&m, "delayq_amqp_confirm_duration_seconds_count") >= n as f64);
    drop(d);
    queues.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_intake_messages_arrive_once_never_early() {
    let queues = rabbit::queues().await;
    let (target, intake) = (queues.target.clone(), queues.intake.clone());
    let collector = Collector::start(&target).await;
    let dir = tempfile::TempDir::new().unwrap();
    let d = delayq(&dir, rabbit::URL, &intake).await;

    let producer = IntakeProducer::new(&intake).await;
    let n = 10_000usize;
    let mut due = HashMap::new();
    for chunk in 0..n / 500 {
        let sent = now_ms();
        for i in 0..500 {
            let k = chunk * 500 + i;
            let delay = (k as i64 * 7919) % 5001;
            let id = format!("in-{k}");
            due.insert(id.clone(), sent + delay as u64);
            let props = lapin::BasicProperties::default()
                .with_message_id(id.as_str().into())
                .with_delivery_mode(2)
                .with_headers(delay_headers(delay, &target));
            // Confirmed per chunk below.
            drop(
                producer
                    .ch
                    .basic_publish(
                        "".into(),
                        intake.as_str().into(),
                        BasicPublishOptions::default(),
                        format!("message {k}").as_bytes(),
                        props,
                    )
                    .await
                    .unwrap(),
            );
        }
        producer.ch.wait_for_confirms().await.unwrap();
    }
    let got = collector.settled(n, Duration::from_secs(60)).await;
    assert_once_never_early(&got, &due);
    let m = metrics(&d.base_url).await;
    assert_eq!(
        sample(&m, "delayq_amqp_intake_messages_total{outcome=\"stored\"}"),
        n as f64
    );
    drop(d);
    queues.delete().await;
}

/// Until `/v1/stats` counts `n` dead push-delivery jobs in topic `lost` (20 s at most).
async fn until_dead(base_url: &str, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let stats = get(base_url, "/v1/stats").await;
        if stats["callbacks"]["lost"]["dead"] == json!(n) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not {n} dead after retries: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unroutable_target_is_retried_then_dead_in_stats_and_others_go_on() {
    let queues = rabbit::queues().await;
    let (target, intake) = (queues.target.clone(), queues.intake.clone());
    let collector = Collector::start(&target).await;
    let dir = tempfile::TempDir::new().unwrap();
    let d = delayq(&dir, rabbit::URL, &intake).await;

    // No queue has this name: the default exchange returns the message.
    let (s, b) = post(
        &d.base_url,
        "/v1/jobs",
        json!({"topic": "lost", "id": "nowhere", "max_attempts": 2, "backoff_ms": [0],
               "publish": {"routing_key": unique("no-such-queue")}}),
    )
    .await;
    assert_eq!(s, 201, "{b}");
    until_dead(&d.base_url, 1).await;
    let job = get(&d.base_url, "/v1/jobs/nowhere").await;
    assert_eq!(job["state"], "dead");
    assert_eq!(job["attempts"], 2);
    assert!(job["publish"]["routing_key"].is_string(), "{job}");
    let m = metrics(&d.base_url).await;
    assert_eq!(
        sample(&m, "delayq_amqp_publishes_total{outcome=\"unroutable\"}"),
        2.0
    );
    // No such exchange: the broker closes the publishing channel; delayq opens another. (After
    // the first job is dead: a channel's closing also fails the publishes in flight on it, which
    // would then count as connection errors, not as unroutable.)
    let (s, b) = post(
        &d.base_url,
        "/v1/jobs",
        json!({"topic": "lost", "id": "no-exchange", "max_attempts": 2, "backoff_ms": [0],
               "publish": {"exchange": unique("no-such-exchange"), "routing_key": "x"}}),
    )
    .await;
    assert_eq!(s, 201, "{b}");
    until_dead(&d.base_url, 2).await;
    let m = metrics(&d.base_url).await;
    assert_eq!(
        sample(
            &m,
            "delayq_amqp_publishes_total{outcome=\"connection_error\"}"
        ),
        2.0
    );

    // Publishing goes on after both.
    let (s, _) = post(
        &d.base_url,
        "/v1/jobs",
        json!({"topic": "ok", "id": "after", "publish": {"routing_key": target}}),
    )
    .await;
    assert_eq!(s, 201);
    let got = collector.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, "after");
    drop(d);
    queues.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_intake_messages_are_dead_lettered_counted_and_the_intake_goes_on() {
    let conn = rabbit::connect().await;
    let ch = conn.create_channel().await.unwrap();
    let target = unique("target");
    let intake = unique("intake");
    let rejects = unique("rejects");
    let dlx = unique("dlx");
    rabbit::declare_queue(&ch, &target).await;
    rabbit::declare_queue(&ch, &rejects).await;
    ch.exchange_declare(
        dlx.as_str().into(),
        lapin::ExchangeKind::Fanout,
        lapin::options::ExchangeDeclareOptions {
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        rejects.as_str().into(),
        dlx.as_str().into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    // The intake queue, with a dead-letter exchange, made before delayq starts.
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), text(&dlx));
    args.insert("x-expires".into(), AMQPValue::LongLongInt(600_000));
    ch.queue_declare(intake.as_str().into(), QueueDeclareOptions::durable(), args)
        .await
        .unwrap();
    let collector = Collector::start(&target).await;
    let rejected = Collector::start(&rejects).await;
    let dir = tempfile::TempDir::new().unwrap();
    let d = delayq(&dir, rabbit::URL, &intake).await;
    let producer = IntakeProducer::new(&intake).await;

    let with_delay = |v: AMQPValue| {
        let mut h = delay_headers(0, &target);
        h.insert("x-delay".into(), v);
        h
    };
    producer
        .send(
            Some("negative"),
            with_delay(AMQPValue::LongLongInt(-1)),
            b"x",
        )
        .await;
    producer
        .send(Some("text"), with_delay(text("soon")), b"x")
        .await;
    producer
        .send(
            Some("year-10000"),
            with_delay(AMQPValue::LongLongInt(300_000_000_000_000)),
            b"x",
        )
        .await;
    let mut no_key = FieldTable::default();
    no_key.insert("x-delay".into(), AMQPValue::LongInt(10));
    producer.send(Some("no-key"), no_key, b"x").await;
    let mut no_delay = FieldTable::default();
    no_delay.insert("x-delayq-routing-key".into(), text(&target));
    producer.send(Some("no-delay"), no_delay, b"x").await;
    // A good one after them all, with a binary body, a content type and its own headers.
    let mut good = delay_headers(100, &target);
    good.insert("trace-id".into(), text("t-42"));
    good.insert("n".into(), AMQPValue::LongInt(-7));
    let body = [0u8, 159, 146, 150, 255];
    let props = lapin::BasicProperties::default()
        .with_message_id("good".into())
        .with_content_type("application/octet-stream".into())
        .with_headers(good);
    let sent = now_ms();
    producer
        .ch
        .basic_publish(
            "".into(),
            intake.as_str().into(),
            BasicPublishOptions::default(),
            &body,
            props,
        )
        .await
        .unwrap()
        .await
        .unwrap();

    let got = collector.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(r.id, "good");
    assert!(r.at_ms >= sent + 100);
    assert_eq!(r.body, body);
    assert_eq!(
        r.properties.content_type().as_ref().map(|c| c.as_str()),
        Some("application/octet-stream")
    );
    assert_eq!(r.header("trace-id"), Some(text("t-42")));
    assert_eq!(r.header("n"), Some(AMQPValue::LongInt(-7)));
    assert_eq!(r.header("x-delay"), None);

    let dead = rejected.wait_for(5, Duration::from_secs(10)).await;
    let mut ids: Vec<&str> = dead.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    assert_eq!(
        ids,
        ["negative", "no-delay", "no-key", "text", "year-10000"]
    );
    let m = metrics(&d.base_url).await;
    assert_eq!(
        sample(
            &m,
            "delayq_amqp_intake_messages_total{outcome=\"rejected_delay\"}"
        ),
        4.0
    );
    assert_eq!(
        sample(
            &m,
            "delayq_amqp_intake_messages_total{outcome=\"rejected_routing_key\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(&m, "delayq_amqp_intake_messages_total{outcome=\"stored\"}"),
        1.0
    );
    drop(d);
    for q in [&target, &intake, &rejects] {
        rabbit::delete_queue(&ch, q).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_publish_fields_are_400_naming_the_field() {
    let dir = tempfile::TempDir::new().unwrap();
    let intake = unique("intake");
    let d = delayq(&dir, rabbit::URL, &intake).await;
    for (body, field) in [
        (
            json!({"topic": "t", "publish": {"exchange": "x"}}),
            "publish.routing_key",
        ),
        (
            json!({"topic": "t", "publish": {"routing_key": 5}}),
            "publish.routing_key",
        ),
        (
            json!({"topic": "t", "publish": {"routing_key": "r", "extra": 1}}),
            "publish.extra",
        ),
        (
            json!({"topic": "t", "publish": {"routing_key": "k".repeat(256)}}),
            "publish.routing_key",
        ),
        (
            json!({"topic": "t", "publish": {"routing_key": "r"},
                   "callback": {"url": "https://example.com/x"}}),
            "publish",
        ),
        (
            json!({"topic": "t", "id": "é".repeat(200), "publish": {"routing_key": "r"}}),
            "id",
        ),
    ] {
        let (s, b) = post(&d.base_url, "/v1/jobs", body.clone()).await;
        assert_eq!(s, 400, "{body}: {b}");
        assert!(
            b.to_string().contains(field),
            "{body}: {b} should name {field}"
        );
    }
    let stats = get(&d.base_url, "/v1/stats").await;
    assert_eq!(stats["callbacks"], json!({}), "nothing was stored");
    let conn = rabbit::connect().await;
    let ch = conn.create_channel().await.unwrap();
    drop(d);
    rabbit::delete_queue(&ch, &intake).await;

    // A server without --amqp refuses publish jobs.
    let plain = DelayqProcess::start(&["--memory"]).await;
    let (s, b) = post(
        &plain.base_url,
        "/v1/jobs",
        json!({"topic": "t", "publish": {"routing_key": "r"}}),
    )
    .await;
    assert_eq!(s, 400);
    assert!(b.to_string().contains("--amqp"), "{b}");
}

#[test]
fn a_bad_amqp_url_at_start_is_one_error_line_naming_the_setting() {
    for url in [
        "http://127.0.0.1:5672",
        "amqp://guest:secret@[::1",
        "nonsense",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--memory",
                "--amqp",
                url,
            ])
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{url} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
        assert_eq!(errors.len(), 1, "one error line: {stderr}");
        assert!(errors[0].contains("amqp"), "{}", errors[0]);
        assert!(!errors[0].contains("secret"), "{}", errors[0]);
    }
}
