//! An HTTP app over a test backend, driven in-process with `tower::ServiceExt::oneshot`
//! (no sockets), for the HTTP suites. The dispatcher's timer and waiter tasks run for the
//! app's lifetime (long polls and delayed jobs work) and stop when it is dropped.

use super::backends::Backend;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use delayq::api::{self, AppState};
use delayq::clock::SystemClock;
use delayq::config::Config;
use delayq::dispatch::Dispatcher;
use delayq::server::{App, ServeError};
use delayq::store::Store;
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Must be created inside a tokio runtime (it spawns the dispatcher's tasks).
pub struct TestApp {
    pub state: AppState,
    pub router: api::Http,
    /// Stops the dispatcher's tasks; cancelled on drop.
    pub shutdown: CancellationToken,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A response: status, content type and body (parsed as JSON when it is JSON, else a string).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub content_type: Option<String>,
    pub json: Value,
    pub raw: Vec<u8>,
}

impl TestApp {
    pub fn new(backend: &Backend) -> TestApp {
        TestApp::with_config(backend, Config::default())
    }

    pub fn with_config(backend: &Backend, config: Config) -> TestApp {
        TestApp::with_store(backend.store.clone(), config)
    }

    /// An app over any store (e.g. one that fails on purpose).
    pub fn with_store(store: Arc<dyn Store>, config: Config) -> TestApp {
        let app = App::new(store, Arc::new(SystemClock), config);
        let shutdown = CancellationToken::new();
        app.state.dispatch.start(shutdown.clone());
        app.callbacks.start(shutdown.clone());
        app.state.scheduler.start(shutdown.clone());
        TestApp {
            router: api::router(app.state.clone()),
            state: app.state,
            shutdown,
        }
    }

    /// Sends raw bytes with an optional content type.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: impl Into<Body>,
        content_type: Option<&str>,
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(ct) = content_type {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        let resp = self
            .router
            .clone()
            .oneshot(req.body(body.into()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let raw = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec();
        let json = serde_json::from_slice(&raw)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&raw).into_owned()));
        Reply {
            status,
            content_type,
            json,
            raw,
        }
    }

    /// Sends a JSON body.
    pub async fn json(&self, method: Method, path: &str, body: Value) -> Reply {
        self.send(method, path, body.to_string(), Some("application/json"))
            .await
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.json(Method::POST, path, body).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, Body::empty(), None).await
    }
}

/// `server::run` over a real loopback socket, for tests of what only a socket shows (graceful
/// shutdown, connection timeouts, the Rust client). Stops when `stop` is sent or dropped.
pub struct LiveServer {
    pub addr: std::net::SocketAddr,
    pub base_url: String,
    pub dispatch: Arc<Dispatcher>,
    pub stop: tokio::sync::oneshot::Sender<()>,
    pub task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl LiveServer {
    pub async fn start(store: Arc<dyn Store>, config: Config) -> LiveServer {
        let app = App::new(store, Arc::new(SystemClock), config);
        let dispatch = app.state.dispatch.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(delayq::server::run(listener, app, async {
            let _ = stopped.await;
        }));
        LiveServer {
            addr,
            base_url: format!("http://{addr}"),
            dispatch,
            stop,
            task,
        }
    }
}
