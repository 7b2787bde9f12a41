//! Settings of `delayq serve`: each defined once below, in `settings!`, with its names (TOML
//! key, flag, `DELAYQ_*` variable), help, given form, rule and default. From that definition
//! `define.rs` derives [`Config`] and its `Default`, the clap arguments ([`ServeArgs`]), the
//! keys of the TOML file given with `--config`, and the descriptions of `--help` and of the
//! table in docs/operations.md and of the package's sample file pkg/delayq.toml (`tests.rs` and
//! `sample.rs` check them; `DELAYQ_BLESS=1` rewrites them).
//!
//! Precedence is flag > environment > file > default. Every value is checked here, whatever
//! its source, and a bad one is an error naming the setting and where it came from
//! ([`ConfigError`]); nothing falls back to a default silently. Nothing else reads the
//! environment. This module does not open the store or bind the listener: a valid address
//! can still be taken, a valid Redis URL unreachable.
//!
//! To add a setting: add its entry to `settings!`, run `DELAYQ_BLESS=1 cargo test -p delayq
//! --lib config` to update the docs' table and pkg/delayq.toml, and use the new `Config` field
//! where it matters.

mod define;
mod file;
mod hosts;
mod journal;
mod log_format;
mod rules;
mod token;

use crate::delivery::allow::AllowList;
use crate::delivery::sign::WebhookSecret;
use define::{Origin, settings};
use journal::{JournalModeRule, JournalUrl};
use log_format::LogFormatRule;
use rules::{
    Address, Allow, AmqpName, AmqpUrl, Any, BeanstalkAddress, Between, ClusterSeeds, Hosts,
    KeyPrefix, NonEmptyPath, RedisUrl, SomeBetween, WebhookSecrets,
};
use std::net::SocketAddr;
use std::path::PathBuf;
use token::{TokenFile, Tokens};

pub use hosts::AllowedHosts;
pub use log_format::LogFormat;
pub use token::{AuthToken, MIN_AUTH_TOKEN_LEN};

/// Where the beanstalkd front end listens (`beanstalk_listen`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeanstalkListen {
    Tcp(SocketAddr),
    /// `unix:/path`.
    Unix(PathBuf),
}

impl std::fmt::Display for BeanstalkListen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BeanstalkListen::Tcp(a) => write!(f, "{a}"),
            BeanstalkListen::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// Default shards on one Redis server. Shards exist to spread one topic over a cluster's
/// masters; one server runs every script on one thread whatever the layout, and each more
/// shard costs `reserve` a peek at every shard and splits the batches of concurrent pushes
/// and finishes.
pub const DEFAULT_SHARDS: u16 = 1;
/// Default shards on a Redis Cluster: 2 to 4 per master of a 3-master cluster.
pub const DEFAULT_CLUSTER_SHARDS: u16 = 8;
/// Default `max_batch`; the CLI's `finish` sends ids in chunks of this size.
pub const DEFAULT_MAX_BATCH: usize = 1000;
/// Largest accepted `max_body_bytes` (64 MiB): a job queue is not a blob store.
pub const MAX_BODY_BYTES_LIMIT: u64 = 64 << 20;
/// Largest accepted `max_waiters`.
pub const MAX_WAITERS_LIMIT: u64 = 1_000_000;
/// Largest accepted `max_batch`.
pub const MAX_BATCH_LIMIT: u64 = 10_000;
/// Largest accepted `max_wait` (one day): keeps seconds-to-milliseconds arithmetic far from
/// overflow, and no HTTP client waits longer.
pub const MAX_WAIT_LIMIT_SECS: u64 = 86_400;
/// Largest accepted `journal_retention` (ten years).
pub const MAX_JOURNAL_RETENTION_SECS: u64 = 10 * 365 * 86_400;
/// Largest accepted `request_timeout` and `idle_timeout` (one day).
pub const MAX_TIMEOUT_SECS: u64 = 86_400;
/// The longest `memory_window`: a year.
pub const MAX_MEMORY_WINDOW_SECS: u64 = 366 * 86_400;
/// Largest accepted `callback_max_in_flight` and `callback_max_in_flight_per_host`.
pub const MAX_CALLBACKS_IN_FLIGHT: u64 = 100_000;
/// Largest accepted `max_connections`.
pub const MAX_CONNECTIONS_LIMIT: u64 = 10_000_000;

/// Largest accepted `worker_threads`.
pub const MAX_WORKER_THREADS: u64 = 1024;

