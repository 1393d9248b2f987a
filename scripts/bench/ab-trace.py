#!/usr/bin/env python3
"""Interleaved A/B runs of trace mode: builds of libinstrfn.so against each other.

usage: scripts/bench/ab-trace.py [--runs N] [--threads T] [--iterations I] LIB [LIB ...]

Builds tests/fixtures/c/threads.c plain and with -pg, and the -pg objects linked with
scripts/bench/floor-mcount.S (the floor: an mcount that only reads the time stamp counter
twice), then runs, N times over: plain, floor, and the -pg build with INSTRFN_MODE=trace
LD_PRELOAD=LIB for each LIB in turn, each after a `sync` with its trace directory removed.
So a noisy spell of this shared machine falls on every row alike. Prints per row the wall
time per call over plain (ns, per thread: the threads run on up to 2 CPUs) and the CPU time
(user + system of the whole process, its collector thread included) per call over plain, the
minimum and the median over the N rounds. Keep the LIBs outside target/ (copies) to compare
builds of different commits.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "tests", "fixtures", "c", "threads.c")
FLOOR = os.path.join(ROOT, "scripts", "bench", "floor-mcount.S")


def die(msg):
    print(f"ab-trace.py: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    p = argparse.ArgumentParser(description="Interleaved A/B runs of instrfn trace mode.")
    p.add_argument("--runs", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iterations", type=int, default=2000000)
    p.add_argument("libs", nargs="+", metavar="LIB")
    a = p.parse_args()
    if a.runs < 1 or a.threads < 1 or a.iterations < 1:
        die("--runs, --threads and --iterations must be at least 1")
    for lib in a.libs:
        if not os.path.isfile(lib):
            die(f"{lib}: no such file")
    if shutil.which("gcc") is None:
        die("gcc not found (apt-get install gcc)")
    work = tempfile.mkdtemp(prefix="instrfn-ab-")
    try:
        exe = {n: os.path.join(work, n) for n in ("plain", "pg", "floor")}
        obj = os.path.join(work, "threads.o")
        for cmd in (
            ["gcc", "-O2", SOURCE, "-o", exe["plain"], "-lpthread"],
            ["gcc", "-O2", "-pg", "-c", SOURCE, "-o", obj],
            ["gcc", obj, "-o", exe["pg"], "-lpthread"],
            ["gcc", obj, FLOOR, "-o", exe["floor"], "-lpthread"],
        ):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                die(f"{' '.join(cmd)}: {r.stderr.strip()}")
        trace = os.path.join(work, "trace")
        calls = a.threads * a.iterations * 2

        def run(path, env):
            shutil.rmtree(trace, ignore_errors=True)
            os.sync()
            e = dict(os.environ, INSTRFN_OUTPUT=trace, **env)
            t = time.perf_counter()
            proc = subprocess.Popen([path, str(a.threads), str(a.iterations)],
                                    stdout=subprocess.DEVNULL, env=e)
            _, status, ru = os.wait4(proc.pid, 0)
            if status != 0:
                die(f"{path} with {env}: exit status {status}")
            # A library the loader refused, or one that is not instrfn, traces nothing: its
            # figures would be the untraced program's.
            if "LD_PRELOAD" in env and not any(
                    n.endswith(".meta") for n in (os.listdir(trace) if os.path.isdir(trace) else [])):
                die(f"{env['LD_PRELOAD']}: the run wrote no trace (not an instrfn library?)")
            return time.perf_counter() - t, ru.ru_utime + ru.ru_stime

        rows = [("floor", exe["floor"], {})] + [
            (lib, exe["pg"], {"INSTRFN_MODE": "trace", "LD_PRELOAD": os.path.abspath(lib)})
            for lib in a.libs
        ]
        got = {name: [] for name, _, _ in rows}
        for _ in range(a.runs):
            wall0, cpu0 = run(exe["plain"], {})
            for name, path, env in rows:
                wall, cpu = run(path, env)
                got[name].append(((wall - wall0) * min(a.threads, 2) / calls * 1e9,
                                  (cpu - cpu0) / calls * 1e9))
        print(f"{a.threads} threads x {a.iterations} iterations x 2 calls, {a.runs} rounds; "
              "ns per call over plain")
        for name, v in got.items():
            w = [x[0] for x in v]
            c = [x[1] for x in v]
            print(f"{name:40} wall min {min(w):5.1f} median {statistics.median(w):5.1f} | "
                  f"cpu min {min(c):5.1f} median {statistics.median(c):5.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
