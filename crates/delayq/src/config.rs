//! Settings of `delayq serve`, with their defaults, and their loading: flags and `DELAYQ_*`
//! variables ([`ServeArgs`], read by clap), then the TOML file given with `--config`, then the
//! defaults. Nothing else reads the environment.
//!
//! Precedence is flag > environment > file > default. Every value is validated here, whatever
//! its source, and a bad one is an error naming the setting and where it came from
//! ([`ConfigError`]); nothing falls back to a default silently. This module does not open the
//! store or bind the listener: a valid address can still be taken, a valid Redis URL unreachable.

use serde::Deserialize;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Everything `delayq serve` can be told. Each field's default is in [`Config::default`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Address of the HTTP listener. Default `127.0.0.1:9277` (loopback: expose it on purpose).
    pub listen: SocketAddr,
    /// Redis URL (`redis://`, `rediss://`); `None` (and no `redis_cluster`) selects the
    /// embedded store.
    pub redis: Option<String>,
    /// Seed URLs of a Redis Cluster; `None` unless given. Excludes `redis`: a deployment is
    /// one server or one cluster, and guessing which was meant would hide a mistake.
    pub redis_cluster: Option<Vec<String>>,
    /// Directory of the embedded store. Default `./delayq-data`.
    pub data_dir: PathBuf,
    /// Prefix of every Redis key, so several namespaces can share one Redis. Default `delayq`.
    pub prefix: String,
    /// Number of Redis shards jobs are spread over (each one hash slot). Default
    /// [`DEFAULT_SHARDS`] (1) on one Redis server, [`DEFAULT_CLUSTER_SHARDS`] (8) on a cluster.
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
    /// Most long polls waiting at once; one more is refused at once (503 `too_many_waiters`).
    /// Default 10000.
    pub max_waiters: usize,
    /// Bearer tokens every request but `GET /healthz` must carry (`Authorization: Bearer ...`):
    /// those of `auth_tokens` and those of `auth_token_file`, together. Empty (the default): no
    /// authentication, which is why the default listener is loopback.
    pub auth_tokens: Vec<AuthToken>,
    /// Longest a request may take, reading its body included, before it is answered 503
    /// `timeout`; a long poll (`/v1/reserve`, seed `/pop`) gets `max_wait` on top, so its own
    /// wait never trips it. Default 30 s.
    pub request_timeout_secs: u64,
    /// Longest an HTTP/1 connection may go without sending a complete request head, idle
    /// between requests or slow to send one; then it is closed, so idle or stalled clients do
    /// not hold sockets forever. Default 60 s.
    pub idle_timeout_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 9277)),
            redis: None,
            redis_cluster: None,
            data_dir: PathBuf::from("./delayq-data"),
            prefix: "delayq".to_string(),
            shards: DEFAULT_SHARDS,
            max_body_bytes: crate::job::DEFAULT_MAX_BODY_BYTES,
            compat_pop_timeout_secs: 178,
            max_wait_secs: 300,
            max_batch: 1000,
            max_waiters: 10_000,
            auth_tokens: Vec::new(),
            request_timeout_secs: 30,
            idle_timeout_secs: 60,
        }
    }
}

/// A bearer token clients must present. Its `Debug` hides it, so no `Config` or argument
/// dump shows a secret; [`AuthToken::check`] holds the rules, applied when the config loads.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthToken(String);

impl AuthToken {
    /// The token as sent in the header, for comparing.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The token, for sending it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// At least [`MIN_AUTH_TOKEN_LEN`] characters, printable ASCII without spaces or commas
    /// (what fits an `Authorization` header and a comma-separated variable). The message never
    /// quotes the token.
    pub fn check(&self) -> Result<(), String> {
        if let Some(i) = self
            .0
            .bytes()
            .position(|b| !b.is_ascii_graphic() || b == b',')
        {
            return Err(format!(
                "has a character other than printable ASCII at position {} (spaces and commas \
                 are not allowed either)",
                i + 1
            ));
        }
        if self.0.len() < MIN_AUTH_TOKEN_LEN {
            return Err(format!(
                "is {} characters long; at least {MIN_AUTH_TOKEN_LEN} are required",
                self.0.len()
            ));
        }
        Ok(())
    }
}

impl From<&str> for AuthToken {
    fn from(s: &str) -> AuthToken {
        AuthToken(s.to_string())
    }
}

impl From<String> for AuthToken {
    fn from(s: String) -> AuthToken {
        AuthToken(s)
    }
}

/// For clap: any string is taken here and checked with the other settings, so the error names
/// where it came from.
impl std::str::FromStr for AuthToken {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<AuthToken, Self::Err> {
        Ok(AuthToken::from(s))
    }
}

impl fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthToken(***)")
    }
}

