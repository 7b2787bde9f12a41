//! The connection to Redis behind one small internal handle, [`Conn`]: a multiplexed
//! connection shared by every caller (a long-polling consumer holds none), deadlines on every
//! call, error mapping to [`StoreError`], and calls of delayq's function library (FCALL) with
//! a reload when Redis does not have it (a Redis restart without persistence, `FUNCTION
//! FLUSH`, a new cluster node).
//!
//! Two variants: one server ([`Conn::Single`]) and a Redis Cluster ([`Conn::Cluster`]).
//! Callers build pipelines the same way for both. On one server a pipeline is one round trip;
//! on a cluster its commands usually name keys of several slots, and a cluster pipeline must
//! stay within one slot, so each command is sent on its own, all concurrently (the cluster
//! connection routes each by its key, follows MOVED/ASK and multiplexes them per node, so
//! that is still about one round trip per node). Not atomic across commands on either: every
//! caller's atomic unit is one function call on one shard.
//!
//! It does not know the key layout or what the functions do.

use super::scripts::{LIBRARY, LIBRARY_PREFIX, is_delayq_library};
use crate::store::{Cause, StoreError, StoreResult};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, Pipeline, RedisError, ToRedisArgs, Value};
use std::collections::HashMap;
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
    /// A Redis Cluster: one multiplexed connection per node, opened as the slot map (read
    /// from the seeds, refreshed on MOVED or a lost node) requires. A command whose node is
    /// down fails within [`CALL_TIMEOUT`]; after a failover the promoted replica is found by
    /// the slot refresh.
    ///
    /// Caveat: the cluster client resends a command whose connection dropped (up to
    /// [`CLUSTER_RETRIES`] times, within [`CALL_TIMEOUT`]). If the first send had run, the
    /// call runs twice; every transition is safe to repeat in effect (a repeated push reports
    /// `Exists`, a repeated finish `NotFound`, a repeated reserve leaves jobs reserved until
    /// their TTR), but the caller's answer can be wrong in that rare case.
    Cluster(ClusterConnection),
}

/// How many times the cluster client retries a command after MOVED, TRYAGAIN, CLUSTERDOWN or
/// a lost connection (always within [`CALL_TIMEOUT`]).
pub const CLUSTER_RETRIES: u32 = 3;

/// A cluster client for these seed URLs (any few nodes; the rest are discovered), with the
/// same fail-fast timeouts as one server and short retry waits (the crate's default first
/// wait, 1.28 s, would eat most of [`CALL_TIMEOUT`]).
pub fn cluster_client(seeds: &[String]) -> Result<ClusterClient, RedisError> {
    ClusterClientBuilder::new(seeds.iter().map(String::as_str))
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .retries(CLUSTER_RETRIES)
        .min_retry_wait(50)
        .max_retry_wait(400)
        .build()
}

/// One call of a library function (FCALL), built before it is sent (alone or in a pipeline).
pub struct Call {
    cmd: Cmd,
}

impl Call {
    /// A call of `function` (a name from [`LIBRARY`]) on `keys`.
    pub fn new(function: &str, keys: &[&str]) -> Call {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(function).arg(keys.len());
        for k in keys {
            cmd.arg(*k);
        }
        Call { cmd }
    }

