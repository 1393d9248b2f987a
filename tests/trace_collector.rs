//! The collector thread and the trace files: the collector prepares chunks ahead and commits
//! full ones, and the trace is the same without it (each thread then maps and commits its
//! own); it runs at its nice value; it makes way for unshare(CLONE_NEWUSER), which needs a
//! process of one thread; the trace files survive a program that closes every descriptor; and
//! 256 threads on 2 CPUs are traced exactly, in files bounded by the threads, not the trace.

#[macro_use]
mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

feature_tests! {
    trace_collector:
    prepares_chunks_and_is_optional(x86_64),
    files_survive_a_program_that_closes_every_descriptor(x86_64),
    makes_way_for_unshare_of_a_user_namespace(x86_64),
    runs_at_its_nice_value(x86_64),
    many_threads_on_two_cpus(x86_64),
}

/// The `collector` line of a meta file: (tid, cpu ns, chunks threads took from its pool, chunks
/// they prepared themselves).
fn collector_line(meta: &Path) -> (u32, u64, u64, u64) {
    let text = std::fs::read_to_string(meta).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("collector "))
        .unwrap_or_else(|| panic!("{}: no collector line:\n{text}", meta.display()));
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().unwrap())
        .collect();
    (v[0] as u32, v[1], v[2], v[3])
}

