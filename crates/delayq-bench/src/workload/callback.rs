//! Callbacks (push delivery): jobs pushed with a `callback` on the bench's own receiver
//! ([`crate::receiver`]), which the server calls when they are due; no consumer. Three shapes:
//!
//! - `burst`: N jobs due in the same millisecond (`run_at_ms`, as W4); reports callbacks
//!   delivered per second from that instant to the last job's first call.
//! - `lifecycle`: W1's shape (N jobs, delays uniform in [0, max-delay-s], pushed as fast as the
//!   server takes them while it calls them back); reports callbacks per second from the start
//!   to the last first call, W1's end-to-end rate with the server calling instead of consumers
//!   pulling.
//! - `steady`: R jobs per second for T seconds, each due a few seconds after its push (as W3);
//!   reports lateness of the call.
//!
//! Lateness, early, lost and duplicates are counted as for pull deliveries, with the receiver's
//! arrival time in place of the consumer's. /v1 only (the callback field is a /v1 one).

use super::{Common, CpuSpan, StopRule, multi, produce, put_accounting, put_lateness};
use crate::driver::{CallbackTarget, Due, Endpoint, Protocol, now_ms, now_us};
use crate::receiver::Receiver;
use crate::report::RunResult;
use crate::stats::Ledger;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The shape of a callback run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// N jobs due at once: callbacks per second.
    Burst,
    /// W1's shape: callbacks per second while pushing.
    Lifecycle,
    /// A paced stream: lateness of the call.
    Steady,
}

/// The callback workload's own parameters.
#[derive(Debug, Clone, clap::Args)]
pub struct Params {
    /// Which measurement.
    #[arg(long, value_enum, default_value_t = Shape::Burst)]
    pub shape: Shape,
    /// Jobs (burst, lifecycle).
    #[arg(long, default_value_t = 50_000)]
    pub jobs: u64,
    /// How far in the future the burst is due; must exceed the push phase (burst).
    #[arg(long, default_value_t = 10)]
    pub lead_s: u64,
    /// Delays uniform in [0, max-delay-s] seconds, in ms (lifecycle).
    #[arg(long, default_value_t = 3)]
    pub max_delay_s: u64,
    /// Jobs per second (steady).
    #[arg(long, default_value_t = 2000)]
    pub rate: u64,
    /// How long the stream runs (steady).
    #[arg(long, default_value_t = 30)]
    pub duration_s: u64,
    /// Delay of each streamed job (steady).
    #[arg(long, default_value_t = 2)]
    pub fire_delay_s: u64,
    /// The callbacks' `timeout_ms`.
    #[arg(long, default_value_t = 30_000)]
    pub callback_timeout_ms: u64,
    /// Where the receiver listens (loopback; port 0: a free one). The server must allow it:
    /// `delayq serve --callback-allow 127.0.0.1`.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub receiver_listen: String,
}