    pub fn arg(mut self, a: impl ToRedisArgs) -> Call {
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

    /// Connects to a Redis Cluster through its seeds and reads its slot map, failing within
    /// [`CALL_TIMEOUT`] if no seed answers.
    pub async fn connect_cluster(client: &ClusterClient) -> StoreResult<Conn> {
        let conn = deadline(client.get_async_connection()).await?;
        Ok(Conn::Cluster(conn))
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

    /// Sends FCALLs in one pipeline and returns their replies in order; an error reply in
    /// any of them fails the whole call (see [`Conn::fcall_each`]).
    pub async fn fcall(&self, calls: &[Call]) -> StoreResult<Vec<Value>> {
        self.fcall_each(calls).await?.into_iter().collect()
    }

    /// Sends FCALLs in one pipeline and returns each one's reply or error reply, in order;
    /// `Err` only when Redis could not be asked. Calls refused because the library is missing
    /// (they did not run) are sent once more after loading it.
    pub async fn fcall_each(&self, calls: &[Call]) -> StoreResult<Vec<StoreResult<Value>>> {
        let mut pipe = redis::pipe();
        for c in calls {
            pipe.add_command(c.cmd.clone());
        }
        let mut values = self.send(&pipe).await?;
        let missing: Vec<usize> = values
            .iter()
            .enumerate()
            .filter(|(_, v)| is_function_missing(v))
            .map(|(i, _)| i)
            .collect();
        if !missing.is_empty() {
            self.load().await?;
            let mut retry = redis::pipe();
            for &i in &missing {
                retry.add_command(calls[i].cmd.clone());
            }
            let again = self.send(&retry).await?;
            for (&i, v) in missing.iter().zip(again) {
                values[i] = v;
            }
        }
        Ok(values
            .into_iter()
            .map(|v| match v {
                Value::ServerError(e) => Err(server_error(&e)),
                v => Ok(v),
            })
            .collect())
    }

    /// Loads delayq's function library (`FUNCTION LOAD REPLACE`: the same text again changes
    /// nothing). On a cluster it goes to every master (the client routes it so) and replicas
    /// get it by replication, so a promoted replica has it; a node that lacks it (a restart
    /// without persistence, a new node) makes [`Conn::fcall_each`] load it again.
    pub async fn load(&self) -> StoreResult<()> {
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(&LIBRARY.text);
        let mut pipe = redis::pipe();
        pipe.add_command(load);
        self.query(&pipe).await.map(drop)
    }

    /// Deletes the function libraries of other delayq builds (named `delayq_<hash>` with
    /// another hash), left by instances that were upgraded; any other library is left alone.
    /// Returns the names deleted. An instance of another build still running loads its
    /// library again on its next call ([`Conn::fcall_each`]). A library that cannot be deleted
    /// (another instance deleted it first; on a cluster, a master without it) is skipped.
    pub async fn prune(&self) -> StoreResult<Vec<String>> {
        let mut list = redis::pipe();
        // A glob pattern.
        list.cmd("FUNCTION")
            .arg("LIST")
            .arg("LIBRARYNAME")
            .arg(format!("{LIBRARY_PREFIX}*"));
        let listed = self.query(&list).await?;
        let stale: Vec<String> = listed
            .first()
            .map(library_names)
            .unwrap_or_default()
            .into_iter()
            .filter(|n| is_delayq_library(n) && *n != LIBRARY.name)
            .collect();
        if stale.is_empty() {
            return Ok(stale);
        }
        // One round trip for all of them; each answers on its own.
        let mut delete = redis::pipe();
        for name in &stale {
            delete.cmd("FUNCTION").arg("DELETE").arg(name);
        }
        let mut deleted = Vec::new();
        for (name, reply) in stale.into_iter().zip(self.send(&delete).await?) {
            match reply {
                Value::ServerError(e) => {
                    tracing::debug!(library = %name, error = %server_error(&e), "not deleted")
                }
                _ => deleted.push(name),
            }
        }
        Ok(deleted)
    }

    async fn send(&self, pipe: &Pipeline) -> StoreResult<Vec<Value>> {
        let mut pipe = pipe.clone();
        pipe.ignore_errors();
        match self {
            Conn::Single(m) => {
                let mut m = m.clone();
                deadline(async move { pipe.query_async::<Vec<Value>>(&mut m).await }).await
            }
            Conn::Cluster(c) => {
                let calls = pipe.cmd_iter().map(|cmd| {
                    let mut c = c.clone();
                    async move { as_reply(cmd.query_async::<Value>(&mut c).await) }
                });
                deadline(futures::future::try_join_all(calls)).await
            }
        }
    }
}

/// A command's result as a pipeline with `ignore_errors` reports it: an error reply is a
/// [`Value::ServerError`] in its place, only a failure to ask is an `Err`.
fn as_reply(r: Result<Value, RedisError>) -> Result<Value, RedisError> {
    match r {
        Ok(v) => Ok(v),
        Err(e) => match e.clone().into_server_errors().as_deref() {
            Some([(_, server)]) => Ok(Value::ServerError(server.clone())),
            _ => Err(e),
        },
    }
}

/// Bounds a Redis call by [`CALL_TIMEOUT`] and maps its error.
async fn deadline<T>(f: impl Future<Output = Result<T, RedisError>>) -> StoreResult<T> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(redis_error(e)),
        Err(_) => Err(StoreError::Unavailable(
            format!(
                "Redis did not answer within {} ms",
                CALL_TIMEOUT.as_millis()
            )
            .into(),
        )),
    }
}