/// The worker threads `delayq serve` runs with: `worker_threads` if set, else one per core
/// the process may use.
pub fn worker_threads(config: &Config) -> usize {
    config.worker_threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    })
}

// Each entry: the `Config` field and its type, then `key` (the TOML key, the name in errors
// and of the `ServeArgs` field), `flag`, `env`, `value_name` (the flag's value in `--help`),
// `help` (Markdown: shown by `--help`, in the docs' table and as the field's first doc line),
// `given` (the form read from a flag, variable or the file), `rule` (given form to value, and
// the limits shown), `shown` (the default as the docs show it, when the value alone would
// mislead) and `default`. The `///` lines say why, for maintainers.
settings! {
    /// Everything `delayq serve` can be told, checked. Each field's flag, variable, default
    /// and limits are in `delayq serve --help` and the table of docs/operations.md.
    pub struct Config {
        /// Loopback by default: without `auth_tokens`, whoever reaches the port can use the
        /// queue.
        listen: SocketAddr {
            key: listen,
            flag: "listen",
            env: "DELAYQ_LISTEN",
            value_name: "ADDR",
            help: "Address of the HTTP listener (IP:PORT); loopback unless you expose it on purpose",
            given: String,
            rule: Address,
            default: SocketAddr::from(([127, 0, 0, 1], 9277)),
        },
        /// beanstalkd's protocol has no authentication: tokens do not protect this port, so
        /// serving it off loopback logs a warning (server.rs); a Unix socket is protected by
        /// its file's permissions.
        beanstalk_listen: Option<BeanstalkListen> {
            key: beanstalk_listen,
            flag: "beanstalk-listen",
            env: "DELAYQ_BEANSTALK_LISTEN",
            value_name: "ADDR",
            help: "Serve the beanstalkd protocol at this address (IP:PORT, or `unix:/path` for a \
                   Unix socket) beside HTTP (docs/beanstalkd.md); it has no authentication: \
                   tokens do not protect it",
            given: String,
            rule: BeanstalkAddress,
            default: None,
        },
        /// Against DNS rebinding: a page under the attacker's name that resolves to this
        /// server reaches it with that name as `Host`. IP addresses and `localhost` are always
        /// allowed (`api/origin.rs`); on every interface (`0.0.0.0`), unless given, any host is,
        /// as such a server is reached under names it cannot know.
        allowed_hosts: Option<AllowedHosts> {
            key: allowed_hosts,
            flag: "allowed-hosts",
            env: "DELAYQ_ALLOWED_HOSTS",
            value_name: "HOSTS",
            help: "Host names requests may be addressed to (their `Host` header), besides IP \
                   addresses and `localhost`, which are always allowed: names (`queue.example.com`), \
                   `*.domain`, or `*` for any (behind a proxy that checks it); another host is \
                   refused (421)",
            given: Vec<String>,
            rule: Hosts,
            shown: "none (`*` when `listen` is `0.0.0.0` or `[::]`)",
            default: None,
        },
        redis: Option<String> {
            key: redis,
            flag: "redis",
            env: "DELAYQ_REDIS",
            value_name: "URL",
            help: "Redis URL: `redis://[user:password@]host:port/db`, `rediss://` for TLS, \
                   `unix://` for a socket; without it (and without `redis_cluster` or \
                   `memory`), the embedded store is used",
            given: String,
            rule: RedisUrl,
            default: None,
        },
        /// A deployment is one server or one cluster: `redis` and `redis_cluster` together are
        /// refused, since guessing which was meant would hide a mistake.
        redis_cluster: Option<Vec<String>> {
            key: redis_cluster,
            flag: "redis-cluster",
            env: "DELAYQ_REDIS_CLUSTER",
            value_name: "URLS",
            help: "Seed URLs of a Redis Cluster (`redis://host:port`); excludes `redis`",
            given: Vec<String>,
            rule: ClusterSeeds,
            default: None,
        },
        /// Off by default: a store that loses every job at exit must be chosen knowingly. It
        /// excludes `redis` and `redis_cluster`, and a `data_dir` given with it is refused
        /// (`Config::from_args`): either would mean the user expects jobs kept somewhere.
        memory: bool {
            key: memory,
            flag: "memory",
            env: "DELAYQ_MEMORY",
            value_name: "BOOL",
            help: "Keep jobs in memory only, with nothing written to disk: the fastest store, \
                   but every job is lost when the process exits or crashes; excludes `redis`, \
                   `redis_cluster` and `data_dir`",
            given: bool,
            rule: Any,
            default: false,
        },
        data_dir: PathBuf {
            key: data_dir,
            flag: "data-dir",
            env: "DELAYQ_DATA_DIR",
            value_name: "DIR",
            help: "Directory of the embedded store",
            given: PathBuf,
            rule: NonEmptyPath,
            default: PathBuf::from("./delayq-data"),
        },
        /// Off by default: every job in memory, as before the cold tier; a far-future-heavy
        /// store sets it (docs/operations.md, "Sizing").
        memory_window_secs: Option<u64> {
            key: memory_window,
            flag: "memory-window",
            env: "DELAYQ_MEMORY_WINDOW",
            value_name: "SECS",
            help: "Embedded store: keep delayed jobs due this many seconds ahead or more on \
                   disk only, loaded back into memory ahead of their time (docs/operations.md)",
            given: u64,
            rule: SomeBetween(1, MAX_MEMORY_WINDOW_SECS),
            shown: "none (every job in memory)",
            default: None,
        },
        /// Off by default: a request makes the server write files, so only where it is told it
        /// may (and a backup is a copy of every job body).
        backup_dir: Option<PathBuf> {
            key: backup_dir,
            flag: "backup-dir",
            env: "DELAYQ_BACKUP_DIR",
            value_name: "DIR",
            help: "Directory under which `POST /v1/backup` (`delayq backup`) writes online \
                   backups of the embedded store; backups are refused without it \
                   (docs/operations.md)",
            given: PathBuf,
            rule: NonEmptyPath,
            default: None,
        },
        /// Lets several namespaces share one Redis.
        prefix: String {
            key: prefix,
            flag: "prefix",
            env: "DELAYQ_PREFIX",
            value_name: "PREFIX",
            help: "Prefix of every Redis key",
            given: String,
            rule: KeyPrefix,
            default: "delayq".to_string(),
        },
        /// [`DEFAULT_SHARDS`] on one server, [`DEFAULT_CLUSTER_SHARDS`] on a cluster when not
        /// given (`Config::from_args` applies the latter).
        shards: u16 {
            key: shards,
            flag: "shards",
            env: "DELAYQ_SHARDS",
            value_name: "N",
            help: "Number of Redis shards jobs are spread over (one hash slot each); every \
                   instance on a prefix must use the same (checked at start)",
            given: u64,
            rule: Between(1, crate::store::redis::MAX_SHARDS as u64),
            shown: format!("`{DEFAULT_SHARDS}` (`{DEFAULT_CLUSTER_SHARDS}` with `--redis-cluster`)"),
            default: DEFAULT_SHARDS,
        },
        max_body_bytes: usize {
            key: max_body_bytes,
            flag: "max-body-bytes",
            env: "DELAYQ_MAX_BODY_BYTES",
            value_name: "BYTES",
            help: "Largest job body in bytes",
            given: u64,
            rule: Between(1, MAX_BODY_BYTES_LIMIT),
            default: crate::job::DEFAULT_MAX_BODY_BYTES,
        },
        /// 178 s is what the service the compat API copies waits, and what its clients expect.
        compat_pop_timeout_secs: u64 {
            key: compat_pop_timeout,
            flag: "compat-pop-timeout",
            env: "DELAYQ_COMPAT_POP_TIMEOUT",
            value_name: "SECS",
            help: "Seconds the compat API's `/pop` waits when the request gives no `timeout`; \
                   at most `max_wait`",
            given: u64,
            rule: Any,
            default: 178,
        },
        max_wait_secs: u64 {
            key: max_wait,
            flag: "max-wait",
            env: "DELAYQ_MAX_WAIT",
            value_name: "SECS",
            help: "Longest long poll a request may ask for, in seconds",
            given: u64,
            rule: Between(0, MAX_WAIT_LIMIT_SECS),
            default: 300,
        },
        max_batch: usize {
            key: max_batch,
            flag: "max-batch",
            env: "DELAYQ_MAX_BATCH",
            value_name: "N",
            help: "Most jobs in one batch push, reserve or finish",
            given: u64,
            rule: Between(1, MAX_BATCH_LIMIT),
            default: DEFAULT_MAX_BATCH,
        },
        max_waiters: usize {
            key: max_waiters,
            flag: "max-waiters",
            env: "DELAYQ_MAX_WAITERS",
            value_name: "N",
            help: "Most long polls waiting at once; one more is refused at once (503 \
                   `too_many_waiters`)",
            given: u64,
            rule: Between(1, MAX_WAITERS_LIMIT),
            default: crate::dispatch::DEFAULT_MAX_WAITERS,
        },
        /// A long poll's own wait never trips it: the wait is added to this deadline.
        request_timeout_secs: u64 {
            key: request_timeout,
            flag: "request-timeout",
            env: "DELAYQ_REQUEST_TIMEOUT",
            value_name: "SECS",
            help: "Seconds a request may take, reading its body included, before it is \
                   answered 503 `timeout`; a long poll gets `max_wait` on top",
            given: u64,
            rule: Between(1, MAX_TIMEOUT_SECS),
            default: 30,
        },
        /// So idle or stalled clients do not hold sockets forever.
        idle_timeout_secs: u64 {
            key: idle_timeout,
            flag: "idle-timeout",
            env: "DELAYQ_IDLE_TIMEOUT",
            value_name: "SECS",
            help: "Seconds a connection may go without making its first request (silent, or \
                   stopped within the HTTP/2 preface), and an HTTP/1 connection without sending \
                   a complete request head (idle between requests, or slow to send one); then \
                   it is closed",
            given: u64,
            rule: Between(1, MAX_TIMEOUT_SECS),
            default: 60,
        },
        /// Each connection holds a file descriptor; past the process's open-file limit every
        /// accept, store file and callback fails. Unless given, `server::run` derives it from
        /// that limit, keeping room for the store and callbacks.
        max_connections: Option<usize> {
            key: max_connections,
            flag: "max-connections",
            env: "DELAYQ_MAX_CONNECTIONS",
            value_name: "N",
            help: "Most client connections open at once; past it, new ones wait to be accepted \
                   until one closes (logged as a warning)",
            given: u64,
            rule: SomeBetween(1, MAX_CONNECTIONS_LIMIT),
            shown: "the open-file limit less 256 and `callback_max_in_flight` (at least half \
                    the limit)",
            default: None,
        },
        /// One per core unless given ([`worker_threads`]): fewer leave cores to a Redis or
        /// clients on the same machine. On 2 cores one worker was measured faster on some
        /// workloads and slower on others (docs/benchmarks.md, "Worker threads").
        worker_threads: Option<usize> {
            key: worker_threads,
            flag: "worker-threads",
            env: "DELAYQ_WORKER_THREADS",
            value_name: "N",
            help: "Threads that serve requests and run the timer and deliveries (the embedded \
                   store's commits and the callbacks' name lookups have threads of their own)",
            given: u64,
            rule: SomeBetween(1, MAX_WORKER_THREADS),
            shown: "one per core",
            default: None,
        },
        /// Text for people reading a terminal or `journalctl`; JSON for log shippers, which
        /// would otherwise have to parse the text's layout.
        log_format: LogFormat {
            key: log_format,
            flag: "log-format",
            env: "DELAYQ_LOG_FORMAT",
            value_name: "FORMAT",
            help: "Form of the log lines on stderr: `text` (coloured only on a terminal, never \
                   with `NO_COLOR` set) or `json` (one JSON object per line, for log shippers); \
                   `RUST_LOG` chooses what is logged",
            given: String,
            rule: LogFormatRule,
            default: LogFormat::Text,
        },
        /// Secrets, not shown anywhere; given like tokens (hidden from `--help`, the flag once
        /// per secret) so a rotation can list the old and the new one.
        callback_secrets: Vec<WebhookSecret> {
            key: callback_secret,
            flag: "callback-secret",
            env: "DELAYQ_CALLBACK_SECRET",
            value_name: "SECRET",
            help: "Standard Webhooks secret (`whsec_` + base64 of the key) every callback is \
                   signed with; several: each call carries one signature per secret (rotation); \
                   none: calls are unsigned",
            given: Vec<AuthToken>,
            rule: WebhookSecrets,
            default: Vec::new(),
        },
        /// `public` by default, which refuses loopback, private and link-local addresses:
        /// a producer must not make delayq call the cloud metadata address or a service
        /// beside it (SSRF). docs/operations.md, "Security", explains.
        callback_allow: AllowList {
            key: callback_allow,
            flag: "callback-allow",
            env: "DELAYQ_CALLBACK_ALLOW",
            value_name: "DESTINATIONS",
            help: "Where callbacks may go: `public` (any host whose addresses are all public), \
                   IP networks or addresses (`10.0.0.0/8`, `127.0.0.1`), host names \
                   (`hooks.example.com`) and `*.domain`; a push whose URL is outside is refused",
            given: Vec<String>,
            rule: Allow,
            default: AllowList::default(),
        },
        callback_max_in_flight: usize {
            key: callback_max_in_flight,
            flag: "callback-max-in-flight",
            env: "DELAYQ_CALLBACK_MAX_IN_FLIGHT",
            value_name: "N",
            help: "Most callback jobs this instance holds at once (calling, or waiting for their \
                   host's limit)",
            given: u64,
            rule: Between(1, MAX_CALLBACKS_IN_FLIGHT),
            default: crate::delivery::DEFAULT_MAX_IN_FLIGHT,
        },
        callback_max_in_flight_per_host: usize {
            key: callback_max_in_flight_per_host,
            flag: "callback-max-in-flight-per-host",
            env: "DELAYQ_CALLBACK_MAX_IN_FLIGHT_PER_HOST",
            value_name: "N",
            help: "Most calls at once to one destination (`host:port`), so one slow endpoint \
                   cannot hold every call",
            given: u64,
            rule: Between(1, MAX_CALLBACKS_IN_FLIGHT),
            default: crate::delivery::DEFAULT_MAX_IN_FLIGHT_PER_HOST,
        },
        /// Those of `auth_tokens` and those of `auth_token_file`, together. None by default,
        /// which is why the default listener is loopback. The flag is singular: it is given
        /// once per token.
        auth_tokens: Vec<AuthToken> {
            key: auth_tokens,
            flag: "auth-token",
            env: "DELAYQ_AUTH_TOKENS",
            value_name: "TOKEN",
            help: "Bearer tokens every request but `GET /healthz` and the dashboard's page \
                   (`/ui/`) must carry; none: no authentication; flags show in `ps`, prefer \
                   `auth_token_file`",
            given: Vec<AuthToken>,
            rule: Tokens,
            default: Vec::new(),
        },
        /// Off by default: without it nothing is journaled and nothing changes.
        journal: Option<String> {
            key: journal,
            flag: "journal",
            env: "DELAYQ_JOURNAL",
            value_name: "URL",
            help: "Recovery journal: `postgres://user:password@host/db` or \
                   `mysql://user:password@host/db` (MariaDB too); every job and state change \
                   is written there, and `POST /v1/restore` puts back what the store lost \
                   (docs/journal.md)",
            given: String,
            rule: JournalUrl,
            default: None,
        },
        /// `sync` by default: an acknowledged job is a journaled job.
        journal_mode: crate::journal::JournalMode {
            key: journal_mode,
            flag: "journal-mode",
            env: "DELAYQ_JOURNAL_MODE",
            value_name: "MODE",
            help: "`sync`: every acknowledged change is in the journal before the reply \
                   (group commit), and changes are refused (503) while it cannot be \
                   written; `async`: replies do not wait, the journal follows (its lag is a \
                   metric)",
            given: String,
            rule: JournalModeRule,
            default: crate::journal::JournalMode::Sync,
        },
        /// The RabbitMQ bridge (docs/rabbitmq.md): without it, nothing of it runs and a push
        /// with `publish` is refused.
        amqp: Option<String> {
            key: amqp,
            flag: "amqp",
            env: "DELAYQ_AMQP",
            value_name: "URL",
            help: "RabbitMQ URL (`amqp://user:password@host:5672/vhost`, `amqps://` for TLS): \
                   publish jobs are published there when due, and the intake queue is consumed",
            given: String,
            rule: AmqpUrl,
            default: None,
        },
        amqp_intake: String {
            key: amqp_intake,
            flag: "amqp-intake",
            env: "DELAYQ_AMQP_INTAKE",
            value_name: "QUEUE",
            help: "RabbitMQ queue of delayed messages to take in (`x-delay` header), declared \
                   durable if missing",
            given: String,
            rule: AmqpName,
            default: crate::amqp::DEFAULT_INTAKE.to_string(),
        },
        /// Bounds one publish attempt: waiting for the broker, publishing and its confirm. A
        /// publish job's TTR is at least this plus 5 s, so no other instance publishes it
        /// meanwhile.
        amqp_publish_timeout_secs: u64 {
            key: amqp_publish_timeout,
            flag: "amqp-publish-timeout",
            env: "DELAYQ_AMQP_PUBLISH_TIMEOUT",
            value_name: "SECS",
            help: "Seconds a publish may take, waiting for a connection to the broker and for \
                   its confirm, before the attempt counts as failed",
            given: u64,
            rule: Between(1, 600),
            default: 30,
        },
        amqp_prefetch: u16 {
            key: amqp_prefetch,
            flag: "amqp-prefetch",
            env: "DELAYQ_AMQP_PREFETCH",
            value_name: "N",
            help: "Intake messages delivered to this instance and not yet acknowledged, at most",
            given: u64,
            rule: Between(1, 65_535),
            default: 256,
        },
        /// A week: long enough to look at what happened to a job after an incident.
        journal_retention_secs: u64 {
            key: journal_retention,
            flag: "journal-retention",
            env: "DELAYQ_JOURNAL_RETENTION",
            value_name: "SECS",
            help: "Seconds finished, deleted and skipped jobs, and every state change, are \
                   kept in the journal before they are pruned",
            given: u64,
            rule: Between(60, MAX_JOURNAL_RETENTION_SECS),
            default: 604_800,
        },
    }
    inputs {
        /// Its tokens are added to `auth_tokens`.
        auth_token_file: Vec<AuthToken> {
            flag: "auth-token-file",
            env: "DELAYQ_AUTH_TOKEN_FILE",
            value_name: "FILE",
            help: "File of bearer tokens, one per line, blank lines and `#` comments ignored; \
                   added to `auth_tokens`",
            given: PathBuf,
            rule: TokenFile,
        },
    }
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

impl Config {
    /// The configuration from parsed `delayq serve` arguments (flags and `DELAYQ_*` variables,
    /// already merged by clap), the TOML file they name, and the defaults: each setting
    /// checked by its own rule, then the rules between settings.
    pub fn from_args(args: ServeArgs) -> Result<Config, ConfigError> {
        let (file, path) = match &args.config {
            Some(path) => (file::read(path)?, path.clone()),
            None => (FileConfig::default(), PathBuf::new()),
        };
        let mut v = resolve(args, file, &path)?;

        // One Redis server or one cluster, never both.
        if let (Some(_), Some(_)) = (&v.redis.value, &v.redis_cluster.value) {
            return Err(v.redis_cluster.invalid(format!(
                "cannot be combined with redis (from {}): give one Redis server or one cluster",
                v.redis.origin
            )));
        }
        // The memory store keeps jobs nowhere else: a Redis or a data directory given with it
        // says the user expects them kept, so the contradiction is refused, not resolved.
        if v.memory.value {
            let memory = &v.memory;
            let elsewhere = [
                ("redis", v.redis.value.is_some(), v.redis.origin),
                (
                    "redis_cluster",
                    v.redis_cluster.value.is_some(),
                    v.redis_cluster.origin,
                ),
            ];
            if let Some((key, _, origin)) = elsewhere.into_iter().find(|(_, given, _)| *given) {
                return Err(memory.invalid(format!(
                    "cannot be combined with {key} (from {origin}): jobs are kept either in \
                     memory or in Redis, choose one"
                )));
            }
            if !matches!(v.data_dir.origin, Origin::Default) {
                return Err(v.data_dir.invalid(format!(
                    "is not used with memory (from {}): the memory store writes nothing to \
                     disk; remove one of them",
                    memory.origin
                )));
            }
        }
        // Unless chosen, shards follow the deployment.
        if matches!(v.shards.origin, Origin::Default) && v.redis_cluster.value.is_some() {
            v.shards.value = DEFAULT_CLUSTER_SHARDS;
        }
        // A compat `/pop` without `timeout` must not wait longer than any request may.
        let (compat, max_wait) = (&v.compat_pop_timeout_secs, &v.max_wait_secs);
        if compat.value > max_wait.value {
            let hint = match compat.origin {
                Origin::Default => "; set compat_pop_timeout too",
                _ => "",
            };
            return Err(compat.invalid(format!(
                "{} s is longer than max_wait ({} s, from {}){hint}",
                compat.value, max_wait.value, max_wait.origin
            )));
        }
        // Tokens from the flag, variable or TOML key and from the token file all count.
        if let Some(file_tokens) = v.auth_token_file.take() {
            v.auth_tokens.value.extend(file_tokens.value);
        }
        Ok(v.into_config())
    }
}

#[cfg(test)]
mod sample;
#[cfg(test)]
mod tests;
