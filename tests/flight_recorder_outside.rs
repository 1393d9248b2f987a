//! Snapshots of the flight recorder taken from outside the program (`instrfn snapshot DIR`,
//! docs/trace-format.md, "Rings"): while it runs, after SIGKILL, after it exited; how
//! `report`, `export` and `dump` read a ring-mode trace; `instrfn record --ring`;
//! `instrfn snapshot --watch` (flight_recorder_outside/watch.rs).
//! tests/fixtures/c/ring.c makes a known call shape on T threads (`spin`: forever).
//!
//! Each snapshot is checked twice: through `instrfn dump` (every worker's window is whole
//! rounds of ring.c's call shape, cut only at its two ends, its times never going back), and
//! byte by byte by the tests' own parser (common/raw_trace.rs: each ring's chunks follow each
//! other with no gap, as its `window` line says, and the `complete` line counts them).

#[macro_use]
mod common;

use common::*;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

feature_tests! {
    flight_recorder_outside:
    snapshots_of_a_running_program_hold_no_torn_chunk(x86_64),
    after_sigkill_the_rings_hold_the_last_calls(x86_64),
    outside_snapshot_of_a_finished_run_equals_the_exit_snapshot(x86_64, s390x),
    fork_children_each_get_their_files_in_one_snapshot(x86_64),
    reading_a_ring_trace_takes_its_newest_snapshot(x86_64),
    bad_directories_get_one_line(x86_64),
    record_with_a_ring(x86_64),
    record_without_the_exit_snapshot(x86_64),
    watch_lists_snapshots_as_they_come(x86_64),
    a_deadlock_snapshotted_from_outside_shows_where_threads_wait(x86_64, aarch64),
}

#[path = "flight_recorder_outside/watch.rs"]
mod watch;
use watch::{record_without_the_exit_snapshot, watch_lists_snapshots_as_they_come};

/// One round of a worker of ring.c: (kind, function).
const ROUND: [(&str, &str); 6] = [
    ("entry", "outer"),
    ("entry", "inner_a"),
    ("exit", "inner_a"),
    ("entry", "inner_b"),
    ("exit", "inner_b"),
    ("exit", "outer"),
];

/// What a worker of ring.c does after its rounds when it ends with `exit`.
const DONE: &[(&str, &str)] = &[("entry", "done"), ("exit", "done"), ("exit", "worker")];

/// Generous: a guard against a hang, never a measure.
const DEADLINE: Duration = Duration::from_secs(180);

/// ring.c built for `arch` (-pg, preloaded) in a fresh work directory.
fn ring_fixture(arch: Arch, name: &str) -> (PathBuf, PathBuf) {
    let dir = workdir(&format!("ring-outside-{name}-{}", arch.name));
    let exe = build_c(arch, &dir, "ring.c", &[], Link::Preload);
    (dir, exe)
}

/// ring.c run for `arch` in ring mode into `trace`, with `extra` environment after that.
fn ring_command(
    arch: Arch,
    exe: &Path,
    args: &[&str],
    trace: &Path,
    extra: &[(&str, &str)],
) -> Command {
    let preload = preload_path(arch);
    let t = trace.display().to_string();
    let mut env = vec![
        ("LD_PRELOAD", preload.as_str()),
        ("INSTRFN_MODE", "ring"),
        ("INSTRFN_OUTPUT", t.as_str()),
    ];
    env.extend_from_slice(extra);
    command(arch, exe, args, &env, trace.parent().unwrap())
}

/// A program running in `spin` mode, killed when dropped (a failed test leaves no spinner).
struct Spinner(Child);

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts ring.c with T workers spinning and waits for its "ready".
fn spin(arch: Arch, exe: &Path, threads: &str, trace: &Path, extra: &[(&str, &str)]) -> Spinner {
    start_ready(arch, exe, &[threads, "0", "spin"], trace, extra)
}

/// Starts ring.c with `args` (spin or hang) and waits for its "ready".
fn start_ready(
    arch: Arch,
    exe: &Path,
    args: &[&str],
    trace: &Path,
    extra: &[(&str, &str)],
) -> Spinner {
    let mut child = ring_command(arch, exe, args, trace, extra)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    read_ready(&mut child);
    Spinner(child)
}