/// The `library_name` of each library in a `FUNCTION LIST` reply (redis-rs reads each entry
/// as a map, from RESP2's flat arrays or RESP3's maps alike).
fn library_names(reply: &Value) -> Vec<String> {
    let libraries: Vec<HashMap<String, Value>> =
        redis::from_redis_value_ref(reply).unwrap_or_default();
    libraries
        .iter()
        .filter_map(|lib| redis::from_redis_value_ref(lib.get("library_name")?).ok())
        .collect()
}

/// Redis's answer to FCALL of a function it does not have (`ERR Function not found`).
fn is_function_missing(v: &Value) -> bool {
    matches!(v, Value::ServerError(e)
        if e.code() == "ERR" && e.details().is_some_and(|d| d.starts_with("Function not found")))
}

/// A client-side failure: Redis could not be asked, or its answer did not arrive. The
/// message is the error's own; the error stays the cause's source.
pub fn redis_error(e: RedisError) -> StoreError {
    tracing::debug!(error = %e, "redis call failed");
    StoreError::Unavailable(Cause::with_message(e.to_string(), e))
}

/// An error reply. A script error or a wrong-type key means the data under our prefix is not
/// what delayq wrote (`Corrupt`); anything else (OOM, LOADING, READONLY, ...) is Redis
/// refusing work for now (`Unavailable`). The message is `<code> <details>`, as Redis sent
/// them; the reply stays the cause's source.
fn server_error(e: &redis::ServerError) -> StoreError {
    let msg = format!("{} {}", e.code(), e.details().unwrap_or(""));
    match e.code() {
        "ERR" | "WRONGTYPE" => {
            tracing::error!(error = %msg, "redis refused a delayq command");
            StoreError::Corrupt(Cause::with_message(msg, e.clone()))
        }
        _ => StoreError::Unavailable(Cause::with_message(msg, e.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_reply(resp: &[u8]) -> redis::ServerError {
        match redis::parse_redis_value(resp) {
            Ok(Value::ServerError(e)) => e,
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn an_error_reply_keeps_redis_s_words_and_the_typed_reply() {
        let oom = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n";
        let e = server_error(&error_reply(oom));
        let StoreError::Unavailable(cause) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(
            cause.message(),
            "OOM command not allowed when used memory > 'maxmemory'."
        );
        let typed = cause.downcast_ref::<redis::ServerError>();
        assert_eq!(typed.map(|s| s.code()), Some("OOM"));

        let e = server_error(&error_reply(b"-WRONGTYPE Operation against a key\r\n"));
        let StoreError::Corrupt(cause) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(cause.message(), "WRONGTYPE Operation against a key");
        assert!(cause.downcast_ref::<redis::ServerError>().is_some());
    }

    #[test]
    fn a_failure_to_ask_keeps_the_redis_error_and_its_message() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let failure = RedisError::from(io);
        let text = failure.to_string();
        let e = redis_error(failure);
        let StoreError::Unavailable(cause) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(cause.message(), text);
        let typed = cause.downcast_ref::<RedisError>().expect("a RedisError");
        assert!(typed.is_connection_refusal(), "{typed:?}");
    }
}
