//! Measures how long the embedded store takes to open a data directory holding many jobs:
//! after a clean shutdown, and after a kill -9 (when redb first checks and repairs the file).
//! A measurement to run by hand in release, not a test:
//!
//!     cargo run --release -p delayq --example embedded_open_time -- [JOBS] [DIR]
//!
//! JOBS defaults to 1,000,000; DIR to a fresh temporary directory (removed afterwards). Jobs are
//! pushed in batches of 1,000 with 100-byte bodies: 45% delayed, 45% ready, 10% reserved.
//! Prints one line per measurement. Does not judge the figures.

use delayq::job::{JobId, JobSpec, Topic};
use delayq::store::embedded::{DB_FILE_NAME, EmbeddedOptions, EmbeddedStore};
use delayq::store::{PushMode, Store};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const NOW: u64 = 1_767_225_600_000;
const BATCH: usize = 1_000;
const TOPICS: usize = 8;

async fn open(dir: &Path) -> EmbeddedStore {
    EmbeddedStore::open(EmbeddedOptions::new(dir.to_path_buf()))
        .await
        .unwrap_or_else(|e| panic!("open {}: {e}", dir.display()))
}

fn rss_mib() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(|l| l.trim_start_matches("VmRSS:").trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

async fn write(dir: &Path, jobs: usize) {
    let store = open(dir).await;
    let topics: Vec<Topic> = (0..TOPICS)
        .map(|t| Topic::parse(format!("topic-{t}")).unwrap())
        .collect();
    let started = Instant::now();
    for b in 0..jobs.div_ceil(BATCH) {
        let specs = (b * BATCH..((b + 1) * BATCH).min(jobs))
            .map(|i| {
                // 0-44: delayed an hour, 45-99: ready (10 of which get reserved below).
                let run_at = if i % 100 < 45 { NOW + 3_600_000 } else { NOW };
                JobSpec::new(
                    topics[i % TOPICS].clone(),
                    JobId::parse(format!("job-{i:08}")).unwrap(),
                    format!("{i:0>100}"),
                    run_at,
                )
            })
            .collect();
        store
            .push_batch(specs, PushMode::Reject, NOW)
            .await
            .expect("push");
    }
    let mut reserved = 0;
    while reserved < jobs / 10 {
        let got = store
            .reserve(&topics, BATCH.min(jobs / 10 - reserved), NOW)
            .await
            .expect("reserve");
        if got.is_empty() {
            break;
        }
        reserved += got.len();
    }
    println!(
        "wrote {jobs} jobs ({reserved} reserved) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

async fn measure_open(dir: &Path, label: &str) {
    let before = rss_mib();
    let started = Instant::now();
    let store = open(dir).await;
    let took = started.elapsed();
    let stats = store.stats().await.unwrap();
    let n: u64 = stats.topics.values().map(|c| c.total()).sum();
    let file = std::fs::metadata(dir.join(DB_FILE_NAME)).unwrap().len();
    println!(
        "open {label}: {n} jobs, file {:.1} MiB, {:.2} s (RSS {before} before, {} after)",
        file as f64 / (1 << 20) as f64,
        took.as_secs_f64(),
        rss_mib()
    );
}

/// Child mode: open the store, say so, and wait to be killed.
async fn hold(dir: &Path) {
    let _store = open(dir).await;
    println!("held");
    tokio::time::sleep(std::time::Duration::from_secs(600)).await;
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--hold") {
        return hold(Path::new(&args[1])).await;
    }
    let jobs: usize = args.first().map_or(1_000_000, |s| s.parse().expect("JOBS"));
    let tmp;
    let dir: PathBuf = match args.get(1) {
        Some(d) => d.into(),
        None => {
            tmp = tempfile::tempdir().unwrap();
            tmp.path().to_path_buf()
        }
    };
    println!("embedded_open_time: jobs={jobs} dir={}", dir.display());
    write(&dir, jobs).await;
    measure_open(&dir, "after clean shutdown").await;

    // Open in a child and kill -9 it, so the file is left as a crash leaves it.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--hold".as_ref(), dir.as_os_str()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "held", "child did not open the store");
    child.kill().unwrap();
    child.wait().unwrap();
    measure_open(&dir, "after kill -9").await;
    measure_open(&dir, "after clean shutdown again").await;
}