/// `instrfn ARGS…`, whatever its status.
fn instrfn(args: &[&str], dir: &Path) -> Output {
    run(Command::new(instrfn_cli()).args(args).arg(dir))
}

/// What `instrfn snapshot` said: the snapshot's directory, chunks kept, chunks dropped.
struct Taken {
    dir: PathBuf,
    chunks: u64,
    dropped: u64,
}

/// `instrfn snapshot DIR extra…`, checked to succeed with its one line.
fn take(trace: &Path, extra: &[&str]) -> Taken {
    let out = run_ok(
        Command::new(instrfn_cli())
            .arg("snapshot")
            .arg(trace)
            .args(extra),
    );
    let line = stdout_of(&out);
    assert_eq!(line.lines().count(), 1, "{line}");
    // snapshot DIR/snapshots/N: T threads, K chunks, D chunks rewritten during the copy
    let (dir, rest) = line
        .trim()
        .strip_prefix("snapshot ")
        .and_then(|l| l.split_once(": "))
        .unwrap_or_else(|| panic!("{line}"));
    let n = numbers_of(rest);
    assert!(
        rest.ends_with("chunks rewritten during the copy") && n.len() == 3,
        "{line}"
    );
    Taken {
        dir: PathBuf::from(dir),
        chunks: n[1],
        dropped: n[2],
    }
}

/// A snapshot's meta files, one after the other.
fn snapshot_meta(snap: &Path) -> String {
    meta_text(snap)
}

/// A snapshot's `window` lines: (slot, tid, first, last, wraps, dropped), by slot.
fn windows(snap: &Path) -> Vec<[u64; 6]> {
    let mut w: Vec<[u64; 6]> = snapshot_meta(snap)
        .lines()
        .filter_map(|l| l.strip_prefix("window "))
        .map(|l| {
            let n: Vec<u64> = l.split(' ').map(|w| w.parse().unwrap()).collect();
            n.try_into().unwrap()
        })
        .collect();
    w.sort();
    w
}

/// Checks what every snapshot must be, byte by byte (common/raw_trace.rs, not the reader):
/// one `snapshot` line of `reason` and a `complete` line last in each meta file; each ring's
/// chunks are exactly its window's sequence numbers, first to last with no gap, in the byte
/// order `little_endian`; the events files hold the chunks `complete` counts, and only them.
fn assert_snapshot(snap: &Path, reason: &str, little_endian: bool) {
    let context = snap.display().to_string();
    for meta in trace_files(snap, ".meta") {
        let text = std::fs::read_to_string(&meta).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("instrfn-trace "), "{context}: {text}");
        let snapshot: Vec<&&str> = lines
            .iter()
            .filter(|l| l.starts_with("snapshot "))
            .collect();
        assert_eq!(snapshot.len(), 1, "{context}: {text}");
        let s: Vec<&str> = snapshot[0].split(' ').collect();
        assert_eq!((s.len(), s[1]), (4, reason), "{context}: {text}");
        assert!(s[2].starts_with("0x"), "{context}: {text}");
        let kept: u64 = lines
            .last()
            .and_then(|l| l.strip_prefix("complete "))
            .unwrap_or_else(|| panic!("{context}: no complete line last: {text}"))
            .parse()
            .unwrap();
        let chunk: u64 = lines
            .iter()
            .find_map(|l| l.strip_prefix("ring "))
            .and_then(|l| l.split(' ').nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("{context}: no ring line: {text}"));
        let events = meta.with_extension("events");
        assert_eq!(
            std::fs::metadata(&events).unwrap().len(),
            kept * chunk,
            "{context}: {}",
            events.display()
        );
    }
    let mut by_slot: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let chunks = raw_chunks(snap);
    for c in &chunks {
        assert_eq!(c.little_endian, little_endian, "{context}: byte order");
        by_slot.entry(c.slot).or_default().push(c.seq);
    }
    let mut windowed = 0;
    // One image per snapshot here, but for fork_children: raw_chunks merges images, so the
    // check per slot holds for single-image snapshots only.
    if trace_files(snap, ".meta").len() == 1 {
        for w in windows(snap) {
            let mut seqs = by_slot.remove(&(w[0] as u32)).unwrap_or_default();
            seqs.sort();
            windowed += seqs.len();
            if seqs.is_empty() {
                assert_eq!((w[2], w[3]), (0, 0), "{context}: window {w:?}");
            } else {
                assert_eq!(
                    seqs,
                    (w[2]..=w[3]).collect::<Vec<u64>>(),
                    "{context}: window {w:?}: its chunks"
                );
            }
        }
        assert!(
            by_slot.is_empty(),
            "{context}: chunks of no window: {by_slot:?}"
        );
        assert_eq!(windowed, chunks.len(), "{context}");
    }
}

