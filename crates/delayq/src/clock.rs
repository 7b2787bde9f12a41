//! The time source. Stores take `now` as an argument; the server asks a [`Clock`] for it, so
//! tests can substitute a clock they control (the conformance suite passes `now` directly).

use crate::job::UnixMillis;
use std::time::{SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now(&self) -> UnixMillis;
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
}
