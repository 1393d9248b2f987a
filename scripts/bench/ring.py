#!/usr/bin/env python3
"""Ring mode (the flight recorder, docs/flight-recorder.md): the figures of its sizing,
writeback and snapshot sections.

usage: scripts/bench/ring.py sizing    [--runs 5] [--iterations 20000000] [--dir /tmp]
       scripts/bench/ring.py writeback [--seconds 45] [--ring 4M] [--dir /tmp --dir /dev/shm]
       scripts/bench/ring.py snapshot  [--threads 1,2,4,8] [--dir /tmp --dir /dev/shm]
       scripts/bench/ring.py outside   [--threads 4] [--runs 5] [--dir /tmp]

Needs `cargo build --release` first (target/release/libinstrfn.so and instrfn) and gcc.
Builds tests/fixtures/c/threads.c plain (gcc -O2) and with -pg (linked without -pg,
preloaded), as scripts/compare.py does.

sizing     One thread, best of --runs wall times, rounds interleaved, each run after a `sync`
           with its directory removed: plain, floor (scripts/bench/floor-mcount.S, an mcount
           that only reads the counter twice), INSTRFN_MODE=ring, INSTRFN_MODE=trace.
           ns/call = (t - plain) / calls, of wall time and of user + system time.
           Trace mode's events are counted back first. Then one more ring run's exit
           snapshot, which must hold a whole ring: how many events the worker's 4 MiB ring
           held, over how many ms, so its bytes per event and events per second.
writeback  One thread in ring mode (rings of --ring) for about --seconds, in each --dir.
           At least 30 s: the kernel writes a dirty page back after
           vm.dirty_expire_centisecs (30 s by default), and the next store into it takes a
           page fault. Against a run of 20M iterations (about 1 s) in the same place: wall ns
           per call over plain, and minor page faults (getrusage).
snapshot   scripts/bench/ring-snapshot.c: T threads fill their rings for 300 ms, then main
           (not instrumented) calls instrfn_snapshot() 5 times, with the threads waiting
           (idle) or still calling (busy). Prints the min and median wall time of a
           snapshot, and the chunks dropped (rewritten during their copy) per snapshot.
outside    `instrfn snapshot DIR` of a running program: the threads workload at --threads
           (default 4 here) in ring mode (4 MiB rings), its rings full; the wall time of each
           of 10 snapshots (the command's whole run), min and median. Then the cost to the
           running threads of 10 snapshots a second: the workload at 1 and 2 threads, best of
           --runs, with and without a loop that runs `instrfn snapshot` every 100 ms, or
           sends SIGUSR2 (INSTRFN_SNAPSHOT_SIGNAL: the program snapshots itself) every 100 ms;
           rounds interleaved.
The machine and kernel settings go first in the output.
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "tests", "fixtures", "c", "threads.c")
FLOOR = os.path.join(ROOT, "scripts", "bench", "floor-mcount.S")
SNAP_SOURCE = os.path.join(ROOT, "scripts", "bench", "ring-snapshot.c")
PRELOAD = os.path.join(ROOT, "target", "release", "libinstrfn.so")
INSTRFN = os.path.join(ROOT, "target", "release", "instrfn")


def die(msg):
    print(f"ring.py: {msg}", file=sys.stderr)
    sys.exit(2)


def sh(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        die(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


def header():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    vm = {k: open(f"/proc/sys/vm/{k}").read().strip()
          for k in ("dirty_expire_centisecs", "dirty_writeback_centisecs")}
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {model}, {os.cpu_count()} CPUs, "
          f"kernel {os.uname().release}, load {os.getloadavg()[0]:.1f}, "
          f"vm.dirty_expire_centisecs {vm['dirty_expire_centisecs']}, "
          f"vm.dirty_writeback_centisecs {vm['dirty_writeback_centisecs']}")


def fs_type(path):
    return sh(["df", "--output=fstype", path]).split()[-1]


def build(work):
    exe = {n: os.path.join(work, n) for n in ("plain", "pg", "floor", "snap")}
    obj = os.path.join(work, "threads.o")
    w, m = os.path.join(work, "w.o"), os.path.join(work, "m.o")
    for cmd in (
        ["gcc", "-O2", SOURCE, "-o", exe["plain"], "-lpthread"],
        ["gcc", "-O2", "-pg", "-c", SOURCE, "-o", obj],
        ["gcc", obj, "-o", exe["pg"], "-lpthread"],
        ["gcc", obj, FLOOR, "-o", exe["floor"], "-lpthread"],
        ["gcc", "-O2", "-pg", "-DWORKERS", "-c", SNAP_SOURCE, "-o", w],
        ["gcc", "-O2", "-c", SNAP_SOURCE, "-o", m],
        ["gcc", w, m, "-o", exe["snap"], "-lpthread"],
    ):
        sh(cmd)
    return exe


def run(args, out, env):
    """Runs args with `env` (INSTRFN_OUTPUT=out), after a sync, out removed first. Returns
    (wall s, rusage, stdout)."""
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    e = dict(os.environ, INSTRFN_OUTPUT=out, **env)
    t = time.perf_counter()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, env=e, text=True)
    stdout = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        die(f"{' '.join(args)} with {env}: exit status {status}")
    return wall, ru, stdout


def dump_summary(d):
    r = subprocess.run([INSTRFN, "dump", "--summary", d], capture_output=True, text=True)
    m = re.search(r"(\d+) events", r.stdout + r.stderr)
    if not m:
        die(f"instrfn dump --summary {d}: {r.stdout}{r.stderr}")
    return int(m.group(1))


def meta_lines(d, word):
    out = []
    for n in os.listdir(d):
        if n.endswith(".meta"):
            with open(os.path.join(d, n)) as f:
                out += [l.split()[1:] for l in f if l.startswith(word + " ")]
    return out


def ring_windows(snapshot):
    """Per thread slot of a snapshot: (events, first ns, last ns), from `instrfn dump`."""
    slots, cur = {}, None
    p = subprocess.Popen([INSTRFN, "dump", snapshot], stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        m = re.match(r"\s+thread slot (\d+):", line)
        if m:
            cur = int(m.group(1))
            slots[cur] = [0, None, None]
            continue
        f = line.split()
        if cur is not None and len(f) >= 3 and f[0].isdigit():
            s = slots[cur]
            s[0] += 1
            ns = int(f[0])
            s[1] = ns if s[1] is None else s[1]
            s[2] = ns
    p.wait()
    return slots


def sizing(a, exe, work):
    out = os.path.join(a.dir[0], f"instrfn-ring-sizing-{os.getpid()}")
    n = a.iterations
    calls = 2 * n
    rows = [("plain", exe["plain"], {}),
            ("floor", exe["floor"], {}),
            ("ring", exe["pg"], {"LD_PRELOAD": PRELOAD, "INSTRFN_MODE": "ring"}),
            ("trace", exe["pg"], {"LD_PRELOAD": PRELOAD, "INSTRFN_MODE": "trace"})]
    # Trace mode records every call (2N calls: 4N events, and main's and the worker's):
    # checked once before timing. Ring mode is checked below, on its exit snapshot.
    env_of = {name: env for name, _, env in rows}
    run([exe["pg"], "1", str(n)], out, env_of["trace"])
    got = dump_summary(out)
    if got < 2 * calls:
        die(f"trace mode recorded {got} events, expected at least {2 * calls}")
    got = {name: [] for name, _, _ in rows}
    bytes_trace = None
    for _ in range(a.runs):
        for name, path, env in rows:
            wall, ru, _ = run([path, "1", str(n)], out, env)
            got[name].append((wall, ru.ru_utime + ru.ru_stime))
            if name == "trace":
                bytes_trace = sum(os.path.getsize(os.path.join(out, f))
                                  for f in os.listdir(out)
                                  if f.endswith((".events", ".stage")))
    # The last run was trace mode; one more ring run for its exit snapshot.
    run([exe["pg"], "1", str(n)], out, env_of["ring"])
    snapshot = os.path.join(out, "snapshots", "1")
    ring = meta_lines(snapshot, "ring")[0]
    ring_bytes, chunk = int(ring[0]), int(ring[1])
    windows = {int(w[0]): w for w in meta_lines(snapshot, "window")}
    slots = ring_windows(snapshot)
    worker = max(slots, key=lambda s: slots[s][0])
    events, first, last = slots[worker]
    w = windows[worker]
    kept = int(w[3]) - int(w[2]) + 1
    if kept != ring_bytes // chunk or int(w[5]) != 0:
        die(f"the exit snapshot's window {w} is not a whole ring")
    written = (int(w[3]) + 1) * chunk
    wall = {k: [x[0] for x in v] for k, v in got.items()}
    cpu = {k: [x[1] for x in v] for k, v in got.items()}
    per = {k: (min(wall[k]) - min(wall["plain"])) / calls * 1e9 for k in got}
    print(f"sizing: 1 thread x {n} iterations x 2 calls (threads.c, gcc -O2 -pg), best of "
          f"{a.runs}, in {a.dir[0]} ({fs_type(a.dir[0])}); ns/call over plain")
    print(f"  {'':6} {'best s':>7} {'median s':>8} {'ns/call':>8} {'cpu ns/call':>12}")
    for name in got:
        print(f"  {name:6} {min(wall[name]):7.3f} {statistics.median(wall[name]):8.3f} "
              f"{per[name]:8.1f} {(min(cpu[name]) - min(cpu['plain'])) / calls * 1e9:12.1f}")
    print(f"  ratios: ring/trace {per['ring'] / per['trace']:.2f}, "
          f"ring/floor {per['ring'] / per['floor']:.2f}, trace/floor "
          f"{per['trace'] / per['floor']:.2f}")
    rate = 2 * calls / min(wall["ring"])
    print(f"  trace mode: {bytes_trace / (2 * calls):.2f} bytes per event (events + stage files)")
    span = (last - first) / 1e6
    print(f"  ring of {ring_bytes >> 20} MiB ({ring_bytes // chunk} chunks of {chunk >> 10} KiB),"
          f" exit snapshot, slot {worker}: {kept} chunks, {events} events over {span:.2f} ms")
    print(f"    {kept * chunk / events:.2f} bytes per event held "
          f"({written / (2 * calls):.2f} over the whole run: {int(w[3]) + 1} chunks written, "
          f"the ring went round {w[4]} times)")
    print(f"    the window's own rate {events / span / 1e3:.1f} M events/s; the best ring run's "
          f"{rate / 1e6:.1f} M events/s (4 x iterations / wall), at which the ring holds "
          f"{events / rate * 1e3:.1f} ms")
    shutil.rmtree(out, ignore_errors=True)


def writeback(a, exe, work):
    env = {"LD_PRELOAD": PRELOAD, "INSTRFN_MODE": "ring", "INSTRFN_RING": a.ring}
    print(f"writeback: 1 thread in ring mode (INSTRFN_RING={a.ring}) for about {a.seconds} s, "
          f"against 20M iterations, per place")
    for d in a.dir:
        out = os.path.join(d, f"instrfn-ring-wb-{os.getpid()}")
        short = 20_000_000
        # The iterations of --seconds, from a run with rings of 4M (quick to map).
        cal, _, _ = run([exe["pg"], "1", str(short)], out, dict(env, INSTRFN_RING="4M"))
        n = int(a.seconds / (cal / short))
        wall, ru, _ = run([exe["pg"], "1", str(short)], out, env)
        p_short, _, _ = run([exe["plain"], "1", str(short)], out, {})
        p_long, _, _ = run([exe["plain"], "1", str(n)], out, {})
        wall_l, ru_l, _ = run([exe["pg"], "1", str(n)], out, env)
        if wall_l < 30:
            print(f"ring.py: the long run took {wall_l:.1f} s, under 30 s", file=sys.stderr)
        print(f"  {d} ({fs_type(d)}):")
        for label, it, w, p, r in (("short", short, wall, p_short, ru),
                                   ("long", n, wall_l, p_long, ru_l)):
            print(f"    {label:5} {it:>11} iterations {w:7.2f} s "
                  f"{(w - p) / (2 * it) * 1e9:5.1f} ns/call  minor faults {r.ru_minflt:6} "
                  f"major {r.ru_majflt}  sys {r.ru_stime:.2f} s")
        shutil.rmtree(out, ignore_errors=True)


def snapshot(a, exe, work):
    threads = [int(t) for t in a.threads.split(",")]
    env = {"LD_PRELOAD": PRELOAD, "INSTRFN_MODE": "ring", "INSTRFN_EXIT_SNAPSHOT": "off"}
    print("snapshot: instrfn_snapshot() from an uninstrumented main, T rings of 4 MiB, "
          "5 snapshots each; ms/ring and MiB: of the median; dropped: chunks per snapshot, mean")
    print(f"  {'dir':12} {'T':>2} {'threads':7} {'min ms':>7} {'median':>7} {'ms/ring':>8} "
          f"{'MiB':>5} {'dropped':>8}")
    for d in a.dir:
        out = os.path.join(d, f"instrfn-ring-snap-{os.getpid()}")
        for t in threads:
            for mode in ("idle", "busy"):
                _, _, stdout = run([exe["snap"], str(t), "300", mode, "5"], out, env)
                us, dropped, kept = [], [], []
                for line in stdout.splitlines():
                    _, k, r, micros = line.split()
                    if r != "0":
                        die(f"instrfn_snapshot() returned {r}")
                    us.append(float(micros))
                    s = os.path.join(out, "snapshots", k)
                    dropped.append(sum(int(w[5]) for w in meta_lines(s, "window")))
                    kept.append(int(meta_lines(s, "complete")[0][0]))
                    chunk = int(meta_lines(s, "ring")[0][1])
                ms = statistics.median(us) / 1e3
                print(f"  {d:12} {t:2} {mode:7} {min(us) / 1e3:7.2f} {ms:7.2f} {ms / t:8.2f} "
                      f"{statistics.median(kept) * chunk / 2**20:5.1f} "
                      f"{statistics.mean(dropped):8.1f}")
        shutil.rmtree(out, ignore_errors=True)


def outside(a, exe, work):
    t = int(a.threads.split(",")[-1]) if a.threads != "1,2,4,8" else 4
    d = os.path.join(a.dir[0], f"instrfn-ring-outside-{os.getpid()}")
    env = dict(os.environ, LD_PRELOAD=PRELOAD, INSTRFN_MODE="ring", INSTRFN_OUTPUT=d,
               INSTRFN_EXIT_SNAPSHOT="off")
    shutil.rmtree(d, ignore_errors=True)
    p = subprocess.Popen([exe["pg"], str(t), str(10**10)], stdout=subprocess.DEVNULL, env=env)
    try:
        time.sleep(2)  # every ring full
        ms, chunks = [], []
        for _ in range(10):
            t0 = time.perf_counter()
            out = subprocess.run([INSTRFN, "snapshot", d], capture_output=True, text=True)
            ms.append((time.perf_counter() - t0) * 1e3)
            if out.returncode != 0:
                die(f"instrfn snapshot: {out.stderr.strip()}")
            m = re.search(r"(\d+) chunks, (\d+) chunks rewritten", out.stdout)
            chunks.append((int(m.group(1)), int(m.group(2))))
    finally:
        p.kill()
        p.wait()
    print(f"outside snapshot of {t} threads x 4 MiB rings, {a.dir[0]} ({fs_type(a.dir[0])}): "
          f"min {min(ms):.1f} ms, median {statistics.median(ms):.1f} ms; chunks kept "
          f"{statistics.median(c[0] for c in chunks)}, dropped {sum(c[1] for c in chunks)} "
          f"in 10")
    shutil.rmtree(d, ignore_errors=True)
    n = a.iterations // 4
    for threads in (1, 2):
        best = {}
        for _ in range(a.runs):
            for name in ("plain", "ring", "ring+10/s", "ring+usr2"):
                shutil.rmtree(d, ignore_errors=True)
                e = dict(os.environ) if name == "plain" else env
                if name == "ring+usr2":
                    e = dict(env, INSTRFN_SNAPSHOT_SIGNAL="USR2")
                t0 = time.perf_counter()
                p = subprocess.Popen([exe["plain" if name == "plain" else "pg"], str(threads),
                                      str(n)], stdout=subprocess.DEVNULL, env=e)
                while name in ("ring+10/s", "ring+usr2") and p.poll() is None:
                    time.sleep(0.1)
                    if name == "ring+usr2" and os.path.isdir(d) and os.listdir(d):
                        p.send_signal(signal.SIGUSR2)
                    elif name == "ring+10/s" and os.path.isdir(d):
                        subprocess.run([INSTRFN, "snapshot", d], capture_output=True)
                p.wait()
                w = time.perf_counter() - t0
                best[name] = min(best.get(name, w), w)
        calls = 2 * threads * n
        per = {k: (v - best["plain"]) * min(threads, os.cpu_count()) / calls * 1e9
               for k, v in best.items()}
        print(f"  {threads} thread(s), {n} iterations, best of {a.runs}: ring {per['ring']:.1f} "
              f"ns/call; 10 snapshots/s: by `instrfn snapshot` {per['ring+10/s']:.1f} ns/call "
              f"(wall {best['ring+10/s'] / best['ring']:.3f} x), by SIGUSR2 in the program "
              f"{per['ring+usr2']:.1f} ns/call (wall {best['ring+usr2'] / best['ring']:.3f} x)")
    shutil.rmtree(d, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description="Ring mode's sizing, writeback and snapshot figures.")
    p.add_argument("what", choices=["sizing", "writeback", "snapshot", "outside"])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--iterations", type=int, default=20_000_000)
    p.add_argument("--seconds", type=float, default=45)
    p.add_argument("--threads", default="1,2,4,8")
    p.add_argument("--ring", default="4M", help="INSTRFN_RING of the writeback runs")
    p.add_argument("--dir", action="append")
    a = p.parse_args()
    a.dir = a.dir or (["/tmp"] if a.what == "sizing" else ["/tmp", "/dev/shm"])
    for f in (PRELOAD, INSTRFN):
        if not os.path.isfile(f):
            die(f"{f}: missing (cargo build --release)")
    if shutil.which("gcc") is None:
        die("gcc not found (apt-get install gcc)")
    if a.what == "writeback" and a.seconds < 30:
        print("ring.py: under 30 s, writeback may not reach the ring pages", file=sys.stderr)
    header()
    work = tempfile.mkdtemp(prefix="instrfn-ring-")
    try:
        exe = build(work)
        {"sizing": sizing, "writeback": writeback, "snapshot": snapshot,
         "outside": outside}[a.what](a, exe, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
