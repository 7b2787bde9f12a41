//! Start-up: a malformed journal URL, an unreachable database and a bad mode are one clear
//! error line naming the setting; a database migrated by a newer delayq is refused; one made by
//! an older delayq is migrated, its jobs kept.

use crate::db::{Kind, TestDb};
use delayq::clock::{Clock, SystemClock};
use delayq::job::{JobId, JobState};
use delayq::journal::{Journal, JournalError, JournalMode, Overdue, RestoreOptions, schema};
use delayq::store::Store;
use delayq::store::memory::MemoryStore;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

journal_tests!(
    a_newer_schema_is_refused,
    tables_are_created_and_reopening_migrates_nothing,
    a_version_1_journal_is_migrated_and_still_restores
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
    assert!(
        err.to_string().contains("docs/upgrading.md"),
        "names what to do: {err}"
    );
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

async fn a_version_1_journal_is_migrated_and_still_restores(db: &TestDb) {
    let (migrations, body) = match db.kind {
        Kind::Postgres => (schema::POSTGRES, "'b'::bytea"),
        Kind::MariaDb => (schema::MYSQL, "'b'"),
    };
    for sql in migrations[0] {
        db.execute(sql).await;
    }
    db.execute("CREATE TABLE delayq_journal_schema (version BIGINT NOT NULL)")
        .await;
    db.execute("INSERT INTO delayq_journal_schema (version) VALUES (1)")
        .await;
    let t0 = SystemClock.now();
    let run_at = t0 + 3_600_000;
    db.execute(&format!(
        "INSERT INTO delayq_jobs (id, topic, queue, body, run_at, ttr_ms, priority, attempts, \
         max_attempts, backoff_ms, callback_url, callback_timeout_ms, state, reserved_until, seq, \
         changed_at) VALUES ('old', 't', 't', {body}, {run_at}, 30000, 5, 0, 3, '1000,2000', \
         NULL, NULL, 'delayed', NULL, 0, {t0})"
    ))
    .await;
    db.execute(&format!(
        "INSERT INTO delayq_job_events (job_id, from_state, to_state, at, instance) \
         VALUES ('old', NULL, 'delayed', {t0}, 'older:1')"
    ))
    .await;

    let journal = crate::restore::open_journal(db, JournalMode::Sync).await;
    let versions = db
        .count("SELECT MAX(version) FROM delayq_journal_schema")
        .await;
    assert_eq!(versions, schema::LATEST);
    let history = journal
        .history(&JobId::parse("old").unwrap())
        .await
        .unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].instance, "older:1");
    let store = MemoryStore::new();
    let fire = RestoreOptions {
        overdue: Overdue::Fire,
        id: None,
    };
    let counts = journal.restore(&store, fire, t0).await.unwrap();
    assert_eq!(counts.restored, 1);
    let job = store.get(&JobId::parse("old").unwrap()).await.unwrap();
    assert_eq!(job.state, JobState::Delayed);
    assert_eq!(
        (
            job.spec.topic.as_str(),
            job.spec.body.as_str(),
            job.spec.run_at
        ),
        ("t", "b", run_at)
    );
    assert_eq!(
        (job.spec.priority, job.spec.backoff_ms.clone()),
        (5, vec![1000, 2000])
    );
    journal.close().await;
}
