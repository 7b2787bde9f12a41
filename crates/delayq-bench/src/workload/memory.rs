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
    /// Instead of `--delay-s`: each job due at a pseudo-random time over this many hours
    /// from a minute after the run starts (the cold tier's benchmark: 720, thirty days).
    #[arg(long)]
    pub spread_h: Option<u64>,
    /// Push in this many equal parts, reporting each part's push rate and the footprint after
    /// it (`push_jobs_per_s_<k>`, `rss_bytes_<k>`, `data_dir_bytes_<k>`).
    #[arg(long, default_value_t = 1)]
    pub marks: u64,
    /// Job ids as `<letter><number>`, the number zero-padded to this many digits (0: the run
    /// id, a dash and the number).
    #[arg(long, default_value_t = 0)]
    pub id_digits: usize,
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
    let due_of: Arc<dyn Fn(u64) -> Due + Send + Sync> = match p.spread_h {
        None => Arc::new(move |_| Due::DelayMs(delay_ms)),
        Some(h) => {
            let (start, spread) = (crate::driver::now_ms() + 60_000, (h * 3_600_000).max(1));
            // A multiplicative hash of the number: due times in no order, evenly spread.
            Arc::new(move |k: u64| {
                Due::RunAtMs(start + k.wrapping_mul(0x9E37_79B9_7F4A_7C15) % spread)
            })
        }
    };
    if let Some(h) = p.spread_h {
        r.params.insert("spread_h".into(), h.into());
    }
    let (id_prefix, id_digits) = match p.id_digits {
        0 => (format!("{}-", c.run_id), 0),
        d => (c.run_id.chars().take(1).collect(), d),
    };
    let marks = p.marks.clamp(1, p.pending.max(1));
    let pb = c.bar(&m, p.pending, "push");
    let mut pushed = super::Pushed::default();
    for k in 0..marks {
        let plan = super::PushPlan {
            n: p.pending * (k + 1) / marks,
            id_prefix: id_prefix.clone(),
            first: p.pending * k / marks,
            id_digits,
            due_of: due_of.clone(),
            rate_per_producer: None,
            batch: None,
            collect_server_ids: !p.no_cleanup,
        };
        let part = produce(c, ep, plan, None, pb.clone()).await?;
        if marks > 1 {
            let at: Footprint = c.probes.read().await?;
            let name = |m: &str| format!("{m}_{}", k + 1);
            r.metrics.insert(
                name("push_jobs_per_s"),
                part.acked as f64 / part.elapsed.as_secs_f64(),
            );
            for (m, v) in [
                ("rss_bytes", at.rss_bytes),
                ("data_dir_bytes", at.data_dir_bytes),
            ] {
                if let Some(v) = v {
                    r.metrics.insert(name(m), v as f64);
                }
            }
        }
        pushed.add(part);
    }
    pb.finish();
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
        (0..p.pending)
            .map(|s| format!("{id_prefix}{s:0id_digits$}"))
            .collect()
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
