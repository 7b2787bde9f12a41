//! `GET /metrics` (docs/metrics.md), in OpenMetrics, in-process, once per backend: each transition made through
//! either API or by the timer is counted once, refusals are not counted, the lateness histogram
//! measures from the due time, and the job gauges are the store's counts. Also (memory store):
//! a store that is down shows as `store_up 0` with its errors counted, a waiting long poll in
//! `waiting_consumers`, and topics with quotes or backslashes escaped in their labels.

// `backend_tests!` (support/backends.rs) names `crate::support` on purpose: the support module
// lives in each test crate, not in delayq, so `$crate` would be wrong.
#![allow(clippy::crate_in_macro_def)]

use crate::support;

use axum::http::{Method, StatusCode};
use delayq::clock::{Clock, SystemClock};
use delayq::config::Config;
use delayq::store::StoreError;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::app::TestApp;
use support::backends::Backend;
use support::failing::FailingStore;

/// 2100-01-01: a due time that never comes during a test.
const FAR_FUTURE: u64 = 4_102_444_800_000;

/// One scrape: every sample by its name and labels as written (`name{a="x",b="y"}`).
struct Scrape(HashMap<String, f64>);

impl Scrape {
    /// Asks for OpenMetrics, as Prometheus does (tests/http/metrics_format.rs checks both
    /// formats).
    async fn of(app: &TestApp) -> Scrape {
        let req = axum::http::Request::get("/metrics")
            .header("accept", "application/openmetrics-text;version=1.0.0")
            .body(axum::body::Body::empty())
            .unwrap();
        let r = tower::ServiceExt::oneshot(app.router.clone(), req)
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()["content-type"],
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        let raw = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .unwrap();
        let text = String::from_utf8(raw.to_vec()).unwrap();
        assert!(text.ends_with("# EOF\n"), "{text}");
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let (name, value) = l.rsplit_once(' ').unwrap();
                (name.to_string(), value.parse().unwrap())
            })
            .collect();
        Scrape(samples)
    }

    /// The sample's value; a sample that is not there is a test failure.
    fn get(&self, sample: &str) -> f64 {
        *self
            .0
            .get(sample)
            .unwrap_or_else(|| panic!("no sample {sample} in {:?}", self.0.keys()))
    }

    fn total(&self, counter: &str) -> f64 {
        self.get(&format!("delayq_{counter}_total"))
    }

    fn jobs(&self, topic: &str, state: &str) -> f64 {
        self.get(&format!(
            "delayq_jobs{{topic=\"{topic}\",state=\"{state}\"}}"
        ))
    }

    fn lateness_bucket(&self, le: &str) -> f64 {
        self.get(&format!(
            "delayq_delivery_lateness_seconds_bucket{{le=\"{le}\"}}"
        ))
    }
}

/// Each counter's expected value; all the others must be 0.
fn assert_counters(s: &Scrape, want: &[(&str, f64)]) {
    const COUNTERS: [&str; 12] = [
        "jobs_pushed",
        "jobs_delivered",
        "jobs_redelivered",
        "jobs_finished",
        "jobs_deleted",
        "jobs_released",
        "jobs_buried",
        "jobs_kicked",
        "jobs_rescheduled",
        "jobs_touched",
        "jobs_promoted",
        "reservations_expired",
    ];
    for c in COUNTERS {
        let want = want.iter().find(|(n, _)| *n == c).map_or(0.0, |(_, v)| *v);
        assert_eq!(s.total(c), want, "{c}");
    }
}

