//! The Lua scripts, one per transition (`*.lua` beside this file, each headed by its
//! KEYS/ARGV/returns contract), compiled into the binary with `include_str!`. Transition
//! scripts get `lib.lua` (record format, index upkeep, events) prepended, so the rules live in
//! one place. This file only names them; `conn.rs` runs them.

use redis::Script;
use std::sync::LazyLock;

macro_rules! with_lib {
    ($file:literal) => {
        concat!(include_str!("lib.lua"), "\n", include_str!($file))
    };
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
    push: Script::new(with_lib!("push.lua")),
    reserve: Script::new(with_lib!("reserve.lua")),
    remove: Script::new(with_lib!("remove.lua")),
    release: Script::new(with_lib!("release.lua")),
    touch: Script::new(with_lib!("touch.lua")),
    bury: Script::new(with_lib!("bury.lua")),
    kick: Script::new(with_lib!("kick.lua")),
    kick_topic: Script::new(with_lib!("kick_topic.lua")),
    reschedule: Script::new(with_lib!("reschedule.lua")),
    tick: Script::new(with_lib!("tick.lua")),
});
