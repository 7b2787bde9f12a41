//! The HTTP tests, one binary: the /v1 API, the compat API, generated bad requests,
//! timeouts, bearer tokens and `/metrics` (in-process or on a loopback socket, per backend
//! where it matters), and the Rust client and CLI verbs against a real server. Run one file's
//! tests with `cargo test -p delayq --test http http_v1::`.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod callbacks;
mod client;
mod http_auth;
mod http_compat;
mod http_fuzz;
mod http_limits;
mod http_metrics;
mod http_openapi_server;
mod http_v1;
