//! The machinery every workload shares: producer tasks that push numbered jobs and mark them
//! acknowledged in the [`Ledger`], consumer tasks that reserve, measure lateness from the body
//! and finish, cleanup tasks that delete by id, and the common options. Every loop here is
//! bounded: producers by their job count, consumers by a deadline.

pub mod amqp;
pub mod burst;
pub mod callback;
pub mod lifecycle;
pub mod listing;
pub mod memory;
pub mod schedules;
pub mod steady;

use crate::body;
use crate::driver::{Due, Endpoint, NewJob, Protocol, due_secs, now_ms, now_us};
use crate::probe::{MachineShares, MachineTicks, ProcessTimes};
use crate::report::RunResult;
use crate::stats::{Lateness, Ledger, Summary};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Options every workload takes, already resolved (see `main.rs` for the flags).
#[derive(Debug, Clone)]
pub struct Common {
    pub protocol: Protocol,
    pub target: String,
    pub label: String,
    pub run_id: String,
    pub producers: usize,
    pub consumers: usize,
    /// Jobs per push request, and per reserve / finish where the protocol has batches.
    pub batch: usize,
    pub body_bytes: usize,
    /// How long consumers keep waiting for missing jobs after the last one fell due.
    pub drain_timeout_s: u64,
    pub progress: bool,
    pub probes: crate::probe::Probes,
}

impl Common {
    pub fn result(&self, workload: &str) -> RunResult {
        let mut params = BTreeMap::new();
        params.insert("producers".into(), self.producers.into());
        params.insert("consumers".into(), self.consumers.into());
        params.insert("batch".into(), self.batch.into());
        params.insert("body_bytes".into(), self.body_bytes.into());
        params.insert("run_id".into(), self.run_id.clone().into());
        RunResult {
            workload: workload.into(),
            label: self.label.clone(),
            target: self.target.clone(),
            api: self.protocol.name().into(),
            params,
            metrics: BTreeMap::new(),
            notes: if self.protocol.whole_second_delays() {
                vec!["delays are whole seconds on this protocol".into()]
            } else {
                vec![]
            },
        }
    }

    /// A progress bar on stderr (hidden with `--no-progress` or when stderr is not a terminal).
    pub fn bar(&self, multi: &MultiProgress, len: u64, msg: &'static str) -> ProgressBar {
        if !self.progress {
            return ProgressBar::hidden();
        }
        let pb = multi.add(ProgressBar::new(len));
        pb.set_style(
            ProgressStyle::with_template("{msg:>8} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        pb.set_message(msg);
        pb
    }
}

/// A multi-bar drawing to stderr.
pub fn multi(progress: bool) -> MultiProgress {
    if progress {
        MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(4))
    } else {
        MultiProgress::with_draw_target(ProgressDrawTarget::hidden())
    }
}

/// Errors of a phase: how many, and the first one's text (no per-request logging).
#[derive(Debug, Default)]
pub struct Errors {
    pub count: AtomicU64,
    pub first: Mutex<Option<String>>,
}

impl Errors {
    pub fn note(&self, e: &anyhow::Error) {
        if self.count.fetch_add(1, Ordering::Relaxed) == 0 {
            *self.first.lock().expect("not poisoned") = Some(format!("{e:#}"));
        }
    }

