//! Measurement without I/O: lateness histograms (HDR, microseconds), their percentile summary,
//! and the delivery ledger that turns acknowledged pushes and deliveries into lost and duplicate
//! counts. Each consumer task owns a [`Lateness`]; they are merged at the end, so recording never
//! takes a lock. The ledger is shared and lock-free (one atomic per job).

use hdrhistogram::Histogram;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

/// Largest lateness the histograms hold (1 hour, in µs); larger values are clamped to it.
const MAX_US: u64 = 3_600_000_000;

/// Percentiles of one histogram, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Summary {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Summary {
    /// Summarises a histogram of microseconds.
    pub fn of(h: &Histogram<u64>) -> Summary {
        if h.is_empty() {
            return Summary::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Summary {
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.50)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }
}

/// Lateness of deliveries, as seen by one consumer: `pop − due`, in microseconds. A delivery
/// before its due time by any amount, even 1 µs, is early: it is counted and its magnitude goes
/// to a separate histogram. One at exactly its due time is on time.
#[derive(Debug, Clone)]
pub struct Lateness {
    /// `pop − due` for deliveries at or after their due time, µs.
    pub late: Histogram<u64>,
    /// `due − pop` for early deliveries, µs.
    pub early: Histogram<u64>,
}

impl Default for Lateness {
    fn default() -> Self {
        Lateness::new()
    }
}

impl Lateness {
    pub fn new() -> Lateness {
        let h = || Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds");
        Lateness {
            late: h(),
            early: h(),
        }
    }

    /// Records one delivery popped at `pop_us` of a job due at `due_us` (both Unix µs).
    pub fn record(&mut self, pop_us: u64, due_us: u64) {
        if pop_us >= due_us {
            self.late.saturating_record((pop_us - due_us).max(1));
        } else {
            self.early.saturating_record(due_us - pop_us);
        }
    }

    /// Adds another consumer's recordings to these.
    pub fn merge(&mut self, other: &Lateness) {
        self.late.add(&other.late).expect("same bounds");
        self.early.add(&other.early).expect("same bounds");
    }

    pub fn late_summary(&self) -> Summary {
        Summary::of(&self.late)
    }

    pub fn early_summary(&self) -> Summary {
        Summary::of(&self.early)
    }
}

/// Which jobs were acknowledged by the server and how often each was delivered, indexed by the
/// job's sequence number. Shared by producers and consumers of one run.
#[derive(Debug)]
pub struct Ledger {
    acked: Vec<AtomicBool>,
    delivered: Vec<AtomicU8>,
    /// Acknowledged pushes so far.
    pub acked_total: AtomicU64,
    /// Distinct jobs delivered so far (consumers stop when it reaches `acked_total`).
    pub delivered_unique: AtomicU64,
}

/// What the ledger says at the end of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Accounting {
    pub acked: u64,
    pub delivered_unique: u64,
    /// Acknowledged pushes never delivered.
    pub lost: u64,
    /// Extra deliveries of jobs already delivered (a job delivered 3 times counts 2).
    pub duplicates: u64,
    /// Deliveries of jobs whose push was never acknowledged (or of sequence numbers out of range).
    pub unexpected: u64,
}

impl Ledger {
    pub fn new(n: usize) -> Ledger {
        Ledger {
            acked: (0..n).map(|_| AtomicBool::new(false)).collect(),
            delivered: (0..n).map(|_| AtomicU8::new(0)).collect(),
            acked_total: AtomicU64::new(0),
            delivered_unique: AtomicU64::new(0),
        }
    }

