//! Settings of `delayq serve`, with their defaults. Loading them (flags, `DELAYQ_*` variables,
//! the TOML file given with `--config`) is also here; nothing else reads the environment.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Everything `delayq serve` can be told. Each field's default is in [`Config::default`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Address of the HTTP listener. Default `127.0.0.1:9277` (loopback: expose it on purpose).
    pub listen: SocketAddr,
    /// Redis URL (`redis://`, `rediss://`); `None` selects the embedded store.
    pub redis: Option<String>,
    /// Directory of the embedded store. Default `./delayq-data`.
    pub data_dir: PathBuf,
    /// Prefix of every Redis key, so several namespaces can share one Redis. Default `delayq`.
    pub prefix: String,
    /// Number of Redis shards jobs are spread over (each one hash slot). Default 8.
    pub shards: u16,
    /// Largest job body in bytes. Default 1 MiB.
    pub max_body_bytes: usize,
    /// How long the seed API's `/pop` waits when the request gives no `timeout`. Default 178 s,
    /// as in the original.
    pub compat_pop_timeout_secs: u64,
    /// Longest long-poll a request may ask for. Default 300 s.
    pub max_wait_secs: u64,
    /// Most jobs in one batch push, reserve or finish. Default 1000.
    pub max_batch: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 9277)),
            redis: None,
            data_dir: PathBuf::from("./delayq-data"),
            prefix: "delayq".to_string(),
            shards: 8,
            max_body_bytes: crate::job::DEFAULT_MAX_BODY_BYTES,
            compat_pop_timeout_secs: 178,
            max_wait_secs: 300,
            max_batch: 1000,
        }
    }
}