    pub fn report(&self, what: &str, r: &mut RunResult) {
        let n = self.count.load(Ordering::Relaxed);
        r.metrics.insert(format!("{what}_errors"), n as f64);
        if let Some(e) = self.first.lock().expect("not poisoned").as_ref() {
            r.notes.push(format!("{n} {what} errors, first: {e}"));
        }
    }
}

/// The due time a consumer will measure against: what the producer asked for, in the units the
/// protocol can carry, counted from `sent_us`, the clock read just before the push request is
/// sent (a server may count a delay from the request's arrival, never from before it). Returns
/// the due time to put in the body, Unix µs.
pub fn body_due_us(protocol: Protocol, due: Due, sent_us: u64) -> u64 {
    if protocol.whole_second_delays() {
        sent_us + due_secs(due, sent_us / 1000) * 1_000_000
    } else {
        match due {
            Due::DelayMs(d) => sent_us + d * 1000,
            Due::RunAtMs(t) => t * 1000,
        }
    }
}

/// What one producer pass pushes: sequence numbers `[first, n)` taken in batches from a shared
/// counter, each due as `due_of(seq)` says, with id `id_prefix` and the number (zero-padded to
/// `id_digits` digits).
pub struct PushPlan {
    pub n: u64,
    pub id_prefix: String,
    pub first: u64,
    pub id_digits: usize,
    pub due_of: Arc<dyn Fn(u64) -> Due + Send + Sync>,
    /// Pace: the k-th job of a producer is not pushed before `start + k / rate` (jobs/s per
    /// producer); `None` pushes as fast as the server answers.
    pub rate_per_producer: Option<f64>,
    /// Keep server-assigned ids (beanstalkd) for cleanup.
    pub collect_server_ids: bool,
    /// Jobs per request, if not the run's `--batch`.
    pub batch: Option<usize>,
}

/// What the producers did.
#[derive(Default)]
pub struct Pushed {
    pub acked: u64,
    pub elapsed: Duration,
    pub errors: Arc<Errors>,
    /// Server ids (beanstalkd) when collected.
    pub server_ids: Vec<String>,
    /// Worst lag behind the pace (paced plans only).
    pub max_lag: Duration,
}

impl Pushed {
    /// Adds a later pass's figures to these (elapsed times add up; errors count together,
    /// the first one kept).
    pub fn add(&mut self, later: Pushed) {
        self.acked += later.acked;
        self.elapsed += later.elapsed;
        let n = later.errors.count.load(Ordering::Relaxed);
        if n > 0 {
            let first = later.errors.first.lock().expect("not poisoned").clone();
            if self.errors.count.fetch_add(n, Ordering::Relaxed) == 0 {
                *self.errors.first.lock().expect("not poisoned") = first;
            }
        }
        self.server_ids.extend(later.server_ids);
        self.max_lag = self.max_lag.max(later.max_lag);
    }
}

/// Runs `c.producers` producer tasks over `plan`, marking acknowledged jobs in `ledger` (when
/// given). Returns when every job was pushed or refused.
pub async fn produce(
    c: &Common,
    ep: &Arc<Endpoint>,
    plan: PushPlan,
    ledger: Option<Arc<Ledger>>,
    pb: ProgressBar,
) -> anyhow::Result<Pushed> {
    let next = Arc::new(AtomicU64::new(plan.first));
    let errors = Arc::new(Errors::default());
    let acked = Arc::new(AtomicU64::new(0));
    let plan = Arc::new(plan);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..c.producers.max(1) {
        let mut conn = ep.connect().await?;
        let (next, errors, acked, plan, ledger, pb) = (
            next.clone(),
            errors.clone(),
            acked.clone(),
            plan.clone(),
            ledger.clone(),
            pb.clone(),
        );
        let batch = plan.batch.unwrap_or(c.batch).max(1) as u64;
        let (body_bytes, protocol) = (c.body_bytes, c.protocol);
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut pushed_here = 0u64;
            let mut max_lag = Duration::ZERO;
            loop {
                let first = next.fetch_add(batch, Ordering::Relaxed);
                if first >= plan.n {
                    break;
                }
                let last = (first + batch).min(plan.n);
                if let Some(rate) = plan.rate_per_producer {
                    let at = start + Duration::from_secs_f64(pushed_here as f64 / rate);
                    let now = Instant::now();
                    if at > now {
                        tokio::time::sleep_until(at.into()).await;
                    } else {
                        max_lag = max_lag.max(now - at);
                    }
                }
                pushed_here += last - first;
                let sent_us = now_us();
                let jobs: Vec<NewJob> = (first..last)
                    .map(|seq| {
                        let due = (plan.due_of)(seq);
                        NewJob {
                            id: format!("{}{seq:0w$}", plan.id_prefix, w = plan.id_digits),
                            due,
                            body: body::encode(
                                body_due_us(protocol, due, sent_us),
                                seq,
                                body_bytes,
                            ),
                        }
                    })
                    .collect();
                match conn.push(&jobs).await {
                    Ok(ok) => {
                        let mut k = 0;
                        for (i, a) in ok.iter().enumerate() {
                            if *a {
                                k += 1;
                                if let Some(l) = &ledger {
                                    l.ack(first + i as u64);
                                }
                            }
                        }
                        acked.fetch_add(k, Ordering::Relaxed);
                        if plan.collect_server_ids
                            && let Some(s) = conn.last_server_ids()
                        {
                            ids.extend(s.iter().filter(|x| !x.is_empty()).cloned());
                        }
                    }
                    Err(e) => errors.note(&e),
                }
                pb.inc(last - first);
            }
            (ids, max_lag)
        }));
    }
    let mut server_ids = Vec::new();
    let mut max_lag = Duration::ZERO;
    for t in tasks {
        let (ids, lag) = t.await?;
        server_ids.extend(ids);
        max_lag = max_lag.max(lag);
    }
    pb.finish();
    Ok(Pushed {
        acked: acked.load(Ordering::Relaxed),
        elapsed: start.elapsed(),
        errors,
        server_ids,
        max_lag,
    })
}