/// The collector thread prepares chunks ahead (at the threads' nice value, at least one);
/// the trace is the same with it and without it (INSTRFN_COLLECTOR=off: each thread maps its
/// own), exact, and the collector is no thread of the trace. Chunks it prepared that nobody
/// took give their blocks back at exit. A fork child starts a collector of its own.
fn prepares_chunks_and_is_optional(arch: Arch) {
    use std::os::unix::fs::MetadataExt;
    let dir = workdir("trace-collector");
    let exe = build_c(arch, &dir, "threads.c", &[], Link::Preload);
    const T: u64 = 2;
    const N: u64 = 100_000;
    const CHUNK: u64 = 64 << 10;
    // work_a and work_b per iteration, each worker, main: an entry and an exit each.
    let expected = 2 * (2 * T * N + T + 1);
    // The collector at the threads' priority (INSTRFN_COLLECTOR_NICE=0), so that it gets CPU
    // time on a busy machine; at its default nice 19 it may leave all the work to the threads
    // there, which must give the same trace.
    // On one CPU that both threads keep busy, the collector at nice 19 gets almost no time:
    // the threads find the pool empty and commit the chunks waiting for it themselves, so the
    // staging file stays small (checked below).
    for (collector, nice, one_cpu) in [
        ("on", "0", false),
        ("on", "19", false),
        ("off", "0", false),
        ("on", "19", true),
    ] {
        let context = format!(
            "INSTRFN_COLLECTOR={collector} INSTRFN_COLLECTOR_NICE={nice}{}",
            if one_cpu { ", one CPU" } else { "" }
        );
        // At nice 0 the collector prepares chunks ahead, unless the host gave it no CPU time
        // before the threads needed them: such a run is checked whole all the same and tried
        // again, up to 3 times, each run's figures in the failure message.
        let mut attempts = Vec::new();
        loop {
            let (out, trace) = record_trace_on(
                &exe,
                &["2", "100000"],
                &[
                    ("INSTRFN_BUFSIZE", "65536"),
                    ("INSTRFN_COLLECTOR", collector),
                    ("INSTRFN_COLLECTOR_NICE", nice),
                ],
                &dir,
                one_cpu,
            );
            let summary = stderr_of(&out);
            assert!(
                summary.contains(&format!(
                    "instrfn: {expected} events, 3 threads, 1 process, 0 lost"
                )),
                "{context}: {summary}"
            );
            // Chunks with events: committed to the events file, or still in the staging file
            // (the threads' last ones, and retired ones not yet committed at exit).
            let events = &trace_files(&trace, ".events")[0];
            let stage = &trace_files(&trace, ".stage")[0];
            // (slot, sequence number) of each chunk with events; the process may exit while the
            // collector commits one, which is then in both files (readers take it once).
            let chunks_in = |f: &Path| -> std::collections::BTreeSet<(u32, u64)> {
                std::fs::read(f)
                    .unwrap()
                    .chunks(CHUNK as usize)
                    .filter(|c| c.starts_with(b"IFNCHNK1"))
                    .map(|c| {
                        (
                            u32::from_le_bytes(c[16..20].try_into().unwrap()),
                            u64::from_le_bytes(c[24..32].try_into().unwrap()),
                        )
                    })
                    .collect()
            };
            let (in_events, in_stage) = (chunks_in(events), chunks_in(stage));
            let committed = in_events.len() as u64;
            let staged = in_stage.difference(&in_events).count() as u64;
            let used = committed + staged;
            assert!(
                in_stage.intersection(&in_events).count() <= 1,
                "{context}: chunks in both files"
            );
            // Events take 16 bytes in a version 1 chunk, at least 8 in a version 2 (compact) one,
            // at least 4 in a version 3 one (a call word tells an entry and its exit).
            let version = std::fs::read(events).unwrap()[8];
            let least = match version {
                1 => 16,
                2 => 8,
                _ => 4,
            };
            assert!(
                used * (CHUNK - 64) >= least * expected,
                "{context}: {used} chunks (version {version})"
            );
            // At most two chunks per slot (the one filled and the one before) and the retired ones
            // the collector had not committed yet (at most 8) are left in the staging file.
            assert!(
                staged <= 2 * (T + 1) + 8 && committed >= used - 2 * (T + 1) - 8,
                "{context}: {committed} chunks committed, {staged} in the staging file"
            );
            let (tid, _cpu, prepared, by_threads) =
                collector_line(&trace_files(&trace, ".meta")[0]);
            if collector == "on" {
                assert!(tid > 0, "{context}: collector {tid} {prepared}");
                assert_eq!(
                    prepared + by_threads,
                    used,
                    "{context}: chunks prepared and used"
                );
                let meta = std::fs::read_to_string(&trace_files(&trace, ".meta")[0]).unwrap();
                assert!(
                    !meta.lines().any(|l| l.starts_with("thread ")
                        && l.split_whitespace().nth(2) == Some(&tid.to_string())),
                    "{context}: the collector shows as a thread:\n{meta}"
                );
            } else {
                assert_eq!((tid, prepared, by_threads), (0, 0, used), "{context}");
            }
            // Allocated blocks: the committed chunks (plus the file system's own); the staging
            // file holds the chunks in use at once, reused, not one per chunk of the trace: two per
            // slot, the pool (4), the retired (8) and the spares a burst left (16).
            // The collector may be in the middle of a commit when the process exits: that chunk's
            // blocks are allocated (fallocate comes first), its copy not made.
            let allocated = std::fs::metadata(events).unwrap().blocks() * 512;
            let in_flight = u64::from(collector == "on");
            assert!(
                allocated <= (committed + in_flight) * CHUNK + (64 << 10),
                "{context}: {allocated} bytes allocated for {committed} chunks of {CHUNK}"
            );
            let staging = std::fs::metadata(stage).unwrap().blocks() * 512;
            assert!(
                staging <= (2 * (T + 1) + 4 + 8 + 16) * CHUNK + (64 << 10) && staging < allocated,
                "{context}: a staging file of {staging} bytes for {used} chunks of {CHUNK}"
            );
            if one_cpu {
                // The chunks in use (two per slot), the pool the collector filled when it ran, and
                // one or two in flight: threads that map fresh chunks whenever the pool is empty,
                // and leave the retired ones to a collector that gets no CPU time, need more.
                assert!(
                    staging <= (2 * (T + 1) + 4 + 2) * CHUNK,
                    "{context}: a staging file of {} chunks of {CHUNK} (the threads did not \
                     commit the retired chunks themselves?)",
                    staging / CHUNK
                );
            }
            if collector == "off" || nice != "0" || prepared > 0 {
                break;
            }
            attempts.push(format!(
                "run {}: none of {used} chunks prepared",
                attempts.len() + 1
            ));
            assert!(attempts.len() < 3, "{context}: {attempts:?}");
        }
    }
    // fork: the child's own collector.
    let tree = build_c(arch, &dir, "tree.c", &[], Link::Preload);
    let (_, trace) = record_trace(&tree, &["forkexec", "100"], &[], &dir);
    let metas = trace_files(&trace, ".meta");
    assert_eq!(metas.len(), 2, "{metas:?}");
    let (parent, child) = (collector_line(&metas[0]).0, collector_line(&metas[1]).0);
    assert!(
        parent > 0 && child > 0 && parent != child,
        "collectors {parent} {child}"
    );
}

