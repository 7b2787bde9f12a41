//! Results and how they are shown: the JSON record of one run (the shape the Node BullMQ driver
//! prints too), the table of one run, and the comparison table (medians of several runs per
//! system, ratios against a baseline). Pure formatting: nothing here measures or does I/O.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One run of one workload against one system. `--json` prints exactly this, one line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// `w1`, `w2`, `w3`, `w4` or `callback-<shape>` (`burst`, `lifecycle`, `steady`).
    pub workload: String,
    /// Row name in comparison tables, e.g. `delayq-redis`, `beanstalkd-binlog`.
    pub label: String,
    /// `delayq`, `beanstalkd` or `bullmq`.
    pub target: String,
    /// Protocol used: `compat`, `v1`, `beanstalk`, `bullmq`.
    pub api: String,
    /// The workload's parameters, printed so a number is never read without them.
    pub params: BTreeMap<String, serde_json::Value>,
    /// Flat metrics; units are in the names (`_ms`, `_s`, `_per_s`, `_bytes`).
    pub metrics: BTreeMap<String, f64>,
    /// Caveats that limit the numbers (whole-second delays, missing measurements).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Column order of each workload's tables; metrics not listed follow in name order.
fn column_order(workload: &str) -> &'static [&'static str] {
    match workload {
        "w1" => &[
            "push_jobs_per_s",
            "e2e_jobs_per_s",
            "total_s",
            "lateness_p50_ms",
            "lateness_p99_ms",
            "lateness_p999_ms",
            "lateness_max_ms",
            "early",
            "lost",
            "duplicates",
            "bench_cpu_pct",
            "server_cpu_pct",
            "bench_cpu_wait_pct",
            "server_cpu_wait_pct",
            "machine_idle_pct",
            "machine_steal_pct",
            "machine_busiest_core_pct",
        ],
        "w2" => &[
            "pending",
            "push_jobs_per_s",
            "redis_bytes_per_job",
            "rss_bytes_per_job",
            "data_dir_bytes_per_job",
            "cleanup_jobs_per_s",
        ],
        "w3" => &[
            "backlog",
            "fired",
            "fire_rate_per_s",
            "lateness_p50_ms",
            "lateness_p99_ms",
            "lateness_p999_ms",
            "lateness_max_ms",
            "early",
            "lost",
            "duplicates",
            "bench_cpu_pct",
            "server_cpu_pct",
            "bench_cpu_wait_pct",
            "server_cpu_wait_pct",
            "machine_idle_pct",
            "machine_steal_pct",
            "machine_busiest_core_pct",
        ],
        "w4" => &[
            "jobs",
            "deliver_all_s",
            "lateness_p50_ms",
            "lateness_p99_ms",
            "lateness_p999_ms",
            "lateness_max_ms",
            "early",
            "lost",
            "duplicates",
        ],
        w if w.starts_with("callback") => &[
            "jobs",
            "callbacks_per_s",
            "call_all_s",
            "total_s",
            "lateness_p50_ms",
            "lateness_p99_ms",
            "lateness_p999_ms",
            "lateness_max_ms",
            "early",
            "lost",
            "duplicates",
            "retried_calls",
        ],
        _ => &[],
    }
}

/// Counts and shares: shown without a ratio (a ratio of lost jobs or CPU shares misleads).
fn ratio_less(metric: &str) -> bool {
    matches!(
        metric,
        "early"
            | "lost"
            | "duplicates"
            | "retried_calls"
            | "pending"
            | "jobs"
            | "backlog"
            | "fired"
    ) || metric.ends_with("_pct")
}

/// Metrics in display order for `workload`, out of those present in `present`.
fn ordered_metrics<'a>(workload: &str, present: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut rest: Vec<String> = present.cloned().collect();
    rest.sort();
    rest.dedup();
    let mut out: Vec<String> = column_order(workload)
        .iter()
        .filter(|m| rest.iter().any(|r| r == *m))
        .map(|m| m.to_string())
        .collect();
    for r in rest {
        if !out.contains(&r) {
            out.push(r);
        }
    }
    out
}

