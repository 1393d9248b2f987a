//! Limits and losses: a full arc table, a trace limit far below what the program makes, a
//! file system too small for the trace, RLIMIT_FSIZE (`ulimit -f`), and INSTRFN_DEPTH. Every
//! limit hit is a counted, said loss (recorded + lost + dropped = made, exactly), the program
//! runs as without instrfn, what was kept reads, and a full trace costs no more than recording.

#[macro_use]
mod common;

use common::*;
use std::path::Path;
use std::process::Command;

feature_tests! {
    limits:
    arc_table_limit_is_exact_and_cheap(x86_64),
    full_trace_costs_no_more_than_recording(x86_64),
    trace_losses_are_counted_exactly(x86_64),
    full_trace_counts_every_event(aarch64, riscv64, s390x),
    file_size_limit_keeps_the_program_running(x86_64),
    depth_leaves_calls_out_and_counts_them(x86_64),
}

/// One thread makes 8194 distinct arcs (start_thread -> worker, worker -> sites, then 8192
/// call sites of work_a, in that order), 3 rounds. With INSTRFN_MAX_ARCS=L the thread keeps
/// exactly L arcs: worker's, sites' and the first L-2 sites of work_a; every call of the
/// other sites is lost, exactly, said on stderr and in gmon.out as calls of
/// instrfn_calls_lost; and the lost calls are counted by the trampoline itself, not the slow
/// path.
fn arc_table_limit_is_exact_and_cheap(arch: Arch) {
    let dir = workdir("arc-limit");
    let exe = build_c(arch, &dir, "arcs.c", &[], Link::Static);
    const ROUNDS: u64 = 3;
    for limit in [200u64, 1000, 5000, 1 << 20] {
        let out = run_exe(
            arch,
            &exe,
            &[&ROUNDS.to_string()],
            &[
                ("INSTRFN_MAX_ARCS", &limit.to_string()),
                ("INSTRFN_VERBOSE", "1"),
            ],
            &dir,
        );
        let context = format!("INSTRFN_MAX_ARCS={limit}");
        let err = stderr_of(&out);
        let kept_sites = (limit - 2).min(8192);
        let lost = (8192 - kept_sites) * ROUNDS;
        assert_eq!(summary_value(&err, "calls lost"), lost, "{context}: {err}");
        if lost > 0 {
            assert!(
                err.starts_with(&format!("instrfn: {lost} calls were not counted")),
                "{context}: {err}"
            );
        }
        let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
        assert_calls(
            &flat,
            &[
                ("work_a", kept_sites * ROUNDS),
                ("instrfn_calls_lost", lost),
                ("sites", ROUNDS),
            ],
            &context,
        );
        let slow = summary_value(&err, "slow paths");
        assert!(slow <= 12, "{context}: {slow} slow paths");
    }
}

