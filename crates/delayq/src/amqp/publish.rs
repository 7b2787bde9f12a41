//! One publish attempt: the message a publish job becomes, and what the broker said.

use super::Broker;
use crate::job::{Job, Publish};
use base64::Engine as _;
use lapin::options::BasicPublishOptions;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Confirmation};
use std::time::{Duration, Instant};

/// Header naming the job's topic on every published message.
pub const TOPIC_HEADER: &str = "x-delayq-topic";
/// Header counting the attempts, this one included, on every published message.
pub const ATTEMPT_HEADER: &str = "x-delayq-attempt";

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishOutcome {
    /// Confirmed by the broker (routed): the job is finished.
    Confirmed,
    /// The broker nacked it.
    Nacked,
    /// Returned as unroutable (`mandatory`): no queue is bound for it.
    Unroutable,
    /// No confirm within the publish timeout.
    Timeout,
    /// No connection within the timeout, or the channel or connection failed (a missing
    /// exchange closes the channel).
    ConnectionError,
    /// This instance has no `--amqp`.
    NotConfigured,
}

impl PublishOutcome {
    pub fn finished(self) -> bool {
        self == PublishOutcome::Confirmed
    }

    /// The `outcome` label of `delayq_amqp_publishes_total`.
    pub fn label(self) -> &'static str {
        match self {
            PublishOutcome::Confirmed => "confirmed",
            PublishOutcome::Nacked => "nacked",
            PublishOutcome::Unroutable => "unroutable",
            PublishOutcome::Timeout => "timeout",
            PublishOutcome::ConnectionError => "connection_error",
            PublishOutcome::NotConfigured => "not_configured",
        }
    }
}

/// What one attempt came to.
#[derive(Debug)]
pub struct PublishAnswer {
    pub outcome: PublishOutcome,
    /// Why it failed, for the log (never the body).
    pub reason: String,
    /// From the publish to the broker's answer; `None` when nothing was published.
    pub took: Option<Duration>,
}

impl PublishAnswer {
    pub fn not_configured() -> PublishAnswer {
        PublishAnswer {
            outcome: PublishOutcome::NotConfigured,
            reason: "this instance has no --amqp".into(),
            took: None,
        }
    }

    fn failed(outcome: PublishOutcome, reason: impl Into<String>, took: Option<Duration>) -> Self {
        PublishAnswer {
            outcome,
            reason: reason.into(),
            took,
        }
    }
}

impl Broker {
    /// Publishes reserved `job` (so `attempts` counts this attempt) to `target` and waits for
    /// the confirm, all within the publish timeout.
    pub async fn publish(&self, job: &Job, target: &Publish) -> PublishAnswer {
        use PublishOutcome::*;
        let deadline = tokio::time::Instant::now() + self.options.publish_timeout;
        let message = match message(job, target) {
            Ok(m) => m,
            // Checked when the job was made; kept as a failed attempt if it ever is not.
            Err(why) => return PublishAnswer::failed(Nacked, why, None),
        };
        let Some(channel) = self.channel(deadline).await else {
            return PublishAnswer::failed(
                ConnectionError,
                "not connected to RabbitMQ within the publish timeout",
                None,
            );
        };
        let started = Instant::now();
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let sent = tokio::time::timeout_at(deadline, async {
            let confirm = channel
                .basic_publish(
                    message.exchange,
                    message.routing_key,
                    options,
                    &message.body,
                    message.properties,
                )
                .await?;
            confirm.await
        })
        .await;
        let took = Some(started.elapsed());
        match sent {
            Err(_) => PublishAnswer::failed(
                Timeout,
                format!(
                    "no confirm within {} ms",
                    self.options.publish_timeout.as_millis()
                ),
                took,
            ),
            Ok(Err(e)) => {
                self.broken.notify_one();
                PublishAnswer::failed(ConnectionError, e.to_string(), took)
            }
            Ok(Ok(Confirmation::Ack(None))) => PublishAnswer::failed(Confirmed, "", took),
            Ok(Ok(Confirmation::Ack(Some(returned)))) => PublishAnswer::failed(
                Unroutable,
                format!(
                    "returned by the broker: {} {}",
                    returned.reply_code, returned.reply_text
                ),
                took,
            ),
            Ok(Ok(Confirmation::Nack(_))) => {
                PublishAnswer::failed(Nacked, "nacked by the broker", took)
            }
            Ok(Ok(Confirmation::NotRequested)) => {
                self.broken.notify_one();
                PublishAnswer::failed(ConnectionError, "the channel is not in confirm mode", took)
            }
        }
    }
}

