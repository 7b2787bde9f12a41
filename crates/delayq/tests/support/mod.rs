//! Shared test support: real backing services and the per-backend test macro. Each test binary
//! uses a subset, hence `dead_code` is allowed.
#![allow(dead_code, unused_imports, unused_macros)]

pub mod app;
pub mod backends;
pub mod failing;
pub mod load;
pub mod process;
pub mod redis_cluster;
pub mod redis_server;
