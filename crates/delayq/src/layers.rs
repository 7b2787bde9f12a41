//! The test that keeps lib.rs's layer list true: every module of the library uses only the
//! modules listed before it there. It reads the list from lib.rs's docs (one `- [`name`]` line
//! per module, bottom up) and every `crate::` path (in `use` declarations, paths and macros'
//! `$crate::`) in each module's files, comments left out, and names each import that goes up.
//! The list is the one place the order is written.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The modules of lib.rs's layer list, bottom up.
fn layers(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|l| l.strip_prefix("//! - [`"))
        .filter_map(|l| l.split_once("`]").map(|(name, _)| name.to_string()))
        .collect()
}

/// The modules lib.rs declares (`pub mod name;`).
fn declared(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .filter_map(|l| l.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

/// The top-level names a line reaches through `crate::` (`crate::a::b` gives `a`;
/// `crate::{a::b, c}` gives `a` and `c`). Lines that are comments give none.
fn references(line: &str) -> Vec<String> {
    if line.trim_start().starts_with("//") {
        return Vec::new();
    }
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for (at, _) in line.match_indices("crate::") {
        if line[..at].chars().next_back().is_some_and(ident) {
            continue; // another name ending in `crate`
        }
        let rest = &line[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The first name of each comma-separated item at the group's top level.
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && ident(c) => {
                        let name: String = group[i..].chars().take_while(|&c| ident(c)).collect();
                        found.push(name);
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name: String = rest.chars().take_while(|&c| ident(c)).collect();
            if !name.is_empty() {
                found.push(name);
            }
        }
    }
    found
}

/// Every `.rs` file of module `name`: `src/name.rs` and everything under `src/name/`.
fn files_of(src: &Path, name: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    let file = src.join(format!("{name}.rs"));
    if file.is_file() {
        files.push(file);
    }
    walk(&src.join(name), &mut files);
    files.sort();
    files
}

#[test]
fn the_layer_list_names_every_module_once() {
    let lib = include_str!("lib.rs");
    let listed = layers(lib);
    let unique: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(
        unique.len(),
        listed.len(),
        "a module is listed twice: {listed:?}"
    );
    assert_eq!(
        unique,
        declared(lib),
        "lib.rs's layer list and its `pub mod`s differ"
    );
}

#[test]
fn no_module_imports_one_listed_after_it() {
    let lib = include_str!("lib.rs");
    let order = layers(lib);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut up = Vec::new();
    let mut seen = 0;
    for (rank, module) in order.iter().enumerate() {
        let files = files_of(&src, module);
        assert!(!files.is_empty(), "no file for module {module} in {src:?}");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            for (n, line) in text.lines().enumerate() {
                for target in references(line) {
                    let Some(target_rank) = order.iter().position(|m| *m == target) else {
                        continue; // an item of lib.rs itself
                    };
                    seen += 1;
                    if target_rank > rank {
                        let shown = file.strip_prefix(&src).unwrap_or(&file).display();
                        up.push(format!(
                            "src/{shown}:{}: {module} uses crate::{target}, listed after it",
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(seen > 0, "no `crate::` path found: the scan is broken");
    assert!(
        up.is_empty(),
        "imports against lib.rs's layer list (move the code, or the module in the list):\n{}",
        up.join("\n")
    );
}

#[test]
fn references_are_read_from_paths_groups_and_macros_but_not_comments() {
    assert_eq!(
        references("use crate::store::{Store, StoreError};"),
        ["store"]
    );
    assert_eq!(
        references("use crate::{job::{Job, JobId}, clock::Clock};"),
        ["job", "clock"]
    );
    assert_eq!(
        references("    let x = crate::server::redact_url(u);"),
        ["server"]
    );
    assert_eq!(
        references("use $crate::journal::JournalError;"),
        ["journal"]
    );
    assert!(references("//! see [`crate::api`]").is_empty());
    assert!(references("use mycrate::api;").is_empty());
}
