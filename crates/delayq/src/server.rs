//! Wiring: builds every part of a server from its settings, and serves until shutdown.
//!
//! [`App`] is the one place the parts are put together: the store journaled (`--journal`)
//! inside its metrics, the dispatcher, the RabbitMQ bridge (`--amqp`) and push delivery over
//! that store, and the [`AppState`] the HTTP handlers share. [`serve`] is `delayq serve`
//! (main.rs parses the flags); [`run`] serves an already bound listener until a given future
//! completes, so tests can bind port 0 and stop it at will. What fails is a [`ServeError`].
//!
//! Under systemd (`Type=notify`), `serve` sends `READY=1` once the store is open and the
//! listener bound, and `STOPPING=1` when a signal begins the shutdown.
//!
//! Shutdown (SIGINT or SIGTERM for `serve`): stop accepting, answer every waiting pop with
//! "nothing" (the dispatcher's shutdown), let in-flight requests finish, and give up on
//! stragglers after [`DRAIN_TIMEOUT`]. Nothing here knows job rules or HTTP routes.
//!
//! Connections are served by hyper-util's auto (HTTP/1 and HTTP/2) builder, as `axum::serve`
//! does, but with timers, so that `idle_timeout` applies: a connection that has not made its
//! first request within it (silent, or stopped in the middle of the HTTP/2 preface, which the
//! builder reads before hyper's own timers start) is closed here; after that, an HTTP/1
//! connection that has not sent a complete request head within it (idle between requests, or
//! sending its head too slowly) is closed by hyper, and HTTP/2 connections are pinged at that
//! interval and closed when the peer does not answer. `axum::serve` has no such knob.
//!
//! At most `max_connections` connections are served at once: past it the accept loop waits
//! for one to close (holding the one it accepted; later clients wait in the listen backlog) and
//! logs a warning at most once per [`FULL_WARNING_INTERVAL`]. `serve` first raises the
//! process's soft open-file limit to its hard limit, from which the default cap is derived.

use crate::amqp::{AmqpOptions, Broker};
use crate::api::{self, AppState};
use crate::beanstalk::{self, Beanstalk};
use crate::clock::{Clock, SystemClock};
use crate::config::{BeanstalkListen, Config};
use crate::delivery::{Deliverer, DeliveryOptions};
use crate::dispatch::{DispatchOptions, Dispatcher};
use crate::journal::{Journal, JournalError, Journaled};
use crate::metrics::{Metered, Metrics};
use crate::redact::redact_url;
use crate::scheduler::Scheduler;
use crate::store::embedded::{EmbeddedOptions, EmbeddedStore};
use crate::store::memory::MemoryStore;
use crate::store::redis::{RedisOptions, RedisStore, RedisTarget};
use crate::store::{Store, StoreError};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Longest wait for in-flight requests once shutdown has begun.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for the dispatcher's tasks to stop after the HTTP server has.
const DISPATCH_STOP_TIMEOUT: Duration = Duration::from_secs(2);
/// Least time between two warnings that `max_connections` is reached.
pub const FULL_WARNING_INTERVAL: Duration = Duration::from_secs(60);
/// File descriptors the default `max_connections` leaves to everything but clients (the
/// store's files and connections, the journal's pool, RabbitMQ, logs), besides one per
/// callback in flight.
const FD_ROOM: u64 = 256;
/// The default `max_connections` where the open-file limit cannot be read.
const FALLBACK_MAX_CONNECTIONS: usize = 1024;

