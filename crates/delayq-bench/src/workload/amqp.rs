//! RabbitMQ delayed messages (`delayq-bench amqp`): a paced stream of delayed messages sent to
//! RabbitMQ, and the time each reaches the target queue. Two systems behind the same broker:
//!
//! - `delayq`: messages to delayq's intake queue with `x-delay` and `x-delayq-routing-key`
//!   (docs/rabbitmq.md); delayq stores them and publishes each when due.
//! - `ttl-dlx`: RabbitMQ alone, the usual method without the delayed-message plugin: messages
//!   with a per-message TTL (`expiration` = the delay) to a queue nobody consumes, whose
//!   dead-letter exchange routes them to the target when they expire. RabbitMQ only expires
//!   messages at the head of a queue, so with differing delays a long one holds back the short
//!   ones behind it.
//!
//! Every message is sent persistent and confirmed, and consumed from the target with
//! acknowledgements off. Reports: messages per second reaching the target (from the first send
//! to the last arrival), lateness of arrival against `send + delay` (the bench's clock; the
//! broker and delayq are on the same machine), early, lost and duplicate counts.

use crate::report::RunResult;
use crate::stats::{Lateness, Summary};
use anyhow::{Context, Result, bail};
use futures::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Which system delays the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum System {
    /// delayq's intake (a delayq started with `--amqp` and `--amqp-intake`).
    Delayq,
    /// RabbitMQ's per-message TTL and a dead-letter exchange.
    TtlDlx,
}

