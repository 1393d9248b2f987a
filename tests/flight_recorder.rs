//! The flight recorder (`INSTRFN_MODE=ring`, docs/flight-recorder.md): each thread keeps its
//! newest events in a ring, and snapshots (at exit, by the API, on a signal, on a crash) are
//! trace directories `instrfn dump` reads. tests/fixtures/c/ring.c makes a known call shape
//! on T threads and then ends as its third argument says.

#[macro_use]
mod common;

use common::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

feature_tests! {
    flight_recorder:
    a_ring_keeps_exactly_its_newest_events(x86_64, aarch64, riscv64, s390x),
    snapshot_by_the_api(x86_64, aarch64),
    snapshot_on_a_signal_shows_where_threads_wait(x86_64, aarch64, riscv64, s390x),
    crash_snapshot_holds_the_calls_that_led_to_it(x86_64),
    a_fork_child_records_into_rings_of_its_own(x86_64),
    spawned_children_record_into_rings_of_their_own(x86_64),
    a_full_disk_is_said_once_and_the_program_runs_on(x86_64),
    a_slow_call_fires_its_trigger(x86_64, aarch64, riscv64, s390x),
    a_call_longer_than_its_ring_is_marked_incomplete(x86_64),
    triggers_keep_to_their_rate_limit(x86_64),
    a_bad_trigger_is_said_once_and_ignored(x86_64),
    short_lived_threads_recycle_rings(x86_64, aarch64),
    every_route_records_into_rings(x86_64),
    a_snapshot_says_which_calls_began_before_its_window(x86_64),
    a_slow_request_of_a_server_fires_one_snapshot(x86_64, aarch64),
}

/// One round of a worker of ring.c: (kind, function).
const ROUND: [(&str, &str); 6] = [
    ("entry", "outer"),
    ("entry", "inner_a"),
    ("exit", "inner_a"),
    ("entry", "inner_b"),
    ("exit", "inner_b"),
    ("exit", "outer"),
];

/// ring.c built for `arch` (-pg, preloaded) in a fresh work directory.
fn ring_fixture(arch: Arch, name: &str) -> (PathBuf, PathBuf) {
    let dir = workdir(&format!("ring-{name}-{}", arch.name));
    let exe = build_c(arch, &dir, "ring.c", &[], Link::Preload);
    (dir, exe)
}

/// The environment of a ring-mode run into `trace`, with `extra` after it.
fn ring_env<'a>(arch: Arch, trace: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(String, String)> {
    let mut env = vec![
        ("LD_PRELOAD".to_string(), preload_path(arch)),
        ("INSTRFN_MODE".to_string(), "ring".to_string()),
        ("INSTRFN_OUTPUT".to_string(), trace.to_string()),
    ];
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

fn ring_command(
    arch: Arch,
    exe: &Path,
    args: &[&str],
    env: &[(String, String)],
    dir: &Path,
) -> Command {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    command(arch, exe, args, &env, dir)
}

/// ring.c built for `arch` in a fresh work directory named after `name`, run in ring mode
/// with `args` and `extra` settings: (work directory, trace, the run's output).
fn run_ring(
    arch: Arch,
    name: &str,
    args: &[&str],
    extra: &[(&str, &str)],
) -> (PathBuf, PathBuf, std::process::Output) {
    let (dir, exe) = ring_fixture(arch, name);
    let trace = dir.join("trace");
    let t = trace.display().to_string();
    let env = ring_env(arch, &t, extra);
    let out = run_within(&mut ring_command(arch, &exe, args, &env, &dir), 300);
    (dir, trace, out)
}