/// Why a server could not start, or stopped on an error. Each names what failed; the error
/// behind it, when there is one, is its source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The Redis server (`redis`) could not be used; the URL without its credentials.
    #[error("cannot use Redis at {url}")]
    Redis { url: String, source: StoreError },
    /// The Redis Cluster (`redis_cluster`) could not be used; its seeds without credentials.
    #[error("cannot use the Redis Cluster at {seeds}")]
    RedisCluster { seeds: String, source: StoreError },
    /// The embedded store could not be opened (its errors name the directory or file).
    #[error(transparent)]
    Store(StoreError),
    /// The journal (`journal`) could not be opened (its errors name the setting).
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// `listen` could not be bound.
    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// `beanstalk_listen` could not be bound.
    #[error("cannot listen on {addr} (beanstalk_listen)")]
    BeanstalkListen {
        addr: BeanstalkListen,
        source: std::io::Error,
    },
    /// The address bound for `listen` could not be read.
    #[error("cannot read the address bound for {addr}")]
    Bound {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The HTTP server stopped on an error.
    #[error("http server failed")]
    Http(#[source] std::io::Error),
}

/// The parts of one server, wired together (module docs) and not started: [`run`] starts the
/// dispatcher, push delivery and the RabbitMQ bridge beside the HTTP server; tests that drive
/// the router in-process start what they need.
#[derive(Clone)]
pub struct App {
    /// What the HTTP handlers share ([`api::router`]).
    pub state: AppState,
    /// Push delivery of callback and publish jobs.
    pub callbacks: Arc<Deliverer>,
    /// The RabbitMQ bridge (`--amqp`); `None` without it.
    pub amqp: Option<Arc<Broker>>,
}

impl App {
    /// A server over `store`: the store wrapped in its metrics, and every part over the
    /// wrapped store, so long polls, the timer and deliveries are counted too.
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, config: Config) -> App {
        App::with_journal(store, clock, config, None)
    }

    /// [`App::new`] with a journal: the store journaled ([`Journaled`]) inside its metrics,
    /// so a call the journal refuses is counted as a store error.
    pub fn with_journal(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: Config,
        journal: Option<Journal>,
    ) -> App {
        let mut metrics = Metrics::new(store.kind());
        let store: Arc<dyn Store> = match &journal {
            Some(j) => {
                metrics.register_journal(j.gauges());
                Arc::new(Journaled::new(store, j.clone()))
            }
            None => store,
        };
        let metrics = Arc::new(metrics);
        let store: Arc<dyn Store> = Arc::new(Metered::new(store, metrics.clone()));
        let options = DispatchOptions {
            max_waiters: config.max_waiters,
            ..DispatchOptions::default()
        };
        let dispatch = Dispatcher::with_options(store.clone(), clock.clone(), options);
        let amqp = config.amqp.as_ref().map(|url| {
            Broker::new(
                AmqpOptions {
                    url: url.clone(),
                    intake: config.amqp_intake.clone(),
                    publish_timeout: Duration::from_secs(config.amqp_publish_timeout_secs),
                    prefetch: config.amqp_prefetch,
                    max_body_bytes: config.max_body_bytes,
                },
                metrics.clone(),
            )
        });
        let callback_options = DeliveryOptions {
            amqp: amqp.clone(),
            secrets: config.callback_secrets.clone(),
            allow: config.callback_allow.clone(),
            max_in_flight: config.callback_max_in_flight,
            max_in_flight_per_host: config.callback_max_in_flight_per_host,
        };
        // Building the HTTP client fails only without a TLS provider, and the build links
        // rustls with ring (tested in delivery/callback.rs).
        let callbacks = Deliverer::new(
            store.clone(),
            clock.clone(),
            metrics.clone(),
            callback_options,
        )
        .expect("the callback HTTP client builds");
        let scheduler = Arc::new(Scheduler::new(
            store.clone(),
            clock.clone(),
            metrics.clone(),
        ));
        App {
            state: AppState::new(api::Parts {
                store,
                dispatch,
                scheduler,
                clock,
                config: Arc::new(config),
                metrics,
                journal,
            }),
            callbacks: Arc::new(callbacks),
            amqp,
        }
    }
}

