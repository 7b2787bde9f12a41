//! What one call came to, as a pure function of the answer: whether the job is finished, the
//! outcome's label in `/metrics`, and the delay a `Retry-After` asks for.
//!
//! Not here: making the call (delivery/callback.rs), what a failed attempt does to the job (job.rs
//! `after_delivery_failed`, through `Store::release`).

use std::time::{Duration, SystemTime};

/// Longest delay a `Retry-After` may ask for; a longer one is cut to this.
pub const MAX_RETRY_AFTER_MS: u64 = 86_400_000;

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx answer within the timeout: the job is finished.
    Success(u16),
    /// Any other status (redirects are not followed).
    Status(u16),
    /// No answer within the timeout.
    Timeout,
    /// No answer at all: refused, reset, DNS, TLS, a destination not allowed.
    Connect,
}

impl Outcome {
    pub fn finished(self) -> bool {
        matches!(self, Outcome::Success(_))
    }

    /// The `outcome` label of `delayq_callback_attempts_total`.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Success(_) => "2xx",
            Outcome::Status(s) if (400..500).contains(&s) => "4xx",
            Outcome::Status(s) if (500..600).contains(&s) => "5xx",
            Outcome::Status(_) => "other_status",
            Outcome::Timeout => "timeout",
            Outcome::Connect => "connect_error",
        }
    }

    /// The outcome of an answer's status.
    pub fn of_status(status: u16) -> Outcome {
        if (200..300).contains(&status) {
            Outcome::Success(status)
        } else {
            Outcome::Status(status)
        }
    }
}

/// The delay a `Retry-After` value asks for, in ms: delay-seconds or an HTTP date (RFC 9110
/// §10.2.3), at most [`MAX_RETRY_AFTER_MS`]; a date in the past is 0. `None` when the value is
/// neither.
pub fn retry_after_ms(value: &str, now: SystemTime) -> Option<u64> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(secs.saturating_mul(1000).min(MAX_RETRY_AFTER_MS));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let wait = at.duration_since(now).unwrap_or(Duration::ZERO);
    Some(
        u64::try_from(wait.as_millis()).map_or(MAX_RETRY_AFTER_MS, |ms| ms.min(MAX_RETRY_AFTER_MS)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_2xx_finishes_and_labels_group_the_rest() {
        assert!(Outcome::of_status(200).finished());
        assert!(Outcome::of_status(204).finished());
        for (s, label) in [
            (301, "other_status"),
            (404, "4xx"),
            (429, "4xx"),
            (503, "5xx"),
        ] {
            let o = Outcome::of_status(s);
            assert!(!o.finished(), "{s}");
            assert_eq!(o.label(), label, "{s}");
        }
        assert_eq!(Outcome::Timeout.label(), "timeout");
        assert_eq!(Outcome::Connect.label(), "connect_error");
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates_capped_at_a_day() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 2015-10-21 07:28:00 UTC
        assert_eq!(retry_after_ms("2", now), Some(2_000));
        assert_eq!(retry_after_ms(" 0 ", now), Some(0));
        assert_eq!(retry_after_ms("999999999", now), Some(MAX_RETRY_AFTER_MS));
        assert_eq!(
            retry_after_ms("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(30_000)
        );
        assert_eq!(
            retry_after_ms("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(0)
        );
        assert_eq!(
            retry_after_ms("Tue, 21 Oct 2025 07:28:00 GMT", now),
            Some(MAX_RETRY_AFTER_MS)
        );
        assert_eq!(retry_after_ms("soon", now), None);
        assert_eq!(retry_after_ms("-5", now), None);
    }
}
