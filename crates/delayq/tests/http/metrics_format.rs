//! `/metrics`'s two formats (docs/metrics.md), each read by Prometheus's own parser in
//! `promtool` (Debian package `prometheus`): the Prometheus text format 0.0.4 by default, which
//! `promtool check metrics` (and every classic parser) reads without error or lint warning, and
//! OpenMetrics when the scraper's `Accept` asks for it, as Prometheus does, which promtool's
//! OpenMetrics parser (`tsdb create-blocks-from openmetrics`) reads. Both carry the same
//! samples, so the dashboard, which fetches the default, reads the same values.

use crate::support;

use axum::http::{Method, StatusCode};
use serde_json::json;
use std::collections::BTreeSet;
use std::io::Write as _;
use std::process::{Command, Stdio};
use support::app::TestApp;
use support::backends::Backend;

/// What Prometheus 2.x sends.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
    application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

pub(crate) fn promtool() -> Command {
    let found = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "promtool is missing: apt-get install -y prometheus (Debian's package has promtool)"
    );
    Command::new("promtool")
}

/// Runs promtool with `input` on stdin; its exit status and everything it printed.
fn run(mut cmd: Command, input: &str) -> (bool, String) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), printed)
}

async fn scrape(app: &TestApp, accept: Option<&str>) -> (String, String) {
    let mut req = axum::http::Request::builder()
        .method(Method::GET)
        .uri("/metrics");
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let resp = tower::ServiceExt::oneshot(
        app.router.clone(),
        req.body(axum::body::Body::empty()).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["vary"], "accept");
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (content_type, String::from_utf8(body.to_vec()).unwrap())
}

fn samples(text: &str) -> BTreeSet<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_parsers_read_the_text_format_by_default_and_openmetrics_when_asked() {
    let b = Backend::memory().await;
    let app = TestApp::new(&b);
    // Samples in every kind of family: counters, the lateness histogram, labelled gauges (a
    // topic with a quote and a backslash), the build info.
    for (topic, id) in [("orders", "o1"), ("orders", "o2"), (r#"a"b\c"#, "q1")] {
        let r = app
            .post("/v1/jobs", json!({"topic": topic, "id": id, "body": "x"}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    }
    let r = app
        .post("/v1/reserve", json!({"topics": ["orders"], "max": 2}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let r = app.post("/v1/jobs/o1/finish", json!({})).await;
    assert!(r.status.is_success(), "{}", r.json);

    for accept in [None, Some("*/*"), Some("text/plain;version=0.0.4")] {
        let (content_type, text) = scrape(&app, accept).await;
        assert_eq!(
            content_type, "text/plain; version=0.0.4; charset=utf-8",
            "{accept:?}"
        );
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        for typed in [
            "# TYPE delayq_jobs_pushed_total counter",
            "# TYPE delayq_build_info gauge",
            "# TYPE delayq_delivery_lateness_seconds histogram",
            "# TYPE delayq_jobs gauge",
        ] {
            assert!(text.contains(typed), "no {typed:?} in {text}");
        }
        let (ok, printed) = run(
            {
                let mut c = promtool();
                c.args(["check", "metrics"]);
                c
            },
            &text,
        );
        assert!(
            ok && printed.trim().is_empty(),
            "promtool check metrics: {printed}\n{text}"
        );
    }

    let (content_type, openmetrics) = scrape(&app, Some(PROMETHEUS_ACCEPT)).await;
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");
    // promtool's OpenMetrics parser needs a timestamp on every sample to write a block.
    let stamped: String = openmetrics
        .lines()
        .map(|l| {
            if l.starts_with('#') {
                format!("{l}\n")
            } else {
                format!("{l} 1700000000\n")
            }
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("metrics.om");
    std::fs::write(&input, stamped).unwrap();
    let mut cmd = promtool();
    cmd.args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&input)
        .arg(dir.path().join("blocks"));
    let (ok, printed) = run(cmd, "");
    assert!(
        ok,
        "promtool's OpenMetrics parser: {printed}\n{openmetrics}"
    );

    // The same samples either way; among them what the dashboard (ui/app.js) reads.
    let (_, text) = scrape(&app, None).await;
    assert_eq!(samples(&text), samples(&openmetrics));
    for line in [
        "delayq_jobs_pushed_total 3",
        "delayq_jobs_delivered_total 2",
        "delayq_delivery_lateness_seconds_bucket{le=\"+Inf\"} 2",
        "delayq_jobs{topic=\"a\\\"b\\\\c\",state=\"ready\"} 1",
    ] {
        assert!(samples(&text).contains(line), "no {line:?} in {text}");
    }
}
