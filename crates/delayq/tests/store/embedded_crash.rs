//! Crash tests of the embedded store through a real `delayq serve` process: kill -9 under load
//! loses no acknowledged push, undoes no acknowledged delete, and delivers again every job
//! whose acknowledged finish or reservation it undid (both are answered before they are
//! durable: docs/reliability.md); a second server on the same data directory exits at once
//! with a clear message.
//!
//! Driven over plain HTTP (the /v1 API of docs/api.md) against the compiled binary
//! (`cargo test -p delayq --test store embedded_crash:: -- --nocapture` shows the figures).
//! Not here: the store's own reopen rules (embedded_store.rs).

use crate::support;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::process::{DelayqProcess, free_port};

const TOPIC: &str = "crash";
/// Long enough that nothing reserved before the kill is redelivered during the checks.
const TTR_MS: u64 = 120_000;
const PUSHERS: usize = 4;
const CONSUMERS: usize = 3;
/// How long the load runs before the kill.
const LOAD: Duration = Duration::from_millis(2_500);

/// What the clients were told before the kill. "Sent" includes requests whose answer was lost.
#[derive(Default)]
struct Record {
    push_sent: HashSet<String>,
    push_acked: HashSet<String>,
    finish_sent: HashSet<String>,
    finish_acked: HashSet<String>,
    delete_sent: HashSet<String>,
    delete_acked: HashSet<String>,
    /// Pushed due in a minute (to be deleted); one whose push answer was lost to the kill
    /// may be there with no delete sent.
    far: HashSet<String>,
}

async fn pusher(base: String, w: usize, stop: Arc<AtomicBool>, rec: Arc<Mutex<Record>>) {
    let client = Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let id = format!("p{w}-{i}");
        // Two in three ready at once, the rest due in 50-250 ms, except one in six, due in a
        // minute and deleted as soon as it is pushed.
        let deleted = i % 6 == 5;
        let delay_ms = if deleted {
            60_000
        } else if i % 3 == 2 {
            50 + (i % 5) * 50
        } else {
            0
        };
        {
            let mut rec = rec.lock().unwrap();
            rec.push_sent.insert(id.clone());
            if deleted {
                rec.far.insert(id.clone());
            }
        }
        let reply = client
            .post(format!("{base}/v1/jobs"))
            .json(
                &json!({"topic": TOPIC, "id": id, "body": format!("body of {id}"),
                          "delay_ms": delay_ms, "ttr_ms": TTR_MS}),
            )
            .send()
            .await;
        match reply {
            Ok(r) if r.status() == StatusCode::CREATED => {
                rec.lock().unwrap().push_acked.insert(id.clone());
            }
            Ok(r) => panic!("push {id}: unexpected status {}", r.status()),
            Err(_) => break, // the server is gone
        }
        if deleted {
            rec.lock().unwrap().delete_sent.insert(id.clone());
            match client.delete(format!("{base}/v1/jobs/{id}")).send().await {
                Ok(r) if r.status() == StatusCode::NO_CONTENT => {
                    rec.lock().unwrap().delete_acked.insert(id);
                }
                Ok(r) => panic!("delete {id}: unexpected status {}", r.status()),
                Err(_) => break,
            }
        }
        i += 1;
    }
}