/// When consumers stop: once every acknowledged job was delivered after the producers are done,
/// or at `deadline_ms` (Unix ms), whichever is first. Producers lower the deadline when done.
/// Every consumer stops at once when the last job is delivered, its long poll abandoned, so
/// that a run's span (and the CPU and idle time measured over it) ends with its last delivery,
/// not up to a long poll later.
pub struct StopRule {
    pub producers_done: AtomicBool,
    pub deadline_ms: AtomicU64,
    /// Bumped when the producers are done and when a consumer finds every job delivered: each
    /// waiting consumer then checks [`StopRule::complete`].
    changed: watch::Sender<()>,
}

impl StopRule {
    pub fn new(hard_cap: Duration) -> Arc<StopRule> {
        Arc::new(StopRule {
            producers_done: AtomicBool::new(false),
            deadline_ms: AtomicU64::new(now_ms() + hard_cap.as_millis() as u64),
            changed: watch::Sender::new(()),
        })
    }

    /// Producers are done; wait at most until `last_due_ms + drain`.
    pub fn producers_done(&self, last_due_ms: u64, drain: Duration) {
        self.deadline_ms
            .fetch_min(last_due_ms + drain.as_millis() as u64, Ordering::Relaxed);
        self.producers_done.store(true, Ordering::Release);
        self.changed.send_modify(|_| ());
    }

    /// The producers are done and every job they had acknowledged was delivered.
    fn complete(&self, ledger: &Ledger) -> bool {
        self.producers_done.load(Ordering::Acquire)
            && ledger.delivered_unique.load(Ordering::Relaxed)
                >= ledger.acked_total.load(Ordering::Relaxed)
    }
}

/// What the consumers saw.
pub struct Consumed {
    pub lateness: Lateness,
    /// Bodies that were not ours (another run's jobs on the same topic).
    pub foreign: u64,
    pub errors: Arc<Errors>,
    /// Unix µs of the last first-delivery.
    pub last_delivery_us: u64,
}

