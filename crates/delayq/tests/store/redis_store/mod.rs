//! Redis-specific behaviour of `RedisStore`, each test against its own `redis-server`. One file
//! per concern (below); this file holds the helpers they share.
//!
//! The backend-independent semantics are the conformance suite's job (tests/store/conformance/);
//! the few semantic checks here exercise what sharding and Lua could get wrong. Time is always
//! passed explicitly; nothing sleeps to let time pass.

use crate::support;

use delayq::job::{JobId, JobSpec, JobState, Topic};
use delayq::store::redis::{RedisOptions, RedisStore, RedisTarget, shard_of};
use delayq::store::{PushMode, PushOutcome, Reschedule, Store, StoreError, StoreEvent};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::redis_server::RedisServer;
use tokio::sync::broadcast;

mod ahead;
mod early_finish;
mod instances;
mod layout;
mod memory;
mod outages;
mod read_ahead;
mod shards;
mod timer;

const NOW: u64 = 1_767_225_600_000;

fn topic(s: &str) -> Topic {
    Topic::parse(s).unwrap()
}

fn id(s: &str) -> JobId {
    JobId::parse(s).unwrap()
}

fn job(t: &str, i: &str, body: &str, run_at: u64) -> JobSpec {
    JobSpec::new(topic(t), id(i), body, run_at)
}

async fn store(server: &RedisServer, prefix: &str, shards: u16) -> RedisStore {
    RedisStore::connect(RedisOptions {
        target: RedisTarget::Server(server.url()),
        prefix: prefix.into(),
        shards,
    })
    .await
    .expect("connect to the test redis-server")
}

/// Connecting must fail (`why`: what starting would have done).
async fn refused(server: &RedisServer, prefix: &str, shards: u16, why: &str) -> StoreError {
    RedisStore::connect(RedisOptions {
        target: RedisTarget::Server(server.url()),
        prefix: prefix.into(),
        shards,
    })
    .await
    .err()
    .unwrap_or_else(|| panic!("connect must be refused: {why}"))
}

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Runs one raw command whose reply does not matter (setting up a case behind the store's back).
async fn command(c: &mut redis::aio::MultiplexedConnection, args: &[&str]) {
    let _: redis::Value = redis::cmd(args[0])
        .arg(&args[1..])
        .query_async(c)
        .await
        .unwrap();
}

async fn all_keys(server: &RedisServer) -> Vec<String> {
    let mut c = raw(server).await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut c)
        .await
        .unwrap();
    keys.sort();
    keys
}

/// The next event, or a panic after a second.
async fn next_event(rx: &mut broadcast::Receiver<StoreEvent>) -> StoreEvent {
    tokio::time::timeout(Duration::from_secs(2), rx.recv())
        .await
        .expect("an event within 2 s")
        .expect("event channel open")
}

/// Waits until `want` arrives, skipping other events.
async fn expect_event(rx: &mut broadcast::Receiver<StoreEvent>, want: StoreEvent) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if next_event(rx).await == want {
            return;
        }
    }
    panic!("did not see {want:?}");
}

/// Joins consumer tasks (each returning the ids it reserved): every id they got, none twice.
async fn joined_distinct(tasks: Vec<tokio::task::JoinHandle<Vec<String>>>) -> Vec<String> {
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let unique: HashSet<&String> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "a job was handed out twice");
    all
}

/// Joins consumer tasks: `n` ids in all, none twice.
async fn each_once(tasks: Vec<tokio::task::JoinHandle<Vec<String>>>, n: usize) {
    assert_eq!(joined_distinct(tasks).await.len(), n);
}

fn ids(jobs: &[delayq::job::Job]) -> Vec<String> {
    jobs.iter().map(|j| j.spec.id.to_string()).collect()
}
