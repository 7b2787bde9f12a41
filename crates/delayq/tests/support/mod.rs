//! Shared test support: real backing services for the integration tests. Each test binary uses
//! a subset, hence `dead_code` is allowed.
#![allow(dead_code, unused_imports, unused_macros)]

pub mod redis_server;
