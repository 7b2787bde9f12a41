//! beanstalkd's numeric job ids over delayq's string ids, and job bodies over delayq's string
//! bodies (docs/beanstalkd.md says both to users).
//!
//! **Ids.** A job put over beanstalkd gets the next number of [`Ids::next`]: the milliseconds
//! since [`EPOCH_MS`], then [`SEQ_BITS`] of sequence within the millisecond, then
//! [`TAG_BITS`] of this instance's random tag, so ids grow with time, stay below 2^53 (exact
//! in JavaScript's numbers) until 2093, and two instances on one store rarely draw the same
//! one. The store makes them unique: the put is a push that refuses an existing id, retried
//! with the next number. Its delayq id is the number in decimal. Any job whose delayq id is a
//! number in canonical decimal is known over beanstalkd by that number; a job with another id
//! (pushed over HTTP) gets a number of the same sequence the first time this instance shows it
//! (reserve, peek), kept in memory ([`Ids::handle_of`]) for at most [`MAX_NAMES`] jobs.
//!
//! **Bodies.** beanstalkd bodies are bytes, delayq's are strings: a UTF-8 body is kept as it
//! is; any other (or one that starts with [`BINARY_MARK`]) is kept as the mark and its
//! standard base64, and handed back over beanstalkd as the bytes put.

use crate::job::{JobId, UnixMillis};
use base64::Engine as _;
use foldhash::HashMap;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where ids' milliseconds count from: 2024-01-01T00:00:00Z.
pub const EPOCH_MS: UnixMillis = 1_704_067_200_000;
/// Ids one instance draws in one millisecond before it borrows the next.
pub const SEQ_BITS: u32 = 8;
/// The instance's tag in the lowest bits.
pub const TAG_BITS: u32 = 4;
/// Jobs with non-numeric ids whose numbers an instance remembers; past it, the oldest.
pub const MAX_NAMES: usize = 1 << 20;
/// Starts a body kept as base64 (a body that is not UTF-8).
pub const BINARY_MARK: &str = "\u{1}base64:";

/// The numbers of one instance.
pub struct Ids {
    /// The last id drawn.
    last: AtomicU64,
    /// This instance's tag, `0..2^TAG_BITS`.
    tag: u64,
    names: Mutex<Names>,
}

/// Numbers given to jobs whose ids are not numbers, both ways, oldest first.
#[derive(Default)]
struct Names {
    by_number: HashMap<u64, JobId>,
    by_id: HashMap<JobId, u64>,
    order: VecDeque<u64>,
}

impl Ids {
    /// `tag` is reduced to its lowest [`TAG_BITS`].
    pub fn new(tag: u64) -> Ids {
        Ids {
            last: AtomicU64::new(0),
            tag: tag & ((1 << TAG_BITS) - 1),
            names: Mutex::default(),
        }
    }

    /// The next id: after the last one, and not before `now`'s first.
    pub fn next(&self, now: UnixMillis) -> u64 {
        let floor = (now.saturating_sub(EPOCH_MS) << (SEQ_BITS + TAG_BITS)) | self.tag;
        let step = 1 << TAG_BITS;
        let next = |last: u64| {
            if last == 0 {
                floor
            } else {
                (last + step).max(floor)
            }
        };
        // `fetch_update` with a closure that always answers `Some` cannot fail.
        let prev = self
            .last
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| Some(next(l)))
            .unwrap_or_else(|l| l);
        next(prev)
    }

    /// When an id of [`Ids::next`] was drawn, if `n` looks like one (drawn since 2024, not
    /// after `now`).
    pub fn drawn_at(n: u64, now: UnixMillis) -> Option<UnixMillis> {
        let at = (n >> (SEQ_BITS + TAG_BITS)).checked_add(EPOCH_MS)?;
        (at > EPOCH_MS + 86_400_000 && at <= now).then_some(at)
    }

    /// The number a job is known by over beanstalkd.
    pub fn handle_of(&self, id: &JobId, now: UnixMillis) -> u64 {
        if let Some(n) = numeric(id.as_str()) {
            return n;
        }
        let mut names = self.lock();
        if let Some(&n) = names.by_id.get(id) {
            return n;
        }
        let n = self.next(now);
        names.by_number.insert(n, id.clone());
        names.by_id.insert(id.clone(), n);
        names.order.push_back(n);
        while names.order.len() > MAX_NAMES {
            if let Some(old) = names.order.pop_front()
                && let Some(old_id) = names.by_number.remove(&old)
            {
                names.by_id.remove(&old_id);
            }
        }
        n
    }

    /// The job a number names: one this instance gave a non-numeric id, else the number's
    /// decimal.
    pub fn id_of(&self, n: u64) -> JobId {
        if let Some(id) = self.lock().by_number.get(&n) {
            return id.clone();
        }
        JobId::from_number(n)
    }

    /// Forgets the number of a job that no longer exists.
    pub fn forget(&self, id: &JobId) {
        if numeric(id.as_str()).is_some() {
            return;
        }
        let mut names = self.lock();
        if let Some(n) = names.by_id.remove(id) {
            names.by_number.remove(&n);
            // `order` keeps the number until it comes round: removing it is a scan.
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Names> {
        // The map stays consistent at every step: a panic elsewhere leaves it usable.
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The number an id is, in canonical decimal (no sign, no leading zero), if it is one.
pub fn numeric(id: &str) -> Option<u64> {
    let b = id.as_bytes();
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) || (b.len() > 1 && b[0] == b'0') {
        return None;
    }
    id.parse().ok()
}

/// A body put over beanstalkd as delayq keeps it.
pub fn body_to_store(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) if !s.starts_with(BINARY_MARK) => s,
        Ok(s) => marked(s.as_bytes()),
        Err(e) => marked(e.as_bytes()),
    }
}

