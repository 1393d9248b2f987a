#!/usr/bin/env python3
"""Overhead of instrfn against glibc's gcrt on one workload, measured in the same run.

The workload is tests/fixtures/c/threads.c: T threads, each calling two instrumented
noinline functions N times. It is built three ways from the same source:
  plain    gcc -O2                      (no instrumentation)
  glibc    gcc -O2 -pg, linked with -pg (gcrt1.o: glibc's mcount and gmon.out)
  instrfn  gcc -O2 -pg, linked without -pg, run with LD_PRELOAD=target/release/libinstrfn.so
Each variant runs --runs times per T; the best wall time counts (start-up and exit, including
writing gmon.out, are inside it). The overhead ratio is (t - plain) / (glibc - plain): below 1
instrfn costs less per call than glibc. Calls counted are read back with gprof, so the table
also shows how many calls each runtime lost. Peak RSS is the child's ru_maxrss.

Optional anchor, same workload: --uftrace (uftrace record of the glibc-free -pg binary). XRay
is measured in its own table (--xray, below), with FDR mode initialised explicitly: selected
with XRAY_OPTIONS alone it never starts, so its cost beside the gmon figures said nothing.

--trace adds a second table, trace mode (every call an entry and an exit event), at
--trace-iterations (fewer: each call writes 32 bytes), all in the same run:
  plain    as above
  floor    the -pg objects linked with scripts/bench/floor-mcount.S, an mcount that only reads
           the time stamp counter twice: what any tracer that times calls must at least pay
  floor-ret  the -pg objects linked with scripts/bench/floor-ret.S: an mcount that reads the
           counter, replaces the return address and reads the counter again in the stub it
           returns through: what a tracer that replaces return addresses must at least pay
  instrfn  LD_PRELOAD=libinstrfn.so INSTRFN_MODE=trace; events counted back with
           `instrfn dump --summary`, bytes per event from the events files
  fentry   instrfn as above on gcc -O2 -pg -mfentry code (its return addresses replaced, as
           mcount code's)
  return   instrfn as above on gcc -O2 -pg -mfentry -minstrument-return=call code, linked with
           the __return__ stub (preload/return-stub.s): no return address replaced
  cyg      instrfn as above on gcc -O2 -finstrument-functions code
  ring     instrfn's ring mode (INSTRFN_MODE=ring, exit snapshot on) on the -pg binary; not
           counted (a ring keeps only its newest events)
  uftrace  `uftrace record --no-libcall` of the same binary; calls counted with `uftrace report`
  xray     clang -fxray-instrument with compiler-rt's FDR mode selected and initialised
           explicitly (scripts/bench/xray-fdr.c), XRAY_FDR_OPTIONS=func_duration_threshold_us=0
           and buffers for every record, so that it records every call as instrfn does; calls
           counted with `llvm-xray account`, which (llvm-xray 14) counts only part of some
           FDR logs: runs whose logs have the same size (B/event, the log's bytes per
           function record: 8.0 when every call is in it) were counted 4000000 and 920043
Each of the --runs rounds runs every row once, in that order (best of the rounds counts): a
noisy spell of the machine falls on all rows alike. Ratios: instrfn's ns/call over the floor's
and over uftrace's. "cpu s" is the user + system time
of the whole run (instrfn's collector thread, which commits the chunks, is in instrfn's;
uftrace's recorder and XRay's flush at exit are in theirs). "+RSS" is peak RSS over plain's.
Every timed run starts with the page cache written out (sync), so no row pays for the
writeback of the traces the rows before it left.

"ns/call" is the time one call adds on its thread: (t - plain) * min(T, CPUs) / calls.

--xray also adds an XRay table, the workload at --xray-iterations (default 2M), all in one run;
each row's ns/call is over plain built by the same compiler (gcc -O2 for the -pg rows, clang -O2
for the XRay rows):
  (a) empty     compiler-rt's trampolines with an empty handler: clang -fxray-instrument and
                scripts/bench/xray-empty.c (sets the handler, calls __xray_patch before main);
                checked first in an untimed run whose handler counts every entry
  (b) fdr       XRay FDR recording every call, as in --trace; counted with `llvm-xray account`
  (c) mcount    instrfn's trace mode on the gcc -pg build (LD_PRELOAD); `instrfn dump --summary`
  (d) native    instrfn patching XRay sleds itself: the clang -fxray-instrument binary linked
                without any XRay runtime, run with LD_PRELOAD=libinstrfn.so INSTRFN_MODE=trace;
                the events recorded must be the calls made, else the row fails ("native XRay
                patching recorded N of M calls") and shows no figure
  (e) tramp     instrfn's natively patched sleds with recording off (the trampolines alone):
                INSTRFN_XRAY_STOP=pause INSTRFN_START=off (native_trampolines_only_env)
  (f) sleds     that binary run as it is, sleds unpatched, against clang -O2 without
                -fxray-instrument: what the nops cost
  (g) floor     the -pg build with scripts/bench/floor-mcount.S, as in --trace
Ratios: each row over the floor, over FDR and over compiler-rt's empty handler. A failed row
makes the script exit with status 1 after printing everything else.

--analysis times the commands that read a trace, on one trace of at least 50M events of the
workload (2 threads x --analysis-iterations, default 6.25M, x 2 calls x entry and exit),
recorded by instrfn and by uftrace: `instrfn report` against `uftrace report`, and
`instrfn export --format chrome` against `uftrace dump --chrome`, in events per second.

Usage: scripts/compare.py [--threads 1,2] [--iterations N] [--runs 3] [--uftrace]
                          [--xray [--xray-iterations N]]
                          [--trace [--trace-iterations N]] [--analysis [--analysis-iterations N]]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

LLVM_XRAY = shutil.which("llvm-xray") or "/usr/lib/llvm-14/bin/llvm-xray"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "tests", "fixtures", "c", "threads.c")
PRELOAD = os.path.join(ROOT, "target", "release", "libinstrfn.so")
INSTRFN = os.path.join(ROOT, "target", "release", "instrfn")
FLOOR = os.path.join(ROOT, "scripts", "bench", "floor-mcount.S")
FLOOR_RET = os.path.join(ROOT, "scripts", "bench", "floor-ret.S")
RETURN_STUB = os.path.join(ROOT, "preload", "return-stub.s")
XRAY_FDR = os.path.join(ROOT, "scripts", "bench", "xray-fdr.c")
XRAY_EMPTY = os.path.join(ROOT, "scripts", "bench", "xray-empty.c")
CLANG = ["clang", "-O2", "-Wno-unknown-attributes"]
XRAY_FLAGS = ["-fxray-instrument", "-fxray-instruction-threshold=1"]


def die(msg):
    print(f"compare.py: {msg}", file=sys.stderr)
    sys.exit(1)


def need(tool):
    if shutil.which(tool) is None and not os.access(tool, os.X_OK):
        die(f"{tool} is not installed (scripts/test.sh installs the tools)")


def sh(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        die(f"{' '.join(args)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def timed(args, cwd, env=None, cpu=None):
    """Runs args under GNU time; returns (wall seconds, peak RSS in KiB), and appends the
    user + system seconds to the list cpu if given.

    The RSS comes from GNU time (a small C parent), not from this Python process: a child
    forked from Python starts with Python's RSS as its high-water mark.

    Dirty page cache left by the runs before (the traces of other rows, hundreds of MB) is
    written out first, so that no run pays for the writeback of another's on its CPUs."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    rss_file = os.path.join(cwd, ".rss")
    os.sync()
    start = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%U %S %M", "-o", rss_file] + args, cwd=cwd,
                       env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        die(f"{' '.join(args)} failed: {r.stderr}")
    with open(rss_file) as f:
        fields = f.read().split()
    rss = int(fields[-1])
    if cpu is not None:
        cpu.append(float(fields[-3]) + float(fields[-2]))
    return wall, rss


