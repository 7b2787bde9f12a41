//! Start-up: a malformed journal URL, an unreachable database and a bad mode are one clear
//! error line naming the setting; a database migrated by a newer delayq is refused.

use crate::db::TestDb;
use delayq::clock::SystemClock;
use delayq::journal::{Journal, JournalError, JournalMode, schema};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

journal_tests!(
    a_newer_schema_is_refused,
    tables_are_created_and_reopening_migrates_nothing
);

/// `delayq serve <args>`: its exit status and stderr (it must fail before serving).
fn serve_fails(args: &[&str]) -> String {
    let dir = tempfile::TempDir::new().unwrap();
    let data_dir = dir.path().join("data");
    let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .arg("serve")
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data_dir)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(!out.status.success(), "delayq serve {args:?} started");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "one error line: {stderr}");
    errors[0].to_string()
}

#[test]
fn a_malformed_journal_url_is_one_error_naming_the_setting() {
    let line = serve_fails(&["--journal", "postgres://user:secret@[::1"]);
    assert!(line.contains("journal"), "{line}");
    assert!(
        !line.contains("secret"),
        "the password is not shown: {line}"
    );
    let line = serve_fails(&["--journal", "redis://127.0.0.1/0"]);
    assert!(line.contains("journal"), "{line}");
    assert!(line.contains("postgres://"), "{line}");
}

#[test]
fn a_bad_mode_is_one_error_naming_the_setting() {
    let line = serve_fails(&[
        "--journal",
        "postgres://127.0.0.1/x",
        "--journal-mode",
        "eventually",
    ]);
    assert!(
        line.contains("journal_mode") || line.contains("journal-mode"),
        "{line}"
    );
}

#[test]
fn an_unreachable_database_is_one_error_naming_the_setting() {
    let port = crate::support::process::free_port();
    for url in [
        format!("postgres://postgres:secret@127.0.0.1:{port}/x"),
        format!("mysql://root:secret@127.0.0.1:{port}/x"),
    ] {
        let line = serve_fails(&["--journal", &url]);
        assert!(line.contains("journal: cannot connect"), "{line}");
        assert!(
            !line.contains("secret"),
            "the password is not shown: {line}"
        );
    }
}

async fn a_newer_schema_is_refused(db: &TestDb) {
    db.execute("CREATE TABLE delayq_journal_schema (version BIGINT NOT NULL)")
        .await;
    db.execute("INSERT INTO delayq_journal_schema (version) VALUES (99)")
        .await;
    let opened = Journal::open(
        &db.url,
        JournalMode::Sync,
        Duration::from_secs(3600),
        Arc::new(SystemClock),
    )
    .await;
    let err = opened.err().expect("a newer schema was accepted");
    assert_eq!(
        err,
        JournalError::NewerSchema {
            found: 99,
            supported: schema::LATEST
        }
    );
    assert!(err.to_string().starts_with("journal: "), "{err}");
}

async fn tables_are_created_and_reopening_migrates_nothing(db: &TestDb) {
    for _ in 0..2 {
        let j = crate::restore::open_journal(db, JournalMode::Async).await;
        j.close().await;
    }
    let versions = db.count("SELECT COUNT(*) FROM delayq_journal_schema").await;
    assert_eq!(versions, schema::LATEST);
    assert_eq!(db.count("SELECT COUNT(*) FROM delayq_jobs").await, 0);
}
