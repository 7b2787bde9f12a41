//! [`RedisCluster`]: a throwaway Redis Cluster for tests, built like an operator would: one
//! `redis-server --cluster-enabled yes` per node on free loopback ports (client port and
//! cluster bus port both chosen, so nothing lands above 65535), each in its own temp dir with
//! no persistence, then `redis-cli --cluster create ... --cluster-replicas R --cluster-yes`,
//! then a wait until every node reports `cluster_state:ok` and knows every other node, and
//! every replica has finished its first sync.
//! `redis-cli` gives each master an equal, contiguous slot range, in port order of creation.
//!
//! Cleanup that survives a `static`: a cluster shared by a whole test binary lives in a
//! `static` and is never dropped, so each `redis-server` runs under a tiny `sh` wrapper that
//! holds a pipe from the test process on its stdin: when the pipe closes (this handle is
//! dropped, [`RedisCluster::stop_node`] is called, or the test process exits in any way,
//! SIGKILL and panics included, since the kernel closes the pipe), the wrapper kills its
//! `redis-server` (SIGKILL) and removes the node's dir. No `unsafe`, no `libc`, no
//! `PR_SET_PDEATHSIG` (which fires when the spawning *thread* exits, i.e. after the first test).
//!
//! Never skips: without `redis-server`/`redis-cli` the test fails with one line saying how to
//! install them. Not here: reading or writing delayq's data (tests do that).

use super::redis_server::{answers_as, read_log, redis_server_path, tool_path};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a node may take to answer, and the cluster to become healthy.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The wrapper: `$1` is the node's dir, the rest is the redis-server command. Prints the
/// server's pid, then waits for EOF on stdin and kills the server and removes the dir.
const WRAPPER: &str = r#"dir=$1; shift
"$@" </dev/null >/dev/null 2>&1 &
pid=$!
echo "$pid"
read _ignored
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
rm -rf "$dir""#;

pub struct RedisCluster {
    nodes: Vec<Node>,
    masters: usize,
}

struct Node {
    port: u16,
    pid: u32,
    dir: PathBuf,
    wrapper: Child,
    /// Closing it makes the wrapper kill the server; `None` once stopped.
    lifeline: Option<ChildStdin>,
}

impl Node {
    fn stop(&mut self) {
        if self.lifeline.take().is_some() {
            let _ = self.wrapper.wait();
        }
    }
}

