//! Reading a server's footprint from outside: Redis `used_memory` (via `INFO memory`), a data
//! directory's size on disk, and a process's resident set from `/proc/<pid>/status`. The parsers
//! are pure; the readers do the I/O. Nothing here changes the server.

use anyhow::{Context, Result, anyhow};
use std::collections::HashMap;
use std::path::Path;

/// `used_memory` from the text of `INFO memory`.
pub fn parse_used_memory(info: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
}

/// `VmRSS` from the text of `/proc/<pid>/status`, in bytes.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

/// `utime + stime` (clock ticks) from the text of `/proc/<pid>/stat`. The command name may
/// hold spaces and parentheses, so fields are counted after its last `)`.
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime field 14, stime field 15 (proc(5)).
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks a second in `/proc`'s files (USER_HZ: 100 on Linux, whatever the kernel's HZ).
const TICKS_PER_S: f64 = 100.0;

/// CPU seconds used so far by process `pid`.
pub fn process_cpu_s(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu_ticks(&s).map(|t| t as f64 / TICKS_PER_S)
}

/// Nanoseconds each of a process's threads has spent so far runnable but waiting for a CPU, by
/// thread id: the second field of each `/proc/<pid>/task/<tid>/schedstat`.
pub fn thread_cpu_waits_ns(pid: u32) -> Option<HashMap<u32, u64>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut waits = HashMap::new();
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // A thread may end between the listing and the read.
        if let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) {
            waits.insert(tid, parse_schedstat_wait_ns(&text)?);
        }
    }
    Some(waits)
}

/// A process's CPU time so far (seconds) and its threads' run-queue waits (`None` where
/// `/proc` could not be read).
#[derive(Debug, Clone)]
pub struct ProcessTimes {
    pub cpu_s: Option<f64>,
    waits_ns: Option<HashMap<u32, u64>>,
}

impl ProcessTimes {
    pub fn read(pid: u32) -> ProcessTimes {
        ProcessTimes {
            cpu_s: process_cpu_s(pid),
            waits_ns: thread_cpu_waits_ns(pid),
        }
    }

    /// CPU seconds used since `earlier` (a reading of the same process).
    pub fn cpu_since(&self, earlier: &ProcessTimes) -> Option<f64> {
        earlier.cpu_s.zip(self.cpu_s).map(|(a, b)| b - a)
    }

    /// Seconds its threads waited for a CPU since `earlier`: each thread alive now counts
    /// from its earlier reading (or from its start, if it is new); a thread that ended in
    /// between takes its share with it, so this is a lower bound, never negative.
    pub fn wait_since(&self, earlier: &ProcessTimes) -> Option<f64> {
        let (then, now) = (earlier.waits_ns.as_ref()?, self.waits_ns.as_ref()?);
        let ns: u64 = now
            .iter()
            .map(|(tid, w)| w.saturating_sub(then.get(tid).copied().unwrap_or(0)))
            .sum();
        Some(ns as f64 / 1e9)
    }
}

/// Nanoseconds runnable but waiting for a CPU, from the text of a `schedstat` file (its fields:
/// time on a CPU, time waiting on a run queue, times run; sched-stats.rst of the kernel).
pub fn parse_schedstat_wait_ns(text: &str) -> Option<u64> {
    let mut fields = text.split_whitespace();
    fields.next()?.parse::<u64>().ok()?;
    fields.next()?.parse().ok()
}

/// The machine's CPU time so far, in clock ticks: summed over every core (the `cpu` line of
/// `/proc/stat`: user, nice, system, idle, iowait, irq, softirq, steal; guest time is already
/// in user), and each core's (its `cpuN` line).
///
/// Shares are taken of the wall time between two readings, not of the ticks' sum: a tickless
/// kernel times each idle period exactly, but counts busy time a clock tick at a time, and on
/// these VMs the fields' sum over a W3 run at 2,000 jobs/s came to 0.68-1.13x the wall time
/// (busy spells shorter than a tick), which put the idle share of their sum up to 30 points
/// off; the idle time over the wall time agreed within 4 points with the CPU time of every
/// thread on the machine (`/proc/*/task/*/schedstat`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineTicks {
    /// Idle and waiting for I/O: time no process wanted a core.
    pub idle: u64,
    /// Taken by the hypervisor for other guests while this machine wanted a core.
    pub steal: u64,
    pub total: u64,
    /// Each core's idle and total ticks, in `/proc/stat`'s order.
    pub cores: Vec<(u64, u64)>,
}

