//! The RabbitMQ bridge (`--amqp`, docs/rabbitmq.md): one connection per instance, kept up by
//! [`Broker::start`]'s task, which reconnects by itself with a backoff when the broker goes
//! away. Over it:
//!
//! - publishing ([`Broker::publish`]): one attempt of a publish job, on a channel in confirm
//!   mode: persistent, `mandatory`, `message_id` = the job id, headers `x-delayq-topic` and
//!   `x-delayq-attempt`, then the broker's confirm. The push-delivery loop (delivery/mod.rs)
//!   reserves publish jobs and finishes or releases them on the answer, as it does callbacks.
//! - the intake ([`intake`]): delayed messages consumed from `--amqp-intake` and stored as
//!   publish jobs; each message is acked only once its job is stored.
//!
//! Not here: what a failed attempt does to the job (job.rs, through `Store::release`); the
//! store (the bridge is written once over `Store`).

pub mod intake;
mod publish;

pub use publish::{PublishAnswer, PublishOutcome};

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::store::Store;
use lapin::options::{BasicQosOptions, ConfirmSelectOptions};
use lapin::{Channel, Connection, ConnectionProperties};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Default `amqp_intake`.
pub const DEFAULT_INTAKE: &str = "delayq.intake";
/// First wait before reconnecting; doubled after each failure up to [`MAX_RECONNECT_WAIT`].
const MIN_RECONNECT_WAIT: Duration = Duration::from_millis(200);
const MAX_RECONNECT_WAIT: Duration = Duration::from_secs(5);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the connection's and channels' health is looked at, besides their errors.
const HEALTH_CHECK: Duration = Duration::from_millis(250);

/// The bridge's settings.
#[derive(Debug, Clone)]
pub struct AmqpOptions {
    /// The broker's URL (`--amqp`), checked by the settings' rule.
    pub url: String,
    /// The intake queue.
    pub intake: String,
    /// One publish attempt's limit: waiting for a connection and for the confirm.
    pub publish_timeout: Duration,
    /// Unacknowledged intake messages at most.
    pub prefetch: u16,
    /// The body limit of the intake's jobs (`max_body_bytes`).
    pub max_body_bytes: usize,
}

/// The bridge of one instance: the connection, kept up by [`Broker::start`]'s task.
pub struct Broker {
    options: AmqpOptions,
    /// The confirm-mode channel publishes go on; `None` while not connected.
    publisher: watch::Sender<Option<Channel>>,
    /// Told by a publish that found its channel closed, so the task opens another at once.
    broken: Notify,
    metrics: Arc<Metrics>,
}

impl Broker {
    pub fn new(options: AmqpOptions, metrics: Arc<Metrics>) -> Arc<Broker> {
        Arc::new(Broker {
            options,
            publisher: watch::Sender::new(None),
            broken: Notify::new(),
            metrics,
        })
    }

    /// How long one publish attempt may take.
    pub fn publish_timeout(&self) -> Duration {
        self.options.publish_timeout
    }

    /// Connects, consumes the intake into `store` and keeps both up until `stop` is
    /// cancelled.
    pub fn start(
        self: &Arc<Self>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        stop: CancellationToken,
    ) -> JoinHandle<()> {
        let broker = self.clone();
        tokio::spawn(async move {
            let intake = intake::Intake::new(store, clock, broker.metrics.clone(), &broker.options);
            broker.run(&intake, &stop).await;
            broker.publisher.send_replace(None);
            broker.metrics.amqp_connected(false);
            intake.drain().await;
        })
    }