/// Once the trace is full (here INSTRFN_TRACE_LIMIT's one chunk, taken by the main thread),
/// the threads' events go into their sinks and are counted there: exactly as many lost as
/// made, at about recording's cost (at most 4 times its CPU time, and 0.1 s; events that each
/// take the slow path, two system calls each, cost about 75 times). CPU time (GNU time), not
/// wall time; a loaded host still inflates one run's CPU time more than the other's, so a pair
/// over the bound is measured again, up to 3 times, each pair's figures in the failure
/// message. The counts are checked in every run.
fn full_trace_costs_no_more_than_recording(_: Arch) {
    let dir = workdir("trace-full-cost");
    let exe = build_pg(&dir, "threads.c");
    const T: u64 = 2;
    const N: u64 = 500_000;
    let made = 2 * (2 * T * N + T + 1);
    let cpu = |env: &[(&str, &str)], name: &str| -> (f64, String) {
        let times = dir.join(format!("{name}.time"));
        let _ = std::fs::remove_dir_all(dir.join(name));
        let mut cmd = Command::new("/usr/bin/time");
        cmd.args(["-f", "%U %S", "-o"])
            .arg(&times)
            .arg(instrfn_cli())
            .args(["record", "-o"])
            .arg(dir.join(name))
            .arg("--")
            .arg(&exe)
            .args([T.to_string(), N.to_string()])
            .current_dir(&dir);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = run_ok(&mut cmd);
        let text = std::fs::read_to_string(&times).unwrap();
        let seconds: f64 = text
            .split_whitespace()
            .map(|f| f.parse::<f64>().unwrap())
            .sum();
        (seconds, stderr_of(&out))
    };
    let mut attempts = Vec::new();
    while attempts.len() < 3 {
        let (full, full_err) = cpu(&[], "all");
        assert!(
            full_err.contains(&format!(
                "instrfn: {made} events, 3 threads, 1 process, 0 lost"
            )),
            "{full_err}"
        );
        let (limited, err) = cpu(&[("INSTRFN_TRACE_LIMIT", "4096")], "limited");
        let summary = err.lines().last().unwrap();
        let number = |label: &str| -> u64 {
            summary
                .split(", ")
                .find_map(|part| part.strip_suffix(label)?.rsplit(' ').next()?.parse().ok())
                .unwrap_or_else(|| panic!("no {label} in {summary}"))
        };
        let (recorded, lost) = (number(" events"), number(" lost"));
        assert!(lost > 2 * T * N, "{err}");
        assert_eq!(recorded + lost, made, "{err}");
        attempts.push(format!(
            "a full trace cost {limited:.2} s of CPU time, the whole recording {full:.2} s"
        ));
        if limited <= 4.0 * full + 0.1 {
            return;
        }
    }
    panic!("a full trace cost more than 4 times the recording in every run: {attempts:?}");
}