def profile(d):
    """The one profile in run directory d: gmon.out, or gmon.out.<pid> when the workload ran
    under GNU time, which inherited LD_PRELOAD and so is the root of the process tree."""
    names = sorted(n for n in os.listdir(d) if n.startswith("gmon.out"))
    if len(names) != 1:
        die(f"expected one profile in {d}, found {names}")
    return os.path.join(d, names[0])


def gprof_calls(exe, gmon, names):
    out = sh(["gprof", "-b", "-p", exe, gmon])
    calls = {}
    for line in out.splitlines():
        t = line.split()
        if len(t) >= 7 and t[-1] in names:
            calls[t[-1]] = int(t[3])
    return sum(calls.get(n, 0) for n in names)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--iterations", type=int, default=20_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--uftrace", action="store_true")
    ap.add_argument("--xray", action="store_true")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--trace-iterations", type=int, default=2_000_000)
    ap.add_argument("--xray-iterations", type=int, default=2_000_000)
    ap.add_argument("--analysis", action="store_true")
    ap.add_argument("--analysis-iterations", type=int, default=6_250_000)
    a = ap.parse_args()
    for tool in ["gcc", "gprof", "/usr/bin/time"]:
        need(tool)
    if not os.path.isfile(PRELOAD):
        die(f"{PRELOAD} is missing: run `cargo build --release` first")

    work = tempfile.mkdtemp(prefix="instrfn-compare-")
    exe = {n: os.path.join(work, n) for n in ["plain", "glibc", "instrfn"]}
    sh(["gcc", "-O2", SOURCE, "-o", exe["plain"], "-lpthread"])
    sh(["gcc", "-O2", "-pg", "-c", SOURCE, "-o", os.path.join(work, "threads.o")])
    sh(["gcc", "-pg", os.path.join(work, "threads.o"), "-o", exe["glibc"], "-lpthread"])
    sh(["gcc", os.path.join(work, "threads.o"), "-o", exe["instrfn"], "-lpthread"])
    if a.xray or a.trace:
        need("clang")
        exe["xray"] = os.path.join(work, "xray")
        sh(["clang", "-O2", "-Wno-unknown-attributes", "-fxray-instrument",
            "-fxray-instruction-threshold=1", SOURCE, "-o", exe["xray"], "-lpthread"])
    if a.uftrace or a.trace or a.analysis:
        need("uftrace")
    if a.trace or a.xray:
        need(INSTRFN)
        need(LLVM_XRAY)
        exe["floor"] = os.path.join(work, "floor")
        sh(["gcc", os.path.join(work, "threads.o"), FLOOR, "-o", exe["floor"], "-lpthread"])
        exe["floor-ret"] = os.path.join(work, "floor-ret")
        sh(["gcc", os.path.join(work, "threads.o"), FLOOR_RET, "-o", exe["floor-ret"],
            "-lpthread"])
    if a.trace:
        exe["cyg"] = os.path.join(work, "cyg")
        sh(["gcc", "-O2", "-finstrument-functions", SOURCE, "-o", exe["cyg"], "-lpthread"])
        exe["ring"] = exe["instrfn"]
        exe["fentry"] = os.path.join(work, "fentry")
        sh(["gcc", "-O2", "-pg", "-mfentry", SOURCE, "-o", exe["fentry"], "-lpthread"])
        stub = os.path.join(work, "libinstrfn-return-stub.so")
        sh(["gcc", "-shared", "-nostdlib", "-o", stub, RETURN_STUB])
        exe["return"] = os.path.join(work, "return")
        sh(["gcc", "-O2", "-pg", "-mfentry", "-minstrument-return=call", SOURCE, stub,
            f"-Wl,-rpath,{work}", "-o", exe["return"], "-lpthread"])
        exe["xray-fdr"] = os.path.join(work, "xray-fdr")
        sh(["clang", "-O2", "-Wno-unknown-attributes", "-fxray-instrument",
            "-fxray-instruction-threshold=1", SOURCE, XRAY_FDR, "-o", exe["xray-fdr"],
            "-lpthread"])
    if a.xray:
        build_xray(work, exe)

    print(f"workload: T threads x {a.iterations} iterations x 2 instrumented calls; "
          f"best of {a.runs}; {os.cpu_count()} CPUs")
    print(f"{'T':>2} {'plain s':>8} {'glibc s':>8} {'instrfn s':>9} {'ratio':>6} "
          f"{'glibc calls':>12} {'instrfn calls':>14} {'expected':>10} {'+RSS KiB':>9}"
          + f" {'glibc ns/call':>13} {'instrfn ns/call':>15}"
          + ("  anchors ns/call" if (a.uftrace or a.xray) else ""))
    for t in [int(x) for x in a.threads.split(",")]:
        args = [str(t), str(a.iterations)]
        calls = 2 * t * a.iterations
        per_call = lambda w: 1e9 * (w - best["plain"]) * min(t, os.cpu_count()) / calls
        best = {}
        rss = {}
        for _ in range(a.runs):
            for name in ["plain", "glibc", "instrfn"]:
                d = os.path.join(work, f"run-{name}")
                os.makedirs(d, exist_ok=True)
                env = {"LD_PRELOAD": PRELOAD} if name == "instrfn" else {}
                for old in os.listdir(d):
                    if old.startswith("gmon.out"):
                        os.remove(os.path.join(d, old))
                w, r = timed([exe[name]] + args, d, env)
                best[name] = min(best.get(name, w), w)
                rss[name] = max(rss.get(name, r), r)
        counted = {n: gprof_calls(exe[n], profile(os.path.join(work, f"run-{n}")),
                                  ["work_a", "work_b"]) for n in ["glibc", "instrfn"]}
        ratio = (best["instrfn"] - best["plain"]) / (best["glibc"] - best["plain"])
        extra = ""
        if a.uftrace:
            d = os.path.join(work, "run-uftrace")
            os.makedirs(d, exist_ok=True)
            w = min(timed(["uftrace", "record", "--no-libcall", "-d", os.path.join(d, "data"),
                           exe["instrfn"]] + args, d)[0] for _ in range(a.runs))
            extra += f"  uftrace {per_call(w):.1f}"
        print(f"{t:>2} {best['plain']:>8.3f} {best['glibc']:>8.3f} {best['instrfn']:>9.3f} "
              f"{ratio:>6.2f} {counted['glibc']:>12} {counted['instrfn']:>14} {calls:>10} "
              f"{rss['instrfn'] - rss['plain']:>9} {per_call(best['glibc']):>13.1f} "
              f"{per_call(best['instrfn']):>15.1f}{extra}")
        sys.stdout.flush()
    if a.trace:
        trace_table(a, work, exe)
    failed = []
    if a.xray:
        failed = xray_table(a, work, exe)
    if a.analysis:
        need(INSTRFN)
        analysis_table(a, work, exe)
    shutil.rmtree(work)
    if failed:
        die("failed rows:\n  " + "\n  ".join(failed))


