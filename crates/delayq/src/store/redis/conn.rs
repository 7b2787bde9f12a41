//! The connection to Redis behind one small internal handle, [`Conn`]: a multiplexed
//! connection shared by every caller (a long-polling consumer holds none), deadlines on every
//! call, error mapping to [`StoreError`], and script calls by EVALSHA with a reload on
//! NOSCRIPT (after a Redis restart or `SCRIPT FLUSH`).
//!
//! It does not know the key layout or what the scripts do. It is an enum so that a Redis
//! Cluster connection (`redis::cluster_async::ClusterConnection`, which routes each command of
//! a pipeline by its first key) can become a second variant without touching callers.

use crate::store::{StoreError, StoreResult};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Cmd, Pipeline, RedisError, Script, ToRedisArgs, Value};
use std::time::Duration;

/// How long one connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
/// How long Redis may take to answer one command or pipeline.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(2000);
/// Upper bound on any store call, reconnect attempts included: with Redis down, callers get
/// `Unavailable` within this instead of hanging.
pub const CALL_TIMEOUT: Duration = Duration::from_millis(2000);

/// A handle to Redis; cheap to clone (clones share one connection).
#[derive(Clone)]
pub enum Conn {
    /// One Redis server. `ConnectionManager` reconnects by itself after a failure; a call made
    /// while it is down fails fast and the next one tries again.
    Single(ConnectionManager),
}

/// One EVALSHA call, built before it is sent (alone or in a pipeline).
pub struct Eval {
    script: &'static Script,
    cmd: Cmd,
}

impl Eval {
    pub fn new(script: &'static Script, keys: &[&str]) -> Eval {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash()).arg(keys.len());
        for k in keys {
            cmd.arg(*k);
        }
        Eval { script, cmd }
    }

    pub fn arg(mut self, a: impl ToRedisArgs) -> Eval {
        self.cmd.arg(a);
        self
    }
}

impl Conn {
    /// Connects to one Redis server, failing within [`CALL_TIMEOUT`] if it cannot be reached.
    pub async fn connect(client: &Client) -> StoreResult<Conn> {
        // Few, quick reconnect attempts: the store must fail fast while Redis is down (the
        // server keeps running and the next call tries again), not queue callers behind a
        // long backoff.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(250));
        let manager = deadline(ConnectionManager::new_with_config(client.clone(), config)).await?;
        Ok(Conn::Single(manager))
    }

    /// Sends a pipeline and returns one value per command; a server error in any reply fails
    /// the whole call.
    pub async fn query(&self, pipe: &Pipeline) -> StoreResult<Vec<Value>> {
        let values = self.send(pipe).await?;
        for v in &values {
            if let Value::ServerError(e) = v {
                return Err(server_error(e));
            }
        }
        Ok(values)
    }

    /// Runs script calls in one pipeline and returns their replies in order. Calls refused
    /// with NOSCRIPT (they did not run) are retried once after loading every script.
    pub async fn eval(&self, calls: &[Eval]) -> StoreResult<Vec<Value>> {
        let mut pipe = redis::pipe();
        for c in calls {
            pipe.add_command(c.cmd.clone());
        }
        let mut values = self.send(&pipe).await?;
        let missing: Vec<usize> = values
            .iter()
            .enumerate()
            .filter(|(_, v)| is_noscript(v))
            .map(|(i, _)| i)
            .collect();
        if !missing.is_empty() {
            let mut scripts: Vec<&'static Script> =
                missing.iter().map(|&i| calls[i].script).collect();
            scripts.sort_by_key(|s| s.get_hash().to_owned());
            scripts.dedup_by_key(|s| s.get_hash().to_owned());
            self.load(&scripts).await?;
            let mut retry = redis::pipe();
            for &i in &missing {
                retry.add_command(calls[i].cmd.clone());
            }
            let again = self.send(&retry).await?;
            for (&i, v) in missing.iter().zip(again) {
                values[i] = v;
            }
        }
        for v in &values {
            if let Value::ServerError(e) = v {
                return Err(server_error(e));
            }
        }
        Ok(values)
    }

    /// Loads scripts into the script cache (SCRIPT LOAD).
    pub async fn load(&self, scripts: &[&Script]) -> StoreResult<()> {
        match self {
            Conn::Single(m) => {
                let mut m = m.clone();
                deadline(async {
                    for s in scripts {
                        s.load_async(&mut m).await?;
                    }
                    Ok(())
                })
                .await
            }
        }
    }

    async fn send(&self, pipe: &Pipeline) -> StoreResult<Vec<Value>> {
        let mut pipe = pipe.clone();
        pipe.ignore_errors();
        match self {
            Conn::Single(m) => {
                let mut m = m.clone();
                deadline(async move { pipe.query_async::<Vec<Value>>(&mut m).await }).await
            }
        }
    }
}

/// Bounds a Redis call by [`CALL_TIMEOUT`] and maps its error.
async fn deadline<T>(f: impl Future<Output = Result<T, RedisError>>) -> StoreResult<T> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(redis_error(&e)),
        Err(_) => Err(StoreError::Unavailable(format!(
            "Redis did not answer within {} ms",
            CALL_TIMEOUT.as_millis()
        ))),
    }
}

fn is_noscript(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

/// A client-side failure: Redis could not be asked, or its answer did not arrive.
pub fn redis_error(e: &RedisError) -> StoreError {
    tracing::debug!(error = %e, "redis call failed");
    StoreError::Unavailable(e.to_string())
}

/// An error reply. A script error or a wrong-type key means the data under our prefix is not
/// what delayq wrote (`Corrupt`); anything else (OOM, LOADING, READONLY, ...) is Redis
/// refusing work for now (`Unavailable`).
fn server_error(e: &redis::ServerError) -> StoreError {
    let msg = format!("{} {}", e.code(), e.details().unwrap_or(""));
    match e.code() {
        "ERR" | "WRONGTYPE" => {
            tracing::error!(error = %msg, "redis refused a delayq command");
            StoreError::Corrupt(msg)
        }
        _ => StoreError::Unavailable(msg),
    }
}
