//! The Python the tests run real third-party receivers with: the virtualenv that `.ci/test-venv`
//! makes from `.ci/test-requirements.txt` (kept in
//! `${XDG_CACHE_HOME:-$HOME/.cache}/delayq-ci/test-venv-<first 12 hex digits of the file's
//! sha256>`, the path that script prints). A missing virtualenv or package fails the test with
//! one line saying how to install it.

use std::path::PathBuf;
use std::process::Command;

/// The virtualenv's `python`, after checking that `module` imports in it.
pub fn with(module: &str) -> PathBuf {
    let venv = super::ci_cache(".ci/test-requirements.txt", "test-venv");
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
