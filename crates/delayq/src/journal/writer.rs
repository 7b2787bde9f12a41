//! The journal's single writer: every op queued since its last write goes to the database in
//! one transaction (group commit), in the order queued. A caller in `sync` mode waits for the
//! write that holds its ops; in `async` mode nobody waits. A failed write keeps its ops, at
//! the front of the queue, and is tried again every [`RETRY_EVERY`], on a new connection,
//! until the database answers: nothing acknowledged is dropped, and the journal catches up by
//! itself. The writer holds its connection between writes, so a write is one round trip.

use super::connect::{Conn, Db};
use super::row::Op;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, oneshot};

/// How long the writer waits before trying a failed write again.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);
/// How often the writer wakes with nothing to do (the lag gauges).
const IDLE_WAKE: Duration = Duration::from_secs(1);

/// What a waiting caller is told: written, or why not.
pub type Written = Result<(), String>;

#[derive(Default)]
struct Pending {
    ops: Vec<Op>,
    waiters: Vec<oneshot::Sender<Written>>,
    /// When the oldest op still queued was queued.
    oldest: Option<Instant>,
}

/// The gauges of the journal's lag (docs/metrics.md).
#[derive(Clone, Default)]
pub struct LagGauges {
    /// Seconds since the oldest op not yet written was queued.
    pub lag_seconds: Gauge<f64, AtomicU64>,
    /// Ops queued and not yet written.
    pub pending: Gauge,
    /// 1 while the last write succeeded, else 0.
    pub up: Gauge,
}

/// The queue between the hook and the writer task.
pub struct Writer {
    pending: Mutex<Pending>,
    wake: Notify,
    healthy: AtomicBool,
    last_error: Mutex<String>,
    pub gauges: LagGauges,
}

impl Writer {
    pub fn new() -> Writer {
        let gauges = LagGauges::default();
        gauges.up.set(1);
        Writer {
            pending: Mutex::new(Pending::default()),
            wake: Notify::new(),
            healthy: AtomicBool::new(true),
            last_error: Mutex::new(String::new()),
            gauges,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `ops`; with `wait`, returns the receiver told when they are written.
    pub fn enqueue(&self, ops: Vec<Op>, wait: bool) -> Option<oneshot::Receiver<Written>> {
        let rx = {
            let mut p = self.lock();
            p.ops.extend(ops);
            p.oldest.get_or_insert_with(Instant::now);
            wait.then(|| {
                let (tx, rx) = oneshot::channel();
                p.waiters.push(tx);
                rx
            })
        };
        self.wake.notify_one();
        rx
    }

    /// Whether the last write succeeded.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Why the last write failed.
    pub fn last_error(&self) -> String {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn update_gauges(&self) {
        let p = self.lock();
        let lag = p.oldest.map_or(0.0, |t| t.elapsed().as_secs_f64());
        self.gauges.lag_seconds.set(lag);
        self.gauges.pending.set(p.ops.len() as i64);
    }

    /// The writer task: runs until the process ends.
    pub async fn run(&self, db: Db, instance: String) {
        // The connection every write goes through, taken again after a failed write.
        let mut conn: Option<Conn> = None;
        loop {
            if db.is_closed() {
                // Closing the pool waits for every connection to come back.
                conn = None;
            }
            let (ops, waiters, oldest) = {
                let mut p = self.lock();
                let oldest = p.oldest.take();
                (
                    std::mem::take(&mut p.ops),
                    std::mem::take(&mut p.waiters),
                    oldest,
                )
            };
            if ops.is_empty() {
                for w in waiters {
                    let _ = w.send(Ok(()));
                }
                self.update_gauges();
                // Woken early by a close while it holds a connection, to give it back.
                tokio::select! {
                    _ = tokio::time::timeout(IDLE_WAKE, self.wake.notified()) => {}
                    _ = db.closing(), if conn.is_some() => {}
                }
                continue;
            }
            let written = match conn.as_mut() {
                Some(c) => db.write(c, &ops, &instance).await,
                None => match db.writer().await {
                    Ok(c) => db.write(conn.insert(c), &ops, &instance).await,
                    Err(e) => Err(e),
                },
            };
            match written {
                Ok(()) => {
                    if !self.healthy.swap(true, Ordering::AcqRel) {
                        tracing::info!("journal: writing again");
                    }
                    self.gauges.up.set(1);
                    for w in waiters {
                        let _ = w.send(Ok(()));
                    }
                    self.update_gauges();
                }
                Err(e) => {
                    if let Some(c) = conn.take() {
                        c.discard();
                    }
                    let message = format!("{}: {e}", super::UNWRITABLE);
                    if self.healthy.swap(false, Ordering::AcqRel) {
                        tracing::error!(error = %e, "journal: write failed; retrying every second");
                    }
                    self.gauges.up.set(0);
                    *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = message.clone();
                    for w in waiters {
                        let _ = w.send(Err(message.clone()));
                    }
                    {
                        // The failed ops go back in front of whatever was queued since.
                        let mut p = self.lock();
                        let later = std::mem::replace(&mut p.ops, ops);
                        p.ops.extend(later);
                        p.oldest = oldest.or(p.oldest);
                    }
                    self.update_gauges();
                    tokio::time::sleep(RETRY_EVERY).await;
                }
            }
        }
    }
}