/// Most Redis shards: each is one hash slot's worth of keys, and more than this only costs
/// round trips.
pub const MAX_SHARDS: u64 = crate::store::redis::MAX_SHARDS as u64;
/// Default shards on one Redis server. Shards exist to spread one topic over a cluster's
/// masters; one server runs every script on one thread whatever the layout, and each more
/// shard costs `reserve` a peek at every shard and splits the batches of concurrent pushes
/// and finishes (W1 end to end: 3,264 jobs/s with 8 shards, 3,977-4,284 with 1;
/// docs/benchmarks.md).
pub const DEFAULT_SHARDS: u16 = 1;
/// Default shards on a Redis Cluster: 2 to 4 per master of a 3-master cluster.
pub const DEFAULT_CLUSTER_SHARDS: u16 = 8;
/// Largest accepted `max_body_bytes` (64 MiB): a job queue is not a blob store.
pub const MAX_BODY_BYTES_LIMIT: u64 = 64 << 20;
/// Largest accepted `max_waiters`.
pub const MAX_WAITERS_LIMIT: u64 = 1_000_000;
/// Largest accepted `max_batch`.
pub const MAX_BATCH_LIMIT: u64 = 10_000;
/// Largest accepted `max_wait` (one day): keeps seconds-to-milliseconds arithmetic far from
/// overflow, and no HTTP client waits longer.
pub const MAX_WAIT_LIMIT_SECS: u64 = 86_400;
/// Shortest accepted bearer token: 16 random characters are beyond guessing over HTTP.
pub const MIN_AUTH_TOKEN_LEN: usize = 16;
/// Largest accepted `request_timeout` and `idle_timeout` (one day).
pub const MAX_TIMEOUT_SECS: u64 = 86_400;
/// URL schemes the Redis client understands.
const REDIS_SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "redis+unix",
    "valkey+unix",
    "unix",
];
/// URL schemes a Redis Cluster seed may use (cluster nodes are reached over TCP).
const REDIS_CLUSTER_SCHEMES: &[&str] = &["redis", "rediss", "valkey", "valkeys"];

/// The flags of `delayq serve`. Each is also read from `DELAYQ_<NAME>` (clap's `env`), and
/// each but `--config` from the TOML file under its snake_case name. `None` means "not given
/// here": the file or the default decides.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ServeArgs {
    /// Address of the HTTP listener [default: 127.0.0.1:9277]
    #[arg(long, env = "DELAYQ_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,
    /// Redis URL (redis://, rediss://, unix://); without it, the embedded store is used
    #[arg(long, env = "DELAYQ_REDIS", value_name = "URL")]
    pub redis: Option<String>,
    /// Redis Cluster seed URLs, comma-separated (redis://host:port,...); excludes --redis
    #[arg(
        long,
        env = "DELAYQ_REDIS_CLUSTER",
        value_name = "URLS",
        value_delimiter = ','
    )]
    pub redis_cluster: Option<Vec<String>>,
    /// Directory of the embedded store [default: ./delayq-data]
    #[arg(long, env = "DELAYQ_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Prefix of every Redis key [default: delayq]
    #[arg(long, env = "DELAYQ_PREFIX", value_name = "PREFIX")]
    pub prefix: Option<String>,
    /// Number of Redis shards, 1-1024 [default: 1 on a server, 8 on a cluster]
    #[arg(long, env = "DELAYQ_SHARDS", value_name = "N")]
    pub shards: Option<u64>,
    /// Largest job body in bytes, at most 64 MiB [default: 1048576]
    #[arg(long, env = "DELAYQ_MAX_BODY_BYTES", value_name = "BYTES")]
    pub max_body_bytes: Option<u64>,
    /// Seconds the seed API's /pop waits when the request gives no timeout [default: 178]
    #[arg(long, env = "DELAYQ_COMPAT_POP_TIMEOUT", value_name = "SECS")]
    pub compat_pop_timeout: Option<u64>,
    /// Longest long-poll a request may ask for, in seconds [default: 300]
    #[arg(long, env = "DELAYQ_MAX_WAIT", value_name = "SECS")]
    pub max_wait: Option<u64>,
    /// Most jobs in one batch push, reserve or finish, 1-10000 [default: 1000]
    #[arg(long, env = "DELAYQ_MAX_BATCH", value_name = "N")]
    pub max_batch: Option<u64>,
    /// Most long polls waiting at once, 1-1000000 [default: 10000]
    #[arg(long, env = "DELAYQ_MAX_WAITERS", value_name = "N")]
    pub max_waiters: Option<u64>,
    /// Bearer token clients must send (repeat the flag for several; DELAYQ_AUTH_TOKENS takes
    /// a comma-separated list); prefer --auth-token-file: flags show in `ps`
    #[arg(
        long = "auth-token",
        env = "DELAYQ_AUTH_TOKENS",
        value_name = "TOKEN",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub auth_tokens: Vec<AuthToken>,
    /// File of bearer tokens, one per line; blank lines and # comments are ignored
    #[arg(long, env = "DELAYQ_AUTH_TOKEN_FILE", value_name = "FILE")]
    pub auth_token_file: Option<PathBuf>,
    /// Longest a request may take in seconds, a long poll's wait not counted [default: 30]
    #[arg(long, env = "DELAYQ_REQUEST_TIMEOUT", value_name = "SECS")]
    pub request_timeout: Option<u64>,
    /// Seconds a connection may stay idle or take to send a request head [default: 60]
    #[arg(long, env = "DELAYQ_IDLE_TIMEOUT", value_name = "SECS")]
    pub idle_timeout: Option<u64>,
    /// TOML file with any of the settings above, under snake_case keys
    #[arg(long, env = "DELAYQ_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// A configuration that cannot be used. Each variant names the setting or file at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The `--config` file could not be read.
    #[error("cannot read config file {}: {source}", .path.display())]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The `--config` file is not valid TOML, has a key delayq does not know, or a value of the
    /// wrong type. `key` names the key when there is one to name.
    #[error("config file {}{}: {message}", .path.display(), key_suffix(.key))]
    File {
        path: PathBuf,
        key: Option<String>,
        message: String,
    },
    /// A setting has a value outside its rules. `origin` says where the value came from.
    #[error("invalid {setting} (from {origin}): {message}")]
    Invalid {
        setting: &'static str,
        origin: String,
        message: String,
    },
}

