//! The journal's routes over a journaled server: `POST /v1/restore`, the compat `GET /reStore`
//! and `GET /reStore/{id}`, a restore while another runs (409), a server without a journal
//! (404 `journal_disabled`) and bad input (400 naming the field); a job's history,
//! `GET /v1/jobs/{id}/history`; the OpenAPI document, which lists these routes only with a
//! journal.

use crate::db::TestDb;
use crate::restore::open_journal;
use crate::support::app::TestApp;
use axum::http::StatusCode;
use delayq::api;
use delayq::clock::SystemClock;
use delayq::config::Config;
use delayq::job::{JobId, JobSpec, JobState, Topic};
use delayq::journal::{Journal, JournalMode};
use delayq::server::App;
use delayq::store::hook::{Call, Hooked, Reply, StoreHook};
use delayq::store::memory::MemoryStore;
use delayq::store::{PushMode, Store, StoreError, StoreResult};
use serde_json::json;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

journal_tests!(
    restore_answers_counts_on_v1_and_in_the_compat_envelope,
    a_restore_while_another_runs_is_refused_with_409,
    the_cli_restores_what_redis_lost,
    a_jobs_history_lists_its_state_changes_oldest_first,
    the_document_of_a_journaled_server_lists_history_and_restore,
);

/// A server over `store` with `journal`.
fn app(store: Arc<dyn Store>, journal: Option<Journal>) -> TestApp {
    let App { state, .. } =
        App::with_journal(store, Arc::new(SystemClock), Config::default(), journal);
    let shutdown = CancellationToken::new();
    state.dispatch.start(shutdown.clone());
    TestApp {
        router: api::router(state.clone()),
        state,
        shutdown,
    }
}

fn spec(id: &str, run_at: u64) -> JobSpec {
    JobSpec::new(
        Topic::parse("t").unwrap(),
        JobId::parse(id).unwrap(),
        "b",
        run_at,
    )
}

