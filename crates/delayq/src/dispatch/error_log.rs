//! Rate-limited logging of a store call that keeps failing, shared by the timer, the
//! waiter-serving task and the callback deliverer: both retry forever, and a store that is down for minutes must not
//! write a log line per retry.
//!
//! Not here: the retrying itself (each loop decides when to try again).

use crate::store::StoreError;
use std::time::Duration;
use tokio::time::Instant;

/// At most one log line per this interval for a store that keeps failing.
const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Logs a failing store call at most once per [`ERROR_LOG_INTERVAL`] (with how many failures
/// were not logged), and once when it recovers.
pub(crate) struct ErrorLog {
    what: &'static str,
    failing_since: Option<Instant>,
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl ErrorLog {
    /// A log for the store call described by `what` (a log field, e.g. "timer tick").
    pub(crate) fn new(what: &'static str) -> ErrorLog {
        ErrorLog {
            what,
            failing_since: None,
            last_logged: None,
            unlogged: 0,
        }
    }

    pub(crate) fn failed(&mut self, e: &StoreError) {
        let now = Instant::now();
        self.failing_since.get_or_insert(now);
        if self
            .last_logged
            .is_none_or(|t| now.duration_since(t) >= ERROR_LOG_INTERVAL)
        {
            tracing::warn!(
                what = self.what,
                error = %e,
                failures_not_logged = self.unlogged,
                "store call failed; retrying"
            );
            self.last_logged = Some(now);
            self.unlogged = 0;
        } else {
            self.unlogged += 1;
        }
    }

    pub(crate) fn recovered(&mut self) {
        if let Some(since) = self.failing_since.take() {
            tracing::info!(what = self.what, after = ?since.elapsed(), "store call recovered");
            self.last_logged = None;
            self.unlogged = 0;
        }
    }
}
