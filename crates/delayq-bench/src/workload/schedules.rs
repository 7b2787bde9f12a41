//! Recurring schedules (docs/schedules.md): how fast `--count` schedules are created over /v1,
//! and how late their ticks' jobs are pushed when they all fire at once. Needs `--api v1`.
//!
//! Creation: `PUT /v1/schedules/{id}` for each of `--count` schedules (`<run id>-s<k>`, cron
//! `--cron`, every minute by default, their job template on the run's topic), `--producers` at
//! a time, each on its own connection; the result is schedules created per second.
//!
//! Firing: for each of the next `--ticks` whole minutes after the creation (each schedule
//! fires at every minute from the first after its creation on, so every one of them fires at
//! each measured tick), the bench polls `GET /v1/stats` on one connection, every `--poll-ms`
//! (2 ms), from just before the tick until the topic holds the tick's `--count` new jobs
//! that are out of `delayed` (ready, or reserved or dead: deliverable since the tick). delayq
//! pushes a tick's jobs up to 5 s ahead, delayed until the tick (docs/schedules.md), so a job
//! counts when it became deliverable, not when it was stored; a delayq that pushes them at the
//! tick (before that change) stores them ready, and the count is the same. A tick's
//! **lateness** is read from those counts: the lateness of the k-th job is the time from the
//! tick to the answer of the first poll that counted k or more of the tick's jobs (an upper
//! bound, by at most the poll interval and one poll's round trip: `poll_rtt_ms_p50` is
//! reported). p50, p99 and max are those of the k-th jobs for k = 50 %, 99 % and 100 % of
//! `--count`. A job counted before its tick would be early (`early` counts ticks where it
//! happened). After the last tick, the topic must hold exactly `--ticks × --count` jobs more
//! than its deliverable ones before the first tick: `missing` and `extra` say how far it is
//! off.
//!
//! CPU per tick: the server's CPU time (`/proc/<--server-pid>/stat`, user + system) from one
//! second before the tick until its last job was counted, which includes serving the polls;
//! with `--redis-pid` also redis-server's. `machine_idle_pct` is the share of the machine's
//! CPU time (every core, `/proc/stat`) left idle from the first tick's measurement to the last:
//! the other work on the machine shows there; `machine_steal_pct` the share the hypervisor gave
//! other guests.
//!
//! Every loop is bounded: creation by `--count`, each tick by `--tick-timeout-s`.

use super::{Common, CpuSpan, put_machine};
use crate::driver::http::V1;
use crate::driver::{Conn, Endpoint, now_ms};
use crate::probe::process_cpu_s;
use crate::report::{RunResult, median};
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, clap::Args)]
pub struct Params {
    /// Schedules to create.
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
    /// Their cron expression: it must fire at second 0 of every minute (every schedule then
    /// fires at each measured tick).
    #[arg(long, default_value = "* * * * *")]
    pub cron: String,
    /// Minute ticks to measure.
    #[arg(long, default_value_t = 3)]
    pub ticks: u32,
    /// Time between two polls of a tick's jobs: the resolution of the lateness (an
    /// unthrottled poll loop would take a share of the server's CPU from the fires).
    #[arg(long, default_value_t = 2)]
    pub poll_ms: u64,
    /// Longest wait for one tick's jobs.
    #[arg(long, default_value_t = 30)]
    pub tick_timeout_s: u64,
    /// redis-server's process, whose CPU per tick to report beside the server's.
    #[arg(long)]
    pub redis_pid: Option<u32>,
    /// Leave the schedules in place at the end (they are deleted by default).
    #[arg(long)]
    pub keep: bool,
}

const MIN_MS: u64 = 60_000;