pub async fn run(c: &Common, ep: &Arc<Endpoint>, p: &Params) -> anyhow::Result<RunResult> {
    if c.protocol != Protocol::V1 {
        anyhow::bail!("the callback workload needs --api v1 (callbacks are a /v1 field)");
    }
    if !crate::is_loopback(&p.receiver_listen) {
        anyhow::bail!("--receiver-listen {}: loopback only", p.receiver_listen);
    }
    let shape = match p.shape {
        Shape::Burst => "burst",
        Shape::Lifecycle => "lifecycle",
        Shape::Steady => "steady",
    };
    let mut r = c.result(&format!("callback-{shape}"));
    r.params
        .insert("callback_timeout_ms".into(), p.callback_timeout_ms.into());
    let n = match p.shape {
        Shape::Burst => {
            r.params.insert("jobs".into(), p.jobs.into());
            r.params.insert("lead_s".into(), p.lead_s.into());
            p.jobs
        }
        Shape::Lifecycle => {
            r.params.insert("jobs".into(), p.jobs.into());
            r.params.insert("max_delay_s".into(), p.max_delay_s.into());
            p.jobs
        }
        Shape::Steady => {
            r.params.insert("rate".into(), p.rate.into());
            r.params.insert("duration_s".into(), p.duration_s.into());
            r.params
                .insert("fire_delay_s".into(), p.fire_delay_s.into());
            p.rate * p.duration_s
        }
    };
    let ledger = Arc::new(Ledger::new(n as usize));
    let receiver = Receiver::start(&p.receiver_listen, ledger.clone()).await?;
    let ep = ep.with_callback(CallbackTarget {
        url: receiver.url.clone(),
        timeout_ms: p.callback_timeout_ms,
    });
    let m = multi(c.progress);

    let start_us = now_us();
    let due_at = now_ms() + p.lead_s * 1000;
    let (max_delay_ms, fire_delay_ms) = (p.max_delay_s * 1000, p.fire_delay_s * 1000);
    let due_of: Arc<dyn Fn(u64) -> Due + Send + Sync> = match p.shape {
        Shape::Burst => Arc::new(move |_| Due::RunAtMs(due_at)),
        Shape::Lifecycle => Arc::new(move |_| Due::DelayMs(fastrand::u64(0..=max_delay_ms))),
        Shape::Steady => Arc::new(move |_| Due::DelayMs(fire_delay_ms)),
    };
    let rate_per_producer =
        (p.shape == Shape::Steady).then(|| p.rate as f64 / c.producers.max(1) as f64);
    let cpu = CpuSpan::start(c.probes.server_pid);
    let pushed = produce(
        c,
        &ep,
        super::PushPlan {
            n,
            id_prefix: format!("{}-", c.run_id),
            first: 0,
            id_digits: 0,
            due_of,
            rate_per_producer,
            collect_server_ids: false,
            batch: None,
        },
        Some(ledger.clone()),
        c.bar(&m, n, "push"),
    )
    .await?;
    let pushed_by = now_ms();
    let last_due = match p.shape {
        Shape::Burst => {
            if pushed_by > due_at {
                r.notes.push(format!(
                    "push phase ended {} ms after the due time: raise --lead-s",
                    pushed_by - due_at
                ));
            }
            due_at
        }
        Shape::Lifecycle => pushed_by + max_delay_ms,
        Shape::Steady => pushed_by + fire_delay_ms,
    };

    // Wait until every acknowledged job was called once, or the drain timeout.
    let stop = StopRule::new(Duration::from_secs(3600));
    stop.producers_done(last_due + 1000, Duration::from_secs(c.drain_timeout_s));
    let pb = c.bar(&m, pushed.acked, "called");
    loop {
        let called = ledger.delivered_unique.load(Ordering::Relaxed);
        pb.set_position(called);
        if called >= ledger.acked_total.load(Ordering::Relaxed)
            || now_ms() >= stop.deadline_ms.load(Ordering::Relaxed)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    pb.finish();
    let cpu = cpu.stop();
    // Calls that would come twice come soon (a retry after a failed answer): a moment for them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = receiver.received();
    let called = ledger.delivered_unique.load(Ordering::Relaxed);

    r.metrics.insert("jobs".into(), pushed.acked as f64);
    r.metrics.insert(
        "push_jobs_per_s".into(),
        pushed.acked as f64 / pushed.elapsed.as_secs_f64(),
    );
    let last_us = got.last_call_us;
    match p.shape {
        Shape::Burst => {
            let s = (last_us / 1000).saturating_sub(due_at) as f64 / 1000.0;
            r.metrics.insert("call_all_s".into(), s);
            r.metrics
                .insert("callbacks_per_s".into(), called as f64 / s.max(1e-3));
        }
        Shape::Lifecycle => {
            let s = last_us.saturating_sub(start_us) as f64 / 1e6;
            r.metrics.insert("total_s".into(), s);
            r.metrics
                .insert("callbacks_per_s".into(), called as f64 / s.max(1e-3));
        }
        Shape::Steady => {
            r.metrics.insert(
                "producer_max_lag_ms".into(),
                pushed.max_lag.as_secs_f64() * 1000.0,
            );
        }
    }
    put_lateness(&mut r, &got.lateness);
    put_accounting(&mut r, &ledger, got.foreign);
    r.metrics.insert("retried_calls".into(), got.retries as f64);
    r.metrics
        .insert("receiver_connections".into(), got.connections as f64);
    cpu.put(&mut r);
    if let Some(s) = cpu.server_s {
        r.metrics.insert(
            "server_cpu_us_per_job".into(),
            1e6 * s / (called.max(1) as f64),
        );
    }
    pushed.errors.report("push", &mut r);
    Ok(r)
}