/// closefds.c closes every descriptor above 2 after main's entry opened the trace (a loop
/// to _SC_OPEN_MAX, and close_range), then writes a file of its own at the lowest number
/// and dup2s it to 1000-1009 (where the trace's descriptors were), runs two threads and a
/// fork child. Its file must stay exactly what it wrote and its descriptors open (in the
/// child too: a fork child closes the parent's trace descriptors, only if they are still
/// the trace's); the trace must be whole, with the collector and without (threads then
/// commit through the descriptors themselves), and say once that the files were reopened.
/// (A runtime that wrote through its old descriptor numbers would put the meta lines into the
/// program's file and lose every event after the close.)
fn files_survive_a_program_that_closes_every_descriptor(arch: Arch) {
    const N: u64 = 200_000;
    let dir = workdir("trace-closefds");
    let exe = build_c(arch, &dir, "closefds.c", &[], Link::Preload);
    for how in ["loop", "range"] {
        for collector in ["on", "off"] {
            let context = format!("closefds {how}, INSTRFN_COLLECTOR={collector}");
            let _ = std::fs::remove_file(dir.join("user.dat"));
            let (out, trace) = record_trace(
                &exe,
                &[how, &N.to_string()],
                &[
                    ("INSTRFN_BUFSIZE", "65536"),
                    ("INSTRFN_COLLECTOR", collector),
                ],
                &dir,
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains("closefds ok"), "{context}: {stdout}");
            let stderr = stderr_of(&out);
            let said: Vec<&str> = stderr
                .lines()
                .filter(|l| l.contains("descriptors of the trace files"))
                .collect();
            assert_eq!(
                said.len(),
                1,
                "{context}: said once by the parent: {stderr}"
            );
            assert!(stderr.contains(" 0 lost"), "{context}: {stderr}");
            let procs = instrfn_dump(&trace);
            assert_eq!(procs.len(), 2, "{context}: parent and child");
            // Two threads of the parent call work() N times each, the child N times.
            let work: u64 = procs
                .iter()
                .map(|p| calls_per_function(p).get("work").copied().unwrap_or(0))
                .sum();
            assert_eq!(work, 3 * N, "{context}: calls of work()");
            for p in &procs {
                assert_eq!(p.lost, 0, "{context}: {}", p.header);
                assert_balanced(p, &context);
            }
        }
    }
}

/// unshare(CLONE_NEWUSER) needs a process of one thread; with the collector thread it fails
/// with EINVAL. The wrapper ends the collector, calls again and starts it again: the
/// program gets the answer it gets without instrfn, and the trace is whole, with chunks
/// committed by the collector after it (64 KiB chunks, a collector at the threads' nice).
fn makes_way_for_unshare_of_a_user_namespace(arch: Arch) {
    const N: u64 = 100_000;
    let dir = workdir("trace-userns");
    let exe = build_c(arch, &dir, "userns.c", &[], Link::Preload);
    let plain = run_ok(Command::new(&exe).arg(N.to_string()).current_dir(&dir));
    let plain = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert!(plain.contains("unshare(CLONE_NEWUSER): "), "{plain}");
    // The collector after the unshare prepares chunks, unless the host gave it no CPU time
    // before the threads needed them: such a run is checked whole all the same and tried
    // again, up to 3 times, each run's figures in the failure message.
    let mut attempts = Vec::new();
    loop {
        let (out, trace) = record_trace(
            &exe,
            &[&N.to_string()],
            &[
                ("INSTRFN_BUFSIZE", "65536"),
                ("INSTRFN_COLLECTOR_NICE", "0"),
            ],
            &dir,
        );
        assert_eq!(stdout_of(&out), plain, "the program's output");
        let procs = instrfn_dump(&trace);
        assert_eq!(procs[0].lost, 0);
        assert_balanced(&procs[0], "userns");
        assert_eq!(calls_per_function(&procs[0]).get("work"), Some(&(4 * N)));
        let (tid, _cpu, prepared, _) = collector_line(&trace_files(&trace, ".meta")[0]);
        assert!(tid > 0, "a collector after the unshare: {tid} {prepared}");
        if prepared > 0 {
            return;
        }
        attempts.push(format!(
            "run {}: collector {tid} prepared none",
            attempts.len() + 1
        ));
        assert!(attempts.len() < 3, "{attempts:?}");
    }
}

