//! The intake: delayed messages consumed from `--amqp-intake` become publish jobs.
//!
//! A message's header `x-delay` (milliseconds, an integer ≥ 0, the delayed-message-exchange
//! plugin's own header) is its delay; `x-delayq-exchange` (default "") and
//! `x-delayq-routing-key` (required) say where it is published when due; `x-delayq-topic`, when
//! present, is the job's topic (else the routing key). The body, content type and the other
//! headers go along unchanged (a body that is not UTF-8 is kept as base64, `Publish::body_base64`).
//! `message_id`, when present, is the job id, and a message with the id of a job that exists
//! replaces it (`PushMode::Replace`), so a redelivered message never makes two jobs.
//!
//! Each message is acked only after `Store::push` returned (the store's own durability: the
//! embedded store fsynced, Redis ran the script), so a crash in between redelivers it. An
//! invalid message is rejected without requeue (to the queue's dead-letter exchange, if it has
//! one), counted by reason and logged (at most once a second per reason); a store error
//! requeues the message after a pause. Messages are stored concurrently, up to the prefetch.

use super::AmqpOptions;
use crate::clock::{Clock, Reading};
use crate::job::{self, JobId, JobSpec, Publish, Topic};
use crate::metrics::Metrics;
use crate::store::{PushMode, Store};
use base64::Engine as _;
use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicConsumeOptions, BasicNackOptions, BasicRejectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Connection};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::task::TaskTracker;

/// The delay header (the delayed-message-exchange plugin's).
pub const DELAY_HEADER: &str = "x-delay";
/// Where the job is published when due.
pub const EXCHANGE_HEADER: &str = "x-delayq-exchange";
pub const ROUTING_KEY_HEADER: &str = "x-delayq-routing-key";
/// The job's topic (optional).
pub const TOPIC_HEADER: &str = super::publish::TOPIC_HEADER;
/// How long a message the store could not take waits before it is requeued.
const STORE_RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Rejections of one reason are logged at most this often.
const REJECT_LOG_EVERY: Duration = Duration::from_secs(1);

/// Why a message was rejected: the metric's outcome and the log's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub outcome: &'static str,
    pub reason: String,
}

impl Rejection {
    fn delay(reason: impl Into<String>) -> Rejection {
        Rejection {
            outcome: "rejected_delay",
            reason: format!("{DELAY_HEADER}: {}", reason.into()),
        }
    }

    fn routing_key(reason: impl Into<String>) -> Rejection {
        Rejection {
            outcome: "rejected_routing_key",
            reason: format!("{ROUTING_KEY_HEADER}: {}", reason.into()),
        }
    }

    fn message(reason: impl Into<String>) -> Rejection {
        Rejection {
            outcome: "rejected_message",
            reason: reason.into(),
        }
    }
}

/// What the intake needs to turn a message into a job.
#[derive(Debug, Clone)]
pub struct IntakeRules {
    pub max_body_bytes: usize,
    /// One publish attempt's limit (a publish job's TTR is at least this plus a grace).
    pub publish_timeout_ms: u64,
}

