//! Test helpers for the real RabbitMQ: a connection, unique names, a collector of what a
//! queue receives, the intake's publisher, and a loopback TCP proxy whose connections a test
//! can cut and refuse.

use futures::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The machine's broker.
pub const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// Test queues delete themselves this long after their last use, if a test could not.
const QUEUE_EXPIRES_MS: i64 = 600_000;

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A name no other test run uses.
pub fn unique(what: &str) -> String {
    format!("delayq-test-{what}-{}", uuid::Uuid::now_v7().simple())
}

/// A connection to the machine's RabbitMQ, or a panic saying how to get one.
pub async fn connect() -> Connection {
    match Connection::connect(URL, ConnectionProperties::default()).await {
        Ok(c) => c,
        Err(e) => panic!(
            "RabbitMQ is not reachable at 127.0.0.1:5672 as guest/guest ({e}): install and start \
             it with `apt-get install rabbitmq-server && service rabbitmq-server start`"
        ),
    }
}

/// The arguments of every test queue: it expires when unused.
fn expiring() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-expires".into(), AMQPValue::LongLongInt(QUEUE_EXPIRES_MS));
    args
}

/// Declares a durable queue that expires when unused (so an intake queue declared here is
/// used by delayq as it is).
pub async fn declare_queue(ch: &Channel, name: &str) {
    ch.queue_declare(name.into(), QueueDeclareOptions::durable(), expiring())
        .await
        .expect("declare a test queue");
}

/// A test's own target queue (where delayq publishes) and intake queue (where it consumes),
/// declared on the machine's broker, with the connection and channel that declared them.
pub struct Queues {
    /// Kept open while the test runs (its channel closes with it).
    _conn: Connection,
    pub ch: Channel,
    pub target: String,
    pub intake: String,
}

/// Declares a fresh pair of [`Queues`].
pub async fn queues() -> Queues {
    let conn = connect().await;
    let ch = conn.create_channel().await.unwrap();
    let target = unique("target");
    let intake = unique("intake");
    declare_queue(&ch, &target).await;
    declare_queue(&ch, &intake).await;
    Queues {
        _conn: conn,
        ch,
        target,
        intake,
    }
}

impl Queues {
    /// Deletes both queues (at the end of a test, after its delayq is stopped).
    pub async fn delete(&self) {
        delete_queue(&self.ch, &self.target).await;
        delete_queue(&self.ch, &self.intake).await;
    }
}

pub async fn delete_queue(ch: &Channel, name: &str) {
    let _ = ch
        .queue_delete(name.into(), QueueDeleteOptions::default())
        .await;
}

/// One message a target queue received.
#[derive(Debug, Clone)]
pub struct Received {
    pub id: String,
    pub at_ms: u64,
    pub body: Vec<u8>,
    pub properties: BasicProperties,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<AMQPValue> {
        self.properties
            .headers()
            .as_ref()
            .and_then(|h| h.inner().get(name).cloned())
    }
}

/// Collects what a queue receives (auto-ack), with the arrival time.
pub struct Collector {
    pub got: Arc<Mutex<Vec<Received>>>,
    task: JoinHandle<()>,
    _conn: Connection,
}

impl Collector {
    pub async fn start(queue: &str) -> Collector {
        let conn = connect().await;
        let ch = conn.create_channel().await.unwrap();
        let mut consumer = ch
            .basic_consume(
                queue.into(),
                "".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("consume the target queue");
        let got = Arc::new(Mutex::new(Vec::new()));
        let into = got.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(d)) = consumer.next().await {
                let at_ms = now_ms();
                let id = d
                    .properties
                    .message_id()
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default();
                into.lock().unwrap().push(Received {
                    id,
                    at_ms,
                    body: d.data,
                    properties: d.properties,
                });
            }
        });
        Collector {
            got,
            task,
            _conn: conn,
        }
    }

    pub fn len(&self) -> usize {
        self.got.lock().unwrap().len()
    }

    /// Waits until at least `n` messages arrived, or `within` passed; returns what arrived.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        self.wait_until(within, || self.len() >= n).await;
        self.got.lock().unwrap().clone()
    }

    /// How many distinct message ids arrived.
    fn distinct(&self) -> usize {
        let got = self.got.lock().unwrap();
        got.iter()
            .map(|r| r.id.as_str())
            .collect::<std::collections::HashSet<_>>()
            .len()
    }

    /// Waits until `n` distinct ids arrived (duplicates, which at-least-once allows, do not
    /// count), or `within` passed; then half a second more (room for a duplicate to show up).
    /// Returns everything that arrived.
    pub async fn settled(&self, n: usize, within: Duration) -> Vec<Received> {
        self.wait_until(within, || self.distinct() >= n).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.got.lock().unwrap().clone()
    }

    /// Polls `done` every 50 ms until it holds or `within` passed.
    async fn wait_until(&self, within: Duration, done: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + within;
        while !done() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Publishes delayed messages to an intake queue (through the default exchange), confirmed.
pub struct IntakeProducer {
    pub ch: Channel,
    queue: String,
    _conn: Connection,
}

impl IntakeProducer {
    pub async fn new(queue: &str) -> IntakeProducer {
        let conn = connect().await;
        let ch = conn.create_channel().await.unwrap();
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        IntakeProducer {
            ch,
            queue: queue.to_string(),
            _conn: conn,
        }
    }

    /// Sends one message with these headers, message id and body; waits for its confirm.
    pub async fn send(&self, id: Option<&str>, headers: FieldTable, body: &[u8]) {
        let mut props = BasicProperties::default()
            .with_headers(headers)
            .with_delivery_mode(2);
        if let Some(id) = id {
            props = props.with_message_id(ShortString::from(id));
        }
        let confirm = self
            .ch
            .basic_publish(
                "".into(),
                self.queue.as_str().into(),
                BasicPublishOptions::default(),
                body,
                props,
            )
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(confirm.is_ack());
    }
}

pub fn text(v: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(v))
}

/// `x-delay` and `x-delayq-routing-key` headers.
pub fn delay_headers(delay: i64, routing_key: &str) -> FieldTable {
    let mut h = FieldTable::default();
    h.insert("x-delay".into(), AMQPValue::LongLongInt(delay));
    h.insert("x-delayq-routing-key".into(), text(routing_key));
    h
}

/// A loopback TCP proxy to the broker: delayq connects through it, and a test can cut every
/// connection and refuse new ones for a while.
pub struct Proxy {
    pub port: u16,
    refusing: Arc<AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
    task: JoinHandle<()>,
}

impl Proxy {
    pub async fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let refusing = Arc::new(AtomicBool::new(false));
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let cuts = cut.clone();
        let refuse = refusing.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if refuse.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let mut cut_rx = cuts.subscribe();
                tokio::spawn(async move {
                    let Ok(mut broker) = TcpStream::connect("127.0.0.1:5672").await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut broker) => {}
                        _ = cut_rx.changed() => {}
                    }
                });
            }
        });
        Proxy {
            port,
            refusing,
            cut,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Closes every connection through the proxy and refuses new ones until `restore`.
    pub fn cut_and_refuse(&self) {
        self.refusing.store(true, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    pub fn restore(&self) {
        self.refusing.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
