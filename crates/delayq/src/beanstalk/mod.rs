//! The beanstalkd protocol front end (`--beanstalk-listen`, docs/beanstalkd.md): beanstalkd's
//! clients put, reserve and manage delayq's jobs over a TCP or Unix socket, beside HTTP.
//!
//! A tube is a topic; each command is one or a few [`Store`] calls, and a waiting `reserve` is
//! a long poll of the dispatcher's waiters (no store connection held while it waits), as HTTP
//! does. `proto.rs` is the protocol's text (pure), `conn.rs` one connection (its watch list,
//! the jobs it reserved, what each command does), `ids.rs` numeric ids and binary bodies; this
//! file holds what connections share: the [`Beanstalk`] front end (drain mode, counters, the
//! tubes connections name) and the accept loop.
//!
//! **Invariant:** only this module knows the beanstalkd protocol; nothing a client sends can
//! panic it, and every connection is bounded in what it buffers ([`proto::MAX_LINE`], the
//! body limit).
//!
//! Not here: binding the socket and SIGUSR1 (server.rs), job rules (job.rs).

mod conn;
pub mod ids;
pub mod proto;

use crate::clock::Clock;
use crate::dispatch::Dispatcher;
use crate::job::Topic;
use crate::metrics::Metrics;
use crate::store::Store;
use foldhash::HashMap;
use ids::Ids;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// How long the accept loop waits after a failed accept (out of file descriptors, say).
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// Least time between two warnings that the connection limit is reached.
const FULL_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// A bound beanstalkd listener.
pub enum Listener {
    Tcp(TcpListener),
    /// The socket's path, removed when the loop ends.
    Unix(UnixListener, PathBuf),
}

/// What the front end needs besides the store.
#[derive(Debug, Clone)]
pub struct Options {
    /// Largest body a `put` may carry (`--max-body-bytes`): `max-job-size`.
    pub max_job_bytes: usize,
    /// Most connections served at once (`--max-connections`, as for HTTP); past it, new ones
    /// wait to be accepted.
    pub max_connections: usize,
}

/// What connections share: the parts they call, drain mode, and the figures of `stats`.
pub struct Beanstalk {
    store: Arc<dyn Store>,
    dispatch: Arc<Dispatcher>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    options: Options,
    /// SIGUSR1's drain mode: puts answer `DRAINING`.
    draining: AtomicBool,
    ids: Ids,
    /// `cmd-*` counters, by [`proto::COMMAND_NAMES`].
    commands: [AtomicU64; proto::COMMAND_NAMES.len()],
    connections: AtomicU64,
    total_connections: AtomicU64,
    producers: AtomicU64,
    workers: AtomicU64,
    waiting: AtomicU64,
    tubes: Mutex<HashMap<Topic, Tube>>,
    started: Instant,
    /// `id` in `stats`: random per process.
    instance: String,
}

/// What this instance knows of a tube beyond the store's counts.
#[derive(Debug, Default, Clone)]
struct Tube {
    using: u64,
    watching: u64,
    waiting: u64,
    cmd_delete: u64,
    cmd_pause: u64,
    total_jobs: u64,
    /// A pause made here: its length and end, and which pause it is (a later one replaces it).
    pause: Option<Pause>,
}

#[derive(Debug, Clone, Copy)]
struct Pause {
    secs: u32,
    until: Instant,
    serial: u64,
}

impl Beanstalk {
    pub fn new(
        store: Arc<dyn Store>,
        dispatch: Arc<Dispatcher>,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        options: Options,
    ) -> Arc<Beanstalk> {
        // Random per process: std's hasher keys are.
        let random = {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        };
        Arc::new(Beanstalk {
            store,
            dispatch,
            clock,
            metrics,
            options,
            draining: AtomicBool::new(false),
            ids: Ids::new(random),
            commands: std::array::from_fn(|_| AtomicU64::new(0)),
            connections: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            producers: AtomicU64::new(0),
            workers: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            tubes: Mutex::default(),
            started: Instant::now(),
            instance: format!("{random:016x}"),
        })
    }