/// Shares of the machine's time between two [`MachineTicks`], in percent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MachineShares {
    /// Of all cores' time: idle (nobody wanted a core) and stolen.
    pub idle: f64,
    pub steal: f64,
    /// Of the busiest core's time, the share it was not idle: a core near 100 % while the
    /// machine has idle time says the work waited on one core while another had room.
    /// `None` when the cores were not read (or changed in number).
    pub busiest_core: Option<f64>,
}

impl MachineTicks {
    /// From the text of `/proc/stat`.
    pub fn parse(stat: &str) -> Option<MachineTicks> {
        /// Idle (+ iowait), steal and total of one `cpu` line's fields.
        fn fields(line: &str) -> Option<(u64, u64, u64)> {
            let f: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .map(|v| v.parse().ok())
                .collect::<Option<_>>()?;
            Some((
                f.get(3)? + f.get(4).copied().unwrap_or(0),
                f.get(7).copied().unwrap_or(0),
                f.iter().take(8).sum(),
            ))
        }
        let (idle, steal, total) = fields(stat.lines().find(|l| l.starts_with("cpu "))?)?;
        let cores = stat
            .lines()
            .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
            .map(|l| fields(l).map(|(idle, _, total)| (idle, total)))
            .collect::<Option<_>>()
            .unwrap_or_default();
        Some(MachineTicks {
            idle,
            steal,
            total,
            cores,
        })
    }

    /// Now, or `None` where `/proc/stat` cannot be read.
    pub fn now() -> Option<MachineTicks> {
        MachineTicks::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The shares of the machine's time since `earlier`, read `wall_s` seconds before: of
    /// the wall time on every core (see the type); of the ticks' sum where the cores were not
    /// read. `None` when no tick passed.
    pub fn since(&self, earlier: &MachineTicks, wall_s: f64) -> Option<MachineShares> {
        let ticks = self.total.checked_sub(earlier.total).filter(|&t| t > 0)? as f64;
        let per_core = wall_s * TICKS_PER_S;
        let n = self.cores.len();
        let by_core = n > 0 && n == earlier.cores.len() && per_core > 0.0;
        let total = if by_core { n as f64 * per_core } else { ticks };
        let share =
            |now: u64, then: u64| (now.saturating_sub(then) as f64 / total * 100.0).min(100.0);
        let busiest_core = self
            .cores
            .iter()
            .zip(&earlier.cores)
            .filter(|_| by_core)
            .map(|(&(idle, _), &(idle0, _))| {
                let idle = (idle.saturating_sub(idle0) as f64).min(per_core);
                // 100 less the idle share, not busy time over wall time: that quotient can
                // round to a hair above 100 for a core with no idle tick.
                100.0 - 100.0 * idle / per_core
            })
            .reduce(f64::max);
        Some(MachineShares {
            idle: share(self.idle, earlier.idle),
            steal: share(self.steal, earlier.steal),
            busiest_core,
        })
    }
}

/// Redis `used_memory` in bytes.
pub async fn redis_used_memory(url: &str) -> Result<u64> {
    let client = redis::Client::open(url).with_context(|| format!("redis url {url}"))?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("connecting to {url}"))?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .context("INFO memory")?;
    parse_used_memory(&info).ok_or_else(|| anyhow!("no used_memory in INFO memory"))
}

/// Resident set size of process `pid`, bytes.
pub fn process_rss(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let s = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_vm_rss(&s).ok_or_else(|| anyhow!("no VmRSS in {path}"))
}

/// Apparent size of every file under `dir` (recursively), bytes.
pub fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            total += dir_size(&entry.path())?;
        } else {
            total += meta.len();
        }
    }
    Ok(total)
}

/// The three footprints, each `None` when not asked for (or unreadable, with a note).
#[derive(Debug, Clone, Copy, Default)]
pub struct Footprint {
    pub redis_bytes: Option<u64>,
    pub rss_bytes: Option<u64>,
    pub data_dir_bytes: Option<u64>,
}

/// Where to read a footprint from; any of the three may be absent.
#[derive(Debug, Clone, Default)]
pub struct Probes {
    pub redis_url: Option<String>,
    pub server_pid: Option<u32>,
    pub data_dir: Option<std::path::PathBuf>,
}