fn key_suffix(key: &Option<String>) -> String {
    key.as_ref()
        .map(|k| format!(", key `{k}`"))
        .unwrap_or_default()
}

/// The `--config` file. Keys are the snake_case names of the flags; any other key is an error.
/// Integers are read as TOML's i64 and range-checked with the flags' rules, so a negative or
/// huge value gets the same message as from a flag.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    redis: Option<String>,
    redis_cluster: Option<UrlList>,
    data_dir: Option<PathBuf>,
    prefix: Option<String>,
    shards: Option<i64>,
    max_body_bytes: Option<i64>,
    compat_pop_timeout: Option<i64>,
    max_wait: Option<i64>,
    max_batch: Option<i64>,
    max_waiters: Option<i64>,
    auth_tokens: Option<Vec<String>>,
    auth_token_file: Option<PathBuf>,
    request_timeout: Option<i64>,
    idle_timeout: Option<i64>,
}

/// `redis_cluster` in the file: a TOML array of URLs or one comma-separated string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum UrlList {
    List(Vec<String>),
    Joined(String),
}

impl UrlList {
    fn into_vec(self) -> Vec<String> {
        match self {
            UrlList::List(v) => v,
            UrlList::Joined(s) => s.split(',').map(str::to_string).collect(),
        }
    }
}

/// Where a setting's value came from, for error messages.
#[derive(Debug, Clone, Copy)]
enum Origin<'a> {
    /// The flag or its `DELAYQ_*` variable (clap merged them).
    Args(&'static str),
    File(&'static str, &'a Path),
    Default,
}

impl fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // `auth_tokens` is the one setting whose flag is singular: it is given once per
            // token.
            Origin::Args("auth_tokens") => f.write_str("--auth-token or DELAYQ_AUTH_TOKENS"),
            Origin::Args(key) => write!(
                f,
                "--{} or DELAYQ_{}",
                key.replace('_', "-"),
                key.to_ascii_uppercase()
            ),
            Origin::File(key, path) => write!(f, "`{key}` in {}", path.display()),
            Origin::Default => f.write_str("the default"),
        }
    }
}

/// A value and where it came from.
struct Setting<'a, T> {
    key: &'static str,
    value: T,
    origin: Origin<'a>,
}

impl<'a, T> Setting<'a, T> {
    /// The first of flag/env, file and default that is set.
    fn pick(
        key: &'static str,
        arg: Option<T>,
        file: Option<T>,
        path: &'a Path,
        default: T,
    ) -> Self {
        let (value, origin) = match (arg, file) {
            (Some(v), _) => (v, Origin::Args(key)),
            (None, Some(v)) => (v, Origin::File(key, path)),
            (None, None) => (default, Origin::Default),
        };
        Setting { key, value, origin }
    }

    fn invalid(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            setting: self.key,
            origin: self.origin.to_string(),
            message: message.into(),
        }
    }
}

impl<'a, T> Setting<'a, T> {
    /// The first of flag/env and file that is set; `None` if neither is.
    fn pick_optional(
        key: &'static str,
        arg: Option<T>,
        file: Option<T>,
        path: &'a Path,
    ) -> Option<Self> {
        let (value, origin) = match (arg, file) {
            (Some(v), _) => (v, Origin::Args(key)),
            (None, Some(v)) => (v, Origin::File(key, path)),
            (None, None) => return None,
        };
        Some(Setting { key, value, origin })
    }
}