/// A worker's window: ring.c's rounds over and over, cut anywhere at both ends (the
/// window's first events are in the middle of a round, its last ones where the snapshot
/// or the kill caught the thread), maybe led by the worker's own entry, then `tail` (what
/// the worker did after its rounds); times never go backwards. Returns how many events are
/// in rounds.
fn assert_rounds(events: &[DumpEvent], tail: &[(&str, &str)], context: &str) -> usize {
    for w in events.windows(2) {
        assert!(w[0].ns <= w[1].ns, "{context}: time goes backwards: {w:?}");
    }
    let mut pairs: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.kind.as_str(), e.name.as_str()))
        .collect();
    assert!(pairs.ends_with(tail), "{context}: the tail of {pairs:?}");
    pairs.truncate(pairs.len() - tail.len());
    if pairs.first() == Some(&("entry", "worker")) {
        pairs.remove(0);
    }
    let Some(first) = pairs.first() else {
        return 0;
    };
    let phase = ROUND
        .iter()
        .position(|r| r == first)
        .unwrap_or_else(|| panic!("{context}: the window starts with {first:?}"));
    if let Some(i) = (0..pairs.len()).find(|&i| pairs[i] != ROUND[(phase + i) % ROUND.len()]) {
        panic!(
            "{context}: event {i} of {} breaks the rounds: {:?}",
            pairs.len(),
            &pairs[i.saturating_sub(6)..(i + 6).min(pairs.len())]
        );
    }
    pairs.len()
}

/// The workers' windows of a snapshot (the threads that called `outer`), by tid, after
/// checking their rounds and `tail`; `instrfn dump` must read it.
fn worker_windows(
    snap: &Path,
    tail: &[(&str, &str)],
    context: &str,
) -> BTreeMap<u32, Vec<DumpEvent>> {
    let mut workers = BTreeMap::new();
    for p in instrfn_dump(snap) {
        for (tid, events) in p.threads {
            if events.iter().any(|e| e.name == "outer") {
                assert_rounds(&events, tail, &format!("{context}, tid {tid}"));
                workers.insert(tid, events);
            }
        }
    }
    workers
}

/// 200 snapshots taken while 4 workers spin (tiny rings, rewritten every few µs, and the
/// default ones, whose newest chunk grows during the copy): each one reads, each worker's
/// window is whole rounds with no gap, and the chunks kept are exactly the windows'. Chunks
/// rewritten during a copy are left out, never kept torn.
fn snapshots_of_a_running_program_hold_no_torn_chunk(arch: Arch) {
    for (ring, takes) in [("64K", 200), ("4M", 12)] {
        let (dir, exe) = ring_fixture(arch, &format!("spin-{ring}"));
        let trace = dir.join("trace");
        let _spinner = spin(arch, &exe, "4", &trace, &[("INSTRFN_RING", ring)]);
        let (mut kept, mut dropped, mut full) = (0, 0, 0);
        let deadline = Instant::now() + DEADLINE;
        for i in 0..takes {
            let taken = take(&trace, &[]);
            assert_snapshot(&taken.dir, "outside", cfg!(target_endian = "little"));
            let context = format!("{ring} ring, snapshot {i}");
            let workers = worker_windows(&taken.dir, &[], &context);
            (kept, dropped) = (kept + taken.chunks, dropped + taken.dropped);
            // The workers may not have run yet (a loaded machine): snapshots go on until
            // all four have.
            if workers.len() == 4 && workers.values().all(|w| w.len() > ROUND.len()) {
                full += 1;
            }
        }
        eprintln!("{ring} rings: {takes} snapshots, {kept} chunks kept, {dropped} dropped");
        let mut extra = 0;
        while full == 0 {
            let taken = take(&trace, &[]);
            assert_snapshot(&taken.dir, "outside", cfg!(target_endian = "little"));
            if worker_windows(&taken.dir, &[], &format!("{ring} ring, extra {extra}")).len() == 4 {
                full += 1;
            }
            extra += 1;
            assert!(
                Instant::now() < deadline,
                "{ring}: the workers never all ran"
            );
        }
    }
}