impl Probes {
    pub async fn read(&self) -> Result<Footprint> {
        let redis_bytes = match &self.redis_url {
            Some(u) => Some(redis_used_memory(u).await?),
            None => None,
        };
        let rss_bytes = self.server_pid.map(process_rss).transpose()?;
        let data_dir_bytes = self.data_dir.as_deref().map(dir_size).transpose()?;
        Ok(Footprint {
            redis_bytes,
            rss_bytes,
            data_dir_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn used_memory_is_read_from_info_text() {
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n";
        assert_eq!(parse_used_memory(info), Some(1_048_576));
        assert_eq!(parse_used_memory("# Memory\r\n"), None);
    }

    #[test]
    fn machine_ticks_are_read_from_the_cpu_lines() {
        let stat = "cpu  100 5 50 800 20 0 3 22 9 0\ncpu0 50 2 25 400 10 0 1 11 0 0\n\
                    cpu1 50 3 25 400 10 0 2 11 9 0\nintr 5 6\n";
        let t = MachineTicks::parse(stat).unwrap();
        // idle + iowait; steal; the first eight fields (guest time is already in user).
        assert_eq!((t.idle, t.steal, t.total), (820, 22, 1000));
        assert_eq!(t.cores, [(410, 499), (410, 501)]);
        // An older kernel's line without steal.
        let t = MachineTicks::parse("cpu  100 5 50 800 20 0 3\n").unwrap();
        assert_eq!((t.idle, t.steal, t.total), (820, 0, 978));
        assert!(t.cores.is_empty());
        assert_eq!(MachineTicks::parse("intr 1 2\n"), None);
    }

    #[test]
    fn machine_shares_are_of_the_wall_time_between_two_readings() {
        let a = MachineTicks {
            idle: 800,
            steal: 10,
            total: 1000,
            cores: vec![(400, 500), (400, 500)],
        };
        // One second on two cores, 100 ticks each. Core 0: 2 ticks idle; core 1: 48.
        let b = MachineTicks {
            idle: 850,
            steal: 60,
            total: 1200,
            cores: vec![(402, 600), (448, 600)],
        };
        assert_eq!(
            b.since(&a, 1.0),
            Some(MachineShares {
                idle: 25.0,
                steal: 25.0,
                busiest_core: Some(98.0)
            })
        );
        // Busy time counted short (150 ticks in all over 2 s of two cores' wall time): the
        // exactly timed idle time is a share of the wall time, not of the ticks' sum.
        let short = MachineTicks {
            idle: 900,
            steal: 10,
            total: 1150,
            cores: vec![(450, 575), (450, 575)],
        };
        assert_eq!(
            short.since(&a, 1.0),
            Some(MachineShares {
                idle: 50.0,
                steal: 0.0,
                busiest_core: Some(50.0)
            })
        );
        assert_eq!(a.since(&a, 1.0), None);
        assert_eq!(a.since(&b, 1.0), None);
        // Without each core's line, the ticks' sum is all there is to go by.
        let one_core = MachineTicks {
            cores: vec![(402, 600)],
            ..b
        };
        let shares = one_core.since(&a, 1.0).unwrap();
        assert_eq!((shares.idle, shares.busiest_core), (25.0, None));
        // A core with no idle tick is 100 % busy, not a rounding error above it (over this
        // wall time the division alone gives 100.00000000000001).
        let busy = MachineTicks {
            cores: vec![(400, 531), (431, 531)],
            ..b
        };
        assert_eq!(
            busy.since(&a, 0.317690676226818).unwrap().busiest_core,
            Some(100.0)
        );
    }

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tredis\nVmPeak:\t 9000 kB\nVmRSS:\t    2048 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(2048 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
    }

    #[test]
    fn cpu_ticks_are_read_after_the_command_name() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(300));
        assert_eq!(parse_stat_cpu_ticks("42 (x) S 1"), None);
    }

    #[test]
    fn run_queue_wait_is_the_second_schedstat_field() {
        assert_eq!(parse_schedstat_wait_ns("81234 5678 12\n"), Some(5678));
        assert_eq!(parse_schedstat_wait_ns("81234\n"), None);
        assert_eq!(parse_schedstat_wait_ns("x 5678 12\n"), None);
    }

    #[test]
    fn own_process_waits_for_a_cpu_when_more_threads_spin_than_there_are_cores() {
        let before = ProcessTimes::read(std::process::id());
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        // Twice as many busy threads as cores for 200 ms: each is runnable throughout, so
        // together they wait about as long as they run.
        let spinners: Vec<_> = (0..2 * cores)
            .map(|_| {
                std::thread::spawn(|| {
                    let end = std::time::Instant::now() + std::time::Duration::from_millis(200);
                    while std::time::Instant::now() < end {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        // Read while they run: a new thread counts from its start.
        std::thread::sleep(std::time::Duration::from_millis(150));
        let during = ProcessTimes::read(std::process::id())
            .wait_since(&before)
            .unwrap();
        for s in spinners {
            s.join().unwrap();
        }
        assert!(
            during > 0.05,
            "{during} s waited by {} spinning threads on {cores} cores",
            2 * cores
        );
    }

    #[test]
    fn own_process_has_a_resident_set() {
        assert!(process_rss(std::process::id()).unwrap() > 0);
    }
}
