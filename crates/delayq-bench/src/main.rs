//! `delayq-bench`: drives a running delayq server (compat or /v1 API) or a beanstalkd over
//! loopback with many connections and prints what it measured, as a table or one JSON line
//! (`--json`). `compare` turns JSON lines from several runs and systems (including the Node
//! BullMQ driver's) into median tables with ratios. This file only parses flags and dispatches;
//! the workloads are in `workload/`, the protocols in `driver/`.

mod body;
mod driver;
mod probe;
mod receiver;
mod report;
mod stats;
mod workload;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use driver::{Endpoint, Protocol};
use std::path::PathBuf;

#[derive(Parser)]
#[command(version, about = "Load generator for delayq and its peers")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// W1 lifecycle: push N delayed jobs while consumers pop and finish them.
    W1 {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        params: workload::lifecycle::Params,
    },
    /// W2 memory: M jobs pending for an hour; bytes per pending job; cleanup rate.
    W2 {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        params: workload::memory::Params,
    },
    /// W3 steady fire: a paced stream of due jobs over a large far-future backlog.
    W3 {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        params: workload::steady::Params,
    },
    /// W4 burst: N jobs due in the same millisecond.
    W4 {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        params: workload::burst::Params,
    },
    /// Callbacks: jobs the server calls back on the bench's own receiver (`--api v1`, and
    /// `delayq serve --callback-allow 127.0.0.1`): callbacks per second (`--shape burst` or
    /// `lifecycle`) or lateness of the call at a steady rate (`--shape steady`).
    Callback {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        params: workload::callback::Params,
    },
    /// Listing: the dashboard's /v1 listing calls timed over many pending jobs (`--api v1`).
    Listing {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        params: workload::listing::Params,
    },
    /// Recurring schedules: creates `--count` of them over /v1 (schedules/s), then measures
    /// for a few minute ticks how late each tick's jobs are pushed and the server's CPU per
    /// tick (`--api v1`; `--server-pid` for the CPU).
    Schedules {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        params: workload::schedules::Params,
    },
    /// RabbitMQ delayed messages at a steady rate, through delayq's intake (`--system delayq`)
    /// or RabbitMQ's per-message TTL and dead-letter exchange (`--system ttl-dlx`): messages per
    /// second reaching the target queue, lateness, early, lost and duplicates.
    Amqp {
        #[command(flatten)]
        params: workload::amqp::Params,
        /// One JSON line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Median tables with ratios from JSON result lines (files, or stdin with none).
    Compare {
        /// The label the ratios are taken against.
        #[arg(long, default_value = "delayq-redis")]
        baseline: String,
        files: Vec<PathBuf>,
    },
    /// Prints a free TCP port on 127.0.0.1 (for scripts).
    FreePort,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Target {
    Delayq,
    Beanstalkd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Api {
    /// The compat API (`seed` is accepted too, the name older scripts used).
    #[value(alias = "seed")]
    Compat,
    V1,
}

#[derive(Debug, Clone, Args)]
struct CommonArgs {
    /// The system under test.
    #[arg(long, value_enum, default_value_t = Target::Delayq)]
    target: Target,
    /// delayq API: `compat` (one job per request, second delays) for comparisons, `v1` for
    /// batch paths and ms delays.
    #[arg(long, value_enum, default_value_t = Api::Compat)]
    api: Api,
    /// Server address, loopback only (default 127.0.0.1:9277, or :11300 for beanstalkd).
    #[arg(long)]
    addr: Option<String>,
    /// Row name in comparison tables (default: target and api).
    #[arg(long)]
    label: Option<String>,
    /// Prefix of job ids and topic, so re-runs never collide (default random).
    #[arg(long)]
    run_id: Option<String>,
    /// Topic / tube (default `bench-<run-id>`).
    #[arg(long)]
    topic: Option<String>,
    /// Producer connections.
    #[arg(long, default_value_t = 8)]
    producers: usize,
    /// Consumer connections.
    #[arg(long, default_value_t = 8)]
    consumers: usize,
    /// Jobs per push request and per reserve/finish request (/v1 batches; beanstalkd
    /// pipelines puts and deletes; the compat API sends one request per job regardless).
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Body size in bytes (the due time and sequence number, padded).
    #[arg(long, default_value_t = 30)]
    body_bytes: usize,
    /// Time-to-run of every job, far above the run so no legitimate redelivery happens.
    #[arg(long, default_value_t = 3600)]
    ttr_s: u64,
    /// How long consumers keep waiting for missing jobs after the last due time.
    #[arg(long, default_value_t = 30)]
    drain_timeout_s: u64,
    /// Print one JSON line instead of a table.
    #[arg(long)]
    json: bool,
    /// No progress bars.
    #[arg(long)]
    no_progress: bool,
    /// Redis URL to read `INFO memory` from (W2).
    #[arg(long)]
    redis_url: Option<String>,
    /// Data directory whose size to read (W2, embedded store or beanstalkd binlog).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Server process whose RSS (W2) and CPU time (W1) to read from /proc.
    #[arg(long)]
    server_pid: Option<u32>,
}

fn is_loopback(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .map(|ip| ip.is_loopback())
            .unwrap_or(false)
}

impl CommonArgs {
    fn resolve(&self) -> Result<(workload::Common, String, String)> {
        let protocol = match (self.target, self.api) {
            (Target::Beanstalkd, _) => Protocol::Beanstalkd,
            (Target::Delayq, Api::Compat) => Protocol::Compat,
            (Target::Delayq, Api::V1) => Protocol::V1,
        };
        let addr = self.addr.clone().unwrap_or_else(|| match self.target {
            Target::Beanstalkd => "127.0.0.1:11300".into(),
            Target::Delayq => "127.0.0.1:9277".into(),
        });
        if !is_loopback(&addr) {
            bail!("--addr {addr}: the bench only drives loopback addresses");
        }
        if let Some(u) = &self.redis_url {
            let hostport = u
                .trim_start_matches("redis://")
                .split('/')
                .next()
                .unwrap_or("");
            if !is_loopback(hostport.rsplit('@').next().unwrap_or("")) {
                bail!("--redis-url {u}: loopback only");
            }
        }
        let target = match self.target {
            Target::Delayq => "delayq",
            Target::Beanstalkd => "beanstalkd",
        };
        let run_id = self
            .run_id
            .clone()
            .unwrap_or_else(|| format!("{:08x}", fastrand::u32(..)));
        let topic = self
            .topic
            .clone()
            .unwrap_or_else(|| format!("bench-{run_id}"));
        let label = self.label.clone().unwrap_or_else(|| match self.target {
            Target::Beanstalkd => "beanstalkd".into(),
            Target::Delayq => format!("delayq-{}", protocol.name()),
        });
        let common = workload::Common {
            protocol,
            target: target.into(),
            label,
            run_id,
            producers: self.producers.max(1),
            consumers: self.consumers.max(1),
            batch: self.batch.max(1),
            body_bytes: self.body_bytes,
            drain_timeout_s: self.drain_timeout_s,
            progress: !self.no_progress && !self.json,
            probes: probe::Probes {
                redis_url: self.redis_url.clone(),
                server_pid: self.server_pid,
                data_dir: self.data_dir.clone(),
            },
        };
        Ok((common, addr, topic))
    }
}

fn print(r: &report::RunResult, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        print!("{}", report::single_run(r));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let (common_args, run): (CommonArgs, Box<dyn FnOnce(_, _) -> _>) = match cli.cmd {
        Cmd::Compare { baseline, files } => {
            let mut text = String::new();
            if files.is_empty() {
                use std::io::Read;
                std::io::stdin().read_to_string(&mut text)?;
            }
            for f in files {
                text.push_str(
                    &std::fs::read_to_string(&f)
                        .with_context(|| format!("reading {}", f.display()))?,
                );
                text.push('\n');
            }
            print!(
                "{}",
                report::comparison(&report::parse_results(&text), &baseline)
            );
            return Ok(());
        }
        Cmd::Amqp { params, json } => {
            let r = workload::amqp::run(&params).await?;
            return print(&r, json);
        }
        Cmd::FreePort => {
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            println!("{}", l.local_addr()?.port());
            return Ok(());
        }
        Cmd::W1 { common, params } => (
            common,
            boxed(move |c, ep| {
                Box::pin(async move { workload::lifecycle::run(&c, &ep, &params).await })
            }),
        ),
        Cmd::W2 { common, params } => (
            common,
            boxed(move |c, ep| {
                Box::pin(async move { workload::memory::run(&c, &ep, &params).await })
            }),
        ),
        Cmd::W3 { common, params } => (
            common,
            boxed(move |c, ep| {
                Box::pin(async move { workload::steady::run(&c, &ep, &params).await })
            }),
        ),
        Cmd::W4 { common, params } => (
            common,
            boxed(move |c, ep| {
                Box::pin(async move { workload::burst::run(&c, &ep, &params).await })
            }),
        ),
        Cmd::Listing { common, params } => (
            common,
            boxed(move |c, ep| {
                Box::pin(async move { workload::listing::run(&c, &ep, &params).await })
            }),
        ),
        Cmd::Schedules { common, params } => (
            common,
            boxed(move |c, ep| {
                Box::pin(async move { workload::schedules::run(&c, &ep, &params).await })
            }),
        ),
        Cmd::Callback { common, params } => (
            common,
            boxed(move |c, ep| {
                Box::pin(async move { workload::callback::run(&c, &ep, &params).await })
            }),
        ),
    };
    let (common, addr, topic) = common_args.resolve()?;
    let ep = Endpoint::new(common.protocol, &addr, &topic, common_args.ttr_s)?;
    let r = run(common, ep).await?;
    print(&r, common_args.json)
}

type RunFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<report::RunResult>>>>;

fn boxed(
    f: impl FnOnce(workload::Common, std::sync::Arc<Endpoint>) -> RunFuture + 'static,
) -> Box<dyn FnOnce(workload::Common, std::sync::Arc<Endpoint>) -> RunFuture> {
    Box::new(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_pass() {
        assert!(is_loopback("127.0.0.1:9277"));
        assert!(is_loopback("127.3.4.5:1"));
        assert!(is_loopback("localhost:11300"));
        assert!(is_loopback("[::1]:80"));
        assert!(!is_loopback("10.0.0.1:9277"));
        assert!(!is_loopback("example.com:80"));
    }

    #[test]
    fn flags_parse() {
        Cli::command_for_tests().debug_assert();
    }

    impl Cli {
        fn command_for_tests() -> clap::Command {
            <Cli as clap::CommandFactory>::command()
        }
    }
}
