//! The journal under load with real processes: `delayq serve --redis --journal` (the real
//! binary, support/process.rs) pushed to and deleted from by a few bounded client loops,
//! while delayq is killed (-9) or PostgreSQL is stopped for a while; then Redis loses
//! everything (FLUSHALL of the test's own redis-server) and a restore must bring back every
//! acknowledged job that was not acknowledged as deleted.
//!
//! The outage tests run a PostgreSQL of their own (private_pg.rs); the kill test uses a
//! database on the machine's PostgreSQL and MariaDB. `DELAYQ_JOURNAL_OUTAGE_SECS` (default
//! 10) sets how long PostgreSQL stays away.

use crate::db::TestDb;
use crate::private_pg::PrivatePostgres;
use crate::support::process::DelayqProcess;
use crate::support::redis_server::{RedisServer, flushall};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

journal_tests!(kill_9_under_load_then_flushall_loses_no_acknowledged_job);

/// One load test at a time: on two cores, two of them at once starve each other's servers
/// into client timeouts.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What the clients were told.
#[derive(Default)]
struct Ledger {
    /// Pushes answered 201.
    pushed: HashSet<String>,
    /// Deletes answered 204/200.
    deleted: HashSet<String>,
    /// Deletes sent and not answered (in doubt).
    doubtful: HashSet<String>,
    /// 503 answers, and the last one's body.
    unavailable: u64,
    last_503: Option<Value>,
    /// Any other answer: an unexpected status.
    other: Vec<String>,
    /// Requests that got no answer (a transport error or the client's 10 s timeout, when the
    /// machine is busy with other tests): in doubt, not checked.
    unanswered: Vec<String>,
}