/// The snapshot directories of a ring trace, by number.
fn snapshots(trace: &Path) -> Vec<PathBuf> {
    let mut v: Vec<(u32, PathBuf)> = std::fs::read_dir(trace.join("snapshots"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

/// A snapshot's `window` lines: (slot, tid, first, last, wraps, dropped).
fn windows(snapshot: &Path) -> Vec<[u64; 6]> {
    meta_text(snapshot)
        .lines()
        .filter_map(|l| l.strip_prefix("window "))
        .map(|l| {
            let n: Vec<u64> = l.split_whitespace().map(|w| w.parse().unwrap()).collect();
            n.try_into().unwrap()
        })
        .collect()
}

/// The chunks a finished snapshot kept (its `complete` line), None while it is written.
fn complete(snapshot: &Path) -> Option<u64> {
    let text = std::fs::read_dir(snapshot)
        .ok()?
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "meta"))
        .and_then(|e| std::fs::read_to_string(e.path()).ok())?;
    text.lines()
        .find_map(|l| l.strip_prefix("complete "))
        .map(|n| n.trim().parse().unwrap())
}

/// The reason of a finished snapshot's `snapshot` line. Its events file holds exactly the
/// chunks its `complete` line counts.
fn reason(snapshot: &Path) -> String {
    let text = meta_text(snapshot);
    let kept =
        complete(snapshot).unwrap_or_else(|| panic!("{}: no complete line", snapshot.display()));
    let chunk: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("ring "))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or_else(|| panic!("{}: no ring line", snapshot.display()));
    let events = std::fs::read_dir(snapshot)
        .unwrap()
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "events"))
        .unwrap_or_else(|| panic!("{}: no events file", snapshot.display()));
    assert_eq!(
        events.metadata().unwrap().len(),
        kept * chunk,
        "{}",
        snapshot.display()
    );
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("snapshot "))
        .unwrap_or_else(|| panic!("{}: no snapshot line", snapshot.display()));
    line.split_whitespace().next().unwrap().to_string()
}

/// The events of a worker's window: a tail of a round, whole rounds, then `tail` (what the
/// worker did after its rounds). Events at the window's start may be exits of calls begun
/// before it. Timestamps never go backwards. Returns the whole rounds seen.
fn assert_window(events: &[DumpEvent], tail: &[(&str, &str)], context: &str) -> usize {
    let pairs: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.kind.as_str(), e.name.as_str()))
        .collect();
    for w in events.windows(2) {
        assert!(w[0].ns <= w[1].ns, "{context}: time goes backwards: {w:?}");
    }
    let start = pairs
        .iter()
        .position(|p| *p == ROUND[0])
        .unwrap_or_else(|| panic!("{context}: no round in {pairs:?}"));
    // A window that holds the thread's whole run starts with the thread's own entry.
    let head = &pairs[..start];
    assert!(
        (start < ROUND.len() && ROUND.ends_with(head)) || head == [("entry", "worker")],
        "{context}: the window starts with {:?}",
        &pairs[..start.min(12)]
    );
    let body = &pairs[start..pairs.len() - tail.len()];
    assert_eq!(
        &pairs[pairs.len() - tail.len()..],
        tail,
        "{context}: the tail"
    );
    assert_eq!(body.len() % ROUND.len(), 0, "{context}: a round cut short");
    for (i, round) in body.chunks(ROUND.len()).enumerate() {
        assert_eq!(round, ROUND, "{context}: round {i} of the window");
    }
    body.len() / ROUND.len()
}

/// A tiny ring (16 chunks of 4 KiB) of a thread that makes 100 000 rounds: the exit snapshot
/// holds exactly the ring's last 16 chunks, whole rounds in order, none twice, ending with
/// the thread's last calls; the ring went round many times.
fn a_ring_keeps_exactly_its_newest_events(arch: Arch) {
    let (_, trace, _) = run_ring(
        arch,
        "wrap",
        &["1", "100000", "exit"],
        &[("INSTRFN_RING", "64K")],
    );
    let snaps = snapshots(&trace);
    assert_eq!(snaps.len(), 1, "{snaps:?}");
    assert_eq!(reason(&snaps[0]), "exit");
    assert!(
        meta_text(&trace).contains("ring 65536 4096 16"),
        "{}",
        meta_text(&trace)
    );
    let p = instrfn_dump(&snaps[0]).remove(0);
    let (_, worker) = p
        .threads
        .iter()
        .find(|(_, ev)| ev.iter().any(|e| e.name == "outer"))
        .expect("the worker's events");
    let rounds = assert_window(
        worker,
        &[("entry", "done"), ("exit", "done"), ("exit", "worker")],
        arch.name,
    );
    // A chunk holds (4096 - 64) / 8 words; a round is at most 6 words (4 with call words).
    assert!(
        rounds >= 15 * (4096 - 64) / 8 / 6,
        "{}: {rounds} rounds",
        arch.name
    );
    let w = windows(&snaps[0]);
    let ring = w
        .iter()
        .find(|w| w[4] > 0)
        .expect("the worker's ring went round");
    assert_eq!(
        (ring[3] - ring[2], ring[5]),
        (15, 0),
        "{}: {w:?}",
        arch.name
    );
    assert_eq!(
        std::fs::metadata(trace_files(&snaps[0], ".events").remove(0))
            .unwrap()
            .len(),
        4096 * (16 + w.len() as u64 - 1),
        "{}: every ring's chunks, once",
        arch.name
    );
}