/// Runs `delayq serve` with these settings until SIGINT/SIGTERM.
pub async fn serve(config: Config) -> Result<(), ServeError> {
    raise_open_file_limit();
    let store = open_store(&config).await?;
    if config.memory {
        tracing::warn!(
            "jobs are kept in memory only (--memory): every job is lost when this process \
             exits, restarts or crashes"
        );
    }
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bound {
        addr: config.listen,
        source,
    })?;
    let beanstalk = match &config.beanstalk_listen {
        Some(addr) => Some(bind_beanstalk(addr, !config.auth_tokens.is_empty()).await?),
        None => None,
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let journal = open_journal(&config, clock.clone()).await?;
    let worker_threads = tokio::runtime::Handle::current().metrics().num_workers();
    tracing::info!(%addr, store = store.kind(), worker_threads, "delayq listening");
    let app = App::with_journal(store, clock, config, journal);
    // The store is open and the listener bound (connections wait in its backlog until `run`
    // accepts them): a service manager may now start what depends on delayq.
    notify_service_manager(sd_notify::NotifyState::Ready);
    let signalled = shutdown_signal();
    let shutdown = async {
        signalled.await;
        notify_service_manager(sd_notify::NotifyState::Stopping);
    };
    run_with(listener, beanstalk, app, shutdown).await
}

/// Tells systemd (a `Type=notify` unit) that the server is ready or stopping. Does nothing
/// unless systemd set `NOTIFY_SOCKET`; a failure to tell it is logged, not fatal (systemd
/// then times the start out, which says more than a server that refuses to run).
fn notify_service_manager(state: sd_notify::NotifyState<'_>) {
    if let Err(error) = sd_notify::notify(&[state]) {
        tracing::warn!(%error, "cannot notify the service manager (NOTIFY_SOCKET)");
    }
}

/// Binds the beanstalkd listener. Off loopback it warns: the protocol has no authentication.
/// A Unix socket's stale file (a socket, nothing else) is replaced.
async fn bind_beanstalk(
    addr: &BeanstalkListen,
    tokens: bool,
) -> Result<beanstalk::Listener, ServeError> {
    let failed = |source| ServeError::BeanstalkListen {
        addr: addr.clone(),
        source,
    };
    let listener = match addr {
        BeanstalkListen::Tcp(a) => {
            let l = TcpListener::bind(a).await.map_err(failed)?;
            if !a.ip().is_loopback() {
                tracing::warn!(
                    addr = %a,
                    tokens_set = tokens,
                    "the beanstalkd port is open beyond loopback without authentication \
                     (the beanstalkd protocol has none; tokens do not protect it): anyone who \
                     reaches it can put, take and delete jobs; restrict it with a firewall or \
                     use unix:/path"
                );
            }
            beanstalk::Listener::Tcp(l)
        }
        BeanstalkListen::Unix(path) => {
            use std::os::unix::fs::FileTypeExt;
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                std::fs::remove_file(path).map_err(failed)?;
            }
            let l = tokio::net::UnixListener::bind(path).map_err(failed)?;
            beanstalk::Listener::Unix(l, path.clone())
        }
    };
    tracing::info!(%addr, "beanstalkd protocol listening");
    Ok(listener)
}

/// Opens the store the configuration selects: the memory store when `memory` is set, Redis
/// when `redis` is, a Redis Cluster when `redis_cluster` is (the configuration refuses any two
/// of these together), else embedded.
pub async fn open_store(config: &Config) -> Result<Arc<dyn Store>, ServeError> {
    if config.memory {
        return Ok(Arc::new(MemoryStore::new()));
    }
    let redis = |target| RedisOptions {
        target,
        prefix: config.prefix.clone(),
        shards: config.shards,
    };
    match (&config.redis, &config.redis_cluster) {
        (Some(url), _) => {
            let store = RedisStore::connect(redis(RedisTarget::Server(url.clone())))
                .await
                .map_err(|source| ServeError::Redis {
                    url: redact_url(url),
                    source,
                })?;
            Ok(Arc::new(store))
        }
        (None, Some(seeds)) => {
            let store = RedisStore::connect(redis(RedisTarget::Cluster(seeds.clone())))
                .await
                .map_err(|source| {
                    let seeds: Vec<String> = seeds.iter().map(|u| redact_url(u)).collect();
                    ServeError::RedisCluster {
                        seeds: seeds.join(","),
                        source,
                    }
                })?;
            Ok(Arc::new(store))
        }
        (None, None) => {
            let opts = EmbeddedOptions {
                data_dir: config.data_dir.clone(),
                memory_window: config
                    .memory_window_secs
                    .map(std::time::Duration::from_secs),
                checkpoint_every: None,
            };
            let store = EmbeddedStore::open(opts).await.map_err(ServeError::Store)?;
            Ok(Arc::new(store))
        }
    }
}