/// Checks that `url` (a value of setting `s`) starts with one of `schemes`. The URL is not
/// echoed: it may hold a password.
fn check_scheme<T>(s: &Setting<'_, T>, url: &str, schemes: &[&str]) -> Result<(), ConfigError> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if scheme.is_some_and(|sc| schemes.contains(&sc)) {
        return Ok(());
    }
    Err(s.invalid(format!(
        "not a Redis URL: it must start with one of {}",
        schemes
            .iter()
            .map(|s| format!("{s}://"))
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

impl Setting<'_, u64> {
    /// Checks `min..=max` and converts.
    fn in_range<U: TryFrom<u64>>(&self, min: u64, max: u64) -> Result<U, ConfigError> {
        if self.value < min || self.value > max {
            return Err(self.invalid(format!("{} is not between {min} and {max}", self.value)));
        }
        U::try_from(self.value).map_err(|_| self.invalid(format!("{} is too large", self.value)))
    }
}

impl Config {
    /// The configuration from parsed `delayq serve` arguments (flags and `DELAYQ_*` variables,
    /// already merged by clap), the TOML file they name, and the defaults, validated.
    pub fn from_args(args: ServeArgs) -> Result<Config, ConfigError> {
        let (file, path) = match &args.config {
            Some(path) => (read_file(path)?, path.clone()),
            None => (FileConfig::default(), PathBuf::new()),
        };
        let path = path.as_path();
        let d = Config::default();

        let file_u64 = |key: &'static str, v: Option<i64>| -> Result<Option<u64>, ConfigError> {
            v.map(|n| {
                u64::try_from(n).map_err(|_| ConfigError::Invalid {
                    setting: key,
                    origin: Origin::File(key, path).to_string(),
                    message: format!("{n} is negative"),
                })
            })
            .transpose()
        };

        let listen = Setting::pick(
            "listen",
            args.listen,
            file.listen,
            path,
            d.listen.to_string(),
        );
        let listen: SocketAddr = listen.value.parse().map_err(|_| {
            listen.invalid(format!(
                "{:?} is not a socket address (IP:PORT, e.g. 127.0.0.1:9277)",
                listen.value
            ))
        })?;

        let redis = Setting::pick_optional("redis", args.redis, file.redis, path);
        if let Some(s) = &redis {
            check_scheme(s, &s.value, REDIS_SCHEMES)?;
        }
        let redis_cluster = Setting::pick_optional(
            "redis_cluster",
            args.redis_cluster,
            file.redis_cluster.map(UrlList::into_vec),
            path,
        );
        if let Some(s) = &redis_cluster {
            let urls: Vec<&str> = s.value.iter().map(|u| u.trim()).collect();
            if urls.iter().all(|u| u.is_empty()) {
                return Err(s.invalid("no seed URL given"));
            }
            for url in urls {
                if url.is_empty() {
                    return Err(s.invalid("empty seed URL (stray comma?)"));
                }
                check_scheme(s, url, REDIS_CLUSTER_SCHEMES)?;
            }
        }
        if let (Some(r), Some(c)) = (&redis, &redis_cluster) {
            return Err(c.invalid(format!(
                "cannot be combined with redis (from {}): give one Redis server or one cluster",
                r.origin
            )));
        }
        let redis = redis.map(|s| s.value);
        let redis_cluster =
            redis_cluster.map(|s| s.value.iter().map(|u| u.trim().to_string()).collect());

        let data_dir = Setting::pick("data_dir", args.data_dir, file.data_dir, path, d.data_dir);
        if data_dir.value.as_os_str().is_empty() {
            return Err(data_dir.invalid("must not be empty"));
        }

        let prefix = Setting::pick("prefix", args.prefix, file.prefix, path, d.prefix);
        crate::store::redis::validate_prefix(&prefix.value).map_err(|e| prefix.invalid(e))?;

        let shards = Setting::pick(
            "shards",
            args.shards,
            file_u64("shards", file.shards)?,
            path,
            u64::from(if redis_cluster.is_some() {
                DEFAULT_CLUSTER_SHARDS
            } else {
                d.shards
            }),
        );
        let shards: u16 = shards.in_range(1, MAX_SHARDS)?;

        let max_body_bytes = Setting::pick(
            "max_body_bytes",
            args.max_body_bytes,
            file_u64("max_body_bytes", file.max_body_bytes)?,
            path,
            d.max_body_bytes as u64,
        );
        let max_body_bytes: usize = max_body_bytes.in_range(1, MAX_BODY_BYTES_LIMIT)?;

        let max_wait = Setting::pick(
            "max_wait",
            args.max_wait,
            file_u64("max_wait", file.max_wait)?,
            path,
            d.max_wait_secs,
        );
        let max_wait_secs: u64 = max_wait.in_range(0, MAX_WAIT_LIMIT_SECS)?;

        let compat = Setting::pick(
            "compat_pop_timeout",
            args.compat_pop_timeout,
            file_u64("compat_pop_timeout", file.compat_pop_timeout)?,
            path,
            d.compat_pop_timeout_secs,
        );
        if compat.value > max_wait_secs {
            let hint = match compat.origin {
                Origin::Default => "; set compat_pop_timeout too",
                _ => "",
            };
            return Err(compat.invalid(format!(
                "{} s is longer than max_wait ({max_wait_secs} s, from {}){hint}",
                compat.value, max_wait.origin
            )));
        }

        let max_batch = Setting::pick(
            "max_batch",
            args.max_batch,
            file_u64("max_batch", file.max_batch)?,
            path,
            d.max_batch as u64,
        );
        let max_batch: usize = max_batch.in_range(1, MAX_BATCH_LIMIT)?;

        let max_waiters = Setting::pick(
            "max_waiters",
            args.max_waiters,
            file_u64("max_waiters", file.max_waiters)?,
            path,
            d.max_waiters as u64,
        );
        let max_waiters: usize = max_waiters.in_range(1, MAX_WAITERS_LIMIT)?;

        let mut auth_tokens = auth_tokens(
            (!args.auth_tokens.is_empty()).then_some(args.auth_tokens),
            file.auth_tokens
                .map(|v| v.into_iter().map(AuthToken::from).collect()),
            path,
        )?;
        let token_file = Setting::pick_optional(
            "auth_token_file",
            args.auth_token_file,
            file.auth_token_file,
            path,
        );
        if let Some(s) = token_file {
            auth_tokens.extend(read_token_file(&s)?);
        }

        let request_timeout = Setting::pick(
            "request_timeout",
            args.request_timeout,
            file_u64("request_timeout", file.request_timeout)?,
            path,
            d.request_timeout_secs,
        );
        let request_timeout_secs: u64 = request_timeout.in_range(1, MAX_TIMEOUT_SECS)?;

        let idle_timeout = Setting::pick(
            "idle_timeout",
            args.idle_timeout,
            file_u64("idle_timeout", file.idle_timeout)?,
            path,
            d.idle_timeout_secs,
        );
        let idle_timeout_secs: u64 = idle_timeout.in_range(1, MAX_TIMEOUT_SECS)?;

        Ok(Config {
            listen,
            redis,
            redis_cluster,
            data_dir: data_dir.value,
            prefix: prefix.value,
            shards,
            max_body_bytes,
            compat_pop_timeout_secs: compat.value,
            max_wait_secs,
            max_batch,
            max_waiters,
            auth_tokens,
            request_timeout_secs,
            idle_timeout_secs,
        })
    }
}

/// The `auth_tokens` setting (flag/env over file), each token checked. Errors say which token
/// (by position) and why, never what it is.
fn auth_tokens(
    arg: Option<Vec<AuthToken>>,
    file: Option<Vec<AuthToken>>,
    path: &Path,
) -> Result<Vec<AuthToken>, ConfigError> {
    let tokens = Setting::pick("auth_tokens", arg, file, path, Vec::new());
    for (i, token) in tokens.value.iter().enumerate() {
        token
            .check()
            .map_err(|m| tokens.invalid(format!("token {} {m}", i + 1)))?;
    }
    Ok(tokens.value)
}

/// The tokens of an `auth_token_file`: one per line, surrounding whitespace trimmed, blank
/// lines and lines starting with `#` ignored. An unreadable file, a bad token (named by line,
/// not quoted) or a file without any token is an error naming the file.
fn read_token_file(s: &Setting<'_, PathBuf>) -> Result<Vec<AuthToken>, ConfigError> {
    let path = &s.value;
    let text = std::fs::read_to_string(path)
        .map_err(|e| s.invalid(format!("cannot read {}: {e}", path.display())))?;
    let mut tokens = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let token = AuthToken::from(line);
        token.check().map_err(|m| {
            s.invalid(format!(
                "the token on line {} of {} {m}",
                n + 1,
                path.display()
            ))
        })?;
        tokens.push(token);
    }
    if tokens.is_empty() {
        return Err(s.invalid(format!("{} holds no token", path.display())));
    }
    Ok(tokens)
}

