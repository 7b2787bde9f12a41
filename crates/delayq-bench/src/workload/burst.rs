//! W4 burst: N jobs due in the same millisecond (a `run_at_ms` in the future on /v1). Reports
//! the time from that instant until the last one was delivered, and lateness percentiles. On
//! whole-second protocols the jobs carry relative delays, so their due times spread over the
//! push phase; the output says so.

use super::{Common, StopRule, consume, multi, produce, put_accounting, put_lateness};
use crate::driver::{Due, Endpoint, Protocol, now_ms};
use crate::report::RunResult;
use crate::stats::Ledger;
use std::sync::Arc;
use std::time::Duration;

/// W4's own parameters.
#[derive(Debug, Clone, clap::Args)]
pub struct Params {
    /// Jobs in the burst.
    #[arg(long, default_value_t = 100_000)]
    pub jobs: u64,
    /// How far in the future the burst is due; must exceed the push phase.
    #[arg(long, default_value_t = 30)]
    pub lead_s: u64,
}

pub async fn run(c: &Common, ep: &Arc<Endpoint>, p: &Params) -> anyhow::Result<RunResult> {
    let mut r = c.result("w4");
    r.params.insert("jobs".into(), p.jobs.into());
    r.params.insert("lead_s".into(), p.lead_s.into());
    let m = multi(c.progress);
    let ledger = Arc::new(Ledger::new(p.jobs as usize));
    let stop = StopRule::new(Duration::from_secs(p.lead_s + 3600));
    let due_at = now_ms() + p.lead_s * 1000;
    let lead_ms = p.lead_s * 1000;
    let due_of: Arc<dyn Fn(u64) -> Due + Send + Sync> = if c.protocol == Protocol::V1 {
        Arc::new(move |_| Due::RunAtMs(due_at))
    } else {
        r.notes.push(
            "whole-second relative delays: the due times spread over the push phase, \
             not one millisecond"
                .into(),
        );
        Arc::new(move |_| Due::DelayMs(lead_ms))
    };
    let consumers = {
        let (c2, ep2, l2, s2) = (c.clone(), ep.clone(), ledger.clone(), stop.clone());
        let pb = c.bar(&m, p.jobs, "deliver");
        tokio::spawn(async move { consume(&c2, &ep2, l2, s2, pb).await })
    };
    let pushed = produce(
        c,
        ep,
        super::PushPlan {
            n: p.jobs,
            id_prefix: format!("{}-", c.run_id),
            first: 0,
            id_digits: 0,
            due_of,
            rate_per_producer: None,
            batch: None,
            collect_server_ids: false,
        },
        Some(ledger.clone()),
        c.bar(&m, p.jobs, "push"),
    )
    .await?;
    let pushed_by = now_ms();
    if pushed_by > due_at {
        r.notes.push(format!(
            "push phase ended {} ms after the due time: raise --lead-s",
            pushed_by - due_at
        ));
    }
    let last_due = if c.protocol == Protocol::V1 {
        due_at
    } else {
        pushed_by + lead_ms
    };
    stop.producers_done(last_due + 1000, Duration::from_secs(c.drain_timeout_s));
    let consumed = consumers.await??;
    r.metrics.insert("jobs".into(), pushed.acked as f64);
    r.metrics.insert(
        "push_jobs_per_s".into(),
        pushed.acked as f64 / pushed.elapsed.as_secs_f64(),
    );
    let last_ms = consumed.last_delivery_us / 1000;
    r.metrics.insert(
        "deliver_all_s".into(),
        last_ms.saturating_sub(due_at) as f64 / 1000.0,
    );
    put_lateness(&mut r, &consumed.lateness);
    put_accounting(&mut r, &ledger, consumed.foreign);
    pushed.errors.report("push", &mut r);
    consumed.errors.report("consume", &mut r);
    Ok(r)
}
