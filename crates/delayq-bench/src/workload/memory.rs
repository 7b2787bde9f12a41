//! W2 memory: M pending jobs due in an hour with small bodies; the footprint each pending job
//! costs (Redis `used_memory`, server RSS, data-dir size: whichever probes were given), then a
//! cleanup that deletes them all and how fast it went.

use super::{Common, Errors, cleanup, multi, produce};
use crate::driver::{Due, Endpoint};
use crate::probe::Footprint;
use crate::report::RunResult;
use std::sync::Arc;
use std::time::Duration;

/// W2's own parameters.
#[derive(Debug, Clone, clap::Args)]
pub struct Params {
    /// Pending jobs to push (the comparison uses 1,000,000; 10,000,000 with its flag).
    #[arg(long, default_value_t = 1_000_000)]
    pub pending: u64,
    /// Their delay, far beyond the run.
    #[arg(long, default_value_t = 3600)]
    pub delay_s: u64,
    /// Leave the jobs in place (skips the cleanup phase).
    #[arg(long)]
    pub no_cleanup: bool,
}

fn per_job(r: &mut RunResult, name: &str, before: Option<u64>, after: Option<u64>, n: u64) {
    if let (Some(b), Some(a)) = (before, after) {
        r.metrics.insert(
            format!("{name}_bytes_per_job"),
            (a as f64 - b as f64) / n.max(1) as f64,
        );
        r.metrics
            .insert(format!("{name}_bytes_after_push"), a as f64);
    }
}

pub async fn run(c: &Common, ep: &Arc<Endpoint>, p: &Params) -> anyhow::Result<RunResult> {
    let mut r = c.result("w2");
    r.params.insert("pending".into(), p.pending.into());
    r.params.insert("delay_s".into(), p.delay_s.into());
    let before: Footprint = c.probes.read().await?;
    let m = multi(c.progress);
    let delay_ms = p.delay_s * 1000;
    let plan = super::PushPlan {
        n: p.pending,
        id_prefix: format!("{}-", c.run_id),
        due_of: Arc::new(move |_| Due::DelayMs(delay_ms)),
        rate_per_producer: None,
        batch: None,
        collect_server_ids: !p.no_cleanup,
    };
    let pushed = produce(c, ep, plan, None, c.bar(&m, p.pending, "push")).await?;
    r.metrics.insert("pending".into(), pushed.acked as f64);
    r.metrics.insert(
        "push_jobs_per_s".into(),
        pushed.acked as f64 / pushed.elapsed.as_secs_f64(),
    );
    pushed.errors.report("push", &mut r);
    // Let background work (timer bookkeeping, allocator) settle before reading.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after: Footprint = c.probes.read().await?;
    per_job(
        &mut r,
        "redis",
        before.redis_bytes,
        after.redis_bytes,
        pushed.acked,
    );
    per_job(
        &mut r,
        "rss",
        before.rss_bytes,
        after.rss_bytes,
        pushed.acked,
    );
    per_job(
        &mut r,
        "data_dir",
        before.data_dir_bytes,
        after.data_dir_bytes,
        pushed.acked,
    );
    if before.redis_bytes.is_none() && before.rss_bytes.is_none() && before.data_dir_bytes.is_none()
    {
        r.notes
            .push("no probe given (--redis-url, --server-pid, --data-dir): no footprint".into());
    }
    if p.no_cleanup {
        r.notes.push("cleanup skipped (--no-cleanup)".into());
        return Ok(r);
    }
    let handles: Vec<String> = if pushed.server_ids.is_empty() {
        (0..p.pending).map(|s| c.id(s)).collect()
    } else {
        pushed.server_ids
    };
    let errors = Arc::new(Errors::default());
    let n = handles.len() as u64;
    let (deleted, elapsed, batch_path) =
        cleanup(c, ep, handles, errors.clone(), c.bar(&m, n, "delete")).await?;
    r.metrics.insert("deleted".into(), deleted as f64);
    r.metrics.insert(
        "cleanup_jobs_per_s".into(),
        deleted as f64 / elapsed.as_secs_f64(),
    );
    errors.report("cleanup", &mut r);
    r.notes.push(
        match (c.protocol, batch_path) {
            (_, Some(true)) => "cleanup: POST /v1/finish with batches of ids",
            (_, Some(false)) => "cleanup: DELETE /v1/jobs/{id} per id (batch finish refused)",
            (crate::driver::Protocol::Beanstalkd, _) => "cleanup: pipelined delete <id>",
            _ => "cleanup: /delete per id",
        }
        .into(),
    );
    let end: Footprint = c.probes.read().await?;
    if let Some(b) = end.redis_bytes {
        r.metrics
            .insert("redis_bytes_after_cleanup".into(), b as f64);
    }
    if let Some(b) = end.rss_bytes {
        r.metrics.insert("rss_bytes_after_cleanup".into(), b as f64);
    }
    Ok(r)
}