/// A publish job as an AMQP message.
struct Message {
    exchange: ShortString,
    routing_key: ShortString,
    body: Vec<u8>,
    properties: BasicProperties,
}

fn short(field: &str, s: &str) -> Result<ShortString, String> {
    ShortString::try_new(s).map_err(|e| format!("{field}: {e}"))
}

/// The message of reserved `job`: its body (decoded when kept as base64), persistent,
/// `message_id` = the job id, the intake's content type and headers, and the
/// [`TOPIC_HEADER`] and [`ATTEMPT_HEADER`] headers.
fn message(job: &Job, target: &Publish) -> Result<Message, String> {
    let body = if target.body_base64 {
        base64::engine::general_purpose::STANDARD
            .decode(job.spec.body.as_bytes())
            .map_err(|e| format!("body: not base64: {e}"))?
    } else {
        job.spec.body.as_bytes().to_vec()
    };
    let mut headers = match &target.headers {
        Some(json) => {
            serde_json::from_str::<FieldTable>(json).map_err(|e| format!("publish.headers: {e}"))?
        }
        None => FieldTable::default(),
    };
    headers.insert(
        TOPIC_HEADER.into(),
        AMQPValue::LongString(LongString::from(job.spec.topic.as_str())),
    );
    headers.insert(
        ATTEMPT_HEADER.into(),
        AMQPValue::LongLongInt(i64::from(job.attempts)),
    );
    let mut properties = BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id(short("id", job.spec.id.as_str())?)
        .with_headers(headers);
    if let Some(ct) = &target.content_type {
        properties = properties.with_content_type(short("content_type", ct)?);
    }
    Ok(Message {
        exchange: short("publish.exchange", &target.exchange)?,
        routing_key: short("publish.routing_key", &target.routing_key)?,
        body,
        properties,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobId, JobSpec, JobState, Topic};

    #[test]
    fn the_message_carries_the_id_topic_attempt_and_intake_fields() {
        let mut spec = JobSpec::new(
            Topic::parse("orders").unwrap(),
            JobId::parse("o-1").unwrap(),
            base64::engine::general_purpose::STANDARD.encode([0u8, 0xff, 7]),
            0,
        );
        let mut extra = FieldTable::default();
        extra.insert("k".into(), AMQPValue::LongInt(5));
        let target = Publish {
            exchange: "ex".into(),
            routing_key: "rk".into(),
            content_type: Some("application/x".into()),
            headers: Some(serde_json::to_string(&extra).unwrap()),
            body_base64: true,
        };
        spec.publish = Some(Box::new(target.clone()));
        let mut job = Job::new(spec, 0, 1);
        job.state = JobState::Reserved;
        job.attempts = 3;
        let m = message(&job, &target).unwrap();
        assert_eq!(m.body, vec![0u8, 0xff, 7]);
        assert_eq!((m.exchange.as_str(), m.routing_key.as_str()), ("ex", "rk"));
        assert_eq!(*m.properties.delivery_mode(), Some(2));
        assert_eq!(m.properties.message_id().as_ref().unwrap().as_str(), "o-1");
        assert_eq!(
            m.properties.content_type().as_ref().unwrap().as_str(),
            "application/x"
        );
        let h = m.properties.headers().as_ref().unwrap().inner();
        assert_eq!(h.get("k"), Some(&AMQPValue::LongInt(5)));
        assert_eq!(h.get(ATTEMPT_HEADER), Some(&AMQPValue::LongLongInt(3)));
        assert_eq!(
            h.get(TOPIC_HEADER),
            Some(&AMQPValue::LongString("orders".into()))
        );
    }
}