/// The job an intake message received at `now` asks for, or why it is rejected.
pub fn job_of(
    properties: &BasicProperties,
    body: &[u8],
    now: Reading,
    rules: &IntakeRules,
) -> Result<JobSpec, Rejection> {
    let mut headers: BTreeMap<ShortString, AMQPValue> = properties
        .headers()
        .as_ref()
        .map(|h| h.inner().clone())
        .unwrap_or_default();
    let mut take = |name: &str| headers.remove(name);
    let delay = match take(DELAY_HEADER) {
        None => return Err(Rejection::delay("missing")),
        Some(v) => integer(&v).ok_or_else(|| Rejection::delay(format!("not an integer: {v:?}")))?,
    };
    let delay = u64::try_from(delay)
        .map_err(|_| Rejection::delay(format!("must be 0 or more, got {delay}")))?;
    let run_at = now.due_after(delay);
    job::validate_run_at(run_at).map_err(|_| {
        Rejection::delay(format!("{delay} ms puts the due time after the year 9999"))
    })?;
    let routing_key = match take(ROUTING_KEY_HEADER) {
        None => return Err(Rejection::routing_key("missing")),
        Some(v) => text(&v).ok_or_else(|| Rejection::routing_key("not a string"))?,
    };
    let exchange = match take(EXCHANGE_HEADER) {
        None => String::new(),
        Some(v) => text(&v)
            .ok_or_else(|| Rejection::message(format!("{EXCHANGE_HEADER}: not a string")))?,
    };
    let topic = match take(TOPIC_HEADER) {
        Some(v) => {
            let t = text(&v)
                .ok_or_else(|| Rejection::message(format!("{TOPIC_HEADER}: not a string")))?;
            Topic::parse(t).map_err(|e| Rejection::message(format!("{TOPIC_HEADER}: {e}")))?
        }
        None => Topic::parse(routing_key.clone()).map_err(|e| {
            Rejection::message(format!(
                "no {TOPIC_HEADER}, and the routing key is not a topic name: {e}"
            ))
        })?,
    };
    let id = match properties.message_id() {
        Some(id) => {
            JobId::parse(id.as_str()).map_err(|e| Rejection::message(format!("message_id: {e}")))?
        }
        None => JobId::generate(),
    };
    let (body, body_base64) = match std::str::from_utf8(body) {
        Ok(s) => (s.to_string(), false),
        Err(_) => (base64::engine::general_purpose::STANDARD.encode(body), true),
    };
    let headers = if headers.is_empty() {
        None
    } else {
        Some(
            serde_json::to_string(&FieldTable::from(headers))
                .map_err(|e| Rejection::message(format!("headers cannot be kept: {e}")))?,
        )
    };
    let publish = Publish {
        exchange,
        routing_key,
        content_type: properties.content_type().as_ref().map(|c| c.to_string()),
        headers,
        body_base64,
    };
    let mut spec = JobSpec::new(topic, id, body, run_at);
    spec.with_publish_defaults(publish, rules.publish_timeout_ms, None, None, None);
    spec.validate(rules.max_body_bytes)
        .map_err(|e| Rejection::message(e.to_string()))?;
    Ok(spec)
}

/// An AMQP integer of any width.
fn integer(v: &AMQPValue) -> Option<i128> {
    Some(match v {
        AMQPValue::ShortShortInt(n) => i128::from(*n),
        AMQPValue::ShortShortUInt(n) => i128::from(*n),
        AMQPValue::ShortInt(n) => i128::from(*n),
        AMQPValue::ShortUInt(n) => i128::from(*n),
        AMQPValue::LongInt(n) => i128::from(*n),
        AMQPValue::LongUInt(n) => i128::from(*n),
        AMQPValue::LongLongInt(n) => i128::from(*n),
        _ => return None,
    })
}

/// An AMQP string (long or short, UTF-8).
fn text(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => String::from_utf8(s.as_bytes().to_vec()).ok(),
        AMQPValue::ShortString(s) => Some(s.to_string()),
        _ => None,
    }
}

/// The intake's consumer side: stores messages as jobs and acks them.
pub(super) struct Intake {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    queue: String,
    rules: IntakeRules,
    /// Messages being stored.
    tasks: TaskTracker,
    /// Per rejection outcome: when it was last logged, and how many since.
    logged: Mutex<HashMap<&'static str, (Instant, u64)>>,
}

