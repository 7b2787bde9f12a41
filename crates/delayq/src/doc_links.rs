//! The test that keeps the docs' links true: every relative link in the repository's Markdown
//! (README.md, ARCHITECTURE.md, CHANGELOG.md, docs/, bench/, pkg/, monitoring/; not the raw
//! results under bench/results/<run>/) names a file that exists, and a `#fragment` into a
//! Markdown file names one of its headings, as GitHub makes anchors of them: lower case, each
//! character that is not a letter, digit, space, `-` or `_` dropped, spaces made `-`, and a
//! repeated heading's anchor suffixed `-1`, `-2`, ... Fenced code is not read for links or
//! headings. A link to a site (`https:`, `mailto:`) is not followed.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The repository's root (this crate is `crates/delayq`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown files checked, relative to the root.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            return;
        };
        for entry in entries {
            let name = entry.expect("a directory entry").file_name();
            let path = dir.join(&name);
            let name = name.to_string_lossy();
            if root.join(&path).is_dir() {
                // Build output, installed packages, and the raw output of benchmark runs.
                let skipped = name.starts_with('.')
                    || name == "target"
                    || name == "node_modules"
                    || (dir == Path::new("bench/results") && name.starts_with("20"));
                if !skipped {
                    walk(root, &path, out);
                }
            } else if name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, Path::new(""), &mut out);
    out.sort();
    out
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |l| {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// GitHub's anchor of a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown text's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let hashes = line.len() - line.trim_start_matches('#').len();
        if hashes == 0 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 { base } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// The targets of a Markdown text's inline links and images (`[text](target)`), in order.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after
                .find(|c: char| c == ')' || c.is_whitespace())
                .unwrap_or(after.len());
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_names_a_file_and_heading_that_exist() {
    let root = root();
    let files = markdown_files(&root);
    assert!(
        files.iter().any(|f| f == Path::new("README.md"))
            && files.iter().any(|f| f.starts_with("docs")),
        "the walk found the docs: {files:?}"
    );
    let mut headings: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(root.join(file)).expect("read a Markdown file");
        for target in link_targets(&text) {
            let is_site = target
                .split_once(':')
                .is_some_and(|(scheme, _)| scheme.chars().all(|c| c.is_ascii_alphabetic()));
            if is_site || target.is_empty() {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let linked = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap_or(Path::new("")).join(path)
            };
            if !root.join(&linked).exists() {
                broken.push(format!("{}: {target}: no such file", file.display()));
                continue;
            }
            if fragment.is_empty() || !path.is_empty() && !path.ends_with(".md") {
                continue;
            }
            let known = headings.entry(linked.clone()).or_insert_with(|| {
                anchors(&std::fs::read_to_string(root.join(&linked)).unwrap_or_default())
            });
            if !known.contains(fragment) {
                broken.push(format!("{}: {target}: no such heading", file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_github_s_and_links_are_read_outside_code() {
    let text = "# Capacity, at `fe7e10b`: the machine is busy\n## W1 and capacity\n\
                ## W1 and capacity\n```\n# not a heading [x](nowhere.md)\n```\n\
                See [it](docs/api.md#x) and ![img](a.png \"t\") and [site](https://x.y/z).\n";
    let a = anchors(text);
    assert!(
        a.contains("capacity-at-fe7e10b-the-machine-is-busy"),
        "{a:?}"
    );
    assert!(a.contains("w1-and-capacity") && a.contains("w1-and-capacity-1"));
    assert!(!a.contains("not-a-heading"));
    assert_eq!(
        link_targets(text),
        ["docs/api.md#x", "a.png", "https://x.y/z"]
    );
}
