//! delayq's two HTTP APIs as bench connections: [`Compat`] (`/push`, `/pop`, `/finish`,
//! `/delete`; one job per request, whole-second delays) and [`V1`] (`/v1/jobs[/batch]`,
//! `/v1/reserve`, `/v1/finish`; batches, ms delays). Each connection owns one keep-alive
//! HTTP/1.1 connection ([`Http`], hyper's low-level client): no pool, no per-request URL
//! parsing, so the load generator spends as little CPU as it can on the client side. Requests
//! are serialised with serde from borrowed structs; responses are parsed into the few fields the
//! bench needs.

use super::{Delivered, Due, Endpoint, NewJob, due_secs, now_ms};
use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// Request timeout beyond any long-poll the bench asks for.
const SLACK: Duration = Duration::from_secs(30);

/// How long opening a TCP connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The fixed request paths, parsed once per connection.
struct Paths {
    push: Uri,
    pop: Uri,
    finish: Uri,
    delete: Uri,
    v1_jobs: Uri,
    v1_batch: Uri,
    v1_reserve: Uri,
    v1_finish: Uri,
}

impl Paths {
    fn new() -> Paths {
        Paths {
            push: Uri::from_static("/push"),
            pop: Uri::from_static("/pop"),
            finish: Uri::from_static("/finish"),
            delete: Uri::from_static("/delete"),
            v1_jobs: Uri::from_static("/v1/jobs"),
            v1_batch: Uri::from_static("/v1/jobs/batch"),
            v1_reserve: Uri::from_static("/v1/reserve"),
            v1_finish: Uri::from_static("/v1/finish"),
        }
    }
}

/// `/v1/jobs/{id}{suffix}`, the id percent-encoded (all but RFC 3986 unreserved bytes).
fn job_path(id: &str, suffix: &str) -> Result<Uri> {
    let mut p = String::with_capacity(9 + id.len() + suffix.len());
    p.push_str("/v1/jobs/");
    for &b in id.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            p.push(b as char);
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            p.push('%');
            p.push(HEX[(b >> 4) as usize] as char);
            p.push(HEX[(b & 15) as usize] as char);
        }
    }
    p.push_str(suffix);
    Ok(Uri::try_from(p)?)
}

/// Opens a TCP connection to `addr` (no Nagle) and an HTTP/1.1 connection over it; the
/// connection's driver runs as its own task and ends when the connection closes.
async fn open(addr: &str) -> Result<SendRequest<Full<Bytes>>> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| anyhow!("connecting to {addr}: timed out"))?
        .with_context(|| format!("connecting to {addr}"))?;
    tcp.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(tcp))
        .await
        .with_context(|| format!("HTTP handshake with {addr}"))?;
    tokio::spawn(async move {
        // Its errors reach the request that was in flight; nothing to add here.
        let _ = conn.await;
    });
    Ok(sender)
}