impl Intake {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        options: &AmqpOptions,
    ) -> Arc<Intake> {
        Arc::new(Intake {
            store,
            clock,
            metrics,
            queue: options.intake.clone(),
            rules: IntakeRules {
                max_body_bytes: options.max_body_bytes,
                publish_timeout_ms: u64::try_from(options.publish_timeout.as_millis())
                    .unwrap_or(u64::MAX),
            },
            tasks: TaskTracker::new(),
            logged: Mutex::new(HashMap::new()),
        })
    }

    /// Declares the intake queue (durable) unless it exists, with whatever arguments it
    /// has, and starts consuming it with manual acks on `channel` (its prefetch set).
    pub async fn consume(
        &self,
        conn: &Connection,
        channel: &lapin::Channel,
    ) -> Result<lapin::Consumer, String> {
        // A passive declare fails (closing its channel) when the queue is missing; declaring
        // an existing queue with other arguments (a dead-letter exchange) would fail too.
        let probe = conn.create_channel().await.map_err(|e| e.to_string())?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let exists = probe
            .queue_declare(self.queue.as_str().into(), passive, FieldTable::default())
            .await
            .is_ok();
        if exists {
            let _ = probe.close(200, "".into()).await;
        } else {
            channel
                .queue_declare(
                    self.queue.as_str().into(),
                    QueueDeclareOptions::durable(),
                    FieldTable::default(),
                )
                .await
                .map_err(|e| format!("cannot declare the intake queue {:?}: {e}", self.queue))?;
        }
        channel
            .basic_consume(
                self.queue.as_str().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| format!("cannot consume the intake queue {:?}: {e}", self.queue))
    }

    /// Takes messages until the consumer ends; returns why.
    pub async fn run(self: &Arc<Self>, mut consumer: lapin::Consumer) -> String {
        while let Some(next) = consumer.next().await {
            match next {
                Ok(delivery) => {
                    let intake = self.clone();
                    self.tasks.spawn(async move { intake.take(delivery).await });
                }
                Err(e) => return format!("intake consumer: {e}"),
            }
        }
        "the intake consumer was cancelled".into()
    }

    /// Waits (a little) for messages being stored; the rest are redelivered.
    pub async fn drain(&self) {
        self.tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.tasks.wait()).await;
    }

    async fn take(&self, delivery: Delivery) {
        let now = self.clock.read();
        let spec = match job_of(&delivery.properties, &delivery.data, now, &self.rules) {
            Ok(spec) => spec,
            Err(r) => {
                self.metrics.amqp_intake(r.outcome);
                self.log_rejection(&r, &delivery);
                // A failed reject: the message comes back when the channel closes, and is
                // rejected again then.
                let _ = delivery
                    .acker
                    .reject(BasicRejectOptions { requeue: false })
                    .await;
                return;
            }
        };
        match self.store.push(spec, PushMode::Replace, now.millis()).await {
            Ok(_) => {
                self.metrics.amqp_intake("stored");
                // A lost ack redelivers the message, which replaces the job.
                let _ = delivery
                    .acker
                    .ack(lapin::options::BasicAckOptions::default())
                    .await;
            }
            Err(e) => {
                self.metrics.amqp_intake("store_error");
                tracing::warn!(error = %e, "RabbitMQ intake: cannot store a message; requeued");
                tokio::time::sleep(STORE_RETRY_PAUSE).await;
                let _ = delivery
                    .acker
                    .nack(BasicNackOptions {
                        requeue: true,
                        multiple: false,
                    })
                    .await;
            }
        }
    }

    fn log_rejection(&self, r: &Rejection, delivery: &Delivery) {
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let entry = logged
            .entry(r.outcome)
            .or_insert((now - REJECT_LOG_EVERY, 0));
        entry.1 += 1;
        if now.duration_since(entry.0) >= REJECT_LOG_EVERY {
            tracing::warn!(
                queue = %self.queue,
                message_id = delivery.properties.message_id().as_ref().map(|m| m.as_str()),
                reason = %r.reason,
                rejected_since_last_log = entry.1,
                "RabbitMQ intake: message rejected (not requeued)"
            );
            *entry = (now, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::LongString;

    const NOW: Reading = Reading::at_micros(1_700_000_000_000_000);

    fn rules() -> IntakeRules {
        IntakeRules {
            max_body_bytes: 1024,
            publish_timeout_ms: 30_000,
        }
    }

    fn props(pairs: &[(&str, AMQPValue)]) -> BasicProperties {
        let mut t = FieldTable::default();
        for (k, v) in pairs {
            t.insert(ShortString::from(*k), v.clone());
        }
        BasicProperties::default().with_headers(t)
    }

    fn s(v: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(v))
    }

    #[test]
    fn a_message_becomes_a_publish_job_with_its_delay_and_other_headers() {
        let p = props(&[
            (DELAY_HEADER, AMQPValue::LongLongInt(5_000)),
            (ROUTING_KEY_HEADER, s("order.cancel")),
            (EXCHANGE_HEADER, s("orders")),
            ("trace", s("abc")),
        ])
        .with_message_id("m-1".into())
        .with_content_type("application/json".into());
        let j = job_of(&p, b"{\"a\":1}", NOW, &rules()).unwrap();
        assert_eq!(j.id.as_str(), "m-1");
        assert_eq!(j.topic.as_str(), "order.cancel");
        assert_eq!(j.run_at, 1_700_000_000_000 + 5_000);
        assert_eq!(j.body, "{\"a\":1}");
        let publish = j.publish.unwrap();
        assert_eq!(
            (publish.exchange.as_str(), publish.routing_key.as_str()),
            ("orders", "order.cancel")
        );
        assert_eq!(publish.content_type.as_deref(), Some("application/json"));
        assert!(!publish.body_base64);
        let kept: FieldTable = serde_json::from_str(publish.headers.as_deref().unwrap()).unwrap();
        assert_eq!(
            kept.inner().keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["trace"]
        );
    }

    #[test]
    fn a_binary_body_is_kept_as_base64_and_a_topic_header_wins() {
        let p = props(&[
            (DELAY_HEADER, AMQPValue::ShortShortUInt(0)),
            (ROUTING_KEY_HEADER, s("q")),
            (TOPIC_HEADER, s("billing")),
        ]);
        let j = job_of(&p, &[0xff, 0, 1], NOW, &rules()).unwrap();
        assert_eq!(j.topic.as_str(), "billing");
        assert_eq!(j.run_at, 1_700_000_000_000);
        assert!(j.publish.as_ref().unwrap().body_base64);
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(&j.body)
                .unwrap(),
            [0xff, 0, 1]
        );
        assert!(j.publish.unwrap().headers.is_none());
    }

    #[test]
    fn bad_delays_and_routing_keys_are_rejected_with_their_reason() {
        let rk = (ROUTING_KEY_HEADER, s("q"));
        let outcome = |p: BasicProperties| job_of(&p, b"x", NOW, &rules()).unwrap_err().outcome;
        for bad in [
            AMQPValue::LongLongInt(-1),
            s("5000"),
            AMQPValue::Double(5.0),
            AMQPValue::LongLongInt(i64::MAX),
        ] {
            assert_eq!(
                outcome(props(&[(DELAY_HEADER, bad.clone()), rk.clone()])),
                "rejected_delay",
                "{bad:?}"
            );
        }
        assert_eq!(outcome(props(std::slice::from_ref(&rk))), "rejected_delay");
        assert_eq!(
            outcome(props(&[(DELAY_HEADER, AMQPValue::LongInt(1))])),
            "rejected_routing_key"
        );
        assert_eq!(
            outcome(props(&[
                (DELAY_HEADER, AMQPValue::LongInt(1)),
                (ROUTING_KEY_HEADER, AMQPValue::LongInt(1))
            ])),
            "rejected_routing_key"
        );
        assert_eq!(
            outcome(props(&[
                (DELAY_HEADER, AMQPValue::LongInt(1)),
                (ROUTING_KEY_HEADER, s("a b"))
            ])),
            "rejected_message"
        );
        let big = vec![b'x'; 2048];
        assert_eq!(
            job_of(
                &props(&[(DELAY_HEADER, AMQPValue::LongInt(1)), rk]),
                &big,
                NOW,
                &rules()
            )
            .unwrap_err()
            .outcome,
            "rejected_message"
        );
    }
}
