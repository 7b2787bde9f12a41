//! The job body the load generator sends: the due time and the job's sequence number, padded to
//! the requested size. Consumers read lateness and identity from it, so the measurement works the
//! same on every target, including those (beanstalkd) whose job ids are assigned by the server.
//!
//! Format: `<due_us>:<seq>:` followed by `x` up to `size` bytes (never truncated below the
//! header). The due time is in microseconds so that a delivery early by any amount shows as
//! early. Only ASCII digits and `x`, so it needs no JSON escaping. No I/O here.

/// Builds the body of job `seq`, due at `due_us` (Unix microseconds), `size` bytes long when the
/// header fits.
pub fn encode(due_us: u64, seq: u64, size: usize) -> String {
    let mut s = String::with_capacity(size.max(32));
    s.push_str(&due_us.to_string());
    s.push(':');
    s.push_str(&seq.to_string());
    s.push(':');
    while s.len() < size {
        s.push('x');
    }
    s
}

/// Reads `(due_us, seq)` back from a body made by [`encode`]; `None` for a foreign body.
pub fn decode(body: &str) -> Option<(u64, u64)> {
    let mut parts = body.splitn(3, ':');
    let due = parts.next()?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    parts.next()?;
    Some((due, seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_round_trips_due_time_and_sequence() {
        let b = encode(1_767_225_600_123_456, 42, 30);
        assert_eq!(b.len(), 30);
        assert_eq!(decode(&b), Some((1_767_225_600_123_456, 42)));
    }

    #[test]
    fn header_is_never_truncated_by_a_small_size() {
        let b = encode(1_767_225_600_123_456, 9_999_999, 4);
        assert_eq!(decode(&b), Some((1_767_225_600_123_456, 9_999_999)));
    }

    #[test]
    fn foreign_bodies_are_rejected() {
        assert_eq!(decode("hello"), None);
        assert_eq!(decode("1:2"), None);
        assert_eq!(decode("a:2:"), None);
    }
}