def best_of(runs, args, cwd, stdout=None):
    """Best wall time of `runs` runs of args (stdout to the file named, else discarded)."""
    best = None
    for _ in range(runs):
        start = time.perf_counter()
        with open(stdout or os.devnull, "w") as out:
            r = subprocess.run(args, cwd=cwd, stdout=out, stderr=subprocess.PIPE, text=True)
        w = time.perf_counter() - start
        if r.returncode != 0:
            die(f"{' '.join(args)} failed: {r.stderr}")
        best = w if best is None else min(best, w)
    return best


def analysis_table(a, work, exe):
    n = a.analysis_iterations
    d = fresh(os.path.join(work, "analysis"))
    args = ["2", str(n)]
    trace = os.path.join(d, "trace")
    sh([INSTRFN, "record", "-o", trace, "--", exe["instrfn"]] + args, cwd=d)
    line = sh([INSTRFN, "dump", "--summary", trace])
    events = int(re.search(r"(\d+) events", line).group(1))
    data = os.path.join(d, "uftrace.data")
    sh(["uftrace", "record", "--no-libcall", "-d", data, exe["instrfn"]] + args, cwd=d)
    print()
    print(f"analysis: one trace of {events} events (2 threads x {n} iterations); best of "
          f"{a.runs}")
    print(f"{'':>28} {'s':>7} {'Mevents/s':>10}")
    rows = [
        ("instrfn report", [INSTRFN, "report", trace], None),
        ("uftrace report", ["uftrace", "report", "-d", data, "--no-pager"], None),
        ("instrfn export --chrome", [INSTRFN, "export", trace, "--format", "chrome", "-o",
                                     os.path.join(d, "instrfn.json")], None),
        ("uftrace dump --chrome", ["uftrace", "dump", "-d", data, "--chrome", "--no-pager"],
         os.path.join(d, "uftrace.json")),
    ]
    t = {}
    for name, cmd, out in rows:
        t[name] = best_of(a.runs, cmd, d, out)
        print(f"{name:>28} {t[name]:>7.2f} {events / t[name] / 1e6:>10.1f}")
    sizes = {k: os.path.getsize(os.path.join(d, f)) for k, f in
             [("instrfn", "instrfn.json"), ("uftrace", "uftrace.json")]}
    print(f"ratios: report {t['uftrace report'] / t['instrfn report']:.1f}x uftrace's rate, "
          f"chrome export {t['uftrace dump --chrome'] / t['instrfn export --chrome']:.1f}x; "
          f"JSON {sizes['instrfn'] / 1e9:.2f} GB (instrfn), {sizes['uftrace'] / 1e9:.2f} GB "
          f"(uftrace)")
    sys.stdout.flush()


