//! Redis Cluster beyond the shared suites (which `backend_tests!` also runs on a cluster):
//! a real 3-master cluster per test, built from redis-server processes by
//! `support/redis_cluster.rs`. One busy topic's jobs land on every master and all come back;
//! `delayq serve --redis-cluster` works end to end through the compat API; an unreachable
//! cluster is refused fast; and a master's failover to its replica loses no replicated job.

use crate::support;

use delayq::job::{JobId, JobSpec, Topic, UnixMillis};
use delayq::store::redis::{RedisOptions, RedisStore, RedisTarget, key_slot};
use delayq::store::{PushMode, PushOutcome, Store, StoreError};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};
use support::process::{DelayqProcess, free_port};
use support::redis_cluster::RedisCluster;

const T0: UnixMillis = 1_700_000_000_000;

async fn start_cluster(masters: usize, replicas: usize) -> RedisCluster {
    tokio::task::spawn_blocking(move || RedisCluster::start(masters, replicas))
        .await
        .unwrap()
}

async fn connect(cluster: &RedisCluster, prefix: &str) -> RedisStore {
    match RedisStore::connect(RedisOptions {
        target: RedisTarget::Cluster(cluster.urls()),
        prefix: prefix.into(),
        shards: 8,
    })
    .await
    {
        Ok(s) => s,
        Err(e) => panic!("connect to the test cluster: {e}"),
    }
}

fn spec(topic: &Topic, id: &str) -> JobSpec {
    JobSpec::new(topic.clone(), JobId::parse(id).unwrap(), "x", T0)
}

/// Pushes `ids` (due at T0) in batches of 1000; every one must be created.
async fn push_all(store: &RedisStore, topic: &Topic, ids: &[String]) {
    for chunk in ids.chunks(1000) {
        let specs = chunk.iter().map(|id| spec(topic, id)).collect();
        let out = store.push_batch(specs, PushMode::Reject, T0).await.unwrap();
        assert!(
            out.iter().all(|r| r == &Ok(PushOutcome::Created)),
            "{out:?}"
        );
    }
}

/// Reserves until nothing is ready; each id must come back once.
async fn reserve_all(store: &RedisStore, topic: &Topic) -> HashSet<String> {
    let mut got = HashSet::new();
    loop {
        let jobs = store
            .reserve(std::slice::from_ref(topic), 500, T0)
            .await
            .unwrap();
        if jobs.is_empty() {
            return got;
        }
        for j in jobs {
            let id = j.spec.id.as_str().to_string();
            assert!(got.insert(id.clone()), "{id} was handed out twice");
        }
    }
}