/// A trace limit far below what the program makes, and a file system too small for the
/// trace: recorded + lost = made, exactly, the losses are said (stderr, meta file, loss
/// markers), the program runs as without instrfn, and what was recorded reads.
fn trace_losses_are_counted_exactly(_: Arch) {
    let dir = workdir("trace-limit");
    let exe = build_pg(&dir, "calltree.c");
    let churn = build_pg(&dir, "scenarios.c");
    const T: u64 = 2;
    const K: u64 = 2000;
    let made = 2 + T * (2 + 10 * K);
    let plain = run_ok(Command::new(&exe).args(["2", "2000"]));
    // The summary's (events, threads, lost) of a recording.
    let counts = |out: &std::process::Output| -> (u64, u64, u64) {
        let err = stderr_of(out);
        let summary = err.lines().last().unwrap().to_string();
        let number = |label: &str| -> u64 {
            summary
                .split(", ")
                .find_map(|part| {
                    part.strip_suffix(label)?
                        .trim()
                        .rsplit(' ')
                        .next()?
                        .parse()
                        .ok()
                })
                .unwrap_or_else(|| panic!("no {label} in {summary}"))
        };
        (number(" events"), number(" threads"), number(" lost"))
    };
    let check = |env: &[(&str, &str)], dir: &Path, said: &str| {
        let (out, trace) = record_trace(&exe, &["2", "2000"], env, dir);
        assert_eq!(out.stdout, plain.stdout, "{said}");
        let err = stderr_of(&out);
        let (recorded, _, lost) = counts(&out);
        assert!(lost > 0 && recorded > 0, "{err}");
        assert_eq!(recorded + lost, made, "{err}");
        assert!(err.contains(said), "{err}");
        let procs = instrfn_dump(&trace);
        assert_eq!(procs[0].lost, lost, "{said}: loss markers");
    };
    let env = [("INSTRFN_BUFSIZE", "4K"), ("INSTRFN_TRACE_LIMIT", "64K")];
    check(&env, &dir, "INSTRFN_TRACE_LIMIT");
    // 400 short threads, 8 at a time, sharing chunks: what they make, from a full recording
    // (enough to fill the small disk below even as call words, 8 bytes a call).
    let churn_args = ["churn", "400", "100"];
    let (out, _) = record_trace(&churn, &churn_args, &[("INSTRFN_BUFSIZE", "16K")], &dir);
    let (churn_made, churn_threads, churn_lost) = counts(&out);
    assert_eq!((churn_threads, churn_lost), (401, 0), "{}", stderr_of(&out));
    // A full disk: a 256 KiB tmpfs (CI runs as root; without root this fails, it does not
    // pass). Chunks the events file cannot take stay in the staging file and are read there;
    // the meta file's lines (threads, losses) go into blocks reserved ahead.
    let small = dir.join("small");
    std::fs::create_dir_all(&small).unwrap();
    // Whatever an earlier run left mounted there goes first (mounts stack).
    let unmount = || {
        while Command::new("umount")
            .arg(&small)
            .status()
            .unwrap()
            .success()
        {}
    };
    let mount = || {
        unmount();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
            .arg(&small)
            .status()
            .unwrap();
        assert!(
            mounted.success(),
            "cannot mount a small tmpfs at {} (the test needs root)",
            small.display()
        );
    };
    mount();
    let full = std::panic::catch_unwind(|| {
        check(
            &[("INSTRFN_BUFSIZE", "16K")],
            &small,
            "cannot grow (No space left on device)",
        );
        // A hole in a trace file on the full file system (a chunk whose allocation failed
        // while another thread's succeeded after it): reading its pages through a mapping
        // would fault (SIGBUS on tmpfs, which must allocate them); readers skip holes.
        let trace = small.join("trace");
        let before = run_ok(Command::new(instrfn_cli()).arg("dump").arg(&trace)).stdout;
        let stage = trace_files(&trace, ".stage").remove(0);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&stage)
            .unwrap();
        f.set_len(f.metadata().unwrap().len() + (64 << 10)).unwrap();
        // Whatever room is left goes (the run may have left a few pages free).
        let mut filler = std::fs::File::create(small.join("filler")).unwrap();
        while std::io::Write::write_all(&mut filler, &[1u8; 4096]).is_ok() {}
        drop(filler); // (an open file would keep the file system from being unmounted)
        let after = run_ok(Command::new(instrfn_cli()).arg("dump").arg(&trace)).stdout;
        assert!(before == after, "a hole changed the trace");
        // A recording that finds the disk full from its start: no meta header could be
        // written. The program runs unchanged, and the summary says the trace is incomplete.
        let again = small.join("again");
        std::fs::create_dir_all(&again).unwrap();
        let (out, _) = record_trace(&exe, &["2", "2000"], &[], &again);
        assert_eq!(out.stdout, plain.stdout, "full from the start");
        let err = stderr_of(&out);
        assert!(
            err.contains("is incomplete") && err.contains("was its disk full"),
            "{err}"
        );
        // The churn on a fresh full-size-256-KiB disk: every thread named, every loss counted
        // (its meta file outgrows the page it starts in).
        mount();
        let (out, trace) = record_trace(&churn, &churn_args, &[("INSTRFN_BUFSIZE", "16K")], &small);
        let (recorded, threads, lost) = counts(&out);
        assert!(lost > 0, "{}", stderr_of(&out));
        assert_eq!(
            (recorded + lost, threads),
            (churn_made, churn_threads),
            "{}",
            stderr_of(&out)
        );
        assert!(
            std::fs::metadata(&trace_files(&trace, ".meta")[0])
                .unwrap()
                .len()
                > 8192,
            "a meta file this small does not show the reservation working"
        );
    });
    unmount();
    if let Err(e) = full {
        std::panic::resume_unwind(e);
    }
}

