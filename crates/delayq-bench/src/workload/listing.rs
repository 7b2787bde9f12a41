//! Listing: the dashboard's calls (docs/api.md "Listings") timed against a server holding many
//! pending jobs: `GET /v1/topics`, a page of the topic's jobs in each state (the first page and
//! pages deep into a walk of the delayed ones), and schedules of 60 minute-steps and 168
//! hour-steps for the topic and for every topic. Needs `--api v1`.
//!
//! Setup: pushes `--pending` delayed jobs spread evenly over the next `--spread-h` hours, then
//! `--others` jobs due now, of which a tenth are reserved and a tenth buried, so every state
//! has jobs. Each call is then made `--rounds` times, one at a time on one connection; the
//! result has each call's median and worst time in milliseconds.

use super::{Common, PushPlan, multi, produce};
use crate::driver::{Conn, Due, Endpoint, now_ms};
use crate::report::RunResult;
use anyhow::{Context, Result, bail};
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone, clap::Args)]
pub struct Params {
    /// Delayed jobs to push first (0: time what the server already holds).
    #[arg(long, default_value_t = 1_000_000)]
    pub pending: u64,
    /// The delayed jobs fall due evenly over this many hours from a minute after the push.
    #[arg(long, default_value_t = 168)]
    pub spread_h: u64,
    /// Jobs due now pushed besides (a tenth of them reserved, a tenth buried).
    #[arg(long, default_value_t = 10_000)]
    pub others: u64,
    /// Times each call is made.
    #[arg(long, default_value_t = 20)]
    pub rounds: u32,
    /// Jobs per page.
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
}

const MIN_MS: u64 = 60_000;
const HOUR_MS: u64 = 3_600_000;

pub async fn run(c: &Common, ep: &Arc<Endpoint>, p: &Params) -> Result<RunResult> {
    if c.protocol != crate::driver::Protocol::V1 {
        bail!("the listing workload needs --api v1");
    }
    let mut r = c.result("listing");
    r.params.insert("pending".into(), p.pending.into());
    r.params.insert("spread_h".into(), p.spread_h.into());
    r.params.insert("others".into(), p.others.into());
    r.params.insert("rounds".into(), p.rounds.into());
    r.params.insert("limit".into(), p.limit.into());
    let m = multi(c.progress);
    let start = now_ms() + MIN_MS;
    let spread = (p.spread_h * HOUR_MS).max(1);
    let n = p.pending.max(1);
    if p.pending > 0 {
        let plan = PushPlan {
            n: p.pending,
            id_prefix: format!("{}-d-", c.run_id),
            first: 0,
            id_digits: 0,
            due_of: Arc::new(move |k| Due::RunAtMs(start + k * spread / n)),
            rate_per_producer: None,
            batch: None,
            collect_server_ids: false,
        };
        let pushed = produce(c, ep, plan, None, c.bar(&m, p.pending, "push delayed")).await?;
        r.metrics.insert("pending".into(), pushed.acked as f64);
        r.metrics.insert(
            "push_jobs_per_s".into(),
            pushed.acked as f64 / pushed.elapsed.as_secs_f64(),
        );
        pushed.errors.report("push", &mut r);
    }
    if p.others > 0 {
        let plan = PushPlan {
            n: p.others,
            id_prefix: format!("{}-r-", c.run_id),
            first: 0,
            id_digits: 0,
            due_of: Arc::new(|_| Due::DelayMs(0)),
            rate_per_producer: None,
            batch: None,
            collect_server_ids: false,
        };
        let pushed = produce(c, ep, plan, None, c.bar(&m, p.others, "push ready")).await?;
        pushed.errors.report("push", &mut r);
    }
    let Conn::V1(mut conn) = ep.connect().await? else {
        bail!("not a /v1 connection");
    };
    let mut reserved = 0;
    while reserved < p.others / 10 {
        let got = conn.reserve(100, 0).await?;
        if got.is_empty() {
            break;
        }
        reserved += got.len() as u64;
    }
    for k in 0..p.others / 10 {
        // Ids the reserve above did not take (it takes the earliest pushed).
        let id = format!("{}-r-{}", c.run_id, p.others - 1 - k);
        conn.request("POST", &format!("/v1/jobs/{id}/bury")).await?;
    }

    let topic = &ep.topic;
    let limit = p.limit;
    let from = now_ms() / MIN_MS * MIN_MS;
    let mut calls: Vec<(String, String)> = vec![("topics".into(), "/v1/topics".into())];
    for state in ["delayed", "ready", "reserved", "dead"] {
        calls.push((
            format!("page_{state}"),
            format!("/v1/topics/{topic}/jobs?state={state}&limit={limit}"),
        ));
    }
    for (name, to, step) in [
        ("schedule_60_minutes", from + HOUR_MS, MIN_MS),
        ("schedule_168_hours", from + 168 * HOUR_MS, HOUR_MS),
    ] {
        calls.push((
            format!("topic_{name}"),
            format!("/v1/topics/{topic}/schedule?from={from}&to={to}&step={step}"),
        ));
        calls.push((
            format!("all_{name}"),
            format!("/v1/schedule?from={from}&to={to}&step={step}"),
        ));
    }
    for (name, path) in &calls {
        let mut times = Vec::new();
        for _ in 0..p.rounds.max(1) {
            let t = Instant::now();
            conn.request("GET", path).await.context(name.clone())?;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        record(&mut r, name, times);
    }
    // A walk over the delayed pages: each page after the first, from a cursor.
    let mut times = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..p.rounds.max(1) {
        let mut path = format!("/v1/topics/{topic}/jobs?state=delayed&limit={limit}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let t = Instant::now();
        let body = conn.request("GET", &path).await?;
        if cursor.is_some() {
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let page: serde_json::Value = serde_json::from_slice(&body)?;
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    record(&mut r, "page_delayed_walk", times);
    Ok(r)
}

/// A call's median and worst time.
fn record(r: &mut RunResult, name: &str, mut times: Vec<f64>) {
    if times.is_empty() {
        return;
    }
    times.sort_by(f64::total_cmp);
    r.metrics
        .insert(format!("{name}_p50_ms"), times[times.len() / 2]);
    r.metrics
        .insert(format!("{name}_max_ms"), times[times.len() - 1]);
}
