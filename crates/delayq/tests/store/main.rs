//! The store tests, one binary: the conformance suite and the model test on every backend
//! (`backend_tests!`), then each backend's own promises (embedded, Redis, Redis Cluster, Redis
//! credentials) and several delayq processes on one Redis. Run one file's tests with
//! `cargo test -p delayq --test store conformance::`.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod conformance;
mod embedded_backup;
mod embedded_crash;
mod embedded_store;
mod embedded_versions;
mod model;
mod multi_instance;
mod redis_auth;
mod redis_cluster;
mod redis_store;
mod schedule_instances;