    pub fn ack(&self, seq: u64) {
        if let Some(a) = self.acked.get(seq as usize)
            && !a.swap(true, Ordering::Relaxed)
        {
            self.acked_total.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Notes a delivery; returns true when it is the job's first.
    pub fn deliver(&self, seq: u64) -> bool {
        let Some(d) = self.delivered.get(seq as usize) else {
            return false;
        };
        let before = d
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_add(1))
            })
            .unwrap_or(u8::MAX);
        if before == 0 {
            self.delivered_unique.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    pub fn account(&self, out_of_range: u64) -> Accounting {
        let acked: Vec<bool> = self
            .acked
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        let delivered: Vec<u8> = self
            .delivered
            .iter()
            .map(|d| d.load(Ordering::Relaxed))
            .collect();
        let mut a = account(&acked, &delivered);
        a.unexpected += out_of_range;
        a
    }
}

/// The accounting rule, on plain slices: lost = acked and never delivered; duplicates = every
/// delivery past the first; unexpected = delivered but never acked.
pub fn account(acked: &[bool], delivered: &[u8]) -> Accounting {
    let mut a = Accounting {
        acked: 0,
        delivered_unique: 0,
        lost: 0,
        duplicates: 0,
        unexpected: 0,
    };
    for (&ack, &d) in acked.iter().zip(delivered) {
        a.acked += ack as u64;
        a.delivered_unique += (d > 0) as u64;
        a.duplicates += d.saturating_sub(1) as u64;
        if ack && d == 0 {
            a.lost += 1;
        }
        if !ack && d > 0 {
            a.unexpected += 1;
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_and_early_deliveries_go_to_separate_histograms() {
        let mut l = Lateness::new();
        l.record(1_000_005_000, 1_000_000_000); // 5 ms late
        l.record(1_000_000_000, 1_000_000_000); // on time: recorded as 1 µs late
        l.record(999_998_000, 1_000_000_000); // 2 ms early
        assert_eq!(l.late.len(), 2);
        assert_eq!(l.early.len(), 1);
        let e = l.early_summary();
        assert_eq!(e.count, 1);
        assert!((e.max_ms - 2.0).abs() < 0.01, "{e:?}");
    }

    #[test]
    fn a_delivery_early_by_one_microsecond_counts_and_one_at_its_due_time_does_not() {
        let due_us = 1_767_225_600_123_456;
        let mut l = Lateness::new();
        l.record(due_us, due_us);
        assert_eq!(
            (l.late.len(), l.early.len()),
            (1, 0),
            "at the due time: on time"
        );
        l.record(due_us - 1, due_us);
        assert_eq!(l.early.len(), 1, "1 µs early is early");
        assert_eq!(l.early.max(), 1);
        // Within the due time's millisecond but before it: early.
        l.record(due_us - 456, due_us);
        assert_eq!(l.early.len(), 2);
        assert_eq!(l.late.len(), 1);
    }

    #[test]
    fn summary_reports_percentiles_in_milliseconds() {
        let mut l = Lateness::new();
        for ms in 1..=1000u64 {
            l.record(ms * 1000, 0);
        }
        let s = l.late_summary();
        assert_eq!(s.count, 1000);
        assert!((s.p50_ms - 500.0).abs() < 1.0, "{s:?}");
        assert!((s.p99_ms - 990.0).abs() < 1.0, "{s:?}");
        assert!((s.p999_ms - 999.0).abs() < 1.0, "{s:?}");
        assert!((s.max_ms - 1000.0).abs() < 1.0, "{s:?}");
    }

    #[test]
    fn empty_histogram_summarises_to_zeroes() {
        assert_eq!(Lateness::new().late_summary(), Summary::default());
    }

    #[test]
    fn merging_adds_counts() {
        let mut a = Lateness::new();
        let mut b = Lateness::new();
        a.record(3000, 1000);
        b.record(4000, 1000);
        b.record(0, 1000);
        a.merge(&b);
        assert_eq!(a.late.len(), 2);
        assert_eq!(a.early.len(), 1);
    }

    #[test]
    fn accounting_counts_lost_duplicates_and_unexpected() {
        let acked = [true, true, true, false, true];
        let delivered = [1, 0, 3, 1, 1];
        let a = account(&acked, &delivered);
        assert_eq!(a.acked, 4);
        assert_eq!(a.delivered_unique, 4);
        assert_eq!(a.lost, 1);
        assert_eq!(a.duplicates, 2);
        assert_eq!(a.unexpected, 1);
    }

    #[test]
    fn ledger_counts_first_deliveries_once() {
        let l = Ledger::new(3);
        l.ack(0);
        l.ack(0);
        l.ack(2);
        assert!(l.deliver(0));
        assert!(!l.deliver(0));
        assert!(!l.deliver(7), "out of range is not a first delivery");
        assert_eq!(l.acked_total.load(Ordering::Relaxed), 2);
        assert_eq!(l.delivered_unique.load(Ordering::Relaxed), 1);
        let a = l.account(1);
        assert_eq!((a.lost, a.duplicates, a.unexpected), (1, 1, 1));
    }
}
