//! A real HTTP server on a loopback port that receives callbacks: it records every request
//! (headers delayq sets, body, arrival time) and answers as the test says, by the request and
//! how many calls of the same job came before it.

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Arrival, in Unix milliseconds (fractional).
    pub at_ms: f64,
    pub path: String,
    /// `webhook-id`.
    pub id: String,
    /// `delayq-attempt`.
    pub attempt: u32,
    pub topic: String,
    pub timestamp: String,
    /// `webhook-signature`, if any.
    pub signature: Option<String>,
    pub content_type: String,
    pub body: Bytes,
}

/// How to answer a request.
#[derive(Debug, Clone)]
pub enum Reply {
    Status(u16),
    /// A status with `Retry-After: <value>`.
    RetryAfter(u16, String),
    /// A status with `Location: <url>`.
    Redirect(u16, String),
    /// Never answer (until the caller gives up).
    Hang,
    /// A status after a wait.
    After(Duration, u16),
}

type Answer = dyn Fn(&Received, usize) -> Reply + Send + Sync;

pub struct Receiver {
    /// `http://127.0.0.1:<port>`; any path is received.
    pub base: String,
    calls: Arc<Mutex<Vec<Received>>>,
    changed: Arc<Notify>,
    /// Requests being answered now, and the most there were at once.
    open: Arc<Mutex<(usize, usize)>>,
    task: tokio::task::JoinHandle<()>,
}

fn header(h: &HeaderMap, name: &str) -> String {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

fn with_header(status: u16, name: &'static str, value: &str) -> Response {
    let mut resp: Response = StatusCode::from_u16(status).unwrap().into_response();
    resp.headers_mut().insert(name, value.parse().unwrap());
    resp
}

impl Receiver {
    /// Starts a receiver answering each request with `answer(request, earlier calls of the
    /// same webhook-id)`.
    pub async fn start(
        answer: impl Fn(&Received, usize) -> Reply + Send + Sync + 'static,
    ) -> Receiver {
        let calls: Arc<Mutex<Vec<Received>>> = Arc::default();
        let changed = Arc::new(Notify::new());
        let answer: Arc<Answer> = Arc::new(answer);
        let open: Arc<Mutex<(usize, usize)>> = Arc::default();
        let app = {
            let calls = calls.clone();
            let changed = changed.clone();
            let open = open.clone();
            Router::new().fallback(
                move |uri: axum::http::Uri, headers: HeaderMap, body: Bytes| {
                    let calls = calls.clone();
                    let changed = changed.clone();
                    let answer = answer.clone();
                    let open = open.clone();
                    async move {
                        {
                            let mut open = open.lock().unwrap();
                            open.0 += 1;
                            open.1 = open.1.max(open.0);
                        }
                        let _closed = Closed(open);
                        let at_ms = SystemTime::now()
                            .duration_since(UNIX_EPOCH)
                            .unwrap()
                            .as_secs_f64()
                            * 1000.0;
                        let r = Received {
                            at_ms,
                            path: uri.path().to_string(),
                            id: header(&headers, "webhook-id"),
                            attempt: header(&headers, "delayq-attempt").parse().unwrap_or(0),
                            topic: header(&headers, "delayq-topic"),
                            timestamp: header(&headers, "webhook-timestamp"),
                            signature: headers
                                .get("webhook-signature")
                                .map(|v| v.to_str().unwrap().to_string()),
                            content_type: header(&headers, "content-type"),
                            body,
                        };
                        let earlier = {
                            let mut calls = calls.lock().unwrap();
                            let n = calls.iter().filter(|c| c.id == r.id).count();
                            calls.push(r.clone());
                            n
                        };
                        changed.notify_waiters();
                        match answer(&r, earlier) {
                            Reply::Status(s) => StatusCode::from_u16(s).unwrap().into_response(),
                            Reply::RetryAfter(s, v) => with_header(s, "retry-after", &v),
                            Reply::Redirect(s, to) => with_header(s, "location", &to),
                            Reply::Hang => {
                                tokio::time::sleep(Duration::from_secs(3600)).await;
                                StatusCode::OK.into_response()
                            }
                            Reply::After(wait, s) => {
                                tokio::time::sleep(wait).await;
                                StatusCode::from_u16(s).unwrap().into_response()
                            }
                        }
                    }
                },
            )
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            base,
            calls,
            changed,
            open,
            task,
        }
    }

    /// The most requests that were being answered at once.
    pub fn most_at_once(&self) -> usize {
        self.open.lock().unwrap().1
    }

    /// Every request so far, in arrival order.
    pub fn calls(&self) -> Vec<Received> {
        self.calls.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests arrived, failing the test after `within`.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.changed.notified();
            let calls = self.calls();
            if calls.len() >= n {
                return calls;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "expected {n} callback requests within {within:?}, got {}: {:?}",
                    calls.len(),
                    calls.iter().map(|c| (&c.id, c.attempt)).collect::<Vec<_>>()
                );
            }
        }
    }
}

/// Counts a request as answered when its handler ends (answered, or dropped by a caller that
/// gave up).
struct Closed(Arc<Mutex<(usize, usize)>>);

impl Drop for Closed {
    fn drop(&mut self) {
        self.0.lock().unwrap().0 -= 1;
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
