//! An async client for delayq's /v1 HTTP API (docs/api.md): one method per endpoint, serde types
//! that mirror the JSON, and refusals parsed into [`ClientError::Api`].
//!
//! What it does not do: retry, pool across servers, validate input (the server does, and says
//! which field is wrong), or speak the compat API. It does not depend on the `delayq`
//! crate, so a producer or consumer can use it without pulling in the server. Plain `http://`
//! only for now: it is built without TLS.
//!
//! ```no_run
//! # async fn demo() -> Result<(), delayq_client::ClientError> {
//! use delayq_client::{Client, NewJob};
//! let client = Client::new("http://127.0.0.1:9277")?;
//! let job = client.push(NewJob::new("orders", r#"{"order":42}"#).delay_ms(15_000)).await?;
//! for job in client.reserve(["orders"], 10, 30_000).await? {
//!     // ... work ...
//!     client.finish(&job.id).await?;
//! }
//! # let _ = job; Ok(()) }
//! ```

mod error;
mod types;

pub use error::ClientError;
pub use types::{
    BackedUp, Callback, FinishResult, Health, Job, JobState, JobTemplate, NewJob, NewSchedule,
    PushResult, PushStatus, Readiness, Reschedule, Rescheduled, Restored, Schedule, SchedulesPage,
    SettingsChange, Stats, TopicSettings, TopicStats,
};

use reqwest::{Method, RequestBuilder, Url};
use serde::de::DeserializeOwned;
use std::time::Duration;
use types::{
    BackupRequest, FinishBatchRequest, KickTopicRequest, KickTopicResponse, PushBatchRequest,
    PushBatchResponse, ReleaseRequest, ReserveRequest, ReserveResponse, RestoreRequest,
};

/// How long an ordinary request may take, end to end, unless [`Client::with_timeout`] says
/// otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a restore may take: one of millions of jobs takes minutes.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(3600);

/// How long a backup may take: the copy of millions of jobs takes a while.
const BACKUP_TIMEOUT: Duration = Duration::from_secs(3600);

/// How long connecting may take; a server that does not accept within this is down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A handle on one delayq server. Cheap to clone; clones share the connection pool.
#[derive(Debug, Clone)]
pub struct Client {
    /// Sent as `Authorization: Bearer ...` on every request when set: a server with
    /// `auth_tokens` refuses requests without it (401 `unauthorized`).
    token: Option<Token>,
    http: reqwest::Client,
    /// The server's base URL; endpoint paths are appended to its path, so a server mounted
    /// under a prefix (`http://host/delayq/`) works.
    base: Url,
    /// Time limit of each request. A reserve that long-polls gets its `timeout_ms` on top, so
    /// the wait itself never trips it.
    timeout: Duration,
}

type Result<T, E = ClientError> = std::result::Result<T, E>;

/// A bearer token, hidden from `Debug`.
#[derive(Clone)]
struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