def fresh(d):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def trace_table(a, work, exe):
    n = a.trace_iterations
    print()
    print(f"trace mode: T threads x {n} iterations x 2 instrumented calls; best of {a.runs}")
    print(f"{'T':>2} {'':>8} {'ns/call':>8} {'calls':>10} {'expected':>10} {'B/event':>8} "
          f"{'cpu s':>6} {'+RSS KiB':>9}")
    for t in [int(x) for x in a.threads.split(",")]:
        args = [str(t), str(n)]
        calls = 2 * t * n
        names = ["plain", "floor", "floor-ret", "instrfn", "fentry", "return", "cyg", "ring",
                 "uftrace", "xray"]
        best, rss, cpu, last = {}, {}, {}, {}
        # Rounds interleave the rows, as in the XRay table: a noisy minute of this shared
        # machine then falls on every row alike, not on one row's five runs.
        for _ in range(a.runs):
            for name in names:
                d = fresh(os.path.join(work, f"trace-{name}"))
                if name in ("plain", "floor", "floor-ret"):
                    cmd, env = [exe[name]] + args, {}
                elif name in ("instrfn", "fentry", "return", "cyg", "ring"):
                    cmd = [exe[name]] + args
                    env = {"LD_PRELOAD": PRELOAD,
                           "INSTRFN_MODE": "ring" if name == "ring" else "trace",
                           "INSTRFN_OUTPUT": os.path.join(d, "trace")}
                elif name == "uftrace":
                    cmd = ["uftrace", "record", "--no-libcall", "-d", os.path.join(d, "data"),
                           exe["instrfn"]] + args
                    env = {}
                else:
                    cmd = [exe["xray-fdr"]] + args
                    # Buffers for every record (FDR keeps only the newest buffer_max buffers).
                    env = {"XRAY_OPTIONS": "verbosity=0",
                           "XRAY_FDR_OPTIONS": "func_duration_threshold_us=0 "
                           f"buffer_size=1048576 buffer_max={max(64, 48 * calls >> 20)}"}
                c = []
                w, r = timed(cmd, d, env, c)
                if name not in best or w < best[name]:
                    best[name], cpu[name] = w, c
                rss[name] = max(rss.get(name, 0), r)
                last[name] = d
        rows = {}
        for name in names:
            # Counted from the last run's output.
            d, counted, per_event = last[name], None, None
            if name in ("instrfn", "fentry", "return", "cyg"):
                counted, per_event = instrfn_counted(os.path.join(d, "trace"), t)
            elif name == "uftrace":
                counted = uftrace_counted(os.path.join(d, "data"))
            elif name == "xray":
                counted = xray_counted(exe["xray-fdr"], d)
                per_event = xray_log_bytes(d) / (2 * calls)
            rows[name] = (best[name], rss[name], cpu[name][0], counted, per_event)
        plain = rows["plain"][0]
        ns = {k: 1e9 * (v[0] - plain) * min(t, os.cpu_count()) / calls for k, v in rows.items()}
        for name, (w, rss, cpu, counted, per_event) in rows.items():
            print(f"{t:>2} {name:>8} {ns[name]:>8.1f} "
                  f"{'' if counted is None else counted:>10} "
                  f"{'' if counted is None else calls:>10} "
                  f"{'' if per_event is None else format(per_event, '.1f'):>8} "
                  f"{cpu:>6.2f} {rss - rows['plain'][1]:>9}")
        print(f"{t:>2} ratios: instrfn/floor {ns['instrfn'] / ns['floor']:.2f}, "
              f"instrfn/floor-ret {ns['instrfn'] / ns['floor-ret']:.2f}, "
              f"fentry/floor-ret {ns['fentry'] / ns['floor-ret']:.2f}, "
              f"cyg/floor {ns['cyg'] / ns['floor']:.2f}, "
              f"ring/floor-ret {ns['ring'] / ns['floor-ret']:.2f}, "
              f"instrfn/uftrace {ns['instrfn'] / ns['uftrace']:.2f}, "
              f"instrfn/xray-fdr {ns['instrfn'] / ns['xray']:.2f}, "
              f"return/floor {ns['return'] / ns['floor']:.2f}, "
              f"return/fentry {ns['return'] / ns['fentry']:.2f}")
        sys.stdout.flush()


