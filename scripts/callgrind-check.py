#!/usr/bin/env python3
"""Checks instrfn's per-function call counts against valgrind's callgrind, in the same run.

    scripts/callgrind-check.py [--instrfn PATH] [--lib PATH] [--keep DIR] [--env K=V ...]
                               [--sort-output] [--separate] -- BIN ARGS...

1. runs BIN plainly and keeps its stdout;
2. runs it under callgrind (`--smc-check=all`, so callgrind follows code that instrfn patches
   while it runs) with instrfn preloaded in trace mode (LD_PRELOAD, INSTRFN_MODE=trace,
   INSTRFN_OUTPUT): one run gives both counts;
3. compares the program's stdout with the plain run's, and for every function of BIN itself
   the number of calls callgrind counted with the number of entries in instrfn's trace
   (`instrfn report --format json --no-demangle`). Functions instrfn cannot see (no sled, no
   mcount call: inlined or not instrumented) are listed apart, as are functions counted
   differently.

Meant for traces whose exits replace no return address (XRay sleds, -finstrument-functions):
mcount/fentry trace mode's exit trampoline returns into callers with a jump, which callgrind's
call tracking takes for calls of their own. For those, `--separate` runs callgrind on the
program without instrfn (the mcount calls then go to glibc's: they count nothing, or gcrt's
arcs where the program links gcrt, as rustc's builds do, never calls of BIN's functions) and
the traced run without valgrind: the counts of a program that makes the
same calls in every run (whatever its threads' interleaving) must then agree too; a function
whose calls depend on the run (a HashMap's random order) shows up as differing.

Prints one summary line and exits 0 when every function instrfn recorded has callgrind's count
and the output is unchanged, 1 otherwise, 2 on a setup problem.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile


def die(msg):
    print(f"callgrind-check: {msg}", file=sys.stderr)
    sys.exit(2)


def callgrind_calls(path, binary):
    """Calls per function name (raw, as in the symbol table) of the object `binary`, summed over
    every caller, from a callgrind.out file."""
    names = {"fn": {}, "cfn": {}, "ob": {}, "cob": {}}
    # cfn=/cob= share the compression tables of fn=/ob=.
    table = {"fn": "fn", "cfn": "fn", "ob": "ob", "cob": "ob"}
    cur_ob = None
    cfn = cob = None
    counts = {}
    real = os.path.realpath(binary)

    def name_of(kind, value):
        t = names[table[kind]]
        if value.startswith("("):
            close = value.index(")")
            ident = value[1:close]
            rest = value[close + 1:].strip()
            if rest:
                t[ident] = rest
            return t.get(ident, f"?{ident}")
        return value

    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("ob="):
                cur_ob = name_of("ob", line[3:])
            elif line.startswith("fn="):
                name_of("fn", line[3:])
                cob = None
            elif line.startswith("cob="):
                cob = name_of("cob", line[4:])
            elif line.startswith("cfn="):
                cfn = name_of("cfn", line[4:])
            elif line.startswith("calls="):
                n = int(line[6:].split()[0])
                obj = cob if cob is not None else cur_ob
                if obj and os.path.realpath(obj) == real:
                    counts[cfn] = counts.get(cfn, 0) + n
                cob = None
    return counts


def symbol_addresses(binary):
    """Raw symbol name -> address, from the binary's symbol table (nm)."""
    out = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True)
    addr = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tTwWiI":
            addr.setdefault(parts[2], parts[0])
    return addr