/// Runs `c.consumers` consumer tasks until `stop` says so.
pub async fn consume(
    c: &Common,
    ep: &Arc<Endpoint>,
    ledger: Arc<Ledger>,
    stop: Arc<StopRule>,
    pb: ProgressBar,
) -> anyhow::Result<Consumed> {
    let errors = Arc::new(Errors::default());
    let last = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..c.consumers.max(1) {
        let mut conn = ep.connect().await?;
        let (ep, ledger, stop, errors, last, pb) = (
            ep.clone(),
            ledger.clone(),
            stop.clone(),
            errors.clone(),
            last.clone(),
            pb.clone(),
        );
        let batch = c.batch.max(1);
        // On /v1 a consumer finishes its jobs in its next reserve (one request, not two), as
        // BullMQ's worker does; elsewhere it finishes them at once.
        let finish_in_reserve = ep.protocol == Protocol::V1;
        tasks.push(tokio::spawn(async move {
            let mut lat = Lateness::new();
            let mut foreign = 0u64;
            let mut handles = Vec::with_capacity(batch);
            // Jobs delivered and not finished yet (`finish_in_reserve`).
            let mut unfinished: Vec<String> = Vec::with_capacity(batch);
            let mut changed = stop.changed.subscribe();
            loop {
                let now = now_ms();
                if stop.complete(&ledger) {
                    // Wake the others out of their long polls.
                    stop.changed.send_modify(|_| ());
                    break;
                }
                let deadline = stop.deadline_ms.load(Ordering::Relaxed);
                if now >= deadline {
                    break;
                }
                let wait = (deadline - now).min(1000);
                let reserved = {
                    let reserve = conn.finish_and_reserve(&unfinished, batch, wait);
                    tokio::pin!(reserve);
                    loop {
                        // `changed` cannot close: this task holds `stop`, its sender.
                        tokio::select! {
                            r = &mut reserve => break Some(r),
                            Ok(()) = changed.changed() => if stop.complete(&ledger) {
                                break None;
                            },
                        }
                    }
                };
                let Some(reserved) = reserved else { break };
                let jobs = match reserved {
                    Ok(j) => {
                        unfinished.clear();
                        j
                    }
                    Err(e) => {
                        // Whether its finishes ran is unknown: they are sent again (a job
                        // finished twice is only missing the second time).
                        errors.note(&e);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        // The connection may be out of step (a reply timed out): start afresh.
                        if let Ok(fresh) = ep.connect().await {
                            conn = fresh;
                        }
                        continue;
                    }
                };
                if jobs.is_empty() {
                    continue;
                }
                let pop_us = now_us();
                handles.clear();
                for j in jobs {
                    match body::decode(&j.body) {
                        Some((due, seq)) => {
                            lat.record(pop_us, due);
                            if ledger.deliver(seq) {
                                pb.inc(1);
                                last.fetch_max(pop_us, Ordering::Relaxed);
                            }
                        }
                        None => foreign += 1,
                    }
                    handles.push(j.handle);
                }
                if finish_in_reserve {
                    unfinished.append(&mut handles);
                } else if let Err(e) = conn.finish(&handles).await {
                    errors.note(&e);
                }
            }
            // The last reserve, cut short at the stop, may have finished them already.
            if !unfinished.is_empty()
                && let Err(e) = conn.finish_again(&unfinished).await
            {
                errors.note(&e);
            }
            (lat, foreign)
        }));
    }
    let mut lateness = Lateness::new();
    let mut foreign = 0;
    for t in tasks {
        let (l, f) = t.await?;
        lateness.merge(&l);
        foreign += f;
    }
    pb.finish();
    Ok(Consumed {
        lateness,
        foreign,
        errors,
        last_delivery_us: last.load(Ordering::Relaxed),
    })
}

/// Deletes `handles` with `c.producers` connections, `c.batch` per request; returns (deleted,
/// elapsed).
pub async fn cleanup(
    c: &Common,
    ep: &Arc<Endpoint>,
    handles: Vec<String>,
    errors: Arc<Errors>,
    pb: ProgressBar,
) -> anyhow::Result<(u64, Duration, Option<bool>)> {
    let handles = Arc::new(handles);
    let next = Arc::new(AtomicU64::new(0));
    let deleted = Arc::new(AtomicU64::new(0));
    // Cleanup batches: at least 100 per request where the protocol batches, so a per-job
    // push run does not also make cleanup per-job on /v1.
    let batch = c.batch.max(100) as u64;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..c.producers.max(1) {
        let mut conn = ep.connect().await?;
        let (handles, next, deleted, errors, pb) = (
            handles.clone(),
            next.clone(),
            deleted.clone(),
            errors.clone(),
            pb.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(batch, Ordering::Relaxed);
                let n = handles.len() as u64;
                if first >= n {
                    break;
                }
                let last = (first + batch).min(n);
                match conn.delete(&handles[first as usize..last as usize]).await {
                    Ok(k) => {
                        deleted.fetch_add(k, Ordering::Relaxed);
                    }
                    Err(e) => errors.note(&e),
                }
                pb.inc(last - first);
            }
            match &conn {
                crate::driver::Conn::V1(v) => v.batch_delete(),
                _ => None,
            }
        }));
    }
    let mut batch_path = None;
    for t in tasks {
        batch_path = batch_path.or(t.await?);
    }
    pb.finish();
    Ok((deleted.load(Ordering::Relaxed), start.elapsed(), batch_path))
}