def build_xray(work, exe):
    """The XRay table's builds of the workload (see the module's doc)."""
    exe["clang-plain"] = os.path.join(work, "clang-plain")
    sh(CLANG + [SOURCE, "-o", exe["clang-plain"], "-lpthread"])
    exe["xray-empty"] = os.path.join(work, "xray-empty")
    sh(CLANG + XRAY_FLAGS + [SOURCE, XRAY_EMPTY, "-o", exe["xray-empty"], "-lpthread"])
    # Sleds and no runtime: compiled with -fxray-instrument, linked without it (clang links
    # compiler-rt's XRay runtime only when the link has the flag), like rustc's binaries.
    obj = os.path.join(work, "threads-xray.o")
    sh(CLANG + XRAY_FLAGS + ["-c", SOURCE, "-o", obj])
    exe["xray-sleds"] = os.path.join(work, "xray-sleds")
    sh(["clang", obj, "-o", exe["xray-sleds"], "-lpthread"])
    if "xray_instr_map" not in sh(["readelf", "-S", "-W", exe["xray-sleds"]]):
        die(f"{exe['xray-sleds']} has no xray_instr_map")
    if "__xray_" in sh(["nm", exe["xray-sleds"]]):
        die(f"{exe['xray-sleds']} has an XRay runtime linked in")