/// One keep-alive HTTP/1.1 connection, one request at a time.
pub struct Http {
    ep: Arc<Endpoint>,
    paths: Paths,
    /// `None` after a failed or timed-out request: the next request opens a fresh connection.
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Http {
    async fn connect(ep: Arc<Endpoint>) -> Result<Http> {
        let sender = open(&ep.addr).await?;
        Ok(Http {
            ep,
            paths: Paths::new(),
            sender: Some(sender),
        })
    }

    /// `POST uri` with a JSON `body` (see [`json`]).
    async fn post(
        &mut self,
        uri: Uri,
        body: Vec<u8>,
        wait: Duration,
    ) -> Result<(StatusCode, Bytes)> {
        self.send(Method::POST, uri, Some(Bytes::from(body)), wait)
            .await
    }

    /// Sends one request and reads the whole response, within `wait + SLACK`.
    ///
    /// When the connection is found closed before the request is written (the server closed
    /// an idle connection, or an earlier request failed), it is reopened once and the request
    /// sent there. A request that fails after it may have reached the server is not sent again
    /// (a second `/push` would come back "exists"): the error is returned and the next request
    /// opens a fresh connection.
    async fn send(
        &mut self,
        method: Method,
        uri: Uri,
        body: Option<Bytes>,
        wait: Duration,
    ) -> Result<(StatusCode, Bytes)> {
        let what = (method.clone(), uri.clone());
        let has_body = body.is_some();
        let mut req = Request::new(Full::new(body.unwrap_or_default()));
        *req.method_mut() = method;
        *req.uri_mut() = uri;
        let headers = req.headers_mut();
        headers.insert(HOST, self.ep.host.clone());
        if has_body {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let addr = self.ep.addr.as_str();
        let slot = &mut self.sender;
        let exchange = async move {
            let (mut sender, mut fresh) = match slot.take() {
                Some(s) if !s.is_closed() => (s, false),
                _ => (open(addr).await?, true),
            };
            let resp = loop {
                match sender.ready().await {
                    Ok(()) => match sender.try_send_request(req).await {
                        Ok(resp) => break resp,
                        Err(mut e) => match e.take_message() {
                            // Never written to the connection: safe to send on a fresh one.
                            Some(r) if !fresh => req = r,
                            _ => return Err(anyhow::Error::from(e.into_error())),
                        },
                    },
                    Err(e) if fresh => return Err(e.into()),
                    Err(_) => {}
                }
                sender = open(addr).await?;
                fresh = true;
            };
            let status = resp.status();
            let body = resp.into_body().collect().await?.to_bytes();
            *slot = Some(sender);
            Ok((status, body))
        };
        match tokio::time::timeout(wait + SLACK, exchange).await {
            Ok(r) => r.with_context(|| format!("{} {}", what.0, what.1)),
            Err(_) => Err(anyhow!(
                "{} {}: no response within {:?}",
                what.0,
                what.1,
                wait + SLACK
            )),
        }
    }
}

/// A request body as JSON.
fn json<T: Serialize + ?Sized>(body: &T) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(body)?)
}

fn refused(path: &str, status: StatusCode, body: &[u8]) -> anyhow::Error {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    anyhow::anyhow!("{path}: HTTP {status}: {text}")
}

// ---------- compat API ----------

#[derive(Serialize)]
struct CompatPush<'a> {
    topic: &'a str,
    id: &'a str,
    delay: u64,
    ttr: u64,
    body: &'a str,
}

#[derive(Serialize)]
struct CompatPop<'a> {
    topic: &'a str,
    timeout: u64,
}

#[derive(Serialize)]
struct CompatId<'a> {
    id: &'a str,
}

#[derive(Deserialize)]
struct CompatResponse {
    code: serde_json::Value,
    #[serde(default)]
    message: String,
    #[serde(default)]
    data: Option<CompatJob>,
}

#[derive(Deserialize)]
struct CompatJob {
    id: String,
    #[serde(default)]
    body: String,
}

fn compat_ok(path: &str, status: StatusCode, body: &[u8]) -> Result<CompatResponse> {
    if !status.is_success() {
        return Err(refused(path, status, body));
    }
    let r: CompatResponse = serde_json::from_slice(body).map_err(|e| {
        anyhow::anyhow!(
            "{path}: bad response ({e}): {}",
            String::from_utf8_lossy(body)
        )
    })?;
    if r.code != serde_json::json!(0) {
        bail!("{path}: code {} {}", r.code, r.message);
    }
    Ok(r)
}

/// A connection to the compat API.
pub struct Compat {
    http: Http,
}

impl Compat {
    pub async fn connect(ep: Arc<Endpoint>) -> Result<Compat> {
        Ok(Compat {
            http: Http::connect(ep).await?,
        })
    }

    /// One `/push` per job (the compat API has no batch).
    pub async fn push(&mut self, jobs: &[NewJob]) -> Result<Vec<bool>> {
        let mut acked = Vec::with_capacity(jobs.len());
        for j in jobs {
            let ep = &self.http.ep;
            let req = CompatPush {
                topic: &ep.topic,
                id: &j.id,
                delay: due_secs(j.due, now_ms()),
                ttr: ep.ttr_s,
                body: &j.body,
            };
            let uri = self.http.paths.push.clone();
            let (st, b) = self.http.post(uri, json(&req)?, Duration::ZERO).await?;
            compat_ok("/push", st, &b)?;
            acked.push(true);
        }
        Ok(acked)
    }

