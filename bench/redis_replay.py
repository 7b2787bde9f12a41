"""redis_replay.py: turns a `redis-cli monitor` capture of delayq's commands into RESP files that
`redis-cli --pipe` replays, one file per delayq function (push.resp, reserve.resp, ...), in the
order they were sent, each calling the function of that name in LIBRARY (the library loaded
where they are replayed, which a build of other Lua names differently). Commands Lua sent (`[0 lua]`) and connection set-up are left out. Also
writes empty.resp: as many calls of the reserve function on a topic with no job as the capture
has reserve calls, whose cost is what any function call costs before it does anything.

Usage: python3 redis_replay.py MONITOR_FILE LIBRARY OUT_DIR
Prints one line per file: its name and how many commands it holds.
"""

import os
import re
import sys

ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\x07", "b": b"\x08", "\\": b"\\", '"': b'"'}
SKIP = {b"HELLO", b"CLIENT", b"SUBSCRIBE", b"PING", b"FUNCTION", b"MONITOR", b"SELECT", b"INFO"}
LINE = re.compile(r"^[0-9.]+ \[\d+ ([^\]]+)\] (.*)$")


def parse_args(s):
    """The arguments of one monitor line: quoted, with C-style escapes (sdscatrepr)."""
    out, i, n = [], 0, len(s)
    while i < n:
        if s[i] == " ":
            i += 1
            continue
        if s[i] != '"':
            raise ValueError(f"unquoted argument at {s[i:i + 20]!r}")
        i += 1
        b = bytearray()
        while True:
            c = s[i]
            if c == "\\":
                d = s[i + 1]
                if d == "x":
                    b.append(int(s[i + 2:i + 4], 16))
                    i += 4
                else:
                    b.extend(ESCAPES[d])
                    i += 2
            elif c == '"':
                i += 1
                break
            else:
                b.extend(c.encode("latin-1"))
                i += 1
        out.append(bytes(b))
    return out


def resp(args):
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def main(capture, library, out_dir):
    files, counts, reserve = {}, {}, None
    for line in open(capture, encoding="latin-1"):
        m = LINE.match(line.rstrip("\n"))
        if not m or m.group(1) == "lua":
            continue
        args = parse_args(m.group(2))
        if args[0].upper() in SKIP:
            continue
        name = "other"
        if args[0].upper() == b"FCALL":
            name = args[1].decode().rsplit("_", 1)[-1]
            args[1] = f"{library}_{name}".encode()
            if name == "reserve" and reserve is None:
                reserve = args
        if name not in files:
            files[name] = open(os.path.join(out_dir, f"{name}.resp"), "wb")
        files[name].write(resp(args))
        counts[name] = counts.get(name, 0) + 1
    for f in files.values():
        f.close()
    if reserve is not None:
        # FCALL name numkeys keys... channel now max topics...: the same call, on a topic that
        # has no job.
        keys = int(reserve[2])
        empty = reserve[:3 + keys + 3] + [b"no-such-topic"]
        with open(os.path.join(out_dir, "empty.resp"), "wb") as f:
            for _ in range(counts["reserve"]):
                f.write(resp(empty))
        counts["empty"] = counts["reserve"]
    for name, n in counts.items():
        print(name, n)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