/// Opens the journal when `journal` is set (its errors name the setting).
pub async fn open_journal(
    config: &Config,
    clock: Arc<dyn Clock>,
) -> Result<Option<Journal>, JournalError> {
    let Some(url) = &config.journal else {
        return Ok(None);
    };
    let retention = Duration::from_secs(config.journal_retention_secs);
    let journal = Journal::open(url, config.journal_mode, retention, clock).await?;
    tracing::info!(mode = %config.journal_mode, "journal open");
    Ok(Some(journal))
}

/// Serves the HTTP app on `listener` with the dispatcher running, until `shutdown` completes;
/// then drains as the module docs say. Returns when the server has stopped.
pub async fn run(
    listener: TcpListener,
    app: App,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    run_with(listener, None, app, shutdown).await
}

/// [`run`], with the beanstalkd front end on `beanstalk` when given (SIGUSR1 puts it in drain
/// mode).
pub async fn run_with(
    listener: TcpListener,
    beanstalk: Option<beanstalk::Listener>,
    app: App,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let App {
        state,
        callbacks,
        amqp,
    } = app;
    let stopping = CancellationToken::new();
    let dispatcher = state.dispatch.start(stopping.clone());
    let callbacks = callbacks.start(stopping.clone());
    let scheduler = state.scheduler.start(stopping.clone());
    let amqp = amqp
        .as_ref()
        .map(|b| b.start(state.store.clone(), state.clock.clone(), stopping.clone()));
    let limits = ConnectionLimits {
        idle_timeout: Duration::from_secs(state.config.idle_timeout_secs),
        max_connections: state
            .config
            .max_connections
            .unwrap_or_else(|| default_max_connections(state.config.callback_max_in_flight as u64)),
    };
    tracing::info!(
        max_connections = limits.max_connections,
        "connection limit set"
    );
    let beanstalk = beanstalk.map(|listener| {
        let front = Beanstalk::new(
            state.store.clone(),
            state.dispatch.clone(),
            state.clock.clone(),
            state.metrics.clone(),
            beanstalk::Options {
                max_job_bytes: state.config.max_body_bytes,
                max_connections: limits.max_connections,
            },
        );
        tokio::spawn(drain_on_sigusr1(front.clone(), stopping.clone()));
        tokio::spawn(front.serve(listener, stopping.clone()))
    });
    let journal = state.journal.clone();
    let store = state.store.clone();
    let app = api::router(state);

    let begin_shutdown = {
        let stopping = stopping.clone();
        async move {
            tokio::select! {
                _ = shutdown => tracing::info!("shutting down: draining requests"),
                _ = stopping.cancelled() => {}
            }
            // Waiting pops answer "nothing" now, so their requests finish.
            stopping.cancel();
        }
    };
    let server = serve_http(listener, app, limits, begin_shutdown);
    let drain_deadline = async {
        stopping.cancelled().await;
        tokio::time::sleep(DRAIN_TIMEOUT).await;
    };
    let served = tokio::select! {
        r = server => r.map_err(ServeError::Http),
        _ = drain_deadline => {
            tracing::warn!(timeout = ?DRAIN_TIMEOUT, "requests still running after the drain timeout; closing them");
            Ok(())
        }
    };
    stopping.cancel();
    // Its connections hand back the jobs they hold: before the dispatcher stops.
    if let Some(beanstalk) = beanstalk
        && tokio::time::timeout(DRAIN_TIMEOUT, beanstalk)
            .await
            .is_err()
    {
        tracing::warn!("beanstalkd connections still open after the drain timeout");
    }
    if tokio::time::timeout(DISPATCH_STOP_TIMEOUT, dispatcher)
        .await
        .is_err()
    {
        tracing::warn!("dispatcher did not stop in time");
    }
    if tokio::time::timeout(DISPATCH_STOP_TIMEOUT * 2, callbacks)
        .await
        .is_err()
    {
        tracing::warn!("callbacks did not stop in time");
    }
    if tokio::time::timeout(DISPATCH_STOP_TIMEOUT, scheduler)
        .await
        .is_err()
    {
        tracing::warn!("the recurring schedules' task did not stop in time");
    }
    if let Some(amqp) = amqp
        && tokio::time::timeout(DISPATCH_STOP_TIMEOUT * 2, amqp)
            .await
            .is_err()
    {
        tracing::warn!("the RabbitMQ bridge did not stop in time");
    }
    // Jobs the store reserved ahead for consumers that did not ask in time go back now.
    store.stop().await;
    if let Some(journal) = journal {
        // In `async` mode, changes acknowledged and not yet journaled are written now.
        match tokio::time::timeout(DRAIN_TIMEOUT, journal.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "journal: not written at shutdown"),
            Err(_) => tracing::warn!("journal: not written within the drain timeout"),
        }
    }
    tracing::info!("stopped");
    served
}