/// Ring.c's 3 workers spin until SIGKILL; then `instrfn snapshot` copies rings nobody
/// writes: no chunk is dropped (but one the kill caught being rewritten), every worker's
/// window ends in its last calls, later than a snapshot taken just before the kill, and a
/// second snapshot holds exactly the same events.
fn after_sigkill_the_rings_hold_the_last_calls(arch: Arch) {
    let (dir, exe) = ring_fixture(arch, "kill");
    let trace = dir.join("trace");
    let mut spinner = spin(arch, &exe, "3", &trace, &[("INSTRFN_RING", "256K")]);
    // Until every worker's ring went round.
    let deadline = Instant::now() + DEADLINE;
    let before = loop {
        let taken = take(&trace, &[]);
        let w = windows(&taken.dir);
        if w.iter().filter(|w| w[4] > 0).count() == 3 {
            break worker_windows(&taken.dir, &[], "before the kill");
        }
        assert!(
            Instant::now() < deadline,
            "the rings never went round: {w:?}"
        );
    };
    spinner.0.kill().unwrap();
    spinner.0.wait().unwrap();
    let after = take(&trace, &[]);
    assert_snapshot(&after.dir, "outside", cfg!(target_endian = "little"));
    for w in windows(&after.dir) {
        assert!(w[5] <= 1, "window {w:?}: dropped with no writer");
        if w[4] > 0 {
            assert_eq!(w[3] - w[2] + 1 + w[5], 16, "window {w:?}: every chunk kept");
        }
    }
    let workers = worker_windows(&after.dir, &[], "after the kill");
    assert_eq!(workers.len(), 3, "{:?}", workers.keys());
    for (tid, events) in &workers {
        let last_before = before[tid].last().unwrap().ns;
        assert!(
            events.last().unwrap().ns > last_before,
            "tid {tid}: the window after the kill ends before the snapshot before it"
        );
    }
    let again = take(&trace, &[]);
    let mut same = worker_windows(&again.dir, &[], "again");
    for (tid, events) in workers {
        assert_eq!(
            same.remove(&tid),
            Some(events),
            "tid {tid}: two snapshots differ"
        );
    }
}

/// A run to its end with 64 KiB rings and the exit snapshot: `instrfn snapshot` afterwards
/// holds the same windows and events as the runtime's own snapshot; with the exit snapshot
/// off it is the only one. On s390x the rings, and so the snapshots, are big-endian.
fn outside_snapshot_of_a_finished_run_equals_the_exit_snapshot(arch: Arch) {
    let (dir, exe) = ring_fixture(arch, "finished");
    let little = arch.name != "s390x";
    let trace = dir.join("trace");
    let args = ["3", "20000", "exit"];
    run_within(
        &mut ring_command(arch, &exe, &args, &trace, &[("INSTRFN_RING", "64K")]),
        300,
    );
    let exit = trace.join("snapshots/1");
    assert_snapshot(&exit, "exit", little);
    let outside = take(&trace, &[]);
    assert_eq!(outside.dir, trace.join("snapshots/2"));
    assert_eq!(outside.dropped, 0);
    assert_snapshot(&outside.dir, "outside", little);
    assert_eq!(windows(&outside.dir), windows(&exit));
    // Workers that ran one after the other share a slot, and so a ring.
    let ours = worker_windows(&outside.dir, DONE, arch.name);
    assert!(!ours.is_empty(), "{}", arch.name);
    // The same events; their ns may differ if the two meta files pace the counter by
    // different clock lines.
    let calls = |w: BTreeMap<u32, Vec<DumpEvent>>| -> Vec<(u32, Vec<(String, String)>)> {
        w.into_iter()
            .map(|(tid, ev)| (tid, ev.into_iter().map(|e| (e.kind, e.name)).collect()))
            .collect()
    };
    assert_eq!(calls(ours), calls(worker_windows(&exit, DONE, arch.name)));

    let trace = dir.join("off");
    run_within(
        &mut ring_command(
            arch,
            &exe,
            &args,
            &trace,
            &[("INSTRFN_RING", "64K"), ("INSTRFN_EXIT_SNAPSHOT", "off")],
        ),
        300,
    );
    assert!(!trace.join("snapshots").exists());
    let taken = take(&trace, &[]);
    assert_eq!(taken.dir, trace.join("snapshots/1"));
    assert_snapshot(&taken.dir, "outside", little);
    assert!(
        snapshot_meta(&taken.dir).contains("\nring 65536 4096 16\n"),
        "{}",
        snapshot_meta(&taken.dir)
    );
    let w = windows(&taken.dir);
    assert!(w.len() >= 2, "{w:?}");
    for w in w.iter().filter(|w| w[4] > 0) {
        assert_eq!((w[3] - w[2], w[5]), (15, 0), "{}: {w:?}", arch.name);
    }
    assert!(!worker_windows(&taken.dir, DONE, arch.name).is_empty());
}

