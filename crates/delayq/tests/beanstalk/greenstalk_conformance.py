"""greenstalk (beanstalkd's Python client, from PyPI) against delayq's beanstalkd port.

Each test is one behaviour greenstalk's own suite (tests/test_greenstalk.py) checks against
beanstalkd, adapted to a server that other tests share: every test works in tubes of its own,
and `stats` is checked by its changes rather than by absolute zeros. Timed behaviours keep
greenstalk's lower bounds (never early) with a looser upper bound (a shared CI machine).

Usage: python greenstalk_conformance.py --port PORT --pid PID [--unix PATH] [--only a,b]
Prints one line per test; exits 1 if any failed. test_drain_mode runs last: it sends SIGUSR1
to PID, after which the server refuses puts.
"""

import argparse
import os
import signal
import sys
import time
import traceback
import uuid
from contextlib import contextmanager

import greenstalk
from greenstalk import (
    DEFAULT_PRIORITY,
    DEFAULT_TTR,
    Client,
    DeadlineSoonError,
    DrainingError,
    JobTooBigError,
    NotFoundError,
    NotIgnoredError,
    TimedOutError,
)

ARGS = None
SLACK = 0.6  # seconds beyond greenstalk's bound a timed step may take here


def address():
    if ARGS.unix:
        return ARGS.unix
    return ("127.0.0.1", ARGS.port)


def tube(name):
    return f"{name}-{uuid.uuid4().hex[:8]}"


def client(use=None, watch=None, encoding="utf-8"):
    use = use or tube("t")
    watch = watch or use
    return Client(address(), encoding=encoding, use=use, watch=watch)


@contextmanager
def assert_seconds(n):
    start = time.monotonic()
    yield
    took = time.monotonic() - start
    assert took >= n - 0.01, f"took {took:.3f} s, expected at least {n} s"
    assert took <= n + SLACK, f"took {took:.3f} s, expected about {n} s"


def raises(kind, f, *args, **kwargs):
    try:
        f(*args, **kwargs)
    except kind:
        return
    raise AssertionError(f"expected {kind.__name__}")


def test_basic_usage():
    emails = tube("emails")
    with Client(address()) as c:
        c.use(emails)
        id = c.put("测试@example.com")
        c.watch(emails)
        c.ignore("default")
        job = c.reserve()
        assert id == job.id
        assert job.body == "测试@example.com"
        c.delete(job)


def test_put_priority():
    with client() as c:
        c.put("2", priority=2)
        c.put("1", priority=1)
        assert c.reserve().body == "1"
        assert c.reserve().body == "2"


def test_delays():
    with client() as c:
        with assert_seconds(1):
            c.put("delayed", delay=1)
            job = c.reserve()
            assert job.body == "delayed"
        with assert_seconds(2):
            c.release(job, delay=2)
            raises(TimedOutError, c.reserve, timeout=1)
            job = c.reserve(timeout=1)
        c.bury(job)
        raises(TimedOutError, c.reserve, timeout=0)


def test_ttr():
    with client() as c:
        c.put("two second ttr", ttr=2)
        with assert_seconds(1):
            job = c.reserve()
            raises(DeadlineSoonError, c.reserve)
        with assert_seconds(1):
            c.touch(job)
            raises(DeadlineSoonError, c.reserve)
        c.release(job)


def test_reserve_raises_on_timeout():
    with client() as c:
        with assert_seconds(1):
            raises(TimedOutError, c.reserve, timeout=1)


def test_reserve_job():
    with client() as c:
        id1 = c.put("a")
        id2 = c.put("b")
        j1 = c.reserve_job(id1)
        j2 = c.reserve_job(id2)
        assert (j1.body, j2.body) == ("a", "b")
        raises(NotFoundError, c.reserve_job, id1)
        raises(NotFoundError, c.reserve_job, id2)
        raises(TimedOutError, c.reserve, timeout=0)
        c.delete(j1)
        c.delete(j2)
        raises(TimedOutError, c.reserve, timeout=0)


