//! The `delayq` binary: `delayq serve` runs the server, the other verbs are a command-line
//! client for a running one (cli.rs). Thin on purpose: parsing and verbs are in cli.rs, text
//! output in output.rs, the server in the library.

mod cli;
mod output;

use std::process::ExitCode;
use std::time::Duration;

/// mimalloc: per-thread free lists, where glibc's malloc spends a tenth of the server's CPU at
/// 10,000 jobs a second consolidating and locking its arenas (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long work still running once the command is done may hold the exit: a callback's host
/// name lookup runs on a thread of its own and cannot be cancelled (a resolver that does not
/// answer takes tens of seconds).
const EXIT_GRACE: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    // Usage errors, --help and --version are clap's: printed, exit 2 (usage) or 0.
    let cli = cli::parse();
    // Before any HTTP client or Redis connection is made.
    delayq::install_tls_provider();
    let launch = match cli::launch(cli) {
        Ok(launch) => launch,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let cli::Launch::Serve(config) = &launch {
        builder.worker_threads(delayq::config::worker_threads(config));
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(cli::run(launch));
    runtime.shutdown_timeout(EXIT_GRACE);
    match result {
        Ok(code) => code,
        Err(e) => {
            // `{:#}`: the whole context chain, on one line.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
