//! The callback workload's receiver: an HTTP/1.1 server on 127.0.0.1 (hyper, keep-alive, no
//! Nagle) that answers every `POST` with 200 and an empty body at once, and records each call
//! like a consumer records a delivery: the wall clock (µs) when the request's head arrived,
//! against the due time in the body, into a [`Lateness`]; the job's sequence number into the
//! run's [`Ledger`] (lost, duplicates). Calls whose `delayq-attempt` is above 1 are counted
//! apart: with a receiver that always answers 200 they mean a call that timed out or a
//! reservation that ran out.

use crate::body;
use crate::driver::now_us;
use crate::stats::{Lateness, Ledger};
use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What the receiver saw.
pub struct Received {
    pub lateness: Lateness,
    /// Calls whose body was not one of ours.
    pub foreign: u64,
    /// Calls with `delayq-attempt` above 1.
    pub retries: u64,
    /// Connections the server under test opened.
    pub connections: u64,
    /// Unix µs of the last first call of a job.
    pub last_call_us: u64,
}

struct Shared {
    ledger: Arc<Ledger>,
    lateness: Mutex<Lateness>,
    foreign: AtomicU64,
    retries: AtomicU64,
    connections: AtomicU64,
    last_call_us: AtomicU64,
}

/// A running receiver; stopped when dropped.
pub struct Receiver {
    /// The URL jobs are to be called back on.
    pub url: String,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Receiver {
    /// Listens on `listen` (a loopback `host:port`; port 0 picks a free one).
    pub async fn start(listen: &str, ledger: Arc<Ledger>) -> Result<Receiver> {
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("receiver: binding {listen}"))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            ledger,
            lateness: Mutex::new(Lateness::new()),
            foreign: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            last_call_us: AtomicU64::new(0),
        });
        let accept = {
            let shared = shared.clone();
            tokio::spawn(async move {
                // An accept error (e.g. out of descriptors) ends the receiver; the run then
                // reports the jobs it never saw as lost.
                while let Ok((tcp, _)) = listener.accept().await {
                    let _ = tcp.set_nodelay(true);
                    shared.connections.fetch_add(1, Ordering::Relaxed);
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        let service = service_fn(move |req| answer(shared.clone(), req));
                        // A connection the server closes ends here; nothing to report.
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(tcp), service)
                            .await;
                    });
                }
            })
        };
        Ok(Receiver {
            url: format!("http://{addr}/callback"),
            shared,
            accept,
        })
    }

    /// What was received so far.
    pub fn received(&self) -> Received {
        let s = &self.shared;
        Received {
            lateness: s.lateness.lock().expect("not poisoned").clone(),
            foreign: s.foreign.load(Ordering::Relaxed),
            retries: s.retries.load(Ordering::Relaxed),
            connections: s.connections.load(Ordering::Relaxed),
            last_call_us: s.last_call_us.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Records one call and answers 200.
async fn answer(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let at_us = now_us();
    let attempt: u64 = req
        .headers()
        .get("delayq-attempt")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if attempt > 1 {
        shared.retries.fetch_add(1, Ordering::Relaxed);
    }
    match std::str::from_utf8(&body).ok().and_then(body::decode) {
        Some((due_us, seq)) => {
            shared
                .lateness
                .lock()
                .expect("not poisoned")
                .record(at_us, due_us);
            if shared.ledger.deliver(seq) {
                shared.last_call_us.fetch_max(at_us, Ordering::Relaxed);
            }
        }
        None => {
            shared.foreign.fetch_add(1, Ordering::Relaxed);
        }
    }
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::OK;
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_are_answered_200_and_recorded_in_the_ledger() {
        let ledger = Arc::new(Ledger::new(4));
        ledger.ack(2);
        let r = Receiver::start("127.0.0.1:0", ledger.clone())
            .await
            .unwrap();
        let addr = r
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/callback");
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .unwrap();
        tokio::spawn(conn);
        let due_us = now_us();
        for (body, attempt) in [(body::encode(due_us, 2, 30), "1"), ("hello".into(), "2")] {
            let req = Request::post("/callback")
                .header("host", addr)
                .header("delayq-attempt", attempt)
                .body(Full::new(Bytes::from(body)))
                .unwrap();
            let resp = send.send_request(req).await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
        }
        let got = r.received();
        assert_eq!((got.foreign, got.retries, got.connections), (1, 1, 1));
        assert_eq!(got.lateness.late.len(), 1);
        assert!(got.last_call_us >= due_us);
        let a = ledger.account(0);
        assert_eq!((a.acked, a.delivered_unique, a.lost), (1, 1, 0));
    }
}