/// Puts the beanstalkd front end in drain mode on each SIGUSR1, as beanstalkd does.
async fn drain_on_sigusr1(front: Arc<Beanstalk>, stopping: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut usr1 = match signal(SignalKind::user_defined1()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGUSR1 (beanstalkd drain mode)");
            return;
        }
    };
    loop {
        tokio::select! {
            got = usr1.recv() => match got {
                Some(()) => front.drain(),
                None => return,
            },
            _ = stopping.cancelled() => return,
        }
    }
}

/// Raises the soft open-file limit to the hard one, as most servers do: each connection holds
/// a file descriptor, and the usual soft limit (1024) is far below what a queue's clients and
/// callbacks may need.
fn raise_open_file_limit() {
    #[cfg(unix)]
    {
        let before = match rlimit::getrlimit(rlimit::Resource::NOFILE) {
            Ok((soft, _)) => soft,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the open-file limit");
                return;
            }
        };
        match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(now) if now > before => {
                tracing::info!(from = before, to = now, "raised the open-file limit")
            }
            Ok(now) => tracing::debug!(limit = now, "open-file limit"),
            Err(e) => {
                tracing::warn!(error = %e, limit = before, "cannot raise the open-file limit")
            }
        }
    }
}

/// The default `max_connections`: the soft open-file limit less [`FD_ROOM`] and one per
/// callback in flight, and at least half the limit.
fn default_max_connections(callback_max_in_flight: u64) -> usize {
    #[cfg(unix)]
    if let Ok((soft, _)) = rlimit::getrlimit(rlimit::Resource::NOFILE) {
        let soft = soft.min(crate::config::MAX_CONNECTIONS_LIMIT);
        let cap = soft
            .saturating_sub(FD_ROOM + callback_max_in_flight)
            .max(soft / 2)
            .max(1);
        return usize::try_from(cap).unwrap_or(FALLBACK_MAX_CONNECTIONS);
    }
    let _ = callback_max_in_flight;
    FALLBACK_MAX_CONNECTIONS
}

/// What [`serve_http`] allows a connection.
#[derive(Clone, Copy, Debug)]
struct ConnectionLimits {
    /// `idle_timeout`: the time to the first request, and hyper's header and ping timeouts.
    idle_timeout: Duration,
    /// `max_connections`, or its default.
    max_connections: usize,
}

