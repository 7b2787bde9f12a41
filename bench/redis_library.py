#!/usr/bin/env python3
"""The Redis function library delayq would load, built from a directory of its Lua sources.

Usage: bench/redis_library.py SRC_DIR NAME > library.lua

SRC_DIR is a copy of crates/delayq/src/store/redis (any build's: `git archive` or a worktree).
Mirrors store/redis/scripts.rs: lib.lua, then each `Function::new("name", include_str!("file"),
Memory::...)` of the directory's .rs files registered as NAME_name with its flags. Lets
bench/redis-functions.sh measure a Lua change (LUA_SRC=DIR) without a release build of delayq.
"""
import pathlib
import re
import sys

FLAGS = {"Neutral": "{'allow-oom'}", "Adds": "{}", "Reads": "{'no-writes'}"}
FUNCTION = re.compile(
    r'Function::new\(\s*"(\w+)",\s*include_str!\("(\w+\.lua)"\),\s*Memory::(\w+),?\s*\)'
)


def main() -> None:
    src, name = pathlib.Path(sys.argv[1]), sys.argv[2]
    out = [f"#!lua name={name}\n", (src / "lib.lua").read_text()]
    found = 0
    for rs in sorted(src.glob("*.rs")):
        for function, file, memory in FUNCTION.findall(rs.read_text()):
            body = (src / file).read_text()
            out.append(
                f"\nredis.register_function{{function_name = '{name}_{function}', "
                f"flags = {FLAGS[memory]}, callback = function(keys, args)\n"
                f"begin(keys, args)\n{body}\nend}}\n"
            )
            found += 1
    if found == 0:
        sys.exit(f"no Function::new(..) in {src}/*.rs: not delayq's store/redis directory")
    sys.stdout.write("".join(out))


if __name__ == "__main__":
    main()