impl Client {
    /// A client for the server at `base_url`, e.g. `http://127.0.0.1:9277`.
    pub fn new(base_url: &str) -> Result<Client> {
        // `host:port` or a bare host: a server address without its scheme, not a URL of
        // another kind (`unix:/path`).
        let bare_address = !base_url.contains("://")
            && base_url.split_once(':').is_none_or(|(_, port)| {
                let port = port.trim_end_matches('/');
                !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
            });
        if bare_address {
            return Err(ClientError::InvalidUrl(format!(
                "{base_url:?} has no scheme: use \"http://{base_url}\""
            )));
        }
        let base = Url::parse(base_url)
            .map_err(|e| ClientError::InvalidUrl(format!("{base_url:?}: {e}")))?;
        match base.scheme() {
            "http" => {}
            "https" => {
                return Err(ClientError::InvalidUrl(format!(
                    "{base_url:?}: https is not supported by this build (no TLS); use http://"
                )));
            }
            other => {
                return Err(ClientError::InvalidUrl(format!(
                    "{base_url:?}: scheme {other:?} is not http"
                )));
            }
        }
        if base.cannot_be_a_base() || base.host().is_none() {
            return Err(ClientError::InvalidUrl(format!(
                "{base_url:?}: expected http://HOST:PORT"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(ClientError::transport)?;
        Ok(Client {
            token: None,
            http,
            base,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Sets the time limit of each request (default [`DEFAULT_TIMEOUT`]). A reserve's own
    /// `timeout_ms` is added to it.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// Sends `token` as `Authorization: Bearer <token>` on every request, for a server that
    /// requires authentication. The token never appears in this client's `Debug` output or
    /// errors; over plain `http://` it does cross the network in clear.
    pub fn with_token(mut self, token: impl Into<String>) -> Client {
        self.token = Some(Token(token.into()));
        self
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &Url {
        &self.base
    }

    /// `POST /v1/jobs`: pushes one job and returns it as stored (201).
    pub async fn push(&self, job: NewJob) -> Result<Job> {
        self.call(self.request(Method::POST, &["v1", "jobs"]).json(&job))
            .await
    }

    /// `POST /v1/jobs/batch`: pushes several jobs; one result per job, in order. With `replace`,
    /// existing ids are replaced; without it they are reported as [`PushStatus::Exists`].
    pub async fn push_batch(&self, jobs: Vec<NewJob>, replace: bool) -> Result<Vec<PushResult>> {
        let body = PushBatchRequest {
            jobs: &jobs,
            replace,
        };
        let r: PushBatchResponse = self
            .call(
                self.request(Method::POST, &["v1", "jobs", "batch"])
                    .json(&body),
            )
            .await?;
        Ok(r.results)
    }

    /// `GET /v1/jobs/{id}`.
    pub async fn get(&self, id: &str) -> Result<Job> {
        self.call(self.request(Method::GET, &["v1", "jobs", id]))
            .await
    }

    /// `DELETE /v1/jobs/{id}`: removes the job, whatever its state.
    pub async fn delete(&self, id: &str) -> Result<()> {
        self.call_empty(self.request(Method::DELETE, &["v1", "jobs", id]))
            .await
    }

    /// `POST /v1/jobs/{id}/finish`: the job is done and removed.
    pub async fn finish(&self, id: &str) -> Result<()> {
        self.call_empty(self.request(Method::POST, &["v1", "jobs", id, "finish"]))
            .await
    }

    /// `POST /v1/finish`: finishes several jobs; ids that name no job are listed in `missing`.
    pub async fn finish_batch<I, S>(&self, ids: I) -> Result<FinishResult>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let ids: Vec<String> = ids.into_iter().map(Into::into).collect();
        self.call(
            self.request(Method::POST, &["v1", "finish"])
                .json(&FinishBatchRequest { ids: &ids }),
        )
        .await
    }

    /// `POST /v1/jobs/{id}/release`: gives a reserved job back, ready at once or after
    /// `delay_ms` (without it, the job's backoff schedule applies).
    pub async fn release(&self, id: &str, delay_ms: Option<u64>) -> Result<Job> {
        self.call(
            self.request(Method::POST, &["v1", "jobs", id, "release"])
                .json(&ReleaseRequest { delay_ms }),
        )
        .await
    }

    /// `POST /v1/jobs/{id}/touch`: extends a reservation by the job's TTR.
    pub async fn touch(&self, id: &str) -> Result<Job> {
        self.call(self.request(Method::POST, &["v1", "jobs", id, "touch"]))
            .await
    }

    /// `POST /v1/jobs/{id}/bury`: moves the job to `dead`.
    pub async fn bury(&self, id: &str) -> Result<Job> {
        self.call(self.request(Method::POST, &["v1", "jobs", id, "bury"]))
            .await
    }

    /// `POST /v1/jobs/{id}/kick`: makes a dead job ready again.
    pub async fn kick(&self, id: &str) -> Result<Job> {
        self.call(self.request(Method::POST, &["v1", "jobs", id, "kick"]))
            .await
    }

    /// `POST /v1/topics/{topic}/kick`: makes up to `max` dead jobs of the topic ready; returns
    /// how many.
    pub async fn kick_topic(&self, topic: &str, max: u64) -> Result<u64> {
        let r: KickTopicResponse = self
            .call(
                self.request(Method::POST, &["v1", "topics", topic, "kick"])
                    .json(&KickTopicRequest { max }),
            )
            .await?;
        Ok(r.kicked)
    }

    /// `POST /v1/jobs/{id}/reschedule`: changes the due time (and optionally body and priority)
    /// of a delayed or ready job. Returns the job and the state it was in before.
    pub async fn reschedule(&self, id: &str, change: Reschedule) -> Result<(Job, JobState)> {
        let r: Rescheduled = self
            .call(
                self.request(Method::POST, &["v1", "jobs", id, "reschedule"])
                    .json(&change),
            )
            .await?;
        Ok((r.job, r.previous_state))
    }

    /// `POST /v1/reserve`: up to `max` ready jobs from `topics` (preferred in that order),
    /// waiting up to `timeout_ms` when none is ready. An empty answer means nothing became
    /// ready in time.
    pub async fn reserve<I, S>(&self, topics: I, max: u32, timeout_ms: u64) -> Result<Vec<Job>>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let (_, jobs) = self
            .finish_and_reserve(std::iter::empty::<String>(), topics, max, timeout_ms)
            .await?;
        Ok(jobs)
    }

    /// `POST /v1/reserve` with `finish`: finishes the jobs `finish` names (as
    /// [`Client::finish_batch`]), then reserves as [`Client::reserve`], in one request: a
    /// consumer's loop takes one round trip per batch instead of two.
    pub async fn finish_and_reserve<F, A, I, S>(
        &self,
        finish: F,
        topics: I,
        max: u32,
        timeout_ms: u64,
    ) -> Result<(FinishResult, Vec<Job>)>
    where
        F: IntoIterator<Item = A>,
        A: Into<String>,
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let finish: Vec<String> = finish.into_iter().map(Into::into).collect();
        let topics: Vec<String> = topics.into_iter().map(Into::into).collect();
        let body = ReserveRequest {
            topics: &topics,
            max,
            timeout_ms,
            finish: &finish,
        };
        let r: ReserveResponse = self
            .call(
                self.request(Method::POST, &["v1", "reserve"])
                    .json(&body)
                    .timeout(self.timeout + Duration::from_millis(timeout_ms)),
            )
            .await?;
        let finished = FinishResult {
            finished: r.finished,
            missing: r.missing,
        };
        Ok((finished, r.jobs))
    }

    /// `POST /v1/restore`: puts back the journaled jobs the server's store lost (all, or the
    /// job `id`); overdue ones are left out with `skip_overdue`. Waits as long as the restore
    /// takes, whatever [`Client::with_timeout`] says.
    pub async fn restore(&self, skip_overdue: bool, id: Option<&str>) -> Result<Restored> {
        let body = RestoreRequest {
            overdue: if skip_overdue { "skip" } else { "fire" },
            id,
        };
        let req = self
            .request(Method::POST, &["v1", "restore"])
            .timeout(RESTORE_TIMEOUT)
            .json(&body);
        self.call(req).await
    }

    /// `POST /v1/backup`: an online backup of the server's embedded store into `dir`, a new or
    /// empty directory under the server's `backup_dir` (relative to it, or absolute inside
    /// it). Waits as long as the copy takes, whatever [`Client::with_timeout`] says.
    pub async fn backup(&self, dir: &str) -> Result<BackedUp> {
        let req = self
            .request(Method::POST, &["v1", "backup"])
            .timeout(BACKUP_TIMEOUT)
            .json(&BackupRequest { dir });
        self.call(req).await
    }

    /// `GET /v1/stats`: job counts per topic and state.
    pub async fn stats(&self) -> Result<Stats> {
        self.call(self.request(Method::GET, &["v1", "stats"])).await
    }

    /// `GET /v1/topics/{topic}/settings`: the topic's flow control in force.
    pub async fn settings(&self, topic: &str) -> Result<TopicSettings> {
        self.call(self.request(Method::GET, &["v1", "topics", topic, "settings"]))
            .await
    }

    /// `PUT /v1/topics/{topic}/settings`: changes the topic's flow control as `change` says;
    /// returns the settings now in force.
    pub async fn set_settings(
        &self,
        topic: &str,
        change: &SettingsChange,
    ) -> Result<TopicSettings> {
        self.call(
            self.request(Method::PUT, &["v1", "topics", topic, "settings"])
                .json(change),
        )
        .await
    }

    /// `GET /healthz`: the process is alive.
    pub async fn health(&self) -> Result<Health> {
        self.call(self.request(Method::GET, &["healthz"])).await
    }

    /// `GET /readyz`: the store is reachable. A 503 is an [`ClientError::Api`] error.
    pub async fn ready(&self) -> Result<Readiness> {
        self.call(self.request(Method::GET, &["readyz"])).await
    }

    /// `PUT /v1/schedules/{id}`: creates or replaces a recurring schedule; the schedule as
    /// stored, with its next runs.
    pub async fn put_schedule(&self, id: &str, schedule: &NewSchedule) -> Result<Schedule> {
        self.call(
            self.request(Method::PUT, &["v1", "schedules", id])
                .json(schedule),
        )
        .await
    }

    /// `GET /v1/schedules/{id}`.
    pub async fn get_schedule(&self, id: &str) -> Result<Schedule> {
        self.call(self.request(Method::GET, &["v1", "schedules", id]))
            .await
    }

    /// `GET /v1/schedules`: one page of the schedules, by id, after `cursor`.
    pub async fn list_schedules(&self, limit: u64, cursor: Option<&str>) -> Result<SchedulesPage> {
        let mut url = self.url(&["v1", "schedules"]);
        url.query_pairs_mut()
            .append_pair("limit", &limit.to_string());
        if let Some(c) = cursor {
            url.query_pairs_mut().append_pair("cursor", c);
        }
        self.call(self.request_to(Method::GET, url)).await
    }

    /// `DELETE /v1/schedules/{id}` (the jobs it pushed stay).
    pub async fn delete_schedule(&self, id: &str) -> Result<()> {
        self.call_empty(self.request(Method::DELETE, &["v1", "schedules", id]))
            .await
    }

    /// `POST /v1/schedules/{id}/pause`.
    pub async fn pause_schedule(&self, id: &str) -> Result<Schedule> {
        self.call(self.request(Method::POST, &["v1", "schedules", id, "pause"]))
            .await
    }

    /// `POST /v1/schedules/{id}/resume`.
    pub async fn resume_schedule(&self, id: &str) -> Result<Schedule> {
        self.call(self.request(Method::POST, &["v1", "schedules", id, "resume"]))
            .await
    }

    /// The URL of an endpoint: the base URL's path plus `segments`, each percent-encoded as
    /// one path segment (ids may hold spaces, `/` or `?`).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.set_query(None);
        url.set_fragment(None);
        url.path_segments_mut()
            .expect("checked in Client::new: the base URL can be a base")
            .pop_if_empty()
            .extend(segments);
        url
    }

    fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        self.request_to(method, self.url(segments))
    }

    fn request_to(&self, method: Method, url: Url) -> RequestBuilder {
        let req = self.http.request(method, url).timeout(self.timeout);
        match &self.token {
            // reqwest marks the header sensitive.
            Some(Token(token)) => req.bearer_auth(token),
            None => req,
        }
    }

    /// Sends a request and returns the raw body of a success, or the refusal as an error.
    async fn send(&self, req: RequestBuilder) -> Result<Vec<u8>> {
        let resp = req.send().await.map_err(ClientError::transport)?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(ClientError::transport)?;
        if !status.is_success() {
            return Err(ClientError::from_response(status.as_u16(), &body));
        }
        Ok(body.to_vec())
    }

    async fn call<T: DeserializeOwned>(&self, req: RequestBuilder) -> Result<T> {
        let body = self.send(req).await?;
        serde_json::from_slice(&body).map_err(|e| ClientError::Decode(e.to_string()))
    }

    async fn call_empty(&self, req: RequestBuilder) -> Result<()> {
        self.send(req).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    //! The client against a canned HTTP responder: checks method, path and body of each request
    //! and how answers are read. The real server's behaviour is not simulated here.

    use super::*;
    use serde_json::{Value, json};

    /// [`Client::new`], after installing a TLS provider: in a workspace build reqwest has the
    /// server's features (rustls without a provider), and building a client would panic.
    fn new_client(base_url: &str) -> Result<Client, ClientError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Client::new(base_url)
    }

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// What the responder saw.
    #[derive(Debug)]
    struct Seen {
        method: String,
        path: String,
        /// Header lines, lower-cased.
        head: String,
        body: String,
    }

    /// Serves one request with `status` and `body`, and reports what it received.
    async fn respond_once(status: u16, body: &str) -> (Client, tokio::task::JoinHandle<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let body = body.to_string();
        let task = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let (head_len, content_length) = loop {
                let n = sock.read(&mut chunk).await.unwrap();
                assert!(n > 0, "client closed before sending a request");
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map(|v| v.trim().parse::<usize>().unwrap())
                        .unwrap_or(0);
                    break (i + 4, len);
                }
            };
            while buf.len() < head_len + content_length {
                let n = sock.read(&mut chunk).await.unwrap();
                assert!(n > 0);
                buf.extend_from_slice(&chunk[..n]);
            }
            let head = String::from_utf8_lossy(&buf[..head_len]).to_string();
            let mut words = head.split_whitespace();
            let method = words.next().unwrap().to_string();
            let path = words.next().unwrap().to_string();
            let reply = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            sock.write_all(reply.as_bytes()).await.unwrap();
            sock.shutdown().await.ok();
            Seen {
                method,
                path,
                head: head.to_ascii_lowercase(),
                body: String::from_utf8_lossy(&buf[head_len..]).to_string(),
            }
        });
        (new_client(&format!("http://{addr}")).unwrap(), task)
    }

