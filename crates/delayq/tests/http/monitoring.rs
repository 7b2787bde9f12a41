//! The monitoring files shipped in monitoring/ (docs/operations.md, "What to alert on"): the
//! Prometheus alert rules pass `promtool check rules` and their unit tests (`promtool test
//! rules`), and every query of the rules and of the Grafana dashboard is valid PromQL over
//! metrics delayq has (those docs/metrics.md lists, which `http_metrics.rs` checks are served).

use crate::metrics_format::promtool;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn monitoring() -> PathBuf {
    repo().join("monitoring")
}

/// Runs promtool with `args` in `dir`; panics with what it printed unless it succeeds.
fn promtool_ok(dir: &Path, args: &[&str]) -> String {
    let out = promtool().args(args).current_dir(dir).output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}: {printed}");
    printed
}

/// Every `delayq_*` metric name in `text`, without a histogram's series suffix.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("delayq_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        names.insert(base.to_string());
        rest = &tail[end..];
    }
    names
}

/// The metrics docs/metrics.md documents.
fn documented_metrics() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    let names = metric_names(&doc);
    assert!(names.len() > 30, "{names:?}");
    names
}

/// Every value of an `expr` key in the dashboard, and its variables' queries, with Grafana's
/// variables replaced by what they stand for.
fn dashboard_queries() -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                        _ => walk(value, out),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let text = std::fs::read_to_string(monitoring().join("delayq-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut queries = Vec::new();
    walk(&dashboard["panels"], &mut queries);
    assert!(queries.len() >= 20, "{queries:?}");
    queries
        .iter()
        .map(|q| {
            q.replace("$__rate_interval", "5m")
                .replace("$instance", ".*")
        })
        .collect()
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let printed = promtool_ok(&monitoring(), &["check", "rules", "delayq-alerts.yml"]);
    assert!(printed.contains("SUCCESS"), "{printed}");
    let printed = promtool_ok(&monitoring(), &["test", "rules", "delayq-alerts.test.yml"]);
    assert!(printed.contains("SUCCESS"), "{printed}");
}

#[test]
fn alert_rules_cover_lateness_dead_jobs_store_errors_readiness_and_callbacks() {
    let rules = std::fs::read_to_string(monitoring().join("delayq-alerts.yml")).unwrap();
    for alert in [
        "DelayqJobsLate",
        "DelayqDeadJobsGrowing",
        "DelayqStoreErrors",
        "DelayqNotReady",
        "DelayqInstanceDown",
        "DelayqCallbacksFailing",
    ] {
        assert!(rules.contains(&format!("- alert: {alert}\n")), "{alert}");
    }
    let undocumented: Vec<_> = metric_names(&rules)
        .difference(&documented_metrics())
        .cloned()
        .collect();
    assert!(
        undocumented.is_empty(),
        "not in docs/metrics.md: {undocumented:?}"
    );
}

#[test]
fn dashboard_queries_are_valid_promql_over_documented_metrics() {
    let queries = dashboard_queries();
    let queried: BTreeSet<String> = queries.iter().flat_map(|q| metric_names(q)).collect();
    let documented = documented_metrics();
    let undocumented: Vec<_> = queried.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "not in docs/metrics.md: {undocumented:?}"
    );
    // promtool parses PromQL only inside rules: each query becomes a recording rule.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        let expr = serde_json::to_string(q).unwrap();
        rules.push_str(&format!(
            "      - record: dashboard:query{i}\n        expr: {expr}\n"
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dashboard.yml"), &rules).unwrap();
    let printed = promtool_ok(dir.path(), &["check", "rules", "dashboard.yml"]);
    assert!(printed.contains("SUCCESS"), "{printed}\n{rules}");
}