/// A number for people: thousands separators from 100 up, two decimals below, three below 1.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    if a >= 100.0 {
        let n = v.round() as i64;
        let digits = n.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        if n < 0 { format!("-{out}") } else { out }
    } else if a == 0.0 {
        "0".into()
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A ratio with enough digits to tell small ones apart: `12.3x`, `0.75x`, `0.0012x`.
pub fn fmt_ratio(r: f64) -> String {
    let a = r.abs();
    if a >= 10.0 {
        format!("{r:.1}x")
    } else if a >= 0.1 || a == 0.0 {
        format!("{r:.2}x")
    } else {
        format!("{r:.2e}x")
    }
}

/// A Markdown table with the first column left-aligned and the others right-aligned; it reads
/// in a terminal and pastes into docs unchanged.
pub fn table(header: &[String], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(cols) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::from("|");
        for (i, c) in cells.iter().enumerate().take(cols) {
            let pad = w[i] - c.chars().count();
            if i == 0 {
                s.push_str(&format!(" {c}{} |", " ".repeat(pad)));
            } else {
                s.push_str(&format!(" {}{c} |", " ".repeat(pad)));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(header);
    out.push('|');
    for (i, width) in w.iter().enumerate() {
        if i == 0 {
            out.push_str(&format!(":{}|", "-".repeat(width + 1)));
        } else {
            out.push_str(&format!("{}:|", "-".repeat(width + 1)));
        }
    }
    out.push('\n');
    for r in rows {
        out.push_str(&line(r));
    }
    out
}

/// The table of one run: its parameters, then one row per metric.
pub fn single_run(r: &RunResult) -> String {
    let mut out = format!(
        "{} {} (target {}, api {})\nparameters: {}\n",
        r.workload,
        r.label,
        r.target,
        r.api,
        r.params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let rows: Vec<Vec<String>> = ordered_metrics(&r.workload, r.metrics.keys())
        .into_iter()
        .map(|m| vec![m.clone(), fmt_num(r.metrics[&m])])
        .collect();
    out.push_str(&table(&["metric".into(), "value".into()], &rows));
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

/// Median of the values (mean of the middle two for an even count); `None` when empty.
pub fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

/// Comparison tables, one per workload: a row per label with the median of each metric over
/// its runs and, when `baseline` has a row, the ratio `value / baseline` in parentheses.
pub fn comparison(results: &[RunResult], baseline: &str) -> String {
    let mut workloads: Vec<&str> = results.iter().map(|r| r.workload.as_str()).collect();
    workloads.sort();
    workloads.dedup();
    let mut out = String::new();
    for w in workloads {
        let runs: Vec<&RunResult> = results.iter().filter(|r| r.workload == w).collect();
        let mut labels: Vec<&str> = Vec::new();
        for r in &runs {
            if !labels.contains(&r.label.as_str()) {
                labels.push(&r.label);
            }
        }
        // Baseline first, then in order of appearance.
        labels.sort_by_key(|l| *l != baseline);
        // The workload's headline columns only; every metric is in the JSON and single-run tables.
        let metrics: Vec<String> = ordered_metrics(w, runs.iter().flat_map(|r| r.metrics.keys()))
            .into_iter()
            .filter(|m| column_order(w).contains(&m.as_str()))
            .collect();
        let med = |label: &str, m: &str| {
            let mut v: Vec<f64> = runs
                .iter()
                .filter(|r| r.label == label)
                .filter_map(|r| r.metrics.get(m).copied())
                .collect();
            median(&mut v)
        };
        let mut header = vec![format!("{w} (median of runs)"), "runs".into()];
        header.extend(metrics.iter().cloned());
        let mut rows = Vec::new();
        for l in &labels {
            let n = runs.iter().filter(|r| r.label == *l).count();
            let mut row = vec![l.to_string(), n.to_string()];
            for m in &metrics {
                let cell = match (med(l, m), med(baseline, m)) {
                    (None, _) => "-".to_string(),
                    (Some(v), Some(b)) if *l != baseline && b != 0.0 && !ratio_less(m) => {
                        format!("{} ({})", fmt_num(v), fmt_ratio(v / b))
                    }
                    (Some(v), _) => fmt_num(v),
                };
                row.push(cell);
            }
            rows.push(row);
        }
        out.push_str(&table(&header, &rows));
        let params: Vec<String> = labels
            .iter()
            .filter_map(|l| runs.iter().find(|r| r.label == *l))
            .map(|r| {
                format!(
                    "- {}: {}",
                    r.label,
                    r.params
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            })
            .collect();
        if labels.contains(&baseline) {
            out.push_str(&format!("\nratios are value / {baseline}"));
        }
        out.push_str(&format!("\nparameters:\n{}\n", params.join("\n")));
        let mut notes: Vec<String> = runs
            .iter()
            .flat_map(|r| r.notes.iter().map(move |n| format!("- {}: {n}", r.label)))
            .collect();
        notes.sort();
        notes.dedup();
        if !notes.is_empty() {
            out.push_str(&format!("notes:\n{}\n", notes.join("\n")));
        }
        out.push('\n');
    }
    out
}

/// Reads run results from text: one JSON object per line; other lines (logs) are skipped.
pub fn parse_results(text: &str) -> Vec<RunResult> {
    text.lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(label: &str, push: f64, p99: f64) -> RunResult {
        RunResult {
            workload: "w1".into(),
            label: label.into(),
            target: "t".into(),
            api: "a".into(),
            params: [("n".to_string(), serde_json::json!(10))].into(),
            metrics: [
                ("push_jobs_per_s".to_string(), push),
                ("lateness_p99_ms".to_string(), p99),
            ]
            .into(),
            notes: vec![],
        }
    }

    #[test]
    fn numbers_get_separators_and_sensible_decimals() {
        assert_eq!(fmt_num(50_000.0), "50,000");
        assert_eq!(fmt_num(1_234_567.4), "1,234,567");
        assert_eq!(fmt_num(-1234.0), "-1,234");
        assert_eq!(fmt_num(100.0), "100");
        assert_eq!(fmt_num(12.345), "12.35");
        assert_eq!(fmt_num(0.1234), "0.123");
        assert_eq!(fmt_num(0.0), "0");
        assert_eq!(fmt_num(f64::NAN), "-");
    }

    #[test]
    fn ratios_keep_small_values_readable() {
        assert_eq!(fmt_ratio(14.07), "14.1x");
        assert_eq!(fmt_ratio(0.75), "0.75x");
        assert_eq!(fmt_ratio(0.000116), "1.16e-4x");
        assert_eq!(fmt_ratio(0.0), "0.00x");
    }

    #[test]
    fn table_aligns_columns() {
        let t = table(
            &["name".into(), "v".into()],
            &[
                vec!["a".into(), "1".into()],
                vec!["bbb".into(), "22".into()],
            ],
        );
        assert_eq!(
            t,
            "| name |  v |\n|:-----|---:|\n| a    |  1 |\n| bbb  | 22 |\n"
        );
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }

    #[test]
    fn comparison_puts_baseline_first_with_ratios_on_other_rows() {
        let results = vec![
            run("peer", 100.0, 4.0),
            run("delayq", 200.0, 2.0),
            run("delayq", 400.0, 2.0),
            run("delayq", 300.0, 2.0),
        ];
        let t = comparison(&results, "delayq");
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("push_jobs_per_s"), "{t}");
        assert!(lines[0].find("push_jobs_per_s") < lines[0].find("lateness_p99_ms"));
        assert!(lines[2].starts_with("| delayq"), "{t}");
        assert!(lines[2].contains(" 3 "), "run count: {t}");
        assert!(lines[2].contains("300"), "median: {t}");
        assert!(lines[3].contains("100 (0.33x)"), "{t}");
        assert!(lines[3].contains("4.00 (2.00x)"), "{t}");
        assert!(t.contains("ratios are value / delayq"), "{t}");
    }

    #[test]
    fn a_comparison_without_its_baseline_claims_no_ratios() {
        let results = vec![run("peer", 100.0, 4.0), run("other", 200.0, 2.0)];
        let t = comparison(&results, "delayq");
        assert!(!t.contains("ratios are"), "{t}");
        assert!(!t.contains("x)"), "no ratio in any cell: {t}");
        assert!(t.contains("parameters:"), "{t}");
    }

    #[test]
    fn results_are_read_from_json_lines_among_logs() {
        let r = run("x", 1.0, 1.0);
        let text = format!("starting\n{}\ndone\n", serde_json::to_string(&r).unwrap());
        assert_eq!(parse_results(&text), vec![r]);
    }
}
