//! W1 lifecycle: N jobs with delays uniform in [0, D] s, pushed by P producers while C consumers
//! pop and finish them. Reports push rate, total time, end-to-end rate, lateness percentiles,
//! early deliveries, lost jobs and duplicates.

use super::{Common, CpuSpan, StopRule, consume, multi, produce, put_accounting, put_lateness};
use crate::driver::{Due, Endpoint, now_ms, now_us};
use crate::report::RunResult;
use crate::stats::Ledger;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// W1's own parameters.
#[derive(Debug, Clone, clap::Args)]
pub struct Params {
    /// Jobs to push.
    #[arg(long, default_value_t = 50_000)]
    pub jobs: u64,
    /// Delays are uniform in [0, max-delay-s] seconds (whole seconds on whole-second
    /// protocols, milliseconds on /v1).
    #[arg(long, default_value_t = 3)]
    pub max_delay_s: u64,
}

pub async fn run(c: &Common, ep: &Arc<Endpoint>, p: &Params) -> anyhow::Result<RunResult> {
    let mut r = c.result("w1");
    r.params.insert("jobs".into(), p.jobs.into());
    r.params.insert("max_delay_s".into(), p.max_delay_s.into());
    r.params
        .insert("drain_timeout_s".into(), c.drain_timeout_s.into());

    let ledger = Arc::new(Ledger::new(p.jobs as usize));
    let stop = StopRule::new(Duration::from_secs(3600));
    let m = multi(c.progress);
    let push_bar = c.bar(&m, p.jobs, "push");
    let pop_bar = c.bar(&m, p.jobs, "deliver");

    let whole = c.protocol.whole_second_delays();
    let max_delay_ms = p.max_delay_s * 1000;
    let due_of: Arc<dyn Fn(u64) -> Due + Send + Sync> = Arc::new(move |_| {
        if whole {
            Due::DelayMs(fastrand::u64(0..=max_delay_ms / 1000) * 1000)
        } else {
            Due::DelayMs(fastrand::u64(0..=max_delay_ms))
        }
    });
    let plan = super::PushPlan {
        n: p.jobs,
        id_prefix: format!("{}-", c.run_id),
        first: 0,
        id_digits: 0,
        due_of,
        rate_per_producer: None,
        batch: None,
        collect_server_ids: false,
    };

    let cpu = CpuSpan::start(c.probes.server_pid);
    let start_us = now_us();
    let start = Instant::now();
    let consumers = {
        let (c2, ep2, l2, s2) = (c.clone(), ep.clone(), ledger.clone(), stop.clone());
        tokio::spawn(async move { consume(&c2, &ep2, l2, s2, pop_bar).await })
    };
    let pushed = produce(c, ep, plan, Some(ledger.clone()), push_bar).await?;
    stop.producers_done(
        now_ms() + max_delay_ms + 1000,
        Duration::from_secs(c.drain_timeout_s),
    );
    let consumed = consumers.await??;
    let wall = start.elapsed().as_secs_f64();

    let total_s = if consumed.last_delivery_us > start_us {
        (consumed.last_delivery_us - start_us) as f64 / 1e6
    } else {
        wall
    };
    let delivered = ledger
        .delivered_unique
        .load(std::sync::atomic::Ordering::Relaxed);
    r.metrics.insert(
        "push_jobs_per_s".into(),
        pushed.acked as f64 / pushed.elapsed.as_secs_f64(),
    );
    r.metrics
        .insert("push_s".into(), pushed.elapsed.as_secs_f64());
    r.metrics.insert("total_s".into(), total_s);
    r.metrics.insert(
        "e2e_jobs_per_s".into(),
        delivered as f64 / total_s.max(1e-9),
    );
    put_lateness(&mut r, &consumed.lateness);
    put_accounting(&mut r, &ledger, consumed.foreign);
    cpu.stop().put(&mut r);
    pushed.errors.report("push", &mut r);
    consumed.errors.report("consume", &mut r);
    Ok(r)
}