    /// `/pop` with `timeout` in whole seconds (at least 1, so an idle consumer does not spin).
    pub async fn reserve(&mut self, timeout_ms: u64) -> Result<Vec<Delivered>> {
        let timeout = timeout_ms.div_ceil(1000).max(1);
        let req = CompatPop {
            topic: &self.http.ep.topic,
            timeout,
        };
        let uri = self.http.paths.pop.clone();
        let (st, b) = self
            .http
            .post(uri, json(&req)?, Duration::from_secs(timeout))
            .await?;
        let r = compat_ok("/pop", st, &b)?;
        Ok(r.data
            .map(|j| Delivered {
                handle: j.id,
                body: j.body,
            })
            .into_iter()
            .collect())
    }

    pub async fn finish(&mut self, ids: &[String]) -> Result<()> {
        for id in ids {
            let uri = self.http.paths.finish.clone();
            let (st, b) = self
                .http
                .post(uri, json(&CompatId { id })?, Duration::ZERO)
                .await?;
            compat_ok("/finish", st, &b)?;
        }
        Ok(())
    }

    pub async fn delete(&mut self, ids: &[String]) -> Result<u64> {
        for id in ids {
            let uri = self.http.paths.delete.clone();
            let (st, b) = self
                .http
                .post(uri, json(&CompatId { id })?, Duration::ZERO)
                .await?;
            compat_ok("/delete", st, &b)?;
        }
        Ok(ids.len() as u64)
    }
}

// ---------- /v1 API ----------

#[derive(Serialize)]
struct V1NewJob<'a> {
    topic: &'a str,
    id: &'a str,
    body: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttr_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    callback: Option<V1Callback<'a>>,
}

#[derive(Serialize)]
struct V1Callback<'a> {
    url: &'a str,
    timeout_ms: u64,
}

#[derive(Serialize)]
struct V1Batch<'a> {
    jobs: Vec<V1NewJob<'a>>,
}

#[derive(Deserialize)]
struct V1BatchResults {
    results: Vec<V1PushResult>,
}

#[derive(Deserialize)]
struct V1PushResult {
    status: String,
}

#[derive(Serialize)]
struct V1Reserve<'a> {
    topics: [&'a str; 1],
    max: usize,
    timeout_ms: u64,
    /// Jobs finished before the reserve, in the same request.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    finish: &'a [String],
}

#[derive(Deserialize)]
struct V1Jobs {
    jobs: Vec<V1Job>,
}

#[derive(Deserialize)]
struct V1Job {
    id: String,
    #[serde(default)]
    body: String,
}

#[derive(Serialize)]
struct V1Ids<'a> {
    ids: &'a [String],
}

#[derive(Deserialize)]
struct V1Finished {
    finished: u64,
}

/// A connection to the /v1 API.
pub struct V1 {
    http: Http,
    /// Whether `POST /v1/finish` removed delayed jobs the last time cleanup tried it; when it
    /// does not, cleanup deletes one id at a time.
    batch_delete_works: Option<bool>,
}

impl V1 {
    pub async fn connect(ep: Arc<Endpoint>) -> Result<V1> {
        Ok(V1 {
            http: Http::connect(ep).await?,
            batch_delete_works: None,
        })
    }

    fn job<'a>(ep: &'a Endpoint, j: &'a NewJob) -> V1NewJob<'a> {
        let (delay_ms, run_at_ms) = match j.due {
            Due::DelayMs(d) => (Some(d), None),
            Due::RunAtMs(t) => (None, Some(t)),
        };
        V1NewJob {
            topic: &ep.topic,
            id: &j.id,
            body: &j.body,
            delay_ms,
            run_at_ms,
            ttr_ms: ep.callback.is_none().then_some(ep.ttr_s * 1000),
            callback: ep.callback.as_ref().map(|cb| V1Callback {
                url: &cb.url,
                timeout_ms: cb.timeout_ms,
            }),
        }
    }

