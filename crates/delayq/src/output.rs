//! Human-readable text for the CLI verbs: a job as aligned `field: value` lines, one-line
//! summaries of transitions, the stats table, and times as RFC 3339 UTC with milliseconds.
//!
//! Pure functions from values (and the current time, passed in) to strings, so they are tested
//! without a server or a clock. `--json` output does not come through here: it is the server's
//! JSON shape, printed by `cli.rs`.

use delayq_client::{Job, JobState, Schedule, Stats, TopicSettings, TopicStats};
use std::fmt::Write as _;

/// A Unix time in ms as RFC 3339 UTC with milliseconds: `2026-01-01T00:00:00.000Z`.
pub fn format_time_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, secs_of_day) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        secs_of_day / 3600,
        secs_of_day % 3600 / 60,
        secs_of_day % 60,
        ms % 1000
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// A duration in the largest unit that divides it exactly, in the syntax `--delay` and `--ttr`
/// accept: `60s`, `3m`, `1500ms`, `2d`, `0ms`.
pub fn format_duration_ms(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    UNITS
        .iter()
        .find(|(size, _)| ms != 0 && ms.is_multiple_of(*size))
        .map(|(size, unit)| format!("{}{unit}", ms / size))
        .unwrap_or_else(|| format!("{ms}ms"))
}

/// A duration for people, to its two largest units: `1h 5m`, `14s`, `250ms`.
fn approx_duration_ms(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let units = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    let mut left = ms;
    let mut parts = Vec::new();
    for (size, unit) in units {
        if left >= size {
            parts.push(format!("{}{unit}", left / size));
            left %= size;
        } else if !parts.is_empty() {
            break; // keep the two units adjacent: "1h 5m", never "1h 5s"
        }
        if parts.len() == 2 {
            break;
        }
    }
    parts.join(" ")
}

/// A time with how far it is from `now`: `2026-01-01T00:00:00.000Z (in 1h 5m)`.
pub fn format_time_relative(ms: u64, now_ms: u64) -> String {
    let when = if ms > now_ms {
        format!("in {}", approx_duration_ms(ms - now_ms))
    } else if ms < now_ms {
        format!("{} ago", approx_duration_ms(now_ms - ms))
    } else {
        "now".to_string()
    };
    format!("{} ({when})", format_time_ms(ms))
}

/// A recurring schedule as aligned `field: value` lines, ending in a newline: its rule, its
/// job's topic, its state, its next runs and its last tick.
pub fn format_schedule(s: &Schedule, now_ms: u64) -> String {
    let rule = match (&s.cron, s.every_ms) {
        (Some(cron), _) => format!("cron {cron:?} in {}", s.tz),
        (None, Some(every)) => format!("every {}", format_duration_ms(every)),
        (None, None) => "?".to_string(),
    };
    let mut out = String::new();
    let _ = writeln!(out, "id:         {}", s.id);
    let _ = writeln!(out, "rule:       {rule}");
    let _ = writeln!(out, "topic:      {}", s.job.topic);
    let _ = writeln!(
        out,
        "state:      {}",
        if s.paused { "paused" } else { "active" }
    );
    let _ = writeln!(out, "catch-up:   {}", s.catch_up);
    let _ = writeln!(out, "overlap:    {}", s.overlap);
    if let Some(t) = s.start_at_ms {
        let _ = writeln!(out, "start at:   {}", format_time_ms(t));
    }
    if let Some(t) = s.end_at_ms {
        let _ = writeln!(out, "end at:     {}", format_time_ms(t));
    }
    let _ = writeln!(
        out,
        "last tick:  {}",
        s.last_tick_ms
            .map_or("none".to_string(), |t| format_time_relative(t, now_ms))
    );
    for (i, t) in s.next_runs_ms.iter().enumerate() {
        let label = if i == 0 { "next runs:" } else { "" };
        let _ = writeln!(out, "{label:<11} {}", format_time_relative(*t, now_ms));
    }
    out
}

/// The job's state with the time that matters for it: `delayed until ... (in 15s)`, `ready`,
/// `reserved until ... (in 60s)`, `dead`.
pub fn state_summary(job: &Job, now_ms: u64) -> String {
    match (job.state, job.reserved_until_ms) {
        (JobState::Delayed, _) => {
            format!(
                "delayed until {}",
                format_time_relative(job.run_at_ms, now_ms)
            )
        }
        (JobState::Reserved, Some(until)) => {
            format!("reserved until {}", format_time_relative(until, now_ms))
        }
        (state, _) => state.to_string(),
    }
}

