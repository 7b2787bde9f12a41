//! Recurring schedules across the 2027 daylight-saving changes of America/New_York,
//! Europe/Berlin and Australia/Sydney, as a user sees them (`next_runs_ms` of
//! `GET /v1/schedules/{id}`), checked against an independent implementation of EventBridge
//! Scheduler's rules: Python's zoneinfo (the tz database of the machine) walking the wall clock
//! minute by minute. A wall clock time that does not exist that day does not fire; one that
//! happens twice fires once, at its first occurrence (`fold=0`).

use crate::support;
use axum::http::{Method, StatusCode};
use serde_json::json;
use support::app::TestApp;
use support::backends::Backend;

/// The reference: the first `n` instants (Unix ms) at or after `start_ms` whose wall clock time
/// in `zone` has its minute in `minutes` and its hour in `hours`.
const REFERENCE: &str = r#"
import json, sys
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

zone, start_ms, n, minutes, hours = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]), json.loads(sys.argv[5])
z = ZoneInfo(zone)

def place(wall):
    first = wall.replace(tzinfo=z, fold=0)
    utc = first.astimezone(timezone.utc)
    if utc.astimezone(z).replace(tzinfo=None) != wall:
        return None  # skipped by the clocks going forward
    return int(utc.timestamp()) * 1000  # fold=0: the first occurrence

start = datetime.fromtimestamp(start_ms / 1000, timezone.utc)
wall = start.astimezone(z).replace(tzinfo=None, second=0, microsecond=0) - timedelta(hours=3)
out = []
while len(out) < n:
    if wall.minute in minutes and wall.hour in hours:
        t = place(wall)
        if t is not None and t >= start_ms and (not out or t > out[-1]):
            out.append(t)
    wall += timedelta(minutes=1)
print(json.dumps(out))
"#;

fn reference(zone: &str, start_ms: u64, minutes: &[u32], hours: &[u32]) -> Vec<u64> {
    let python = support::python::with("zoneinfo");
    let out = std::process::Command::new(python)
        .args([
            "-c",
            REFERENCE,
            zone,
            &start_ms.to_string(),
            "10",
            &json!(minutes).to_string(),
            &json!(hours).to_string(),
        ])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

const HOUR: u64 = 3_600_000;
const DAY: u64 = 24 * HOUR;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_runs_across_the_2027_transitions_match_python_zoneinfo() {
    let b = Backend::memory().await;
    let app = TestApp::new(&b);
    // Each zone's two 2027 transitions, as UTC instants.
    let transitions = [
        (
            "America/New_York",
            [1_805_007_600_000u64, 1_825_567_200_000],
        ),
        ("Europe/Berlin", [1_806_195_600_000, 1_824_944_400_000]),
        ("Australia/Sydney", [1_806_768_000_000, 1_822_492_800_000]),
    ];
    let all_hours: Vec<u32> = (0..24).collect();
    let mut checked = 0;
    for (zone, instants) in transitions {
        for at in instants {
            let cases: [(&str, u64, Vec<u32>, Vec<u32>); 4] = [
                // Daily at 02:30 and 01:30: a skipped or repeated time in one of the zones.
                ("30 2 * * *", at - 3 * DAY, vec![30], vec![2]),
                ("30 1 * * *", at - 3 * DAY, vec![30], vec![1]),
                // Every 30 minutes through the change.
                (
                    "*/30 * * * *",
                    at - 2 * HOUR,
                    vec![0, 30],
                    all_hours.clone(),
                ),
                // Every 20 minutes of the hours around it, given as a list and a range.
                (
                    "0,20,40 0-3 * * *",
                    at - 2 * HOUR,
                    vec![0, 20, 40],
                    vec![0, 1, 2, 3],
                ),
            ];
            for (i, (cron, start, minutes, hours)) in cases.into_iter().enumerate() {
                let id = format!("{}-{at}-{i}", zone.replace('/', "-"));
                let r = app
                    .json(
                        Method::PUT,
                        &format!("/v1/schedules/{id}"),
                        json!({"cron": cron, "tz": zone, "start_at_ms": start, "job": {"topic": "dst"}}),
                    )
                    .await;
                assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
                let got: Vec<u64> = serde_json::from_value(r.json["next_runs_ms"].clone()).unwrap();
                let want = reference(zone, start, &minutes, &hours);
                assert_eq!(got, want, "{zone} {cron} from {start}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 24);
}