/// A parent and its fork child, both ended without exit snapshots: one outside snapshot
/// holds both images' files, the child's 100 child_work calls in its own; --pid takes one
/// process only, and a pid without rings is one line of error.
fn fork_children_each_get_their_files_in_one_snapshot(arch: Arch) {
    let (dir, exe) = ring_fixture(arch, "fork");
    let trace = dir.join("trace");
    let out = run_within(
        &mut ring_command(
            arch,
            &exe,
            &["1", "1000", "fork"],
            &trace,
            &[("INSTRFN_EXIT_SNAPSHOT", "off")],
        ),
        300,
    );
    let child: u32 = stdout_of(&out)
        .split_whitespace()
        .nth(1)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("{}", stdout_of(&out)));
    let both = take(&trace, &[]);
    assert_eq!(trace_files(&both.dir, ".meta").len(), 2);
    assert_eq!(trace_files(&both.dir, ".events").len(), 2);
    assert_snapshot(&both.dir, "outside", true);
    let procs = instrfn_dump(&both.dir);
    assert_eq!(procs.len(), 2);
    let mut calls: Vec<(usize, usize)> = procs
        .iter()
        .map(|p| {
            let c = dump_counts(p);
            let n = |name: &str| c.get(&("entry".into(), name.into())).copied().unwrap_or(0);
            (n("child_work"), n("outer"))
        })
        .collect();
    calls.sort();
    assert_eq!(calls, [(0, 1000), (100, 0)]);
    let one = take(&trace, &["--pid", &child.to_string()]);
    let metas = trace_files(&one.dir, ".meta");
    assert_eq!(metas.len(), 1);
    assert!(
        metas[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&format!("{child}."))
    );
    let none = instrfn(&["snapshot", "--pid", "1"], &trace);
    assert!(!none.status.success());
    assert_eq!(stderr_of(&none).lines().count(), 1, "{}", stderr_of(&none));
    assert!(
        stderr_of(&none).contains("no ring file of pid 1"),
        "{}",
        stderr_of(&none)
    );
}

