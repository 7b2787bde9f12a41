//! W3 steady fire with a large backlog: with M jobs pending far in the future on the same
//! topic, a paced stream of jobs (R per second for T seconds, each due a few seconds after its
//! push) falls due; its lateness percentiles must not grow with M. The backlog is deleted at
//! the end.

use super::{
    Common, CpuSpan, Errors, StopRule, cleanup, consume, multi, produce, put_accounting,
    put_lateness,
};
use crate::driver::{Due, Endpoint, now_ms};
use crate::report::RunResult;
use crate::stats::Ledger;
use std::sync::Arc;
use std::time::Duration;

/// W3's own parameters.
#[derive(Debug, Clone, clap::Args)]
pub struct Params {
    /// Jobs pending far in the future while the stream runs (0: no backlog).
    #[arg(long, default_value_t = 1_000_000)]
    pub backlog: u64,
    /// Delay of the backlog jobs.
    #[arg(long, default_value_t = 3600)]
    pub backlog_delay_s: u64,
    /// Jobs per request while filling the backlog [default: --batch]. The backlog is set-up,
    /// not what W3 measures: `--batch 1 --backlog-batch 100` streams one job per request over
    /// a backlog of millions filled in minutes.
    #[arg(long)]
    pub backlog_batch: Option<usize>,
    /// Jobs per second in the stream.
    #[arg(long, default_value_t = 2000)]
    pub rate: u64,
    /// How long the stream runs.
    #[arg(long, default_value_t = 30)]
    pub duration_s: u64,
    /// Delay of each streamed job.
    #[arg(long, default_value_t = 2)]
    pub fire_delay_s: u64,
}

pub async fn run(c: &Common, ep: &Arc<Endpoint>, p: &Params) -> anyhow::Result<RunResult> {
    let mut r = c.result("w3");
    for (k, v) in [
        ("backlog", p.backlog),
        ("backlog_delay_s", p.backlog_delay_s),
        ("backlog_batch", p.backlog_batch.unwrap_or(c.batch) as u64),
        ("rate", p.rate),
        ("duration_s", p.duration_s),
        ("fire_delay_s", p.fire_delay_s),
    ] {
        r.params.insert(k.into(), v.into());
    }
    let m = multi(c.progress);

    // Backlog: ids "<run>-b<seq>", same topic, due in an hour.
    let backlog_delay_ms = p.backlog_delay_s * 1000;
    let backlog = produce(
        c,
        ep,
        super::PushPlan {
            n: p.backlog,
            id_prefix: format!("{}-b", c.run_id),
            first: 0,
            id_digits: 0,
            due_of: Arc::new(move |_| Due::DelayMs(backlog_delay_ms)),
            rate_per_producer: None,
            collect_server_ids: true,
            batch: p.backlog_batch,
        },
        None,
        c.bar(&m, p.backlog, "backlog"),
    )
    .await?;
    r.metrics.insert("backlog".into(), backlog.acked as f64);
    backlog.errors.report("backlog_push", &mut r);

    // The stream.
    let n = p.rate * p.duration_s;
    let ledger = Arc::new(Ledger::new(n as usize));
    let stop = StopRule::new(Duration::from_secs(p.duration_s + p.fire_delay_s + 3600));
    // From the stream's first push to its last delivery: the backlog's filling is not W3.
    let cpu = CpuSpan::start(c.probes.server_pid);
    let consumers = {
        let (c2, ep2, l2, s2) = (c.clone(), ep.clone(), ledger.clone(), stop.clone());
        let pb = c.bar(&m, n, "deliver");
        tokio::spawn(async move { consume(&c2, &ep2, l2, s2, pb).await })
    };
    let fire_delay_ms = p.fire_delay_s * 1000;
    let stream = produce(
        c,
        ep,
        super::PushPlan {
            n,
            id_prefix: format!("{}-", c.run_id),
            first: 0,
            id_digits: 0,
            due_of: Arc::new(move |_| Due::DelayMs(fire_delay_ms)),
            rate_per_producer: Some(p.rate as f64 / c.producers.max(1) as f64),
            collect_server_ids: false,
            batch: None,
        },
        Some(ledger.clone()),
        c.bar(&m, n, "stream"),
    )
    .await?;
    stop.producers_done(
        now_ms() + fire_delay_ms + 1000,
        Duration::from_secs(c.drain_timeout_s),
    );
    let consumed = consumers.await??;
    cpu.stop().put(&mut r);
    r.metrics.insert("fired".into(), stream.acked as f64);
    r.metrics.insert(
        "fire_rate_per_s".into(),
        stream.acked as f64 / stream.elapsed.as_secs_f64(),
    );
    r.metrics.insert(
        "producer_max_lag_ms".into(),
        stream.max_lag.as_secs_f64() * 1000.0,
    );
    put_lateness(&mut r, &consumed.lateness);
    put_accounting(&mut r, &ledger, consumed.foreign);
    stream.errors.report("push", &mut r);
    consumed.errors.report("consume", &mut r);

    if p.backlog > 0 {
        let handles: Vec<String> = if backlog.server_ids.is_empty() {
            (0..p.backlog)
                .map(|s| format!("{}-b{s}", c.run_id))
                .collect()
        } else {
            backlog.server_ids
        };
        let errors = Arc::new(Errors::default());
        let k = handles.len() as u64;
        let (deleted, elapsed, _) =
            cleanup(c, ep, handles, errors.clone(), c.bar(&m, k, "delete")).await?;
        r.metrics.insert(
            "cleanup_jobs_per_s".into(),
            deleted as f64 / elapsed.as_secs_f64(),
        );
        errors.report("cleanup", &mut r);
    }
    Ok(r)
}
