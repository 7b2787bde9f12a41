//! Mixed /v1 load for the fault tests, and the client-side [`Ledger`] of what the server
//! acknowledged, so a test can kill things under load and then prove nothing was lost.
//!
//! [`Load::start`] runs producers (pushes with explicit ids, half due at once, half after up to
//! `max_delay_ms`) and consumers (reserve with a short long poll, finish, except that jobs
//! marked "abandon once" are left unfinished on their first delivery, so their TTR has to bring
//! them back). Every task survives failures: each failed request is classified in
//! [`Failures`] (store unavailable, transport error, client timeout, anything else), the task
//! pauses briefly and goes on, so one load runs through a delayq crash or a Redis outage.
//! Every task is bounded by a request count and a duration, whatever happens.
//!
//! The checks ([`check_nothing_lost`], [`drain`], [`check_every_job_delivered`]) read the ledger
//! after the load stopped. Not here: starting, killing or restarting processes (process.rs,
//! redis_server.rs) and the fault scenarios themselves (faults.rs).

use futures::StreamExt;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::task::JoinHandle;

/// Marks a job body whose first delivery a consumer deliberately leaves unfinished.
const ABANDON_ONCE: &str = "abandon once";
/// Most distinct unexpected answers kept for the report (the count is kept in full).
const OTHER_KEPT: usize = 20;

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// An HTTP client whose every request gives up after `timeout`: a request that hits it is
/// counted as a hang, never waited on forever.
pub fn client(timeout: Duration) -> Client {
    Client::builder()
        .timeout(timeout)
        .build()
        .expect("build the HTTP client")
}

/// What the load does; see the module docs.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub topic: String,
    /// Prepended to every id, e.g. `r3-`, so several loads on one store never reuse an id.
    pub id_prefix: String,
    pub producers: usize,
    pub consumers: usize,
    pub ttr_ms: u64,
    /// Odd-numbered pushes are due after up to this many ms; even ones at once.
    pub max_delay_ms: u64,
    /// Every n-th push is marked "abandon once"; 0: none.
    pub abandon_every: u64,
    /// `timeout_ms` of each reserve.
    pub reserve_wait_ms: u64,
    /// Pause after a failed request, so an outage is not a busy loop.
    pub backoff: Duration,
    /// Client-side bound on each request; hitting it counts as [`Failures::timeouts`].
    pub request_timeout: Duration,
    /// No task runs longer than this...
    pub max_duration: Duration,
    /// ...or sends more requests than this.
    pub max_requests_per_task: u64,
}

impl LoadSpec {
    /// A mixed load with TTR 3 s and delays of 0–2 s, every 7th job abandoned once; three
    /// consumers to two producers, so the consumers keep up and a soak's backlog stays small.
    pub fn mixed(topic: &str, id_prefix: &str) -> LoadSpec {
        LoadSpec {
            topic: topic.into(),
            id_prefix: id_prefix.into(),
            producers: 2,
            consumers: 3,
            ttr_ms: 3_000,
            max_delay_ms: 2_000,
            abandon_every: 7,
            reserve_wait_ms: 300,
            backoff: Duration::from_millis(100),
            request_timeout: Duration::from_secs(10),
            max_duration: Duration::from_secs(120),
            max_requests_per_task: 200_000,
        }
    }
}

/// One delivery as the consumer saw it.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub attempts: u64,
    /// Client clock when the reply arrived (at or after the server's reserve).
    pub at_ms: u64,
    pub reserved_until_ms: u64,
    /// Left unfinished on purpose.
    pub abandoned: bool,
}

/// A push as it was sent.
#[derive(Debug, Clone)]
pub struct Sent {
    pub body: String,
    /// Client clock before sending plus the delay: the job may not be handed out before this.
    pub due_floor_ms: u64,
}

/// Requests that did not get their success answer, by kind.
#[derive(Debug, Default)]
pub struct Failures {
    /// 503 `store_unavailable`.
    pub unavailable: u64,
    /// The connection failed or was cut (delayq not running).
    pub transport: u64,
    /// No answer within the client's timeout: a hang.
    pub timeouts: u64,
    /// Anything else (the first [`OTHER_KEPT`] are in `other`).
    pub other_count: u64,
    pub other: Vec<String>,
    /// The longest any failed request took to fail.
    pub slowest: Duration,
}