/// Puts a lateness summary into `r` under `lateness_*` and `early*`.
pub fn put_lateness(r: &mut RunResult, l: &Lateness) {
    let late = l.late_summary();
    let early = l.early_summary();
    let put = |r: &mut RunResult, prefix: &str, s: &Summary| {
        r.metrics.insert(format!("{prefix}_p50_ms"), s.p50_ms);
        r.metrics.insert(format!("{prefix}_p99_ms"), s.p99_ms);
        r.metrics.insert(format!("{prefix}_p999_ms"), s.p999_ms);
        r.metrics.insert(format!("{prefix}_max_ms"), s.max_ms);
    };
    put(r, "lateness", &late);
    r.metrics.insert("early".into(), early.count as f64);
    if early.count > 0 {
        put(r, "early", &early);
    }
}

/// Puts lost / duplicates / unexpected into `r`; `foreign` bodies (not this run's) count as
/// unexpected.
pub fn put_accounting(r: &mut RunResult, ledger: &Ledger, foreign: u64) {
    let a = ledger.account(0);
    r.metrics.insert("acked".into(), a.acked as f64);
    r.metrics
        .insert("delivered".into(), a.delivered_unique as f64);
    r.metrics.insert("lost".into(), a.lost as f64);
    r.metrics.insert("duplicates".into(), a.duplicates as f64);
    r.metrics
        .insert("unexpected".into(), (a.unexpected + foreign) as f64);
}

/// Who used the machine over a measured span: started before it, [`CpuSpan::stop`]ped after.
pub struct CpuSpan {
    start: Instant,
    /// This load generator's, and the `--server-pid` process's (with its pid), at the start.
    own: ProcessTimes,
    server: Option<(u32, ProcessTimes)>,
    machine: Option<MachineTicks>,
}

/// What a [`CpuSpan`] measured.
pub struct CpuUse {
    pub wall_s: f64,
    /// CPU seconds of this load generator.
    pub bench_s: Option<f64>,
    /// CPU seconds of the `--server-pid` process.
    pub server_s: Option<f64>,
    /// Seconds the threads of this load generator and of the server were runnable but
    /// waiting for a CPU (summed over threads, as CPU time is).
    pub bench_wait_s: Option<f64>,
    pub server_wait_s: Option<f64>,
    /// Shares of the machine's time, in percent: of all its cores idle (nobody wanted them)
    /// and stolen (the hypervisor gave other guests time this machine wanted), and of the
    /// busiest core's time not idle.
    pub machine: Option<MachineShares>,
}

impl CpuSpan {
    pub fn start(server_pid: Option<u32>) -> CpuSpan {
        CpuSpan {
            start: Instant::now(),
            own: ProcessTimes::read(std::process::id()),
            server: server_pid.map(|pid| (pid, ProcessTimes::read(pid))),
            machine: MachineTicks::now(),
        }
    }

    /// The span's figures so far.
    pub fn stop(&self) -> CpuUse {
        let own = ProcessTimes::read(std::process::id());
        let server = self
            .server
            .as_ref()
            .map(|(pid, start)| (ProcessTimes::read(*pid), start));
        let wall_s = self.start.elapsed().as_secs_f64();
        CpuUse {
            wall_s,
            bench_s: own.cpu_since(&self.own),
            server_s: server.as_ref().and_then(|(now, then)| now.cpu_since(then)),
            bench_wait_s: own.wait_since(&self.own),
            server_wait_s: server.as_ref().and_then(|(now, then)| now.wait_since(then)),
            machine: self
                .machine
                .as_ref()
                .zip(MachineTicks::now())
                .and_then(|(a, b)| b.since(a, wall_s)),
        }
    }
}

