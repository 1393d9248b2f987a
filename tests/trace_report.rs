//! `instrfn report` and the trace reader behind it, on real traces (x86_64): exact counts,
//! times that add up and match what the program measured, filters and sorting, one-line errors
//! for bad input, and the torn states a killed process can leave (a chunk in both files, a
//! staging chunk being cleared) read as the trace that was written.

#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

feature_tests! {
    trace_report:
    counts_exactly_and_times_add_up(x86_64),
    durations_of_known_sleeps(x86_64),
    filters_and_sorting(x86_64),
    bad_input_is_one_line_and_a_nonzero_exit(x86_64),
    a_chunk_in_both_files_counts_once(x86_64),
    a_staging_chunk_being_cleared_reads_as_unused(x86_64),
}

/// Builds `tests/fixtures/c/<src>` with `flags` and -O2 (-lpthread).
fn build(dir: &Path, src: &str, flags: &[&str]) -> PathBuf {
    let source = fixture(&format!("c/{src}"));
    let stem = src.split('.').next().unwrap();
    let mut args: Vec<&OsStr> = vec![OsStr::new("-O2")];
    args.extend(flags.iter().map(OsStr::new));
    args.push(source.as_os_str());
    args.push(OsStr::new("-lpthread"));
    cc(X86_64, &args, &dir.join(stem))
}

/// `instrfn record -o <dir>/trace -- exe args`, checked to succeed.
fn record(dir: &Path, exe: &Path, args: &[&str]) -> PathBuf {
    let trace = dir.join("trace");
    let _ = std::fs::remove_dir_all(&trace);
    run_ok(
        Command::new(instrfn_cli())
            .arg("record")
            .arg("-o")
            .arg(&trace)
            .arg("--")
            .arg(exe)
            .args(args)
            .current_dir(dir),
    );
    trace
}