/// Accepts connections (at most `limits.max_connections` at once) and serves `app` on each
/// until `shutdown` completes; then stops accepting, asks every connection to close once its
/// current request is answered (idle ones close at once), and returns when all have.
async fn serve_http(
    mut listener: TcpListener,
    app: api::Http,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let idle_timeout = limits.idle_timeout;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(idle_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(idle_timeout)
        .keep_alive_timeout(idle_timeout);
    let builder = Arc::new(builder);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut warned_full: Option<Instant> = None;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // axum's `Listener` retries failed accepts (out of file descriptors, ...) itself.
        let (stream, _peer) = tokio::select! {
            conn = axum::serve::Listener::accept(&mut listener) => conn,
            _ = &mut shutdown => break,
        };
        // At the limit, this connection waits for a slot and the next ones wait in the listen
        // backlog.
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if warned_full.is_none_or(|at| at.elapsed() >= FULL_WARNING_INTERVAL) {
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "connection limit reached: new connections wait until one closes \
                         (raise max_connections, or the open-file limit it follows)"
                    );
                    warned_full = Some(Instant::now());
                }
                tokio::select! {
                    slot = slots.clone().acquire_owned() => {
                        slot.expect("the connection semaphore is never closed")
                    }
                    _ = &mut shutdown => break,
                }
            }
        };
        // Each response goes out as soon as it is written, not held back by Nagle's algorithm
        // until the previous segment is acknowledged.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let asked = Arc::new(AtomicBool::new(false));
        let service = FirstRequest {
            inner: TowerToHyperService::new(app.clone()),
            asked: asked.clone(),
        };
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _slot = slot;
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(watcher.watch(conn));
            let served = tokio::select! {
                r = &mut conn => r,
                _ = tokio::time::sleep(idle_timeout) => {
                    if !asked.load(Ordering::Relaxed) {
                        // Dropping the connection closes it.
                        tracing::debug!("no request within the idle timeout; connection closed");
                        return;
                    }
                    conn.await
                }
            };
            if let Err(e) = served {
                // Client resets, header timeouts: the connection's business, not the server's.
                tracing::debug!(error = %e, "connection closed with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// A connection's service that notes when the connection has made its first request, so the
/// first-request deadline of [`serve_http`] knows whether to close it.
#[derive(Clone)]
struct FirstRequest<S> {
    inner: S,
    asked: Arc<AtomicBool>,
}

impl<S: hyper::service::Service<R>, R> hyper::service::Service<R> for FirstRequest<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, req: R) -> Self::Future {
        self.asked.store(true, Ordering::Relaxed);
        self.inner.call(req)
    }
}

/// Listens for SIGINT (Ctrl-C) and SIGTERM from the moment it is called (not from the first
/// poll: a signal that comes once the server answers, before the task awaiting this is first
/// polled, must still shut it down gracefully); the future completes on either.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = |kind: SignalKind, name: &'static str| match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for {name}");
            None
        }
    };
    let interrupt = listen(SignalKind::interrupt(), "SIGINT");
    let terminate = listen(SignalKind::terminate(), "SIGTERM");
    async move {
        let wait = |s: Option<tokio::signal::unix::Signal>| async move {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = wait(interrupt) => {}
            _ = wait(terminate) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serve_names_the_address_it_cannot_listen_on() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let listen = taken.local_addr().unwrap();
        let dir = tempfile::TempDir::new().unwrap();
        let config = Config {
            listen,
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let err = serve(config).await.unwrap_err();
        assert!(
            format!("{err:#}").contains(&format!("cannot listen on {listen}")),
            "{err:#}"
        );
    }

    #[tokio::test]
    async fn memory_opens_the_memory_store_and_leaves_the_data_dir_alone() {
        let dir = tempfile::TempDir::new().unwrap();
        let data_dir = dir.path().join("data");
        let config = Config {
            memory: true,
            data_dir: data_dir.clone(),
            ..Config::default()
        };
        let store = open_store(&config).await.unwrap();
        assert_eq!(store.kind(), "memory");
        assert!(!data_dir.exists(), "the memory store created {data_dir:?}");
    }
}