def test_initialize_with_tubes():
    hosts = tube("hosts")
    other = tube("other")
    with Client(address(), use=hosts, watch=hosts) as c:
        c.put("www.example.com")
        job = c.reserve()
        assert job.body == "www.example.com"
        c.delete(job.id)
        c.use(other)
        c.put("")
        raises(TimedOutError, c.reserve, timeout=0)


def test_initialize_watch_multiple():
    static, dynamic = tube("static"), tube("dynamic")
    with Client(address(), watch=[static, dynamic]) as c:
        c.use(static)
        c.put("haskell")
        c.put("rust")
        c.use(dynamic)
        c.put("python")
        assert c.reserve(timeout=0).body == "haskell"
        assert c.reserve(timeout=0).body == "rust"
        assert c.reserve(timeout=0).body == "python"


def test_binary_jobs():
    with client(encoding=None) as c:
        data = os.urandom(4096)
        c.put(data)
        assert c.reserve().body == data


def test_peek():
    with client() as c:
        id = c.put("job")
        job = c.peek(id)
        assert job.id == id
        assert job.body == "job"


def test_peek_not_found():
    with client() as c:
        raises(NotFoundError, c.peek, 111)


def test_peek_ready():
    with client() as c:
        id = c.put("ready")
        job = c.peek_ready()
        assert job.id == id
        assert job.body == "ready"


def test_peek_ready_not_found():
    with client() as c:
        c.put("delayed", delay=10)
        raises(NotFoundError, c.peek_ready)


def test_peek_delayed():
    with client() as c:
        id = c.put("delayed", delay=10)
        job = c.peek_delayed()
        assert job.id == id
        assert job.body == "delayed"


def test_peek_delayed_not_found():
    with client() as c:
        raises(NotFoundError, c.peek_delayed)


def test_peek_buried():
    with client() as c:
        id = c.put("buried")
        job = c.reserve()
        c.bury(job)
        job = c.peek_buried()
        assert job.id == id
        assert job.body == "buried"


def test_peek_buried_not_found():
    with client() as c:
        c.put("a ready job")
        raises(NotFoundError, c.peek_buried)


def test_kick():
    with client() as c:
        c.put("a delayed job", delay=30)
        c.put("another delayed job", delay=45)
        c.put("a ready job")
        job = c.reserve()
        c.bury(job)
        assert c.kick(10) == 1
        assert c.kick(10) == 2


def test_kick_job():
    with client() as c:
        id = c.put("a delayed job", delay=3600)
        c.kick_job(id)
        c.reserve(timeout=0)


def test_stats_job():
    with client() as c:
        name = c.using()
        id = c.put("job")
        assert c.stats_job(id) == {
            "id": id,
            "tube": name,
            "state": "ready",
            "pri": DEFAULT_PRIORITY,
            "age": 0,
            "delay": 0,
            "ttr": DEFAULT_TTR,
            "time-left": 0,
            "file": 0,
            "reserves": 0,
            "timeouts": 0,
            "releases": 0,
            "buries": 0,
            "kicks": 0,
        }


def test_stats_tube():
    watched = tube("watched")
    with Client(address(), use=tube("foo"), watch=watched) as c:
        assert c.stats_tube(watched) == {
            "name": watched,
            "current-jobs-urgent": 0,
            "current-jobs-ready": 0,
            "current-jobs-reserved": 0,
            "current-jobs-delayed": 0,
            "current-jobs-buried": 0,
            "total-jobs": 0,
            "current-using": 0,
            "current-watching": 1,
            "current-waiting": 0,
            "cmd-delete": 0,
            "cmd-pause-tube": 0,
            "pause": 0,
            "pause-time-left": 0,
        }
        raises(NotFoundError, c.stats_tube, tube("never"))


