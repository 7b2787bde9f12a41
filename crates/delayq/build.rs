//! Build script: records the commit the binary is built from, for `delayq --version`
//! (`DELAYQ_COMMIT`, the short hash). `DELAYQ_COMMIT` set in the build's environment wins (a
//! packager building from a tarball can name the commit); outside a git checkout, or without
//! git, it is `unknown`.
//!
//! It reruns only when HEAD moves (the files git keeps it in), so an incremental build after an
//! edit does not run git again.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=DELAYQ_COMMIT");
    let commit = std::env::var("DELAYQ_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=DELAYQ_COMMIT={commit}");
    // HEAD, the branch it names and packed-refs: a commit or a checkout changes one of them.
    // Only files that exist: a missing one would make cargo rerun this script every build.
    let mut watched = vec![git_path("HEAD"), git_path("packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git_path(&branch));
    }
    for path in watched.into_iter().flatten() {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// Where git keeps `name` (`HEAD`, `refs/heads/main`), worktrees included.
fn git_path(name: &str) -> Option<PathBuf> {
    git(&["rev-parse", "--path-format=absolute", "--git-path", name]).map(PathBuf::from)
}

/// The trimmed output of a successful `git` command, run in the crate's directory.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}
