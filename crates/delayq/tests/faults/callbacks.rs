//! Push delivery with real processes (issue 15's crash and multi-instance guarantees): a real
//! HTTP receiver on 127.0.0.1 records every callback (its `webhook-id`, `delayq-attempt` and
//! arrival time) and answers as the test says, while delayq processes are killed and restarted
//! or share one Redis.
//!
//! - kill -9 of delayq while a callback is in flight (the receiver holds the request open), on
//!   the embedded store (data directory kept across the restart) and on Redis: after the
//!   restart the job is called again once its reservation (timeout + 5 s) runs out, with the
//!   next attempt number, and finishes; a job finished before the kill is not called again, a
//!   job due after the restart is called once, and a pull job is still there.
//! - Three delayq instances on one Redis, 1,000 callback jobs due within two seconds pushed
//!   through all three: every job is called, none early, none twice, none left behind.

use super::support::process::DelayqProcess;
use super::support::redis_server::RedisServer;
use super::{ServerLog, post, push};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::routing::post as axum_post;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// The held callback's timeout: short, so its reservation (timeout + 5 s) runs out soon after
/// the restart.
const HELD_TIMEOUT_MS: u64 = 2_000;
/// What a callback job's reservation adds to its timeout (`job::CALLBACK_GRACE_MS`).
const GRACE_MS: u64 = 5_000;
/// Longest the crash test waits for the held job's second call and finish.
const RECALL_WITHIN: Duration = Duration::from_secs(20);
/// Jobs of the multi-instance test.
const SHARED_JOBS: usize = 1_000;
/// Over how long the multi-instance test's jobs fall due.
const SHARED_SPREAD_MS: u64 = 2_000;
/// Longest the multi-instance test waits for every job to be called once.
const SHARED_WITHIN: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// kill -9 while a callback is in flight

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_delayq_during_a_callback_on_the_embedded_store_calls_it_again_and_loses_nothing()
{
    crash_during_a_callback(Store::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_delayq_during_a_callback_on_redis_calls_it_again_and_loses_nothing() {
    crash_during_a_callback(Store::Redis).await;
}

#[derive(Debug, Clone, Copy)]
enum Store {
    Embedded,
    Redis,
}

async fn crash_during_a_callback(store: Store) {
    let started = Instant::now();
    let receiver = Receiver::start().await;
    let log = ServerLog::new();
    let redis = matches!(store, Store::Redis).then(RedisServer::start);
    let mut args = vec!["--callback-allow".to_string(), "127.0.0.1".into()];
    match &redis {
        Some(r) => args.extend(["--redis".to_string(), r.url()]),
        None => {
            let data = log.dir.path().join("data");
            args.extend([
                "--data-dir".to_string(),
                data.to_string_lossy().into_owned(),
            ]);
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut delayq = DelayqProcess::start_logging_to(&args, log.path()).await;
    let http = Client::new();
    let base = delayq.base_url.clone();

    // `held`: its first call is held open by the receiver until delayq is gone.
    receiver.hold("held");
    let callback = |timeout_ms: u64| json!({"url": receiver.url(), "timeout_ms": timeout_ms});
    let jobs = [
        json!({"topic": "cb", "id": "held", "body": "held body",
               "callback": callback(HELD_TIMEOUT_MS), "backoff_ms": [200]}),
        json!({"topic": "cb", "id": "done", "body": "done body", "callback": callback(2_000)}),
        json!({"topic": "cb", "id": "later", "body": "later body", "delay_ms": 3_000,
               "callback": callback(2_000)}),
        json!({"topic": "pull", "id": "pull", "body": "pull body", "delay_ms": 3_600_000}),
    ];
    for job in jobs {
        let (s, b) = push(&http, &base, job).await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
    }

    // `held` is in flight, `done` answered and finished.
    receiver
        .wait_for_calls("held", 1, Duration::from_secs(10))
        .await;
    receiver
        .wait_for_calls("done", 1, Duration::from_secs(10))
        .await;
    wait_gone(&http, &base, "done", Duration::from_secs(10)).await;
    let (s, held) = get(&http, &base, "/v1/jobs/held").await;
    assert_eq!(
        (s, &held["state"]),
        (StatusCode::OK, &json!("reserved")),
        "{held}"
    );
    // A finish is acknowledged (durable) a moment after it is visible.
    tokio::time::sleep(Duration::from_millis(300)).await;

    delayq.kill();
    receiver.release();
    let killed_at = Instant::now();
    delayq.restart().await;
    let restart_took = killed_at.elapsed();

    // Called again, with the next attempt, once the first call's reservation ran out; then
    // finished.
    let calls = receiver.wait_for_calls("held", 2, RECALL_WITHIN).await;
    wait_gone(&http, &base, "held", Duration::from_secs(10)).await;
    let (first, second) = (&calls[0], &calls[1]);
    assert_eq!(first.attempt, 1, "{calls:?}");
    assert_eq!(
        second.attempt, 2,
        "the call after the crash is the second attempt: {calls:?}"
    );
    assert_eq!(second.body, "held body");
    let gap = second.at - first.at;
    assert!(
        gap >= Duration::from_millis(HELD_TIMEOUT_MS),
        "called again {gap:?} after the first call, within its timeout"
    );

    // Nothing else lost or repeated.
    let later = receiver.wait_for_calls("later", 1, RECALL_WITHIN).await;
    assert_eq!(later[0].attempt, 1, "{later:?}");
    wait_gone(&http, &base, "later", Duration::from_secs(10)).await;
    let (s, pull) = get(&http, &base, "/v1/jobs/pull").await;
    assert_eq!(
        (s, &pull["state"]),
        (StatusCode::OK, &json!("delayed")),
        "{pull}"
    );
    // A moment for any stray call to arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counts = receiver.counts();
    assert_eq!(
        counts,
        BTreeMap::from([("done".into(), 1), ("held".into(), 2), ("later".into(), 1)]),
        "calls per job"
    );
    log.assert_no_panic();
    println!(
        "{store:?}: restarted in {restart_took:?}; held job called again {gap:?} after its \
         first call (reservation {} ms); test took {:?}",
        HELD_TIMEOUT_MS + GRACE_MS,
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// Three instances on one Redis

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_one_redis_call_each_of_1000_callback_jobs_once() {
    let started = Instant::now();
    let receiver = Receiver::start().await;
    let redis = RedisServer::start();
    let logs: Vec<ServerLog> = (0..3).map(|_| ServerLog::new()).collect();
    let url = redis.url();
    let args = ["--redis", url.as_str(), "--callback-allow", "127.0.0.1"];
    let mut instances = Vec::new();
    for log in &logs {
        instances.push(DelayqProcess::start_logging_to(&args, log.path()).await);
    }
    let http = Client::new();

    // Due over SHARED_SPREAD_MS from 2 s after now, pushed in batches of 100 through the
    // instances in turn.
    let t0 = unix_ms() + 2_000;
    let due = |i: usize| t0 + i as u64 * SHARED_SPREAD_MS / SHARED_JOBS as u64;
    let ids: Vec<String> = (0..SHARED_JOBS).map(|i| format!("j{i}")).collect();
    for (k, chunk) in (0..SHARED_JOBS).collect::<Vec<_>>().chunks(100).enumerate() {
        let jobs: Vec<Value> = chunk
            .iter()
            .map(|&i| {
                json!({"topic": "shared", "id": ids[i], "body": format!("body {i}"),
                       "run_at_ms": due(i), "callback": {"url": receiver.url()}})
            })
            .collect();
        let base = &instances[k % 3].base_url;
        let (s, b) = post(&http, base, "/v1/jobs/batch", json!({"jobs": jobs})).await;
        assert_eq!(s, StatusCode::OK, "{b}");
        let created = b["results"]
            .as_array()
            .map(|r| r.iter().filter(|x| x["status"] == "created").count());
        assert_eq!(created, Some(chunk.len()), "{b}");
    }
    let pushed_by = unix_ms();
    assert!(
        pushed_by < t0,
        "the push took {} ms past the first due time",
        pushed_by - t0
    );

    let deadline = Instant::now() + SHARED_WITHIN;
    while receiver.distinct() < SHARED_JOBS && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all_called_after = Duration::from_millis(unix_ms().saturating_sub(t0));
    // A moment for any duplicate to arrive.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let calls = receiver.calls();
    let mut seen = HashSet::new();
    let mut duplicates = Vec::new();
    let mut early = Vec::new();
    for c in &calls {
        if !seen.insert(c.id.clone()) {
            duplicates.push(c.id.clone());
        }
        let i: usize = c.id.trim_start_matches('j').parse().expect("our id");
        if c.unix_ms < due(i) {
            early.push((c.id.clone(), due(i) - c.unix_ms));
        }
        assert_eq!(c.body, format!("body {i}"), "{c:?}");
        assert_eq!(
            c.attempt, 1,
            "every call succeeded, so every call is the first: {c:?}"
        );
    }
    let missing: Vec<&String> = ids.iter().filter(|id| !seen.contains(*id)).collect();
    println!(
        "three instances: {} calls of {SHARED_JOBS} jobs, {} duplicates, {} missing, {} early; \
         the last first call {all_called_after:?} after the first due time; per instance {:?}; \
         test took {:?}",
        calls.len(),
        duplicates.len(),
        missing.len(),
        early.len(),
        per_instance(&http, &instances).await,
        started.elapsed()
    );
    assert!(missing.is_empty(), "never called: {missing:?}");
    assert!(duplicates.is_empty(), "called twice: {duplicates:?}");
    assert!(
        early.is_empty(),
        "called before due (id, ms early): {early:?}"
    );

    // Every job finished: nothing left under the topic.
    for d in &instances {
        let (s, stats) = get(&http, &d.base_url, "/v1/stats").await;
        assert_eq!(s, StatusCode::OK, "{stats}");
        let counts = &stats["callbacks"]["shared"];
        for state in ["delayed", "ready", "reserved", "dead"] {
            assert!(
                counts[state].as_u64().unwrap_or(0) == 0,
                "callback jobs left: {stats}"
            );
        }
    }
    for log in &logs {
        log.assert_no_panic();
    }
}

/// Each instance's count of 2xx callback attempts, from its `/metrics`.
async fn per_instance(http: &Client, instances: &[DelayqProcess]) -> Vec<u64> {
    let mut out = Vec::new();
    for d in instances {
        let text = http
            .get(format!("{}/metrics", d.base_url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let n = text
            .lines()
            .filter(|l| l.starts_with("delayq_callback_attempts") && l.contains("2xx"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
        out.push(n as u64);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The receiver

/// One call the receiver got.
#[derive(Debug, Clone)]
struct Call {
    id: String,
    attempt: u32,
    body: String,
    at: Instant,
    unix_ms: u64,
}

#[derive(Default)]
struct Recorded {
    calls: Vec<Call>,
    /// Ids whose calls are held open until `release`.
    held: HashSet<String>,
}

/// A callback receiver on 127.0.0.1: records every call and answers 200 at once, or holds the
/// calls of the ids given to `hold` open until `release`.
struct Receiver {
    url: String,
    state: Arc<Mutex<Recorded>>,
    release: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
}

type ReceiverState = (Arc<Mutex<Recorded>>, watch::Receiver<bool>);

impl Receiver {
    async fn start() -> Receiver {
        delayq::install_tls_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(Recorded::default()));
        let (release, released) = watch::channel(false);
        let app = Router::new()
            .route("/hook", axum_post(receive))
            .with_state((state.clone(), released));
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            url: format!("http://{addr}/hook"),
            state,
            release,
            server,
        }
    }

    fn url(&self) -> &str {
        &self.url
    }

    fn hold(&self, id: &str) {
        self.state.lock().unwrap().held.insert(id.to_string());
    }

    /// Answers every held call (200) and holds no more.
    fn release(&self) {
        self.state.lock().unwrap().held.clear();
        let _ = self.release.send(true);
    }

    fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    fn calls_of(&self, id: &str) -> Vec<Call> {
        let s = self.state.lock().unwrap();
        s.calls.iter().filter(|c| c.id == id).cloned().collect()
    }

    fn distinct(&self) -> usize {
        let s = self.state.lock().unwrap();
        s.calls.iter().map(|c| &c.id).collect::<HashSet<_>>().len()
    }

    fn counts(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for c in self.calls() {
            *out.entry(c.id).or_default() += 1;
        }
        out
    }

    /// Waits until `id` was called `n` times; returns its calls.
    async fn wait_for_calls(&self, id: &str, n: usize, within: Duration) -> Vec<Call> {
        let deadline = Instant::now() + within;
        loop {
            let calls = self.calls_of(id);
            if calls.len() >= n {
                return calls;
            }
            assert!(
                Instant::now() < deadline,
                "{id}: {} calls within {within:?}, expected {n}: {calls:?}; all calls: {:?}",
                calls.len(),
                self.counts()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn receive(
    State((state, mut released)): State<ReceiverState>,
    headers: HeaderMap,
    body: Bytes,
) -> AxumStatus {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let call = Call {
        id: header("webhook-id"),
        attempt: header("delayq-attempt").parse().unwrap_or(0),
        body: String::from_utf8_lossy(&body).into_owned(),
        at: Instant::now(),
        unix_ms: unix_ms(),
    };
    let hold = {
        let mut s = state.lock().unwrap();
        let hold = s.held.contains(&call.id);
        s.calls.push(call);
        hold
    };
    if hold {
        let _ = released.wait_for(|r| *r).await;
    }
    AxumStatus::OK
}

// ---------------------------------------------------------------------------------------------
// Helpers

async fn get(http: &Client, base: &str, path: &str) -> (StatusCode, Value) {
    let r = http.get(format!("{base}{path}")).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Waits until job `id` is gone (finished).
async fn wait_gone(http: &Client, base: &str, id: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let (s, job) = get(http, base, &format!("/v1/jobs/{id}")).await;
        if s == StatusCode::NOT_FOUND {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} not finished within {within:?}: {s} {job}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