/// Runs `op(conn, k)` for k in `0..n`, `c.producers` at a time, each on its own connection;
/// returns the time it took and how many failed (the first error is kept).
async fn each_schedule<F, Fut>(
    c: &Common,
    ep: &Arc<Endpoint>,
    n: u64,
    op: F,
) -> Result<(Duration, u64, Option<String>)>
where
    F: Fn(V1, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = (V1, Result<()>)> + Send,
{
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..c.producers {
        let Conn::V1(conn) = ep.connect().await? else {
            bail!("not a /v1 connection");
        };
        let (next, failed, first_error, op) = (
            next.clone(),
            failed.clone(),
            first_error.clone(),
            op.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut conn = conn;
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= n {
                    return;
                }
                let (back, result) = op(conn, k).await;
                conn = back;
                if let Err(e) = result {
                    failed.fetch_add(1, Ordering::Relaxed);
                    first_error
                        .lock()
                        .unwrap()
                        .get_or_insert_with(|| format!("{e:#}"));
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let error = first_error.lock().unwrap().take();
    Ok((start.elapsed(), failed.load(Ordering::Relaxed), error))
}

/// Every job of `topic` the server holds, in any state (`GET /v1/stats`).
async fn jobs_of(conn: &mut V1, topic: &str) -> Result<u64> {
    counted(conn, topic, &["delayed", "ready", "reserved", "dead"]).await
}

/// The jobs of `topic` that are deliverable or were delivered: every state but `delayed`.
async fn deliverable_of(conn: &mut V1, topic: &str) -> Result<u64> {
    counted(conn, topic, &["ready", "reserved", "dead"]).await
}

/// The jobs of `topic` in `states` (`GET /v1/stats`).
async fn counted(conn: &mut V1, topic: &str, states: &[&str]) -> Result<u64> {
    let body = conn.request("GET", "/v1/stats").await?;
    let stats: serde_json::Value = serde_json::from_slice(&body).context("/v1/stats")?;
    let counts = &stats["topics"][topic];
    Ok(states.iter().map(|s| counts[s].as_u64().unwrap_or(0)).sum())
}

async fn sleep_until_ms(t: u64) {
    let now = now_ms();
    if t > now {
        tokio::time::sleep(Duration::from_millis(t - now)).await;
    }
}

/// The polls of one tick: (ms after the tick the answer came, the tick's jobs counted).
struct TickPolls {
    samples: Vec<(i64, u64)>,
    rtts_ms: Vec<f64>,
}

impl TickPolls {
    /// When `need` of the tick's jobs were first counted (ms after the tick), if ever.
    fn reached(&self, need: u64) -> Option<i64> {
        self.samples
            .iter()
            .find(|(_, n)| *n >= need)
            .map(|(t, _)| *t)
    }
}

/// Polls from just before `tick` until `n` new jobs are counted over `base`, or the timeout.
async fn poll_tick(
    conn: &mut V1,
    topic: &str,
    tick: u64,
    base: u64,
    n: u64,
    every: Duration,
    timeout_ms: u64,
) -> Result<TickPolls> {
    let mut polls = TickPolls {
        samples: Vec::new(),
        rtts_ms: Vec::new(),
    };
    sleep_until_ms(tick.saturating_sub(5)).await;
    loop {
        let sent = Instant::now();
        let count = deliverable_of(conn, topic).await?.saturating_sub(base);
        polls.rtts_ms.push(sent.elapsed().as_secs_f64() * 1000.0);
        let at = now_ms() as i64 - tick as i64;
        polls.samples.push((at, count));
        if count >= n || at > timeout_ms as i64 {
            return Ok(polls);
        }
        tokio::time::sleep(every.saturating_sub(sent.elapsed())).await;
    }
}

pub async fn run(c: &Common, ep: &Arc<Endpoint>, p: &Params) -> Result<RunResult> {
    if c.protocol != crate::driver::Protocol::V1 {
        bail!("the schedules workload needs --api v1");
    }
    let mut r = c.result("schedules");
    r.params.insert("count".into(), p.count.into());
    r.params.insert("cron".into(), p.cron.clone().into());
    r.params.insert("ticks".into(), p.ticks.into());
    let n = p.count.max(1);
    let topic = ep.topic.clone();
    let run_id = c.run_id.clone();
    let template = json!({"topic": topic, "body": "tick", "ttr_ms": 3_600_000});
    let cron = p.cron.clone();

    let (id, body) = (run_id.clone(), template.clone());
    let put = move |mut conn: V1, k: u64| {
        let path = format!("/v1/schedules/{id}-s{k}");
        let req = json!({"cron": cron, "job": body});
        async move {
            let result = conn.request_json("PUT", &path, &req).await.map(drop);
            (conn, result)
        }
    };
    let (took, failed, error) = each_schedule(c, ep, n, put).await?;
    let created_at = now_ms();
    r.metrics.insert("created".into(), (n - failed) as f64);
    r.metrics.insert(
        "create_per_s".into(),
        (n - failed) as f64 / took.as_secs_f64(),
    );
    if let Some(e) = error {
        r.notes
            .push(format!("{failed} creations failed; first: {e}"));
    }

    let Conn::V1(mut conn) = ep.connect().await? else {
        bail!("not a /v1 connection");
    };
    // The first whole minute at least 1.5 s after the last creation: every schedule fires there.
    let first = (created_at + 1_500).div_ceil(MIN_MS) * MIN_MS;
    // The tick's jobs may be stored already (ahead, delayed): not counted in the base.
    let base = deliverable_of(&mut conn, &topic).await?;
    // Only its machine shares are read: the ticks measure the processes themselves.
    let span = CpuSpan::start(None);
    let (mut p50s, mut p99s, mut maxes, mut cpus, mut redis_cpus, mut rtts) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut early = 0;
    for i in 0..p.ticks {
        let tick = first + u64::from(i) * MIN_MS;
        sleep_until_ms(tick - 1_000).await;
        let cpu0 = c.probes.server_pid.and_then(process_cpu_s);
        let redis0 = p.redis_pid.and_then(process_cpu_s);
        let before = deliverable_of(&mut conn, &topic).await?;
        let every = Duration::from_millis(p.poll_ms);
        let timeout = p.tick_timeout_s * 1000;
        let polls = poll_tick(&mut conn, &topic, tick, before, n, every, timeout).await?;
        if polls.samples.iter().any(|(t, k)| *t < 0 && *k > 0) {
            early += 1;
        }
        let cpu1 = c.probes.server_pid.and_then(process_cpu_s);
        let redis1 = p.redis_pid.and_then(process_cpu_s);
        let at = |q: f64| polls.reached(((n as f64) * q).ceil() as u64);
        let name = format!("tick{}", i + 1);
        for (label, q, into) in [
            ("p50", 0.5, &mut p50s),
            ("p99", 0.99, &mut p99s),
            ("max", 1.0, &mut maxes),
        ] {
            match at(q) {
                Some(ms) => {
                    let ms = ms.max(0) as f64;
                    r.metrics.insert(format!("{name}_lateness_{label}_ms"), ms);
                    into.push(ms);
                }
                None => r
                    .notes
                    .push(format!("{name}: {label} of its jobs not pushed in time")),
            }
        }
        if let (Some(a), Some(b)) = (cpu0, cpu1) {
            r.metrics.insert(format!("{name}_cpu_s"), b - a);
            cpus.push(b - a);
        }
        if let (Some(a), Some(b)) = (redis0, redis1) {
            r.metrics.insert(format!("{name}_redis_cpu_s"), b - a);
            redis_cpus.push(b - a);
        }
        r.metrics
            .insert(format!("{name}_polls"), polls.samples.len() as f64);
        rtts.extend(polls.rtts_ms);
    }
    let machine = span.stop().machine;
    // Late stragglers and duplicates show after a pause.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Every job by now: the next tick's are pushed ahead only 5 s before it, a minute on.
    let end = jobs_of(&mut conn, &topic).await?;
    let want = base + u64::from(p.ticks) * n;
    r.metrics
        .insert("missing".into(), want.saturating_sub(end) as f64);
    r.metrics
        .insert("extra".into(), end.saturating_sub(want) as f64);
    r.metrics.insert("early_ticks".into(), early as f64);
    for (name, mut v) in [
        ("lateness_p50_ms_median", p50s.clone()),
        ("lateness_p99_ms_median", p99s.clone()),
        ("lateness_max_ms_median", maxes.clone()),
        ("cpu_per_tick_s_median", cpus),
        ("redis_cpu_per_tick_s_median", redis_cpus),
        ("poll_rtt_ms_p50", rtts),
    ] {
        if let Some(m) = median(&mut v) {
            r.metrics.insert(name.into(), m);
        }
    }
    if let Some(w) = p99s.iter().copied().reduce(f64::max) {
        r.metrics.insert("lateness_p99_ms_worst".into(), w);
    }
    put_machine(&mut r, machine);

    if !p.keep {
        let id = run_id.clone();
        let delete = move |mut conn: V1, k: u64| {
            let path = format!("/v1/schedules/{id}-s{k}");
            async move {
                let result = conn.request("DELETE", &path).await.map(drop);
                (conn, result)
            }
        };
        let (_, failed, error) = each_schedule(c, ep, n, delete).await?;
        if let Some(e) = error {
            r.notes
                .push(format!("{failed} deletions failed; first: {e}"));
        }
    }
    Ok(r)
}
