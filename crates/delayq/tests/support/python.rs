//! The Python the tests run real third-party receivers with: the virtualenv that `.ci/test-venv`
//! makes from `.ci/test-requirements.txt` (kept in
//! `${XDG_CACHE_HOME:-$HOME/.cache}/delayq-ci/test-venv-<first 12 hex digits of the file's
//! sha256>`, the path that script prints). A missing virtualenv or package fails the test with
//! one line saying how to install it.

use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::process::Command;

/// The workspace's root (two levels above this crate).
fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The virtualenv's `python`, after checking that `module` imports in it.
pub fn with(module: &str) -> PathBuf {
    let requirements = workspace().join(".ci/test-requirements.txt");
    let text = std::fs::read(&requirements).expect(".ci/test-requirements.txt");
    let hash: String = Sha256::digest(&text)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .expect("HOME or XDG_CACHE_HOME");
    let venv = cache.join(format!("delayq-ci/test-venv-{}", &hash[..12]));
    let python = venv.join("bin/python");
    let ok = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "the Python package {module} is missing: run .ci/test-venv (installs \
         .ci/test-requirements.txt into {})",
        venv.display()
    );
    python
}
