//! The time source. Stores take `now` as an argument; the server asks a [`Clock`] for it, so
//! tests can substitute a clock they control (the conformance suite passes `now` directly).

use crate::job::UnixMillis;
use std::time::{SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now(&self) -> UnixMillis;

    /// Microseconds since the Unix epoch, for timers that should wake right at a millisecond
    /// boundary rather than up to a millisecond after it. Default: `now() * 1000`.
    fn now_micros(&self) -> u64 {
        self.now().saturating_mul(1000)
    }
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UnixMillis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as UnixMillis)
            .unwrap_or(0)
    }

    fn now_micros(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0)
    }
}
