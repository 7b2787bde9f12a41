//! The Lua transitions (`*.lua` beside this file, each headed by its KEYS/ARGV/returns
//! contract), compiled into the binary with `include_str!` and loaded into Redis as one
//! function library: `lib.lua` (record format, index upkeep, events) first, then each
//! transition's file as the body of one registered function. Each function is a [`Function`]
//! declared in the module that calls it (its name, its file and what it does to memory) and
//! listed in that module's `FUNCTIONS`. This file builds the library from those lists;
//! `conn.rs` loads it and calls its functions (FCALL).
//!
//! **Why a function library, not scripts.** Redis runs a script's whole text on every
//! EVALSHA, so lib's definitions (about 30 closures and a dozen tables) would be rebuilt on
//! every call. A library's top level runs once, when it is loaded; a call runs only its own
//! body.
//!
//! **Versions side by side.** The library and its functions are named after a hash of the
//! library's text (`delayq_<hash>`, `delayq_<hash>_<transition>`), so instances of different
//! builds sharing one Redis (a rolling upgrade) each call their own code; loading is
//! `FUNCTION LOAD REPLACE`, which is idempotent for identical text. An instance that starts
//! deletes the libraries of other builds (`conn.rs` `prune`), so upgrades do not pile them up
//! in Redis; an instance of another build still running finds its library missing on its next
//! call and loads it again (`conn.rs` `fcall_each`), which costs it one round trip.
//!
//! **When Redis is full.** Redis refuses a function at its `maxmemory` (with `noeviction`)
//! unless it is registered `allow-oom`. `remove` (finish, delete) only frees memory; the
//! transitions that move one existing job between states (reserve, release, touch, bury, kick,
//! kick_topic) leave it about the same: the job's index entry moves and its record is rewritten
//! a few bytes longer or shorter. Those are `allow-oom`: consumers keep draining, finishing,
//! extending and handing back the jobs they hold, and an operator can delete jobs, which frees
//! Redis. The timer's pass is registered twice: `tick`, which promotes and expires (moves jobs)
//! and is `allow-oom`, so jobs keep falling due on time, and `tick_drain`, the same code for
//! the passes that also drain far windows, which turn list entries (~10 bytes) into timeline
//! entries (~140) and so is not. What can add memory is refused until memory is free again:
//! push, reschedule (a job moved out of a far window gains a timeline entry) and window
//! drains, so the far-future jobs of a window due meanwhile wait: a pass whose drain is
//! refused is run again as `tick` and the drain retried a second later (`tick/plan.rs`
//! `after_refusal`; `redis_store/outages.rs`
//! `a_full_redis_refuses_what_adds_memory_and_serves_the_jobs_it_holds`).

use super::{by_id, flow, kick_topic, list, push, remove, reserve, schedules, tick};
use std::sync::{LazyLock, OnceLock};

const LIB: &str = include_str!("lib.lua");

/// Whether Redis runs a function even at its `maxmemory` (see the module docs).
#[derive(Clone, Copy)]
pub(super) enum Memory {
    /// May add memory: refused when Redis is full.
    Adds,
    /// Frees memory or leaves it about the same: registered `allow-oom`.
    Neutral,
    /// Reads only (the listings): registered `no-writes`.
    Reads,
}

/// One function of the library: its name, its body (`<name>.lua` beside this file) and what
/// it does to memory. Each is a `static` in the module that calls it, listed in that module's
/// `FUNCTIONS`; [`all`] gathers those lists into the library. A `.lua` file no module lists
/// fails this file's tests.
pub(super) struct Function {
    name: &'static str,
    body: &'static str,
    memory: Memory,
    /// `<library>_<name>`, what FCALL takes: made once, at the first call.
    registered: OnceLock<String>,
}

impl Function {
    pub(super) const fn new(name: &'static str, body: &'static str, memory: Memory) -> Function {
        Function {
            name,
            body,
            memory,
            registered: OnceLock::new(),
        }
    }

    /// The name this build registers the function under (`delayq_<hash>_<name>`).
    pub(super) fn registered(&self) -> &str {
        self.registered
            .get_or_init(|| format!("{}_{}", LIBRARY.name, self.name))
    }
}

/// Every function, from the modules that call them.
fn all() -> impl Iterator<Item = &'static Function> {
    [
        &push::FUNCTIONS[..],
        &reserve::FUNCTIONS[..],
        &remove::FUNCTIONS[..],
        &by_id::FUNCTIONS[..],
        &kick_topic::FUNCTIONS[..],
        &tick::FUNCTIONS[..],
        &list::FUNCTIONS[..],
        &flow::FUNCTIONS[..],
        &schedules::FUNCTIONS[..],
    ]
    .into_iter()
    .flatten()
    .copied()
}

