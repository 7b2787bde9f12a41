//! The HTTP tests, one binary: the /v1 API, the compat API, generated bad requests,
//! timeouts, silent connections, bearer tokens, the host and cross-site checks and `/metrics`
//! (in-process or on a loopback socket, per backend where it matters), the Rust client and CLI
//! verbs against a real server, the binary as a service (readiness, logs, version) and the
//! monitoring files (alert rules, dashboard). Run one file's tests with `cargo test -p delayq
//! --test http http_v1::push::`. The route table the route-wide tests share is `routes.rs`,
//! derived from the OpenAPI document and the router.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

/// `backend_tests!`'s backends beyond the common ones: none (the store suite runs the cold
/// tier's; the API over it is the same).
#[macro_export]
macro_rules! extra_backends {
    ($($name:ident),*) => {};
}

mod callback_ids;
mod callback_targets;
mod callbacks;
mod client;
mod flow_control;
mod http_auth;
mod http_compat;
mod http_connections;
mod http_fuzz;
mod http_input;
mod http_limits;
mod http_metrics;
mod http_openapi_server;
mod http_origin;
mod http_v1;
mod metrics_format;
mod monitoring;
mod routes;
mod schedules_dst;
mod service;
