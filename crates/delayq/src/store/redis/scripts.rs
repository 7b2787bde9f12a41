//! The Lua scripts, one per transition (`*.lua` beside this file, each headed by its
//! KEYS/ARGV/returns contract), compiled into the binary with `include_str!`. Transition
//! scripts get `lib.lua` (record format, index upkeep, events) prepended, so the rules live in
//! one place. This file names them and does that prepending; `conn.rs` runs them.
//!
//! **Only the part of lib a script uses.** Redis runs a script's whole text on every call, so
//! every `local function` of lib costs a closure allocation per call whether the script calls
//! it or not: the full lib added ~5 µs to each call (`EVALSHA` of lib plus `return 1`: 7.3 µs,
//! of `return 1`: 1.9 µs), a third of a `remove`. [`with_lib`] keeps lib's top-level
//! definitions the script reaches, directly or through other definitions, in lib's order.

use redis::Script;
use std::collections::HashSet;
use std::sync::LazyLock;

const LIB: &str = include_str!("lib.lua");

/// Every transition script's source, by name (`<name>.lua`), lib not yet prepended.
const SOURCES: [(&str, &str); 10] = [
    ("push", include_str!("push.lua")),
    ("reserve", include_str!("reserve.lua")),
    ("remove", include_str!("remove.lua")),
    ("release", include_str!("release.lua")),
    ("touch", include_str!("touch.lua")),
    ("bury", include_str!("bury.lua")),
    ("kick", include_str!("kick.lua")),
    ("kick_topic", include_str!("kick_topic.lua")),
    ("reschedule", include_str!("reschedule.lua")),
    ("tick", include_str!("tick.lua")),
];

fn source(name: &str) -> &'static str {
    SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
        .unwrap_or_else(|| panic!("no script {name}.lua"))
}

/// Script `name` with the part of lib it uses prepended.
fn script(name: &str) -> Script {
    Script::new(&with_lib(source(name)))
}

/// One top-level block of lib: a `local` definition (with the comment lines above it), or
/// text that defines nothing (the header).
struct Block<'a> {
    text: &'a str,
    defines: Vec<&'a str>,
}

/// lib.lua cut into top-level blocks: a new block starts at each line that begins with
/// `local ` once the current block holds code (comments go with the definition below them).
fn lib_blocks(lib: &str) -> Vec<Block<'_>> {
    let mut starts = vec![0];
    let mut has_code = false;
    let mut at = 0;
    for line in lib.split_inclusive('\n') {
        if line.starts_with("local ") && has_code {
            starts.push(at);
            has_code = false;
        }
        let t = line.trim();
        if !t.is_empty() && !t.starts_with("--") {
            has_code = true;
        }
        at += line.len();
    }
    starts.push(lib.len());
    starts
        .windows(2)
        .map(|w| {
            let text = &lib[w[0]..w[1]];
            Block {
                text,
                defines: definitions(text),
            }
        })
        .collect()
}

/// Names a block's top-level lines define: `local function f` or `local a, b = ...`.
fn definitions(text: &str) -> Vec<&str> {
    let mut names = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("local function ") {
            names.extend(identifiers(rest).next());
        } else if let Some(rest) = line.strip_prefix("local ")
            && let Some((lhs, _)) = rest.split_once('=')
        {
            names.extend(identifiers(lhs));
        }
    }
    names
}

fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// `script` preceded by the blocks of lib it needs: those defining a name it mentions, then
/// those defining a name a kept block mentions, and so on; blocks that define nothing stay.
/// Over-keeping (a name that only appears in a comment) costs a little time, never
/// correctness; under-keeping cannot happen, as every mentioned name's definition is kept.
pub fn with_lib(script: &str) -> String {
    let blocks = lib_blocks(LIB);
    let mut keep: Vec<bool> = blocks.iter().map(|b| b.defines.is_empty()).collect();
    let mut wanted: HashSet<&str> = identifiers(script).collect();
    for b in blocks.iter().filter(|b| b.defines.is_empty()) {
        wanted.extend(identifiers(b.text));
    }
    loop {
        let mut grew = false;
        for (i, b) in blocks.iter().enumerate() {
            if !keep[i] && b.defines.iter().any(|n| wanted.contains(n)) {
                keep[i] = true;
                wanted.extend(identifiers(b.text));
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    let mut out = String::with_capacity(LIB.len() + script.len() + 1);
    for (b, _) in blocks.iter().zip(&keep).filter(|(_, k)| **k) {
        out.push_str(b.text);
    }
    out.push('\n');
    out.push_str(script);
    out
}

/// Every script delayq runs, hashed once per process.
pub struct Scripts {
    pub push: Script,
    pub reserve: Script,
    pub remove: Script,
    pub release: Script,
    pub touch: Script,
    pub bury: Script,
    pub kick: Script,
    pub kick_topic: Script,
    pub reschedule: Script,
    pub tick: Script,
}

impl Scripts {
    pub fn all(&self) -> [&Script; 10] {
        [
            &self.push,
            &self.reserve,
            &self.remove,
            &self.release,
            &self.touch,
            &self.bury,
            &self.kick,
            &self.kick_topic,
            &self.reschedule,
            &self.tick,
        ]
    }
}

pub static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    push: script("push"),
    reserve: script("reserve"),
    remove: script("remove"),
    release: script("release"),
    touch: script("touch"),
    bury: script("bury"),
    kick: script("kick"),
    kick_topic: script("kick_topic"),
    reschedule: script("reschedule"),
    tick: script("tick"),
});

#[cfg(test)]
mod tests {
    use super::*;

    fn defined_in(text: &str) -> Vec<String> {
        lib_blocks(text)
            .iter()
            .flat_map(|b| b.defines.iter().map(|n| n.to_string()))
            .collect()
    }

    #[test]
    fn lib_is_cut_at_every_top_level_definition_and_nothing_is_lost() {
        let blocks = lib_blocks(LIB);
        assert_eq!(blocks.iter().map(|b| b.text).collect::<String>(), LIB);
        let names = defined_in(LIB);
        for expected in [
            "JOBS",
            "WINDOWS",
            "NOW",
            "decode",
            "put",
            "ev_due",
            "kick_record",
        ] {
            assert!(names.iter().any(|n| n == expected), "{expected} not found");
        }
    }

    #[test]
    fn a_script_gets_what_it_calls_and_what_that_calls_but_not_the_rest() {
        let remove = with_lib(source("remove"));
        let kept = defined_in(&remove);
        for needed in ["load", "decode", "unindex", "count", "ready_member", "JOBS"] {
            assert!(kept.iter().any(|n| n == needed), "remove lost {needed}");
        }
        for unused in ["set_window", "note_timer", "fail_delivery", "kick_record"] {
            assert!(!kept.iter().any(|n| n == unused), "remove kept {unused}");
        }
    }

    #[test]
    fn every_script_that_counts_flushes_its_counts_and_events() {
        for (name, text) in SOURCES {
            if defined_in(&with_lib(text)).iter().any(|n| n == "count") {
                assert!(
                    text.contains("flush_events()"),
                    "{name} never writes its counts"
                );
            }
        }
    }
}
