//! `POST /v1/backup` (docs/api.md, docs/operations.md "Backup and restore"), on every backend:
//! the embedded store writes a copy under `backup_dir` and answers what it wrote; a `dir`
//! outside `backup_dir`, with `..`, or not empty is refused naming `dir` and nothing is
//! written; a server without `backup_dir` answers 409 `backup_disabled`; Redis, the Cluster
//! and memory answer 409 `backup_unsupported` saying what to do instead.

use super::*;

fn with_backup_dir(b: &Backend, root: &std::path::Path) -> TestApp {
    let config = Config {
        backup_dir: Some(root.to_path_buf()),
        ..Config::default()
    };
    TestApp::with_config(b, config)
}

async fn a_backup_is_written_under_backup_dir_or_refused_saying_why(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let app = with_backup_dir(b, root.path());
    let pushed = app
        .post(
            "/v1/jobs",
            json!({"topic": "t", "id": "kept", "body": "b", "delay_ms": 60_000}),
        )
        .await;
    assert_eq!(pushed.status, StatusCode::CREATED);
    let r = app.post("/v1/backup", json!({"dir": "nightly"})).await;
    if b.name != "embedded" {
        assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.json);
        assert_eq!(r.json["error"]["code"], "backup_unsupported");
        let message = r.json["error"]["message"].as_str().unwrap();
        let why = if b.name == "memory" {
            "memory only"
        } else {
            "back up Redis itself"
        };
        assert!(message.contains(why), "{message}");
        assert!(std::fs::read_dir(root.path()).unwrap().next().is_none());
        return;
    }
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let dir = root.path().canonicalize().unwrap().join("nightly");
    assert_eq!(r.json["dir"], dir.to_str().unwrap());
    assert_eq!(
        (r.json["jobs"].as_u64(), r.json["schedules"].as_u64()),
        (Some(1), Some(0))
    );
    let file = dir.join("delayq.redb");
    assert_eq!(
        r.json["bytes"].as_u64(),
        Some(std::fs::metadata(&file).unwrap().len())
    );

    // Into the same directory again: it is not empty any more.
    let r = app
        .post("/v1/backup", json!({"dir": dir.to_str().unwrap()}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.json);
    assert_eq!(r.json["error"]["field"], "dir");
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is not empty")
    );

    for outside in ["../escaped", "/tmp/escaped", "a/../../escaped"] {
        let r = app.post("/v1/backup", json!({"dir": outside})).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{outside}: {:?}", r.json);
        assert_eq!(r.json["error"]["field"], "dir", "{outside}");
    }
    for bad in [
        json!({}),
        json!({"dir": ""}),
        json!({"dir": 7}),
        json!({"dir": "x", "to": "y"}),
    ] {
        let r = app.post("/v1/backup", bad.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {:?}", r.json);
    }
    let names: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["nightly"]);
    assert!(!root.path().parent().unwrap().join("escaped").exists());

    // Without backup_dir, nothing is written anywhere.
    let plain = TestApp::new(b);
    let r = plain
        .post("/v1/backup", json!({"dir": "/tmp/anywhere"}))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.json);
    assert_eq!(r.json["error"]["code"], "backup_disabled");
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--backup-dir")
    );
}

backend_tests!(a_backup_is_written_under_backup_dir_or_refused_saying_why);