    /// Drain mode (SIGUSR1), as beanstalkd's: `put` answers `DRAINING` from now on, every
    /// other command is served.
    pub fn drain(&self) {
        if !self.draining.swap(true, Ordering::SeqCst) {
            tracing::info!("beanstalkd: drain mode, puts are refused from now on");
        }
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Serves connections from `listener` until `shutdown` is cancelled, then closes them
    /// (each hands back the jobs it holds) and returns once all have.
    pub async fn serve(self: Arc<Self>, listener: Listener, shutdown: CancellationToken) {
        let tasks = tokio_util::task::TaskTracker::new();
        let slots = Arc::new(Semaphore::new(self.options.max_connections.max(1)));
        let mut warned: Option<Instant> = None;
        loop {
            if slots.available_permits() == 0
                && warned.is_none_or(|w| w.elapsed() >= FULL_WARNING_INTERVAL)
            {
                tracing::warn!(
                    max_connections = self.options.max_connections,
                    "beanstalkd: connection limit reached; new connections wait"
                );
                warned = Some(Instant::now());
            }
            let slot = tokio::select! {
                s = slots.clone().acquire_owned() => s,
                _ = shutdown.cancelled() => break,
            };
            let Ok(slot) = slot else { break };
            let accepted = tokio::select! {
                a = accept(&listener) => a,
                _ = shutdown.cancelled() => break,
            };
            match accepted {
                Ok(Stream::Tcp(s)) => {
                    // Replies are written whole and flushed when no command is pending.
                    let _ = s.set_nodelay(true);
                    let serving = conn::serve(self.clone(), s, shutdown.clone());
                    tasks.spawn(async move {
                        serving.await;
                        drop(slot);
                    });
                }
                Ok(Stream::Unix(s)) => {
                    let serving = conn::serve(self.clone(), s, shutdown.clone());
                    tasks.spawn(async move {
                        serving.await;
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "beanstalkd: accept failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            }
        }
        tasks.close();
        tasks.wait().await;
        if let Listener::Unix(_, path) = &listener {
            let _ = std::fs::remove_file(path);
        }
    }

    fn count(&self, counter: usize) {
        if let Some(c) = self.commands.get(counter) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn tubes(&self) -> MutexGuard<'_, HashMap<Topic, Tube>> {
        // Plain counters: a panic elsewhere leaves them usable.
        self.tubes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes what this instance knows of a tube; a tube no connection names and with
    /// nothing counted is forgotten.
    fn tube<T>(&self, topic: &Topic, f: impl FnOnce(&mut Tube) -> T) -> T {
        let mut tubes = self.tubes();
        let t = tubes.entry(topic.clone()).or_default();
        let out = f(t);
        if t.using == 0 && t.watching == 0 && t.waiting == 0 && t.pause.is_none() {
            // Counters of a tube nobody names go with it, as beanstalkd forgets an
            // unreferenced empty tube.
            tubes.remove(topic);
        }
        out
    }

    /// Pauses `topic` for `secs` (0 resumes it): the topic's flow control pause, ended by a
    /// task of this instance.
    async fn pause(self: &Arc<Self>, topic: &Topic, secs: u32) -> crate::store::StoreResult<()> {
        let change = crate::store::SettingsChange {
            paused: Some(secs > 0),
            ..Default::default()
        };
        self.store
            .set_settings(topic, change, self.clock.now())
            .await?;
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let until = Instant::now() + Duration::from_secs(u64::from(secs));
        self.tube(topic, |t| {
            t.cmd_pause += 1;
            t.pause = (secs > 0).then_some(Pause {
                secs,
                until,
                serial,
            });
        });
        if secs > 0 {
            let this = self.clone();
            let topic = topic.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(until.into()).await;
                let current = this.tube(&topic, |t| t.pause.is_some_and(|p| p.serial == serial));
                if !current {
                    return;
                }
                let resume = crate::store::SettingsChange {
                    paused: Some(false),
                    ..Default::default()
                };
                if let Err(e) = this
                    .store
                    .set_settings(&topic, resume, this.clock.now())
                    .await
                {
                    tracing::warn!(%topic, error = %e, "beanstalkd: cannot end a tube's pause");
                }
                this.tube(&topic, |t| {
                    if t.pause.is_some_and(|p| p.serial == serial) {
                        t.pause = None;
                    }
                });
            });
        }
        Ok(())
    }
}

enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

async fn accept(listener: &Listener) -> std::io::Result<Stream> {
    match listener {
        Listener::Tcp(l) => l.accept().await.map(|(s, _)| Stream::Tcp(s)),
        Listener::Unix(l, _) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
    }
}
