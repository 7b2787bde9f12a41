//! One callback attempt: the HTTP request of a reserved callback job, once its host has room,
//! counted and logged. The request: `POST <url>` with the job's body and the Standard Webhooks headers
//! (`webhook-id` = the job id, `webhook-timestamp`, `webhook-signature`), plus `delayq-topic`
//! and `delayq-attempt`; the id and the topic as [`sign::header_value`] makes them (visible
//! ASCII, percent-encoded past it), the signature over the id as sent; redirects are not
//! followed; every address a host name resolves to is checked against the allowed destinations
//! before connecting.
//!
//! Not here: what the outcome does to the job (delivery/mod.rs), the outcome rules
//! (outcome.rs).

use super::allow::AllowList;
use super::outcome::{Outcome, retry_after_ms};
use super::sign::{self, WebhookSecret};
use super::{DeliveryError, Ended, Shared};
use crate::clock::Reading;
use crate::job::{Callback, Job, Topic};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::error::Error as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use url::Url;

/// How long an idle connection to a destination is kept for the next call.
const POOL_IDLE: Duration = Duration::from_secs(30);
/// Most host name lookups at once: each holds a thread for as long as the system's resolver
/// takes (tens of seconds when it does not answer).
const MAX_LOOKUPS: usize = 32;

/// What one call came to.
#[derive(Debug)]
pub(super) struct Answer {
    pub outcome: Outcome,
    /// The status, when there was an answer.
    pub status: Option<u16>,
    /// Why it failed, for the log: the status's reason, or the error (never the body).
    pub reason: String,
    pub took: Duration,
    /// The delay a `Retry-After` of a failed call asked for.
    pub retry_after_ms: Option<u64>,
}

impl Answer {
    /// A call not made: its destination is not allowed (any more).
    pub fn refused(reason: String) -> Answer {
        Answer {
            outcome: Outcome::Connect,
            status: None,
            reason,
            took: Duration::ZERO,
            retry_after_ms: None,
        }
    }
}

/// The HTTP client of callbacks and what it signs with.
pub(super) struct Caller {
    client: reqwest::Client,
    secrets: Vec<WebhookSecret>,
    allow: Arc<AllowList>,
}

impl Caller {
    pub fn new(secrets: Vec<WebhookSecret>, allow: AllowList) -> Result<Caller, DeliveryError> {
        let allow = Arc::new(allow);
        crate::install_tls_provider();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("delayq/", env!("CARGO_PKG_VERSION")))
            .tcp_nodelay(true)
            .pool_idle_timeout(POOL_IDLE)
            .dns_resolver(Arc::new(AllowedResolver {
                allow: allow.clone(),
                lookups: Arc::new(tokio::sync::Semaphore::new(MAX_LOOKUPS)),
            }))
            .build()
            .map_err(DeliveryError::Client)?;
        Ok(Caller {
            client,
            secrets,
            allow,
        })
    }

    /// A callback's URL, parsed once, if the allowed destinations admit it; else why not.
    pub fn target(&self, url: &str) -> Result<Url, String> {
        self.allow
            .check_url(url)
            .map_err(|e| format!("destination not allowed: the URL {e}"))
    }

    /// Calls `url` ([`Caller::target`] of `cb`) for `job` (reserved, so `attempts` counts this
    /// call), started at `at`.
    pub async fn call(&self, job: &Job, cb: &Callback, url: Url, at: Reading) -> Answer {
        let started = Instant::now();
        let fail = |outcome, reason: String| Answer {
            outcome,
            status: None,
            reason,
            took: started.elapsed(),
            retry_after_ms: None,
        };
        // Signed as sent.
        let id = sign::header_value(job.spec.id.as_str());
        let body = job.spec.body.as_bytes();
        let timestamp = at.millis() / 1000;
        let mut req = self
            .client
            .post(url)
            .timeout(Duration::from_millis(cb.timeout_ms))
            .header("content-type", content_type(&job.spec.body))
            .header("webhook-id", id.as_ref())
            .header("webhook-timestamp", timestamp)
            .header(
                "delayq-topic",
                sign::header_value(job.spec.topic.as_str()).as_ref(),
            )
            .header("delayq-attempt", job.attempts)
            .body(job.spec.body.clone());
        if let Some(sig) = sign::signature(&self.secrets, &id, timestamp, body) {
            req = req.header("webhook-signature", sig);
        }
        let resp = match req.send().await {
            Ok(resp) => resp,
            Err(e) if e.is_timeout() => {
                return fail(
                    Outcome::Timeout,
                    format!("no answer within {} ms", cb.timeout_ms),
                );
            }
            Err(e) => return fail(Outcome::Connect, error_chain(&e)),
        };
        let status = resp.status();
        let outcome = Outcome::of_status(status.as_u16());
        let retry_after = (!outcome.finished())
            .then(|| resp.headers().get(reqwest::header::RETRY_AFTER))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after_ms(v, SystemTime::now()));
        // The answer counts once it is complete: its body is read (and dropped) within the
        // timeout, so the connection can serve the next call.
        let outcome = match resp.bytes().await {
            Ok(_) => outcome,
            Err(e) if e.is_timeout() => {
                return fail(
                    Outcome::Timeout,
                    format!("answer not complete within {} ms", cb.timeout_ms),
                );
            }
            Err(e) if outcome.finished() => return fail(Outcome::Connect, error_chain(&e)),
            Err(_) => outcome,
        };
        Answer {
            outcome,
            status: Some(status.as_u16()),
            reason: format!("HTTP {status}"),
            took: started.elapsed(),
            retry_after_ms: retry_after,
        }
    }
}