/// Jobs under each master: the `jobs` HASH length of every shard, read on the master that
/// owns its slot (checked against the server's `CLUSTER KEYSLOT`).
fn jobs_per_master(cluster: &RedisCluster, store: &RedisStore) -> BTreeMap<u16, u64> {
    let mut per_master = BTreeMap::new();
    for keys in store.shard_keys() {
        let slot = key_slot(&keys.jobs);
        let owner = cluster.owner_of(slot);
        let mut node = cluster.node(owner);
        let server_slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&keys.jobs)
            .query(&mut node)
            .unwrap();
        assert_eq!(server_slot, slot, "{}", keys.jobs);
        let n: u64 = redis::cmd("HLEN").arg(&keys.jobs).query(&mut node).unwrap();
        *per_master.entry(owner).or_default() += n;
    }
    per_master
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_busy_topics_jobs_are_spread_over_every_master_and_all_come_back() {
    const N: usize = 3000;
    let cluster = start_cluster(3, 0).await;
    let store = connect(&cluster, "busy").await;
    let topic = Topic::parse("orders").unwrap();
    let ids: Vec<String> = (0..N).map(|i| format!("order-{i}")).collect();
    push_all(&store, &topic, &ids).await;

    let per_master = jobs_per_master(&cluster, &store);
    assert_eq!(per_master.len(), 3, "jobs per master: {per_master:?}");
    assert_eq!(per_master.values().sum::<u64>(), N as u64);
    // 8 evenly placed shards put at least 2 on each master, ~375 jobs per shard.
    for (port, n) in &per_master {
        assert!(
            *n as usize >= N / 6,
            "master {port} holds only {n} of {N} jobs"
        );
    }

    // Every node forgets the scripts (as after a restart): the next calls reload them.
    for port in cluster.ports() {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut cluster.node(port))
            .unwrap();
    }
    let got = reserve_all(&store, &topic).await;
    assert_eq!(got.len(), N);
    assert_eq!(got, ids.into_iter().collect::<HashSet<_>>());
    let stats = store.stats().await.unwrap();
    assert_eq!(stats.topics[&topic].reserved, N as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_cluster_is_refused_fast_as_unavailable() {
    let seeds = vec![
        format!("redis://127.0.0.1:{}/", free_port()),
        format!("redis://127.0.0.1:{}/", free_port()),
    ];
    let started = Instant::now();
    let r = RedisStore::connect(RedisOptions {
        target: RedisTarget::Cluster(seeds),
        prefix: "x".into(),
        shards: 8,
    })
    .await;
    assert!(
        matches!(r, Err(StoreError::Unavailable(_))),
        "expected Unavailable"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

async fn post(http: &reqwest::Client, url: &str, body: Value) -> Value {
    let r = http
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    r.json().await.unwrap_or_else(|e| panic!("POST {url}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_redis_cluster_pushes_and_pops_through_the_seed_api() {
    let cluster = start_cluster(3, 0).await;
    let seeds = cluster.urls().join(",");
    let server = DelayqProcess::start(&["--redis-cluster", &seeds, "--prefix", "e2e"]).await;
    let http = reqwest::Client::new();
    let url = &server.base_url;

    let ids: Vec<String> = (0..40).map(|i| format!("e2e-{i}")).collect();
    for id in &ids {
        let r = post(
            &http,
            &format!("{url}/push"),
            json!({"topic": "e2e", "id": id, "delay": 0, "ttr": 60, "body": id}),
        )
        .await;
        assert_eq!(r["code"], 0, "push {id}: {r}");
    }
    let pushed_at = Instant::now();
    let r = post(
        &http,
        &format!("{url}/push"),
        json!({"topic": "e2e", "id": "later", "delay": 1, "ttr": 60, "body": "later"}),
    )
    .await;
    assert_eq!(r["code"], 0, "push later: {r}");
    // The jobs are on the cluster, spread over its masters.
    let masters: HashSet<u16> = cluster.slot_owners().values().copied().collect();
    let holding = masters
        .iter()
        .filter(|&&port| {
            let n: u64 = redis::cmd("DBSIZE").query(&mut cluster.node(port)).unwrap();
            n > 0
        })
        .count();
    assert_eq!(holding, 3, "every master holds some of the keys");

    let mut got = HashSet::new();
    while got.len() < ids.len() + 1 {
        let r = post(
            &http,
            &format!("{url}/pop"),
            json!({"topic": "e2e", "timeout": 5}),
        )
        .await;
        assert_eq!(r["code"], 0, "pop: {r}");
        let data = &r["data"];
        assert!(
            !data.is_null(),
            "pop timed out with {} of 41 jobs",
            got.len()
        );
        let id = data["id"].as_str().unwrap().to_string();
        assert_eq!(data["body"], id.as_str());
        if id == "later" {
            assert!(
                pushed_at.elapsed() >= Duration::from_secs(1),
                "popped early"
            );
        }
        let f = post(&http, &format!("{url}/finish"), json!({"id": id})).await;
        assert_eq!(f["code"], 0, "finish {id}: {f}");
        assert!(got.insert(id.clone()), "{id} popped twice");
    }
    let r = post(
        &http,
        &format!("{url}/pop"),
        json!({"topic": "e2e", "timeout": 0}),
    )
    .await;
    assert!(r["data"].is_null(), "nothing is left: {r}");
}

/// Kills a master that holds jobs; its replica takes over. Jobs whose writes had reached the
/// replica (waited for here) all survive; calls on that master's shards fail with
/// `Unavailable` until the failover completes, and then work without reconnecting anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_failover_keeps_replicated_jobs_and_service_resumes() {
    const N: usize = 600;
    let mut cluster = start_cluster(3, 1).await;
    let store = connect(&cluster, "fo").await;
    let topic = Topic::parse("fo").unwrap();
    let ids: Vec<String> = (0..N).map(|i| format!("fo-{i}")).collect();
    push_all(&store, &topic, &ids).await;
    cluster.wait_replicated(Duration::from_secs(10));

    let victim = cluster.owner_of(key_slot(&store.shard_keys()[0].jobs));
    cluster.stop_node(victim);
    let killed = Instant::now();
    // A by-id call on shard 0 fails until a replica is promoted, then succeeds.
    let probe = ids
        .iter()
        .find(|id| delayq::store::redis::shard_of(id, 8) == 0)
        .unwrap();
    let probe = JobId::parse(probe).unwrap();
    let mut failures = 0;
    loop {
        match store.get(&probe).await {
            Ok(_) => break,
            Err(StoreError::Unavailable(_)) => failures += 1,
            Err(e) => panic!("unexpected error during failover: {e}"),
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "shard 0 did not come back; logs:\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let downtime = killed.elapsed();
    eprintln!("failover: shard 0 unavailable for {downtime:?} ({failures} failed calls)");
    cluster.wait_ok(Duration::from_secs(20));
    // The node we ask may hear of the promotion a moment after the client did (gossip).
    let slot = key_slot(&store.shard_keys()[0].jobs);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let owner = cluster
            .slot_owners()
            .iter()
            .find(|((lo, hi), _)| (*lo..=*hi).contains(&slot))
            .map(|(_, port)| *port);
        if owner.is_some_and(|p| p != victim) {
            break;
        }
        assert!(Instant::now() < deadline, "no new master for slot {slot}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let got = reserve_all(&store, &topic).await;
    assert_eq!(got, ids.into_iter().collect::<HashSet<_>>());
    push_all(&store, &topic, &["after-failover".to_string()]).await;
    assert_eq!(reserve_all(&store, &topic).await.len(), 1);
}

/// Library names on one node.
fn libraries_on(cluster: &RedisCluster, port: u16) -> Vec<String> {
    let listed: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query(&mut cluster.node(port))
        .unwrap();
    listed
        .iter()
        .map(|l| redis::from_redis_value_ref(&l["library_name"]).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_deletes_other_builds_libraries_from_every_master() {
    let cluster = start_cluster(3, 0).await;
    let old = "delayq_0123456789abcdef";
    let code =
        format!("#!lua name={old}\nredis.register_function('{old}_push', function() return 1 end)");
    for &port in &cluster.ports() {
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(&code)
            .query(&mut cluster.node(port))
            .unwrap();
    }
    let store = connect(&cluster, "libs").await;
    for &port in &cluster.ports() {
        let names = libraries_on(&cluster, port);
        assert_eq!(names.len(), 1, "node {port}: {names:?}");
        assert_ne!(names[0], old, "node {port}");
    }
    // This build's library serves on every master.
    let t = Topic::parse("t").unwrap();
    let ids: Vec<String> = (0..16).map(|i| format!("j{i}")).collect();
    push_all(&store, &t, &ids).await;
    assert_eq!(reserve_all(&store, &t).await.len(), ids.len());
}
