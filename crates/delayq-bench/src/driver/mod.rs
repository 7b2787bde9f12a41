//! One connection's view of a queue, whatever speaks behind it: push jobs, reserve some, finish
//! or delete them. Workloads use only [`Conn`], so every workload runs against the compat API, the
//! /v1 API and beanstalkd alike. Drivers do no measuring and no logging; errors are returned.

pub mod beanstalkd;
pub mod http;

use anyhow::Result;
use std::sync::Arc;

/// Which system, and how it is spoken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// delayq's compat API (`/push`, `/pop`, `/finish`): one job per request,
    /// delays in whole seconds.
    Compat,
    /// delayq's /v1 API: batch push, multi-job reserve, batch finish, delays in ms.
    V1,
    /// beanstalkd's text protocol (delays in whole seconds).
    Beanstalkd,
}

impl Protocol {
    /// Whether delays are whole seconds on this protocol.
    pub fn whole_second_delays(self) -> bool {
        !matches!(self, Protocol::V1)
    }

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Compat => "compat",
            Protocol::V1 => "v1",
            Protocol::Beanstalkd => "beanstalk",
        }
    }
}

/// When a job falls due.
#[derive(Debug, Clone, Copy)]
pub enum Due {
    /// Relative delay; whole-second protocols get `delay_ms / 1000` (rounded down).
    DelayMs(u64),
    /// Absolute Unix ms (/v1 `run_at_ms`); whole-second protocols get the seconds from now,
    /// rounded up.
    RunAtMs(u64),
}

/// A job to push.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub id: String,
    pub due: Due,
    pub body: String,
}

/// A reserved job: the handle to finish it with, and its body.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub handle: String,
    pub body: String,
}

/// Where the server is to call a job back instead of handing it to a consumer (/v1 only).
#[derive(Debug, Clone)]
pub struct CallbackTarget {
    pub url: String,
    pub timeout_ms: u64,
}

/// Everything a connection needs to know, shared by all connections of a run.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub protocol: Protocol,
    /// `host:port`, loopback.
    pub addr: String,
    pub topic: String,
    /// Time-to-run given to every job, far above the run so no legitimate redelivery happens.
    pub ttr_s: u64,
    /// The `Host` header of every HTTP request (`addr`), built once.
    pub host: hyper::header::HeaderValue,
    /// Pushed jobs carry this callback (no TTR then: a callback job's is the server's).
    pub callback: Option<CallbackTarget>,
}

impl Endpoint {
    pub fn new(protocol: Protocol, addr: &str, topic: &str, ttr_s: u64) -> Result<Arc<Endpoint>> {
        Ok(Arc::new(Endpoint {
            protocol,
            addr: addr.to_string(),
            topic: topic.to_string(),
            ttr_s,
            host: hyper::header::HeaderValue::from_str(addr)?,
            callback: None,
        }))
    }

    /// The same endpoint, pushing jobs with `callback`.
    pub fn with_callback(&self, callback: CallbackTarget) -> Arc<Endpoint> {
        Arc::new(Endpoint {
            callback: Some(callback),
            ..self.clone()
        })
    }

    /// Opens one connection (for HTTP, one keep-alive HTTP/1.1 connection of its own).
    pub async fn connect(self: &Arc<Self>) -> Result<Conn> {
        Ok(match self.protocol {
            Protocol::Compat => Conn::Compat(http::Compat::connect(self.clone()).await?),
            Protocol::V1 => Conn::V1(http::V1::connect(self.clone()).await?),
            Protocol::Beanstalkd => Conn::Beanstalkd(
                beanstalkd::Beanstalkd::connect(&self.addr, &self.topic, self.ttr_s).await?,
            ),
        })
    }
}

/// One connection.
pub enum Conn {
    Compat(http::Compat),
    V1(http::V1),
    Beanstalkd(beanstalkd::Beanstalkd),
}

impl Conn {
    /// Pushes `jobs` (in one request where the protocol allows); returns which were acknowledged.
    pub async fn push(&mut self, jobs: &[NewJob]) -> Result<Vec<bool>> {
        match self {
            Conn::Compat(c) => c.push(jobs).await,
            Conn::V1(c) => c.push(jobs).await,
            Conn::Beanstalkd(c) => c.push(jobs).await,
        }
    }

    /// Server-assigned ids of the last push (beanstalkd only; empty for jobs not acknowledged).
    pub fn last_server_ids(&self) -> Option<&[String]> {
        match self {
            Conn::Beanstalkd(c) => Some(c.last_ids()),
            _ => None,
        }
    }

    /// Reserves up to `max` jobs, waiting up to `timeout_ms` when none is ready.
    pub async fn reserve(&mut self, max: usize, timeout_ms: u64) -> Result<Vec<Delivered>> {
        match self {
            Conn::Compat(c) => c.reserve(timeout_ms).await,
            Conn::V1(c) => c.reserve(max, timeout_ms).await,
            Conn::Beanstalkd(c) => c.reserve(timeout_ms).await,
        }
    }

    /// Finishes `finished` (jobs this connection reserved), then reserves as [`Conn::reserve`]:
    /// in one request on /v1 (`finish` in its reserve), one after the other elsewhere.
    pub async fn finish_and_reserve(
        &mut self,
        finished: &[String],
        max: usize,
        timeout_ms: u64,
    ) -> Result<Vec<Delivered>> {
        match self {
            Conn::V1(c) => c.finish_and_reserve(finished, max, timeout_ms).await,
            _ => {
                if !finished.is_empty() {
                    self.finish(finished).await?;
                }
                self.reserve(max, timeout_ms).await
            }
        }
    }

    /// Finishes jobs that a request cut short may have finished already: on /v1 in one
    /// `POST /v1/finish`, which reports such a job missing rather than refusing it.
    pub async fn finish_again(&mut self, handles: &[String]) -> Result<()> {
        match self {
            Conn::V1(c) => c.finish_batch(handles).await,
            _ => self.finish(handles).await,
        }
    }

    /// Finishes reserved jobs (acknowledges them).
    pub async fn finish(&mut self, handles: &[String]) -> Result<()> {
        match self {
            Conn::Compat(c) => c.finish(handles).await,
            Conn::V1(c) => c.finish(handles).await,
            Conn::Beanstalkd(c) => c.delete(handles).await,
        }
    }

    /// Deletes jobs in any state (cleanup); returns how many the server said it removed.
    pub async fn delete(&mut self, handles: &[String]) -> Result<u64> {
        match self {
            Conn::Compat(c) => c.delete(handles).await,
            Conn::V1(c) => c.delete(handles).await,
            Conn::Beanstalkd(c) => c.delete_count(handles).await,
        }
    }
}

/// Whole seconds for a whole-second protocol.
pub fn due_secs(due: Due, now_ms: u64) -> u64 {
    match due {
        Due::DelayMs(d) => d / 1000,
        Due::RunAtMs(at) => at.saturating_sub(now_ms).div_ceil(1000),
    }
}

/// Wall clock, Unix ms.
pub fn now_ms() -> u64 {
    now_us() / 1000
}

/// Wall clock, Unix µs.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_seconds_round_delays_down_and_run_at_up() {
        assert_eq!(due_secs(Due::DelayMs(2999), 0), 2);
        assert_eq!(due_secs(Due::RunAtMs(10_001), 5_000), 6);
        assert_eq!(due_secs(Due::RunAtMs(10_000), 5_000), 5);
        assert_eq!(due_secs(Due::RunAtMs(1), 5_000), 0);
    }
}
