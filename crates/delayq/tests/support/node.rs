//! The Node packages the tests run real third-party clients with: the `node_modules` that
//! `.ci/test-node-modules` installs from `.ci/test-node/package.json` (kept in
//! `${XDG_CACHE_HOME:-$HOME/.cache}/delayq-ci/test-node-<first 12 hex digits of the file's
//! sha256>`, the path that script prints). A missing package fails the test with one line
//! saying how to install it.

use std::path::PathBuf;

/// The directory whose `node_modules` holds `package`, after checking it is there and that
/// `node` runs.
pub fn with(package: &str) -> PathBuf {
    let dir = super::ci_cache(".ci/test-node/package.json", "test-node");
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