impl RedisCluster {
    /// A healthy cluster of `masters` masters (at least 3, as `redis-cli` requires), each with
    /// `replicas_per_master` replicas.
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        assert!(masters >= 3, "redis-cli --cluster create needs 3 masters");
        let cli = tool_path("redis-cli");
        let server = redis_server_path();
        let total = masters * (1 + replicas_per_master);
        let mut nodes: Vec<Node> = Vec::with_capacity(total);
        while nodes.len() < total {
            nodes.push(start_node(&server));
        }
        let mut cluster = RedisCluster { nodes, masters };
        let out = Command::new(&cli)
            .arg("--cluster")
            .arg("create")
            .args(
                cluster
                    .nodes
                    .iter()
                    .map(|n| format!("127.0.0.1:{}", n.port)),
            )
            .arg("--cluster-replicas")
            .arg(replicas_per_master.to_string())
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("could not run {}: {e}", cli.display()));
        if !out.status.success() {
            let logs = cluster.logs();
            cluster.stop_all();
            panic!(
                "redis-cli --cluster create failed: {}\n{}\n{logs}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        cluster.wait_healthy(total);
        cluster
    }

    /// The URL of every running node, masters first (in creation order).
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.lifeline.is_some())
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect()
    }

    /// Client ports of all nodes, in creation order (the first `masters` were created as
    /// masters; after a failover, ask [`RedisCluster::slot_owners`]).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    pub fn masters(&self) -> usize {
        self.masters
    }

    /// A plain (non-cluster) connection to one node, e.g. to read a key it owns.
    pub fn node(&self, port: u16) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .unwrap_or_else(|e| panic!("connect to cluster node {port}: {e}"))
    }

    /// Which master port serves each slot range, as the first running node sees it
    /// (`CLUSTER NODES`): `(first slot, last slot) -> port`.
    pub fn slot_owners(&self) -> BTreeMap<(u16, u16), u16> {
        let port = self.running_port();
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.node(port))
            .expect("CLUSTER NODES");
        let mut owners = BTreeMap::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() < 8 || !f[2].split(',').any(|x| x == "master") || f[2].contains("fail") {
                continue;
            }
            let port: u16 = f[1]
                .split(['@', ':'])
                .nth(1)
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("bad CLUSTER NODES line: {line}"));
            for range in &f[8..] {
                if range.starts_with('[') {
                    continue; // a slot being migrated
                }
                let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                owners.insert((lo.parse().unwrap(), hi.parse().unwrap()), port);
            }
        }
        owners
    }

    /// The master port serving `slot`.
    pub fn owner_of(&self, slot: u16) -> u16 {
        self.slot_owners()
            .iter()
            .find(|((lo, hi), _)| (*lo..=*hi).contains(&slot))
            .map(|(_, port)| *port)
            .unwrap_or_else(|| panic!("no master serves slot {slot}"))
    }

    /// Kills one node (SIGKILL, like a crash) and waits until it is gone.
    pub fn stop_node(&mut self, port: u16) {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"));
        node.stop();
    }

    /// Waits until every running replica has applied everything its master had written when
    /// this was called (its `slave_repl_offset` has reached the master's `master_repl_offset`);
    /// panics with the logs after `within`. Not `WAIT`: a connection that wrote nothing waits for
    /// nothing, so `WAIT` on a fresh connection answers at once whatever the replicas hold.
    pub fn wait_replicated(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let targets: Vec<(u16, u64)> = self
            .nodes
            .iter()
            .filter(|n| n.lifeline.is_some())
            .filter_map(|n| {
                let info = replication_info(n.port);
                let master: u16 = info_field(&info, "master_port")?.parse().ok()?;
                let offset = info_field(&replication_info(master), "master_repl_offset")?
                    .parse()
                    .ok()?;
                Some((n.port, offset))
            })
            .collect();
        for (replica, offset) in targets {
            loop {
                let applied: u64 = info_field(&replication_info(replica), "slave_repl_offset")
                    .and_then(|o| o.parse().ok())
                    .unwrap_or(0);
                if applied >= offset {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "replica {replica} stayed at offset {applied} < {offset}; logs:\n{}",
                    self.logs()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Waits until every running node reports `cluster_state:ok` and serves all 16384 slots;
    /// panics with the logs after `within`.
    pub fn wait_ok(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let ok = self.nodes.iter().filter(|n| n.lifeline.is_some()).all(|n| {
                let info = cluster_info(n.port);
                info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
            });
            if ok {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the cluster did not become healthy; logs:\n{}", self.logs());
    }

    fn wait_healthy(&self, total: usize) {
        let deadline = Instant::now() + START_TIMEOUT;
        let known = format!("cluster_known_nodes:{total}\r\n");
        while Instant::now() < deadline {
            if self.nodes.iter().all(|n| {
                let info = cluster_info(n.port);
                info.contains("cluster_state:ok") && info.contains(&known) && replica_synced(n.port)
            }) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the cluster did not become healthy; logs:\n{}", self.logs());
    }

    fn running_port(&self) -> u16 {
        self.nodes
            .iter()
            .find(|n| n.lifeline.is_some())
            .map(|n| n.port)
            .expect("no cluster node is running")
    }

    /// Every node's log, for panics.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("--- node {} ---\n{}", n.port, tail(&read_log(&n.dir), 30)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn stop_all(&mut self) {
        for n in &mut self.nodes {
            n.stop();
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Starts one cluster-enabled node; retries on a port taken meanwhile.
fn start_node(server: &Path) -> Node {
    let mut last_log = String::new();
    for _ in 0..5 {
        let dir = tempfile::Builder::new()
            .prefix("delayq-cluster-")
            .tempdir()
            .expect("create temp dir for a cluster node")
            .keep();
        let [port, bus] = free_ports();
        let mut wrapper = Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("delayq-redis-node")
            .arg(&dir)
            .arg(server)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", "2000"])
            .arg("--port")
            .arg(port.to_string())
            .arg("--cluster-port")
            .arg(bus.to_string())
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("could not run sh for redis-server: {e}"));
        let lifeline = wrapper.stdin.take();
        let mut line = String::new();
        let _ = BufReader::new(wrapper.stdout.take().expect("wrapper stdout")).read_line(&mut line);
        let pid: u32 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the redis-server wrapper printed {line:?}, not a pid"));
        let mut node = Node {
            port,
            pid,
            dir,
            wrapper,
            lifeline,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline && !answers_as(port, node.pid) {
            if !Path::new(&format!("/proc/{}", node.pid)).exists()
                || read_log(&node.dir).contains("Address already in use")
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if answers_as(port, node.pid) {
            return node;
        }
        last_log = read_log(&node.dir);
        node.stop();
        if !last_log.contains("Address already in use") {
            break;
        }
    }
    panic!("a cluster redis-server did not start; its log:\n{last_log}");
}

/// Two distinct loopback ports that were free a moment ago (client and cluster bus).
fn free_ports() -> [u16; 2] {
    [super::free_port(), super::free_port()]
}

/// Whether a node is a master or a replica whose initial sync is done.
fn replica_synced(port: u16) -> bool {
    let info = replication_info(port);
    info.contains("role:master")
        || info.contains("role:slave") && info.contains("master_link_status:up")
}

/// `INFO replication` of one node, or "" if it does not answer.
fn replication_info(port: u16) -> String {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
        .and_then(|mut c| redis::cmd("INFO").arg("replication").query(&mut c))
        .unwrap_or_default()
}

/// The value of `name:value` in an `INFO` reply.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// `CLUSTER INFO` of one node, or "" if it does not answer.
fn cluster_info(port: u16) -> String {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
        .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut c))
        .unwrap_or_default()
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