impl CpuUse {
    /// Puts `bench_cpu_pct` and `server_cpu_pct`, `bench_cpu_wait_pct` and
    /// `server_cpu_wait_pct` (percent of one core: time used, and time runnable but waiting
    /// for a core), `machine_idle_pct` and `machine_steal_pct` (percent of all cores) and
    /// `machine_busiest_core_pct` (percent of one core) into `r`.
    pub fn put(&self, r: &mut RunResult) {
        for (name, cpu) in [
            ("bench_cpu_pct", self.bench_s),
            ("server_cpu_pct", self.server_s),
            ("bench_cpu_wait_pct", self.bench_wait_s),
            ("server_cpu_wait_pct", self.server_wait_s),
        ] {
            if let Some(s) = cpu.filter(|_| self.wall_s > 0.0) {
                r.metrics.insert(name.into(), 100.0 * s / self.wall_s);
            }
        }
        put_machine(r, self.machine);
    }
}

/// Puts the machine's shares ([`MachineTicks::since`]), when measured, into `r` as
/// `machine_idle_pct`, `machine_steal_pct` and, where each core was read,
/// `machine_busiest_core_pct`.
pub fn put_machine(r: &mut RunResult, shares: Option<MachineShares>) {
    if let Some(m) = shares {
        r.metrics.insert("machine_idle_pct".into(), m.idle);
        r.metrics.insert("machine_steal_pct".into(), m.steal);
        if let Some(busiest) = m.busiest_core {
            r.metrics.insert("machine_busiest_core_pct".into(), busiest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_due_time_in_the_body_is_the_send_instant_plus_the_delay_in_microseconds() {
        let sent_us = 1_767_225_600_123_456;
        assert_eq!(
            body_due_us(Protocol::V1, Due::DelayMs(250), sent_us),
            1_767_225_600_373_456
        );
        assert_eq!(
            body_due_us(Protocol::V1, Due::RunAtMs(1_767_225_601_000), sent_us),
            1_767_225_601_000_000
        );
        // Whole seconds: 2,999 ms goes as 2 s, and the body says what was asked.
        assert_eq!(
            body_due_us(Protocol::Compat, Due::DelayMs(2_999), sent_us),
            1_767_225_602_123_456
        );
    }

    #[test]
    fn a_cpu_span_reports_the_processes_and_the_machine_over_it() {
        // This process is its own "server": both figures see the same work.
        let span = CpuSpan::start(Some(std::process::id()));
        let until = Instant::now() + Duration::from_millis(300);
        let mut x = 0u64;
        while Instant::now() < until {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let used = span.stop();
        assert!(used.wall_s >= 0.3, "{}", used.wall_s);
        // 300 ms of spinning is at least 0.1 s of CPU even on a machine shared with others.
        assert!(used.bench_s.is_some_and(|s| s >= 0.1), "{:?}", used.bench_s);
        assert!(
            used.server_s.is_some_and(|s| s >= 0.1),
            "{:?}",
            used.server_s
        );
        let m = used.machine.expect("/proc/stat is read");
        assert!((0.0..=100.0).contains(&m.idle) && (0.0..=100.0).contains(&m.steal));
        // The busiest core is at least as busy as the cores on average (ticks of 10 ms make a
        // few percent of noise over 300 ms), and this spinning thread kept some core busy.
        let busiest = m.busiest_core.expect("each core is read");
        assert!(
            busiest <= 100.0 && busiest >= 100.0 - m.idle - 5.0 && busiest >= 40.0,
            "busiest core {busiest} %, machine idle {} %",
            m.idle
        );
        let mut r = RunResult {
            workload: "w1".into(),
            label: "t".into(),
            target: "delayq".into(),
            api: "compat".into(),
            params: Default::default(),
            metrics: Default::default(),
            notes: vec![],
        };
        used.put(&mut r);
        for m in [
            "bench_cpu_pct",
            "server_cpu_pct",
            "bench_cpu_wait_pct",
            "server_cpu_wait_pct",
            "machine_idle_pct",
            "machine_steal_pct",
            "machine_busiest_core_pct",
        ] {
            assert!(r.metrics.contains_key(m), "{m} missing: {:?}", r.metrics);
        }
        assert!(r.metrics["bench_cpu_pct"] > 0.0);
    }
}