def by_address(counts, addr):
    """Counts keyed by a representative name per address: the smallest of all the symbol
    table's names at that address (both sides pick the same), or the name itself."""
    first = {}
    for n, a in addr.items():
        if a not in first or n < first[a]:
            first[a] = n
    out = {}
    for n, c in counts.items():
        key = first.get(addr.get(n), n)
        out[key] = out.get(key, 0) + c
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instrfn", default="target/release/instrfn", help="the instrfn command")
    ap.add_argument("--lib", default="target/release/libinstrfn.so", help="the preload library")
    ap.add_argument("--keep", help="keep the trace and callgrind output in this directory")
    ap.add_argument("--env", action="append", default=[], help="K=V for the traced run")
    ap.add_argument("--sort-output", action="store_true",
                    help="compare the outputs' lines sorted (a program whose threads print in any order)")
    ap.add_argument("--separate", action="store_true",
                    help="callgrind and instrfn in two runs (mcount/fentry traces)")
    ap.add_argument("--show", type=int, default=10, help="list this many mismatches")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        die("no program given (… -- BIN ARGS)")
    for tool in ("valgrind", "callgrind_annotate"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            die(f"{tool} is not installed (Debian package valgrind)")
    for p in (a.instrfn, a.lib):
        if not os.path.exists(p):
            die(f"{p} does not exist (cargo build --release)")
    if not shutil.which(cmd[0]):
        die(f"{cmd[0]}: no such program")
    work = a.keep or tempfile.mkdtemp(prefix="callgrind-check-")
    os.makedirs(work, exist_ok=True)
    trace = os.path.join(work, "trace")
    out = os.path.join(work, "callgrind.out")

    for p in (trace, out):
        subprocess.run(["rm", "-rf", p])
    plain = subprocess.run(cmd, capture_output=True)
    env = dict(os.environ)
    env.update(LD_PRELOAD=os.path.abspath(a.lib), INSTRFN_MODE="trace", INSTRFN_OUTPUT=trace)
    for kv in a.env:
        k, _, v = kv.partition("=")
        env[k] = v
    callgrind = ["valgrind", "--tool=callgrind", "--smc-check=all", "--demangle=no",
                 "--separate-recs=1", f"--callgrind-out-file={out}", "--"]
    if a.separate:
        # A program linked with gcrt (rustc's -Zinstrument-mcount links it) runs glibc's
        # profiling timer; under valgrind a SIGPROF can come after gcrt's exit code put the
        # handler back to the default, which kills the program (1 run in 3 here). Ignored at
        # exec, it is what gcrt restores.
        def no_sigprof():
            signal.signal(signal.SIGPROF, signal.SIG_IGN)
        runs = [("callgrind", subprocess.run(callgrind + cmd, capture_output=True,
                                             preexec_fn=no_sigprof)),
                ("instrfn", subprocess.run(cmd, capture_output=True, env=env))]
    else:
        runs = [("instrfn+callgrind", subprocess.run(callgrind + cmd, capture_output=True, env=env))]

    def lines(b):
        return sorted(b.splitlines()) if a.sort_output else b
    for what, run in runs:
        if lines(run.stdout) != lines(plain.stdout) or run.returncode != plain.returncode:
            print(f"callgrind-check: output changed under {what} "
                  f"(status {plain.returncode} -> {run.returncode})")
            sys.stderr.write(run.stderr.decode(errors="replace")[-2000:])
            sys.exit(1)
    if not os.path.exists(out):
        die("callgrind wrote no output")
    rep = subprocess.run([a.instrfn, "report", "--format", "json", "--no-demangle",
                          "--limit", "0", trace], capture_output=True)
    if rep.returncode:
        die(f"instrfn report failed: {rep.stderr.decode(errors='replace').strip()}")
    rows = json.loads(rep.stdout)["functions"]
    ours = {}
    for r in rows:
        ours[r["name"]] = ours.get(r["name"], 0) + r["calls"]
    theirs = callgrind_calls(out, cmd[0])
    # Names that share an address (identical code folded, aliases) are one function: each side
    # may have picked another of them. Counted per address where the symbol table knows it.
    addr = symbol_addresses(cmd[0])
    ours = by_address(ours, addr)
    theirs = by_address(theirs, addr)
    same = [n for n in ours if theirs.get(n) == ours[n]]
    differ = [n for n in ours if n in theirs and theirs[n] != ours[n]]
    unknown = [n for n in ours if n not in theirs]
    unseen = [n for n in theirs if n not in ours]
    total_ours = sum(ours.values())
    print(f"callgrind-check: {len(same)} of {len(ours)} functions instrfn recorded have "
          f"callgrind's exact count ({total_ours} calls); {len(differ)} differ, "
          f"{len(unknown)} not named by callgrind, {len(unseen)} called functions of "
          f"{os.path.basename(cmd[0])} without events (no sled or mcount call: precompiled, "
          f"not instrumented); output unchanged")
    for n in sorted(differ, key=lambda n: -abs(ours[n] - theirs[n]))[:a.show]:
        print(f"  differ: {n}: instrfn {ours[n]}, callgrind {theirs[n]}")
    for n in unknown[:a.show]:
        print(f"  not in callgrind: {n}: instrfn {ours[n]}")
    if not a.keep:
        subprocess.run(["rm", "-rf", work])
    sys.exit(0 if not differ and not unknown else 1)


if __name__ == "__main__":
    main()
