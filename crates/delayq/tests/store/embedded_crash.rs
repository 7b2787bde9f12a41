//! Crash tests of the embedded store through a real `delayq serve` process: kill -9 under load
//! loses no acknowledged push, undoes no acknowledged delete, and delivers again every job
//! whose acknowledged finish or reservation it undid (both are answered before they are
//! durable: docs/reliability.md); a second server on the same data directory exits at once
//! with a clear message.
//!
//! Driven over plain HTTP (the /v1 API of docs/api.md) against the compiled binary
//! (`cargo test -p delayq --test store embedded_crash:: -- --nocapture` shows the figures).
//! Not here: the store's own reopen rules (embedded_store.rs).

use super::kill_load::{self, Push, Record, count};
use crate::support;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::load::now_ms;
use support::process::{DelayqProcess, free_port};

const TOPIC: &str = "crash";
/// Long enough that nothing reserved before the kill is redelivered during the checks.
const TTR_MS: u64 = 120_000;
const PUSHERS: usize = 4;
const CONSUMERS: usize = 3;
/// How long the load runs before the kill.
const LOAD: Duration = Duration::from_millis(2_500);

/// Pushes until told to stop or the server is gone: two in three jobs ready at once, the rest
/// due in 50-250 ms, except one in six, due in a minute and deleted as soon as it is pushed.
async fn pusher(base: String, w: usize, stop: Arc<AtomicBool>, rec: Arc<Mutex<Record>>) {
    let client = kill_load::client();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let far = i % 6 == 5;
        let delay_ms = if far {
            60_000
        } else if i % 3 == 2 {
            50 + (i % 5) * 50
        } else {
            0
        };
        let job = Push {
            topic: TOPIC,
            id: format!("p{w}-{i}"),
            delay_ms,
            ttr_ms: TTR_MS,
            far,
            delete: far,
        };
        if !kill_load::push(&client, &base, &rec, job).await {
            return;
        }
        i += 1;
    }
}

async fn consumer(base: String, stop: Arc<AtomicBool>, rec: Arc<Mutex<Record>>) {
    let client = kill_load::client();
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

    let kill_load::Kept {
        present,
        reserved,
        finish_undone,
    } = kill_load::kept(&client, base, &rec, restarted_at).await;

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
    let drained = kill_load::drain(&client, base, TOPIC, &rec, &reserved, |counts, _| {
        count(counts, "delayed") == 0 && count(counts, "ready") == 0
    })
    .await;
    // Every job that was present (an acknowledged finish the crash undid included) was either
    // drained or is still reserved.
    for id in &present {
        assert!(
            drained.contains_key(id) || reserved.contains(id),
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
