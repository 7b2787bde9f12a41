#!/usr/bin/env python3
"""flame_layers.py: where a process's on-CPU samples go, from the folded stacks bench/flame.sh
writes (inferno-collapse-perf): user code by layer, kernel time by the call that entered it,
as a Markdown table with each row's share and its CPU per job.

Usage: bench/flame_layers.py FOLDED JOBS   (JOBS: the run's jobs, for the per-job column)

A stack is cut at its first kernel entry (system call, page fault, interrupt). Samples with no
kernel frame go to the innermost user frame that names a layer of LAYERS (leaf first); samples
in the kernel go to what entered it: the system call's libc wrapper (socket reads and writes,
log writes and fdatasync, futex and epoll waits and wake-ups) or a fault or interrupt. The
column `switching` is the part of each row spent in the scheduler's context switch (`schedule`
on the stack): a thread going to sleep, or preempted on its way back from the kernel."""
import sys, collections
LAYERS = [
    ("allocator (mimalloc)", ("mi_", "_mi_", "__rust_alloc", "__rust_dealloc", "__rust_realloc", "malloc", "cfree", "_int_free")),
    ("redb (checkpoints)", ("redb::",)),
    ("embedded store: log, writer", ("delayq::store::embedded",)),
    ("Redis client (redis-rs)", ("redis::", "<redis::")),
    ("Redis store", ("delayq::store::redis",)),
    ("engine", ("delayq::store::engine", "delayq::store::memory", "delayq::store::define")),
    ("timer, dispatch", ("delayq::dispatch", "delayq::alarm")),
    ("API handlers (compat, JSON)", ("delayq::api", "serde_json", "serde::")),
    ("HTTP (hyper, axum, tower)", ("hyper", "axum", "tower", "http::", "httparse")),
    ("tokio (scheduler, I/O driver)", ("tokio::", "<tokio::", "mio::")),
]
KENTRY = ("entry_SYSCALL_64", "asm_exc_", "asm_sysvec_", "asm_common_interrupt", "ret_from_fork")
def layer_of(user):
    for f in reversed(user):
        for name, pats in LAYERS:
            if any(p in f for p in pats):
                return name
    return "other user code"
def syscall_of(caller, kf, user):
    """What a sample in the kernel was doing, by the kernel frames and the libc call that
    entered the kernel (`caller`), with the user frames to tell a file from a socket."""
    kernel = ";".join(kf)
    mine = ";".join(user)
    if "eventfd" in kernel or ("write" in caller and "waker::Waker::wake" in mine):
        return "kernel: eventfd wake-ups (tokio's I/O driver)"
    if "fdatasync" in caller or "fdatasync" in kernel:
        return "kernel: log fdatasync"
    if "write" in caller and ("ext4" in kernel or "delayq::store::embedded" in mine):
        return "kernel: log writes"
    if "write" in caller or "send" in caller:
        return "kernel: socket writes"
    if "recv" in caller or "read" in caller:
        return "kernel: socket reads"
    if "epoll" in caller:
        return "kernel: epoll waits"
    if "futex" in caller or caller == "syscall" or "futex" in kernel:
        return "kernel: futex waits and wake-ups"
    return "kernel: other (" + caller + ")"


if len(sys.argv) != 3:
    sys.exit("usage: bench/flame_layers.py FOLDED JOBS")
jobs = int(sys.argv[2])
tot = collections.Counter(); sw = collections.Counter(); allns = 0
for line in open(sys.argv[1]):
    stack, n = line.rstrip().rsplit(" ", 1); n = int(n); frames = stack.split(";")
    k = next((i for i, f in enumerate(frames) if any(f.startswith(e) for e in KENTRY)), None)
    if k is None:
        L = layer_of(frames[1:])
    else:
        kf = frames[k:]
        if frames[k].startswith("entry_SYSCALL_64"):
            L = syscall_of(frames[k - 1], kf, frames[1:k])
        elif frames[k].startswith("asm_exc_page_fault"):
            L = "kernel: page faults"
        else:
            L = "kernel: interrupts"
        if any(f == "schedule" or f == "__schedule" for f in kf): sw[L] += n
    tot[L] += n; allns += n
print("| where | share | switching | µs per job |")
print("|---|---:|---:|---:|")
for L, n in tot.most_common():
    if 100 * n / allns >= 0.5:
        print(f"| {L} | {100*n/allns:.1f} % | {100*sw[L]/allns:.1f} % | {n/1000/jobs:.1f} |")
rest = sum(n for L, n in tot.items() if 100 * n / allns < 0.5)
print(f"| the rest | {100*rest/allns:.1f} % | | {rest/1000/jobs:.1f} |")
print(f"| all | 100 % | {100*sum(sw.values())/allns:.1f} % | {allns/1000/jobs:.1f} |")