#[derive(Debug, Clone, clap::Args)]
pub struct Params {
    /// The broker.
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub amqp: String,
    #[arg(long, value_enum, default_value_t = System::Delayq)]
    pub system: System,
    /// delayq's intake queue (`--amqp-intake` of the delayq under test).
    #[arg(long, default_value = "delayq.intake")]
    pub intake: String,
    /// Messages sent per second.
    #[arg(long, default_value_t = 2000)]
    pub rate: u64,
    /// Seconds of sending.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Each message's delay, ms: fixed, or uniform in [delay-ms, max-delay-ms] when that is set.
    #[arg(long, default_value_t = 2000)]
    pub delay_ms: u64,
    #[arg(long)]
    pub max_delay_ms: Option<u64>,
    /// How long to wait for the last messages after the last due time, s.
    #[arg(long, default_value_t = 30)]
    pub drain_s: u64,
    /// The label of the result line.
    #[arg(long)]
    pub label: Option<String>,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Runs the workload; the result line's label is `--label` or the system's name.
pub async fn run(p: &Params) -> Result<RunResult> {
    if p.rate == 0 || p.seconds == 0 {
        bail!("--rate and --seconds must be at least 1");
    }
    let conn = Connection::connect(&p.amqp, ConnectionProperties::default())
        .await
        .context("connect to RabbitMQ")?;
    let ch = conn.create_channel().await?;
    let tag = format!("{:x}", now_us());
    let target = format!("delayq-bench.target.{tag}");
    let wait = format!("delayq-bench.wait.{tag}");
    ch.queue_declare(
        target.as_str().into(),
        QueueDeclareOptions::durable(),
        FieldTable::default(),
    )
    .await?;
    if p.system == System::TtlDlx {
        let mut args = FieldTable::default();
        args.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString(LongString::from("")),
        );
        args.insert(
            "x-dead-letter-routing-key".into(),
            AMQPValue::LongString(LongString::from(target.as_str())),
        );
        ch.queue_declare(wait.as_str().into(), QueueDeclareOptions::durable(), args)
            .await?;
    }
    let n = (p.rate * p.seconds) as usize;
    // Per message: its due time (µs) once sent, and arrivals.
    let due: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(vec![0; n]));
    let arrivals: Arc<Mutex<Vec<(usize, u64)>>> = Arc::new(Mutex::new(Vec::with_capacity(n)));

    let consumer_ch = conn.create_channel().await?;
    let mut consumer = consumer_ch
        .basic_consume(
            target.as_str().into(),
            "".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..BasicConsumeOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    let into = arrivals.clone();
    let consuming = tokio::spawn(async move {
        while let Some(Ok(d)) = consumer.next().await {
            let at = now_us();
            if let Ok(i) = std::str::from_utf8(&d.data).unwrap_or("").parse::<usize>() {
                into.lock().unwrap().push((i, at));
            }
        }
    });

    let publisher = conn.create_channel().await?;
    publisher
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let started = Instant::now();
    let first_send = now_us();
    let tick = Duration::from_millis(10);
    let per_tick = (p.rate as f64 * tick.as_secs_f64()).max(1.0);
    let mut sent = 0usize;
    let mut rng = fastrand::Rng::with_seed(7);
    let mut next = tokio::time::Instant::now();
    let mut owed = 0.0f64;
    while sent < n {
        owed += per_tick;
        while owed >= 1.0 && sent < n {
            owed -= 1.0;
            let delay = match p.max_delay_ms {
                Some(max) if max > p.delay_ms => rng.u64(p.delay_ms..=max),
                _ => p.delay_ms,
            };
            let body = sent.to_string();
            let (queue, props) = match p.system {
                System::Delayq => {
                    let mut h = FieldTable::default();
                    h.insert("x-delay".into(), AMQPValue::LongLongInt(delay as i64));
                    h.insert(
                        "x-delayq-routing-key".into(),
                        AMQPValue::LongString(LongString::from(target.as_str())),
                    );
                    (
                        p.intake.as_str(),
                        BasicProperties::default()
                            .with_delivery_mode(2)
                            .with_message_id(body.as_str().into())
                            .with_headers(h),
                    )
                }
                System::TtlDlx => (
                    wait.as_str(),
                    BasicProperties::default()
                        .with_delivery_mode(2)
                        .with_message_id(body.as_str().into())
                        .with_expiration(delay.to_string().as_str().into()),
                ),
            };
            due.lock().unwrap()[sent] = now_us() + delay * 1000;
            drop(
                publisher
                    .basic_publish(
                        "".into(),
                        queue.into(),
                        BasicPublishOptions::default(),
                        body.as_bytes(),
                        props,
                    )
                    .await?,
            );
            sent += 1;
        }
        next += tick;
        tokio::time::sleep_until(next).await;
    }
    publisher.wait_for_confirms().await?;
    let send_s = started.elapsed().as_secs_f64();
    let last_due = due.lock().unwrap().iter().copied().max().unwrap_or(0);
    let deadline = Instant::now()
        + Duration::from_micros(last_due.saturating_sub(now_us()))
        + Duration::from_secs(p.drain_s);
    while Instant::now() < deadline {
        let got = arrivals.lock().unwrap().len();
        if got >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    consuming.abort();

    let due = due.lock().unwrap().clone();
    let arrivals = arrivals.lock().unwrap().clone();
    let mut lateness = Lateness::new();
    let mut seen: HashMap<usize, u32> = HashMap::new();
    let mut last_arrival = first_send;
    for &(i, at) in &arrivals {
        if i >= n {
            continue;
        }
        let c = seen.entry(i).or_default();
        *c += 1;
        if *c == 1 {
            lateness.record(at, due[i]);
            last_arrival = last_arrival.max(at);
        }
    }
    let lost = n - seen.len();
    let duplicates: u64 = seen.values().map(|&c| u64::from(c - 1)).sum();
    let late: Summary = lateness.late_summary();
    let early: Summary = lateness.early_summary();
    let span_s = (last_arrival - first_send) as f64 / 1e6;

    let cleanup = conn.create_channel().await?;
    for q in [&target, &wait] {
        let _ = cleanup
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    let label = p.label.clone().unwrap_or_else(|| match p.system {
        System::Delayq => "delayq".into(),
        System::TtlDlx => "rabbitmq-ttl-dlx".into(),
    });
    let mut r = RunResult {
        workload: "amqp".into(),
        label,
        target: match p.system {
            System::Delayq => "delayq".into(),
            System::TtlDlx => "rabbitmq".into(),
        },
        api: "amqp".into(),
        params: BTreeMap::new(),
        metrics: BTreeMap::new(),
        notes: Vec::new(),
    };
    for (k, v) in [
        ("rate", serde_json::json!(p.rate)),
        ("seconds", serde_json::json!(p.seconds)),
        ("delay_ms", serde_json::json!(p.delay_ms)),
        ("max_delay_ms", serde_json::json!(p.max_delay_ms)),
    ] {
        r.params.insert(k.into(), v);
    }
    for (k, v) in [
        ("messages", n as f64),
        ("sent_per_s", n as f64 / send_s),
        ("arrived_per_s", seen.len() as f64 / span_s.max(1e-9)),
        ("lateness_p50_ms", late.p50_ms),
        ("lateness_p99_ms", late.p99_ms),
        ("lateness_p999_ms", late.p999_ms),
        ("lateness_max_ms", late.max_ms),
        ("early", early.count as f64),
        ("early_max_ms", early.max_ms),
        ("lost", lost as f64),
        ("duplicates", duplicates as f64),
    ] {
        r.metrics.insert(k.into(), v);
    }
    Ok(r)
}
