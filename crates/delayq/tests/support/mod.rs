//! Shared test support: real backing services and the per-backend test macro.
#![allow(dead_code, unused_imports, unused_macros)]

pub mod app;
pub mod backends;
pub mod process;