/// A job as aligned `field: value` lines, ending in a newline. A multi-line body keeps its
/// lines, indented under the first.
pub fn format_job(job: &Job, now_ms: u64) -> String {
    let backoff = if job.backoff_ms.is_empty() {
        "none".to_string()
    } else {
        job.backoff_ms
            .iter()
            .map(|&ms| format_duration_ms(ms))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let max_attempts = match job.max_attempts {
        0 => "unlimited".to_string(),
        n => n.to_string(),
    };
    let reserved_until = job
        .reserved_until_ms
        .map_or_else(|| "-".to_string(), |ms| format_time_relative(ms, now_ms));
    let callback = job.callback.as_ref().map_or_else(
        || "-".to_string(),
        |c| match c.timeout_ms {
            Some(t) => format!("{} (timeout {})", c.url, format_duration_ms(t)),
            None => c.url.clone(),
        },
    );
    let rows: [(&str, String); 12] = [
        ("id", job.id.clone()),
        ("topic", job.topic.clone()),
        ("state", job.state.to_string()),
        ("run_at", format_time_relative(job.run_at_ms, now_ms)),
        ("ttr", format_duration_ms(job.ttr_ms)),
        ("priority", job.priority.to_string()),
        ("attempts", job.attempts.to_string()),
        ("max_attempts", max_attempts),
        ("backoff", backoff),
        ("reserved_until", reserved_until),
        ("callback", callback),
        ("body", job.body.clone()),
    ];
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 2;
    let mut out = String::new();
    for (key, value) in rows {
        let label = format!("{key}:");
        let mut lines = value.split('\n');
        let first = lines.next().unwrap_or_default();
        writeln!(out, "{label:<width$}{first}").unwrap();
        for line in lines {
            writeln!(out, "{:width$}{line}", "").unwrap();
        }
    }
    out
}

/// The stats as a table of topics (rows) by state (columns), with a total row when there is
/// more than one topic, then the next due time. Ends in a newline.
/// A topic's flow control on one line: `orders: paused, rate 100/s (burst 10), at most 5 in
/// flight`.
pub fn format_settings(topic: &str, s: &TopicSettings) -> String {
    let mut parts = vec![if s.paused { "paused" } else { "running" }.to_string()];
    match (s.rate_per_s, s.burst) {
        (Some(rate), Some(burst)) => parts.push(format!("rate {rate}/s (burst {burst})")),
        (Some(rate), None) => parts.push(format!("rate {rate}/s")),
        _ => parts.push("no rate limit".into()),
    }
    match s.max_in_flight {
        Some(n) => parts.push(format!("at most {n} in flight")),
        None => parts.push("no limit in flight".into()),
    }
    format!("{topic}: {}\n", parts.join(", "))
}

pub fn format_stats(stats: &Stats, now_ms: u64) -> String {
    const HEADER: [&str; 5] = ["TOPIC", "DELAYED", "READY", "RESERVED", "DEAD"];
    fn cells(name: &str, t: &TopicStats) -> [String; 5] {
        [
            name.to_string(),
            t.delayed.to_string(),
            t.ready.to_string(),
            t.reserved.to_string(),
            t.dead.to_string(),
        ]
    }
    let mut out = String::new();
    // Pull jobs by topic, then each topic's callback jobs as `<topic> (callbacks)`.
    let all: Vec<(String, &TopicStats)> = stats
        .topics
        .iter()
        .map(|(name, t)| (name.clone(), t))
        .chain(
            stats
                .callbacks
                .iter()
                .map(|(name, t)| (format!("{name} (callbacks)"), t)),
        )
        .collect();
    if all.is_empty() {
        out.push_str("no jobs\n");
    } else {
        let mut rows: Vec<[String; 5]> = vec![HEADER.map(String::from)];
        let mut total = TopicStats::default();
        for (name, t) in &all {
            rows.push(cells(name, t));
            total.delayed += t.delayed;
            total.ready += t.ready;
            total.reserved += t.reserved;
            total.dead += t.dead;
        }
        if all.len() > 1 {
            rows.push(cells("total", &total));
        }
        let mut widths = [0; 5];
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for row in &rows {
            let mut line = format!("{:<w$}", row[0], w = widths[0]);
            for (cell, w) in row[1..].iter().zip(&widths[1..]) {
                write!(line, "  {cell:>w$}").unwrap();
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    for (topic, s) in &stats.settings {
        out.push_str(&format_settings(topic, s));
    }
    match stats.next_due_ms {
        Some(ms) => writeln!(out, "next due: {}", format_time_relative(ms, now_ms)).unwrap(),
        None => out.push_str("next due: -\n"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    fn job() -> Job {
        Job {
            id: "0190f3c2-0001".into(),
            topic: "orders".into(),
            body: r#"{"order":42}"#.into(),
            state: JobState::Delayed,
            run_at_ms: NOW + 3_905_000,
            ttr_ms: 60_000,
            priority: 1024,
            max_attempts: 0,
            backoff_ms: vec![],
            attempts: 0,
            reserved_until_ms: None,
            callback: None,
        }
    }

    #[test]
    fn times_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(format_time_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_time_ms(NOW), "2026-01-01T00:00:00.000Z");
        assert_eq!(format_time_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(
            format_time_ms(1_709_251_199_999),
            "2024-02-29T23:59:59.999Z"
        );
        assert_eq!(
            format_time_ms(253_402_300_799_000),
            "9999-12-31T23:59:59.000Z"
        );
    }

    #[test]
    fn durations_print_in_the_syntax_flags_accept() {
        assert_eq!(format_duration_ms(60_000), "1m");
        assert_eq!(format_duration_ms(15_000), "15s");
        assert_eq!(format_duration_ms(1_500), "1500ms");
        assert_eq!(format_duration_ms(86_400_000), "1d");
        assert_eq!(format_duration_ms(0), "0ms");
        for ms in [0, 1, 999, 1000, 61_000, 3_600_000, 90_000_000] {
            assert_eq!(
                delayq::job::parse_duration_ms(&format_duration_ms(ms)),
                Some(ms)
            );
        }
    }

    #[test]
    fn relative_times_say_in_or_ago_with_two_units() {
        assert_eq!(
            format_time_relative(NOW + 3_905_000, NOW),
            "2026-01-01T01:05:05.000Z (in 1h 5m)"
        );
        assert_eq!(
            format_time_relative(NOW - 250, NOW),
            "2025-12-31T23:59:59.750Z (250ms ago)"
        );
        assert_eq!(
            format_time_relative(NOW, NOW),
            "2026-01-01T00:00:00.000Z (now)"
        );
        assert_eq!(approx_duration_ms(3_600_005), "1h");
        assert_eq!(approx_duration_ms(90_061_000), "1d 1h");
    }

    #[test]
    fn job_prints_as_aligned_fields() {
        assert_eq!(
            format_job(&job(), NOW),
            "\
id:             0190f3c2-0001
topic:          orders
state:          delayed
run_at:         2026-01-01T01:05:05.000Z (in 1h 5m)
ttr:            1m
priority:       1024
attempts:       0
max_attempts:   unlimited
backoff:        none
reserved_until: -
callback:       -
body:           {\"order\":42}
"
        );
    }

    #[test]
    fn a_callback_job_shows_its_url_and_timeout() {
        let mut j = job();
        j.callback = Some(delayq_client::Callback {
            url: "https://hooks.example.com/due".into(),
            timeout_ms: Some(30_000),
        });
        assert!(
            format_job(&j, NOW)
                .contains("callback:       https://hooks.example.com/due (timeout 30s)\n"),
            "{}",
            format_job(&j, NOW)
        );
    }

    #[test]
    fn reserved_job_shows_its_deadline_backoff_and_multiline_body() {
        let mut j = job();
        j.state = JobState::Reserved;
        j.reserved_until_ms = Some(NOW + 60_000);
        j.backoff_ms = vec![15_000, 180_000];
        j.max_attempts = 3;
        j.body = "line one\nline two".into();
        let text = format_job(&j, NOW);
        assert!(
            text.contains("reserved_until: 2026-01-01T00:01:00.000Z (in 1m)\n"),
            "{text}"
        );
        assert!(text.contains("backoff:        15s, 3m\n"), "{text}");
        assert!(text.contains("max_attempts:   3\n"), "{text}");
        assert!(
            text.ends_with("body:           line one\n                line two\n"),
            "{text}"
        );
        assert_eq!(
            state_summary(&j, NOW),
            "reserved until 2026-01-01T00:01:00.000Z (in 1m)"
        );
    }

    #[test]
    fn state_summary_names_the_time_that_matters() {
        assert_eq!(
            state_summary(&job(), NOW),
            "delayed until 2026-01-01T01:05:05.000Z (in 1h 5m)"
        );
        let mut j = job();
        j.state = JobState::Ready;
        assert_eq!(state_summary(&j, NOW), "ready");
        j.state = JobState::Dead;
        assert_eq!(state_summary(&j, NOW), "dead");
    }

    #[test]
    fn stats_print_as_a_table_with_totals() {
        let mut stats = Stats::default();
        stats.topics.insert(
            "orders".into(),
            TopicStats {
                delayed: 10,
                ready: 2,
                reserved: 1,
                dead: 0,
            },
        );
        stats.topics.insert(
            "mail".into(),
            TopicStats {
                delayed: 0,
                ready: 12345,
                reserved: 0,
                dead: 7,
            },
        );
        stats.next_due_ms = Some(NOW + 5_000);
        assert_eq!(
            format_stats(&stats, NOW),
            "\
TOPIC   DELAYED  READY  RESERVED  DEAD
mail          0  12345         0     7
orders       10      2         1     0
total        10  12347         1     7
next due: 2026-01-01T00:00:05.000Z (in 5s)
"
        );
    }

    #[test]
    fn empty_stats_say_so() {
        assert_eq!(
            format_stats(&Stats::default(), NOW),
            "no jobs\nnext due: -\n"
        );
    }
}
