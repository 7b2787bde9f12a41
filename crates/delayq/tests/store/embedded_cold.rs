//! The embedded store's cold tier (`--memory-window`) through a real `delayq serve` process:
//! kill -9 while jobs move between memory and disk loses no acknowledged push, undoes no
//! acknowledged delete, delivers nothing early and nothing twice; and a data directory
//! written without a window opens with one (its far jobs go to disk), and the other way round
//! (they come back).
//!
//! The conformance suite runs on the cold tier too (`embedded_cold`, a 1 ms window: every case
//! moves its jobs). `cargo test -p delayq --test store embedded_cold:: -- --nocapture` shows
//! the figures.

use super::kill_load::{self, Push, Record, client, count, get, stats};
use crate::support;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::load::now_ms;
use support::process::DelayqProcess;

const TOPIC: &str = "cold";
/// Seconds: jobs due later than this go to disk, and come back half of it before they are due.
const WINDOW: &str = "1";
/// Long enough that nothing reserved before the kill is redelivered during the checks.
const TTR_MS: u64 = 120_000;
const LOAD: Duration = Duration::from_millis(3_500);

/// Pushes jobs due 1.2 to 3.3 s ahead (beyond the window: each goes to disk and comes back
/// before it is due), and one in five due in a minute, half of those deleted at once.
async fn pusher(base: String, w: usize, stop: Arc<AtomicBool>, rec: Arc<Mutex<Record>>) {
    let client = client();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let far = i % 5 == 4;
        let job = Push {
            topic: TOPIC,
            id: format!("c{w}-{i}"),
            delay_ms: if far { 60_000 } else { 1_200 + (i % 8) * 300 },
            ttr_ms: TTR_MS,
            far,
            delete: far && i % 10 == 9,
        };
        if !kill_load::push(&client, &base, &rec, job).await {
            return;
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Reserves and finishes; every job it gets must be due.
async fn consumer(base: String, stop: Arc<AtomicBool>, rec: Arc<Mutex<Record>>) {
    let client = client();
    while !stop.load(Ordering::Relaxed) {
        let reply = client
            .post(format!("{base}/v1/reserve"))
            .json(&json!({"topics": [TOPIC], "max": 10, "timeout_ms": 100}))
            .send()
            .await;
        let Ok(r) = reply else { break };
        let Ok(body) = r.json::<Value>().await else {
            break;
        };
        let at = now_ms();
        for job in body["jobs"].as_array().unwrap() {
            let id = job["id"].as_str().unwrap().to_string();
            let due = job["run_at_ms"].as_u64().unwrap();
            assert!(at >= due, "job {id} delivered {} ms early", due - at);
            {
                let mut rec = rec.lock().unwrap();
                assert!(rec.delivered.insert(id.clone()), "job {id} delivered twice");
                rec.finish_sent.insert(id.clone());
            }
            if client
                .post(format!("{base}/v1/jobs/{id}/finish"))
                .send()
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

/// `delayq_jobs_on_disk` of the server's /metrics.
async fn on_disk(client: &Client, base: &str) -> u64 {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("delayq_jobs_on_disk "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no delayq_jobs_on_disk in /metrics:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_jobs_move_to_disk_and_back_loses_nothing_and_delivers_none_early_or_twice() {
    delayq::install_tls_provider();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let args = [
        "--data-dir",
        data.to_str().unwrap(),
        "--memory-window",
        WINDOW,
    ];
    let mut server = DelayqProcess::start(&args).await;

    let stop = Arc::new(AtomicBool::new(false));
    let rec = Arc::new(Mutex::new(Record::default()));
    let mut tasks = Vec::new();
    for w in 0..3 {
        let (base, stop, rec) = (server.base_url.clone(), stop.clone(), rec.clone());
        tasks.push(tokio::spawn(pusher(base, w, stop, rec)));
    }
    for _ in 0..2 {
        let (base, stop, rec) = (server.base_url.clone(), stop.clone(), rec.clone());
        tasks.push(tokio::spawn(consumer(base, stop, rec)));
    }
    // Jobs go to disk while the load runs (and come back when due).
    let deadline = Instant::now() + LOAD;
    let mut most_on_disk = 0;
    while Instant::now() < deadline {
        most_on_disk = most_on_disk.max(on_disk(&client(), &server.base_url).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.kill();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let rec = Arc::into_inner(rec).unwrap().into_inner().unwrap();
    println!(
        "before kill -9: pushes sent {} acked {}, delivered {}, deletes acked {}; up to {} jobs \
         on disk",
        rec.push_sent.len(),
        rec.push_acked.len(),
        rec.delivered.len(),
        rec.delete_acked.len(),
        most_on_disk
    );
    assert!(
        rec.push_acked.len() > 200 && rec.delivered.len() > 50 && !rec.delete_acked.is_empty(),
        "too little load to mean anything"
    );
    assert!(
        most_on_disk > 50,
        "too few jobs went to disk: {most_on_disk}"
    );

    server.restart().await;
    let client = Client::new();
    let base = server.base_url.clone();
    let restarted_at = now_ms();

    // Every acknowledged push is there (delayed, or ready once due) unless its delivery or
    // delete began before the kill; no acknowledged delete is undone.
    let kept = kill_load::kept(&client, &base, &rec, restarted_at).await;
    let reserved = kept.reserved;
    let pending: HashSet<String> = kept
        .present
        .iter()
        .filter(|id| !reserved.contains(*id) && !rec.far.contains(*id))
        .cloned()
        .collect();

    // Drain: each near job exactly once, none before it is due; the far ones stay delayed.
    let far_left = rec
        .far
        .iter()
        .filter(|id| !rec.delete_acked.contains(*id))
        .count() as u64;
    let drained = kill_load::drain(&client, &base, TOPIC, &rec, &reserved, |counts, drained| {
        count(counts, "ready") == 0
            && count(counts, "delayed") <= far_left
            && pending.iter().all(|id| drained.contains_key(id))
    })
    .await;
    for id in &pending {
        assert!(
            drained.contains_key(id),
            "job {id} pending but never delivered"
        );
    }
    // The far jobs not deleted are still there, delayed, on disk or in memory.
    for id in rec.far.iter().filter(|id| !rec.delete_sent.contains(*id)) {
        if rec.push_acked.contains(id) {
            let job = get(&client, &base, id).await.expect("far job kept");
            assert_eq!(job["state"], "delayed", "job {id}");
        }
    }
    println!(
        "after restart: {} pending delivered exactly once, {} still reserved",
        drained.len(),
        reserved.len()
    );
}

/// Pushes `n` jobs due in an hour, and returns their ids.
async fn push_far(client: &Client, base: &str, n: usize) -> Vec<String> {
    let ids: Vec<String> = (0..n).map(|i| format!("far-{i}")).collect();
    let jobs: Vec<Value> = ids
        .iter()
        .map(|id| json!({"topic": TOPIC, "id": id, "body": id, "delay_ms": 3_600_000}))
        .collect();
    let r = client
        .post(format!("{base}/v1/jobs/batch"))
        .json(&json!({ "jobs": jobs }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "batch push: {}", r.status());
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_jobs_move_to_disk_with_a_window_are_backed_up_there_and_come_back_without_one() {
    delayq::install_tls_provider();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let dir = data.to_str().unwrap();
    let client = Client::new();

    // Written without a window: every job in memory and redb.
    let mut server = DelayqProcess::start(&["--data-dir", dir]).await;
    let ids = push_far(&client, &server.base_url, 500).await;
    assert_eq!(on_disk(&client, &server.base_url).await, 0);
    assert!(server.terminate(Duration::from_secs(10)).is_some());

    // With a window: they go to disk (within the timer's passes and a checkpoint), and every
    // one still reads, counts and deletes.
    let backups = tmp.path().join("backups");
    let backup_dir = backups.to_str().unwrap();
    let window = ["--memory-window", "60", "--backup-dir", backup_dir];
    let mut server = DelayqProcess::start(&[&["--data-dir", dir][..], &window].concat()).await;
    let base = server.base_url.clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    while on_disk(&client, &base).await < 500 {
        assert!(
            Instant::now() < deadline,
            "the far jobs never all went to disk"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(stats(&client, &base).await["topics"][TOPIC]["delayed"], 500);
    let job = get(&client, &base, &ids[7]).await.expect("a far job reads");
    assert_eq!(
        (job["state"].as_str(), job["body"].as_str()),
        (Some("delayed"), Some("far-7"))
    );
    // An online backup copies the jobs on disk too.
    let r = client
        .post(format!("{base}/v1/backup"))
        .json(&json!({"dir": "nightly"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["jobs"], 500, "{body}");
    let s = client
        .delete(format!("{base}/v1/jobs/{}", ids[0]))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert!(server.terminate(Duration::from_secs(10)).is_some());

    // The backup opens with every far job on disk, the one deleted after it included.
    let copy = backups.join("nightly");
    let mut restored =
        DelayqProcess::start(&[&["--data-dir", copy.to_str().unwrap()][..], &window].concat())
            .await;
    let restored_base = restored.base_url.clone();
    assert_eq!(on_disk(&client, &restored_base).await, 500);
    let counts = &stats(&client, &restored_base).await["topics"][TOPIC];
    assert_eq!(counts["delayed"], 500, "{counts}");
    let job = get(&client, &restored_base, &ids[0])
        .await
        .expect("the backup holds the job deleted after it");
    assert_eq!(job["body"], "far-0");
    assert!(restored.terminate(Duration::from_secs(10)).is_some());

    // Without the window again: they come back into memory, the delete kept.
    let server = DelayqProcess::start(&["--data-dir", dir]).await;
    let base = server.base_url.clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    while on_disk(&client, &base).await > 0 {
        assert!(
            Instant::now() < deadline,
            "the far jobs never came back into memory"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(stats(&client, &base).await["topics"][TOPIC]["delayed"], 499);
    assert!(
        get(&client, &base, &ids[0]).await.is_none(),
        "delete undone"
    );
    let page: Value = client
        .get(format!(
            "{base}/v1/topics/{TOPIC}/jobs?state=delayed&limit=1000"
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(page["jobs"].as_array().map(Vec::len), Some(499), "{page}");
}
