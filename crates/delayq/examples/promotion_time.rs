//! Measures the timer's promotion alone: JOBS delayed jobs of one topic, all due at the same
//! millisecond (a tick of as many schedules), made ready by `Store::tick` in passes of 1,000,
//! as the server's timer makes them. A measurement to run by hand in release, not a test:
//!
//!     cargo run --release -p delayq --example promotion_time -- STORE [JOBS] [ROUNDS]
//!
//! STORE is `memory`, `embedded` (a fresh temporary directory) or a Redis URL
//! (`redis://127.0.0.1:PORT`: a private redis-server; the example's jobs go under a prefix of
//! its own per round, and are finished after it). JOBS defaults to 100,000, ROUNDS to 3 (each round pushes
//! the jobs again into an empty store). Prints, per round, the time from the first pass to the
//! last, and when the 50,000th and 99,000th job were ready (the passes' cumulative counts);
//! with REDIS_PID set (the redis-server's pid), also that server's CPU time over the passes;
//! with PAUSE_MS, it waits that long between the pushes and the passes (to attach a profiler).
//! Does not judge the figures.

use delayq::job::{JobId, JobSpec, Topic};
use delayq::store::embedded::{EmbeddedOptions, EmbeddedStore};
use delayq::store::memory::MemoryStore;
use delayq::store::redis::{RedisOptions, RedisStore, RedisTarget};
use delayq::store::{PushMode, Store};
use std::sync::Arc;
use std::time::Instant;

const NOW: u64 = 1_767_225_600_000;
const DUE: u64 = NOW + 1_000;
const BATCH: usize = 1_000;
const PASS: usize = 1_000;

async fn store(kind: &str, round: usize, dir: &std::path::Path) -> Arc<dyn Store> {
    match kind {
        "memory" => Arc::new(MemoryStore::new()),
        "embedded" => Arc::new(
            EmbeddedStore::open(EmbeddedOptions::new(dir.join(format!("round-{round}"))))
                .await
                .expect("open the embedded store"),
        ),
        url => Arc::new(
            RedisStore::connect(RedisOptions {
                target: RedisTarget::Server(url.to_string()),
                prefix: format!("promotion-time-{}-{round}", std::process::id()),
                shards: 1,
            })
            .await
            .expect("connect to Redis"),
        ),
    }
}

/// User and system CPU time of the process REDIS_PID names, in ms (clock ticks of 10 ms).
fn redis_cpu_ms() -> Option<u64> {
    let pid = std::env::var("REDIS_PID").ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) end with ')'; utime and stime are the
    // 14th and 15th fields of the line, the 12th and 13th after it.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = args.first().map(String::as_str).unwrap_or("memory");
    let jobs: usize = args.get(1).map_or(100_000, |s| s.parse().expect("JOBS"));
    let rounds: usize = args.get(2).map_or(3, |s| s.parse().expect("ROUNDS"));
    let dir = std::env::temp_dir().join(format!("promotion-time-{}", std::process::id()));
    let topic = Topic::parse("promoted").unwrap();
    let ids: Vec<JobId> = (0..jobs)
        .map(|i| JobId::parse(format!("sched-{i:06}@{DUE}")).unwrap())
        .collect();
    for round in 0..rounds {
        let s = store(kind, round, &dir).await;
        for chunk in ids.chunks(BATCH) {
            let specs = chunk
                .iter()
                .map(|id| JobSpec::new(topic.clone(), id.clone(), "{\"n\":1}", DUE))
                .collect();
            s.push_batch(specs, PushMode::Reject, NOW)
                .await
                .expect("push");
        }
        if let Ok(ms) = std::env::var("PAUSE_MS") {
            // Time to attach a profiler to the store's server before the passes.
            println!("pushed; passes in {ms} ms");
            tokio::time::sleep(std::time::Duration::from_millis(
                ms.parse().expect("PAUSE_MS"),
            ))
            .await;
        }
        let (mut done, mut half, mut p99) = (0, None, None);
        let cpu_before = redis_cpu_ms();
        let started = Instant::now();
        while done < jobs as u64 {
            let out = s.tick(DUE, PASS).await.expect("tick");
            if out.promoted == 0 {
                panic!("a pass promoted nothing with {} of {jobs} done", done);
            }
            done += out.promoted;
            let at = started.elapsed().as_secs_f64() * 1e3;
            if half.is_none() && done * 2 >= jobs as u64 {
                half = Some(at);
            }
            if p99.is_none() && done * 100 >= jobs as u64 * 99 {
                p99 = Some(at);
            }
        }
        let all = started.elapsed().as_secs_f64() * 1e3;
        let cpu = match (cpu_before, redis_cpu_ms()) {
            (Some(a), Some(b)) => format!(", redis-server CPU {} ms", b - a),
            _ => String::new(),
        };
        println!(
            "{kind} round {round}: {jobs} promoted in {all:.1} ms (50%: {:.1} ms, 99%: {:.1} ms){cpu}",
            half.unwrap_or(all),
            p99.unwrap_or(all)
        );
        for chunk in ids.chunks(BATCH) {
            s.finish_batch(chunk).await.expect("clean up");
        }
        s.stop().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
