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

/// A loopback port nothing listens on now and that no other test of this binary was given:
/// tests run side by side in one process, and two `bind(127.0.0.1:0)` in a row can return the
/// same port, so each port is handed out once (a server given a port another already took
/// fails to start, and its test would talk to the other's server).
pub fn free_port() -> u16 {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("bind 127.0.0.1:0");
        if GIVEN.lock().unwrap_or_else(|p| p.into_inner()).insert(port) {
            return port;
        }
    }
}

/// Where a `.ci/test-*` script keeps what it installs from the workspace's file `spec` (e.g.
/// `.ci/test-requirements.txt`): `${XDG_CACHE_HOME:-$HOME/.cache}/delayq-ci/<name>-<first 12
/// hex digits of the file's sha256>`, the path that script prints.
pub fn ci_cache(spec: &str, name: &str) -> std::path::PathBuf {
    use sha2::{Digest, Sha256};
    use std::path::PathBuf;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read(root.join(spec)).expect(spec);
    let hash: String = Sha256::digest(&text)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .expect("HOME or XDG_CACHE_HOME");
    cache.join(format!("delayq-ci/{name}-{}", &hash[..12]))
}