    /// `POST /v1/jobs` for one job, `POST /v1/jobs/batch` for more.
    pub async fn push(&mut self, jobs: &[NewJob]) -> Result<Vec<bool>> {
        let ep = &self.http.ep;
        if jobs.len() == 1 {
            let uri = self.http.paths.v1_jobs.clone();
            let req = V1::job(ep, &jobs[0]);
            let (st, b) = self.http.post(uri, json(&req)?, Duration::ZERO).await?;
            if !st.is_success() {
                return Err(refused("/v1/jobs", st, &b));
            }
            return Ok(vec![true]);
        }
        let req = V1Batch {
            jobs: jobs.iter().map(|j| V1::job(ep, j)).collect(),
        };
        let uri = self.http.paths.v1_batch.clone();
        let (st, b) = self.http.post(uri, json(&req)?, Duration::ZERO).await?;
        if !st.is_success() {
            return Err(refused("/v1/jobs/batch", st, &b));
        }
        let r: V1BatchResults = serde_json::from_slice(&b)?;
        if r.results.len() != jobs.len() {
            bail!(
                "/v1/jobs/batch: {} results for {} jobs",
                r.results.len(),
                jobs.len()
            );
        }
        Ok(r.results.iter().map(|x| x.status != "exists").collect())
    }

    /// `method path` without a body (the listing workload's GETs, a bury): the response body
    /// of a 2xx, an error otherwise.
    pub async fn request(&mut self, method: &str, path: &str) -> Result<Bytes> {
        let m = Method::from_bytes(method.as_bytes())?;
        let uri: Uri = path.parse().with_context(|| format!("path {path}"))?;
        let (st, b) = self.http.send(m, uri, None, Duration::ZERO).await?;
        if !st.is_success() {
            return Err(refused(path, st, &b));
        }
        Ok(b)
    }

    /// `method path` with a JSON `body` (the schedules workload's `PUT /v1/schedules/{id}`):
    /// the response body of a 2xx, an error otherwise.
    pub async fn request_json<T: Serialize + ?Sized>(
        &mut self,
        method: &str,
        path: &str,
        body: &T,
    ) -> Result<Bytes> {
        let m = Method::from_bytes(method.as_bytes())?;
        let uri: Uri = path.parse().with_context(|| format!("path {path}"))?;
        let body = Some(Bytes::from(json(body)?));
        let (st, b) = self.http.send(m, uri, body, Duration::ZERO).await?;
        if !st.is_success() {
            return Err(refused(path, st, &b));
        }
        Ok(b)
    }

    pub async fn reserve(&mut self, max: usize, timeout_ms: u64) -> Result<Vec<Delivered>> {
        self.finish_and_reserve(&[], max, timeout_ms).await
    }

    /// `POST /v1/reserve`, finishing `finish` first in the same request.
    pub async fn finish_and_reserve(
        &mut self,
        finish: &[String],
        max: usize,
        timeout_ms: u64,
    ) -> Result<Vec<Delivered>> {
        let req = V1Reserve {
            topics: [&self.http.ep.topic],
            max: max.max(1),
            timeout_ms,
            finish,
        };
        let uri = self.http.paths.v1_reserve.clone();
        let (st, b) = self
            .http
            .post(uri, json(&req)?, Duration::from_millis(timeout_ms))
            .await?;
        if !st.is_success() {
            return Err(refused("/v1/reserve", st, &b));
        }
        let r: V1Jobs = serde_json::from_slice(&b)?;
        Ok(r.jobs
            .into_iter()
            .map(|j| Delivered {
                handle: j.id,
                body: j.body,
            })
            .collect())
    }