    fn job_json(id: &str, state: &str) -> String {
        json!({
            "id": id, "topic": "orders", "body": "b", "state": state,
            "run_at_ms": 1767225600000u64, "ttr_ms": 60000, "priority": 1024,
            "max_attempts": 0, "backoff_ms": [], "attempts": 0, "reserved_until_ms": null
        })
        .to_string()
    }

    fn body_json(seen: &Seen) -> Value {
        serde_json::from_str(&seen.body).unwrap()
    }

    #[tokio::test]
    async fn push_posts_the_new_job_and_returns_the_stored_one() {
        let (c, seen) = respond_once(201, &job_json("j1", "delayed")).await;
        let job = c
            .push(NewJob::new("orders", "b").delay_ms(1000))
            .await
            .unwrap();
        let seen = seen.await.unwrap();
        assert_eq!(
            (seen.method.as_str(), seen.path.as_str()),
            ("POST", "/v1/jobs")
        );
        assert_eq!(
            body_json(&seen),
            json!({"topic": "orders", "body": "b", "delay_ms": 1000})
        );
        assert_eq!(job.id, "j1");
        assert_eq!(job.state, JobState::Delayed);
    }

    #[tokio::test]
    async fn token_is_sent_as_a_bearer_header_and_hidden_from_debug() {
        let (c, seen) = respond_once(200, r#"{"status":"ok"}"#).await;
        let c = c.with_token("tok-0123456789abcdef");
        assert!(!format!("{c:?}").contains("tok-0123456789abcdef"));
        c.health().await.unwrap();
        let head = seen.await.unwrap().head;
        assert!(
            head.contains("\r\nauthorization: bearer tok-0123456789abcdef\r\n"),
            "{head}"
        );

        let (c, seen) = respond_once(200, r#"{"status":"ok"}"#).await;
        c.health().await.unwrap();
        assert!(!seen.await.unwrap().head.contains("authorization"));
    }

    #[tokio::test]
    async fn ids_are_percent_encoded_as_one_path_segment() {
        let (c, seen) = respond_once(200, &job_json("a b/c?d", "ready")).await;
        c.get("a b/c?d").await.unwrap();
        assert_eq!(seen.await.unwrap().path, "/v1/jobs/a%20b%2Fc%3Fd");
    }

    #[tokio::test]
    async fn base_url_path_is_kept_as_a_prefix() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let c = new_client(&format!("http://{addr}/delayq/")).unwrap();
        assert_eq!(
            c.url(&["v1", "stats"]).as_str(),
            format!("http://{addr}/delayq/v1/stats")
        );
        let c = new_client(&format!("http://{addr}")).unwrap();
        assert_eq!(
            c.url(&["v1", "topics", "a/b", "kick"]).path(),
            "/v1/topics/a%2Fb/kick"
        );
    }

    #[tokio::test]
    async fn delete_and_finish_accept_204() {
        let (c, seen) = respond_once(204, "").await;
        c.delete("j").await.unwrap();
        let seen = seen.await.unwrap();
        assert_eq!(
            (seen.method.as_str(), seen.path.as_str()),
            ("DELETE", "/v1/jobs/j")
        );

        let (c, seen) = respond_once(204, "").await;
        c.finish("j").await.unwrap();
        assert_eq!(seen.await.unwrap().path, "/v1/jobs/j/finish");
    }

    #[tokio::test]
    async fn release_without_delay_sends_an_empty_object() {
        let (c, seen) = respond_once(200, &job_json("j", "ready")).await;
        c.release("j", None).await.unwrap();
        let seen = seen.await.unwrap();
        assert_eq!(seen.path, "/v1/jobs/j/release");
        assert_eq!(body_json(&seen), json!({}));
    }

    #[tokio::test]
    async fn reserve_sends_topics_max_and_timeout_and_unwraps_jobs() {
        let reply = format!(r#"{{"jobs": [{}]}}"#, job_json("j", "reserved"));
        let (c, seen) = respond_once(200, &reply).await;
        let jobs = c.reserve(["a", "b"], 5, 1500).await.unwrap();
        let seen = seen.await.unwrap();
        assert_eq!(seen.path, "/v1/reserve");
        assert_eq!(
            body_json(&seen),
            json!({"topics": ["a", "b"], "max": 5, "timeout_ms": 1500})
        );
        assert_eq!(jobs.len(), 1);
    }

    #[tokio::test]
    async fn batch_finish_kick_topic_and_reschedule_unwrap_their_answers() {
        let (c, seen) = respond_once(200, r#"{"finished": 1, "missing": ["b"]}"#).await;
        let r = c.finish_batch(["a", "b"]).await.unwrap();
        assert_eq!(body_json(&seen.await.unwrap()), json!({"ids": ["a", "b"]}));
        assert_eq!(r.missing, ["b"]);

        let (c, seen) = respond_once(200, r#"{"kicked": 3}"#).await;
        assert_eq!(c.kick_topic("orders", 100).await.unwrap(), 3);
        let seen = seen.await.unwrap();
        assert_eq!(seen.path, "/v1/topics/orders/kick");
        assert_eq!(body_json(&seen), json!({"max": 100}));

        let reply = format!(
            r#"{{"job": {}, "previous_state": "ready"}}"#,
            job_json("j", "delayed")
        );
        let (c, seen) = respond_once(200, &reply).await;
        let (job, prev) = c
            .reschedule("j", Reschedule::delay_ms(5000).priority(1))
            .await
            .unwrap();
        assert_eq!(
            body_json(&seen.await.unwrap()),
            json!({"delay_ms": 5000, "priority": 1})
        );
        assert_eq!((job.state, prev), (JobState::Delayed, JobState::Ready));

        let reply = json!({"results": [{"id": "x", "status": "exists"}]}).to_string();
        let (c, seen) = respond_once(200, &reply).await;
        let r = c
            .push_batch(vec![NewJob::new("t", "").id("x")], true)
            .await
            .unwrap();
        let seen = seen.await.unwrap();
        assert_eq!(seen.path, "/v1/jobs/batch");
        assert_eq!(
            body_json(&seen),
            json!({"jobs": [{"topic": "t", "id": "x", "body": ""}], "replace": true})
        );
        assert_eq!(r[0].status, PushStatus::Exists);
    }

    #[tokio::test]
    async fn refusal_becomes_an_api_error() {
        let (c, _seen) = respond_once(
            409,
            r#"{"error": {"code": "wrong_state", "field": null, "message": "job is reserved", "state": "reserved"}}"#,
        )
        .await;
        let e = c.bury("j").await.unwrap_err();
        assert_eq!(e.code(), Some("wrong_state"));
        assert_eq!(e.status(), Some(409));
    }

    #[tokio::test]
    async fn success_with_an_unreadable_body_is_a_decode_error() {
        let (c, _seen) = respond_once(200, "not json").await;
        assert!(matches!(c.stats().await, Err(ClientError::Decode(_))));
    }

    #[tokio::test]
    async fn unreachable_server_is_a_transport_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let c = new_client(&format!("http://{addr}")).unwrap();
        match c.health().await {
            Err(e @ ClientError::Connect { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.starts_with(&format!("cannot connect to {addr}: ")),
                    "{msg}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn base_url_must_be_plain_http_with_a_host() {
        assert!(new_client("http://127.0.0.1:9277").is_ok());
        for bad in [
            "127.0.0.1:9277",
            "https://x",
            "ftp://x",
            "nonsense",
            "unix:/tmp/s",
        ] {
            assert!(
                matches!(new_client(bad), Err(ClientError::InvalidUrl(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_base_url_without_a_scheme_is_answered_with_the_one_to_use() {
        for bare in ["127.0.0.1:9277", "localhost:9277", "delayq.internal"] {
            let err = new_client(bare).unwrap_err().to_string();
            assert_eq!(
                err,
                format!("invalid server URL: {bare:?} has no scheme: use \"http://{bare}\""),
            );
        }
    }
}