/// The `content-type` of a body: JSON when it parses as JSON, else UTF-8 text (bodies are
/// strings).
fn content_type(body: &str) -> &'static str {
    if serde_json::from_str::<serde::de::IgnoredAny>(body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    }
}

/// The key the per-host limit counts calls under: the URL's host and port.
pub(super) fn host_key(url: &Url) -> String {
    format!(
        "{}:{}",
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or(0)
    )
}

/// An error and its causes, one line (reqwest's own message is only the outermost).
fn error_chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// Resolves host names with the system's resolver, keeping only the addresses the allowed
/// destinations admit for that name; none left is an error (the call fails as a connect
/// error), so a name cannot smuggle a call to a forbidden address.
struct AllowedResolver {
    allow: Arc<AllowList>,
    lookups: Arc<tokio::sync::Semaphore>,
}

impl Resolve for AllowedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow = self.allow.clone();
        let lookups = self.lookups.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let _turn = lookups.acquire_owned().await?;
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| allow.allows_resolved(&host, a.ip()))
                .collect();
            if allowed.is_empty() {
                return Err(format!(
                    "{host} resolves only to addresses outside the allowed destinations \
                     (--callback-allow): {found:?}"
                )
                .into());
            }
            let addrs: Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

/// One HTTP call of a reserved callback job: wait for its host, call, counted.
pub(super) async fn attempt(
    shared: &Shared,
    job: &Job,
    cb: &Callback,
    queue: &Topic,
) -> Option<Ended> {
    let started;
    let answer = match shared.caller.target(&cb.url) {
        // Checked at push; the allowed destinations may have changed since.
        Err(reason) => {
            shared.park(queue, -1);
            started = shared.clock.read();
            Answer::refused(reason)
        }
        Ok(url) => {
            let host = host_key(&url);
            let host_permit = shared.host_permit(&host).await;
            shared.park(queue, -1);
            shared.room.notify_one();
            // The call must end before the reservation does.
            if !super::hold_for(shared, job, cb.timeout_ms).await {
                drop(host_permit);
                shared.host_done(&host);
                return None;
            }
            started = shared.clock.read();
            let answer = shared.caller.call(job, cb, url, started).await;
            drop(host_permit);
            shared.host_done(&host);
            answer
        }
    };
    let late_ms = started.millis().saturating_sub(job.spec.run_at);
    shared
        .metrics
        .callback_attempt(answer.outcome.label(), answer.took, late_ms);
    if !answer.outcome.finished() {
        tracing::warn!(
            job_id = %job.spec.id,
            topic = %job.spec.topic,
            attempt = job.attempts,
            outcome = answer.outcome.label(),
            status = answer.status,
            reason = %answer.reason,
            "callback failed"
        );
    }
    Some(Ended {
        finished: answer.outcome.finished(),
        retry_after_ms: answer.retry_after_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_bodies_are_sent_as_json_and_others_as_text() {
        assert_eq!(content_type(r#"{"order":42}"#), "application/json");
        assert_eq!(content_type("[1,2]"), "application/json");
        assert_eq!(content_type("order 42"), "text/plain; charset=utf-8");
        assert_eq!(content_type(""), "text/plain; charset=utf-8");
    }

    #[test]
    fn hosts_are_counted_by_host_and_port() {
        let key = |u: &str| host_key(&Url::parse(u).unwrap());
        assert_eq!(key("https://a.example/x"), "a.example:443");
        assert_eq!(key("http://a.example/x"), "a.example:80");
        assert_eq!(key("http://127.0.0.1:9000/y?z"), "127.0.0.1:9000");
    }

    #[test]
    fn the_client_builds_with_tls() {
        assert!(Caller::new(Vec::new(), AllowList::default()).is_ok());
    }
}