/// `report`, `export` and `dump` of a ring-mode trace: without a complete snapshot, one line
/// that says how to take one; then they read the newest complete snapshot, saying which on
/// stderr (one being written, without its `complete` line, is passed over).
fn reading_a_ring_trace_takes_its_newest_snapshot(arch: Arch) {
    let (dir, exe) = ring_fixture(arch, "read");
    let trace = dir.join("trace");
    run_within(
        &mut ring_command(
            arch,
            &exe,
            &["2", "1000", "exit"],
            &trace,
            &[("INSTRFN_EXIT_SNAPSHOT", "off")],
        ),
        300,
    );
    let t = trace.display().to_string();
    for cmd in [
        &["report"][..],
        &["dump"],
        &["export", "--format", "folded"],
    ] {
        let out = instrfn(cmd, &trace);
        assert!(!out.status.success(), "{cmd:?}");
        assert_eq!(
            stderr_of(&out),
            format!(
                "instrfn: {t} is a ring-mode trace: take a snapshot with instrfn snapshot {t}\n"
            ),
            "{cmd:?}"
        );
    }
    let first = take(&trace, &[]);
    let second = take(&trace, &[]);
    // A third one cut short: no complete line.
    let cut = trace.join("snapshots/3");
    std::fs::create_dir(&cut).unwrap();
    let meta = trace_files(&second.dir, ".meta").remove(0);
    let text = std::fs::read_to_string(&meta).unwrap();
    let name = meta.file_name().unwrap();
    std::fs::write(cut.join(name), &text[..text.find("complete").unwrap()]).unwrap();
    std::fs::write(cut.join(name).with_extension("events"), b"").unwrap();
    for cmd in [
        &["report"][..],
        &["dump"],
        &["export", "--format", "folded"],
    ] {
        let out = instrfn(cmd, &trace);
        assert!(out.status.success(), "{cmd:?}: {}", stderr_of(&out));
        assert_eq!(
            stderr_of(&out),
            format!(
                "instrfn: {t} is a ring-mode trace: reading its newest snapshot, {} (outside)\n",
                second.dir.display()
            ),
            "{cmd:?}"
        );
    }
    let (rows, _) = report_calls(&trace);
    assert_eq!(calls_in(&rows, "outer"), 2000);
    let folded = stdout_of(&instrfn(&["export", "--format", "folded"], &trace));
    assert!(folded.contains("worker;outer;inner_a"), "{folded}");
    // The plain trace reads as before; so does a snapshot given itself.
    assert!(instrfn(&["report"], &first.dir).status.success());
    assert!(stderr_of(&instrfn(&["report"], &first.dir)).is_empty());
}

/// `instrfn snapshot` of what is not a ring-mode trace: one line naming the problem, a
/// non-zero status, never a panic.
fn bad_directories_get_one_line(arch: Arch) {
    let (dir, exe) = ring_fixture(arch, "bad");
    let one_line = |target: &Path, expected: &str| {
        let out = instrfn(&["snapshot"], target);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("instrfn: ") && err.contains(expected),
            "{err}"
        );
    };
    one_line(&dir.join("missing"), "no such trace directory");
    let plain = dir.join("plain");
    run_within(
        &mut command(
            arch,
            &exe,
            &["1", "10", "exit"],
            &[
                ("LD_PRELOAD", &preload_path(arch)),
                ("INSTRFN_MODE", "trace"),
                ("INSTRFN_OUTPUT", &plain.display().to_string()),
            ],
            &dir,
        ),
        300,
    );
    one_line(&plain, "is not a ring-mode trace");
    let fake = dir.join("fake");
    std::fs::create_dir_all(&fake).unwrap();
    std::fs::write(fake.join("1.1.ring"), b"").unwrap();
    one_line(&fake, "no ring is written yet");
    std::fs::write(fake.join("1.1.ring"), [b'x'; 4096]).unwrap();
    one_line(&fake, "not an instrfn ring file");
    let mut header = vec![0u8; 4096];
    header[..8].copy_from_slice(b"IFNRINGS");
    header[8..12].copy_from_slice(&7u32.to_le_bytes());
    std::fs::write(fake.join("1.1.ring"), &header).unwrap();
    one_line(&fake, "unknown ring file version");
    header[8..12].copy_from_slice(&1u32.to_le_bytes());
    header[12..16].copy_from_slice(&4096u32.to_le_bytes());
    header[16..20].copy_from_slice(&16u32.to_le_bytes());
    header[24..32].copy_from_slice(&12345u64.to_le_bytes());
    std::fs::write(fake.join("1.1.ring"), &header).unwrap();
    one_line(&fake, "corrupt ring file header");
}

