//! The `delayq` binary: `delayq serve` runs the server, the other verbs are a command-line
//! client for a running one (cli.rs). Thin on purpose: parsing and verbs are in cli.rs, text
//! output in output.rs, the server in the library.

mod cli;
mod output;

use clap::Parser as _;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    // Usage errors, --help and --version are clap's: printed, exit 2 (usage) or 0.
    let cli = cli::Cli::parse();
    match cli::run(cli).await {
        Ok(code) => code,
        Err(e) => {
            // `{:#}`: the whole context chain, on one line.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