fn instrfn(args: &[&OsStr]) -> std::process::Output {
    run(Command::new(instrfn_cli()).args(args))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a count"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

/// calltree.c at 4 threads, 50 rounds: exact calls per function; per thread, the self times
/// add up to the time from the thread's first to its last event (within 1 %).
fn counts_exactly_and_times_add_up(_: Arch) {
    const T: u64 = 4;
    const K: u64 = 50;
    let dir = workdir("report-calltree");
    let exe = build(&dir, "calltree.c", &["-pg"]);
    let trace = record(&dir, &exe, &["4", "50"]);
    let r = report_json(&trace, &[]);
    assert_eq!(u(&r["processes"]), 1);
    assert_eq!(u(&r["threads"]), T + 1);
    assert_eq!(u(&r["lost"]), 0);
    assert_eq!(u(&r["events"]), 2 * (1 + T * (1 + 5 * K)));
    let funcs = report_functions(&r);
    for (name, calls) in [
        ("main", 1),
        ("run", T),
        ("a", T * K),
        ("b", 2 * T * K),
        ("c", 2 * T * K),
    ] {
        assert_eq!(u(&funcs[name]["calls"]), calls, "{name}");
    }
    // Nesting: a's total holds its b's, b's its c's.
    assert!(f(&funcs["a"]["total_ns"]) >= f(&funcs["b"]["total_ns"]));
    assert!(f(&funcs["b"]["total_ns"]) >= f(&funcs["c"]["total_ns"]));
    let min = u(&funcs["c"]["min_ns"]);
    let median = u(&funcs["c"]["median_ns"]);
    let max = u(&funcs["c"]["max_ns"]);
    assert!(min <= median && median <= max, "{min} {median} {max}");

    let per_thread = report_json(&trace, &["--threads"]);
    let procs = instrfn_dump(&trace);
    let mut self_by_tid: BTreeMap<u64, f64> = BTreeMap::new();
    for row in per_thread["functions"].as_array().unwrap() {
        *self_by_tid.entry(u(&row["tid"])).or_default() += f(&row["self_ns"]);
    }
    assert_eq!(self_by_tid.len() as u64, T + 1);
    for (tid, events) in &procs[0].threads {
        let span = events.last().unwrap().ns - events.first().unwrap().ns;
        let sum = self_by_tid[&(*tid as u64)];
        assert!(
            (sum - span).abs() <= 0.01 * span,
            "thread {tid}: self times {sum} ns, span {span} ns"
        );
    }
}

/// nap10() sleeps 10 ms five times, nap30() 30 ms three times, each measuring how long it
/// really slept (more than asked on a busy machine), and main measures each call around it:
/// the report's minimum, maximum and total of each lie between the program's own figures for
/// the sleeps and for the calls (a traced call holds its sleep and lies within its call; up to
/// the counter's calibration against CLOCK_MONOTONIC, a few parts in 10^5), and are at least
/// what was asked. How long the call takes beyond its sleep is the host's business (a busy
/// one preempts the program there): only the program's own measurements bound it.
fn durations_of_known_sleeps(_: Arch) {
    let dir = workdir("report-sleeps");
    let exe = build(&dir, "sleeps.c", &["-pg"]);
    let trace = dir.join("trace");
    let _ = std::fs::remove_dir_all(&trace);
    let out = run_ok(
        Command::new(instrfn_cli())
            .arg("record")
            .arg("-o")
            .arg(&trace)
            .arg("--")
            .arg(&exe)
            .current_dir(&dir),
    );
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let funcs = report_functions(&report_json(&trace, &[]));
    // (min, max, total) of a line "<label> <min ns> <max ns> <total ns>".
    let figures = |label: &str| -> Vec<f64> {
        printed
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{label} ")))
            .unwrap_or_else(|| panic!("no {label} in {printed}"))
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect()
    };
    for (name, calls, ms) in [("nap10", 5, 10.0), ("nap30", 3, 30.0)] {
        let slept = figures(name);
        let called = figures(&name.replace("nap", "called"));
        let fun = &funcs[name];
        assert_eq!(u(&fun["calls"]), calls, "{name}");
        for (i, key) in ["min_ns", "max_ns", "total_ns"].into_iter().enumerate() {
            let v = f(&fun[key]);
            assert!(
                v >= slept[i] * (1.0 - 1e-4) && v <= called[i] * (1.0 + 1e-4),
                "{name} {key}: reported {v} ns, slept {} ns, called {} ns",
                slept[i],
                called[i]
            );
        }
        assert!(
            f(&fun["min_ns"]) >= ms * 1e6 * (1.0 - 1e-4),
            "{name} shorter than asked"
        );
        let median = f(&fun["median_ns"]);
        assert!(
            // From the histogram: within 1/256 of a recorded duration.
            median >= slept[0] * (1.0 - 0.005) && median <= called[1] * 1.005,
            "{name} median {median}, slept {slept:?}, called {called:?}"
        );
    }
    // Text output: one header line naming the command, then a row per function.
    let out = instrfn(&[OsStr::new("report"), trace.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.lines().next().unwrap();
    assert!(
        header.starts_with("instrfn report: ") && header.contains("sleeps"),
        "{header}"
    );
    assert!(
        text.lines()
            .any(|l| l.ends_with(" nap30") && l.contains(" ms")),
        "{text}"
    );
}

/// --filter, --exclude, --depth, --min-duration, --sort calls and --tid choose and order the
/// report's rows as they say.
fn filters_and_sorting(_: Arch) {
    let dir = workdir("report-filters");
    let exe = build(&dir, "calltree.c", &["-pg"]);
    let trace = record(&dir, &exe, &["2", "10"]);
    let names = |extra: &[&str]| -> Vec<String> {
        report_functions(&report_json(&trace, extra))
            .into_keys()
            .collect()
    };
    assert_eq!(names(&["--filter", "b"]), ["b"]);
    assert_eq!(names(&["--filter", "?"]), ["a", "b", "c"]);
    assert_eq!(names(&["--exclude", "?"]), ["main", "run"]);
    assert_eq!(names(&["--depth", "1"]), ["main", "run"]);
    assert_eq!(names(&["--depth", "2"]), ["a", "main", "run"]);
    // --min-duration keeps the calls that lasted that long: none lasted 100 s; main lasted
    // at least as long as everything else.
    assert_eq!(names(&["--min-duration", "100s"]), Vec::<String>::new());
    let main_ns = f(&report_functions(&report_json(&trace, &[]))["main"]["total_ns"]);
    let long = format!("{}ns", main_ns.floor());
    assert_eq!(names(&["--min-duration", &long]), ["main"]);
    let by_calls = report_json(&trace, &["--sort", "calls"]);
    let calls: Vec<u64> = by_calls["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| u(&f["calls"]))
        .collect();
    assert!(calls.windows(2).all(|w| w[0] >= w[1]), "{calls:?}");
    // One thread only.
    let tid = instrfn_dump(&trace)[0]
        .threads
        .keys()
        .nth(1)
        .copied()
        .unwrap()
        .to_string();
    let one = report_functions(&report_json(&trace, &["--tid", &tid]));
    assert_eq!(u(&one["a"]["calls"]), 10);
    assert!(!one.contains_key("main"));
}

/// A missing, empty, future-version, truncated or corrupt trace, and bad options: a non-zero
/// exit (no signal, no panic), the message saying what is wrong (instrfn's own in one line),
/// and no output file or temporary file left.
fn bad_input_is_one_line_and_a_nonzero_exit(_: Arch) {
    let dir = workdir("report-bad-input");
    let exe = build(&dir, "calltree.c", &["-pg"]);
    let trace = record(&dir, &exe, &["1", "2"]);
    let copy = |name: &str| -> PathBuf {
        let d = dir.join(name);
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for e in std::fs::read_dir(&trace).unwrap().flatten() {
            std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
        }
        d
    };
    let file = |d: &Path, suffix: &str| -> PathBuf {
        std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(suffix))
            .unwrap()
    };
    let future = copy("future");
    let meta = file(&future, ".meta");
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(
        &meta,
        text.replacen("instrfn-trace 4", "instrfn-trace 5", 1),
    )
    .unwrap();
    let truncated = copy("truncated");
    let meta = file(&truncated, ".meta");
    std::fs::write(&meta, "instrfn-trace 1\n").unwrap();
    // A trace this small is all in the staging file (no chunk was full).
    let corrupt = copy("corrupt");
    let events = file(&corrupt, ".stage");
    let mut bytes = std::fs::read(&events).unwrap();
    bytes[..8].copy_from_slice(b"NOTACHNK");
    std::fs::write(&events, bytes).unwrap();
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let missing = dir.join("missing");
    let out_file = dir.join("out.json");
    let _ = std::fs::remove_file(&out_file);
    let cases: Vec<(Vec<&OsStr>, &str)> = vec![
        (
            vec![OsStr::new("report"), missing.as_os_str()],
            "no such trace directory",
        ),
        (
            vec![OsStr::new("report"), empty.as_os_str()],
            "no trace in this directory",
        ),
        (vec![OsStr::new("report"), future.as_os_str()], "version"),
        (
            vec![OsStr::new("report"), truncated.as_os_str()],
            "truncated",
        ),
        (vec![OsStr::new("report"), corrupt.as_os_str()], "magic"),
        (
            vec![
                OsStr::new("export"),
                corrupt.as_os_str(),
                OsStr::new("--format"),
                OsStr::new("chrome"),
                OsStr::new("-o"),
                out_file.as_os_str(),
            ],
            "magic",
        ),
        (
            vec![
                OsStr::new("report"),
                trace.as_os_str(),
                OsStr::new("--min-duration"),
                OsStr::new("10 parsecs"),
            ],
            "unknown unit",
        ),
        (
            vec![
                OsStr::new("report"),
                trace.as_os_str(),
                OsStr::new("--time-range"),
                OsStr::new("2s..1s"),
            ],
            "ends before it starts",
        ),
        (
            vec![
                OsStr::new("report"),
                trace.as_os_str(),
                OsStr::new("--frobnicate"),
            ],
            "--frobnicate",
        ),
        (
            vec![
                OsStr::new("export"),
                trace.as_os_str(),
                OsStr::new("--format"),
                OsStr::new("pdf"),
            ],
            "pdf",
        ),
        (
            vec![
                OsStr::new("report"),
                trace.as_os_str(),
                OsStr::new("--pid"),
                OsStr::new("1"),
            ],
            "no process 1",
        ),
    ];
    for (args, says) in cases {
        let out = instrfn(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        let context = format!("{args:?}");
        assert!(!out.status.success(), "{context}: succeeded");
        assert!(
            out.status.code().is_some(),
            "{context}: killed by a signal (a panic?)"
        );
        assert!(err.contains(says), "{context}: {err}");
        assert!(!err.contains("panicked"), "{context}: {err}");
        // clap's usage errors span a few lines; instrfn's own are one line.
        if !says.starts_with("--")
            && says != "pdf"
            && !says.contains("unit")
            && !says.contains("before")
        {
            assert_eq!(err.trim_end().lines().count(), 1, "{context}: {err}");
        }
    }
    assert!(
        !out_file.exists(),
        "a failed export left {}",
        out_file.display()
    );
    let partial: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(partial.is_empty(), "{partial:?}");
}

/// `instrfn record` with extra environment.
fn record_env(dir: &Path, exe: &Path, args: &[&str], env: &[(&str, &str)]) -> PathBuf {
    let trace = dir.join("trace");
    let _ = std::fs::remove_dir_all(&trace);
    let mut cmd = Command::new(instrfn_cli());
    cmd.arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(exe)
        .args(args)
        .current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_ok(&mut cmd);
    trace
}

/// `instrfn dump DIR`'s output.
fn dump_text(d: &Path) -> String {
    String::from_utf8(run_ok(Command::new(instrfn_cli()).arg("dump").arg(d)).stdout).unwrap()
}

/// A trace of calltree.c `args` in chunks of `chunk` bytes, recorded without a collector (each
/// thread commits its chunks itself, so some are committed for sure), with its events and
/// staging files, the events file's bytes and the offset of its first committed chunk.
struct Committed {
    trace: PathBuf,
    events: PathBuf,
    stage: PathBuf,
    bytes: Vec<u8>,
    at: usize,
}

fn trace_with_a_committed_chunk(name: &str, args: &[&str], chunk: usize) -> Committed {
    let dir = workdir(name);
    let exe = build(&dir, "calltree.c", &["-pg"]);
    let size = chunk.to_string();
    let trace = record_env(
        &dir,
        &exe,
        args,
        &[("INSTRFN_BUFSIZE", &size), ("INSTRFN_COLLECTOR", "off")],
    );
    let suffix = |s: &str| {
        std::fs::read_dir(&trace)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(s))
            .unwrap()
    };
    let (events, stage) = (suffix(".events"), suffix(".stage"));
    let bytes = std::fs::read(&events).unwrap();
    let at = (0..bytes.len() / chunk)
        .map(|i| i * chunk)
        .find(|&o| bytes[o..].starts_with(b"IFNCHNK1"))
        .expect("a committed chunk");
    Committed {
        trace,
        events,
        stage,
        bytes,
        at,
    }
}

/// A SIGKILL between a commit's copy into the events file and the clearing of its staging
/// chunk leaves the chunk in both files; one during the copy leaves a shorter copy in the
/// events file (docs/trace-format.md). Either way the trace reads as it was written: the
/// copy with more events counts, once.
fn a_chunk_in_both_files_counts_once(_: Arch) {
    const CHUNK: usize = 4096;
    let Committed {
        trace,
        events,
        stage,
        bytes: committed,
        at,
    } = trace_with_a_committed_chunk("report-duplicate-chunk", &["2", "200"], CHUNK);
    let dump = |d: &Path| dump_text(d);
    let before = dump(&trace);
    let chunk = committed[at..at + CHUNK].to_vec();
    let events_in = |c: &[u8]| {
        c[64..]
            .chunks(16)
            .take_while(|e| e[8..].iter().any(|&b| b != 0))
            .count()
    };
    assert!(events_in(&chunk) > 100, "a full chunk");
    let original_stage = std::fs::read(&stage).unwrap();
    // The same chunk in both files.
    let mut staged = original_stage.clone();
    staged.extend_from_slice(&chunk);
    std::fs::write(&stage, &staged).unwrap();
    assert_eq!(dump(&trace), before, "a chunk in both files");
    // The events file's copy cut short: the staging file's counts.
    let mut short = committed.clone();
    short[at + 64 + 16 * 50..at + CHUNK].fill(0);
    std::fs::write(&events, &short).unwrap();
    assert_eq!(dump(&trace), before, "a short copy in the events file");
    // The staging file's copy cut short instead: the events file's counts.
    std::fs::write(&events, &committed).unwrap();
    let mut staged_short = staged.clone();
    let end = staged_short.len();
    staged_short[end - CHUNK + 64 + 16 * 50..].fill(0);
    std::fs::write(&stage, &staged_short).unwrap();
    assert_eq!(dump(&trace), before, "a short copy in the staging file");
    // Only a short copy: events are missing (the checks above can fail).
    std::fs::write(&events, &short).unwrap();
    std::fs::write(&stage, &original_stage).unwrap();
    assert_ne!(dump(&trace), before, "the short copy alone");
}

/// The collector clears a committed staging chunk magic first, then the rest; a process
/// that ends in between (exit kills the collector anywhere) leaves a chunk whose first 8
/// bytes are zero and whose other pages still hold the old events. Readers take it as
/// unused (its events are in the events file), wherever it lies in the staging file.
fn a_staging_chunk_being_cleared_reads_as_unused(_: Arch) {
    const CHUNK: usize = 16 << 10;
    let Committed {
        trace,
        stage,
        bytes: committed,
        at,
        ..
    } = trace_with_a_committed_chunk("report-cleared-chunk", &["2", "400"], CHUNK);
    let dump = |d: &Path| dump_text(d);
    let before = dump(&trace);
    let mut cleared = committed[at..at + CHUNK].to_vec();
    cleared[..8].fill(0);
    assert!(
        cleared[4096..4104].iter().any(|&b| b != 0),
        "old events past the first page"
    );
    let staged = std::fs::read(&stage).unwrap();
    // In front of the live chunks, and after them.
    for front in [true, false] {
        let mut bytes = Vec::new();
        if front {
            bytes.extend_from_slice(&cleared);
            bytes.extend_from_slice(&staged);
        } else {
            bytes.extend_from_slice(&staged);
            bytes.extend_from_slice(&cleared);
        }
        std::fs::write(&stage, &bytes).unwrap();
        assert_eq!(
            dump(&trace),
            before,
            "a chunk being cleared (in front: {front})"
        );
    }
    // Only such a chunk: an empty staging file's worth, not an error.
    std::fs::write(&stage, &cleared).unwrap();
    let out = run(Command::new(instrfn_cli()).arg("dump").arg(&trace));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