impl Failures {
    pub fn total(&self) -> u64 {
        self.unavailable + self.transport + self.timeouts + self.other_count
    }
}

/// What the clients sent and what the server acknowledged, across every load on one server.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Every push sent, including those whose answer was an error or never came.
    pub pushes: HashMap<String, Sent>,
    /// Pushes answered 201.
    pub push_acked: HashSet<String>,
    /// Finishes sent (including unanswered ones), and those answered 204.
    pub finish_sent: HashSet<String>,
    pub finish_acked: HashSet<String>,
    /// Whether a crash may undo the finishes of its last moments (the embedded store answers
    /// them before their fsync, the Redis store before Redis runs them, docs/reliability.md):
    /// a job whose acknowledged finish was undone must be there, and be delivered again.
    pub finishes_may_be_undone: bool,
    /// Whether a crash may undo the reservations of its last moments too (the embedded store):
    /// such a job is delivered again at once with the same attempt number; else after its TTR.
    pub reservations_may_be_undone: bool,
    /// When each crash happened (client clock, taken just after the kill), for
    /// `reservations_may_be_undone`: only a delivery within [`UNDO_WINDOW_MS`] before one may
    /// have its reservation undone.
    pub crashes_ms: Vec<u64>,
    /// Every delivery seen, per id.
    pub deliveries: HashMap<String, Vec<Delivery>>,
    pub failures: Failures,
}

/// How long before a crash a reservation may have been made and still be undone by it. The
/// embedded store makes a reservation durable with the next acknowledged change or within
/// 250 ms; the rest is room for a loaded machine (and a reply read after the kill).
pub const UNDO_WINDOW_MS: u64 = 3_000;

impl Ledger {
    pub fn shared() -> Arc<Mutex<Ledger>> {
        Arc::default()
    }

    /// Whether a crash may have undone the reservation of delivery `d`: then the job may be
    /// delivered again at once, with the same attempt number.
    pub fn reservation_may_be_undone(&self, d: &Delivery) -> bool {
        self.reservations_may_be_undone
            && self
                .crashes_ms
                .iter()
                .any(|&c| d.at_ms + UNDO_WINDOW_MS >= c && d.at_ms <= c + UNDO_WINDOW_MS)
    }

    /// Whether `later` is a redelivery of the job `d` was a delivery of: a later attempt, or
    /// the same attempt again where a crash undid `d`'s reservation.
    pub fn redelivers(&self, d: &Delivery, later: &Delivery) -> bool {
        later.attempts > d.attempts
            || (later.attempts == d.attempts
                && later.at_ms > d.at_ms
                && self.reservation_may_be_undone(d))
    }

    /// Deliveries left unfinished on purpose that no later delivery has followed yet.
    pub fn awaiting_redelivery(&self) -> Vec<(String, Delivery)> {
        let mut out = Vec::new();
        for (id, ds) in &self.deliveries {
            for d in ds.iter().filter(|d| d.abandoned) {
                if !ds.iter().any(|l| self.redelivers(d, l)) {
                    out.push((id.clone(), d.clone()));
                }
            }
        }
        out
    }

    /// Whether a finish answered 404 is at-least-once at work, not a lost job: a crash undid
    /// the reservation this finish was for (only where `finishes_may_be_undone`), the job was
    /// delivered again (recorded before that delivery's finish is sent), and that delivery's
    /// consumer finished it first. Whether any job is lost is checked after each round.
    fn finished_by_a_redelivery(&self, id: &str) -> bool {
        self.finishes_may_be_undone && self.deliveries.get(id).is_some_and(|d| d.len() >= 2)
    }

    fn failed(&mut self, op: &str, outcome: Outcome, took: Duration) {
        let f = &mut self.failures;
        f.slowest = f.slowest.max(took);
        match outcome {
            Outcome::Answer(status, body) if is_store_unavailable(status, &body) => {
                f.unavailable += 1
            }
            Outcome::Answer(status, body) => {
                f.other_count += 1;
                if f.other.len() < OTHER_KEPT {
                    f.other.push(format!("{op}: {status} {body}"));
                }
            }
            Outcome::Transport => f.transport += 1,
            Outcome::Timeout => f.timeouts += 1,
        }
    }
}