class RowFailed(Exception):
    """A row that cannot give a true figure (the message says why)."""


def native_trampolines_only_env():
    """The environment that makes instrfn patch XRay sleds to its trampolines with recording
    off, for row (e): INSTRFN_XRAY_STOP=pause keeps the sleds patched while recording is off,
    and INSTRFN_START=off never starts it (README, "XRay sleds, no compiler-rt")."""
    return {"INSTRFN_XRAY_STOP": "pause", "INSTRFN_START": "off"}


def trace_events(trace):
    """Function events in an instrfn trace directory (0 when nothing was written)."""
    if not os.path.isdir(trace) or not any(f.endswith(".meta") for f in os.listdir(trace)):
        return 0
    line = sh([INSTRFN, "dump", "--summary", trace])
    m = re.search(r"(\d+) events, .* (\d+) lost", line)
    if not m:
        die(f"unexpected summary: {line}")
    return int(m.group(1))


def xray_table(a, work, exe):
    """The XRay table (see the module's doc); returns the failed rows' messages."""
    n = a.xray_iterations
    print()
    print(f"xray: T threads x {n} iterations x 2 instrumented calls; best of {a.runs}; ns/call "
          "over plain of the same compiler")
    print(f"{'T':>2} {'row':<44} {'ns/call':>8} {'calls':>10} {'expected':>10} {'/floor':>7} "
          f"{'/fdr':>6} {'/empty':>7}")
    failed = []
    for t in [int(x) for x in a.threads.split(",")]:
        args = [str(t), str(n)]
        calls = 2 * t * n
        fdr_env = {"XRAY_OPTIONS": "verbosity=0",
                   "XRAY_FDR_OPTIONS": "func_duration_threshold_us=0 "
                   f"buffer_size=1048576 buffer_max={max(64, 48 * calls >> 20)}"}

        def instrfn_env(d):
            return {"LD_PRELOAD": PRELOAD, "INSTRFN_MODE": "trace",
                    "INSTRFN_OUTPUT": os.path.join(d, "trace")}

        def tramp_env(d):
            env = instrfn_env(d)
            env.update(native_trampolines_only_env())
            return env

        # name, label, binary, environment (given the run directory), baseline
        rows = [
            ("gcc-plain", "plain (gcc -O2)", "plain", lambda d: {}, None),
            ("clang-plain", "plain (clang -O2)", "clang-plain", lambda d: {}, None),
            ("floor", "(g) floor: mcount reading the TSC twice", "floor", lambda d: {},
             "gcc-plain"),
            ("empty", "(a) compiler-rt trampolines, empty handler", "xray-empty",
             lambda d: {}, "clang-plain"),
            ("fdr", "(b) XRay FDR, every call recorded", "xray-fdr", lambda d: fdr_env,
             "clang-plain"),
            ("mcount", "(c) instrfn trace mode, -pg (mcount)", "instrfn", instrfn_env,
             "gcc-plain"),
            ("native", "(d) instrfn native XRay patching, trace", "xray-sleds", instrfn_env,
             "clang-plain"),
            ("tramp", "(e) instrfn native patching, recording off", "xray-sleds", tramp_env,
             "clang-plain"),
            ("sleds", "(f) unpatched sleds (vs no -fxray-instrument)", "xray-sleds",
             lambda d: {}, "clang-plain"),
        ]
        # Correctness before timing: every call reaches compiler-rt's handler.
        d = fresh(os.path.join(work, "xray-runs", "empty-count"))
        r = subprocess.run([exe["xray-empty"]] + args, cwd=d, env=dict(os.environ,
                           XRAY_EMPTY_COUNT="1"), capture_output=True, text=True)
        m = re.search(r"xray-empty: (\d+) entries", r.stderr)
        if r.returncode != 0 or not m:
            die(f"{exe['xray-empty']} failed: {r.stderr}")
        counted = {"empty": int(m.group(1)) - 1 - t}  # main and the T workers' own entries
        best, error = {}, {}
        for run in range(a.runs):
            for name, _, binary, env_of, _ in rows:
                if name in error:
                    continue
                d = fresh(os.path.join(work, "xray-runs", name))
                try:
                    env = env_of(d)
                except RowFailed as e:
                    error[name] = str(e)
                    continue
                w, _ = timed([exe[binary]] + args, d, env)
                best[name] = min(best.get(name, w), w)
                # Counted from the last run's output (llvm-xray reads a large FDR log slowly).
                if run < a.runs - 1:
                    continue
                if name == "fdr":
                    counted[name] = xray_counted(exe["xray-fdr"], d)
                elif name in ("mcount", "native", "tramp"):
                    events = trace_events(os.path.join(d, "trace"))
                    # An entry and an exit per call; main's and the workers' own not counted.
                    counted[name] = max(0, events // 2 - 1 - t)
        native = counted.get("native")
        if native is not None and native != calls:
            error["native"] = f"native XRay patching recorded {native} of {calls} calls"
        ns = {}
        for name, _, _, _, base in rows:
            if name in best and base is not None and name not in error:
                ns[name] = 1e9 * (best[name] - best[base]) * min(t, os.cpu_count()) / calls

        def ratio(name, over):
            if name not in ns or over not in ns or ns[over] <= 0:
                return ""
            return f"{ns[name] / ns[over]:.2f}"

        for name, label, _, _, base in rows:
            if name in error:
                print(f"{t:>2} {label:<44} FAILED: {error[name]}")
                failed.append(f"T={t} {label}: {error[name]}")
                continue
            if base is None:
                print(f"{t:>2} {label:<44} {best[name]:>7.3f}s")
                continue
            c = counted.get(name)
            print(f"{t:>2} {label:<44} {ns[name]:>8.1f} {'' if c is None else c:>10} "
                  f"{'' if c is None else calls:>10} {ratio(name, 'floor'):>7} "
                  f"{ratio(name, 'fdr'):>6} {ratio(name, 'empty'):>7}")
        sys.stdout.flush()
    return failed


def instrfn_counted(trace, t):
    """Calls of work_a and work_b recorded, from the summary line's events (an entry and an exit
    per call, main and the T workers' own included), and bytes per event."""
    line = sh([INSTRFN, "dump", "--summary", trace])
    m = re.search(r"(\d+) events, .* (\d+) lost", line)
    if not m:
        die(f"unexpected summary: {line}")
    events = int(m.group(1))
    size = sum(os.path.getsize(os.path.join(trace, f)) for f in os.listdir(trace)
               if f.endswith(".events") or f.endswith(".stage"))
    return events // 2 - 1 - t, size / events


def uftrace_counted(data):
    out = sh(["uftrace", "report", "-d", data, "-f", "call", "--no-pager"])
    total = 0
    for line in out.splitlines():
        f = line.split()
        if len(f) == 2 and f[1] in ("work_a", "work_b"):
            total += int(f[0])
    return total


def xray_log_bytes(d):
    """Bytes of the one XRay log in run directory d."""
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
               if f.startswith("xray-log."))


def xray_counted(binary, d):
    logs = [f for f in os.listdir(d) if f.startswith("xray-log.")]
    if len(logs) != 1:
        die(f"expected one XRay log in {d}, found {logs}")
    # -k: go on past the first record, an exit without its entry (the log begins inside a
    # call); llvm-xray then says so on stderr for each thread.
    r = subprocess.run([LLVM_XRAY, "account", "-k", "-format=csv", f"-instr_map={binary}",
                        os.path.join(d, logs[0])], capture_output=True, text=True)
    if r.returncode != 0:
        die(f"llvm-xray account failed: {r.stderr[-500:]}")
    out = r.stdout
    total = 0
    for line in out.splitlines():
        f = line.split(",")
        if len(f) >= 10 and f[-1].strip('"') in ("work_a", "work_b"):
            total += int(f[1])
    return total


if __name__ == "__main__":
    main()