    async fn run(&self, intake: &Arc<intake::Intake>, stop: &CancellationToken) {
        let mut wait = MIN_RECONNECT_WAIT;
        let mut failures = 0u32;
        loop {
            let connected = tokio::select! {
                _ = stop.cancelled() => return,
                c = tokio::time::timeout(CONNECT_TIMEOUT, self.connect(intake)) => {
                    c.unwrap_or_else(|_| Err("no answer from the broker".into()))
                }
            };
            match connected {
                Ok((conn, consumer)) => {
                    if failures > 0 {
                        tracing::info!(after_failures = failures, "RabbitMQ: connected again");
                    } else {
                        tracing::info!(intake = %self.options.intake, "RabbitMQ: connected");
                    }
                    failures = 0;
                    wait = MIN_RECONNECT_WAIT;
                    self.metrics.amqp_connected(true);
                    let why = self.serve(&conn, consumer, intake, stop).await;
                    self.publisher.send_replace(None);
                    self.metrics.amqp_connected(false);
                    // Best effort: the connection may already be gone.
                    let _ = tokio::time::timeout(
                        Duration::from_secs(1),
                        conn.close(200, "delayq: reconnecting".into()),
                    )
                    .await;
                    match why {
                        None => return,
                        Some(why) => {
                            tracing::warn!(reason = %why, "RabbitMQ: connection lost; reconnecting")
                        }
                    }
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_power_of_two() {
                        tracing::warn!(
                            error = %e,
                            failures,
                            "RabbitMQ: cannot connect; retrying (publishing and the intake wait)"
                        );
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            wait = (wait * 2).min(MAX_RECONNECT_WAIT);
        }
    }

    /// Opens the connection, the publishing channel and the intake's consumer.
    async fn connect(
        &self,
        intake: &Arc<intake::Intake>,
    ) -> Result<(Connection, lapin::Consumer), String> {
        let props = ConnectionProperties::default()
            .with_connection_name(format!("delayq {}", env!("CARGO_PKG_VERSION")).into());
        let conn = Connection::connect(&self.options.url, props)
            .await
            .map_err(|e| e.to_string())?;
        let publisher = publisher_channel(&conn).await?;
        let channel = conn.create_channel().await.map_err(|e| e.to_string())?;
        channel
            .basic_qos(self.options.prefetch, BasicQosOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        let consumer = intake.consume(&conn, &channel).await?;
        self.publisher.send_replace(Some(publisher));
        Ok((conn, consumer))
    }

    /// Serves one connection until it fails (the reason) or `stop` (`None`).
    async fn serve(
        &self,
        conn: &Connection,
        consumer: lapin::Consumer,
        intake: &Arc<intake::Intake>,
        stop: &CancellationToken,
    ) -> Option<String> {
        let mut consuming = Box::pin(intake.run(consumer));
        let mut health = tokio::time::interval(HEALTH_CHECK);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return None,
                why = &mut consuming => return Some(why),
                _ = health.tick() => {}
                _ = self.broken.notified() => {}
            }
            if !conn.status().connected() {
                return Some("the connection closed".into());
            }
            let closed = self
                .publisher
                .borrow()
                .as_ref()
                .is_none_or(|c| !c.status().connected());
            if closed {
                // The broker closes a channel on a publish to an exchange that does not
                // exist: a new one for the publishes to come.
                match publisher_channel(conn).await {
                    Ok(c) => {
                        self.publisher.send_replace(Some(c));
                    }
                    Err(e) => return Some(format!("cannot open a publishing channel: {e}")),
                }
            }
        }
    }

    /// The publishing channel, waiting for a connection until `deadline`.
    async fn channel(&self, deadline: tokio::time::Instant) -> Option<Channel> {
        let mut rx = self.publisher.subscribe();
        let wait = rx.wait_for(|c| c.as_ref().is_some_and(|c| c.status().connected()));
        match tokio::time::timeout_at(deadline, wait).await {
            Ok(Ok(c)) => c.clone(),
            _ => None,
        }
    }
}

/// A new channel in confirm mode.
async fn publisher_channel(conn: &Connection) -> Result<Channel, String> {
    let channel = conn.create_channel().await.map_err(|e| e.to_string())?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(channel)
}
