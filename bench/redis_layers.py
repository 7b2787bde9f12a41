#!/usr/bin/env python3
"""redis_layers.py: where redis-server's instructions per W1 job go, layer by layer.

Reads the two callgrind files `bench/instructions.sh --keep redis` leaves for redis-server
(`redis-<N>.redis.cg.gz` and `redis-<2N>.redis.cg.gz`) and prints, per job (the difference
between the two runs over N, so start-up and shutdown cancel out), what the server spends on
the network and command dispatch, on entering and leaving delayq's functions (FCALL), in the
Lua interpreter running delayq's Lua, and in the `redis.call`s that Lua makes: the commands
themselves, and passing their arguments and replies between Lua and Redis.

Debian's redis-server is stripped, so run instructions.sh with a redis-server that has its
symbols first on PATH (docs/benchmarks.md, "Inside redis-server"), else most rows are 0.

Usage: bench/redis_layers.py DIR   (DIR holds the two .cg.gz files; their names give N)
"""

import gzip
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def inclusive(cg: Path) -> dict[str, tuple[int, int]]:
    """Function name -> (inclusive instructions, calls), from callgrind_annotate's calling
    tree. A name is the part after the last ':' (recursion levels keep their ' suffix)."""
    with tempfile.NamedTemporaryFile(suffix=".cg") as plain:
        with gzip.open(cg) if cg.suffix == ".gz" else open(cg, "rb") as f:
            plain.write(f.read())
        plain.flush()
        text = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", "--tree=caller", "--threshold=100",
             plain.name],
            check=True, capture_output=True, text=True).stdout
    out: dict[str, tuple[int, int]] = {}
    calls = 0
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+<\s+.*\(([\d,]+)x\)", line)
        if m:
            calls += int(m.group(2).replace(",", ""))
            continue
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+\*\s+(\S+)", line)
        if m:
            name = m.group(2).rsplit(":", 1)[-1]
            cost = int(m.group(1).replace(",", ""))
            # One function can be listed twice, under each source file its code came from:
            # the larger entry is the whole function.
            if name not in out or out[name][0] < cost:
                out[name] = (cost, calls)
            calls = 0
            continue
        if not line.strip():
            calls = 0
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+PROGRAM TOTALS", line)
        if m:
            out["PROGRAM TOTALS"] = (int(m.group(1).replace(",", "")), 0)
    return out


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = Path(sys.argv[1])
    runs = sorted((int(re.search(r"redis-(\d+)\.", p.name).group(1)), p)
                  for p in d.glob("redis-*.redis.cg*"))
    if len(runs) != 2:
        sys.exit(f"{d}: want two redis-<jobs>.redis.cg files, found {len(runs)}")
    n = runs[0][0]
    a, b = inclusive(runs[0][1]), inclusive(runs[1][1])

    def per_job(name: str) -> float:
        return (b.get(name, (0, 0))[0] - a.get(name, (0, 0))[0]) / n

    def calls(name: str) -> float:
        return (b.get(name, (0, 0))[1] - a.get(name, (0, 0))[1]) / n

    total = per_job("PROGRAM TOTALS")
    fcall = per_job("fcallCommand")
    lua = per_job("lua_pcall")
    rcall = per_job("luaRedisGenericCommand")
    commands = per_job("call'2")
    rows = [
        ("all of redis-server", total, None),
        ("network, parsing and dispatch of the calls, replies, timers (outside FCALL)",
         total - fcall, None),
        ("FCALL: entering and leaving a function (KEYS and ARGV as Lua tables, the reply)",
         fcall - lua, calls("fcallCommand")),
        ("- of which KEYS and ARGV as Lua tables", per_job("luaCreateArray"), None),
        ("Lua: the interpreter running delayq's Lua (tables, strings, cmsgpack, GC)",
         lua - rcall, None),
        ("- of which cmsgpack.unpack", per_job("mp_unpack"), calls("mp_unpack")),
        ("- of which cmsgpack.pack", per_job("mp_pack"), calls("mp_pack")),
        ("- of which strings made to numbers (strtod)", per_job("strtod"), calls("strtod")),
        ("- of which the garbage collector's steps", per_job("luaC_step"), None),
        ("- of which Lua's memory (l_alloc: glibc malloc, realloc, free)", per_job("l_alloc"),
         calls("l_alloc")),
        ("- of which new tables", per_job("luaH_new"), calls("luaH_new")),
        ("- of which new strings (interned)", per_job("luaS_newlstr"), calls("luaS_newlstr")),
        ("redis.call: arguments and replies between Lua and Redis", rcall - commands,
         calls("luaRedisGenericCommand")),
        ("redis.call: the commands themselves", commands, None),
    ]
    print(f"| redis-server instructions per W1 job ({n} and {2 * n} jobs) | per job | share | "
          "calls per job |")
    print("|---|---:|---:|---:|")
    for label, v, c in rows:
        share = f"{100 * v / total:.1f} %" if total else ""
        print(f"| {label} | {v:,.0f} | {share} | {'' if c is None else f'{c:.2f}'} |")


if __name__ == "__main__":
    main()