async fn consumer(base: String, stop: Arc<AtomicBool>, rec: Arc<Mutex<Record>>) {
    let client = Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    while !stop.load(Ordering::Relaxed) {
        let reply = client
            .post(format!("{base}/v1/reserve"))
            .json(&json!({"topics": [TOPIC], "max": 10, "timeout_ms": 100}))
            .send()
            .await;
        let Ok(r) = reply else { break };
        assert_eq!(r.status(), StatusCode::OK, "reserve");
        let Ok(body) = r.json::<Value>().await else {
            break;
        };
        for job in body["jobs"].as_array().unwrap() {
            let id = job["id"].as_str().unwrap().to_string();
            rec.lock().unwrap().finish_sent.insert(id.clone());
            match client
                .post(format!("{base}/v1/jobs/{id}/finish"))
                .send()
                .await
            {
                Ok(r) if r.status() == StatusCode::NO_CONTENT => {
                    rec.lock().unwrap().finish_acked.insert(id);
                }
                Ok(r) => panic!("finish {id}: unexpected status {}", r.status()),
                Err(_) => return,
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_no_acknowledged_push_or_delete_and_redelivers_undone_finishes() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut server = DelayqProcess::start(&["--data-dir", data.to_str().unwrap()]).await;

    let stop = Arc::new(AtomicBool::new(false));
    let rec = Arc::new(Mutex::new(Record::default()));
    let mut tasks = Vec::new();
    for w in 0..PUSHERS {
        tasks.push(tokio::spawn(pusher(
            server.base_url.clone(),
            w,
            stop.clone(),
            rec.clone(),
        )));
    }
    for _ in 0..CONSUMERS {
        tasks.push(tokio::spawn(consumer(
            server.base_url.clone(),
            stop.clone(),
            rec.clone(),
        )));
    }
    tokio::time::sleep(LOAD).await;
    // Kill while requests are in flight; only then tell the clients to stop.
    server.kill();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let rec = Arc::into_inner(rec).unwrap().into_inner().unwrap();
    println!(
        "before kill -9: pushes sent {} acked {}, finishes sent {} acked {}, deletes sent {} \
         acked {}",
        rec.push_sent.len(),
        rec.push_acked.len(),
        rec.finish_sent.len(),
        rec.finish_acked.len(),
        rec.delete_sent.len(),
        rec.delete_acked.len()
    );
    assert!(
        rec.push_acked.len() > 100 && !rec.finish_acked.is_empty() && !rec.delete_acked.is_empty(),
        "too little load to mean anything"
    );

    // Same port, same data directory.
    server.restart().await;
    let client = Client::new();
    let base = &server.base_url;
    let restarted_at = now_ms();

    // Every acknowledged push is there, unless a finish or delete for it was sent (its answer
    // may have been lost to the kill); every acknowledged delete stays done. A finish the
    // crash undid leaves its job to be delivered again (checked after the drain).
    let mut present = HashSet::new();
    let mut finish_undone = 0;
    let mut reserved = HashSet::new();
    let mut pushed: Vec<&String> = rec.push_sent.iter().collect();
    pushed.sort();
    for id in pushed {
        let r = client
            .get(format!("{base}/v1/jobs/{id}"))
            .send()
            .await
            .unwrap();
        match r.status() {
            StatusCode::OK => {
                assert!(
                    !rec.delete_acked.contains(id),
                    "job {id}: acknowledged delete undone by the crash"
                );
                let job: Value = r.json().await.unwrap();
                if rec.finish_acked.contains(id) {
                    // Reserved (its reservation survived: it comes back after its TTR, not
                    // before) or ready again (the crash undid its reservation too: delivered
                    // again in the drain below).
                    assert!(
                        job["state"] == "reserved" || job["state"] == "ready",
                        "job {id}: finish undone: {job}"
                    );
                    finish_undone += 1;
                }
                assert_eq!(job["body"], format!("body of {id}"), "job {id}");
                if job["state"] == "reserved" {
                    // Not handed out early: its TTR has not run out.
                    let until = job["reserved_until_ms"].as_u64().unwrap();
                    assert!(until > restarted_at, "job {id}: {job}");
                    reserved.insert(id.clone());
                }
                present.insert(id.clone());
            }
            StatusCode::NOT_FOUND => assert!(
                !rec.push_acked.contains(id)
                    || rec.finish_sent.contains(id)
                    || rec.delete_sent.contains(id),
                "job {id}: acknowledged push lost by the crash"
            ),
            s => panic!("GET {id}: unexpected status {s}"),
        }
    }

    // Jobs due in a minute whose delete is in doubt (or was never sent, their push's answer
    // lost to the kill): delete them now.
    for id in rec.far.intersection(&present) {
        let s = client
            .delete(format!("{base}/v1/jobs/{id}"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(s, StatusCode::NO_CONTENT, "delete {id}");
    }
    let present: HashSet<String> = present.difference(&rec.far).cloned().collect();

    // Drain everything that is not reserved: each job exactly once, only jobs that were pushed.
    let mut drained = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r: Value = client
            .post(format!("{base}/v1/reserve"))
            .json(&json!({"topics": [TOPIC], "max": 100, "timeout_ms": 500}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let jobs = r["jobs"].as_array().unwrap();
        if jobs.is_empty() {
            let stats: Value = client
                .get(format!("{base}/v1/stats"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let counts = &stats["topics"][TOPIC];
            if counts["delayed"].as_u64().unwrap_or(0) == 0
                && counts["ready"].as_u64().unwrap_or(0) == 0
            {
                break;
            }
        }
        for job in jobs {
            let id = job["id"].as_str().unwrap().to_string();
            assert!(rec.push_sent.contains(&id), "unknown job {id} delivered");
            assert!(
                !reserved.contains(&id),
                "job {id} redelivered before its TTR"
            );
            assert!(drained.insert(id.clone()), "job {id} delivered twice");
            let s = client
                .post(format!("{base}/v1/jobs/{id}/finish"))
                .send()
                .await
                .unwrap()
                .status();
            assert_eq!(s, StatusCode::NO_CONTENT, "finish {id}");
        }
        assert!(Instant::now() < deadline, "drain did not finish in 20 s");
    }
    // Every job that was present (an acknowledged finish the crash undid included) was either
    // drained or is still reserved.
    for id in &present {
        assert!(
            drained.contains(id) || reserved.contains(id),
            "job {id} was present but never delivered"
        );
    }
    println!(
        "after restart: {} present ({} still reserved, {} with a finish undone), {} drained \
         exactly once",
        present.len(),
        reserved.len(),
        finish_undone,
        drained.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_server_on_the_same_data_dir_exits_at_once_with_a_clear_message() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let _first = DelayqProcess::start(&["--data-dir", data.to_str().unwrap()]).await;

    let log_path = tmp.path().join("second.log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let mut second = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .arg("serve")
        .arg("--data-dir")
        .arg(&data)
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .expect("start delayq serve");
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = second.kill();
            let _ = second.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let status =
        status.unwrap_or_else(|| panic!("second server still running after 5 s; log:\n{log}"));
    assert!(!status.success(), "second server exited with {status}");
    assert!(
        log.contains(&format!(
            "data directory {} is in use by another delayq process",
            data.display()
        )),
        "log of the second server:\n{log}"
    );
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
