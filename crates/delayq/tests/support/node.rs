//! The Node packages the tests run real third-party clients with: the `node_modules` that
//! `.ci/test-node-modules` installs from `.ci/test-node/package.json` (kept in
//! `${XDG_CACHE_HOME:-$HOME/.cache}/delayq-ci/test-node-<first 12 hex digits of the file's
//! sha256>`, the path that script prints). A missing package fails the test with one line
//! saying how to install it.

use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// The directory whose `node_modules` holds `package`, after checking it is there and that
/// `node` runs.
pub fn with(package: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text =
        std::fs::read(root.join(".ci/test-node/package.json")).expect(".ci/test-node/package.json");
    let hash: String = Sha256::digest(&text)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .expect("HOME or XDG_CACHE_HOME");
    let dir = cache.join(format!("delayq-ci/test-node-{}", &hash[..12]));
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        node && dir.join("node_modules").join(package).is_dir(),
        "the Node package {package} is missing: run .ci/test-node-modules (needs node and npm: \
         apt-get install -y nodejs npm; installs .ci/test-node/package.json into {})",
        dir.display()
    );
    dir
}