/// calltree.c (built -pg for `arch`) at 2 threads x 2000 rounds, preloaded, with a trace limit
/// of one 4 KiB chunk: the main thread takes it, and the workers' trampolines write into their
/// sinks from the start (src/trace.rs `enter_sink`). Every event is accounted for exactly:
/// recorded + lost + 2 x dropped = made, also with INSTRFN_MIN_DURATION taking short calls
/// back inside the sink (which reads the sink's zero header as a chunk's), and the program's
/// output is its own.
fn full_trace_counts_every_event(arch: Arch) {
    let dir = workdir(&format!("{}-trace-full", arch.name));
    let flags = [&["-pg"], arch_flags(arch)].concat();
    let obj = compile(
        arch,
        Compiler::Gcc,
        &dir,
        "calltree.c",
        &flags,
        "calltree.o",
    );
    let exe = link_runtime(arch, &dir, &obj, &[], "calltree-full", Runtime::Preload);
    let (t, k) = (2u64, 2000u64);
    let made = 2 + t * (2 + 10 * k);
    for min in [None, Some("2us")] {
        let context = format!("{}, INSTRFN_MIN_DURATION {min:?}", arch.name);
        let trace = dir.join("trace-full");
        let mut env = vec![("INSTRFN_BUFSIZE", "4K"), ("INSTRFN_TRACE_LIMIT", "4K")];
        if let Some(m) = min {
            env.push(("INSTRFN_MIN_DURATION", m));
        }
        let out = run_in_trace_mode(arch, &exe, &["2", "2000"], true, &env, &dir, &trace);
        assert_eq!(stdout_of(&out).trim(), "calltree 2 2000", "{context}");
        let procs = instrfn_dump(&trace);
        assert_eq!(procs.len(), 1, "{context}");
        let recorded = procs[0]
            .threads
            .values()
            .flatten()
            .filter(|e| matches!(e.kind.as_str(), "entry" | "exit" | "entry-no-exit"))
            .count() as u64;
        let (lost, dropped) = (procs[0].lost, meta_dropped(&trace));
        assert!(lost > 0, "{context}: nothing lost");
        assert_eq!(
            recorded + lost + 2 * dropped,
            made,
            "{context}: {recorded} recorded, {lost} lost, {dropped} calls dropped"
        );
    }
}

/// The names of the files in `dir` that contain `part`.
fn names_containing(dir: &Path, part: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.contains(part))
        .collect()
}

