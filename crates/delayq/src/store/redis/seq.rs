//! Seq stamps: the push-order tie-break of ready jobs and the burial order of dead ones,
//! handed out by each instance ([`Stamps`]).
//!
//! Decision: seq is stamped by the calling instance, not by a Redis counter: a counter per
//! shard would not order pushes that land on different shards, and one shared counter would
//! be a key outside the shards' slots. Stamps are `now · 1024` or the instance's last stamp
//! plus one, whichever is larger: strictly increasing per instance, ordered by time across
//! instances (whose relative push order is only defined by their clocks anyway) and below
//! 2^53, so exact in Lua's doubles.
//!
//! It reads no clock: the caller passes `now`.

use crate::job::UnixMillis;
use std::sync::atomic::{AtomicU64, Ordering};

/// Stamps are `now << SEQ_SHIFT` or the last stamp + 1, whichever is larger.
const SEQ_SHIFT: u32 = 10;
/// Largest `now` whose stamp stays below 2^53 (exact in Lua): 8.8e12 ms, the year 2248.
const SEQ_MAX_NOW: u64 = (1 << (53 - SEQ_SHIFT)) - 1;

/// One instance's stamps: the last one handed out.
#[derive(Debug, Default)]
pub(super) struct Stamps {
    last: AtomicU64,
}

impl Stamps {
    /// Reserves `n` (at least 1) consecutive stamps at `now` and returns the first.
    pub fn take(&self, now: UnixMillis, n: u64) -> u64 {
        let floor = now.min(SEQ_MAX_NOW) << SEQ_SHIFT;
        let mut base = floor;
        let _ = self
            .last
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
                base = floor.max(last + 1);
                Some(base + n.max(1) - 1)
            });
        base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_follow_the_clock_and_never_repeat_within_an_instance() {
        let s = Stamps::default();
        assert_eq!(s.take(5, 3), 5 << SEQ_SHIFT);
        // The next three were reserved: the same `now` goes on after them.
        assert_eq!(s.take(5, 1), (5 << SEQ_SHIFT) + 3);
        // A later `now` jumps ahead; an earlier one (a clock step back) still increases.
        assert_eq!(s.take(9, 1), 9 << SEQ_SHIFT);
        assert_eq!(s.take(1, 0), (9 << SEQ_SHIFT) + 1);
        assert_eq!(s.take(1, 1), (9 << SEQ_SHIFT) + 2);
    }

    #[test]
    fn stamps_stay_exact_in_lua_past_the_last_representable_time() {
        let s = Stamps::default();
        let first = s.take(u64::MAX, 2);
        assert_eq!(first, SEQ_MAX_NOW << SEQ_SHIFT);
        assert!(first + 1 < 1 << 53);
    }
}