/// instrfn_snapshot() from the program: one snapshot (no exit snapshot with
/// INSTRFN_EXIT_SNAPSHOT=off) whose calling thread's window ends with its last call; in trace
/// mode it answers EINVAL and writes nothing.
fn snapshot_by_the_api(arch: Arch) {
    let (dir, exe) = ring_fixture(arch, "api");
    let trace = dir.join("trace");
    let t = trace.display().to_string();
    let env = ring_env(arch, &t, &[("INSTRFN_EXIT_SNAPSHOT", "off")]);
    let out = run_within(
        &mut ring_command(arch, &exe, &["2", "20000", "api"], &env, &dir),
        300,
    );
    assert!(
        stdout_of(&out).contains("snapshot 0"),
        "{}",
        stdout_of(&out)
    );
    let snaps = snapshots(&trace);
    assert_eq!(snaps.len(), 1, "{snaps:?}");
    assert_eq!(reason(&snaps[0]), "api");
    let p = instrfn_dump(&snaps[0]).remove(0);
    let done: Vec<&Vec<DumpEvent>> = p
        .threads
        .values()
        .filter(|ev| {
            ev.last()
                .is_some_and(|e| e.kind == "exit" && e.name == "done")
        })
        .collect();
    assert!(
        !done.is_empty(),
        "{}: no thread ends with done: {:?}",
        arch.name,
        p.threads.keys()
    );
    // 20 000 rounds fit the default ring: the whole run, every round.
    assert_eq!(
        assert_window(done[0], &[("entry", "done"), ("exit", "done")], arch.name),
        20000
    );
    let trace_env = [
        ("LD_PRELOAD".to_string(), preload_path(arch)),
        ("INSTRFN_MODE".to_string(), "trace".to_string()),
        (
            "INSTRFN_OUTPUT".to_string(),
            dir.join("plain").display().to_string(),
        ),
    ];
    let out = run_within(
        &mut ring_command(arch, &exe, &["1", "10", "api"], &trace_env, &dir),
        300,
    );
    assert!(
        stdout_of(&out).contains("snapshot 22"),
        "{}",
        stdout_of(&out)
    );
    assert!(!dir.join("plain/snapshots").exists());
}

