//! The Rust client (`delayq-client`) against a real server on a loopback socket, per backend:
//! every method round-trips through the /v1 API. And the CLI verbs against a running
//! `delayq serve` process, as a user would type them.

use crate::support;

use delayq::config::Config;
use delayq_client::{Client, ClientError, JobState, NewJob, PushStatus, Reschedule};
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};
use support::app::LiveServer;
use support::backends::Backend;
use support::process::DelayqProcess;

/// Serves the backend on a free loopback port until the returned sender is dropped.
async fn serve(b: &Backend) -> (Client, tokio::sync::oneshot::Sender<()>) {
    let server = LiveServer::start(b.store.clone(), Config::default()).await;
    (Client::new(&server.base_url).unwrap(), server.stop)
}

fn api_code(e: &ClientError) -> (u16, &str) {
    match e {
        ClientError::Api { status, code, .. } => (*status, code.as_str()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn client_covers_the_job_lifecycle(b: &Backend) {
    let (c, stop) = serve(b).await;
    assert_eq!(c.health().await.unwrap().status, "ok");
    assert_eq!(c.ready().await.unwrap().status, "ok");

    let job = c
        .push(
            NewJob::new("mail", "  hello ü ")
                .id("m1")
                .ttr_ms(30_000)
                .priority(3)
                .max_attempts(5)
                .backoff_ms(vec![1_000, 2_000]),
        )
        .await
        .unwrap();
    assert_eq!(
        (job.state, job.body.as_str()),
        (JobState::Ready, "  hello ü ")
    );
    let err = c
        .push(NewJob::new("mail", "again").id("m1"))
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), (409, "exists"));

    let got = c.reserve(["mail"], 10, 0).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].attempts, got[0].priority), (1, 3));
    assert!(got[0].reserved_until_ms.is_some());
    let touched = c.touch("m1").await.unwrap();
    assert!(touched.reserved_until_ms >= got[0].reserved_until_ms);
    let released = c.release("m1", Some(60_000)).await.unwrap();
    assert_eq!(released.state, JobState::Delayed);

    let (job, previous) = c
        .reschedule("m1", Reschedule::delay_ms(0).body("new"))
        .await
        .unwrap();
    assert_eq!(
        (previous, job.state, job.body.as_str()),
        (JobState::Delayed, JobState::Ready, "new")
    );
    assert_eq!(c.bury("m1").await.unwrap().state, JobState::Dead);
    assert_eq!(c.stats().await.unwrap().topics["mail"].dead, 1);
    assert_eq!(c.kick("m1").await.unwrap().state, JobState::Ready);
    c.bury("m1").await.unwrap();
    assert_eq!(c.kick_topic("mail", 10).await.unwrap(), 1);
    c.finish("m1").await.unwrap();
    let err = c.get("m1").await.unwrap_err();
    assert_eq!(api_code(&err), (404, "not_found"));

    let results = c
        .push_batch(
            vec![
                NewJob::new("b", "1").id("b1"),
                NewJob::new("b", "2").id("b2").delay_ms(3_600_000),
            ],
            false,
        )
        .await
        .unwrap();
    assert!(results.iter().all(|r| r.status == PushStatus::Created));
    let fin = c.finish_batch(["b1", "nope"]).await.unwrap();
    assert_eq!((fin.finished, fin.missing), (1, vec!["nope".to_string()]));
    // Finish what was reserved and reserve more, in one request.
    c.push(NewJob::new("c", "1").id("c1")).await.unwrap();
    c.push(NewJob::new("c", "2").id("c2")).await.unwrap();
    let first = c.reserve(["c"], 1, 0).await.unwrap();
    assert_eq!(first[0].id, "c1");
    let (fin, next) = c
        .finish_and_reserve(["c1", "gone"], ["c"], 5, 0)
        .await
        .unwrap();
    assert_eq!((fin.finished, fin.missing), (1, vec!["gone".to_string()]));
    assert_eq!(
        next.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["c2"]
    );
    let (fin, none) = c.finish_and_reserve(["c2"], ["c"], 5, 0).await.unwrap();
    assert_eq!((fin.finished, none.len()), (1, 0));
    c.delete("b2").await.unwrap();
    assert!(c.stats().await.unwrap().topics.is_empty());

    let err = c.push(NewJob::new("bad topic", "")).await.unwrap_err();
    match err {
        ClientError::Api { status, field, .. } => {
            assert_eq!((status, field.as_deref()), (400, Some("topic")));
        }
        other => panic!("{other:?}"),
    }
    drop(stop);
}

async fn client_long_poll_is_woken_by_a_push(b: &Backend) {
    let (c, stop) = serve(b).await;
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.reserve(["lp"], 1, 20_000).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    c.push(NewJob::new("lp", "x").id("lp1")).await.unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, "lp1");
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(stop);
}

