//! Store events across instances: the scripts PUBLISH on `<prefix>:events` (payload format in
//! `lib.lua`); each [`super::RedisStore`] keeps one dedicated pub/sub connection whose task
//! forwards what it hears to the store's broadcast channel. So every instance sharing the Redis
//! (this one included) hears every instance's events.
//!
//! On a Redis Cluster, PUBLISH (from a script too) is broadcast over the cluster bus to every
//! node, so one subscription on any node hears every shard's events: the store subscribes on
//! its first seed that answers, and after losing it tries the seeds in turn. Decision: not the
//! crate's sharded/cluster pub/sub (RESP3, SSUBSCRIBE per slot); a single plain subscription
//! is enough for one channel and works on every Redis version. Limit: a node that is up but
//! cut off from the cluster bus stays subscribed and hears nothing; events are a latency
//! optimisation (dispatch/ re-checks every few seconds for lost messages), so this delays
//! wake-ups, it loses no job.
//!
//! The task reconnects by itself (with a capped backoff) when the subscription is lost, and
//! then sends [`StoreEvent::Resync`], since events published meanwhile are gone. A heartbeat
//! PING notices a connection that died without closing. It never touches jobs.

use crate::job::Topic;
use crate::store::{StoreError, StoreEvent, StoreResult};
use futures::StreamExt;
use redis::Client;
use redis::aio::{PubSubSink, PubSubStream};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::conn::{CALL_TIMEOUT, redis_error};

/// How often the subscription is checked with a PING.
const HEARTBEAT: Duration = Duration::from_secs(5);
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// Decodes one published message into events; unknown lines are ignored (a newer instance may
/// publish more kinds). A message whose first line is `O<origin>` with this instance's
/// `origin` is its own tick's: the store already acted on that reply (tick.rs), so the
/// echo is dropped instead of serving the same waiters twice.
pub fn parse(payload: &[u8], origin: &str) -> Vec<StoreEvent> {
    let Ok(text) = std::str::from_utf8(payload) else {
        return Vec::new();
    };
    if text
        .split('\n')
        .next()
        .and_then(|l| l.strip_prefix('O'))
        .is_some_and(|o| o == origin)
    {
        return Vec::new();
    }
    text.split('\n')
        .filter_map(|line| match line.split_at_checked(1)? {
            ("R", queue) => Topic::parse_queue(queue).ok().map(StoreEvent::Ready),
            ("D", ms) => ms.parse().ok().map(StoreEvent::Due),
            _ => None,
        })
        .collect()
}

/// A subscription on the first of `clients`, starting at `first`, that accepts one; each
/// attempt within [`CALL_TIMEOUT`]. Returns the index of the client used.
pub async fn subscribe_any(
    clients: &[Client],
    first: usize,
    channel: &str,
) -> StoreResult<(usize, (PubSubSink, PubSubStream))> {
    let mut last = StoreError::Unavailable("no Redis URL to subscribe on".into());
    for i in 0..clients.len() {
        let at = (first + i) % clients.len();
        match subscribe(&clients[at], channel).await {
            Ok(sub) => return Ok((at, sub)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Opens a pub/sub connection subscribed to `channel`, within [`CALL_TIMEOUT`].
pub async fn subscribe(client: &Client, channel: &str) -> StoreResult<(PubSubSink, PubSubStream)> {
    let f = async {
        let (mut sink, stream) = client.get_async_pubsub().await?.split();
        sink.subscribe(channel).await?;
        Ok::<_, redis::RedisError>((sink, stream))
    };
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r.map_err(redis_error),
        Err(_) => Err(StoreError::Unavailable(
            "Redis did not confirm the event subscription in time".into(),
        )),
    }
}

/// Starts the forwarding task on an already subscribed connection (made with
/// `clients[used]`). Abort the handle to stop it.
pub fn spawn(
    clients: Vec<Client>,
    used: usize,
    channel: String,
    origin: String,
    tx: broadcast::Sender<StoreEvent>,
    first: (PubSubSink, PubSubStream),
) -> JoinHandle<()> {
    tokio::spawn(run(clients, used, channel, origin, tx, first))
}

async fn run(
    clients: Vec<Client>,
    mut used: usize,
    channel: String,
    origin: String,
    tx: broadcast::Sender<StoreEvent>,
    first: (PubSubSink, PubSubStream),
) {
    let mut current = Some(first);
    let mut retry = RETRY_MIN;
    loop {
        let (mut sink, mut stream) = match current.take() {
            Some(c) => c,
            // The client that just failed is tried last.
            None => match subscribe_any(&clients, used + 1, &channel).await {
                Ok((at, c)) => {
                    used = at;
                    tracing::info!(%channel, "redis event subscription restored");
                    retry = RETRY_MIN;
                    let _ = tx.send(StoreEvent::Resync);
                    c
                }
                Err(e) => {
                    tracing::debug!(%channel, error = %e, "redis event subscription: retrying");
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                    continue;
                }
            },
        };
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        heartbeat.tick().await;
        loop {
            tokio::select! {
                msg = stream.next() => match msg {
                    Some(msg) => {
                        for ev in parse(msg.get_payload_bytes(), &origin) {
                            let _ = tx.send(ev);
                        }
                    }
                    None => break,
                },
                _ = heartbeat.tick() => {
                    let ping = tokio::time::timeout(CALL_TIMEOUT, sink.ping::<redis::Value>()).await;
                    if !matches!(ping, Ok(Ok(_))) {
                        break;
                    }
                }
            }
        }
        tracing::warn!(%channel, "redis event subscription lost; reconnecting");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_lines_become_events_and_unknown_lines_are_ignored() {
        let evs = parse(b"Rorders\nRmails\nD1500\nXfuture\n", "me");
        assert_eq!(
            evs,
            vec![
                StoreEvent::Ready(Topic::parse("orders").unwrap()),
                StoreEvent::Ready(Topic::parse("mails").unwrap()),
                StoreEvent::Due(1500),
            ]
        );
        assert!(parse(b"", "me").is_empty());
        // Another instance's tick is heard; this instance's own is not.
        assert_eq!(
            parse(b"Oother\nRorders", "me"),
            [StoreEvent::Ready(Topic::parse("orders").unwrap())]
        );
        assert!(parse(b"Ome\nRorders\nD1500", "me").is_empty());
    }
}