/// Waits until a snapshot in `trace` beyond the first `seen` has a window line for each of
/// `rings` rings (it is written to the end), and returns it.
fn wait_for_snapshot(trace: &Path, seen: usize) -> PathBuf {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if let Some(s) = snapshots(trace).get(seen)
            && complete(s).is_some()
        {
            return s.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no snapshot in {}",
            trace.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A deadlocked program (3 workers blocked in wait_here) gets INSTRFN_SNAPSHOT_SIGNAL: the
/// snapshot shows each worker's window ending in the call where it waits, still open. (The
/// signal is sent again until every worker waits: they get there in their own time.)
fn snapshot_on_a_signal_shows_where_threads_wait(arch: Arch) {
    let (dir, exe) = ring_fixture(arch, "hang");
    let trace = dir.join("trace");
    let t = trace.display().to_string();
    let env = ring_env(arch, &t, &[("INSTRFN_SNAPSHOT_SIGNAL", "USR2")]);
    let mut child = ring_command(arch, &exe, &["3", "1000", "hang"], &env, &dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    read_ready(&mut child);
    let pid = child.id() as i32;
    let result = std::panic::catch_unwind(move || {
        let mut seen = 0;
        loop {
            // SAFETY: kill(2) of our own child.
            unsafe { libc::kill(pid, libc::SIGUSR2) };
            let snap = wait_for_snapshot(&trace, seen);
            seen += 1;
            assert_eq!(reason(&snap), "signal");
            let p = instrfn_dump(&snap).remove(0);
            let waiting = p
                .threads
                .values()
                .filter(|ev| {
                    ev.last()
                        .is_some_and(|e| e.kind == "entry" && e.name == "wait_here")
                })
                .count();
            if waiting == 3 {
                for ev in p
                    .threads
                    .values()
                    .filter(|ev| ev.iter().any(|e| e.name == "outer"))
                {
                    assert_window(
                        ev,
                        &[("entry", "done"), ("exit", "done"), ("entry", "wait_here")],
                        arch.name,
                    );
                }
                return;
            }
            assert!(seen < 200, "{}: the workers never all waited", arch.name);
        }
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// A SIGSEGV, and an abort(), in a worker with rings on: the process ends as without instrfn
/// (signal, core dump), and the crash snapshot's window of that thread ends in the calls
/// that led there.
fn crash_snapshot_holds_the_calls_that_led_to_it(arch: Arch) {
    use std::os::unix::process::ExitStatusExt;
    for (end, signal, last) in [
        (
            "crash",
            libc::SIGSEGV,
            &[("entry", "crash_now"), ("entry", "fault")][..],
        ),
        ("abort", libc::SIGABRT, &[("entry", "abort_now")][..]),
    ] {
        let (dir, exe) = ring_fixture(arch, end);
        let trace = dir.join("trace");
        let t = trace.display().to_string();
        let crash = |extra: &[(&str, &str)]| {
            let env = ring_env(arch, &t, extra);
            let mut cmd = Command::new("sh");
            cmd.arg("-c")
                .arg("ulimit -c unlimited; exec \"$0\" \"$@\"")
                .arg(&exe)
                .args(["2", "5000", end])
                .current_dir(&dir)
                .envs(env);
            run(&mut cmd)
        };
        let off = crash(&[("INSTRFN_CRASH_WRITE", "off")]);
        assert_eq!(off.status.signal(), Some(signal), "{end}");
        assert!(
            snapshots(&trace).is_empty(),
            "{end}: a snapshot with INSTRFN_CRASH_WRITE=off"
        );
        let on = crash(&[]);
        assert_eq!(
            on.status.signal(),
            off.status.signal(),
            "{end}: {}",
            stderr_of(&on)
        );
        assert_eq!(
            on.status.core_dumped(),
            off.status.core_dumped(),
            "{end}: core dump"
        );
        let snaps = snapshots(&trace);
        assert_eq!(snaps.len(), 1, "{end}: {snaps:?}");
        assert_eq!(reason(&snaps[0]), "crash");
        let p = instrfn_dump(&snaps[0]).remove(0);
        let crashed = p
            .threads
            .values()
            .find(|ev| ev.iter().any(|e| e.name == last[0].1))
            .expect("the crashing thread");
        let mut tail = vec![("entry", "done"), ("exit", "done")];
        tail.extend_from_slice(last);
        assert_window(crashed, &tail, end);
        for core in std::fs::read_dir(&dir).unwrap().flatten() {
            if core.file_name().to_string_lossy().starts_with("core") {
                let _ = std::fs::remove_file(core.path());
            }
        }
    }
}

/// A fork child switches to rings of its own: each process's exit snapshot holds its own
/// calls only, the child's 100 child_work calls in the child's.
fn a_fork_child_records_into_rings_of_its_own(arch: Arch) {
    let (_, trace, _) = run_ring(arch, "fork", &["1", "1000", "fork"], &[]);
    let snaps = snapshots(&trace);
    assert_eq!(snaps.len(), 2, "{snaps:?}");
    assert_eq!(trace_files(&trace, ".ring").len(), 2);
    let mut child_work = Vec::new();
    for s in &snaps {
        let procs = instrfn_dump(s);
        assert_eq!(procs.len(), 1, "{}", s.display());
        let counts = dump_counts(&procs[0]);
        child_work.push(
            counts
                .get(&("entry".into(), "child_work".into()))
                .copied()
                .unwrap_or(0),
        );
        let outer = counts
            .get(&("entry".into(), "outer".into()))
            .copied()
            .unwrap_or(0);
        // The child's trace holds no events of the parent's, the parent's all 1000 rounds.
        assert!(
            outer == 0 || outer == 1000,
            "{}: {outer} rounds",
            s.display()
        );
    }
    child_work.sort();
    assert_eq!(child_work, [0, 100]);
}

/// A child made by posix_spawn, and one by vfork and execv, each run ring.c again (1 worker,
/// 100 rounds): three processes, three ring files, three exit snapshots. The parent's holds
/// its 2 × 1000 rounds, each child's its own 100, and none the others'. (x86_64 only: under
/// qemu-user a child would exec the foreign binary without qemu.)
fn spawned_children_record_into_rings_of_their_own(arch: Arch) {
    let (_, trace, out) = run_ring(arch, "spawn", &["2", "1000", "spawn"], &[]);
    assert!(out.status.success(), "{}: {}", arch.name, stderr_of(&out));
    let snaps = snapshots(&trace);
    assert_eq!(snaps.len(), 3, "{snaps:?}");
    assert_eq!(trace_files(&trace, ".ring").len(), 3);
    let mut rounds: Vec<usize> = snaps
        .iter()
        .map(|s| {
            let procs = instrfn_dump(s);
            assert_eq!(procs.len(), 1, "{}", s.display());
            dump_counts(&procs[0])
                .get(&("entry".into(), "outer".into()))
                .copied()
                .unwrap_or(0)
        })
        .collect();
    rounds.sort();
    assert_eq!(rounds, [100, 100, 2000], "{}", arch.name);
}

/// Rings on a file system too small for them (a 256 KiB tmpfs; the test needs root): said
/// once, the program runs on to its normal end (never SIGBUS), and the lost events are
/// counted in the meta file.
fn a_full_disk_is_said_once_and_the_program_runs_on(arch: Arch) {
    let (dir, exe) = ring_fixture(arch, "full");
    let small = dir.join("small");
    std::fs::create_dir_all(&small).unwrap();
    let unmount = || {
        while Command::new("umount")
            .arg(&small)
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
        {}
    };
    unmount();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&small)
        .status()
        .unwrap();
    assert!(
        mounted.success(),
        "cannot mount a small tmpfs (the test needs root)"
    );
    let result = std::panic::catch_unwind(|| {
        let trace = small.join("trace");
        let t = trace.display().to_string();
        let env = ring_env(arch, &t, &[]);
        let out = run_within(
            &mut ring_command(arch, &exe, &["4", "10000", "exit"], &env, &dir),
            300,
        );
        let err = stderr_of(&out);
        assert_eq!(err.matches("cannot reserve a ring").count(), 1, "{err}");
        let lost: u64 = meta_text(&trace)
            .lines()
            .filter_map(|l| l.strip_prefix("lost "))
            .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
            .sum();
        // Every worker's 10 000 rounds of 6 events, and done's 2, at least.
        assert!(lost >= 4 * (10000 * 6 + 2), "{lost} lost\n{err}");
    });
    unmount();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// A snapshot's `trigger` line: (tid, ns, whole or incomplete, pattern).
fn trigger_line(snapshot: &Path) -> (u32, u64, String, String) {
    let text = meta_text(snapshot);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("trigger "))
        .unwrap_or_else(|| panic!("{}: no trigger line", snapshot.display()));
    let w: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(w.len(), 8, "{line}");
    (
        w[1].parse().unwrap(),
        w[5].parse().unwrap(),
        w[6].to_string(),
        w[7].to_string(),
    )
}

/// The snapshots a trigger took.
fn trigger_snapshots(trace: &Path) -> Vec<PathBuf> {
    snapshots(trace)
        .into_iter()
        .filter(|s| reason(s) == "trigger")
        .collect()
}

/// ring.c `slowK`/`bigK` with `extra` settings; returns the trace and the run's stderr.
fn run_slow(arch: Arch, name: &str, end: &str, extra: &[(&str, &str)]) -> (PathBuf, String) {
    let (_, trace, out) = run_ring(arch, name, &["2", "20000", end], extra);
    assert!(out.status.success(), "{}: {}", arch.name, stderr_of(&out));
    (trace, stderr_of(&out))
}

/// One call of slow_call() sleeps 30 ms among 80 000 fast calls. With
/// INSTRFN_TRIGGER='slow_call>5ms;inner_b>10s' exactly one snapshot is taken, for that call:
/// its trigger line names the thread and the pattern and says the window holds the whole
/// call; that thread's window holds the call's entry and exit, at least 30 ms apart (the
/// sleep's lower bound). inner_b, never 10 s long, takes none.
fn a_slow_call_fires_its_trigger(arch: Arch) {
    let (trace, _) = run_slow(
        arch,
        "slow",
        "slow1",
        &[("INSTRFN_TRIGGER", "slow_call>5ms;inner_b>10s")],
    );
    let fired = trigger_snapshots(&trace);
    assert_eq!(fired.len(), 1, "{}: {fired:?}", arch.name);
    let (tid, ns, whole, pattern) = trigger_line(&fired[0]);
    assert_eq!((whole.as_str(), pattern.as_str()), ("whole", "slow_call"));
    assert!(ns >= 20_000_000, "{}: the call lasted {ns} ns", arch.name);
    let p = instrfn_dump(&fired[0]).remove(0);
    let events = p
        .threads
        .get(&tid)
        .unwrap_or_else(|| panic!("{}: no thread {tid} in {:?}", arch.name, p.threads.keys()));
    let entry = events
        .iter()
        .position(|e| e.kind == "entry" && e.name == "slow_call")
        .unwrap_or_else(|| panic!("{}: no entry of slow_call", arch.name));
    let exit = events[entry..]
        .iter()
        .find(|e| e.kind == "exit" && e.name == "slow_call")
        .unwrap_or_else(|| panic!("{}: no exit of slow_call", arch.name));
    assert!(
        exit.ns - events[entry].ns >= 0.95 * 30e6,
        "{}: slow_call lasted {} ns",
        arch.name,
        exit.ns - events[entry].ns
    );
}

/// slow_call() first makes 400 000 calls (3 MiB of events), then sleeps 30 ms, with rings of
/// 1 MiB: the snapshot its trigger takes says `incomplete`, and the thread's window holds
/// the call's exit but not its entry.
fn a_call_longer_than_its_ring_is_marked_incomplete(arch: Arch) {
    let (trace, _) = run_slow(
        arch,
        "big",
        "big1",
        &[("INSTRFN_TRIGGER", "slow_call>5ms"), ("INSTRFN_RING", "1M")],
    );
    let fired = trigger_snapshots(&trace);
    assert_eq!(fired.len(), 1, "{fired:?}");
    let (tid, ns, whole, _) = trigger_line(&fired[0]);
    assert_eq!(whole, "incomplete");
    assert!(ns >= 20_000_000, "the call lasted {ns} ns");
    let p = instrfn_dump(&fired[0]).remove(0);
    let events = &p.threads[&tid];
    let named = |kind: &str| {
        events
            .iter()
            .any(|e| e.kind == kind && e.name == "slow_call")
    };
    assert!(
        named("exit") && !named("entry"),
        "{:?}",
        &events[events.len().saturating_sub(8)..]
    );
}

/// Five slow calls, each 30 ms or more apart: INSTRFN_TRIGGER_LIMIT=1000 keeps all five
/// snapshots, and the default, one per second, keeps one per second of the run at most.
fn triggers_keep_to_their_rate_limit(arch: Arch) {
    let (trace, _) = run_slow(
        arch,
        "rate-all",
        "slow5",
        &[
            ("INSTRFN_TRIGGER", "slow_call>5ms"),
            ("INSTRFN_TRIGGER_LIMIT", "1000"),
        ],
    );
    let fired = trigger_snapshots(&trace);
    assert_eq!(fired.len(), 5, "{fired:?}");
    for s in &fired {
        assert_eq!(trigger_line(s).2, "whole", "{}", s.display());
    }
    let started = std::time::Instant::now();
    let (trace, _) = run_slow(
        arch,
        "rate-one",
        "slow5",
        &[("INSTRFN_TRIGGER", "slow_call>5ms")],
    );
    let seconds = started.elapsed().as_secs() as usize;
    let fired = trigger_snapshots(&trace);
    assert!(
        (1..=1 + seconds).contains(&fired.len()),
        "{} trigger snapshots in a run of {seconds} s",
        fired.len()
    );
}

/// An INSTRFN_TRIGGER without a duration, or outside ring mode, is said in one line; the
/// program runs as without it, and no trigger fires.
fn a_bad_trigger_is_said_once_and_ignored(arch: Arch) {
    let (trace, stderr) = run_slow(arch, "bad", "slow1", &[("INSTRFN_TRIGGER", "slow_call")]);
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("INSTRFN_TRIGGER"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(said[0].contains("PATTERN>DURATION"), "{stderr}");
    assert!(trigger_snapshots(&trace).is_empty());
    assert_eq!(snapshots(&trace).len(), 1, "the exit snapshot");
    let (dir, exe) = ring_fixture(arch, "bad-trace");
    let t = dir.join("trace").display().to_string();
    let env = [
        ("LD_PRELOAD", preload_path(arch)),
        ("INSTRFN_MODE", "trace".to_string()),
        ("INSTRFN_OUTPUT", t),
        ("INSTRFN_TRIGGER", "slow_call>5ms".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = run_within(
        &mut command(arch, &exe, &["2", "2000", "slow1"], &env, &dir),
        300,
    );
    assert!(out.status.success());
    let stderr = stderr_of(&out);
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains("INSTRFN_TRIGGER"))
            .count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("needs INSTRFN_MODE=ring"), "{stderr}");
}

/// 50 workers, one after another: they take turns in one slot, so the ring file holds two
/// rings (main's and theirs) however many threads come and go. A recycled ring keeps its
/// earlier owners' events until they are rewritten: the exit snapshot shows all 50 workers,
/// each with its 100 rounds, under their own tids.
fn short_lived_threads_recycle_rings(arch: Arch) {
    let (_, trace, out) = run_ring(arch, "serial", &["50", "100", "serial"], &[]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let ring_file = std::fs::read_dir(&trace)
        .unwrap()
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "ring"))
        .unwrap()
        .path();
    let region = 4096 + 4 * 1024 * 1024; // a ring header and the default 4 MiB
    assert_eq!(
        std::fs::metadata(&ring_file).unwrap().len(),
        4096 + 2 * region
    );
    let snaps = snapshots(&trace);
    assert_eq!(snaps.len(), 1);
    assert_eq!(windows(&snaps[0]).len(), 2, "{}", meta_text(&snaps[0]));
    let p = instrfn_dump(&snaps[0]).remove(0);
    let workers: Vec<&Vec<DumpEvent>> = p
        .threads
        .values()
        .filter(|ev| ev.iter().any(|e| e.name == "outer"))
        .collect();
    assert_eq!(workers.len(), 50, "{}: {:?}", arch.name, p.threads.keys());
    for ev in workers {
        let rounds = ev
            .iter()
            .filter(|e| e.kind == "entry" && e.name == "outer")
            .count();
        assert_eq!(rounds, 100, "{}", arch.name);
    }
}

/// Ring mode takes every route trace mode takes: `__fentry__`, `-finstrument-functions`,
/// XRay sleds patched natively (clang, linked without compiler-rt's XRay runtime), and gcc's
/// `__return__` (linked with the stub the preloaded runtime overrides). Each run's exit
/// snapshot holds both workers' 20 000 rounds, in order.
fn every_route_records_into_rings(arch: Arch) {
    let dir = workdir(&format!("ring-routes-{}", arch.name));
    let stub = dir.join("libinstrfn-return-stub.so");
    run_ok(
        Command::new("gcc")
            .args(["-shared", "-nostdlib", "-o"])
            .arg(&stub)
            .arg(root().join("preload/return-stub.s")),
    );
    let source = fixture("c/ring.c");
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let routes: [(&str, &str, Vec<&str>, Vec<&OsStr>); 4] = [
        ("fentry", "gcc", vec!["-pg", "-mfentry"], vec![]),
        ("cyg", "gcc", vec!["-finstrument-functions"], vec![]),
        (
            "xray",
            "clang",
            vec![
                "-fxray-instrument",
                "-fxray-instruction-threshold=1",
                "-Wno-unknown-attributes",
            ],
            vec![],
        ),
        (
            "return",
            "gcc",
            vec!["-pg", "-mfentry", "-minstrument-return=call"],
            vec![stub.as_os_str(), OsStr::new(&rpath)],
        ),
    ];
    for (name, compiler, flags, link) in routes {
        require_tool(compiler);
        let obj = dir.join(format!("ring-{name}.o"));
        run_ok(
            Command::new(compiler)
                .arg("-O2")
                .arg("-c")
                .args(&flags)
                .arg(&source)
                .arg("-o")
                .arg(&obj),
        );
        let exe = dir.join(format!("ring-{name}"));
        run_ok(
            Command::new(compiler)
                .arg(&obj)
                .args(&link)
                .arg("-lpthread")
                .arg("-o")
                .arg(&exe),
        );
        let trace = dir.join(format!("trace-{name}"));
        let t = trace.display().to_string();
        let env = ring_env(arch, &t, &[]);
        let out = run_within(
            &mut ring_command(arch, &exe, &["2", "20000", "exit"], &env, &dir),
            300,
        );
        assert!(out.status.success(), "{name}: {}", stderr_of(&out));
        let snaps = snapshots(&trace);
        assert_eq!(snaps.len(), 1, "{name}");
        assert_eq!(reason(&snaps[0]), "exit");
        let p = instrfn_dump(&snaps[0]).remove(0);
        let workers: Vec<&Vec<DumpEvent>> = p
            .threads
            .values()
            .filter(|ev| ev.iter().any(|e| e.name == "outer"))
            .collect();
        assert_eq!(workers.len(), 2, "{name}");
        for ev in workers {
            let tail: &[(&str, &str)] = &[("entry", "done"), ("exit", "done"), ("exit", "worker")];
            let tail = if ev.last().is_some_and(|e| e.name == "worker") {
                tail
            } else {
                &tail[..2]
            };
            assert_eq!(assert_window(ev, tail, name), 20000, "{name}");
        }
    }
}

/// With 64 KiB rings the exit snapshot starts mid-call: `report` counts the exits without
/// their entry as calls begun before the window, and the chrome export draws each one as a
/// slice from the thread's first event, around every call of the window that nests in it.
fn a_snapshot_says_which_calls_began_before_its_window(arch: Arch) {
    let (dir, trace, out) = run_ring(
        arch,
        "window",
        &["1", "20000", "exit"],
        &[("INSTRFN_RING", "64K")],
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let snap = snapshots(&trace).remove(0);
    let report = run_ok(Command::new(instrfn_cli()).arg("report").arg(&snap));
    let head = stdout_of(&report);
    assert!(
        head.lines()
            .next()
            .unwrap()
            .contains("calls begun before the window"),
        "{head}"
    );
    let json = dir.join("window.json");
    run_ok(
        Command::new(instrfn_cli())
            .args(["export", "--format", "chrome", "-o"])
            .arg(&json)
            .arg(&snap),
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let slices: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    let begun: Vec<&&serde_json::Value> = slices
        .iter()
        .filter(|e| e["args"]["begun"] == "before the window")
        .collect();
    // The worker's own call, open from before the window to its exit.
    let worker = begun
        .iter()
        .find(|e| e["name"] == "worker")
        .unwrap_or_else(|| panic!("no worker slice begun before the window: {begun:?}"));
    let (w0, w1) = (
        worker["ts"].as_f64().unwrap(),
        worker["ts"].as_f64().unwrap() + worker["dur"].as_f64().unwrap(),
    );
    let tid = &worker["tid"];
    let mut inside = 0;
    for e in slices
        .iter()
        .filter(|e| &e["tid"] == tid && e["name"] == "outer")
    {
        let (a, b) = (
            e["ts"].as_f64().unwrap(),
            e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap(),
        );
        assert!(
            w0 <= a && b <= w1 + 1e-3,
            "outer [{a}, {b}] outside worker [{w0}, {w1}]"
        );
        inside += 1;
    }
    assert!(inside > 0);
    // Its first slice starts where the thread's first event is.
    let first = slices
        .iter()
        .filter(|e| &e["tid"] == tid)
        .map(|e| e["ts"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(first, w0);
}

/// tests/fixtures/c/server.c: 4 workers handle 10 000 requests of microseconds; one takes
/// 100 ms. With INSTRFN_TRIGGER='handle_request>30ms' (far from both, so a preempted fast
/// request never trips it) and rings of 1 MiB, exactly one snapshot is taken. It holds that
/// request whole: its handle_request with its callees in exact counts (parse 1, lookup 3,
/// hash 150, respond 1). Most of the other requests are not in it.
fn a_slow_request_of_a_server_fires_one_snapshot(arch: Arch) {
    let dir = workdir(&format!("ring-server-{}", arch.name));
    let exe = build_c(arch, &dir, "server.c", &[], Link::Preload);
    let trace = dir.join("trace");
    let t = trace.display().to_string();
    let env = ring_env(
        arch,
        &t,
        &[
            ("INSTRFN_TRIGGER", "handle_request>30ms"),
            ("INSTRFN_RING", "1M"),
        ],
    );
    let out = run_within(
        &mut ring_command(arch, &exe, &["4", "2500"], &env, &dir),
        300,
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "handled 10000");
    let fired = trigger_snapshots(&trace);
    assert_eq!(fired.len(), 1, "{}: {fired:?}", arch.name);
    let (tid, ns, whole, pattern) = trigger_line(&fired[0]);
    assert_eq!(
        (whole.as_str(), pattern.as_str()),
        ("whole", "handle_request")
    );
    assert!(ns >= 100_000_000, "{}: {ns} ns", arch.name);
    let p = instrfn_dump(&fired[0]).remove(0);
    let events = &p.threads[&tid];
    // The slow call: the handle_request whose exit comes 100 ms or more after its entry.
    let mut open = Vec::new();
    let mut slow = None;
    for (i, e) in events.iter().enumerate() {
        match e.kind.as_str() {
            "entry" => open.push(i),
            "exit" => {
                if let Some(j) = open.pop()
                    && e.name == "handle_request"
                    && e.ns - events[j].ns >= 100e6
                {
                    slow = Some((j, i));
                }
            }
            _ => {}
        }
    }
    let (a, b) = slow.unwrap_or_else(|| panic!("{}: no 100 ms handle_request", arch.name));
    assert_eq!(events[a].name, "handle_request");
    let count = |name: &str| {
        events[a..=b]
            .iter()
            .filter(|e| e.kind == "entry" && e.name == name)
            .count()
    };
    assert_eq!(
        [
            count("parse"),
            count("lookup"),
            count("hash"),
            count("respond")
        ],
        [1, 3, 150, 1],
        "{}",
        arch.name
    );
    let requests: usize = p
        .threads
        .values()
        .flatten()
        .filter(|e| e.kind == "entry" && e.name == "handle_request")
        .count();
    assert!(
        requests < 5000,
        "{}: {requests} of 10000 requests in the snapshot",
        arch.name
    );
}