/// `cmd` with the soft file size limit (RLIMIT_FSIZE, `ulimit -f`) at `bytes` for the child.
fn with_file_size_limit(cmd: &mut Command, bytes: u64) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit of the child about to exec, from a local struct; no allocation.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// A write past RLIMIT_FSIZE raises SIGXFSZ, whose default action ends the program with a
/// core dump: a traced program whose trace files pass the limit, or whose gmon.out is larger
/// than it, would die (exit status 128+25). instrfn checks its own writes against the limit:
/// the program runs and exits as it does untraced, says once what was left out, and keeps
/// what fits.
fn file_size_limit_keeps_the_program_running(arch: Arch) {
    const T: u64 = 2;
    const N: u64 = 200_000;
    let dir = workdir("fsize");
    let exe = build_c(arch, &dir, "threads.c", &[], Link::Preload);
    let (t, n) = (T.to_string(), N.to_string());
    let plain = run_ok(Command::new(&exe).args([&t, &n]).current_dir(&dir));
    let traced = |limit: u64, env: &[(&str, &str)]| {
        let mut cmd = Command::new(&exe);
        cmd.args([&t, &n])
            .current_dir(&dir)
            .env("LD_PRELOAD", preload_path(arch))
            .envs(env.iter().copied());
        let out = run_ok(with_file_size_limit(&mut cmd, limit));
        assert_eq!(
            out.stdout, plain.stdout,
            "limit {limit}: the program's output"
        );
        out
    };

    // gmon mode: a profile larger than the limit is not written (nor left half-written), and
    // the program is told; one that fits is written whole.
    let gmon = dir.join("gmon.out");
    let _ = std::fs::remove_file(&gmon);
    traced(u64::MAX, &[]);
    let size = std::fs::metadata(&gmon).unwrap().len();
    std::fs::remove_file(&gmon).unwrap();
    let out = traced(size - 1, &[]);
    let said = format!(
        "instrfn: cannot write gmon.out: it would be larger than the file size limit \
         (RLIMIT_FSIZE: {} bytes)\n",
        size - 1
    );
    assert_eq!(stderr_of(&out), said, "a limit one byte short");
    let left = names_containing(&dir, "gmon.out");
    assert!(left.is_empty(), "files left: {left:?}");
    let out = traced(size, &[]);
    assert_eq!(stderr_of(&out), "", "a limit that fits");
    assert_calls(
        &gprof_flat(arch, &exe, &gmon),
        &[("work_a", T * N), ("work_b", T * N)],
        "limit = the profile's size",
    );

    // Trace mode under `ulimit -f 256`: about 7 MB of events. Every file stays within the
    // limit, most of it used (chunks are made at most a sixteenth of the limit), the loss is
    // counted and said once, and what was kept reads as a trace.
    let limit = 256 << 10;
    let trace = dir.join("trace");
    let _ = std::fs::remove_dir_all(&trace);
    let tdir = trace.display().to_string();
    let env = [("INSTRFN_MODE", "trace"), ("INSTRFN_OUTPUT", tdir.as_str())];
    let out = traced(limit, &env);
    assert_eq!(
        stderr_of(&out),
        "instrfn: the trace files reached the file size limit (ulimit -f: 256 KiB); later \
         events are counted as lost\n"
    );
    let mut events_file = 0;
    for f in std::fs::read_dir(&trace).unwrap() {
        let f = f.unwrap();
        let len = f.metadata().unwrap().len();
        assert!(len <= limit, "{:?}: {len} bytes", f.file_name());
        if f.file_name().to_string_lossy().ends_with(".events") {
            events_file = len;
        }
    }
    assert!(events_file > limit / 2, "events file {events_file} bytes");
    let procs = instrfn_dump(&trace);
    assert_eq!(procs.len(), 1);
    let calls = calls_per_function(&procs[0]);
    let kept = calls.get("work_a").copied().unwrap_or(0);
    assert!(kept > 1000 && kept < T * N, "work_a calls kept: {kept}");
    assert!(procs[0].lost > 0, "{}", procs[0].header);

    // The tools under a limit their output passes: one line, a non-zero exit, no file and no
    // temporary file left (SIGXFSZ's default action would kill `instrfn export -o` and leave
    // its temporary file).
    let json = dir.join("out.json");
    let mut export = Command::new(instrfn_cli());
    export
        .args(["export", "--format", "chrome", "-o"])
        .arg(&json)
        .arg(&trace);
    let out = run(with_file_size_limit(&mut export, 4096));
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert_eq!(
        stderr_of(&out),
        format!(
            "instrfn: cannot write {}: File too large (os error 27): the file size limit \
             (`ulimit -f`) is reached\n",
            json.display()
        )
    );
    let left = names_containing(&dir, "out.json");
    assert!(left.is_empty(), "files left: {left:?}");

    // A limit of 0: nothing can be written, not even the meta file's header; the program
    // still runs as it does untraced, and the reader says the trace is empty.
    let _ = std::fs::remove_dir_all(&trace);
    let out = traced(0, &env);
    assert!(
        stderr_of(&out).contains("reached the file size limit (ulimit -f: 0 KiB)"),
        "{}",
        stderr_of(&out)
    );
    let dump = run(Command::new(instrfn_cli()).arg("dump").arg(&trace));
    assert!(!dump.status.success());
    assert!(
        stderr_of(&dump).contains("empty: the process wrote none of its trace"),
        "{}",
        stderr_of(&dump)
    );
}

/// INSTRFN_DEPTH=2: calltree's workers keep run and a (depth 1 and 2); b and c leave no
/// events (4 per a), counted in the report's `dropped_at_record_time`.
fn depth_leaves_calls_out_and_counts_them(_: Arch) {
    const T: u64 = 4;
    const K: u64 = 5;
    let dir = workdir("record-filters-depth");
    let calltree = build_pg(&dir, "calltree.c");
    let (_, trace) = record_trace(&calltree, &["4", "5"], &[("INSTRFN_DEPTH", "2")], &dir);
    let r = report_json(&trace, &[]);
    let funcs = report_functions(&r);
    let calls = |f: &str| funcs[f]["calls"].as_u64().unwrap();
    assert_eq!(calls("run"), T);
    assert_eq!(calls("a"), T * K);
    assert!(
        !funcs.contains_key("b") && !funcs.contains_key("c"),
        "{funcs:?}"
    );
    assert_eq!(r["dropped_at_record_time"].as_u64(), Some(4 * T * K));
}