async fn reserve_one(app: &TestApp, topic: &str, timeout_ms: u64) -> Value {
    let r = app
        .post(
            "/v1/reserve",
            json!({"topics": [topic], "timeout_ms": timeout_ms}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let jobs = r.json["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{:?}", r.json);
    jobs[0].clone()
}

async fn ok(app: &TestApp, path: &str, body: Value) -> Value {
    let r = app.post(path, body).await;
    assert!(r.status.is_success(), "{path}: {:?}", r.json);
    r.json
}

async fn every_v1_transition_is_counted_once(b: &Backend) {
    let app = TestApp::new(b);
    let now = SystemClock.now();
    // `a` fell due 5 s ago; `b`, `c` and `d` are far off.
    ok(
        &app,
        "/v1/jobs",
        json!({"topic": "t", "id": "a", "run_at_ms": now - 5_000}),
    )
    .await;
    for id in ["b", "c", "d"] {
        ok(
            &app,
            "/v1/jobs",
            json!({"topic": "t", "id": id, "run_at_ms": FAR_FUTURE}),
        )
        .await;
    }
    // Refused: nothing counted.
    let again = app.post("/v1/jobs", json!({"topic": "t", "id": "a"})).await;
    assert_eq!(again.status, StatusCode::CONFLICT);

    assert_eq!(reserve_one(&app, "t", 0).await["id"], "a");
    let s = Scrape::of(&app).await;
    assert_counters(&s, &[("jobs_pushed", 4.0), ("jobs_delivered", 1.0)]);
    // Delivered at least 5 s after its due time, and (generously) within 10.
    assert_eq!(s.get("delayq_delivery_lateness_seconds_count"), 1.0);
    assert!(s.get("delayq_delivery_lateness_seconds_sum") >= 5.0);
    assert_eq!(s.lateness_bucket("2.5"), 0.0);
    assert_eq!(s.lateness_bucket("10.0"), 1.0);
    assert_eq!(s.jobs("t", "reserved"), 1.0);
    assert_eq!(s.jobs("t", "delayed"), 3.0);

    ok(&app, "/v1/jobs/a/release", json!({})).await;
    assert_eq!(reserve_one(&app, "t", 0).await["attempts"], 2);
    ok(&app, "/v1/jobs/a/touch", json!({})).await;
    ok(&app, "/v1/jobs/a/bury", json!({})).await;
    assert_eq!(Scrape::of(&app).await.jobs("t", "dead"), 1.0);
    ok(&app, "/v1/jobs/a/kick", json!({})).await;
    assert_eq!(reserve_one(&app, "t", 0).await["attempts"], 1);
    ok(&app, "/v1/jobs/a/finish", json!({})).await;
    let gone = app.send(Method::DELETE, "/v1/jobs/b", "", None).await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
    ok(
        &app,
        "/v1/jobs/c/reschedule",
        json!({"delay_ms": 3_600_000}),
    )
    .await;
    // Finishing what is not there changes nothing and counts nothing.
    ok(&app, "/v1/finish", json!({"ids": ["a", "nobody"]})).await;
    let missing = app.post("/v1/jobs/nobody/finish", json!({})).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);

    let s = Scrape::of(&app).await;
    assert_counters(
        &s,
        &[
            ("jobs_pushed", 4.0),
            ("jobs_delivered", 3.0),
            ("jobs_redelivered", 1.0),
            ("jobs_released", 1.0),
            ("jobs_touched", 1.0),
            ("jobs_buried", 1.0),
            ("jobs_kicked", 1.0),
            ("jobs_finished", 1.0),
            ("jobs_deleted", 1.0),
            ("jobs_rescheduled", 1.0),
        ],
    );
    assert_eq!(s.get("delayq_delivery_lateness_seconds_count"), 3.0);
    for (state, n) in [
        ("delayed", 2.0),
        ("ready", 0.0),
        ("reserved", 0.0),
        ("dead", 0.0),
    ] {
        assert_eq!(s.jobs("t", state), n, "{state}");
    }
    assert_eq!(s.get("delayq_store_up"), 1.0);
    assert_eq!(s.get("delayq_waiting_consumers"), 0.0);
    let build = format!(
        "delayq_build_info{{version=\"{}\",store=\"{}\"}}",
        env!("CARGO_PKG_VERSION"),
        b.store.kind()
    );
    assert_eq!(s.get(&build), 1.0);
}

async fn the_compat_api_is_counted_like_v1(b: &Backend) {
    let app = TestApp::new(b);
    for id in ["s1", "s2"] {
        let job = json!({"topic": "seed", "id": id, "delay": 0, "ttr": 30, "body": "x"});
        assert_eq!(ok(&app, "/push", job).await["code"], 0);
    }
    let popped = ok(&app, "/pop", json!({"topic": "seed", "timeout": 1})).await;
    let first = popped["data"]["id"].as_str().unwrap().to_string();
    let other = if first == "s1" { "s2" } else { "s1" };
    ok(&app, "/finish", json!({"id": first})).await;
    ok(&app, "/delete", json!({"id": other})).await;
    // Unknown ids succeed on the compat API, and count nothing.
    ok(&app, "/finish", json!({"id": "nobody"})).await;
    ok(&app, "/delete", json!({"id": "nobody"})).await;

    let s = Scrape::of(&app).await;
    assert_counters(
        &s,
        &[
            ("jobs_pushed", 2.0),
            ("jobs_delivered", 1.0),
            ("jobs_finished", 1.0),
            ("jobs_deleted", 1.0),
        ],
    );
    assert_eq!(s.get("delayq_delivery_lateness_seconds_count"), 1.0);
}

/// A finish of a job no consumer holds removes it as a delete does, and counts as one (on both
/// APIs and in a batch); only a reserved job's finish counts as finished.
async fn a_finish_of_a_job_never_handed_out_counts_as_a_delete(b: &Backend) {
    let app = TestApp::new(b);
    for id in ["c1", "c2", "v1", "v2", "v3"] {
        let job = json!({"topic": "fin", "id": id, "delay": 3600, "ttr": 30, "body": "x"});
        assert_eq!(ok(&app, "/push", job).await["code"], 0);
    }
    ok(&app, "/finish", json!({"id": "c1"})).await;
    ok(&app, "/v1/jobs/v1/finish", json!({})).await;
    ok(&app, "/v1/finish", json!({"ids": ["v2"]})).await;
    let s = Scrape::of(&app).await;
    assert_counters(&s, &[("jobs_pushed", 5.0), ("jobs_deleted", 3.0)]);
    assert_eq!(s.jobs("fin", "delayed"), 2.0);

    // The same jobs, reserved first: finished.
    for id in ["c2", "v3"] {
        ok(
            &app,
            &format!("/v1/jobs/{id}/reschedule"),
            json!({"delay_ms": 0}),
        )
        .await;
        reserve_one(&app, "fin", 5_000).await;
    }
    ok(&app, "/finish", json!({"id": "c2"})).await;
    ok(&app, "/v1/finish", json!({"ids": ["v3"]})).await;
    let s = Scrape::of(&app).await;
    assert_counters(
        &s,
        &[
            ("jobs_pushed", 5.0),
            ("jobs_delivered", 2.0),
            ("jobs_rescheduled", 2.0),
            ("jobs_deleted", 3.0),
            ("jobs_finished", 2.0),
        ],
    );
}

/// Polls `/metrics` until `counter` reaches `want`, for at most 20 s.
async fn until_counted(app: &TestApp, counter: &str, want: f64) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = Scrape::of(app).await;
        if s.total(counter) >= want || Instant::now() > deadline {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn the_timer_s_promotions_and_expiries_are_counted(b: &Backend) {
    let app = TestApp::new(b);
    ok(
        &app,
        "/v1/jobs",
        // A TTR that cannot run out between the reserve and the first scrape below, even on a
        // loaded machine.
        json!({"topic": "tm", "id": "late", "delay_ms": 300, "ttr_ms": 2_000}),
    )
    .await;
    // A long poll is served when the timer promotes the job.
    assert_eq!(reserve_one(&app, "tm", 20_000).await["attempts"], 1);
    let s = Scrape::of(&app).await;
    assert_eq!(s.total("jobs_promoted"), 1.0);
    // The consumer never finishes: its TTR runs out and the timer takes the job back.
    let s = until_counted(&app, "reservations_expired", 1.0).await;
    assert_eq!(s.total("reservations_expired"), 1.0);
    assert_eq!(reserve_one(&app, "tm", 20_000).await["attempts"], 2);
    let s = Scrape::of(&app).await;
    assert_counters(
        &s,
        &[
            ("jobs_pushed", 1.0),
            ("jobs_promoted", 1.0),
            ("jobs_delivered", 2.0),
            ("jobs_redelivered", 1.0),
            ("reservations_expired", 1.0),
        ],
    );
    // Both deliveries came after the due time; none was early (never below 0).
    assert_eq!(s.get("delayq_delivery_lateness_seconds_count"), 2.0);
    assert!(s.get("delayq_delivery_lateness_seconds_sum") >= 0.0);
}

async fn flow_control_settings_are_gauges_and_held_back_hand_outs_a_counter(b: &Backend) {
    let app = TestApp::new(b);
    let r = app
        .json(
            axum::http::Method::PUT,
            "/v1/topics/slow/settings",
            json!({"paused": true, "rate_per_s": 2.5, "burst": 4, "max_in_flight": 16}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    ok(&app, "/v1/jobs", json!({"topic": "slow", "id": "s"})).await;
    let r = app.post("/v1/reserve", json!({"topics": ["slow"]})).await;
    assert_eq!(r.json["jobs"], json!([]));
    let s = Scrape::of(&app).await;
    let topic = "{topic=\"slow\"}";
    assert_eq!(s.get(&format!("delayq_topic_paused{topic}")), 1.0);
    assert_eq!(s.get(&format!("delayq_topic_rate_per_second{topic}")), 2.5);
    assert_eq!(s.get(&format!("delayq_topic_burst{topic}")), 4.0);
    assert_eq!(s.get(&format!("delayq_topic_max_in_flight{topic}")), 16.0);
    let held = |limit: &str| {
        s.get(&format!(
            "delayq_held_back_total{{topic=\"slow\",limit=\"{limit}\"}}"
        ))
    };
    // One reserve: one hold on one store, one per round of its shards on a sharded one.
    assert!((1.0..=3.0).contains(&held("paused")), "{}", held("paused"));
    assert_eq!((held("rate"), held("max_in_flight")), (0.0, 0.0));
    assert_counters(&s, &[("jobs_pushed", 1.0)]);
}

async fn recurring_schedules_ticks_and_count_are_shown(b: &Backend) {
    let app = TestApp::new(b);
    for (id, body) in [
        // Every second, but its first job is never consumed: the next ticks overlap it.
        (
            "busy",
            json!({"every_ms": 1_000, "overlap": "skip", "job": {"topic": "sk"}}),
        ),
        (
            "idle",
            json!({"cron": "@daily", "paused": true, "job": {"topic": "sk"}}),
        ),
    ] {
        let r = app
            .json(
                axum::http::Method::PUT,
                &format!("/v1/schedules/{id}"),
                body,
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let overlap = "delayq_schedule_ticks_skipped_total{reason=\"overlap\"}";
    let s = loop {
        let s = Scrape::of(&app).await;
        if s.0.get(overlap).is_some_and(|&n| n >= 1.0) || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        s.total("schedule_ticks_fired"),
        1.0,
        "one job, then overlaps"
    );
    assert_eq!(s.total("jobs_pushed"), 1.0, "a tick's job is a push");
    assert!(s.get(overlap) >= 1.0);
    assert_eq!(s.total("schedule_ticks_caught_up"), 0.0);
    assert_eq!(s.get("delayq_schedules"), 2.0);
}

/// `log_syncs_total`: on the embedded store each acknowledged push waits for a sync of the
/// write-ahead log, so pushes one after the other add one each; the other stores have no log
/// and show 0.
async fn the_embedded_store_s_log_syncs_are_counted(b: &Backend) {
    let app = TestApp::new(b);
    let before = Scrape::of(&app).await.total("log_syncs");
    for i in 0..5 {
        ok(
            &app,
            "/v1/jobs",
            json!({"topic": "synced", "id": format!("s{i}"), "delay_ms": 60_000}),
        )
        .await;
    }
    let after = Scrape::of(&app).await.total("log_syncs");
    if b.name.starts_with("embedded") {
        assert!(
            after - before >= 5.0,
            "5 pushes one after the other, syncs {before} -> {after}"
        );
    } else {
        assert_eq!((before, after), (0.0, 0.0), "{}", b.name);
    }
}

backend_tests!(
    the_embedded_store_s_log_syncs_are_counted,
    flow_control_settings_are_gauges_and_held_back_hand_outs_a_counter,
    recurring_schedules_ticks_and_count_are_shown,
    every_v1_transition_is_counted_once,
    the_compat_api_is_counted_like_v1,
    a_finish_of_a_job_never_handed_out_counts_as_a_delete,
    the_timer_s_promotions_and_expiries_are_counted,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_is_down_shows_in_store_up_and_store_errors() {
    let store = Arc::new(FailingStore::new(StoreError::Unavailable("refused".into())));
    let app = TestApp::with_store(store, Config::default());
    let r = app.post("/v1/jobs", json!({"topic": "t"})).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    let s = Scrape::of(&app).await;
    assert_eq!(s.get("delayq_store_up"), 0.0);
    assert!(s.get("delayq_store_errors_total{error=\"unavailable\"}") >= 1.0);
    assert_eq!(s.total("jobs_pushed"), 0.0);
    assert!(
        !s.0.keys().any(|k| k.starts_with("delayq_jobs{")),
        "no job counts without a store: {:?}",
        s.0.keys()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotes_and_backslashes_in_a_topic_are_escaped_in_its_label() {
    let b = Backend::memory().await;
    let app = TestApp::new(&b);
    let topic = r#"a"b\c"#;
    let r = app
        .post("/v1/jobs", json!({"topic": topic, "run_at_ms": FAR_FUTURE}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    // Every line still parses as `sample value`, and the label reads back as the topic.
    let s = Scrape::of(&app).await;
    assert_eq!(s.jobs(r#"a\"b\\c"#, "delayed"), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_long_poll_shows_in_waiting_consumers() {
    let b = Backend::memory().await;
    let app = Arc::new(TestApp::new(&b));
    let poll = {
        let app = app.clone();
        tokio::spawn(async move { reserve_one(&app, "w", 20_000).await })
    };
    // Until the poll has registered (bounded: 20 s).
    let deadline = Instant::now() + Duration::from_secs(20);
    while Scrape::of(&app).await.get("delayq_waiting_consumers") < 1.0 {
        assert!(Instant::now() < deadline, "the long poll never showed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ok(&app, "/v1/jobs", json!({"topic": "w", "id": "x"})).await;
    assert_eq!(poll.await.unwrap()["id"], "x");
    let s = Scrape::of(&app).await;
    assert_eq!(s.get("delayq_waiting_consumers"), 0.0);
    assert_eq!(s.total("jobs_delivered"), 1.0);
}