/// The collector thread's nice value as the kernel reports it (/proc/PID/task/TID/stat,
/// field 19), read while the program sleeps: 19 by default, INSTRFN_COLLECTOR_NICE's value
/// when set, and the program's own threads untouched. Relative to the nice value this test
/// runs at, which the program inherits (only root may give the collector a lower one than
/// that).
fn runs_at_its_nice_value(arch: Arch) {
    let dir = workdir("trace-collector-nice");
    let exe = build_pg(&dir, "sleeps.c");
    let own = std::fs::read_to_string("/proc/self/stat").unwrap();
    let base: i64 = own
        .rsplit_once(") ")
        .unwrap()
        .1
        .split_whitespace()
        .nth(16)
        .unwrap()
        .parse()
        .unwrap();
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|u| u.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap();
    for (setting, wanted) in [(None, 19), (Some("5"), 5), (Some("0"), 0)] {
        let expected = if root { wanted } else { wanted.max(base) };
        let mut cmd = Command::new(&exe);
        cmd.env("LD_PRELOAD", preload_path(arch))
            .env("INSTRFN_MODE", "trace")
            .env("INSTRFN_OUTPUT", dir.join("trace"))
            .stdout(std::process::Stdio::null())
            .current_dir(&dir);
        if let Some(v) = setting {
            cmd.env("INSTRFN_COLLECTOR_NICE", v);
        }
        // (comm, nice) of every thread, read until the collector shows or the program ends.
        // A run that ended first (the host kept this test from reading in time) is tried
        // again, up to 3 times, each run's threads in the failure message.
        let mut attempts = Vec::new();
        let seen = loop {
            let mut child = cmd.spawn().unwrap();
            let task_dir = PathBuf::from(format!("/proc/{}/task", child.id()));
            let collector_shows =
                |seen: &[(String, i64)]| seen.iter().any(|(c, _)| c == "instrfn-collect");
            let seen = loop {
                let seen: Vec<(String, i64)> = std::fs::read_dir(&task_dir)
                    .map(|d| {
                        d.flatten()
                            .filter_map(|t| {
                                let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
                                let (head, rest) = stat.rsplit_once(") ")?;
                                let comm = head.split_once(" (")?.1.to_string();
                                let nice: i64 = rest.split_whitespace().nth(16)?.parse().ok()?;
                                Some((comm, nice))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if collector_shows(&seen) || child.try_wait().unwrap().is_some() {
                    break seen;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            };
            let status = child.wait().unwrap();
            assert!(status.success(), "{setting:?}: {status}");
            if collector_shows(&seen) {
                break seen;
            }
            attempts.push(format!("run {}: threads {seen:?}", attempts.len() + 1));
            assert!(
                attempts.len() < 3,
                "{setting:?}: the program ended before its collector showed: {attempts:?}"
            );
        };
        let collector: Vec<i64> = seen
            .iter()
            .filter(|(c, _)| c == "instrfn-collect")
            .map(|&(_, n)| n)
            .collect();
        assert_eq!(collector, [expected], "{setting:?}: threads {seen:?}");
        assert!(
            seen.iter()
                .filter(|(c, _)| c != "instrfn-collect")
                .all(|&(_, n)| n == base),
            "{setting:?}: threads {seen:?}"
        );
    }
}

/// threads.c with 256 threads (oversubscribed 2 CPUs), preloaded in trace mode, twice, with
/// 4 times the calls the second time: every call of every thread is in the trace (none lost,
/// every worker's events nest), and what the trace keeps besides its events is bounded by the
/// threads: the staging file holds at most a chunk per thread and the few the collector keeps,
/// whatever the trace's length, and the program's peak RSS is the staging file's and a
/// thread's few pages each, not the events file's.
fn many_threads_on_two_cpus(arch: Arch) {
    const T: u64 = 256;
    const CHUNK: u64 = 16 << 10;
    let dir = workdir("many-threads");
    let exe = build_c(arch, &dir, "threads.c", &[], Link::Preload);
    for n in [1_000u64, 4_000] {
        let trace = dir.join(format!("trace-{n}"));
        let _ = std::fs::remove_dir_all(&trace);
        let out = run_ok(
            Command::new("/usr/bin/time")
                .args(["-f", "maxrss %M", "env"])
                .arg(format!("LD_PRELOAD={}", preload_path(arch)))
                .arg("INSTRFN_MODE=trace")
                .arg(format!("INSTRFN_BUFSIZE={CHUNK}"))
                .arg(format!("INSTRFN_OUTPUT={}", trace.display()))
                .arg(&exe)
                .args([T.to_string(), n.to_string()])
                .current_dir(&dir),
        );
        let context = format!("{T} threads x {n}");
        let p = one_process(arch, &trace, &context);
        assert_eq!(p.lost, 0, "{context}");
        let counts = assert_balanced(&p, &context);
        assert_counts(
            &counts,
            &[
                ("entry", "work_a", T * n),
                ("exit", "work_b", T * n),
                ("exit", "worker", T),
            ],
            &context,
        );
        let size = |suffix: &str| -> u64 {
            trace_files(&trace, suffix)
                .iter()
                .map(|f| std::fs::metadata(f).unwrap().len())
                .sum()
        };
        let (stage, events) = (size(".stage"), size(".events"));
        // A chunk per thread at most, main's, and the collector's pool, spares and retired.
        let bound = (T + 1 + 4 + 16 + 8) * CHUNK;
        assert!(
            stage <= bound,
            "{context}: staging file {stage} bytes, more than {bound} (events file {events})"
        );
        let rss_kib: u64 = stderr_of(&out)
            .lines()
            .find_map(|l| l.strip_prefix("maxrss "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{context}: no maxrss line: {}", stderr_of(&out)));
        // The staging file's pages, and 256 KiB a thread for its stack, shadow stack and
        // tables, and the program and runtime themselves.
        let rss_bound = (stage + T * (256 << 10)) / 1024 + 64 * 1024;
        assert!(
            rss_kib <= rss_bound,
            "{context}: peak RSS {rss_kib} KiB, more than {rss_bound} KiB (staging {stage} bytes, \
             events {events} bytes)"
        );
    }
}
