//! The time source. Stores take `now` as an argument; the server asks a [`Clock`] for it, so
//! tests can substitute a clock they control (the conformance suite passes `now` directly).
//!
//! Two roundings of one instant, each chosen so that it can only err on the late side:
//! "is it due yet?" compares with the instant rounded down ([`Reading::millis`]: `run_at <=
//! floor(now)` implies the true now has reached `run_at`), and a due time set by a delay starts
//! from the instant rounded up ([`Reading::due_after`]: never before the true instant plus the
//! delay). This file does no scheduling; dispatch/ and the stores act on these values.

use crate::job::UnixMillis;
use std::time::{SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch, rounded down.
    fn now(&self) -> UnixMillis;

    /// Microseconds since the Unix epoch, for timers that should wake right at a millisecond
    /// boundary rather than up to a millisecond after it. Default: `now() * 1000`.
    fn now_micros(&self) -> u64 {
        self.now().saturating_mul(1000)
    }

    /// One reading of the clock at microsecond resolution. A request that both acts "now" and
    /// sets a due time reads the clock once and takes both from this reading.
    fn read(&self) -> Reading {
        Reading::at_micros(self.now_micros())
    }
}

/// One instant read from a [`Clock`], in microseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reading(u64);

impl Reading {
    pub const fn at_micros(micros: u64) -> Reading {
        Reading(micros)
    }

    pub const fn micros(self) -> u64 {
        self.0
    }

    /// The millisecond this instant falls in (rounded down): the `now` that "is it due yet?"
    /// compares with, and what a job's `created_at` records.
    pub const fn millis(self) -> UnixMillis {
        self.0 / 1000
    }

    /// The first whole millisecond at or after this instant (rounded up).
    pub const fn millis_ceil(self) -> UnixMillis {
        self.0.div_ceil(1000)
    }

    /// The due time of something delayed by `delay_ms` from this instant: the instant rounded
    /// up to the millisecond, plus the delay, so never before the true instant plus the delay.
    /// A zero delay is due at once, [`Reading::millis`]: what is pushed without a delay is ready
    /// in the same request instead of waiting for the timer's next millisecond, and it cannot
    /// be early. Saturates at `u64::MAX`; callers bound the result by `job::MAX_RUN_AT`.
    pub const fn due_after(self, delay_ms: u64) -> UnixMillis {
        if delay_ms == 0 {
            self.millis()
        } else {
            self.millis_ceil().saturating_add(delay_ms)
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock stopped at a given microsecond, as a test would inject.
    struct StoppedAt(u64);

    impl Clock for StoppedAt {
        fn now(&self) -> UnixMillis {
            self.0 / 1000
        }

        fn now_micros(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn a_delay_runs_from_the_instant_rounded_up_to_the_millisecond() {
        let at = StoppedAt(1_700_000_000_000_001).read();
        assert_eq!(at.millis(), 1_700_000_000_000, "now is rounded down");
        assert_eq!(
            at.due_after(250),
            1_700_000_000_251,
            "1 µs past a ms: the next ms"
        );
        let on = StoppedAt(1_700_000_000_000_000).read();
        assert_eq!(
            on.due_after(250),
            1_700_000_000_250,
            "exactly on a ms: that ms"
        );
        let late = StoppedAt(1_700_000_000_000_999).read();
        assert_eq!(late.due_after(1), 1_700_000_000_002);
    }

    #[test]
    fn zero_delay_is_due_in_the_millisecond_of_the_reading() {
        let clock = StoppedAt(1_700_000_000_000_999);
        assert_eq!(clock.read().due_after(0), clock.now());
    }

    #[test]
    fn a_due_time_is_never_before_the_instant_plus_the_delay() {
        for micros in (5_000_000..5_003_000).step_by(7) {
            let at = StoppedAt(micros).read();
            for delay_ms in [1, 2, 999, 1000, 60_000] {
                let due = at.due_after(delay_ms);
                assert!(
                    due * 1000 >= micros + delay_ms * 1000,
                    "{micros} + {delay_ms}"
                );
                assert!(
                    due * 1000 < micros + delay_ms * 1000 + 1000,
                    "at most 1 ms late"
                );
            }
        }
    }

    #[test]
    fn the_default_reading_agrees_with_a_millisecond_only_clock() {
        struct Millis(u64);
        impl Clock for Millis {
            fn now(&self) -> UnixMillis {
                self.0
            }
        }
        let at = Millis(42).read();
        assert_eq!((at.millis(), at.due_after(5)), (42, 47));
    }

    #[test]
    fn a_due_time_saturates_instead_of_wrapping() {
        assert_eq!(Reading::at_micros(1_001).due_after(u64::MAX), u64::MAX);
    }
}