/// `clients` loops pushing jobs (and deleting every third acknowledged one) until `stop`.
fn load(
    base: &str,
    clients: usize,
    stop: Arc<AtomicBool>,
    ledger: Arc<Mutex<Ledger>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let next = Arc::new(AtomicU64::new(0));
    (0..clients)
        .map(|c| {
            let (http, base, stop, ledger, next) = (
                http.clone(),
                base.to_string(),
                stop.clone(),
                ledger.clone(),
                next.clone(),
            );
            tokio::spawn(async move {
                // Bounded: stops on `stop`, and after 100,000 requests whatever happens.
                for _ in 0..100_000 {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    let id = format!("job-{c}-{n}");
                    let delay = if n % 2 == 0 { 0 } else { 3_600_000 };
                    let push = http
                        .post(format!("{base}/v1/jobs"))
                        .json(&json!({"topic": "load", "id": id, "delay_ms": delay, "body": "x"}))
                        .send()
                        .await;
                    let pushed = match push {
                        Ok(r) if r.status() == StatusCode::CREATED => {
                            ledger.lock().unwrap().pushed.insert(id.clone());
                            true
                        }
                        Ok(r) if r.status() == StatusCode::SERVICE_UNAVAILABLE => {
                            let body = r.json::<Value>().await.unwrap_or(Value::Null);
                            let mut l = ledger.lock().unwrap();
                            l.unavailable += 1;
                            l.last_503 = Some(body);
                            false
                        }
                        Ok(r) => {
                            let s = r.status();
                            let body = r.text().await.unwrap_or_default();
                            ledger
                                .lock()
                                .unwrap()
                                .other
                                .push(format!("push {s}: {body}"));
                            false
                        }
                        Err(e) => {
                            {
                                let mut l = ledger.lock().unwrap();
                                l.unanswered.push(format!("push {id}: {e}"));
                                l.doubtful.insert(id.clone());
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            false
                        }
                    };
                    if pushed && n % 3 == 0 {
                        let r = http.delete(format!("{base}/v1/jobs/{id}")).send().await;
                        let mut l = ledger.lock().unwrap();
                        match r {
                            Ok(r) if r.status().is_success() => {
                                l.deleted.insert(id);
                            }
                            Ok(r) if r.status() == StatusCode::SERVICE_UNAVAILABLE => {
                                l.unavailable += 1;
                                l.doubtful.insert(id);
                            }
                            _ => {
                                l.doubtful.insert(id);
                            }
                        }
                    }
                }
            })
        })
        .collect()
}

async fn stop_load(stop: &AtomicBool, tasks: Vec<tokio::task::JoinHandle<()>>) {
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
}

/// Restores over HTTP, then checks every acknowledged job is back and every acknowledged
/// delete stays gone.
async fn restore_and_check(base: &str, ledger: &Ledger) {
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{base}/v1/restore"))
        .json(&json!({"overdue": "fire"}))
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let counts: Value = r.json().await.unwrap();
    let mut lost = Vec::new();
    let mut resurrected = Vec::new();
    for id in &ledger.pushed {
        if ledger.doubtful.contains(id) {
            continue;
        }
        let status = http
            .get(format!("{base}/v1/jobs/{id}"))
            .send()
            .await
            .unwrap()
            .status();
        let deleted = ledger.deleted.contains(id);
        match (deleted, status) {
            (false, StatusCode::OK) | (true, StatusCode::NOT_FOUND) => {}
            (false, _) => lost.push(id.clone()),
            (true, _) => resurrected.push(id.clone()),
        }
    }
    assert!(
        lost.is_empty(),
        "acknowledged jobs lost: {} ({lost:?}); restore said {counts}",
        lost.len()
    );
    assert!(
        resurrected.is_empty(),
        "deleted jobs came back: {resurrected:?}"
    );
    println!(
        "restore: {counts}; {} acknowledged pushes, {} deletes checked",
        ledger.pushed.len(),
        ledger.deleted.len()
    );
}

async fn kill_9_under_load_then_flushall_loses_no_acknowledged_job(db: &TestDb) {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let log = tempfile::NamedTempFile::new().unwrap();
    let args = ["--redis", &redis.url(), "--journal", &db.url];
    let mut server = DelayqProcess::start_logging_to(&args, log.path()).await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(&server.base_url, 8, stop.clone(), ledger.clone());
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.kill();
    stop_load(&stop, tasks).await;
    flushall(&redis.url()).await;
    server.restart().await;
    let ledger = std::mem::take(&mut *ledger.lock().unwrap());
    assert!(
        ledger.pushed.len() > 100,
        "only {} pushes",
        ledger.pushed.len()
    );
    restore_and_check(&server.base_url, &ledger).await;
}

fn outage_secs() -> u64 {
    std::env::var("DELAYQ_JOURNAL_OUTAGE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10)
}

/// The pending-op gauge of `/metrics`.
async fn journal_pending(base: &str) -> Option<f64> {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with("delayq_journal_pending "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// PostgreSQL away for `outage_secs` under load, in `mode`; returns the ledger.
async fn postgres_outage(mode: &str) -> (Ledger, u64) {
    let _serial = SERIAL.lock().await;
    let pg = PrivatePostgres::start();
    let redis = RedisServer::start();
    // Its log (a warning per refused request) goes to a file.
    let log = tempfile::NamedTempFile::new().unwrap();
    let args = [
        "--redis",
        &redis.url(),
        "--journal",
        &pg.url(),
        "--journal-mode",
        mode,
    ];
    let server = DelayqProcess::start_logging_to(&args, log.path()).await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(&server.base_url, 4, stop.clone(), ledger.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    pg.down();
    let before = ledger.lock().unwrap().pushed.len();
    tokio::time::sleep(Duration::from_secs(outage_secs())).await;
    let during = ledger.lock().unwrap().pushed.len() - before;
    pg.up();
    let back = Instant::now();
    // It recovers by itself: pushes are acknowledged again within 20 s.
    let acked_then = ledger.lock().unwrap().pushed.len();
    while ledger.lock().unwrap().pushed.len() < acked_then + 50 {
        assert!(
            back.elapsed() < Duration::from_secs(20),
            "no push acknowledged 20 s after PostgreSQL came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let recovered_in = back.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_load(&stop, tasks).await;
    // The journal catches up.
    let caught_up = Instant::now();
    while journal_pending(&server.base_url).await != Some(0.0) {
        assert!(
            caught_up.elapsed() < Duration::from_secs(30),
            "the journal did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    flushall(&redis.url()).await;
    let ledger = std::mem::take(&mut *ledger.lock().unwrap());
    println!(
        "{mode}: {} pushes acknowledged while PostgreSQL was away, {} answered 503, \
         acknowledged again {:?} after it returned; unanswered: {:?}",
        during, ledger.unavailable, recovered_in, ledger.unanswered
    );
    restore_and_check(&server.base_url, &ledger).await;
    (ledger, during as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_refuses_while_postgres_is_away_and_recovers_by_itself() {
    let (ledger, _) = postgres_outage("sync").await;
    assert!(ledger.unavailable > 0, "nothing was refused");
    assert!(
        ledger.other.is_empty(),
        "other failures: {:?}",
        ledger.other
    );
    let body = ledger.last_503.expect("a 503 body");
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("journal"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_refuses_nothing_while_postgres_is_away_and_catches_up() {
    let (ledger, during) = postgres_outage("async").await;
    assert_eq!(ledger.unavailable, 0, "{:?}", ledger.last_503);
    assert!(
        ledger.other.is_empty(),
        "other failures: {:?}",
        ledger.other
    );
    assert!(
        during > 50,
        "only {during} pushes while PostgreSQL was away"
    );
}