/// `instrfn record --ring=SIZE --snapshot-signal USR2`: the program's rings are that size,
/// the signal takes a snapshot, and at the end record sums up the exit snapshot. Options that
/// do not go together are one line of error before anything runs.
fn record_with_a_ring(arch: Arch) {
    let (dir, exe) = ring_fixture(arch, "record");
    let trace = dir.join("trace");
    let record = |args: &[&str]| {
        let mut cmd = Command::new(instrfn_cli());
        cmd.arg("record")
            .arg("-o")
            .arg(&trace)
            .args(args)
            .arg(&exe)
            .current_dir(&dir);
        cmd
    };
    let out = run_within(record(&["--ring=64K"]).args(["2", "5000", "exit"]), 300);
    let err = stderr_of(&out);
    assert!(
        err.contains("instrfn: exit snapshot: ") && err.contains("snapshots/1"),
        "{err}"
    );
    assert!(meta_text(&trace).contains("\nring 65536 4096 16\n"));
    // --trigger implies ring mode; five slow calls, each snapshot allowed.
    let out = run_within(
        record(&["--trigger", "slow_call>5ms", "--trigger-limit", "1000"])
            .args(["2", "20000", "slow5"]),
        300,
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let triggered = std::fs::read_dir(trace.join("snapshots"))
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_dir(e.path()).unwrap().flatten().any(|f| {
                std::fs::read_to_string(f.path()).is_ok_and(|m| m.contains("\nsnapshot trigger "))
            })
        })
        .count();
    assert_eq!(triggered, 5, "{}", stderr_of(&out));
    // Again: the previous recording's rings and snapshots go.
    let mut child = record(&["--ring", "--snapshot-signal", "USR2"])
        .args(["3", "1000", "hang"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    read_ready(&mut child);
    assert!(!trace.join("snapshots/1").exists());
    assert!(meta_text(&trace).contains("\nring 4194304 262144 16\n"));
    let pid: i32 = trace_files(&trace, ".meta")[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .split('.')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // SAFETY: kill(2) of the program record runs.
    unsafe { libc::kill(pid, libc::SIGUSR2) };
    let deadline = Instant::now() + DEADLINE;
    let snap = trace.join("snapshots/1");
    while !std::fs::read_to_string(snap.join(format!("{pid}.1.meta")))
        .is_ok_and(|m| m.contains("\ncomplete "))
    {
        assert!(Instant::now() < deadline, "no snapshot on USR2");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_snapshot(&snap, "signal", true);
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let out = child.wait_with_output().unwrap();
    let err = stderr_of(&out);
    assert!(err.contains("instrfn: signal snapshot: "), "{err}");

    for (args, expected) in [
        (
            &["--ring", "--mode", "gmon"][..],
            "--ring and --trigger record in ring mode",
        ),
        (
            &["--mode", "trace", "--trigger", "f>1ms"],
            "--ring and --trigger record in ring mode",
        ),
        (&["--trigger", "slow_call"], "is not PATTERN>DURATION"),
        (&["--trigger", "slow call>1ms"], "without blanks"),
        (&["--trigger", "f>5 parsecs"], "unknown unit"),
        (
            &["--ring", "--trigger-limit", "5"],
            "--trigger-limit goes with --trigger",
        ),
        (&["--ring=12"], "a size from 64K to 1G"),
        (&["--ring=2G"], "a size from 64K to 1G"),
        (
            &["--snapshot-signal", "USR2"],
            "--snapshot-signal is for ring mode",
        ),
        (&["--ring", "--snapshot-signal", "KILL"], "a signal such as"),
    ] {
        let out = run(record(args).args(["1", "1", "exit"]));
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A deadlocked program (ring.c `hang`: 3 workers block in wait_here for good): snapshots
/// from outside, taken until every worker got there, show each worker's window ending in the
/// call where it waits, still open. The program goes on waiting meanwhile.
fn a_deadlock_snapshotted_from_outside_shows_where_threads_wait(arch: Arch) {
    let (dir, exe) = ring_fixture(arch, "deadlock");
    let trace = dir.join("trace");
    let _program = start_ready(arch, &exe, &["3", "1000", "hang"], &trace, &[]);
    let deadline = Instant::now() + DEADLINE;
    let tail = [("entry", "done"), ("exit", "done"), ("entry", "wait_here")];
    loop {
        let taken = take(&trace, &[]);
        let waiting = instrfn_dump(&taken.dir)
            .iter()
            .flat_map(|p| p.threads.values())
            .filter(|ev| {
                ev.last()
                    .is_some_and(|e| e.kind == "entry" && e.name == "wait_here")
            })
            .count();
        if waiting == 3 {
            let workers = worker_windows(&taken.dir, &tail, arch.name);
            assert_eq!(workers.len(), 3, "{}", arch.name);
            assert_eq!(taken.dropped, 0, "{}: nothing writes", arch.name);
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{}: the workers never all waited",
            arch.name
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