/// Reads and parses the `--config` file, naming the key at fault when TOML's error allows.
fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map(|span| text[..span.start].matches('\n').count() + 1);
        // The span points at the offending key, or at the value of the offending key: the key
        // is what precedes `=` on that line (delayq's file is flat, one key per line).
        let key = e.span().and_then(|span| {
            let start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
            let end = text[span.start..]
                .find('\n')
                .map_or(text.len(), |i| span.start + i);
            let line = &text[start..end];
            let line = line.trim();
            let key = match line.strip_prefix('[') {
                // A table header: delayq has no tables, the name is the unknown key.
                Some(header) => header.trim_end_matches(']'),
                None => line.split('=').next()?,
            };
            let key = key.trim().trim_matches('"');
            (!key.is_empty() && !key.starts_with('#')).then(|| key.to_string())
        });
        let message = e.message().trim().to_string();
        ConfigError::File {
            path: path.to_path_buf(),
            key,
            message: match line {
                Some(line) => format!("{message} (line {line})"),
                None => message,
            },
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, Command, FromArgMatches};
    use std::collections::BTreeMap;

    /// Parses `delayq serve` arguments as the binary does, except that environment lookups are
    /// answered from `env` instead of the process environment: each `DELAYQ_*` value found in
    /// `env` becomes the argument's fallback, below the flag, which is exactly where clap puts
    /// an environment value. Keeps tests deterministic and free of `set_var`.
    fn parse(argv: &[&str], env: &[(&str, &str)]) -> Result<ServeArgs, clap::Error> {
        let env: BTreeMap<&str, &str> = env.iter().copied().collect();
        let cmd = ServeArgs::augment_args(Command::new("serve")).mut_args(|arg| {
            let injected = arg
                .get_env()
                .and_then(|name| name.to_str())
                .and_then(|name| env.get(name).copied());
            let arg = arg.env(None);
            match injected {
                // clap keeps `&'static str` defaults (without its `string` feature); a few bytes
                // leaked per test.
                Some(value) => arg.default_value(&*Box::leak(value.to_string().into_boxed_str())),
                None => arg,
            }
        });
        let argv = std::iter::once("serve").chain(argv.iter().copied());
        let matches = cmd.try_get_matches_from(argv)?;
        ServeArgs::from_arg_matches(&matches)
    }

    fn load(argv: &[&str], env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_args(parse(argv, env).unwrap())
    }

    fn toml_file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    fn invalid_setting(e: ConfigError) -> (&'static str, String) {
        match e {
            ConfigError::Invalid {
                setting, origin, ..
            } => (setting, origin),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn nothing_given_is_the_default_config() {
        assert_eq!(load(&[], &[]).unwrap(), Config::default());
    }

    #[test]
    fn every_flag_has_its_delayq_env_variable() {
        let cmd = ServeArgs::augment_args(Command::new("serve"));
        for arg in cmd.get_arguments() {
            let long = arg.get_long().unwrap();
            let expected = match long {
                // Given once per token; its variable holds the list.
                "auth-token" => "DELAYQ_AUTH_TOKENS".to_string(),
                _ => format!("DELAYQ_{}", long.replace('-', "_").to_ascii_uppercase()),
            };
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some(expected.as_str()),
                "--{long}"
            );
        }
    }

    #[test]
    fn every_setting_is_read_from_flags() {
        let c = load(
            &[
                "--listen=0.0.0.0:1",
                "--redis=redis://r:6379/0",
                "--data-dir=/d",
                "--prefix=p",
                "--shards=2",
                "--max-body-bytes=3",
                "--compat-pop-timeout=4",
                "--max-wait=5",
                "--max-batch=6",
                "--max-waiters=7",
                "--auth-token=0123456789abcdef",
                "--auth-token=fedcba9876543210",
                "--request-timeout=8",
                "--idle-timeout=9",
            ],
            &[],
        )
        .unwrap();
        assert_eq!(
            c,
            Config {
                listen: "0.0.0.0:1".parse().unwrap(),
                redis: Some("redis://r:6379/0".into()),
                redis_cluster: None,
                data_dir: "/d".into(),
                prefix: "p".into(),
                shards: 2,
                max_body_bytes: 3,
                compat_pop_timeout_secs: 4,
                max_wait_secs: 5,
                max_batch: 6,
                max_waiters: 7,
                auth_tokens: vec!["0123456789abcdef".into(), "fedcba9876543210".into()],
                request_timeout_secs: 8,
                idle_timeout_secs: 9,
            }
        );
    }

    #[test]
    fn every_setting_is_read_from_the_file() {
        let f = toml_file(
            r#"
            listen = "0.0.0.0:1"
            redis = "rediss://r:6380"
            data_dir = "/d"
            prefix = "p"
            shards = 2
            max_body_bytes = 3
            compat_pop_timeout = 4
            max_wait = 5
            max_batch = 6
            auth_tokens = ["0123456789abcdef"]
            request_timeout = 7
            idle_timeout = 8
            "#,
        );
        let c = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap();
        assert_eq!(c.listen, "0.0.0.0:1".parse().unwrap());
        assert_eq!(c.redis.as_deref(), Some("rediss://r:6380"));
        assert_eq!(c.data_dir, PathBuf::from("/d"));
        assert_eq!((c.prefix.as_str(), c.shards, c.max_body_bytes), ("p", 2, 3));
        assert_eq!(
            (c.compat_pop_timeout_secs, c.max_wait_secs, c.max_batch),
            (4, 5, 6)
        );
        assert_eq!(c.auth_tokens, vec![AuthToken::from("0123456789abcdef")]);
        assert_eq!((c.request_timeout_secs, c.idle_timeout_secs), (7, 8));
    }

    #[test]
    fn flag_beats_env_beats_file_beats_default() {
        let f = toml_file("shards = 3\nprefix = \"file\"\nmax_batch = 30\n");
        let path = f.path().to_str().unwrap();
        let env = [
            ("DELAYQ_SHARDS", "2"),
            ("DELAYQ_PREFIX", "env"),
            ("DELAYQ_CONFIG", path),
        ];
        let c = load(&["--shards", "1"], &env).unwrap();
        assert_eq!(c.shards, 1, "flag over env and file");
        assert_eq!(c.prefix, "env", "env over file");
        assert_eq!(c.max_batch, 30, "file over default");
        assert_eq!(c.max_wait_secs, 300, "default when nothing is given");
    }

    #[test]
    fn config_file_can_come_from_the_environment() {
        let f = toml_file("max_wait = 7\ncompat_pop_timeout = 7\n");
        let c = load(&[], &[("DELAYQ_CONFIG", f.path().to_str().unwrap())]).unwrap();
        assert_eq!(c.max_wait_secs, 7);
    }

    #[test]
    fn unknown_key_in_the_file_is_an_error_naming_it() {
        let f = toml_file("listen = \"127.0.0.1:1\"\nshard = 4\n");
        let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
        let text = e.to_string();
        match e {
            ConfigError::File { key, message, path } => {
                assert_eq!(key.as_deref(), Some("shard"));
                assert!(message.contains("shard"), "{message}");
                assert!(message.contains("line 2"), "{message}");
                assert_eq!(path, f.path());
            }
            other => panic!("{other:?}"),
        }
        assert!(text.contains(f.path().to_str().unwrap()), "{text}");
    }

    #[test]
    fn table_in_the_file_is_an_unknown_key() {
        let f = toml_file("[redis]\nurl = \"redis://x\"\n");
        let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
        match e {
            ConfigError::File { key, .. } => assert_eq!(key.as_deref(), Some("redis")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn wrong_type_in_the_file_names_the_key() {
        let f = toml_file("prefix = \"a\"\nshards = \"eight\"\n");
        let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
        match e {
            ConfigError::File { key, .. } => assert_eq!(key.as_deref(), Some("shards")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn file_that_is_not_toml_or_missing_is_an_error_naming_it() {
        let f = toml_file("shards = = 4\n");
        let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
        assert!(matches!(e, ConfigError::File { .. }), "{e:?}");
        let e = load(&["--config", "/nonexistent/delayq.toml"], &[]).unwrap_err();
        assert!(matches!(e, ConfigError::ReadFile { .. }), "{e:?}");
        assert!(e.to_string().contains("/nonexistent/delayq.toml"));
    }

    #[test]
    fn invalid_values_name_the_setting_and_where_they_came_from() {
        let cases: &[(&[&str], &str)] = &[
            (&["--shards=0"], "shards"),
            (&["--shards=1025"], "shards"),
            (&["--prefix="], "prefix"),
            (&["--prefix=a{b}"], "prefix"),
            (&["--prefix=a b"], "prefix"),
            (&["--max-body-bytes=0"], "max_body_bytes"),
            (&["--max-body-bytes=67108865"], "max_body_bytes"),
            (&["--max-batch=0"], "max_batch"),
            (&["--max-batch=10001"], "max_batch"),
            (&["--listen=localhost"], "listen"),
            (&["--listen=127.0.0.1"], "listen"),
            (&["--redis=localhost:6379"], "redis"),
            (
                &["--max-wait=10", "--compat-pop-timeout=11"],
                "compat_pop_timeout",
            ),
            // The default compat timeout (178 s) does not fit a lower max_wait either.
            (&["--max-wait=60"], "compat_pop_timeout"),
            (&["--max-wait=86401"], "max_wait"),
            (&["--request-timeout=0"], "request_timeout"),
            (&["--request-timeout=86401"], "request_timeout"),
            (&["--idle-timeout=0"], "idle_timeout"),
            (&["--idle-timeout=86401"], "idle_timeout"),
            (&["--auth-token=short"], "auth_tokens"),
            (
                &["--auth-token=0123456789abcdef", "--auth-token="],
                "auth_tokens",
            ),
            (&["--auth-token=0123456789 abcdef"], "auth_tokens"),
            (
                &["--auth-token-file=/nonexistent/tokens"],
                "auth_token_file",
            ),
        ];
        for (argv, setting) in cases {
            let e = load(argv, &[]).expect_err(&format!("{argv:?} should be refused"));
            let text = e.to_string();
            let (named, origin) = invalid_setting(e);
            assert_eq!(named, *setting, "{argv:?}: {text}");
            assert!(text.contains(setting), "{text}");
            if *argv != ["--max-wait=60"] {
                assert!(origin.starts_with("--"), "{argv:?}: {origin}");
            }
        }
    }

    #[test]
    fn limits_themselves_are_accepted() {
        let c = load(
            &[
                "--shards=1024",
                "--max-body-bytes=67108864",
                "--max-batch=10000",
                "--max-wait=0",
                "--compat-pop-timeout=0",
                "--listen=[::1]:0",
                "--redis=unix:///run/redis.sock",
            ],
            &[],
        )
        .unwrap();
        assert_eq!((c.shards, c.max_batch, c.max_wait_secs), (1024, 10_000, 0));
    }

    #[test]
    fn invalid_env_value_names_the_setting() {
        let e = load(&[], &[("DELAYQ_SHARDS", "0")]).unwrap_err();
        let text = e.to_string();
        assert_eq!(invalid_setting(e).0, "shards");
        assert!(text.contains("DELAYQ_SHARDS"), "{text}");
        // Not a number at all: clap refuses it, naming the flag.
        let e = parse(&[], &[("DELAYQ_MAX_BATCH", "lots")]).unwrap_err();
        assert!(e.to_string().contains("--max-batch"), "{e}");
    }

    #[test]
    fn invalid_file_value_names_the_setting_and_the_file() {
        let f = toml_file("max_batch = -1\n");
        let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
        let text = e.to_string();
        let (setting, origin) = invalid_setting(e);
        assert_eq!(setting, "max_batch");
        assert!(origin.contains(f.path().to_str().unwrap()), "{origin}");
        assert!(text.contains("negative"), "{text}");

        let f = toml_file("prefix = \"\"\n");
        let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
        assert_eq!(invalid_setting(e).0, "prefix");
    }

    fn token_file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn auth_tokens_come_from_a_comma_separated_variable() {
        let c = load(
            &[],
            &[("DELAYQ_AUTH_TOKENS", "0123456789abcdef,fedcba9876543210")],
        )
        .unwrap();
        assert_eq!(
            c.auth_tokens,
            vec![
                AuthToken::from("0123456789abcdef"),
                AuthToken::from("fedcba9876543210")
            ]
        );
        // The flag replaces the variable, like every setting.
        let c = load(
            &["--auth-token=aaaaaaaaaaaaaaaa"],
            &[("DELAYQ_AUTH_TOKENS", "0123456789abcdef")],
        )
        .unwrap();
        assert_eq!(c.auth_tokens, vec![AuthToken::from("aaaaaaaaaaaaaaaa")]);
    }

    #[test]
    fn token_file_lines_are_tokens_without_blanks_and_comments() {
        let f = token_file(
            "# rotated 2025-01\n\n  0123456789abcdef  \n#old-old-old-old-old\nfedcba9876543210\n",
        );
        let path = f.path().to_str().unwrap();
        let c = load(&["--auth-token-file", path], &[]).unwrap();
        assert_eq!(
            c.auth_tokens,
            vec![
                AuthToken::from("0123456789abcdef"),
                AuthToken::from("fedcba9876543210")
            ]
        );
        // Tokens from the flag and from the file are all accepted.
        let c = load(
            &["--auth-token=aaaaaaaaaaaaaaaa"],
            &[("DELAYQ_AUTH_TOKEN_FILE", path)],
        )
        .unwrap();
        assert_eq!(c.auth_tokens.len(), 3);
        // And from the TOML file.
        let conf = toml_file(&format!(
            "auth_token_file = {path:?}\nauth_tokens = [\"bbbbbbbbbbbbbbbb\"]\n"
        ));
        let c = load(&["--config", conf.path().to_str().unwrap()], &[]).unwrap();
        assert_eq!(c.auth_tokens[0], AuthToken::from("bbbbbbbbbbbbbbbb"));
        assert_eq!(c.auth_tokens.len(), 3);
    }

    #[test]
    fn token_file_without_a_token_or_unreadable_is_an_error_naming_it() {
        let f = token_file("# nothing yet\n\n");
        let path = f.path().to_str().unwrap();
        let e = load(&["--auth-token-file", path], &[]).unwrap_err();
        let text = e.to_string();
        assert_eq!(invalid_setting(e).0, "auth_token_file");
        assert!(text.contains(path) && text.contains("no token"), "{text}");

        let e = load(&["--auth-token-file=/nonexistent/tokens"], &[]).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/tokens"), "{e}");
    }

    #[test]
    fn bad_tokens_are_refused_without_being_echoed() {
        let f = token_file("0123456789abcdef\nsecret-but-short\x01\n");
        let e = load(&["--auth-token-file", f.path().to_str().unwrap()], &[]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("line 2"), "{text}");
        assert!(!text.contains("secret"), "{text}");

        let e = load(&["--auth-token=tinysecret"], &[]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("at least 16"), "{text}");
        assert!(
            text.contains("--auth-token or DELAYQ_AUTH_TOKENS"),
            "{text}"
        );
        assert!(!text.contains("tinysecret"), "{text}");
    }

    #[test]
    fn debug_output_hides_tokens() {
        let c = load(&["--auth-token=0123456789abcdef"], &[]).unwrap();
        let args = parse(&["--auth-token=0123456789abcdef"], &[]).unwrap();
        for dump in [format!("{c:?}"), format!("{args:?}")] {
            assert!(!dump.contains("0123456789abcdef"), "{dump}");
            assert!(dump.contains("AuthToken(***)"), "{dump}");
        }
    }

    #[test]
    fn shards_default_to_one_on_a_server_and_eight_on_a_cluster() {
        let server = load(&["--redis", "redis://127.0.0.1:6379"], &[]).unwrap();
        assert_eq!(server.shards, 1);
        let cluster = load(&["--redis-cluster", "redis://127.0.0.1:7000"], &[]).unwrap();
        assert_eq!(cluster.shards, 8);
        let chosen = load(
            &["--redis-cluster", "redis://127.0.0.1:7000", "--shards", "3"],
            &[],
        );
        assert_eq!(chosen.unwrap().shards, 3);
    }

    #[test]
    fn redis_cluster_seeds_come_from_flag_env_or_file() {
        let want = Some(vec![
            "redis://127.0.0.1:7000".to_string(),
            "redis://127.0.0.1:7001".to_string(),
        ]);
        let joined = "redis://127.0.0.1:7000,redis://127.0.0.1:7001";
        let c = load(&["--redis-cluster", joined], &[]).unwrap();
        assert_eq!((c.redis_cluster, c.redis), (want.clone(), None));
        let c = load(&[], &[("DELAYQ_REDIS_CLUSTER", joined)]).unwrap();
        assert_eq!(c.redis_cluster, want);
        let f = toml_file(&format!("redis_cluster = \"{joined}\"\n"));
        let c = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap();
        assert_eq!(c.redis_cluster, want);
        let f =
            toml_file("redis_cluster = [\"redis://127.0.0.1:7000\", \"redis://127.0.0.1:7001\"]\n");
        let c = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap();
        assert_eq!(c.redis_cluster, want);
    }

    #[test]
    fn redis_and_redis_cluster_together_are_refused_naming_both() {
        let e = load(&["--redis=redis://a:1", "--redis-cluster=redis://b:2"], &[]).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("redis_cluster") && text.contains("--redis "),
            "{text}"
        );
        let f = toml_file("redis = \"redis://a:1\"\n");
        let e = load(
            &[
                "--config",
                f.path().to_str().unwrap(),
                "--redis-cluster=redis://b:2",
            ],
            &[],
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("redis_cluster") && text.contains("`redis`"),
            "{text}"
        );
    }

    #[test]
    fn bad_redis_cluster_seeds_are_refused() {
        for argv in [
            "--redis-cluster=",
            "--redis-cluster=redis://a:1,,redis://b:2",
            "--redis-cluster=unix:///run/redis.sock",
            "--redis-cluster=a:1",
        ] {
            let e = load(&[argv], &[]).expect_err(argv);
            assert_eq!(invalid_setting(e).0, "redis_cluster", "{argv}");
        }
        let e = load(&["--redis-cluster=http://user:secret@host"], &[]).unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn redis_url_is_not_echoed_in_errors() {
        let e = load(&["--redis=http://user:secret@host"], &[]).unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}