/// The library's Lua after its `#!lua` header line: lib, then one `register_function` per
/// function, named `<prefix>_<name>`, with its flags (`allow-oom` or none). Each body starts
/// with `begin`, which binds the call's keys and arguments to the names lib and the bodies use
/// (`KEYS`, `ARGV`, `JOBS`, `NOW`...).
fn functions(prefix: &str) -> String {
    let mut out = String::with_capacity(LIB.len() + 16_384);
    out.push_str(LIB);
    for f in all() {
        let flags = match f.memory {
            Memory::Neutral => "{'allow-oom'}",
            Memory::Adds => "{}",
            Memory::Reads => "{'no-writes'}",
        };
        out.push_str(&format!(
            "\nredis.register_function{{function_name = '{prefix}_{}', flags = {flags}, \
             callback = function(keys, args)\nbegin(keys, args)\n{}\nend}}\n",
            f.name, f.body
        ));
    }
    out
}

/// What every delayq library's name starts with; 16 lowercase hex digits follow.
pub const LIBRARY_PREFIX: &str = "delayq_";

/// Whether `name` is the name of a delayq function library (this build's or another's).
pub fn is_delayq_library(name: &str) -> bool {
    name.strip_prefix(LIBRARY_PREFIX).is_some_and(|h| {
        h.len() == 16
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// delayq's function library for this build.
pub struct Library {
    /// `delayq_<hash>`: [`LIBRARY_PREFIX`] and 16 hex digits of the code's SHA-1.
    pub name: String,
    /// `#!lua name=delayq_<hash>` and the code: what `FUNCTION LOAD` takes.
    pub text: String,
}

impl Library {
    fn build() -> Library {
        // The hash covers the code with a fixed placeholder name, so it names the code alone.
        let hash = sha1_smol::Sha1::from(functions("delayq"))
            .digest()
            .to_string();
        let prefix = format!("{LIBRARY_PREFIX}{}", &hash[..16]);
        Library {
            text: format!("#!lua name={prefix}\n{}", functions(&prefix)),
            name: prefix,
        }
    }
}

pub static LIBRARY: LazyLock<Library> = LazyLock::new(Library::build);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_of_the_versioned_shape_are_delayq_libraries() {
        assert!(is_delayq_library("delayq_0123456789abcdef"));
        for other in [
            "delayq",
            "delayq_0123456789abcde",
            "delayq_0123456789abcdef0",
            "delayq_0123456789ABCDEF",
            "delayq_mylib_functions",
            "mylib_0123456789abcdef",
        ] {
            assert!(!is_delayq_library(other), "{other}");
        }
    }

    #[test]
    fn every_transition_is_registered_under_the_library_s_versioned_name() {
        let lib = &*LIBRARY;
        let prefix = lib
            .text
            .lines()
            .next()
            .unwrap()
            .strip_prefix("#!lua name=")
            .unwrap();
        assert_eq!(prefix, lib.name);
        assert!(is_delayq_library(&lib.name), "{}", lib.name);
        for f in all() {
            let registered = format!("function_name = '{prefix}_{}',", f.name);
            assert_eq!(lib.text.matches(&registered).count(), 1, "{}", f.name);
            let called = f.registered();
            assert!(
                called.starts_with(prefix) && lib.text.contains(&format!("'{called}'")),
                "{called}"
            );
        }
    }

    #[test]
    fn the_version_follows_the_code() {
        let a = sha1_smol::Sha1::from(functions("delayq"))
            .digest()
            .to_string();
        let b = sha1_smol::Sha1::from(functions("delayq") + " ")
            .digest()
            .to_string();
        assert_ne!(a, b);
        assert!(LIBRARY.name.contains(&a[..16]));
    }

    #[test]
    fn every_transition_that_changes_jobs_writes_its_counts_and_events() {
        for f in all() {
            if ["put(", "unindex(", "add_index("]
                .iter()
                .any(|call| f.body.contains(call))
            {
                assert!(
                    f.body.contains("flush_events()"),
                    "{} never writes its counts",
                    f.name
                );
            }
        }
    }

    /// A function's module lists it in its `FUNCTIONS`; one it forgot would be missing from
    /// the library, and its calls would fail.
    #[test]
    fn every_lua_file_beside_this_one_is_in_the_library() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/redis");
        let mut files = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            if !name.ends_with(".lua") || name == "lib.lua" {
                continue;
            }
            files += 1;
            let body = std::fs::read_to_string(&path).unwrap();
            assert!(
                all().any(|f| f.body == body && name == format!("{}.lua", f.name)),
                "{name} is in no module's FUNCTIONS"
            );
        }
        assert!(files > 0, "no .lua file in {dir}");
    }
}
