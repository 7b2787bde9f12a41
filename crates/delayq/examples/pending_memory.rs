//! Measures the process memory a pending job costs in the in-memory engine, which the embedded
//! store keeps every job in: JOBS jobs shaped like the bench's W2 (one topic, ids
//! `<8 hex>-<n>`, 30-byte bodies, due in an hour) are pushed in batches of 1,000, and the growth
//! of the process's resident set is divided by JOBS. A measurement to run by hand in release,
//! not a test:
//!
//!     cargo run --release -p delayq --example pending_memory -- [memory|embedded] [JOBS]
//!
//! `memory` (the default) measures the engine alone (`MemoryStore`); `embedded` opens an
//! embedded store in a fresh temporary directory, so its writer's and redb's memory count too.
//! JOBS defaults to 1,000,000. Prints one line. Does not judge the figure.

use delayq::job::{JobId, JobSpec, Topic};
use delayq::store::embedded::{EmbeddedOptions, EmbeddedStore};
use delayq::store::memory::MemoryStore;
use delayq::store::{PushMode, Store};
use std::sync::Arc;

const NOW: u64 = 1_767_225_600_000;
const BATCH: usize = 1_000;

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "memory".into());
    let jobs: usize = args
        .next()
        .map(|s| s.parse().expect("JOBS must be a number"))
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("temporary directory");
    let before = rss_bytes();
    let store: Arc<dyn Store> = match mode.as_str() {
        "memory" => Arc::new(MemoryStore::new()),
        "embedded" => Arc::new(
            EmbeddedStore::open(EmbeddedOptions::new(dir.path().to_path_buf()))
                .await
                .expect("open the embedded store"),
        ),
        other => panic!("mode must be memory or embedded, not {other}"),
    };
    let topic = Topic::parse("bench-5a3acef7").unwrap();
    for b in 0..jobs.div_ceil(BATCH) {
        let specs = (b * BATCH..((b + 1) * BATCH).min(jobs))
            .map(|i| {
                JobSpec::new(
                    topic.clone(),
                    JobId::parse(format!("5a3acef7-{i}")).unwrap(),
                    format!("{i:0>30}"),
                    NOW + 3_600_000,
                )
            })
            .collect();
        for r in store
            .push_batch(specs, PushMode::Reject, NOW)
            .await
            .unwrap()
        {
            r.unwrap();
        }
    }
    let grown = rss_bytes().saturating_sub(before);
    println!(
        "{mode}: {jobs} pending jobs, resident set grew {:.1} MiB, {:.0} bytes per job",
        grown as f64 / (1 << 20) as f64,
        grown as f64 / jobs as f64
    );
    drop(store);
}
