//! `delayq serve --memory` as a real process: it serves jobs while it runs, and after it stops,
//! gracefully or by kill -9, it starts again with none of them (docs/reliability.md: nothing
//! survives in memory mode). It writes no file: its working directory, where the embedded
//! store's default data directory would be, stays empty. It also refuses to start when told to
//! keep jobs somewhere else as well.

use super::support::process::DelayqProcess;
use super::{EXIT_WITHIN, post, push};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use std::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_mode_serves_jobs_forgets_them_at_exit_and_writes_no_file() {
    let cwd = tempfile::TempDir::new().unwrap();
    let logs = tempfile::TempDir::new().unwrap();
    let log = logs.path().join("delayq.log");
    let mut delayq = DelayqProcess::start_in(cwd.path(), &["--memory"], &log).await;
    let http = Client::new();
    let base = delayq.base_url.clone();

    let (status, ready) = get(&http, &base, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    assert_eq!(ready, json!({"status": "ok", "store": "memory"}));
    let text = delayq.log().unwrap();
    assert!(
        text.contains("WARN") && text.contains("jobs are kept in memory only"),
        "the start-up log must say that jobs are lost at exit:\n{text}"
    );

    for graceful in [true, false] {
        // One job due now, which a consumer reserves; one due in an hour, still pending.
        let (s, due) = push(&http, &base, json!({"topic": "m", "body": "now"})).await;
        assert_eq!(s, StatusCode::CREATED, "{due}");
        let later = json!({"topic": "m", "body": "later", "delay_ms": 3_600_000});
        let (s, later) = push(&http, &base, later).await;
        assert_eq!(s, StatusCode::CREATED, "{later}");
        let reserve = json!({"topics": ["m"], "max": 1, "timeout_ms": 5000});
        let (s, reserved) = post(&http, &base, "/v1/reserve", reserve).await;
        assert_eq!(s, StatusCode::OK, "{reserved}");
        assert_eq!(reserved["jobs"][0]["id"], due["id"], "{reserved}");
        let (s, job) = get(&http, &base, &job_path(&later)).await;
        assert_eq!(
            (s, &job["state"]),
            (StatusCode::OK, &json!("delayed")),
            "{job}"
        );

        if graceful {
            let exit = tokio::task::block_in_place(|| delayq.terminate(EXIT_WITHIN));
            assert!(exit.is_some_and(|e| e.success()), "SIGTERM: {exit:?}");
        }
        // Kills the process unless it has exited, then starts it again with the same flags.
        delayq.restart().await;

        for job in [&due, &later] {
            let (s, body) = get(&http, &base, &job_path(job)).await;
            assert_eq!(s, StatusCode::NOT_FOUND, "graceful: {graceful}: {body}");
        }
        let (s, stats) = get(&http, &base, "/v1/stats").await;
        assert_eq!(
            (s, &stats["topics"]),
            (StatusCode::OK, &json!({})),
            "{stats}"
        );
    }

    let written: Vec<_> = std::fs::read_dir(cwd.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(written.is_empty(), "--memory wrote {written:?}");
}

#[test]
fn memory_mode_with_a_store_elsewhere_refuses_to_start_naming_both_settings() {
    let cwd = tempfile::TempDir::new().unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (&["--redis", "redis://127.0.0.1:1"], &["memory", "redis"]),
        (
            &["--redis-cluster", "redis://127.0.0.1:1"],
            &["memory", "redis_cluster"],
        ),
        (&["--data-dir", "jobs"], &["data_dir", "memory"]),
    ];
    for (args, named) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
            .current_dir(cwd.path())
            .args(["serve", "--listen", "127.0.0.1:0", "--memory"])
            .args(*args)
            .env("RUST_LOG", "warn")
            .output()
            .expect("run delayq");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started: {stderr}");
        for name in *named {
            assert!(
                stderr.contains(name),
                "{args:?}: {name} not named: {stderr}"
            );
        }
    }
    let written = std::fs::read_dir(cwd.path()).unwrap().count();
    assert_eq!(written, 0, "a refused start wrote files");
}

fn job_path(job: &Value) -> String {
    format!("/v1/jobs/{}", job["id"].as_str().unwrap())
}

async fn get(http: &Client, base: &str, path: &str) -> (StatusCode, Value) {
    let r = http.get(format!("{base}{path}")).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}
