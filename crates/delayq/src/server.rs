//! Wiring: opens the store, starts the dispatcher, serves HTTP until shutdown.

use crate::config::Config;

/// Runs `delayq serve` with these settings until SIGINT/SIGTERM. STUB.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let _ = config;
    anyhow::bail!("server not implemented yet")
}