fn marked(bytes: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    format!("{BINARY_MARK}{b64}")
}

/// The bytes of a body as beanstalkd hands it out.
pub fn body_from_store(body: &str) -> Cow<'_, [u8]> {
    if let Some(b64) = body.strip_prefix(BINARY_MARK)
        && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(b64)
    {
        return Cow::Owned(bytes);
    }
    Cow::Borrowed(body.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: UnixMillis = 1_790_000_000_000;

    #[test]
    fn ids_grow_keep_the_tag_and_stay_exact_in_javascript() {
        let ids = Ids::new(0x1f);
        let a = ids.next(NOW);
        let b = ids.next(NOW);
        let c = ids.next(NOW - 5_000);
        assert!(a < b && b < c, "{a} {b} {c}");
        for n in [a, b, c] {
            assert_eq!(n & 0xf, 0xf);
        }
        assert_eq!(Ids::drawn_at(a, NOW), Some(NOW));
        let in_2093 = 3_900_000_000_000;
        assert!(Ids::new(15).next(in_2093) < 1 << 53);
        // A second instance with another tag never draws the same id.
        let other = Ids::new(3);
        assert_ne!(other.next(NOW), a);
    }

    #[test]
    fn more_ids_than_a_millisecond_holds_borrow_the_next() {
        let ids = Ids::new(0);
        let first = ids.next(NOW);
        let mut last = first;
        for _ in 0..1000 {
            last = ids.next(NOW);
        }
        assert_eq!(last - first, 1000 << TAG_BITS);
        assert!(ids.next(NOW + 10) > last);
    }

    #[test]
    fn numeric_ids_are_their_own_numbers_and_others_get_one() {
        let ids = Ids::new(1);
        let job = |s: &str| JobId::parse(s).unwrap();
        assert_eq!(ids.handle_of(&job("42"), NOW), 42);
        assert_eq!(ids.id_of(42), job("42"));
        let n = ids.handle_of(&job("order-7"), NOW);
        assert_eq!(ids.handle_of(&job("order-7"), NOW), n);
        assert_eq!(ids.id_of(n), job("order-7"));
        // Not canonical decimal: a name, not a number.
        let m = ids.handle_of(&job("007"), NOW);
        assert_ne!(m, 7);
        assert_eq!(ids.id_of(m), job("007"));
        ids.forget(&job("order-7"));
        assert_eq!(ids.id_of(n), job(&n.to_string()));
        assert_eq!(numeric("0"), Some(0));
        assert_eq!(numeric("18446744073709551616"), None);
        assert_eq!(numeric("-1"), None);
    }

    #[test]
    fn bodies_come_back_as_the_bytes_put() {
        for body in [
            b"hello".to_vec(),
            "测试@example.com".as_bytes().to_vec(),
            vec![0xff, 0x00, 0xc3],
            format!("{BINARY_MARK}aGk=").into_bytes(),
            Vec::new(),
        ] {
            let kept = body_to_store(body.clone());
            assert_eq!(body_from_store(&kept).as_ref(), body.as_slice());
        }
        assert_eq!(body_to_store(b"plain".to_vec()), "plain");
        assert_eq!(body_to_store(vec![0xff]), format!("{BINARY_MARK}/w=="));
    }
}