/// 503 with the /v1 `store_unavailable` code.
pub fn is_store_unavailable(status: StatusCode, body: &Value) -> bool {
    status == StatusCode::SERVICE_UNAVAILABLE && body["error"]["code"] == "store_unavailable"
}

/// How one request ended.
#[derive(Debug)]
pub enum Outcome {
    /// Any HTTP answer, body parsed as JSON (`Null` when empty or not JSON).
    Answer(StatusCode, Value),
    Transport,
    Timeout,
}

/// Sends a request and reads the whole answer.
pub async fn send(req: reqwest::RequestBuilder) -> Outcome {
    match req.send().await {
        Ok(r) => {
            let status = r.status();
            match r.bytes().await {
                Ok(b) => Outcome::Answer(status, serde_json::from_slice(&b).unwrap_or(Value::Null)),
                Err(e) if e.is_timeout() => Outcome::Timeout,
                Err(_) => Outcome::Transport,
            }
        }
        Err(e) if e.is_timeout() => Outcome::Timeout,
        Err(_) => Outcome::Transport,
    }
}

/// A running load; [`Load::stop`] ends it.
pub struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Load {
    /// Starts `spec.producers` producers and `spec.consumers` consumers against `base_url`,
    /// recording into `ledger`.
    pub fn start(base_url: &str, spec: &LoadSpec, ledger: Arc<Mutex<Ledger>>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let spec = Arc::new(spec.clone());
        let http = client(spec.request_timeout);
        let mut tasks = Vec::new();
        for p in 0..spec.producers {
            tasks.push(tokio::spawn(producer(
                http.clone(),
                base_url.to_string(),
                spec.clone(),
                p,
                ledger.clone(),
                stop.clone(),
            )));
        }
        for _ in 0..spec.consumers {
            tasks.push(tokio::spawn(consumer(
                http.clone(),
                base_url.to_string(),
                spec.clone(),
                ledger.clone(),
                stop.clone(),
            )));
        }
        Load { stop, tasks }
    }

    /// Tells every task to stop and waits until they have (each finishes its request in
    /// flight, bounded by the request timeout).
    pub async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            t.await.expect("a load task panicked");
        }
    }
}

async fn producer(
    http: Client,
    base: String,
    spec: Arc<LoadSpec>,
    p: usize,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) {
    let started = Instant::now();
    for n in 0..spec.max_requests_per_task {
        if stop.load(Ordering::SeqCst) || started.elapsed() > spec.max_duration {
            break;
        }
        let id = format!("{}p{p}-{n}", spec.id_prefix);
        let delay_ms = if n % 2 == 0 {
            0
        } else {
            (n * 379) % (spec.max_delay_ms + 1)
        };
        let body = if spec.abandon_every > 0 && n % spec.abandon_every == 0 {
            format!("body of {id}, {ABANDON_ONCE}")
        } else {
            format!("body of {id}")
        };
        let due_floor_ms = now_ms() + delay_ms;
        let request = json!({"topic": spec.topic, "id": id, "body": body,
                             "delay_ms": delay_ms, "ttr_ms": spec.ttr_ms});
        ledger
            .lock()
            .unwrap()
            .pushes
            .insert(id.clone(), Sent { body, due_floor_ms });
        let sent = Instant::now();
        match send(http.post(format!("{base}/v1/jobs")).json(&request)).await {
            Outcome::Answer(StatusCode::CREATED, _) => {
                ledger.lock().unwrap().push_acked.insert(id);
            }
            other => {
                ledger.lock().unwrap().failed("push", other, sent.elapsed());
                tokio::time::sleep(spec.backoff).await;
            }
        }
    }
}

