//! Due times of /v1 requests: `delay_ms` (from the clock reading, bounded by [`MAX_DELAY_MS`])
//! and `run_at_ms` (absolute), read into the `UnixMillis` the store is given. Used by a push, a
//! release and a reschedule; it reads fields, it does not decide which request has them.

use super::ApiResult;
use super::error::ApiError;
use super::input::Fields;
use crate::clock::Reading;
use crate::job::{self, UnixMillis};

/// The longest `delay_ms` /v1 accepts: 1000 years of 365 days. A fixed bound, so that the
/// OpenAPI document can state it: the bound that "not after the year 9999"
/// ([`job::MAX_RUN_AT`]) puts on a delay shrinks as the clock moves. `now + MAX_DELAY_MS` stays
/// within `MAX_RUN_AT` until the year 8999.
pub const MAX_DELAY_MS: u64 = 1000 * 365 * 86_400_000;

/// The due time `delay_ms` after the instant `now`, never before it (clock.rs
/// `Reading::due_after`); `field` names the delay in errors.
pub(super) fn after_delay(field: String, delay_ms: u64, now: Reading) -> ApiResult<UnixMillis> {
    if delay_ms > MAX_DELAY_MS {
        return Err(ApiError::field(
            field,
            format!("must be at most {MAX_DELAY_MS} (1000 years), got {delay_ms}"),
        ));
    }
    match now.due_after(delay_ms) {
        t if t <= job::MAX_RUN_AT => Ok(t),
        _ => Err(ApiError::field(
            field,
            format!("{delay_ms} ms puts the due time after the year 9999"),
        )),
    }
}

/// Reads `delay_ms` / `run_at_ms` (at most one of them) as an absolute due time.
pub(super) fn due_time(f: &mut Fields, now: Reading) -> ApiResult<Option<UnixMillis>> {
    let delay = f.u64("delay_ms")?;
    let run_at = f.u64("run_at_ms")?;
    match (delay, run_at) {
        (Some(_), Some(_)) => Err(ApiError::field(
            f.name("run_at_ms"),
            "give either delay_ms or run_at_ms, not both",
        )),
        (Some(d), None) => after_delay(f.name("delay_ms"), d, now).map(Some),
        (None, Some(t)) if t > job::MAX_RUN_AT => Err(ApiError::field(
            f.name("run_at_ms"),
            format!(
                "must be at most {} (the end of the year 9999)",
                job::MAX_RUN_AT
            ),
        )),
        (None, t) => Ok(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_counts_from_the_reading_rounded_up_and_is_bounded_after_rounding() {
        let field = || "delay_ms".to_string();
        let at = Reading::at_micros(1_700_000_000_000_001);
        assert_eq!(after_delay(field(), 250, at).unwrap(), 1_700_000_000_251);
        assert_eq!(after_delay(field(), 0, at).unwrap(), 1_700_000_000_000);
        // 1 µs past MAX_RUN_AT - 10 ms: 10 ms more lands past MAX_RUN_AT once rounded up.
        let near_end = Reading::at_micros((job::MAX_RUN_AT - 10) * 1000 + 1);
        assert!(after_delay(field(), 9, near_end).is_ok());
        assert!(after_delay(field(), 10, near_end).is_err());
    }
}
