//! The binary as a system service runs it (pkg/delayq.service, docs/operations.md "Running in
//! production"): readiness told to systemd over `NOTIFY_SOCKET` (`Type=notify`) once it
//! listens, log lines as JSON for log shippers or as text coloured only on a terminal,
//! `--version` naming the commit, and the worker threads it runs (`worker_threads`).

use crate::support::process::{DelayqProcess, free_port};

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The next message on a notify socket, as systemd would read it.
fn next_notification(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = socket
        .recv(&mut buf)
        .expect("no notification within the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_tells_systemd_it_is_ready_once_it_answers_and_that_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("NOTIFY_SOCKET", &path)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let ready = tokio::task::block_in_place(|| next_notification(&socket));
    assert_eq!(ready, "READY=1\n");
    // Told ready: the store is open and the listener answers, without waiting.
    delayq::install_tls_provider();
    let r = reqwest::get(format!("http://127.0.0.1:{port}/readyz"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);

    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let stopping = tokio::task::block_in_place(|| next_notification(&socket));
    assert_eq!(stopping, "STOPPING=1\n");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "delayq did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn json_log_format_writes_one_json_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("delayq.log");
    // `--memory` logs a warning at start, which RUST_LOG=warn (the helper's) keeps.
    let mut server =
        DelayqProcess::start_logging_to(&["--memory", "--log-format=json"], &log).await;
    assert!(
        server
            .terminate(Duration::from_secs(30))
            .is_some_and(|s| s.success())
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(!lines.is_empty(), "nothing logged");
    for line in &lines {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for field in ["timestamp", "level", "target", "message"] {
            assert!(event[field].is_string(), "no {field}: {line}");
        }
    }
    let warning: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(warning["level"], "WARN", "{text}");
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("jobs are kept in memory only"),
        "{text}"
    );
}

/// What `delayq serve --memory` prints to a terminal (a pseudo-terminal made by `script`) in
/// its first second, with `env` set.
fn terminal_output(env: &[(&str, &str)]) -> String {
    let port = free_port();
    let command = format!(
        "timeout -s TERM 1 {} serve --memory --listen 127.0.0.1:{port}",
        env!("CARGO_BIN_EXE_delayq")
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux) runs a command on a terminal");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn text_logs_are_coloured_on_a_terminal_unless_no_color_is_set() {
    let coloured = terminal_output(&[]);
    assert!(coloured.contains("delayq listening"), "{coloured}");
    assert!(
        coloured.contains("\x1b["),
        "no colour on a terminal: {coloured}"
    );
    let plain = terminal_output(&[("NO_COLOR", "1")]);
    assert!(plain.contains("delayq listening"), "{plain}");
    assert!(!plain.contains("\x1b["), "coloured with NO_COLOR: {plain}");
}

#[tokio::test]
async fn text_logs_to_a_file_are_not_coloured() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("delayq.log");
    let mut server = DelayqProcess::start_logging_to(&["--memory"], &log).await;
    server.terminate(Duration::from_secs(30));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("jobs are kept in memory only"), "{text}");
    assert!(!text.contains('\x1b'), "{text}");
}

#[test]
fn version_names_the_version_and_the_commit_built_from() {
    let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8(o.stdout).unwrap().trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    let expected = format!("delayq {} ({head})\n", env!("CARGO_PKG_VERSION"));
    assert_eq!(printed, expected);
}

/// The worker threads `delayq serve` says it runs with (its "listening" log line), given
/// these flags and environment.
async fn worker_threads(args: &[&str], env: &[(&str, &str)]) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("delayq.log");
    let mut env: Vec<(&str, &str)> = env.to_vec();
    env.push(("RUST_LOG", "info"));
    let mut args = args.to_vec();
    args.push("--log-format=json");
    let mut server = DelayqProcess::start_logging_with_env(&args, &env, &log).await;
    // It serves on them: a push and a pop.
    let http = reqwest::Client::new();
    let call = async |path: &str, body: &'static str| -> serde_json::Value {
        let r = http.post(format!("{}{path}", server.base_url)).body(body);
        r.send().await.unwrap().json().await.unwrap()
    };
    let push = call(
        "/push",
        r#"{"topic":"t","id":"one","delay":0,"ttr":60,"body":"b"}"#,
    )
    .await;
    assert_eq!(push["code"], 0, "{push}");
    let pop = call("/pop", r#"{"topic":"t","timeout":5}"#).await;
    assert_eq!(pop["data"]["id"], "one", "{pop}");
    server.terminate(Duration::from_secs(30));
    let text = std::fs::read_to_string(&log).unwrap();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["message"] == "delayq listening")
        .and_then(|e| e["worker_threads"].as_u64())
        .unwrap_or_else(|| panic!("no listening line with worker_threads:\n{text}"))
}

#[tokio::test]
async fn worker_threads_are_one_per_core_unless_set() {
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    assert_eq!(worker_threads(&["--memory"], &[]).await, cores);
    assert_eq!(
        worker_threads(&["--memory", "--worker-threads", "3"], &[]).await,
        3
    );
    let env = [("DELAYQ_WORKER_THREADS", "1")];
    assert_eq!(worker_threads(&["--memory"], &env).await, 1);
}