async fn consumer(
    http: Client,
    base: String,
    spec: Arc<LoadSpec>,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) {
    let started = Instant::now();
    let request = json!({"topics": [spec.topic], "max": 10, "timeout_ms": spec.reserve_wait_ms});
    let mut sent_requests = 0u64;
    while !stop.load(Ordering::SeqCst)
        && started.elapsed() < spec.max_duration
        && sent_requests < spec.max_requests_per_task
    {
        sent_requests += 1;
        let sent = Instant::now();
        let jobs = match send(http.post(format!("{base}/v1/reserve")).json(&request)).await {
            Outcome::Answer(StatusCode::OK, body) => body["jobs"].as_array().cloned(),
            other => {
                ledger
                    .lock()
                    .unwrap()
                    .failed("reserve", other, sent.elapsed());
                tokio::time::sleep(spec.backoff).await;
                continue;
            }
        };
        for job in jobs.expect("reserve answered without a jobs array") {
            let d = delivery(&job);
            let id = job["id"].as_str().expect("job id").to_string();
            let abandon = d.attempts == 1
                && job["body"]
                    .as_str()
                    .is_some_and(|b| b.ends_with(ABANDON_ONCE));
            {
                let mut l = ledger.lock().unwrap();
                l.deliveries.entry(id.clone()).or_default().push(Delivery {
                    abandoned: abandon,
                    ..d
                });
                if abandon {
                    continue;
                }
                l.finish_sent.insert(id.clone());
            }
            sent_requests += 1;
            let sent = Instant::now();
            match send(http.post(format!("{base}/v1/jobs/{id}/finish"))).await {
                Outcome::Answer(StatusCode::NO_CONTENT, _) => {
                    ledger.lock().unwrap().finish_acked.insert(id);
                }
                Outcome::Answer(StatusCode::NOT_FOUND, _)
                    if ledger.lock().unwrap().finished_by_a_redelivery(&id) => {}
                other => {
                    ledger
                        .lock()
                        .unwrap()
                        .failed("finish", other, sent.elapsed());
                    tokio::time::sleep(spec.backoff).await;
                }
            }
        }
    }
}

/// A delivery from a reserved `Job` object, stamped now.
fn delivery(job: &Value) -> Delivery {
    Delivery {
        attempts: job["attempts"].as_u64().expect("attempts"),
        at_ms: now_ms(),
        reserved_until_ms: job["reserved_until_ms"]
            .as_u64()
            .expect("reserved_until_ms"),
        abandoned: false,
    }
}

