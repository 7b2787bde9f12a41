//! delayq: a delay-queue service. Producers push jobs that become ready at a given time;
//! consumers reserve ready jobs and finish them within their time-to-run, or get them again.
//!
//! Layers, bottom up: a module uses only the modules listed before it, never one after it
//! (`layers.rs` has the test that reads this list and every `crate::` path in src/; main.rs
//! and cli.rs, the binary, use any). ARCHITECTURE.md has the map.
//! - [`job`]: the job, its validation and its state machine. No I/O.
//! - [`schedule`]: recurring schedules' fire times (cron in a time zone, intervals). No I/O.
//! - [`redact`]: URLs without their credentials, for logs and errors.
//! - [`clock`]: the time source and its roundings.
//! - [`store`]: the [`store::Store`] trait, its hooks and its backends (memory, embedded, Redis).
//! - [`alarm`]: the timer's precise sleep.
//! - [`dispatch`]: the timer and the long-poll waiters, generic over any store.
//! - [`journal`]: the recovery journal in PostgreSQL or MySQL (a store hook) and the restore.
//! - [`metrics`]: what the server did and what the store holds, for `GET /metrics`.
//! - [`scheduler`]: the firing task of recurring schedules, over any store.
//! - [`amqp`]: the RabbitMQ bridge: publishing with confirms, and the intake queue.
//! - [`delivery`]: push delivery, delayq calling a callback job's URL (or publishing a publish
//!   job through [`amqp`]) when it is due.
//! - [`config`]: the settings of `delayq serve`.
//! - [`api`]: the HTTP APIs (compat and /v1) over what the server built. Only `api` knows HTTP.
//! - [`beanstalk`]: the beanstalkd protocol front end over the store and the dispatcher. Only
//!   `beanstalk` knows that protocol.
//! - [`server`]: wiring: builds every part from the settings and serves until shutdown.

pub mod alarm;
pub mod amqp;
pub mod api;
pub mod beanstalk;
pub mod clock;
pub mod config;
pub mod delivery;
pub mod dispatch;
pub mod job;
pub mod journal;
pub mod metrics;
pub mod redact;
pub mod schedule;
pub mod scheduler;
pub mod server;
pub mod store;

#[cfg(test)]
mod doc_links;
#[cfg(test)]
mod layers;

/// Installs rustls's process-wide crypto provider, ring (the one the build links), unless one
/// is installed already. Every TLS client of the process needs it before it is built: Redis
/// over `rediss://`, the callbacks' HTTP client, the CLI's client.
pub fn install_tls_provider() {
    // An `Err` means a provider is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