    /// `POST /v1/jobs/{id}/finish` for one id, `POST /v1/finish` for more.
    pub async fn finish(&mut self, ids: &[String]) -> Result<()> {
        if ids.len() == 1 {
            let uri = job_path(&ids[0], "/finish")?;
            let (st, b) = self
                .http
                .send(
                    Method::POST,
                    uri,
                    Some(Bytes::from_static(b"{}")),
                    Duration::ZERO,
                )
                .await?;
            if !st.is_success() {
                return Err(refused(&format!("/v1/jobs/{}/finish", ids[0]), st, &b));
            }
            return Ok(());
        }
        self.finish_batch(ids).await
    }

    /// `POST /v1/finish`, whatever the number of ids: an id already finished is reported
    /// missing, not refused.
    pub async fn finish_batch(&mut self, ids: &[String]) -> Result<()> {
        let uri = self.http.paths.v1_finish.clone();
        let (st, b) = self
            .http
            .post(uri, json(&V1Ids { ids })?, Duration::ZERO)
            .await?;
        if !st.is_success() {
            return Err(refused("/v1/finish", st, &b));
        }
        Ok(())
    }

    /// Cleanup: `POST /v1/finish` with all ids when it removes delayed jobs, else
    /// `DELETE /v1/jobs/{id}` one at a time.
    pub async fn delete(&mut self, ids: &[String]) -> Result<u64> {
        if ids.len() > 1 && self.batch_delete_works != Some(false) {
            let uri = self.http.paths.v1_finish.clone();
            let (st, b) = self
                .http
                .post(uri, json(&V1Ids { ids })?, Duration::ZERO)
                .await?;
            if st.is_success()
                && let Ok(r) = serde_json::from_slice::<V1Finished>(&b)
                && r.finished > 0
            {
                self.batch_delete_works = Some(true);
                return Ok(r.finished);
            }
            self.batch_delete_works = Some(false);
        }
        let mut removed = 0;
        for id in ids {
            let uri = job_path(id, "")?;
            let (st, b) = self
                .http
                .send(Method::DELETE, uri, None, Duration::ZERO)
                .await?;
            if st.is_success() {
                removed += 1;
            } else if st != StatusCode::NOT_FOUND {
                return Err(refused("DELETE /v1/jobs/{id}", st, &b));
            }
        }
        Ok(removed)
    }

    /// How cleanup deleted, once it has: `Some(true)` batch, `Some(false)` per id.
    pub fn batch_delete(&self) -> Option<bool> {
        self.batch_delete_works
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{Due, Protocol};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn job_paths_percent_encode_ids() {
        assert_eq!(
            job_path("ab-12_x.~", "/finish").unwrap().path(),
            "/v1/jobs/ab-12_x.~/finish"
        );
        assert_eq!(job_path("a b/c", "").unwrap().path(), "/v1/jobs/a%20b%2Fc");
    }

    /// A server that answers each connection's first request with a compat-API success and
    /// `connection: close`, then closes it; returns its address and the connections it took.
    async fn closing_server() -> (String, Arc<std::sync::atomic::AtomicU64>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let a = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                a.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // Headers, then the body its content-length announces.
                    loop {
                        let n = s.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf).to_lowercase();
                        if let Some(end) = text.find("\r\n\r\n") {
                            let len = text
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .map(|v| v.trim().parse::<usize>().unwrap())
                                .unwrap_or(0);
                            if buf.len() >= end + 4 + len {
                                break;
                            }
                        }
                    }
                    let body = r#"{"code":0,"message":"ok"}"#;
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(resp.as_bytes()).await;
                });
            }
        });
        (addr, accepted)
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_reopened_before_sending() {
        let (addr, accepted) = closing_server().await;
        let ep = Endpoint::new(Protocol::Compat, &addr, "t", 60).unwrap();
        let mut c = Compat::connect(ep).await.unwrap();
        for i in 0..3 {
            let job = NewJob {
                id: format!("j{i}"),
                due: Due::DelayMs(0),
                body: "b".into(),
            };
            assert_eq!(c.push(&[job]).await.unwrap(), vec![true]);
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::Relaxed), 3);
    }
}