async fn restore_answers_counts_on_v1_and_in_the_compat_envelope(db: &TestDb) {
    let journal = open_journal(db, JournalMode::Sync).await;
    let now = delayq::clock::Clock::now(&SystemClock);
    let first = app(Arc::new(MemoryStore::new()), Some(journal.clone()));
    for (id, delay) in [("a", 600_000), ("b", 600_000), ("c", 0), ("d", 600_000)] {
        let r = first
            .post(
                "/v1/jobs",
                json!({"topic": "t", "id": id, "delay_ms": delay}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    }
    let r = first.post("/v1/jobs/d/finish", json!({})).await;
    assert!(r.status.is_success(), "{:?}", r.json);
    drop(first);

    let lost = Arc::new(MemoryStore::new());
    let second = app(lost.clone(), Some(journal.clone()));
    let r = second
        .post("/v1/restore", json!({"overdue": "fire", "id": "a"}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(
        r.json,
        json!({"restored": 1, "already_present": 0, "skipped_overdue": 0, "skipped_finished": 0, "schedules_restored": 0, "schedules_already_present": 0, "settings_restored": 0, "settings_already_present": 0})
    );
    let r = second.get("/reStore/a?expire=true").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.json,
        json!({"code": 0, "message": "操作成功", "data":
            {"restored": 0, "already_present": 1, "skipped_overdue": 0, "skipped_finished": 0, "schedules_restored": 0, "schedules_already_present": 0, "settings_restored": 0, "settings_already_present": 0}})
    );
    let r = second.get("/reStore?expire=true").await;
    assert_eq!(
        r.json["data"],
        json!({"restored": 2, "already_present": 1, "skipped_overdue": 0, "skipped_finished": 1, "schedules_restored": 0, "schedules_already_present": 0, "settings_restored": 0, "settings_already_present": 0})
    );
    let job = lost.get(&JobId::parse("b").unwrap()).await.unwrap();
    assert_eq!(job.state, JobState::Delayed);
    assert!(job.spec.run_at >= now + 600_000, "never early");
    let r = second.post("/v1/restore", json!({})).await;
    assert_eq!(r.json["restored"], 0, "{:?}", r.json);

    let r = second
        .post("/v1/restore", json!({"overdue": "later"}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json["error"]["field"], "overdue");
    let r = second.post("/v1/restore", json!({"id": "zz"})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.json);
    let r = second.get("/reStore?expire=maybe").await;
    assert_eq!(r.json["code"], 1);
    journal.close().await;
}

#[tokio::test]
async fn without_a_journal_restore_is_404_journal_disabled() {
    let plain = app(Arc::new(MemoryStore::new()), None);
    let r = plain.post("/v1/restore", json!({"overdue": "skip"})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json["error"]["code"], "journal_disabled");
    let r = plain.get("/reStore?expire=false").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["code"], 1);
}

async fn a_jobs_history_lists_its_state_changes_oldest_first(db: &TestDb) {
    let journal = open_journal(db, JournalMode::Sync).await;
    let server = app(Arc::new(MemoryStore::new()), Some(journal.clone()));
    let r = server
        .post("/v1/jobs", json!({"topic": "t", "id": "h", "delay_ms": 0}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    let r = server
        .post("/v1/reserve", json!({"topics": ["t"], "timeout_ms": 0}))
        .await;
    assert_eq!(r.json["jobs"][0]["id"], "h", "{:?}", r.json);
    let r = server.post("/v1/jobs/h/release", json!({})).await;
    assert!(r.status.is_success(), "{:?}", r.json);
    let r = server
        .post("/v1/reserve", json!({"topics": ["t"], "timeout_ms": 0}))
        .await;
    assert_eq!(r.json["jobs"][0]["id"], "h", "{:?}", r.json);
    let r = server.post("/v1/jobs/h/finish", json!({})).await;
    assert!(r.status.is_success(), "{:?}", r.json);

    let r = server.get("/v1/jobs/h/history").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let history = r.json["history"].as_array().unwrap();
    let steps: Vec<(serde_json::Value, serde_json::Value)> = history
        .iter()
        .map(|e| (e["from"].clone(), e["to"].clone()))
        .collect();
    assert_eq!(
        steps,
        [
            (json!(null), json!("ready")),
            (json!("ready"), json!("reserved")),
            (json!("reserved"), json!("ready")),
            (json!("ready"), json!("reserved")),
            (json!("reserved"), json!("finished")),
        ]
    );
    let times: Vec<u64> = history
        .iter()
        .map(|e| e["at_ms"].as_u64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert!(
        history
            .iter()
            .all(|e| !e["instance"].as_str().unwrap().is_empty())
    );

    // A finish of a job no consumer held is a delete, in the journal too.
    let r = server
        .post(
            "/v1/jobs",
            json!({"topic": "t", "id": "g", "delay_ms": 3_600_000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    let r = server.post("/v1/jobs/g/finish", json!({})).await;
    assert!(r.status.is_success(), "{:?}", r.json);
    let r = server.get("/v1/jobs/g/history").await;
    let steps: Vec<(serde_json::Value, serde_json::Value)> = r.json["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["from"].clone(), e["to"].clone()))
        .collect();
    assert_eq!(
        steps,
        [
            (json!(null), json!("delayed")),
            (json!("delayed"), json!("deleted")),
        ]
    );

    let r = server.get("/v1/jobs/never-pushed/history").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json["error"]["code"], "not_found");
    journal.close().await;
}

/// The `method path` operations of the server's OpenAPI document.
async fn operations(server: &TestApp) -> Vec<String> {
    let r = server.get("/v1/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    let mut ops = Vec::new();
    for (path, item) in r.json["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if method != "parameters" {
                ops.push(format!("{method} {path}"));
            }
        }
    }
    ops
}

async fn the_document_of_a_journaled_server_lists_history_and_restore(db: &TestDb) {
    let journal = open_journal(db, JournalMode::Sync).await;
    let server = app(Arc::new(MemoryStore::new()), Some(journal.clone()));
    let ops = operations(&server).await;
    for op in ["get /v1/jobs/{id}/history", "post /v1/restore"] {
        assert!(ops.iter().any(|o| o == op), "{op} missing from {ops:?}");
    }
    journal.close().await;
}

#[tokio::test]
async fn without_a_journal_the_document_has_no_history_or_restore() {
    let plain = app(Arc::new(MemoryStore::new()), None);
    let ops = operations(&plain).await;
    assert!(ops.iter().any(|o| o == "post /v1/jobs"), "{ops:?}");
    assert!(
        !ops.iter()
            .any(|o| o.contains("history") || o.contains("restore")),
        "{ops:?}"
    );
}

#[tokio::test]
async fn without_a_journal_history_is_404_journal_disabled() {
    let plain = app(Arc::new(MemoryStore::new()), None);
    let r = plain.get("/v1/jobs/a/history").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json["error"]["code"], "journal_disabled");
}

/// Holds every push, once armed, until a permit is added.
struct Hold {
    armed: AtomicBool,
    permits: Arc<Semaphore>,
}

impl StoreHook for Hold {
    fn settle(
        &self,
        call: &Call<'_>,
        _: Result<Reply<'_>, &StoreError>,
        _: &[JobSpec],
    ) -> impl Future<Output = StoreResult<()>> + Send + 'static {
        let hold = matches!(call, Call::RestoreBatch { .. }) && self.armed.load(Ordering::SeqCst);
        let permits = self.permits.clone();
        async move {
            if hold {
                let _ = permits.acquire().await.map(|p| p.forget());
            }
            Ok(())
        }
    }
}

async fn a_restore_while_another_runs_is_refused_with_409(db: &TestDb) {
    let journal = open_journal(db, JournalMode::Sync).await;
    let now = delayq::clock::Clock::now(&SystemClock);
    let hold = Arc::new(Hold {
        armed: AtomicBool::new(false),
        permits: Arc::new(Semaphore::new(0)),
    });
    let held: Arc<dyn Store> = Arc::new(Hooked::new(Arc::new(MemoryStore::new()), hold.clone()));
    let first = app(held.clone(), Some(journal.clone()));
    let journaled = delayq::journal::Journaled::new(Arc::new(MemoryStore::new()), journal.clone());
    journaled
        .push(spec("x", now + 60_000), PushMode::Reject, now)
        .await
        .unwrap();
    hold.armed.store(true, Ordering::SeqCst);
    let app = Arc::new(first);
    let running = {
        let app = app.clone();
        tokio::spawn(async move { app.post("/v1/restore", json!({"overdue": "fire"})).await })
    };
    // The first restore is held in its store call; the second is refused at once.
    let mut refused = None;
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let r = app.post("/v1/restore", json!({})).await;
        if r.status == StatusCode::CONFLICT {
            refused = Some(r);
            break;
        }
    }
    let refused = refused.expect("a second restore was not refused");
    assert_eq!(refused.json["error"]["code"], "restore_running");
    let compat = app.get("/reStore?expire=true").await;
    assert_eq!(compat.json["code"], 1);
    assert!(
        compat.json["message"]
            .as_str()
            .unwrap()
            .contains("already running"),
        "{:?}",
        compat.json
    );
    // Another delayq sharing the journal is refused too (the lock is in the database).
    let other = open_journal(db, JournalMode::Sync).await;
    let elsewhere = delayq::journal::Journaled::new(Arc::new(MemoryStore::new()), other.clone());
    let options = delayq::journal::RestoreOptions {
        overdue: delayq::journal::Overdue::Fire,
        id: None,
    };
    let refused = other.restore(&elsewhere, options.clone(), now).await;
    assert_eq!(refused, Err(delayq::journal::RestoreError::Running));
    hold.permits.add_permits(1);
    let done = running.await.unwrap();
    // Released when done: the other delayq may restore now.
    let counts = other.restore(&elsewhere, options, now).await.unwrap();
    assert_eq!(counts.restored, 1);
    other.close().await;
    assert_eq!(done.status, StatusCode::OK, "{:?}", done.json);
    assert_eq!(done.json["restored"], 1);
    journal.close().await;
}

/// The real binary end to end: `delayq serve --journal` on Redis, jobs pushed, Redis emptied
/// (FLUSHALL of its own redis-server), then `delayq restore` and `delayq restore
/// --skip-overdue --id`.
async fn the_cli_restores_what_redis_lost(db: &TestDb) {
    use crate::support::process::DelayqProcess;
    use crate::support::redis_server::{RedisServer, flushall};
    let redis = RedisServer::start();
    let server = DelayqProcess::start(&["--redis", &redis.url(), "--journal", &db.url]).await;
    let http = reqwest::Client::new();
    for (id, delay) in [("a", 600_000), ("b", 0)] {
        let r = http
            .post(format!("{}/v1/jobs", server.base_url))
            .json(&json!({"topic": "t", "id": id, "delay_ms": delay}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    // A schedule and a topic's settings, lost with the jobs and restored with them.
    let r = http
        .put(format!("{}/v1/schedules/nightly", server.base_url))
        .json(&json!({"cron": "0 3 * * *", "tz": "Europe/Berlin", "job": {"topic": "t"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let schedule: serde_json::Value = r.json().await.unwrap();
    let r = http
        .put(format!("{}/v1/topics/t/settings", server.base_url))
        .json(&json!({"max_in_flight": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    flushall(&redis.url()).await;
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args(["--server", &server.base_url])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = cli(&["restore", "--skip-overdue", "--id", "b"]);
    assert_eq!(
        text,
        "restored 0, already present 0, skipped overdue 1, skipped finished 0; schedules \
         restored 0, already present 0; topic settings restored 0, already present 0\n",
        "one job by id: no schedules nor settings"
    );
    let text = cli(&["--json", "restore"]);
    let counts: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        counts,
        json!({"restored": 1, "already_present": 0, "skipped_overdue": 1, "skipped_finished": 0, "schedules_restored": 1, "schedules_already_present": 0, "settings_restored": 1, "settings_already_present": 0})
    );
    let r = http
        .get(format!("{}/v1/schedules/nightly", server.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let back: serde_json::Value = r.json().await.unwrap();
    assert_eq!(back, schedule, "the schedule as it was");
    let r = http
        .get(format!("{}/v1/topics/t/settings", server.base_url))
        .send()
        .await
        .unwrap();
    let settings: serde_json::Value = r.json().await.unwrap();
    assert_eq!(settings["max_in_flight"], 3, "{settings}");
    let r = http
        .get(format!("{}/v1/jobs/a", server.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}
