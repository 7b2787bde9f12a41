//! Shared test support: real backing services and the per-backend test macro. Each test binary
//! (store, http, faults, journal, browser) includes this module once, by `#[path]`, and uses
//! a subset of it, hence `dead_code` is allowed.
#![allow(dead_code)]

pub mod app;
#[macro_use]
pub mod backends;
pub mod failing;
pub mod load;
pub mod node;
pub mod process;
pub mod python;
pub mod receiver;
pub mod redis_cluster;
pub mod redis_server;