def test_stats():
    with client() as c:
        before = c.stats()
        c.put("urgent", priority=5)
        s = c.stats()
        for key in [
            "cmd-peek", "cmd-peek-ready", "cmd-peek-delayed", "cmd-peek-buried",
            "cmd-reserve", "cmd-reserve-with-timeout", "cmd-delete", "cmd-release",
            "cmd-use", "cmd-watch", "cmd-ignore", "cmd-bury", "cmd-kick", "cmd-touch",
            "cmd-stats-job", "cmd-stats-tube", "cmd-list-tubes", "cmd-list-tube-used",
            "cmd-list-tubes-watched", "cmd-pause-tube", "job-timeouts", "binlog-oldest-index",
            "binlog-current-index", "binlog-records-migrated", "binlog-records-written",
            "current-jobs-reserved", "current-jobs-delayed", "current-jobs-buried",
            "current-producers", "current-workers", "current-waiting", "total-connections",
        ]:
            assert isinstance(s[key], int) and s[key] >= 0, key
        assert s["cmd-put"] == before["cmd-put"] + 1
        assert s["cmd-stats"] == before["cmd-stats"] + 1
        assert s["total-jobs"] >= before["total-jobs"] + 1
        assert s["current-jobs-ready"] >= 1
        assert s["current-jobs-urgent"] >= 1
        assert s["max-job-size"] == ARGS.max_job_size
        assert s["current-tubes"] >= 2
        assert s["current-connections"] >= 1
        assert s["pid"] == ARGS.pid
        for key in ["version", "rusage-utime", "rusage-stime", "uptime", "binlog-max-size",
                    "id", "hostname"]:
            assert key in s, key
        assert s["draining"] == "false"
        c.reserve()
        assert c.stats()["current-workers"] >= 1


def test_tubes():
    a, b, d = tube("a"), tube("b"), tube("c")
    with client() as c:
        first = c.using()
        assert first in c.tubes()
        c.use(a)
        c.watch(b)
        c.watch(d)
        assert {first, a, b, d} <= set(c.tubes())


def test_using():
    with Client(address()) as c:
        assert c.using() == "default"
        another = tube("another")
        c.use(another)
        assert c.using() == another


def test_watching():
    with Client(address()) as c:
        assert c.watching() == ["default"]
        another = tube("another")
        c.watch(another)
        assert set(c.watching()) == {"default", another}


def test_pause_tube():
    with client() as c:
        c.put("")
        with assert_seconds(1):
            c.pause_tube(c.using(), 1)
            c.reserve()
        assert c.stats_tube(c.using())["cmd-pause-tube"] == 1


def test_max_job_size():
    with client(encoding=None) as c:
        raises(JobTooBigError, c.put, bytes(ARGS.max_job_size + 1))
        # The connection goes on.
        c.put(bytes(ARGS.max_job_size))


def test_job_not_found():
    with client() as c:
        raises(NotFoundError, c.delete, 87)


def test_delete_job_reserved_by_other():
    with client() as c:
        c.put("", ttr=1)
        with Client(address(), watch=c.using()) as other:
            job = other.reserve()
            raises(NotFoundError, c.delete, job)


def test_not_ignored():
    with Client(address()) as c:
        raises(NotIgnoredError, c.ignore, "default")


def test_drain_mode():
    with client(encoding=None) as c:
        assert isinstance(c.put(b"first"), int)
        os.kill(ARGS.pid, signal.SIGUSR1)
        time.sleep(0.1)
        raises(DrainingError, c.put, b"second")
        assert c.stats()["draining"] == "true"
        # Everything else is served.
        assert c.reserve(timeout=0).body == b"first"


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--unix")
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--max-job-size", type=int, default=65535)
    p.add_argument("--only", default="")
    ARGS = p.parse_args()
    tests = [(n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)]
    # Drain mode refuses every later put: last.
    tests.sort(key=lambda t: t[0] == "test_drain_mode")
    if ARGS.only:
        only = set(ARGS.only.split(","))
        tests = [t for t in tests if t[0] in only]
    failed = []
    print(f"greenstalk {greenstalk.__version__ if hasattr(greenstalk, '__version__') else ''}")
    for name, f in tests:
        try:
            f()
            print(f"ok   {name}")
        except Exception:
            failed.append(name)
            print(f"FAIL {name}\n{traceback.format_exc()}")
    print(f"{len(tests) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