backend_tests!(
    client_covers_the_job_lifecycle,
    client_long_poll_is_woken_by_a_push
);

fn cli(server: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .arg("--server")
        .arg(server)
        .args(args)
        .output()
        .expect("run delayq");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_verbs_drive_a_running_server() {
    let dir = tempfile::TempDir::new().unwrap();
    let server = DelayqProcess::start(&["--data-dir", dir.path().to_str().unwrap()]).await;
    let url = server.base_url.clone();
    let run = move |args: Vec<&'static str>| {
        let url = url.clone();
        tokio::task::spawn_blocking(move || cli(&url, &args))
    };

    let (ok, out, err) = run(vec![
        "push", "--topic", "orders", "--id", "o1", "--delay", "1h", "hello",
    ])
    .await
    .unwrap();
    assert!(ok, "push failed: {err}");
    assert!(out.contains("o1"), "{out}");

    let (ok, out, _) = run(vec!["--json", "get", "o1"]).await.unwrap();
    assert!(ok);
    let job: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (job["state"].as_str(), job["body"].as_str()),
        (Some("delayed"), Some("hello"))
    );

    let (ok, out, _) = run(vec!["stats"]).await.unwrap();
    assert!(ok);
    assert!(out.contains("orders"), "{out}");

    let (ok, _, _) = run(vec!["reschedule", "o1", "--delay", "0"]).await.unwrap();
    assert!(ok);
    let (ok, out, _) = run(vec![
        "--json",
        "reserve",
        "--topic",
        "orders",
        "--timeout",
        "5s",
    ])
    .await
    .unwrap();
    assert!(ok);
    assert!(out.contains("\"o1\""), "{out}");
    let (ok, _, _) = run(vec!["finish", "o1"]).await.unwrap();
    assert!(ok);

    let (ok, _, err) = run(vec!["get", "o1"]).await.unwrap();
    assert!(!ok, "get of a finished job must fail");
    assert!(err.contains("404"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_a_waiting_pop_and_exits_within_seconds() {
    let dir = tempfile::TempDir::new().unwrap();
    let mut server = DelayqProcess::start(&["--data-dir", dir.path().to_str().unwrap()]).await;
    let url = format!("{}/pop", server.base_url);
    let waiting = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .body(r#"{"topic":"t","timeout":60}"#)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let status = tokio::task::block_in_place(|| server.terminate(Duration::from_secs(10)))
        .expect("delayq did not exit within 10 s of SIGTERM");
    assert!(status.success(), "exit status {status}");
    let body = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting pop was not answered")
        .unwrap();
    assert_eq!(body, r#"{"code":0,"message":"操作成功","data":null}"#);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_log_written_to_a_file_has_no_colour_codes() {
    let dir = tempfile::TempDir::new().unwrap();
    let log = dir.path().join("delayq.log");
    let port = support::process::free_port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("run delayq");
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains("delayq listening") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = server.kill();
    let _ = server.wait();
    assert!(text.contains("delayq listening"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "ANSI escape codes in a log file: {text:?}"
    );
}

#[test]
fn the_cli_says_how_to_reach_a_server_when_none_answers() {
    let port = support::process::free_port();
    let (ok, _, err) = cli(&format!("http://127.0.0.1:{port}"), &["stats"]);
    assert!(!ok);
    assert!(
        err.contains(&format!("cannot connect to 127.0.0.1:{port}"))
            && err.contains("delayq serve")
            && err.contains("DELAYQ_SERVER"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn a_server_address_without_a_scheme_is_answered_with_the_url_to_use() {
    let (ok, _, err) = cli("127.0.0.1:9277", &["stats"]);
    assert!(!ok);
    assert!(
        err.contains(r#"has no scheme: use "http://127.0.0.1:9277""#),
        "{err}"
    );
}

/// `delayq topic ...` as docs/flow-control.md shows it, against the embedded store: the
/// settings in force after each verb, and a pause that survives a kill -9 and a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_topic_verbs_set_flow_control_and_a_pause_survives_a_restart() {
    let dir = tempfile::TempDir::new().unwrap();
    let mut server = DelayqProcess::start(&["--data-dir", dir.path().to_str().unwrap()]).await;
    let url = server.base_url.clone();
    let run = move |args: Vec<&'static str>| {
        let url = url.clone();
        tokio::task::spawn_blocking(move || cli(&url, &args))
    };
    let (ok, out, err) = run(vec![
        "topic",
        "limit",
        "orders",
        "--rate",
        "100",
        "--burst",
        "10",
        "--max-in-flight",
        "20",
    ])
    .await
    .unwrap();
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "orders: running, rate 100/s (burst 10), at most 20 in flight\n"
    );
    let (ok, out, _) = run(vec!["topic", "pause", "orders"]).await.unwrap();
    assert!(ok);
    assert!(out.starts_with("orders: paused,"), "{out}");
    let (ok, _, err) = run(vec![
        "topic",
        "limit",
        "orders",
        "--burst",
        "5",
        "--no-rate",
    ])
    .await
    .unwrap();
    assert!(!ok, "--burst with --no-rate is refused");
    assert!(err.contains("--no-rate"), "{err}");
    let (ok, _, err) = run(vec!["topic", "limit", "orders"]).await.unwrap();
    assert!(!ok, "a limit without a change is refused: {err}");

    server.restart().await;
    let (ok, out, _) = run(vec!["--json", "topic", "show", "orders"])
        .await
        .unwrap();
    assert!(ok);
    let shown: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        shown,
        serde_json::json!({"paused": true, "rate_per_s": 100.0, "burst": 10, "max_in_flight": 20})
    );
    let (ok, _, _) = run(vec!["push", "--topic", "orders", "--id", "o1", "hi"])
        .await
        .unwrap();
    assert!(ok);
    let (ok, out, _) = run(vec![
        "--json",
        "reserve",
        "--topic",
        "orders",
        "--timeout",
        "1s",
    ])
    .await
    .unwrap();
    assert!(ok);
    assert!(!out.contains("\"o1\""), "handed out while paused: {out}");
    let (ok, out, _) = run(vec!["stats"]).await.unwrap();
    assert!(ok);
    assert!(out.contains("orders: paused"), "{out}");

    let (ok, _, _) = run(vec!["topic", "resume", "orders"]).await.unwrap();
    assert!(ok);
    let (ok, out, _) = run(vec![
        "topic",
        "limit",
        "orders",
        "--no-rate",
        "--no-max-in-flight",
    ])
    .await
    .unwrap();
    assert!(ok);
    assert_eq!(out, "orders: running, no rate limit, no limit in flight\n");
    let (ok, out, _) = run(vec![
        "--json",
        "reserve",
        "--topic",
        "orders",
        "--timeout",
        "5s",
    ])
    .await
    .unwrap();
    assert!(ok);
    assert!(out.contains("\"o1\""), "{out}");
}

/// The `delayq schedule` lines of docs/schedules.md, run as written (through `sh`, with
/// `DELAYQ_SERVER` naming a test server), then what they did, read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_verbs_of_the_docs_work_as_written() {
    let dir = tempfile::TempDir::new().unwrap();
    let server = DelayqProcess::start(&["--data-dir", dir.path().to_str().unwrap()]).await;
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/schedules.md"
    ))
    .unwrap();
    let lines: Vec<String> = docs
        .lines()
        .filter(|l| l.starts_with("delayq schedule "))
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 7, "{lines:?}");
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_delayq"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let url = server.base_url.clone();
    let run = move |line: String| {
        let (path, url) = (path.clone(), url.clone());
        tokio::task::spawn_blocking(move || {
            let out = Command::new("sh")
                .args(["-c", &line])
                .env("PATH", path)
                .env("DELAYQ_SERVER", url)
                .output()
                .unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
    };
    let mut outputs = Vec::new();
    for line in &lines {
        let (ok, out, err) = run(line.clone()).await.unwrap();
        assert!(ok, "{line}: {err}");
        outputs.push(out);
    }
    // put, put, list, get, pause, resume, delete.
    assert!(
        outputs[0].contains("cron \"0 9 * * MON-FRI\" in Europe/Berlin"),
        "{}",
        outputs[0]
    );
    assert!(outputs[1].contains("every 15m"), "{}", outputs[1]);
    assert!(
        outputs[2].contains("daily-report") && outputs[2].contains("retry-sweep"),
        "{}",
        outputs[2]
    );
    assert!(outputs[3].contains("next runs:"), "{}", outputs[3]);
    assert!(outputs[4].contains("paused"), "{}", outputs[4]);
    assert!(outputs[5].contains("active"), "{}", outputs[5]);
    let (ok, out, _) = run("delayq --json schedule get retry-sweep".into())
        .await
        .unwrap();
    assert!(ok);
    let s: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (
            &s["every_ms"],
            &s["overlap"],
            &s["job"]["ttr_ms"],
            &s["job"]["topic"]
        ),
        (
            &json!(900_000),
            &json!("skip"),
            &json!(600_000),
            &json!("sweeps")
        )
    );
    let (ok, _, err) = run("delayq schedule get daily-report".into())
        .await
        .unwrap();
    assert!(!ok && err.contains("404"), "deleted: {err}");
    let (ok, _, err) = run("delayq schedule put bad --cron '61 * * * *' --topic t".into())
        .await
        .unwrap();
    assert!(!ok && err.contains("cron"), "{err}");
}
