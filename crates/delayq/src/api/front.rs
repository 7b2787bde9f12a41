//! What every request passes before its route: the host and cross-site guard (origin.rs),
//! the bearer tokens when there are any (auth.rs) and the deadline, in one tower layer. Every HTTP request pays for this, so it is written as a
//! plain [`Service`] rather than as `axum::middleware::from_fn` functions, which box the rest
//! of the router and its future once per function and request: one boxed future per request
//! here.
//!
//! **Deadline**: a request whose handler (reading the body included) has not produced a
//! response within its path's deadline ([`Deadlines`]) is answered 503 `timeout`. The handler
//! is dropped at that point: an operation may or may not have taken effect, as with any answer
//! that never arrives. A job reserved by a dropped long poll is handed out again after its
//! TTR. A backup (`POST /v1/backup`) answers when its copy is complete, however long that
//! takes.
//!
//! Not here: the request body limit.

use super::auth::Tokens;
use super::origin::Guard;
use super::{LONG_POLL_PATHS, backup, refusal};
use crate::config::Config;
use axum::extract::Request;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service};

/// How long a request may take before it is answered 503 `timeout`.
#[derive(Clone, Copy)]
pub(super) struct Deadlines {
    /// `request_timeout`.
    request: Duration,
    /// `request_timeout + max_wait`: a long poll waits at most `max_wait` (reserve refuses a
    /// longer `timeout_ms`, compat `/pop` caps it), then has the ordinary time for the rest.
    long_poll: Duration,
}

impl Deadlines {
    pub(super) fn new(config: &Config) -> Deadlines {
        let request = Duration::from_secs(config.request_timeout_secs);
        Deadlines {
            request,
            long_poll: request + Duration::from_secs(config.max_wait_secs),
        }
    }

    /// The deadline of a request to `path`; `None` for none (a backup).
    fn of(&self, path: &str) -> Option<Duration> {
        if path == backup::BACKUP_PATH {
            None
        } else if LONG_POLL_PATHS.contains(&path) {
            Some(self.long_poll)
        } else {
            Some(self.request)
        }
    }
}

/// The layer of [`Front`].
#[derive(Clone)]
pub(super) struct FrontLayer {
    pub(super) guard: Guard,
    /// `None`: authentication is off.
    pub(super) tokens: Option<Tokens>,
    pub(super) deadlines: Deadlines,
}

impl<S> Layer<S> for FrontLayer {
    type Service = Front<S>;

    fn layer(&self, inner: S) -> Front<S> {
        Front {
            inner,
            guard: self.guard.clone(),
            tokens: self.tokens.clone(),
            deadlines: self.deadlines,
        }
    }
}

/// The guard, the tokens and the deadline in front of `S` (see the module docs).
#[derive(Clone)]
pub struct Front<S> {
    inner: S,
    guard: Guard,
    tokens: Option<Tokens>,
    deadlines: Deadlines,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl<S, B> Service<Request<B>> for Front<S>
where
    S: Service<Request<B>, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Answer {
        let refused = self
            .guard
            .screen(&req)
            .or_else(|| self.tokens.as_ref().and_then(|tokens| tokens.screen(&req)));
        if let Some(refused) = refused {
            return Box::pin(std::future::ready(Ok(refused)));
        }
        let limit = self.deadlines.of(req.uri().path());
        // The instance `poll_ready` readied goes with this request; a clone stays for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let Some(limit) = limit else {
            return Box::pin(inner.call(req));
        };
        // For the answer after a timeout: a clone shares the request's bytes.
        let uri = req.uri().clone();
        let answer = tokio::time::timeout(limit, inner.call(req));
        Box::pin(async move {
            match answer.await {
                Ok(resp) => resp,
                Err(_) => Ok(timed_out(&uri, limit)),
            }
        })
    }
}

/// The 503 `timeout` answer of a request to `uri` that took longer than `limit`.
fn timed_out(uri: &Uri, limit: Duration) -> Response {
    let path = uri.path();
    tracing::warn!(%path, timeout = ?limit, "request timed out");
    let message = format!(
        "the request took longer than {} s and was abandoned; it may or may not have taken \
         effect",
        limit.as_secs()
    );
    refusal(path, StatusCode::SERVICE_UNAVAILABLE, "timeout", &message)
}