/// With the load stopped and the server up: every acknowledged push is still there (any
/// state) or a finish was sent for it; no acknowledged finish was undone (unless
/// `finishes_may_be_undone`: then the job is there reserved); whatever is there
/// has the body it was pushed with. Ids found finished-and-gone are added to `settled` and not
/// asked about again (the ledger grows over soak rounds). Returns how many jobs are present.
pub async fn check_nothing_lost(
    base: &str,
    ledger: &Ledger,
    settled: &mut HashSet<String>,
) -> usize {
    let http = client(Duration::from_secs(10));
    let ids: Vec<&String> = ledger
        .pushes
        .keys()
        .filter(|id| !settled.contains(*id))
        .collect();
    let answers: Vec<(&String, StatusCode, Value)> = futures::stream::iter(ids)
        .map(|id| {
            let http = http.clone();
            async move {
                match send(http.get(format!("{base}/v1/jobs/{id}"))).await {
                    Outcome::Answer(s, body) => (id, s, body),
                    other => panic!("GET {id}: {other:?}"),
                }
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let mut present = 0;
    for (id, status, job) in answers {
        match status {
            StatusCode::OK => {
                if ledger.finish_acked.contains(id) {
                    assert!(
                        ledger.finishes_may_be_undone,
                        "job {id}: an acknowledged finish was undone: {job}"
                    );
                    // Reserved (its reservation survived) or waiting to be delivered again
                    // (the crash undid its reservation too); never dead.
                    assert!(
                        ["reserved", "ready", "delayed"]
                            .contains(&job["state"].as_str().unwrap_or("")),
                        "job {id}: its finish was undone, so it is reserved or due again: {job}"
                    );
                }
                assert_eq!(job["body"], ledger.pushes[id].body, "job {id}");
                present += 1;
            }
            StatusCode::NOT_FOUND => {
                assert!(
                    !ledger.push_acked.contains(id) || ledger.finish_sent.contains(id),
                    "job {id}: acknowledged push lost (never finished, not in the store)"
                );
                if ledger.finish_acked.contains(id) {
                    settled.insert(id.clone());
                }
            }
            s => panic!("GET {id}: unexpected {s}: {job}"),
        }
    }
    present
}

/// Reserves and finishes everything left in `topic` (abandoning nothing), recording each
/// delivery, until the topic has no delayed, ready or reserved job. Panics on any failed
/// request, on a job that was never pushed, or if it takes longer than `within`.
pub async fn drain(base: &str, topic: &str, ledger: &Mutex<Ledger>, within: Duration) -> usize {
    let http = client(Duration::from_secs(10));
    let deadline = Instant::now() + within;
    let mut drained = 0;
    loop {
        let request = json!({"topics": [topic], "max": 100, "timeout_ms": 500});
        let jobs = match send(http.post(format!("{base}/v1/reserve")).json(&request)).await {
            Outcome::Answer(StatusCode::OK, body) => body["jobs"].as_array().cloned().unwrap(),
            other => panic!("drain: reserve failed: {other:?}"),
        };
        if jobs.is_empty() {
            let counts = match send(http.get(format!("{base}/v1/stats"))).await {
                Outcome::Answer(StatusCode::OK, stats) => stats["topics"][topic].clone(),
                other => panic!("drain: stats failed: {other:?}"),
            };
            let left: u64 = ["delayed", "ready", "reserved", "dead"]
                .iter()
                .map(|k| counts[k].as_u64().unwrap_or(0))
                .sum();
            if left == 0 {
                return drained;
            }
            assert!(
                Instant::now() < deadline,
                "drain: {topic} still has {counts} after {within:?}"
            );
        }
        for job in jobs {
            let id = job["id"].as_str().unwrap().to_string();
            {
                let mut l = ledger.lock().unwrap();
                assert!(
                    l.pushes.contains_key(&id),
                    "drain: job {id} was never pushed"
                );
                assert!(
                    l.finishes_may_be_undone || !l.finish_acked.contains(&id),
                    "drain: job {id} delivered after an acknowledged finish"
                );
                l.deliveries
                    .entry(id.clone())
                    .or_default()
                    .push(delivery(&job));
                l.finish_sent.insert(id.clone());
            }
            match send(http.post(format!("{base}/v1/jobs/{id}/finish"))).await {
                Outcome::Answer(StatusCode::NO_CONTENT, _) => {
                    ledger.lock().unwrap().finish_acked.insert(id);
                }
                other => panic!("drain: finish {id} failed: {other:?}"),
            }
            drained += 1;
        }
        assert!(
            Instant::now() < deadline,
            "drain took longer than {within:?}"
        );
    }
}

/// After [`drain`]: every acknowledged push was delivered; none before it was due; no
/// reservation was handed out twice (two deliveries with the same attempt number) or again
/// before its TTR ran out; and every delivery left unfinished on purpose was followed by a
/// redelivery with more attempts.
pub fn check_every_job_delivered(ledger: &Ledger) {
    for id in &ledger.push_acked {
        assert!(
            ledger.deliveries.contains_key(id),
            "acknowledged push {id} was never delivered"
        );
    }
    for (id, ds) in &ledger.deliveries {
        let floor = ledger.pushes[id].due_floor_ms;
        let mut attempts = HashSet::new();
        for d in ds {
            assert!(
                d.at_ms >= floor,
                "job {id} delivered {} ms before it was due: {ds:?}",
                floor - d.at_ms
            );
            let undone = ledger.reservation_may_be_undone(d);
            assert!(
                attempts.insert(d.attempts) || undone,
                "job {id}: delivery {} seen twice (a duplicate within the TTR): {ds:?}",
                d.attempts
            );
            if d.abandoned {
                assert!(
                    ds.iter()
                        .any(|l| ledger.redelivers(d, l)
                            && (l.at_ms >= d.reserved_until_ms || undone)),
                    "job {id}: left unfinished at attempt {}, never delivered again after its TTR: {ds:?}",
                    d.attempts
                );
            }
        }
        // A later attempt never comes before an earlier reservation ran out (unless a crash
        // undid that reservation).
        for d in ds.iter().filter(|d| !ledger.reservation_may_be_undone(d)) {
            for l in ds.iter().filter(|l| l.attempts > d.attempts) {
                assert!(
                    l.at_ms >= d.reserved_until_ms,
                    "job {id}: redelivered {} ms before its TTR ran out: {ds:?}",
                    d.reserved_until_ms - l.at_ms
                );
            }
        }
    }
}
