//! End-to-end tests on this machine (x86_64, glibc and musl): real instrumented programs, run
//! under the runtime every supported way, read back with gprof and compared with exact counts.

mod common;

use common::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How a C fixture is linked.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Link {
    /// `-pg` at link time too: gcrt1.o, glibc's profiler hooks; run with LD_PRELOAD.
    GcrtPreload,
    /// Compiled with -pg, linked without: no gcrt; run with LD_PRELOAD.
    Preload,
    /// libinstrfn.a linked into the executable; no preload.
    Static,
}

/// Compiles `tests/fixtures/c/<src>` with `-O2 -pg` (+ `extra`) and links it as `link` says.
fn build_c(dir: &Path, src: &str, extra: &[&str], link: Link) -> PathBuf {
    let obj = dir.join(format!("{}.o", src.trim_end_matches(".c")));
    let mut args: Vec<&OsStr> = vec![OsStr::new("-O2"), OsStr::new("-pg"), OsStr::new("-c")];
    args.extend(extra.iter().map(OsStr::new));
    let source = fixture(&format!("c/{src}"));
    args.push(source.as_os_str());
    cc(X86_64, &args, &obj);
    let exe = dir.join(format!("{}-{link:?}", src.trim_end_matches(".c")));
    let lib = runtime_lib(X86_64, Lib::Static);
    let mut link_args: Vec<&OsStr> = vec![obj.as_os_str()];
    match link {
        Link::GcrtPreload => link_args.push(OsStr::new("-pg")),
        Link::Preload => {}
        Link::Static => link_args.push(lib.as_os_str()),
    }
    link_args.extend([OsStr::new("-lpthread"), OsStr::new("-ldl")]);
    cc(X86_64, &link_args, &exe)
}

/// The environment to run a fixture linked `link` with, plus `extra`.
fn env_for<'a>(
    link: Link,
    preload: &'a str,
    extra: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut env: Vec<(&str, &str)> = extra.to_vec();
    if link != Link::Static {
        env.push(("LD_PRELOAD", preload));
    }
    env
}

fn preload_path() -> String {
    runtime_lib(X86_64, Lib::Shared).display().to_string()
}

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A number printed by a fixture as "<key> <value>".
fn reported(out: &str, key: &str) -> f64 {
    out.lines()
        .find_map(|l| {
            l.strip_prefix(key)
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or_else(|| panic!("fixture did not report {key}:\n{out}"))
}

#[test]
fn threads_exact_counts_every_link_and_entry() {
    let preload = preload_path();
    const N: u64 = 200_000;
    for entry in [&[][..], &["-mfentry"][..]] {
        for link in [Link::Preload, Link::GcrtPreload, Link::Static] {
            let name = format!(
                "threads{}-{link:?}",
                if entry.is_empty() { "" } else { "-fentry" }
            );
            let dir = workdir(&name);
            let exe = build_c(&dir, "threads.c", entry, link);
            for t in [1u64, 2, 8] {
                let _ = std::fs::remove_file(dir.join("gmon.out"));
                let env = env_for(link, &preload, &[("INSTRFN_VERBOSE", "1")]);
                let out = run_exe(X86_64, &exe, &[&t.to_string(), &N.to_string()], &env, &dir);
                let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
                let context = format!("{name} T={t}");
                assert_calls(&flat, &[("work_a", t * N), ("work_b", t * N)], &context);
                assert_fast_path_used(&stderr_of(&out), 2 * t * N, &context);
            }
        }
    }
}

#[test]
fn glibc_gcrt_does_not_write_its_own_profile() {
    // With gcrt1.o, glibc's __monstartup/_mcleanup would write gmon.out at exit with its own,
    // lossy counts and 100 Hz histogram. Ours replace them: one file, our rate, exact counts.
    let dir = workdir("gcrt-takeover");
    let exe = build_c(&dir, "threads.c", &[], Link::GcrtPreload);
    let preload = preload_path();
    let out = run_exe(
        X86_64,
        &exe,
        &["2", "300000"],
        &[("LD_PRELOAD", &preload), ("INSTRFN_VERBOSE", "1")],
        &dir,
    );
    let err = stderr_of(&out);
    assert_eq!(
        err.matches("wrote gmon.out").count(),
        1,
        "one write expected:\n{err}"
    );
    let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
    assert_calls(
        &flat,
        &[("work_a", 600_000), ("work_b", 600_000)],
        "gcrt takeover",
    );
    let entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !entries.iter().any(|n| n.to_string_lossy().contains(".tmp")),
        "temporary left: {entries:?}"
    );
}

#[test]
fn histogram_seconds_match_cpu_time() {
    let preload = preload_path();
    for link in [Link::Preload, Link::Static] {
        let dir = workdir(&format!("busy-{link:?}"));
        let exe = build_c(&dir, "scenarios.c", &[], link);
        let env = env_for(link, &preload, &[]);
        let out = run_exe(X86_64, &exe, &["busy", "1.5"], &env, &dir);
        // The samples are of user CPU time (src/sampler.rs).
        let cpu = reported(&stdout_of(&out), "user");
        let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
        let total = flat.total_seconds();
        let hot = flat.entries.get("hot").map_or(0.0, |e| e.self_seconds);
        // The timer expires on the kernel's tick-sampled user time (task_cputime), getrusage
        // reports the precise runtime split by those samples. Unloaded they agree within a few
        // per cent; on a loaded 2-core machine (parallel builds) the ticks missed 13-25 % of
        // the thread's time. More samples than CPU time, or a wrong rate, is a defect.
        assert!(
            total <= 1.1 * cpu && total >= 0.6 * cpu,
            "{link:?}: gprof total {total} s vs user CPU time {cpu} s\n{}",
            flat.text
        );
        assert!(
            hot >= 0.9 * total,
            "{link:?}: hot() has {hot} of {total} s\n{}",
            flat.text
        );
    }
}

#[test]
fn musl_static_c_program() {
    require_tool("musl-gcc");
    let dir = workdir("musl-c");
    let src = fixture("c/threads.c");
    let obj = dir.join("threads.o");
    cc(
        X86_64_MUSL,
        &[
            OsStr::new("-O2"),
            OsStr::new("-pg"),
            OsStr::new("-c"),
            src.as_os_str(),
        ],
        &obj,
    );
    let lib = runtime_lib(X86_64_MUSL, Lib::Static);
    let exe = cc(
        X86_64_MUSL,
        &[OsStr::new("-static"), obj.as_os_str(), lib.as_os_str()],
        &dir.join("threads-musl"),
    );
    run_exe(X86_64_MUSL, &exe, &["2", "150000"], &[], &dir);
    let flat = gprof_flat(X86_64_MUSL, &exe, &dir.join("gmon.out"));
    assert_calls(
        &flat,
        &[("work_a", 300_000), ("work_b", 300_000)],
        "musl static",
    );
}

#[test]
fn rust_dependency_route_glibc_and_musl() {
    // Also glibc linked statically (crt-static): the runtime then defines no wrappers of the
    // unwinder's entry points, whose names the static libgcc_eh defines too (it failed to link).
    for (triple, extra) in [
        ("x86_64-unknown-linux-gnu", ""),
        ("x86_64-unknown-linux-musl", ""),
        ("x86_64-unknown-linux-gnu", "-C target-feature=+crt-static"),
    ] {
        let exe = build_instrumented_rust_with("rust-app", triple, "rust-app", extra);
        let triple = &format!("{triple} {extra}");
        let dir = workdir(&format!("rust-{}", triple.replace([' ', '='], "-")));
        let out = run_exe(
            X86_64,
            &exe,
            &["3", "100000"],
            &[("INSTRFN_VERBOSE", "1")],
            &dir,
        );
        let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
        assert_calls(
            &flat,
            &[
                ("rust_app::work_a", 300_000),
                ("rust_app::work_b", 300_000),
                ("rust_app::worker", 3),
            ],
            triple,
        );
        // The runtime is instrumented too (RUSTFLAGS reach every crate): none of its own
        // functions may be counted, and nothing recursed.
        flat.assert_no_runtime_calls(triple);
        assert_eq!(summary_value(&stderr_of(&out), "calls lost"), 0, "{triple}");
    }
}

#[test]
fn registers_survive_every_path() {
    let dir = workdir("regs-x86_64");
    let driver = fixture("regs/driver.c");
    let harness = fixture("regs/x86_64.S");
    let lib = runtime_lib(X86_64, Lib::Static);
    let shared_dir = runtime_lib(X86_64, Lib::Shared)
        .parent()
        .unwrap()
        .to_path_buf();
    let st = cc(
        X86_64,
        &[
            driver.as_os_str(),
            harness.as_os_str(),
            lib.as_os_str(),
            OsStr::new("-lpthread"),
            OsStr::new("-ldl"),
        ],
        &dir.join("regs-static"),
    );
    let rpath = format!("-Wl,-rpath,{}", shared_dir.display());
    let libdir = format!("-L{}", shared_dir.display());
    // Eager binding: with lazy binding the dynamic loader's resolver, not instrfn, may clobber
    // r10/r11 on the first call through the PLT.
    let dy = cc(
        X86_64,
        &[
            driver.as_os_str(),
            harness.as_os_str(),
            OsStr::new(&libdir),
            OsStr::new("-linstrfn"),
            OsStr::new(&rpath),
            OsStr::new("-Wl,-z,now"),
            OsStr::new("-lpthread"),
        ],
        &dir.join("regs-dynamic"),
    );
    // The second run keeps 128 arcs per thread: most of the driver's 5000 new arcs then take
    // the trampolines' full-table path, which counts them as lost.
    for (exe, max_arcs) in [
        (&st, "1048576"),
        (&dy, "1048576"),
        (&st, "128"),
        (&dy, "128"),
    ] {
        for kind in ["0", "1"] {
            let env = [("INSTRFN_VERBOSE", "1"), ("INSTRFN_MAX_ARCS", max_arcs)];
            let out = run_exe(X86_64, exe, &[kind], &env, &dir);
            let context = format!("{} kind {kind} INSTRFN_MAX_ARCS={max_arcs}", exe.display());
            let expect = if exe == &st { "ok 10012" } else { "ok 10010" };
            assert_eq!(
                stdout_of(&out).trim(),
                expect,
                "{context}: {}",
                stderr_of(&out)
            );
            assert_inserts_in_trampoline(&stderr_of(&out), &context);
        }
    }
}

#[test]
fn trace_registers_survive_entry_and_exit() {
    // Trace mode replaces the instrumented function's return address: every register must
    // survive the entry trampoline and the exit trampoline the function then returns through,
    // on each of their paths: first event (chunk claimed in the slow path), fast paths, chunk
    // refills at entry and at exit (4 KiB chunks), the limit reached (every later event lost
    // in the slow path), entries only (INSTRFN_EXITS=0), new threads, guard held, stopped.
    let dir = workdir("regs-trace-x86_64");
    let driver = fixture("regs/driver.c");
    let harness = fixture("regs/x86_64.S");
    let lib = runtime_lib(X86_64, Lib::Static);
    let shared_dir = runtime_lib(X86_64, Lib::Shared)
        .parent()
        .unwrap()
        .to_path_buf();
    let st = cc(
        X86_64,
        &[
            driver.as_os_str(),
            harness.as_os_str(),
            lib.as_os_str(),
            OsStr::new("-lpthread"),
            OsStr::new("-ldl"),
        ],
        &dir.join("regs-static"),
    );
    let rpath = format!("-Wl,-rpath,{}", shared_dir.display());
    let libdir = format!("-L{}", shared_dir.display());
    let dy = cc(
        X86_64,
        &[
            driver.as_os_str(),
            harness.as_os_str(),
            OsStr::new(&libdir),
            OsStr::new("-linstrfn"),
            OsStr::new(&rpath),
            OsStr::new("-Wl,-z,now"),
            OsStr::new("-lpthread"),
        ],
        &dir.join("regs-dynamic"),
    );
    // Recorded calls: all but the 2 while stopped and (static only) the 2 with the guard held.
    const RECORDED: u64 = 10008;
    for exe in [&st, &dy] {
        for (kind, func) in [("2", "traced_mcount"), ("3", "traced_fentry")] {
            // (With call words a full chunk is met by the next entry: the 4 KiB rows without
            // them have the exits meet it too, their slow path with the registers checked; run
            // also with every event one word later in its chunk, `shift`, so that chunks fill
            // at exits whatever the parity of the events before the calls.)
            let no_words = &[("INSTRFN_BUFSIZE", "4096"), ("INSTRFN_CALL_WORDS", "off")][..];
            let mut opened_by_exits = 0;
            for (settings, shift) in [
                (&[("INSTRFN_BUFSIZE", "1048576")][..], false),
                (&[("INSTRFN_BUFSIZE", "4096")][..], false),
                (no_words, false),
                (no_words, true),
                (&[("INSTRFN_TRACE_LIMIT", "100000")][..], false),
                (&[("INSTRFN_EXITS", "0")][..], false),
                (&[("INSTRFN_MIN_DURATION", "1s")][..], false),
            ] {
                let setting = settings[0];
                let out_dir = dir.join("trace");
                let _ = std::fs::remove_dir_all(&out_dir);
                let mut env = vec![
                    ("INSTRFN_MODE", "trace"),
                    ("INSTRFN_OUTPUT", out_dir.to_str().unwrap()),
                ];
                env.extend_from_slice(settings);
                let args: &[&str] = if shift { &[kind, "shift"] } else { &[kind] };
                let out = run_exe(X86_64, exe, args, &env, &dir);
                let context = format!("{} kind {kind} {settings:?} shift {shift}", exe.display());
                let expect = if exe == &st { "ok 10012" } else { "ok 10010" };
                assert_eq!(
                    stdout_of(&out).trim(),
                    expect,
                    "{context}: {}",
                    stderr_of(&out)
                );
                let procs = instrfn_dump(&out_dir);
                assert_eq!(procs.len(), 1, "{context}");
                let counts = assert_balanced(&procs[0], &context);
                let (entries, exits, noexit) = (
                    count_of(&counts, "entry", func),
                    count_of(&counts, "exit", func),
                    count_of(&counts, "entry-no-exit", func),
                );
                let lost = procs[0].lost;
                match setting {
                    ("INSTRFN_EXITS", _) => {
                        assert_eq!((entries, noexit, lost), (0, RECORDED, 0), "{context}")
                    }
                    ("INSTRFN_MIN_DURATION", _) => {
                        // Every call is short: the exit trampoline takes its entry back (the
                        // exits that take the slow path record theirs); all counted.
                        assert_eq!(entries, exits, "{context}");
                        let meta = std::fs::read_to_string(
                            std::fs::read_dir(&out_dir)
                                .unwrap()
                                .flatten()
                                .map(|e| e.path())
                                .find(|p| p.extension().is_some_and(|e| e == "meta"))
                                .unwrap(),
                        )
                        .unwrap();
                        let dropped: u64 = meta
                            .lines()
                            .filter_map(|l| l.strip_prefix("dropped "))
                            .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
                            .sum();
                        assert!(dropped > RECORDED / 2, "{context}: {dropped} dropped");
                        assert_eq!(
                            dropped + entries,
                            RECORDED,
                            "{context}: {dropped} dropped, {entries} recorded"
                        );
                    }
                    ("INSTRFN_TRACE_LIMIT", _) => {
                        assert_eq!(entries, exits, "{context}");
                        assert!(lost > 0, "{context}: nothing lost");
                        assert_eq!(entries + exits + lost, 2 * RECORDED, "{context}");
                    }
                    _ => assert_eq!((entries, exits, lost), (RECORDED, RECORDED, 0), "{context}"),
                }
                if setting == ("INSTRFN_BUFSIZE", "4096") {
                    let chunks = raw_chunks(&out_dir);
                    let calls: u64 = chunks.iter().map(|c| c.calls).sum();
                    let at_exits = chunks
                        .iter()
                        .filter(|c| c.seq > 0 && c.first_kind == 2)
                        .count();
                    if settings.len() == 1 {
                        assert!(calls > RECORDED / 2, "{context}: {calls} call words");
                    } else {
                        assert_eq!(calls, 0, "{context}");
                        opened_by_exits += at_exits;
                    }
                }
            }
            // Chunks that an exit began: exits took the slow path at a full chunk.
            assert!(
                opened_by_exits > 0,
                "{} kind {kind}: no chunk begun by an exit",
                exe.display()
            );
        }
    }
}

#[test]
fn trace_take_back_survives_a_handler_that_fills_chunks() {
    // INSTRFN_MIN_DURATION's take-back in the exit trampoline reads the thread's position and
    // then the entry before it. exit_window.c single-steps into that point and has its SIGTRAP
    // handler fill many 4 KiB chunks there, which the runtime retires, commits and reuses
    // (INSTRFN_COLLECTOR=off: at once, on that thread) while the interrupted trampoline goes
    // on. Every event must still be in the trace exactly once: the take-back must hold its
    // chunk as a reservation does. Windows of different lengths put the reused chunk at every
    // stage (being filled, filled, free) when the trampoline resumes.
    take_back_rounds(X86_64);
}

#[test]
fn trace_call_word_survives_a_handler_that_fills_chunks() {
    // The exit trampoline that makes a call word (asm/x86_64.s MERGE_CALL) has read the
    // thread's newest event, stepped's entry, and is about to store the call word over it.
    // exit_window.c stops it there (an int3 on the store) and has its SIGTRAP handler fill
    // many 4 KiB chunks, which the runtime retires, commits and reuses (INSTRFN_COLLECTOR=off:
    // at once, on that thread) while the trampoline's pin holds the chunk the word goes into.
    // Every event must be in the trace exactly once, stepped's as entry and exit (a call word
    // in a chunk committed after the store). With the pin not honoured (src/trace.rs
    // `retire_chunk` retiring the pinned chunk like any other), the word landed in the reused
    // chunk over the handler's events and this failed.
    merge_window_rounds(X86_64, 16);
}

#[test]
fn trace_fork_from_a_handler_in_an_event_leaves_the_parent_s_chunks_alone() {
    // exit_window.c `fork`: a handler forks while the exit trampoline is about to store a
    // call word (the same window as above); the child sleeps there 200 ms, then stores it and
    // exits, while the parent stores its own and fills and reuses 4 KiB chunks (no
    // collector: at once). The child's store goes to the chunk it was in, whose mapping the
    // parent shares: unless the child's copy of this thread's chunks is private memory
    // (src/trace.rs `after_fork`), it lands in a chunk the parent has reused, over the
    // parent's events: without that, in every run here, on the timestamp of a long event of
    // the parent's (an entry of deep 3.8e18 ns after the start). The same holds for any
    // event the child finishes (a reservation's store, a take-back's restore), call words or
    // not.
    let dir = workdir("trace-fork-window");
    let exe = build_exit_window(X86_64, &dir);
    let trace = dir.join("trace");
    let _ = std::fs::remove_dir_all(&trace);
    let t = trace.display().to_string();
    let env = [
        ("INSTRFN_MODE", "trace"),
        ("INSTRFN_OUTPUT", t.as_str()),
        ("INSTRFN_BUFSIZE", "4096"),
        ("INSTRFN_MAX_DEPTH", "4"),
        ("INSTRFN_COLLECTOR", "off"),
    ];
    // (One window: a second call of stepped() after the parent's 200 ms wait would begin too
    // long after its chunk's time base for a call word.)
    let out = run_exe(X86_64, &exe, &["fork", "60"], &env, &dir);
    let text = stdout_of(&out);
    let [windows, deep, stepped] = numbers_of(&text)[..] else {
        panic!("{text}")
    };
    assert_eq!((windows, stepped), (1, 1), "{text}");
    let procs = instrfn_dump(&trace);
    // The parent (the first pid), then its child (a trace of its own).
    assert_eq!(procs.len(), 2, "{text}");
    let parent = &procs[0];
    let counts = assert_balanced(parent, "fork window");
    assert_eq!(parent.lost, 0);
    assert_eq!(count_of(&counts, "entry", "stepped"), 1);
    assert_eq!(count_of(&counts, "exit", "stepped"), 1);
    let (entries, exits, noexit) = (
        count_of(&counts, "entry", "deep"),
        count_of(&counts, "exit", "deep"),
        count_of(&counts, "entry-no-exit", "deep"),
    );
    assert_eq!(entries, exits);
    assert_eq!(entries + noexit, deep, "{counts:?}");
    // Every event at a time within the run (the child's stray word, where it landed on a
    // long event's timestamp, left the counts right and gave that event a time 10^18 ns on).
    for e in parent.threads.values().flatten() {
        assert!((0.0..60e9).contains(&e.ns), "{e:?}");
    }
}

#[test]
fn trace_exit_pop_survives_a_handler_that_walks_the_stack() {
    // The exit trampoline pops its shadow entry and puts the original return address back
    // into the frame, from which it jumps there. exit_window.c single-steps to the instruction
    // between those two stores and has its SIGTRAP handler call backtrace() (every original
    // return address put back) and then a traced function (the exit trampoline put back into
    // the frames still alive). The entry being popped must not count as alive: otherwise the
    // trampoline's jump comes back to itself and the program aborts ("lost track of a return
    // address"), as it did a few times in a hundred under tracesig.c's stack-walking handlers.
    let dir = workdir("trace-exit-pop");
    let exe = build_exit_window(X86_64, &dir);
    exit_window_run(X86_64, &exe, "pop", |i| i % 3, &[], &dir, "pop", 16);
}

#[test]
fn trace_survives_a_traced_handler_at_every_instruction() {
    // sweep.c: call i of stepped() is interrupted at its i-th instruction (single-stepped),
    // for every i along the call — its own code, mcount's or __fentry__'s fast path, the exit
    // trampoline, -finstrument-functions' two hooks, or natively patched XRay sleds and their
    // trampolines — by a handler that makes traced calls (filling and recycling 4 KiB chunks
    // in the heavier rounds) and walks the stack with backtrace(). Every run: the program ends
    // normally, most instructions were reached, and the trace holds every call exactly: as an
    // entry and its exit, an entry without exit (beyond INSTRFN_MAX_DEPTH), or counted as left
    // out (INSTRFN_MIN_DURATION, which XRay sleds ignore); and, for -pg code, in gmon mode,
    // gprof's call counts exact. With the exit trampoline as it was
    // before it zeroed its entry's slot first, every walking -pg round here aborted ("lost
    // track of a return address"); with the XRay sled form that pushed the id before its call,
    // the walking XRay rounds crashed in the unwinder (it took the pushed word for a return
    // address).
    const N: u64 = 300;
    let lib = runtime_lib(X86_64, Lib::Shared).display().to_string();
    for (name, flags) in [
        ("pg", &["-pg"][..]),
        ("fentry", &["-pg", "-mfentry"][..]),
        ("cyg", &["-finstrument-functions"][..]),
        (
            "xray",
            &["-fxray-instrument", "-fxray-instruction-threshold=1"][..],
        ),
    ] {
        let dir = workdir(&format!("trace-sweep-{name}"));
        let xray = name == "xray";
        let exe = if xray {
            // clang, no runtime linked: LD_PRELOAD patches the sleds natively.
            require_tool("clang");
            let exe = dir.join("sweep");
            run_ok(
                Command::new("clang")
                    .args(["-O2", "-Wno-unknown-attributes"])
                    .args(flags)
                    .arg(fixture("c/sweep.c"))
                    .arg("-o")
                    .arg(&exe),
            );
            exe
        } else {
            let obj = c_object(&dir, "sweep.c", flags);
            link_runtime(X86_64, &dir, &obj, &[], "sweep", Runtime::Static)
        };
        // The common rounds, and one with the collector on and no walking.
        let mut rounds = sweep_rounds(true);
        rounds.insert(2, ("40", false, &[("INSTRFN_BUFSIZE", "4096")]));
        for (r, walk, extra) in rounds {
            let context = format!("{name} rounds {r} walk {walk} {extra:?}");
            let trace = dir.join("trace");
            let _ = std::fs::remove_dir_all(&trace);
            let t = trace.display().to_string();
            let mut env = vec![("INSTRFN_MODE", "trace"), ("INSTRFN_OUTPUT", t.as_str())];
            if xray {
                env.push(("LD_PRELOAD", lib.as_str()));
            }
            env.extend_from_slice(extra);
            let n = N.to_string();
            let mut args = vec![n.as_str(), r];
            if walk {
                args.push("walk");
            }
            let out = run_exe(X86_64, &exe, &args, &env, &dir);
            let text = stdout_of(&out);
            let words = numbers_of(&text);
            let [handled, deep, stepped, stopped, missed, in_stub] = words[..] else {
                panic!("{context}: {text}")
            };
            assert_eq!(handled + stopped + missed, N, "{context}: {text}");
            // Walks that began in an XRay stub (two instructions at each sled, on the page
            // instrfn maps near the code, whose unwind info it registers): checked like the
            // others, and there are some (none in other builds).
            if xray && walk {
                assert!(in_stub >= 2, "{context}: {text}");
            } else {
                assert_eq!(in_stub, 0, "{context}: {text}");
            }
            assert!(handled >= 80, "{context}: {text}");
            assert_eq!(stepped, N + 1, "{context}: {text}");
            let procs = instrfn_dump(&trace);
            let counts = assert_balanced(&procs[0], &context);
            assert_eq!(procs[0].lost, 0, "{context}");
            let made = [("deep", deep), ("stepped", stepped), ("main", 1)];
            let mut recorded = 0;
            for (f, n) in made {
                let (entries, exits, noexit) = (
                    count_of(&counts, "entry", f),
                    count_of(&counts, "exit", f),
                    count_of(&counts, "entry-no-exit", f),
                );
                assert_eq!(entries, exits, "{context}: {f}");
                if extra.iter().all(|(k, _)| *k != "INSTRFN_MIN_DURATION") {
                    assert_eq!(entries + noexit, n, "{context}: {f}: {counts:?}");
                }
                recorded += entries + noexit;
            }
            let dropped = meta_dropped(&trace);
            assert_eq!(
                recorded + dropped,
                deep + stepped + 1,
                "{context}: {recorded} recorded, {dropped} dropped: {counts:?}"
            );
        }
        if name == "pg" || name == "fentry" {
            // gmon mode (the default when linked in): the same sweep, every call counted once
            // in gmon.out, as gprof reads it.
            let context = format!("{name} gmon");
            let gmon = dir.join("gmon.out");
            let _ = std::fs::remove_file(&gmon);
            let n = N.to_string();
            let out = run_exe(X86_64, &exe, &[n.as_str(), "40", "walk"], &[], &dir);
            let text = stdout_of(&out);
            let words = numbers_of(&text);
            let [handled, deep, stepped, ..] = words[..] else {
                panic!("{context}: {text}")
            };
            assert!(handled >= 30, "{context}: {text}"); // (no exit trampoline here)
            assert_sweep_gmon(X86_64, &exe, &gmon, deep, stepped, &context);
        }
    }
}

/// INSTRFN_MIN_DURATION under signal handlers that land anywhere (tracesig.c natively, its
/// sender signalling the main thread again as soon as a handler ran, 4 KiB chunks), as the
/// qemu tests do single-stepped on the other architectures: -pg and -pg -mfentry, at 1 s
/// (every call short), 100 µs (handler_fn mostly long, work and leaf short) and 100 µs with
/// every handler walking the stack with backtrace() (which aborted a few runs in a hundred
/// before the exit trampoline zeroed its entry's slot before it wrote the return address
/// back: see tests/fixtures/c/exit_window.c `pop`). Every run: nested, every exit, nothing
/// lost, every call recorded or counted as dropped, exactly.
#[test]
fn trace_min_duration_signal_handlers_interrupt_the_take_back() {
    for (name, flags) in [("pg", &["-pg"][..]), ("fentry", &["-pg", "-mfentry"][..])] {
        let name = format!("trace-min-duration-tracesig-{name}");
        let dir = workdir(&name);
        let obj = c_object(&dir, "tracesig.c", flags);
        let exe = link_runtime(X86_64, &dir, &obj, &[], "tracesig", Runtime::Static);
        min_duration_tracesig_rounds(X86_64, &exe, &dir, &name, "walk");
    }
}

#[test]
fn the_harness_catches_a_clobbering_trampoline() {
    // A test that cannot fail proves nothing: link the same harness against trampolines that
    // clobber one register each and see it named.
    let dir = workdir("regs-negative");
    let fake = dir.join("fake.S");
    std::fs::write(
        &fake,
        ".globl mcount, __fentry__, instrfn_start, instrfn_stop, instrfn_debug_call_guarded\n\
         mcount: vzeroupper\n ret\n__fentry__: xorq %r11, %r11\n ret\n\
         instrfn_start: ret\ninstrfn_stop: ret\n\
         instrfn_debug_call_guarded: movq %rdi, %rax\n movq %rsi, %rdi\n jmp *%rax\n\
         .section .note.GNU-stack,\"\",@progbits\n",
    )
    .unwrap();
    let driver = fixture("regs/driver.c");
    let harness = fixture("regs/x86_64.S");
    let exe = cc(
        X86_64,
        &[
            driver.as_os_str(),
            harness.as_os_str(),
            fake.as_os_str(),
            OsStr::new("-lpthread"),
        ],
        &dir.join("regs-fake"),
    );
    let out = run(&mut command(X86_64, &exe, &["0"], &[], &dir));
    assert!(!out.status.success());
    assert!(
        stderr_of(&out).contains("register #18 clobbered"),
        "ymm0 upper half: {}",
        stderr_of(&out)
    );
    let out = run(&mut command(X86_64, &exe, &["1"], &[], &dir));
    assert!(
        stderr_of(&out).contains("register #9 clobbered"),
        "r11: {}",
        stderr_of(&out)
    );
    // The return path (kinds 2 and 3): trampolines that replace the return address as trace
    // mode does, with exit stubs that clobber rdx (a return register) and st(0) (the x87
    // return register).
    let fake = dir.join("fake-exit.S");
    std::fs::write(
        &fake,
        ".globl mcount, __fentry__, instrfn_start, instrfn_stop, instrfn_debug_call_guarded\n\
         mcount: pushq %rax\n movq 8(%rbp), %rax\n movq %rax, orig(%rip)\n\
         leaq exit_rdx(%rip), %rax\n movq %rax, 8(%rbp)\n popq %rax\n ret\n\
         exit_rdx: xorl %edx, %edx\n jmp *orig(%rip)\n\
         __fentry__: pushq %rax\n movq 16(%rsp), %rax\n movq %rax, orig(%rip)\n\
         leaq exit_st0(%rip), %rax\n movq %rax, 16(%rsp)\n popq %rax\n ret\n\
         exit_st0: fstp %st(0)\n fld1\n jmp *orig(%rip)\n\
         instrfn_start: ret\ninstrfn_stop: ret\n\
         instrfn_debug_call_guarded: movq %rdi, %rax\n movq %rsi, %rdi\n jmp *%rax\n\
         .data\norig: .quad 0\n.section .note.GNU-stack,\"\",@progbits\n",
    )
    .unwrap();
    let exe = cc(
        X86_64,
        &[
            driver.as_os_str(),
            harness.as_os_str(),
            fake.as_os_str(),
            OsStr::new("-lpthread"),
        ],
        &dir.join("regs-fake-exit"),
    );
    for (kind, message) in [
        ("2", "register #3 clobbered by the return"),
        ("3", "register #80 clobbered by the return"),
    ] {
        let out = run(&mut command(X86_64, &exe, &[kind], &[], &dir));
        assert!(!out.status.success(), "kind {kind}");
        assert!(
            stderr_of(&out).contains(message),
            "kind {kind}, {message}: {}",
            stderr_of(&out)
        );
        assert!(
            !stderr_of(&out).contains("clobbered\n"),
            "kind {kind}: the entry was intact: {}",
            stderr_of(&out)
        );
    }
}

#[test]
fn fork_child_writes_its_own_file() {
    let preload = preload_path();
    for link in [Link::Preload, Link::Static] {
        let dir = workdir(&format!("fork-{link:?}"));
        let exe = build_c(&dir, "scenarios.c", &[], link);
        let out = run_exe(
            X86_64,
            &exe,
            &["fork", "5000"],
            &env_for(link, &preload, &[]),
            &dir,
        );
        let text = stdout_of(&out);
        let child = reported(&text, "child") as u32;
        let parent = dir.join("gmon.out");
        let child_file = dir.join(format!("gmon.out.{child}"));
        let p = gprof_flat(X86_64, &exe, &parent);
        assert_calls(&p, &[("in_parent", 10_000), ("in_child", 0)], "parent");
        let c = gprof_flat(X86_64, &exe, &child_file);
        assert_calls(
            &c,
            &[("in_child", 10_000), ("in_parent", 0)],
            "child (starts from zero)",
        );
    }
}

#[test]
fn gmon_out_prefix_names_the_file_by_pid() {
    let dir = workdir("prefix");
    let exe = build_c(&dir, "scenarios.c", &[], Link::Static);
    let out = run_exe(
        X86_64,
        &exe,
        &["fork", "100"],
        &[("GMON_OUT_PREFIX", "prof/app")],
        &{
            std::fs::create_dir_all(dir.join("prof")).unwrap();
            dir.clone()
        },
    );
    let text = stdout_of(&out);
    let parent = reported(&text, "parent") as u32;
    let child = reported(&text, "child") as u32;
    assert!(!dir.join("gmon.out").exists());
    let p = gprof_flat(X86_64, &exe, &dir.join(format!("prof/app.{parent}")));
    assert_calls(&p, &[("in_parent", 200)], "prefix parent");
    let c = gprof_flat(X86_64, &exe, &dir.join(format!("prof/app.{child}")));
    assert_calls(&c, &[("in_child", 200)], "prefix child");
}

#[test]
fn dump_signal_writes_while_running() {
    let dir = workdir("dump");
    let exe = build_c(&dir, "scenarios.c", &[], Link::Static);
    run_exe(
        X86_64,
        &exe,
        &["dump", "7000"],
        &[("INSTRFN_DUMP_SIGNAL", "USR1")],
        &dir,
    );
    let mid = gprof_flat(X86_64, &exe, &dir.join("gmon.dump"));
    assert_calls(&mid, &[("work_a", 7000)], "at the dump signal");
    let end = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
    assert_calls(&end, &[("work_a", 14_000)], "at exit");
}

#[test]
fn c_api_writes_stops_and_starts() {
    let dir = workdir("c-api");
    let exe = build_c(&dir, "scenarios.c", &[], Link::Static);
    run_exe(X86_64, &exe, &["api", "3000"], &[], &dir);
    let mid = gprof_flat(X86_64, &exe, &dir.join("gmon.api"));
    assert_calls(
        &mid,
        &[("work_a", 3000), ("work_b", 0)],
        "instrfn_write_gmon",
    );
    let end = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
    assert_calls(
        &end,
        &[("work_a", 3000), ("work_b", 3000)],
        "stopped calls are not counted",
    );

    // INSTRFN_START=off: nothing is recorded until instrfn_start().
    run_exe(
        X86_64,
        &exe,
        &["api", "3000"],
        &[("INSTRFN_START", "off")],
        &dir,
    );
    let mid = gprof_flat(X86_64, &exe, &dir.join("gmon.api"));
    assert_calls(
        &mid,
        &[("work_a", 0), ("work_b", 0)],
        "INSTRFN_START=off, before start",
    );
    let end = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
    assert_calls(
        &end,
        &[("work_a", 0), ("work_b", 3000)],
        "INSTRFN_START=off, after start",
    );
}

#[test]
fn bad_configuration_warns_and_uses_defaults() {
    let dir = workdir("bad-config");
    let exe = build_c(&dir, "threads.c", &[], Link::Static);
    let good = run_exe(X86_64, &exe, &["2", "1000"], &[], &dir);
    let bad = [
        ("INSTRFN_HZ", "fast"),
        ("INSTRFN_DUMP_SIGNAL", "KILL"),
        ("INSTRFN_MAX_ARCS", "-3"),
        ("INSTRFN_START", "maybe"),
        ("INSTRFN_CALL_WORDS", "sometimes"),
        ("INSTRFN_COLLECTOR_NICE", "-5"),
    ];
    let out = run_exe(X86_64, &exe, &["2", "1000"], &bad, &dir);
    assert_eq!(
        stdout_of(&out),
        stdout_of(&good),
        "the program's own output changed"
    );
    let err = stderr_of(&out);
    assert_eq!(
        err.lines().count(),
        bad.len(),
        "one line per bad variable:\n{err}"
    );
    for ((name, value), line) in bad.iter().zip(err.lines()) {
        assert!(
            line.starts_with(&format!("instrfn: ignoring {name}=\"{value}\": expected "))
                && line.contains("; using "),
            "{line}"
        );
    }
    // Defaults in force: recording started, every call counted.
    let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
    assert_calls(
        &flat,
        &[("work_a", 2000), ("work_b", 2000)],
        "defaults after bad values",
    );
}

#[test]
fn inherited_preload_stays_inert() {
    // A shell that inherited LD_PRELOAD never calls a counting function: no timer, no file.
    let dir = workdir("inert");
    let preload = preload_path();
    let out = run_ok(
        Command::new("sh")
            .args(["-c", "grep -E '^SigCgt' /proc/$$/status; sleep 0.05; true"])
            .env("LD_PRELOAD", &preload)
            .current_dir(&dir),
    );
    let sigcgt = stdout_of(&out);
    let mask = u64::from_str_radix(sigcgt.split_whitespace().nth(1).unwrap(), 16).unwrap();
    assert_eq!(
        mask & (1 << (libc_sigprof() - 1)),
        0,
        "SIGPROF caught by an inert shell: {sigcgt}"
    );
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "the shell wrote a file"
    );
    assert!(stderr_of(&out).is_empty(), "{}", stderr_of(&out));
}

fn libc_sigprof() -> u32 {
    27
}

#[test]
fn signal_handlers_are_counted_exactly() {
    let preload = preload_path();
    for link in [Link::Preload, Link::Static] {
        let dir = workdir(&format!("signal-{link:?}"));
        let exe = build_c(&dir, "scenarios.c", &[], link);
        let out = run_exe(
            X86_64,
            &exe,
            &["signal", "500"],
            &env_for(link, &preload, &[("INSTRFN_VERBOSE", "1")]),
            &dir,
        );
        let text = stdout_of(&out);
        let handled = reported(&text, "handler") as u64;
        let work = reported(&text, "work_a") as u64;
        let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
        // Handlers interrupt the program anywhere, also inside the trampolines: every call
        // is counted (the runtime loses none, see the loss count in the summary).
        assert_calls(
            &flat,
            &[("from_handler", handled), ("work_a", work)],
            &format!("{link:?}"),
        );
        assert_eq!(summary_value(&stderr_of(&out), "calls lost"), 0, "{link:?}");
    }
}

#[test]
fn threads_that_exit_early_keep_their_counts() {
    let dir = workdir("early");
    let exe = build_c(&dir, "scenarios.c", &[], Link::Static);
    let n = 1200u64;
    run_exe(X86_64, &exe, &["early", &n.to_string()], &[], &dir);
    let a = (n / 2 + 1) + (n / 3 + 1) + (n / 4 + 1) + n;
    let b = 4 * n - a;
    let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
    assert_calls(
        &flat,
        &[("work_a", a), ("work_b", b), ("leave_now", 1)],
        "early exits",
    );
}

#[test]
fn short_lived_threads_use_bounded_memory() {
    let dir = workdir("churn");
    let exe = build_c(&dir, "scenarios.c", &[], Link::Static);
    let few = run_exe(
        X86_64,
        &exe,
        &["churn", "16", "100"],
        &[("INSTRFN_VERBOSE", "1")],
        &dir,
    );
    let many = run_exe(
        X86_64,
        &exe,
        &["churn", "4000", "100"],
        &[("INSTRFN_VERBOSE", "1")],
        &dir,
    );
    let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
    assert_calls(&flat, &[("work_a", 400_000)], "4000 threads");
    let err = stderr_of(&many);
    // Blocks are reused: at most one per thread alive at once (8 workers + main), whatever
    // the number of threads.
    let blocks = summary_value(&err, "thread blocks for");
    assert!(blocks <= 9, "{blocks} blocks for 4000 threads: {err}");
    let hwm_few = reported(&stdout_of(&few), "vmhwm");
    let hwm_many = reported(&stdout_of(&many), "vmhwm");
    assert!(
        hwm_many < hwm_few + 2048.0,
        "peak RSS grew from {hwm_few} to {hwm_many} KiB"
    );
}

#[test]
fn unwritable_directory_is_reported_not_fatal() {
    let dir = workdir("unwritable");
    let exe = build_c(&dir, "threads.c", &[], Link::Static);
    let out = run_exe(
        X86_64,
        &exe,
        &["1", "100"],
        &[("GMON_OUT_PREFIX", "/proc/no-such-dir/gmon")],
        &dir,
    );
    let err = stderr_of(&out);
    assert!(out.status.success());
    assert_eq!(err.lines().count(), 1, "one line expected: {err}");
    assert!(
        err.starts_with("instrfn: cannot write /proc/no-such-dir/gmon."),
        "{err}"
    );
}

#[test]
fn existing_symlink_is_replaced_not_followed() {
    let dir = workdir("symlink");
    let exe = build_c(&dir, "threads.c", &[], Link::Static);
    let victim = dir.join("victim");
    std::fs::write(&victim, b"keep me").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("gmon.out")).unwrap();
    run_exe(X86_64, &exe, &["1", "100"], &[], &dir);
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    assert!(
        !std::fs::symlink_metadata(dir.join("gmon.out"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
    assert_calls(&flat, &[("work_a", 100)], "after replacing the symlink");
}

#[test]
fn arc_table_limit_is_exact_and_cheap() {
    // One thread makes 8194 distinct arcs (start_thread -> worker, worker -> sites, then 8192
    // call sites of work_a, in that order), 3 rounds. With INSTRFN_MAX_ARCS=L the thread keeps
    // exactly L arcs: worker's, sites' and the first L-2 sites of work_a; every call of the other sites is lost, exactly,
    // said on stderr and in gmon.out as calls of instrfn_calls_lost; and the lost calls are
    // counted by the trampoline itself, not the slow path.
    let dir = workdir("arc-limit");
    let exe = build_c(&dir, "arcs.c", &[], Link::Static);
    const ROUNDS: u64 = 3;
    for limit in [200u64, 1000, 5000, 1 << 20] {
        let out = run_exe(
            X86_64,
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
        let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
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

#[test]
fn program_with_its_own_sigprof_is_not_broken() {
    let dir = workdir("own-sigprof");
    build_c(&dir, "scenarios.c", &[], Link::Static);
    let src = fixture("c/own_sigprof.c");
    let lib = runtime_lib(X86_64, Lib::Static);
    let scenarios = dir.join("scenarios.o");
    let link = |variant: &str, defines: &[&str]| {
        let obj = dir.join(format!("own_sigprof-{variant}.o"));
        let mut args = vec![OsStr::new("-O2"), OsStr::new("-c")];
        args.extend(defines.iter().map(OsStr::new));
        args.push(src.as_os_str());
        cc(X86_64, &args, &obj);
        let libs = [
            scenarios.as_os_str(),
            obj.as_os_str(),
            lib.as_os_str(),
            OsStr::new("-lpthread"),
            OsStr::new("-ldl"),
        ];
        cc(X86_64, &libs, &dir.join(format!("scenarios-{variant}")))
    };

    // Early: the program's sampler exists before instrfn starts: instrfn takes no samples and
    // says so. Late: the program installs it after instrfn started: its handler takes over
    // (instrfn does not fight it), instrfn's histogram stops there, and the writer says so.
    // Either way the program's handler gets its signals and every arc is there.
    let cases = [
        (
            "early",
            &["-DEARLY"][..],
            "the program has its own SIGPROF handler; gmon.out will have no pc histogram",
        ),
        (
            "late",
            &[][..],
            "the program replaced instrfn's SIGPROF handler; the pc histogram stops where it did",
        ),
    ];
    for (variant, defines, message) in cases {
        let exe = link(variant, defines);
        let out = run_exe(X86_64, &exe, &["own-sigprof", "0.5"], &[], &dir);
        let text = stdout_of(&out);
        assert!(
            reported(&text, "own") >= 10.0,
            "{variant}: the program's handler starved: {text}"
        );
        assert_eq!(
            stderr_of(&out).trim(),
            format!("instrfn: {message}"),
            "{variant}"
        );
        let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
        assert_calls(
            &flat,
            &[("work_a", reported(&text, "work_a") as u64)],
            variant,
        );
        if variant == "early" {
            assert_eq!(flat.total_seconds(), 0.0, "{}", flat.text);
        }
    }
}

#[test]
fn without_sampling_gprof_still_reads_the_counts() {
    // INSTRFN_HZ=0: no timer, no signal; gmon.out still carries a (one-bin, empty)
    // histogram, because gprof rejects a file without one.
    let dir = workdir("no-sampling");
    let exe = build_c(&dir, "threads.c", &[], Link::Static);
    run_exe(X86_64, &exe, &["2", "5000"], &[("INSTRFN_HZ", "0")], &dir);
    let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
    assert_calls(
        &flat,
        &[("work_a", 10_000), ("work_b", 10_000)],
        "INSTRFN_HZ=0",
    );
    assert_eq!(flat.total_seconds(), 0.0);
}

/// The profile files a directory holds (name -> gprof's flat profile of `exe`).
fn profiles(dir: &Path, exe: &Path) -> std::collections::BTreeMap<String, Flat> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gmon.out"))
        .map(|n| {
            let flat = gprof_flat(X86_64, exe, &dir.join(&n));
            (n, flat)
        })
        .collect()
}

#[test]
fn exec_never_kills_the_new_image() {
    // ITIMER_PROF and a pending SIGPROF survive execve while the handler does not: a -pg
    // program that execs a CPU-bound shell loop is killed ("Profiling timer expired") under
    // glibc's gcrt. instrfn's per-thread POSIX timers are deleted by exec and never leave a
    // signal pending, through the libc wrappers and the raw system call alike; the image's
    // profile is written before it is replaced (unless a fork child recorded nothing).
    let preload = preload_path();
    const N: u64 = 3000;
    for link in [Link::Preload, Link::Static] {
        let dir = workdir(&format!("exec-{link:?}"));
        let exe = build_c(&dir, "tree.c", &[], link);
        let env = env_for(link, &preload, &[("INSTRFN_HZ", "10000")]);

        let out = run_exe(X86_64, &exe, &["forkexec", &N.to_string()], &env, &dir);
        let text = stdout_of(&out);
        assert!(text.contains("child-done"), "{link:?} forkexec: {text}");
        assert_eq!(reported(&text, "status"), 0.0, "{link:?} forkexec: {text}");
        let files = profiles(&dir, &exe);
        assert_eq!(
            files.len(),
            1,
            "{link:?}: the fork child recorded nothing: {:?}",
            files.keys()
        );
        assert_calls(
            &files["gmon.out"],
            &[("work_a", N), ("work_b", N)],
            &format!("{link:?} forkexec parent"),
        );

        for mode in ["exec", "rawexec"] {
            let _ = std::fs::remove_file(dir.join("gmon.out"));
            let out = run_exe(X86_64, &exe, &[mode, &N.to_string()], &env, &dir);
            let text = stdout_of(&out);
            assert!(text.contains("exec-done"), "{link:?} {mode}: {text}");
            if mode == "exec" {
                let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
                assert_calls(&flat, &[("work_a", N)], &format!("{link:?} before exec"));
            } else {
                // No wrapper saw the raw system call: nothing written, nothing killed.
                assert!(!dir.join("gmon.out").exists(), "{link:?} rawexec");
            }
        }

        // A failed exec leaves profiling running: counts and samples go on.
        let _ = std::fs::remove_file(dir.join("gmon.out"));
        let out = run_exe(X86_64, &exe, &["execfail", &N.to_string()], &env, &dir);
        assert_eq!(reported(&stdout_of(&out), "errno"), 2.0);
        let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
        assert_calls(&flat, &[("work_a", 2 * N)], &format!("{link:?} execfail"));
        // 0.3 s of user CPU time after it; without sampling there would be none. (The
        // kernel's user-time figure and its tick samples part ways on a loaded machine: 0.09 s
        // was seen with four test processes on two cores, so a sixth is the bar, not all.)
        let hot = flat.entries.get("hot").map_or(0.0, |e| e.self_seconds);
        assert!(
            hot >= 0.05,
            "{link:?}: no samples after the failed exec\n{}",
            flat.text
        );
    }
}

#[test]
fn process_trees_leave_one_profile_per_image() {
    let preload = preload_path();
    const N: u64 = 1000;
    let dir = workdir("tree");
    let exe = build_c(&dir, "tree.c", &[], Link::Preload);
    let env = [("LD_PRELOAD", preload.as_str())];

    // Three images of one pid, each exec'ing the next: gmon.out, gmon.out.<pid>.2, .3.
    let out = run_exe(X86_64, &exe, &["reexec", &N.to_string(), "2"], &env, &dir);
    let pid = reported(&stdout_of(&out), "pid") as u32;
    let files = profiles(&dir, &exe);
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    let (second, third) = (format!("gmon.out.{pid}.2"), format!("gmon.out.{pid}.3"));
    assert_eq!(names, ["gmon.out", second.as_str(), third.as_str()]);
    for (name, flat) in &files {
        assert_calls(flat, &[("work_a", N)], name);
    }

    // posix_spawn'ed children, with the parent's environment and with one of their own.
    for envmode in ["inherit", "own"] {
        let dir = workdir(&format!("tree-spawn-{envmode}"));
        let out = run_exe(
            X86_64,
            &exe,
            &["spawn", &N.to_string(), envmode],
            &env,
            &dir,
        );
        let child = reported(&stdout_of(&out), "child") as u32;
        let files = profiles(&dir, &exe);
        let child_file = format!("gmon.out.{child}");
        let names: Vec<&str> = files.keys().map(String::as_str).collect();
        assert_eq!(names, ["gmon.out", child_file.as_str()], "{envmode}");
        assert_calls(&files["gmon.out"], &[("work_a", N), ("work_b", 0)], envmode);
        assert_calls(
            &files[&child_file],
            &[("work_b", 2 * N), ("work_a", 0)],
            envmode,
        );
    }

    // Instrumented programs under an uninstrumented shell that inherited LD_PRELOAD: the
    // shell is the root (and writes nothing); each program writes gmon.out.<its pid>.
    let dir = workdir("tree-shell");
    let script = format!("{0} child 100; {0} child 200", exe.display());
    run_ok(
        Command::new("sh")
            .args(["-c", &script])
            .env("LD_PRELOAD", &preload)
            .current_dir(&dir),
    );
    let files = profiles(&dir, &exe);
    assert_eq!(files.len(), 2, "{:?}", files.keys());
    assert!(!files.contains_key("gmon.out"));
    let mut counts: Vec<u64> = files.values().map(|f| f.calls("work_b")).collect();
    counts.sort();
    assert_eq!(counts, [100, 200]);
}

/// Builds tests/fixtures/c/libwork.c as `dir/<name>` (`-pg -fPIC -shared`, plus `extra`).
fn build_library(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let src = fixture("c/libwork.c");
    let mut args: Vec<&OsStr> = ["-O2", "-pg", "-fPIC", "-shared"]
        .iter()
        .map(OsStr::new)
        .collect();
    args.extend(extra.iter().map(OsStr::new));
    args.push(src.as_os_str());
    cc(X86_64, &args, &dir.join(name))
}

#[test]
fn shared_libraries_get_profiles_of_their_own() {
    // gprof reads one ELF file: each instrumented library gets its profile, at its own
    // link-time addresses, beside the executable's, whether linked, dlopen'ed, or unloaded by
    // dlclose before exit (then written at the dlclose); another library loaded later at the
    // same address does not inherit its counts; a library loaded twice sums both loads.
    let preload = preload_path();
    const N: u64 = 5000;
    let dir = workdir("libraries");
    let libwork = build_library(&dir, "libwork.so", &[]);
    let libother = build_library(&dir, "libother.so", &["-DOTHER"]);
    let src = fixture("c/libuser.c");
    let compile = |obj: &Path, defines: &[&str]| {
        let mut args: Vec<&OsStr> = ["-O2", "-pg", "-c"].iter().map(OsStr::new).collect();
        args.extend(defines.iter().map(OsStr::new));
        args.push(src.as_os_str());
        cc(X86_64, &args, obj);
    };
    // Linked with libwork.so, and (without -DLINKED) a loader that only dlopens libraries, so
    // that its dlclose really unloads them.
    let (obj_linked, obj_loader) = (dir.join("linked.o"), dir.join("loader.o"));
    compile(&obj_linked, &["-DLINKED"]);
    compile(&obj_loader, &[]);
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let linked_args = [
        obj_linked.as_os_str(),
        libwork.as_os_str(),
        OsStr::new(&rpath),
        OsStr::new("-ldl"),
    ];
    let linked = cc(X86_64, &linked_args, &dir.join("libuser"));
    let loader_args = [obj_loader.as_os_str(), OsStr::new("-ldl")];
    let loader = cc(X86_64, &loader_args, &dir.join("libuser-dl"));
    let env = [("LD_PRELOAD", preload.as_str())];
    let n = N.to_string();
    let (work, other) = (
        libwork.display().to_string(),
        libother.display().to_string(),
    );

    for (mode, exe, args) in [
        ("linked", &linked, vec!["linked", &n]),
        ("dlopen", &loader, vec!["dlopen", &n, &work]),
    ] {
        let run_dir = workdir(&format!("libraries-{mode}"));
        run_exe(X86_64, exe, &args, &env, &run_dir);
        let flat = gprof_flat(X86_64, exe, &run_dir.join("gmon.out"));
        assert_calls(&flat, &[("local", N)], mode);
        let profile = run_dir.join("gmon.out.libwork.so");
        assert_calls(
            &gprof_flat(X86_64, &libwork, &profile),
            &[("lib_inner", N)],
            mode,
        );
        let graph = gprof_graph(X86_64, &libwork, &profile);
        assert!(
            graph.contains(&format!("{N}/{N}        lib_outer")),
            "{mode}: lib_outer -> lib_inner not in the call graph:\n{graph}"
        );
    }

    // Unloaded, then another library at the same address (the loader reuses the range). No
    // sampling here: a thread's first sample maps its pc table, which could take the range
    // before the loader does.
    let run_dir = workdir("libraries-reload");
    let quiet = [("LD_PRELOAD", preload.as_str()), ("INSTRFN_HZ", "0")];
    let args = ["reload", &n, &work, &other];
    let out = run_exe(X86_64, &loader, &args, &quiet, &run_dir);
    let bases: Vec<String> = stdout_of(&out)
        .split_whitespace()
        .skip(1)
        .map(String::from)
        .collect();
    assert_eq!(
        bases[0], bases[1],
        "libother.so was not loaded where libwork.so was"
    );
    let work_flat = gprof_flat(X86_64, &libwork, &run_dir.join("gmon.out.libwork.so"));
    assert_calls(&work_flat, &[("lib_inner", N)], "unloaded libwork.so");
    let other_flat = gprof_flat(X86_64, &libother, &run_dir.join("gmon.out.libother.so"));
    assert_calls(
        &other_flat,
        &[("other_inner", 2 * N)],
        "libother.so, same address",
    );
    assert_eq!(
        other_flat.entries.len(),
        1,
        "libwork.so's counts leaked into libother.so's profile:\n{}",
        other_flat.text
    );

    // The same library loaded and unloaded twice: one profile with both loads.
    let run_dir = workdir("libraries-twice");
    run_exe(X86_64, &loader, &["twice", &n, &work], &env, &run_dir);
    let flat = gprof_flat(X86_64, &libwork, &run_dir.join("gmon.out.libwork.so"));
    assert_calls(&flat, &[("lib_inner", 2 * N)], "loaded twice");
}

#[test]
fn first_call_in_a_signal_handler_that_interrupted_malloc() {
    // Start-up and every thread's first call run inside a signal handler that interrupts
    // malloc, in a program that made 40 pthread keys first (glibc allocates for key values
    // from index 32 on): nothing on the slow path may take a lock or allocate. The runtime
    // that took atexit/pthread_atfork/pthread_key_create locks and called pthread_setspecific
    // there hung here.
    let dir = workdir("sigfirst");
    let main_obj = dir.join("sigfirst.o");
    let counted_obj = dir.join("sigfirst_counted.o");
    let (main_src, counted_src) = (fixture("c/sigfirst.c"), fixture("c/sigfirst_counted.c"));
    cc(
        X86_64,
        &[OsStr::new("-O2"), OsStr::new("-c"), main_src.as_os_str()],
        &main_obj,
    );
    let pg = [
        OsStr::new("-O2"),
        OsStr::new("-pg"),
        OsStr::new("-c"),
        counted_src.as_os_str(),
    ];
    cc(X86_64, &pg, &counted_obj);
    let lib = runtime_lib(X86_64, Lib::Static);
    let objs = [
        main_obj.as_os_str(),
        counted_obj.as_os_str(),
        OsStr::new("-lpthread"),
    ];
    let preloaded = cc(X86_64, &objs, &dir.join("sigfirst-preload"));
    let mut st = objs.to_vec();
    st.insert(2, lib.as_os_str());
    let linked = cc(X86_64, &st, &dir.join("sigfirst-static"));
    let preload = preload_path();
    for (exe, env) in [
        (&preloaded, vec![("LD_PRELOAD", preload.as_str())]),
        (&linked, vec![]),
    ] {
        let _ = std::fs::remove_file(dir.join("gmon.out"));
        let mut cmd = command(X86_64, exe, &["16", "1.5"], &env, &dir);
        let out = run_within(&mut cmd, 60);
        let handled = reported(&stdout_of(&out), "handled") as u64;
        let flat = gprof_flat(X86_64, exe, &dir.join("gmon.out"));
        assert_calls(&flat, &[("counted", handled)], &exe.display().to_string());
    }
}

#[test]
fn fork_while_the_dump_signal_arrives() {
    // The dump signal hammers the forking thread: neither the fork handlers nor the writer may
    // hold a lock across fork that the signal's writer then waits for (a deadlock the earlier
    // runtime had). Every file each process wrote is readable, with its exact counts.
    let dir = workdir("forkdump");
    let exe = build_c(&dir, "scenarios.c", &[], Link::Static);
    const N: u64 = 100;
    let mut cmd = command(
        X86_64,
        &exe,
        &["forkdump", &N.to_string()],
        &[("INSTRFN_DUMP_SIGNAL", "USR1")],
        &dir,
    );
    run_within(&mut cmd, 120);
    let files = profiles(&dir, &exe);
    assert_calls(
        &files["gmon.out"],
        &[("work_a", N), ("work_b", 0)],
        "parent",
    );
    let children: Vec<_> = files
        .iter()
        .filter(|(n, _)| n.as_str() != "gmon.out")
        .collect();
    assert_eq!(children.len() as u64, N, "one profile per child");
    for (name, flat) in children {
        assert_calls(flat, &[("work_b", 10), ("work_a", 0)], name);
    }
}

#[test]
fn profiles_written_while_8_threads_count() {
    // A write every 2 ms while 8 threads count: every file readable, counts never go down
    // from one write to the next, and the last write (at exit) is exact.
    let dir = workdir("dumps");
    let exe = build_c(&dir, "scenarios.c", &[], Link::Static);
    const M: u64 = 5_000_000;
    let out = run_exe(X86_64, &exe, &["dumps", "8", &M.to_string()], &[], &dir);
    let dumps = reported(&stdout_of(&out), "dumps") as usize;
    assert!(dumps >= 3, "only {dumps} writes while counting");
    let mut last = 0;
    for k in 0..dumps {
        let flat = gprof_flat(X86_64, &exe, &dir.join(format!("gmon.dump.{k}")));
        let now = flat.calls("work_a");
        assert!(now >= last, "write {k}: {now} calls after {last}");
        last = now;
    }
    let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
    assert_calls(&flat, &[("work_a", 8 * M)], "at exit");
}

#[test]
fn handlers_insert_new_arcs_while_the_thread_does() {
    // A SIGALRM handler calling 64 distinct functions (new arcs, inserted from inside the
    // handler) interrupts a thread that inserts 8192 new arcs and grows its table: every call
    // of both is counted.
    let dir = workdir("sigarcs");
    let exe = build_c(&dir, "arcs.c", &[], Link::Static);
    let out = run_exe(
        X86_64,
        &exe,
        &["sigarcs", "1000"],
        &[("INSTRFN_VERBOSE", "1")],
        &dir,
    );
    let text = stdout_of(&out);
    let handled = reported(&text, "handler") as u64;
    assert!(handled > 100, "only {handled} signals");
    let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
    let mut expected = vec![("work_a".to_string(), reported(&text, "work_a") as u64)];
    for i in 1..=8 {
        for j in 0..8 {
            expected.push((format!("h{i}{j}"), handled));
        }
    }
    let expected: Vec<(&str, u64)> = expected.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    assert_calls(&flat, &expected, "sigarcs");
    assert_eq!(summary_value(&stderr_of(&out), "calls lost"), 0);
}

/// Runs `exe args` under `sh -c 'ulimit -c unlimited; exec ...'` (so a core dump is possible)
/// and returns its exit status.
fn run_crashing(
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    dir: &Path,
) -> std::process::Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -c unlimited; exec \"$0\" \"$@\"")
        .arg(exe)
        .args(args)
        .current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(&mut cmd)
}

#[test]
fn crashes_keep_the_profile_and_end_as_they_would() {
    // After N counted calls the program crashes: the profile holds exactly N, and the process
    // ends exactly as it does with INSTRFN_CRASH_WRITE=off (same signal, same core dump).
    use std::os::unix::process::ExitStatusExt;
    let preload = preload_path();
    const N: u64 = 4321;
    for link in [Link::Static, Link::Preload] {
        let dir = workdir(&format!("crash-{link:?}"));
        let exe = build_c(&dir, "scenarios.c", &[], link);
        let kinds = [
            ("segv", libc_sig::SEGV),
            ("bus", libc_sig::BUS),
            ("ill", libc_sig::ILL),
            ("fpe", libc_sig::FPE),
            ("abort", libc_sig::ABRT),
            ("raise", libc_sig::SEGV),
            ("overflow", libc_sig::SEGV),
        ];
        for (kind, sig) in kinds {
            let context = format!("{link:?} {kind}");
            let args = ["crash", &N.to_string(), kind];
            let _ = std::fs::remove_file(dir.join("gmon.out"));
            let off = run_crashing(
                &exe,
                &args,
                &env_for(link, &preload, &[("INSTRFN_CRASH_WRITE", "off")]),
                &dir,
            );
            assert_eq!(
                off.status.signal(),
                Some(sig),
                "{context} without crash writes"
            );
            assert!(
                !dir.join("gmon.out").exists(),
                "{context}: written with INSTRFN_CRASH_WRITE=off"
            );
            let on = run_crashing(&exe, &args, &env_for(link, &preload, &[]), &dir);
            assert_eq!(
                on.status.signal(),
                off.status.signal(),
                "{context}: {}",
                stderr_of(&on)
            );
            assert_eq!(
                on.status.core_dumped(),
                off.status.core_dumped(),
                "{context}: core dump"
            );
            assert_eq!(
                stderr_of(&on),
                stderr_of(&off),
                "{context}: the program's output"
            );
            let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
            assert_calls(&flat, &[("work_a", N)], &context);
        }
        for core in std::fs::read_dir(&dir).unwrap().flatten() {
            if core.file_name().to_string_lossy().starts_with("core") {
                let _ = std::fs::remove_file(core.path());
            }
        }
    }
}

/// Signal numbers on Linux (x86_64).
mod libc_sig {
    pub const ILL: i32 = 4;
    pub const ABRT: i32 = 6;
    pub const BUS: i32 = 7;
    pub const FPE: i32 = 8;
    pub const SEGV: i32 = 11;
}

#[test]
fn rust_stack_overflow_message_and_status_unchanged() {
    // Rust's std (glibc) installs its stack-overflow handler only if SIGSEGV is at its default
    // when main starts, which is after instrfn started: its message and abort must survive,
    // and the profile is written too. On musl std reports nothing (a plain SIGSEGV), and
    // instrfn leaves SIGSEGV alone there: the same end, no profile.
    use std::os::unix::process::ExitStatusExt;
    for triple in ["x86_64-unknown-linux-gnu", "x86_64-unknown-linux-musl"] {
        let exe = build_instrumented_rust("rust-app", triple, "rust-app");
        let dir = workdir(&format!("rust-overflow-{triple}"));
        let args = ["overflow", "777"];
        let off = run_crashing(&exe, &args, &[("INSTRFN_CRASH_WRITE", "off")], &dir);
        let on = run_crashing(&exe, &args, &[], &dir);
        assert_eq!(on.status.signal(), off.status.signal(), "{triple}");
        assert_eq!(
            stderr_of(&on),
            stderr_of(&off).replace(&pid_of(&off), &pid_of(&on))
        );
        if triple.ends_with("gnu") {
            assert!(
                stderr_of(&on).contains("has overflowed its stack"),
                "{triple}: {}",
                stderr_of(&on)
            );
            assert_eq!(on.status.signal(), Some(libc_sig::ABRT), "{triple}");
            let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
            assert_calls(&flat, &[("rust_app::work_a", 777)], triple);
        } else {
            assert_eq!(on.status.signal(), Some(libc_sig::SEGV), "{triple}");
        }
        for core in std::fs::read_dir(&dir).unwrap().flatten() {
            if core.file_name().to_string_lossy().starts_with("core") {
                let _ = std::fs::remove_file(core.path());
            }
        }
    }
}

/// The thread id Rust prints in "thread 'main' (<tid>) has overflowed its stack", or "".
fn pid_of(out: &std::process::Output) -> String {
    let err = stderr_of(out);
    err.split_once("' (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map_or(String::new(), |(tid, _)| format!("({tid})"))
}

#[test]
fn shared_library_exports_only_its_interface() {
    assert_eq!(exported_symbols(X86_64, "nm"), expected_exports(true, true));
}

#[test]
fn call_graphs_are_exact() {
    // Not only flat counts: every caller -> callee arc, for threads (T=4), self-recursion and a
    // cycle, mcount and __fentry__, preloaded and linked.
    let preload = preload_path();
    for entry in [&[][..], &["-mfentry"][..]] {
        for link in [Link::Preload, Link::Static] {
            let name = format!("graph{}-{link:?}", entry.join(""));
            let dir = workdir(&name);
            let threads = build_c(&dir, "threads.c", entry, link);
            let env = env_for(link, &preload, &[]);
            run_exe(X86_64, &threads, &["4", "30000"], &env, &dir);
            let arcs = gprof_arcs(X86_64, &threads, &dir.join("gmon.out"));
            let expected = [("worker", "work_a", 120_000), ("worker", "work_b", 120_000)];
            assert_arcs(&arcs, &expected, &name);
            let recursion = build_c(&dir, "recursion.c", entry, link);
            run_exe(X86_64, &recursion, &["20", "1000"], &env, &dir);
            let arcs = gprof_arcs(X86_64, &recursion, &dir.join("gmon.out"));
            let expected = [
                ("main", "fib", 1),
                ("fib", "fib", 21890),
                ("main", "is_even", 1),
                ("is_even", "is_odd", 500),
                ("is_odd", "is_even", 500),
            ];
            assert_arcs(&arcs, &expected, &name);
        }
    }
}

#[test]
fn samples_never_interrupt_system_calls() {
    // A thread spins under sampling while another scans 400 pipes in poll and sleeps in poll,
    // nanosleep and select (none of which SA_RESTART restarts): instrfn's per-thread
    // user-time timers signal only a thread running user code, so no call fails with EINTR.
    let dir = workdir("eintr");
    let exe = build_c(&dir, "scenarios.c", &[], Link::Static);
    let out = run_exe(
        X86_64,
        &exe,
        &["eintr", "1.5", "1"],
        &[("INSTRFN_HZ", "10000")],
        &dir,
    );
    let text = stdout_of(&out);
    assert!(reported(&text, "calls") > 300.0, "{text}");
    assert_eq!(reported(&text, "eintr"), 0.0, "{text}");
    let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
    assert!(
        flat.total_seconds() > 0.5,
        "the spinning threads were not sampled\n{}",
        flat.text
    );
}

/// Runs `exe args` under `instrfn record -o <dir>/trace` (trace mode).
fn record_trace(
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    dir: &Path,
) -> (std::process::Output, PathBuf) {
    record_trace_on(exe, args, env, dir, false)
}

/// [`record_trace`], on CPU 0 alone if `one_cpu` (the affinity `instrfn record` and the
/// program inherit).
fn record_trace_on(
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    dir: &Path,
    one_cpu: bool,
) -> (std::process::Output, PathBuf) {
    let trace = dir.join("trace");
    let mut cmd = Command::new(instrfn_cli());
    if one_cpu {
        use std::os::unix::process::CommandExt;
        // SAFETY: sched_setaffinity of the child about to exec, on a local set; no allocation.
        unsafe {
            cmd.pre_exec(|| {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
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
    (run_ok(&mut cmd), trace)
}

#[test]
fn trace_golden_call_tree_every_entry() {
    // A known call tree at 4 threads: exactly the expected entry/exit sequence per thread, for
    // -pg (mcount), -pg -mfentry and -finstrument-functions, preloaded by `instrfn record` and
    // with the runtime linked in (INSTRFN_MODE=trace).
    const T: usize = 4;
    const K: usize = 5;
    let args = [T.to_string(), K.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for flags in [
        &["-pg"][..],
        &["-pg", "-mfentry"][..],
        &["-finstrument-functions"][..],
    ] {
        let name = format!("trace-golden{}", flags.join(""));
        let dir = workdir(&name);
        let src = fixture("c/calltree.c");
        let obj = dir.join("calltree.o");
        let mut cargs: Vec<&OsStr> = vec![OsStr::new("-O2"), OsStr::new("-c")];
        cargs.extend(flags.iter().map(OsStr::new));
        cargs.push(src.as_os_str());
        cc(X86_64, &cargs, &obj);
        let exe = cc(
            X86_64,
            &[obj.as_os_str(), OsStr::new("-lpthread")],
            &dir.join("calltree"),
        );
        let started = std::time::Instant::now();
        let (out, trace) = record_trace(&exe, &args, &[], &dir);
        let wall_ns = started.elapsed().as_nanos() as f64;
        let err = stderr_of(&out);
        let events = 2 + T * (2 + 10 * K);
        assert!(
            err.contains(&format!(
                "instrfn: {events} events, {} threads, 1 process, 0 lost",
                T + 1
            )),
            "{name}: {err}"
        );
        let procs = instrfn_dump(&trace);
        assert_eq!(procs.len(), 1, "{name}");
        assert_calltree(&procs[0], T, K, &name);
        assert_durations(&procs[0], wall_ns, &name);

        // Linked statically, traced by environment alone.
        let lib = runtime_lib(X86_64, Lib::Static);
        let linked = cc(
            X86_64,
            &[
                obj.as_os_str(),
                lib.as_os_str(),
                OsStr::new("-lpthread"),
                OsStr::new("-ldl"),
            ],
            &dir.join("calltree-linked"),
        );
        let tdir = dir.join("linked-trace");
        run_in_trace_mode(X86_64, &linked, &args, false, &[], &dir, &tdir);
        assert_calltree(&instrfn_dump(&tdir)[0], T, K, &format!("{name} linked"));

        // musl, linked statically (exits traced there too: x86_64's return pad has unwind
        // info for a static unwinder, asm/x86_64.s).
        require_tool("musl-gcc");
        let mobj = dir.join("calltree-musl.o");
        cc(X86_64_MUSL, &cargs, &mobj);
        let mlib = runtime_lib(X86_64_MUSL, Lib::Static);
        let musl = cc(
            X86_64_MUSL,
            &[OsStr::new("-static"), mobj.as_os_str(), mlib.as_os_str()],
            &dir.join("calltree-musl"),
        );
        let mdir = dir.join("musl-trace");
        run_in_trace_mode(X86_64_MUSL, &musl, &args, false, &[], &dir, &mdir);
        assert_calltree(&instrfn_dump(&mdir)[0], T, K, &format!("{name} musl"));
    }
}

/// Builds `tests/fixtures/c/<src>` with `flags` (and -O2), linked with `link_flags`.
/// tests/fixtures/c/`src` compiled with gcc -O2 `flags` into `<dir>/<stem>.o` (not linked).
fn c_object(dir: &Path, src: &str, flags: &[&str]) -> PathBuf {
    let source = fixture(&format!("c/{src}"));
    let mut args: Vec<&OsStr> = vec![OsStr::new("-O2"), OsStr::new("-c")];
    args.extend(flags.iter().map(OsStr::new));
    args.push(source.as_os_str());
    cc(X86_64, &args, &dir.join(src).with_extension("o"))
}

fn build_plain(dir: &Path, src: &str, flags: &[&str], link_flags: &[&str]) -> PathBuf {
    let source = fixture(&format!("c/{src}"));
    let stem = src.split('.').next().unwrap();
    let obj = dir.join(format!("{stem}.o"));
    let mut args: Vec<&OsStr> = vec![OsStr::new("-O2"), OsStr::new("-c")];
    args.extend(flags.iter().map(OsStr::new));
    args.push(source.as_os_str());
    let compiler = if src.ends_with(".cpp") { "g++" } else { "gcc" };
    require_tool(compiler);
    run_ok(Command::new(compiler).args(&args).arg("-o").arg(&obj));
    let exe = dir.join(stem);
    run_ok(
        Command::new(compiler)
            .arg(&obj)
            .args(link_flags)
            .arg("-o")
            .arg(&exe),
    );
    exe
}

#[test]
fn compact_events_take_the_long_form_where_they_must() {
    // x86_64 writes compact events (docs/trace-format.md, chunk version 2): 8 bytes for an entry or
    // exit whose function lies within reach of its chunk's code base and whose time within
    // 2^30 ticks of its time base, 16 otherwise. tests/fixtures/c/compact.c calls functions
    // of the executable (short), of a -pg library mapped far from it (long), sleeps 1 s
    // (past the time base's reach: every event after it is long) and calls the executable's
    // again: the dump has every call, balanced, with the right names, and the sleep's traced
    // length is the one the program measured; the chunk holds both forms in the numbers the
    // calls make.
    const N: u64 = 1000;
    let dir = workdir("trace-compact");
    let lib = build_library(&dir, "libwork.so", &[]);
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let exe = build_plain(
        &dir,
        "compact.c",
        &["-pg"],
        &[lib.to_str().unwrap(), &rpath],
    );
    let (out, trace) = record_trace(&exe, &[&N.to_string()], &[], &dir);
    let c = assert_compact_trace(&trace, &stdout_of(&out), N, "x86_64");
    // One chunk (the trace is small); its events by form: the first loop's calls of near(),
    // which record nothing inside them, are call words (chunk version 3: one word for the
    // entry and its exit; a call that a preemption made longer than 2^12 ticks is a short
    // entry and a short exit), the library's events long (4 GiB of code base reach cannot
    // span the executable and the library), and from the end of the sleep on every one is
    // long (past the time base's reach: no call words either, as their entries are long).
    assert!(
        c.calls > N * 9 / 10 && c.calls <= N && c.long >= 4 * N + 4,
        "{c:?}"
    );
}

#[test]
fn trace_survives_longjmp_unwinding_and_tail_calls() {
    // Ways out of a function other than its return (common::unwind_cases): every entry still
    // gets its exit, or is closed as unwound; the program's output is the same as without
    // instrfn. Then signal handlers in the middle of the thread's own calls: natively, ten
    // times the calls of work the qemu tests of the other architectures make.
    let dir = workdir("trace-unwind");
    let exe = build_plain(
        &dir,
        "unwind.c",
        &["-pg", "-rdynamic"],
        &["-rdynamic", "-lpthread"],
    );
    assert_unwind_runs(X86_64, &exe, &dir, 3_000_000, "x86_64", |args, env| {
        let (out, trace) = record_trace(&exe, args, env, &dir);
        (stdout_of(&out), instrfn_dump(&trace).remove(0))
    });
}

#[test]
fn trace_survives_cpp_exceptions() {
    // C++ throw through -pg frames with destructors (cleanup pads: _Unwind_Resume), caught,
    // and a rethrow (_Unwind_Resume_or_Rethrow): the same output, every frame closed (the
    // thrown-through ones as unwound, at the catch), the catching frames traced returning.
    // Also linked with -static-libgcc -static-libstdc++ (as programs that ship as one file
    // are): their unwinder is in the program, which no wrapper reaches; it walks through the
    // exit trampoline with the return pad's unwind info (asm/x86_64.s). Before that, the first
    // throw through a traced frame ended in std::terminate.
    for (name, link) in [
        ("shared", &[][..]),
        (
            "static-libgcc",
            &["-static-libgcc", "-static-libstdc++"][..],
        ),
    ] {
        let context = format!("c++ {name}");
        let dir = workdir(&format!("trace-cpp-{name}"));
        let exe = build_plain(&dir, "throw.cpp", &["-pg"], link);
        let args = ["4", "6"];
        let plain = run_ok(Command::new(&exe).args(args).current_dir(&dir));
        assert_eq!(stdout_of(&plain), "caught 8\n");
        let (out, trace) = record_trace(&exe, &args, &[], &dir);
        assert_eq!(stdout_of(&out), stdout_of(&plain), "{context}");
        let counts = assert_balanced(&instrfn_dump(&trace)[0], &context);
        assert_cpp_exception_counts(&counts, &context);
    }
}

#[test]
fn trace_survives_rust_panics_and_backtraces() {
    // A Rust program linked with the runtime: panics caught by catch_unwind, resume_unwind
    // (no panic hook runs), and std's Backtrace, all through instrumented frames: every frame
    // closes, backtraces show the real callers (the program's output, its backtrace's frames
    // included, is the plain run's). On glibc the unwinder is libgcc_s (wrapped); on musl it
    // is linked into the program (LLVM's libunwind), cannot be wrapped, and walks through the
    // exit trampoline with its return pad's unwind info (asm/x86_64.s).
    for triple in ["x86_64-unknown-linux-gnu", "x86_64-unknown-linux-musl"] {
        let exe = build_instrumented_rust("rust-app", triple, "rust-app");
        let dir = workdir(&format!("trace-rust-{triple}"));
        rust_panic_runs(X86_64, &exe, &dir, triple, true);
    }
    // glibc linked statically: its unwinder (libgcc_eh) is in the program too, and takes the
    // same unwind info (whose frame needs a CFA of its own there: with the returning
    // function's, libgcc took it for the catching frame and aborted).
    let extra = "-C target-feature=+crt-static";
    let exe =
        build_instrumented_rust_with("rust-app", "x86_64-unknown-linux-gnu", "rust-app", extra);
    let dir = workdir("trace-rust-gnu-crt-static");
    rust_panic_runs(X86_64, &exe, &dir, "gnu crt-static", true);
}

/// Compiles a C fixture with -O2 -pg (and `extra`), linked without -pg (to run preloaded).
fn build_pg(dir: &Path, src: &str) -> PathBuf {
    build_plain(dir, src, &["-pg"], &["-lpthread"])
}

#[test]
fn trace_survives_sigkill() {
    // What was recorded before SIGKILL is in the trace: every call the program saw return
    // before the kill (it says so on stdout) is there, entry and exit, and the trace reads
    // (the process is marked as not ended).
    let dir = workdir("trace-kill");
    let exe = build_pg(&dir, "calltree.c");
    let trace = dir.join("trace");
    let mut child = Command::new(instrfn_cli())
        .args(["record", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .arg("spin")
        .current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("done 300000\n") {
        use std::io::Read;
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "the program stopped early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    // Kill the traced program itself (instrfn record's child).
    let pid = std::fs::read_dir(&trace)
        .unwrap()
        .flatten()
        .find_map(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_suffix(".1.meta")
                .map(String::from)
        })
        .unwrap();
    run_ok(Command::new("kill").args(["-KILL", &pid]));
    let status = child.wait().unwrap();
    assert!(!status.success());
    let reported: u64 = seen
        .lines()
        .filter_map(|l| l.strip_prefix("done ")?.parse().ok())
        .max()
        .unwrap();
    let procs = instrfn_dump(&trace);
    assert!(
        procs[0].header.contains("[did not exit normally]"),
        "{}",
        procs[0].header
    );
    let events = &procs[0].threads.values().next().unwrap();
    let exits = events
        .iter()
        .filter(|e| e.kind == "exit" && e.name == "a")
        .count() as u64;
    assert!(
        exits >= reported,
        "{exits} exits of a() in the trace, {reported} returned"
    );
}

#[test]
fn a_full_trace_costs_no_more_than_recording() {
    // Once the trace is full (here INSTRFN_TRACE_LIMIT's one chunk, taken by the main thread),
    // the threads' events go into their sinks and are counted there: exactly as many lost as
    // made, at about recording's cost. (Each of them took the slow path before, two system
    // calls per event: the limited run cost about 75 times the CPU time of the full recording.)
    // CPU time (GNU time), not wall time: the bound is a ratio far from both figures.
    let dir = workdir("trace-full-cost");
    let exe = build_pg(&dir, "threads.c");
    const T: u64 = 2;
    const N: u64 = 500_000;
    let made = 2 * (2 * T * N + T + 1);
    let cpu = |env: &[(&str, &str)], name: &str| -> (f64, String) {
        let times = dir.join(format!("{name}.time"));
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
    assert!(
        limited <= 4.0 * full + 0.1,
        "a full trace cost {limited:.2} s of CPU time, the whole recording {full:.2} s"
    );
}

#[test]
fn trace_losses_are_counted_exactly() {
    // A trace limit far below what the program makes, and a file system too small for the
    // trace: recorded + lost = made, exactly, the losses are said (stderr, meta file, loss
    // markers), the program runs as without instrfn, and what was recorded reads.
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

#[test]
fn trace_process_trees_and_many_threads() {
    // Every process of a tree records into the same directory, each image its own files;
    // thousands of short threads use a bounded number of files and chunks.
    let preload = preload_path();
    let dir = workdir("trace-tree");
    let exe = build_c(&dir, "tree.c", &[], Link::Preload);
    let _ = preload;
    let (out, trace) = record_trace(&exe, &["spawn", "100", "own"], &[], &dir);
    assert!(
        stderr_of(&out).contains(", 2 processes,"),
        "{}",
        stderr_of(&out)
    );
    let procs = instrfn_dump(&trace);
    let work = |p: &DumpProcess, f: &str| {
        p.threads
            .values()
            .flatten()
            .filter(|e| e.kind == "exit" && e.name == f)
            .count()
    };
    assert_eq!(
        (work(&procs[0], "work_a"), work(&procs[1], "work_b")),
        (100, 200)
    );
    let (out, trace) = record_trace(&exe, &["reexec", "100", "2"], &[], &dir);
    assert!(
        stderr_of(&out).contains(", 3 processes,"),
        "{}",
        stderr_of(&out)
    );
    let procs = instrfn_dump(&trace);
    assert!(procs.iter().all(|p| work(p, "work_a") == 100));
    let images: Vec<String> = procs
        .iter()
        .map(|p| p.header.split_whitespace().nth(3).unwrap().to_string())
        .collect();
    assert_eq!(images, ["1", "2", "3"]);

    // 4000 threads, 8 at a time: 3 files, and chunks shared by the threads of a block.
    let churn = build_c(&dir, "scenarios.c", &[], Link::Preload);
    let (out, trace) = record_trace(&churn, &["churn", "4000", "50"], &[], &dir);
    assert!(stderr_of(&out).contains("instrfn: "), "{}", stderr_of(&out));
    let files = std::fs::read_dir(&trace).unwrap().count();
    assert_eq!(files, 3);
    let blocks = |suffix: &str| {
        std::os::unix::fs::MetadataExt::blocks(
            &std::fs::metadata(
                std::fs::read_dir(&trace)
                    .unwrap()
                    .flatten()
                    .find(|e| e.file_name().to_string_lossy().ends_with(suffix))
                    .unwrap()
                    .path(),
            )
            .unwrap(),
        ) * 512
    };
    let (events, staging) = (blocks(".events"), blocks(".stage"));
    // Chunks are handed on with thread blocks (9 of them), not one per thread: the events
    // file holds the full ones; the staging file the chunks in use at once, reused (two per
    // block, the collector's pool of 4 and up to 16 spares).
    let data = 16 * 4000 * (2 + 2 * 50 + 1);
    assert!(
        events <= data + (1 << 20),
        "{events} bytes of events for 4000 threads"
    );
    assert!(
        staging <= (2 * 9 + 4 + 16) << 20,
        "{staging} bytes of staging file for 4000 threads"
    );
    let procs = instrfn_dump(&trace);
    assert_eq!(procs[0].threads.len(), 4001, "threads in the trace");
    let calls: usize = procs[0]
        .threads
        .values()
        .map(|e| {
            e.iter()
                .filter(|e| e.kind == "exit" && e.name == "work_a")
                .count()
        })
        .sum();
    assert_eq!(calls, 4000 * 50);
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

/// The trace files of `dir` with this suffix, sorted.
fn trace_files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

#[test]
fn trace_collector_prepares_chunks_and_is_optional() {
    // The collector thread prepares chunks ahead; the trace is the same with it and without it
    // (INSTRFN_COLLECTOR=off: each thread maps its own), exact, and the collector is no thread
    // of the trace. Chunks it prepared that nobody took give their blocks back at exit. A fork
    // child starts a collector of its own.
    use std::os::unix::fs::MetadataExt;
    let dir = workdir("trace-collector");
    let exe = build_c(&dir, "threads.c", &[], Link::Preload);
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
        let (tid, _cpu, prepared, by_threads) = collector_line(&trace_files(&trace, ".meta")[0]);
        if collector == "on" {
            assert!(
                tid > 0 && (prepared > 0 || nice == "19"),
                "{context}: collector {tid} {prepared}"
            );
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
            // one or two in flight: 7-11 chunks over 20 runs here, where threads that mapped
            // fresh chunks whenever the pool was empty (and left retired ones to the
            // collector) had 14-16.
            assert!(
                staging <= (2 * (T + 1) + 4 + 2) * CHUNK,
                "{context}: a staging file of {} chunks of {CHUNK} (the threads did not \
                 commit the retired chunks themselves?)",
                staging / CHUNK
            );
        }
    }
    // fork: the child's own collector.
    let tree = build_c(&dir, "tree.c", &[], Link::Preload);
    let (_, trace) = record_trace(&tree, &["forkexec", "100"], &[], &dir);
    let metas = trace_files(&trace, ".meta");
    assert_eq!(metas.len(), 2, "{metas:?}");
    let (parent, child) = (collector_line(&metas[0]).0, collector_line(&metas[1]).0);
    assert!(
        parent > 0 && child > 0 && parent != child,
        "collectors {parent} {child}"
    );
}

#[test]
fn trace_files_survive_a_program_that_closes_every_descriptor() {
    // closefds.c closes every descriptor above 2 after main's entry opened the trace (a loop
    // to _SC_OPEN_MAX, and close_range), then writes a file of its own at the lowest number
    // and dup2s it to 1000-1009 (where the trace's descriptors were), runs two threads and a
    // fork child. Its file must stay exactly what it wrote and its descriptors open (in the
    // child too: a fork child closes the parent's trace descriptors, only if they are still
    // the trace's); the trace must be whole, with the collector and without (threads then
    // commit through the descriptors themselves), and say once that the files were reopened.
    // Before the descriptors were checked, the file got the meta lines (and the trace lost
    // everything after the close).
    const N: u64 = 200_000;
    let dir = workdir("trace-closefds");
    let exe = build_c(&dir, "closefds.c", &[], Link::Preload);
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

#[test]
fn trace_collector_makes_way_for_unshare_of_a_user_namespace() {
    // unshare(CLONE_NEWUSER) needs a process of one thread; the collector thread made it
    // fail with EINVAL. The wrapper ends the collector, calls again and starts it again: the
    // program gets the answer it gets without instrfn, and the trace is whole, with chunks
    // committed by the collector after it (64 KiB chunks, a collector at the threads' nice).
    const N: u64 = 100_000;
    let dir = workdir("trace-userns");
    let exe = build_c(&dir, "userns.c", &[], Link::Preload);
    let plain = run_ok(Command::new(&exe).arg(N.to_string()).current_dir(&dir));
    let plain = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert!(plain.contains("unshare(CLONE_NEWUSER): "), "{plain}");
    let (out, trace) = record_trace(
        &exe,
        &[&N.to_string()],
        &[
            ("INSTRFN_BUFSIZE", "65536"),
            ("INSTRFN_COLLECTOR_NICE", "0"),
        ],
        &dir,
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        plain,
        "the program's output"
    );
    let procs = instrfn_dump(&trace);
    assert_eq!(procs[0].lost, 0);
    assert_balanced(&procs[0], "userns");
    assert_eq!(calls_per_function(&procs[0]).get("work"), Some(&(4 * N)));
    let (tid, _cpu, prepared, _) = collector_line(&trace_files(&trace, ".meta")[0]);
    assert!(
        tid > 0 && prepared > 0,
        "a collector after the unshare: {tid} {prepared}"
    );
}

#[test]
fn trace_a_relative_output_holds_after_chdir() {
    // LD_PRELOAD with a relative INSTRFN_OUTPUT (and with none: instrfn.data), and a shell
    // that changes directory before it runs the traced program, which posix_spawns a child:
    // both record into the directory named from where the tree started (the runtime makes
    // the path absolute at load, and the exec and spawn wrappers pass it on — the shell's
    // too, which traces nothing itself), none into the one the shell changed to.
    let dir = workdir("trace-chdir");
    let exe = build_c(&dir, "tree.c", &[], Link::Preload);
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let script = format!("cd sub && exec {} spawn 100 inherit", exe.display());
    for output in [Some("rel-trace"), None] {
        let name = output.unwrap_or("instrfn.data");
        let _ = std::fs::remove_dir_all(dir.join(name));
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script])
            .current_dir(&dir)
            .env("LD_PRELOAD", preload_path())
            .env("INSTRFN_MODE", "trace")
            .env_remove("INSTRFN_OUTPUT");
        if let Some(o) = output {
            cmd.env("INSTRFN_OUTPUT", o);
        }
        let out = run_ok(&mut cmd);
        assert!(
            stdout_of(&out).contains("child "),
            "{name}: {}",
            stdout_of(&out)
        );
        assert!(
            !sub.join(name).exists(),
            "{name}: a trace in the directory changed to"
        );
        let procs = instrfn_dump(&dir.join(name));
        assert_eq!(procs.len(), 2, "{name}: the program and its child");
        let calls: u64 = procs
            .iter()
            .map(|p| {
                let c = calls_per_function(p);
                c.get("work_a").copied().unwrap_or(0) + c.get("work_b").copied().unwrap_or(0)
            })
            .sum();
        assert_eq!(
            calls, 300,
            "{name}: work_a 100 times, the child's work_b 200"
        );
    }
}

#[test]
fn trace_collector_runs_at_its_nice_value() {
    // The collector thread's nice value as the kernel reports it (/proc/PID/task/TID/stat,
    // field 19), read while the program sleeps: 19 by default, INSTRFN_COLLECTOR_NICE's value
    // when set, and the program's own threads untouched.
    // Relative to the nice value this test runs at, which the program inherits (only root
    // may give the collector a lower one than that).
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
        cmd.env("LD_PRELOAD", preload_path())
            .env("INSTRFN_MODE", "trace")
            .env("INSTRFN_OUTPUT", dir.join("trace"))
            .stdout(std::process::Stdio::null())
            .current_dir(&dir);
        if let Some(v) = setting {
            cmd.env("INSTRFN_COLLECTOR_NICE", v);
        }
        let mut child = cmd.spawn().unwrap();
        let task_dir = PathBuf::from(format!("/proc/{}/task", child.id()));
        // (comm, nice) of every thread, once the collector shows.
        let mut seen = Vec::new();
        for _ in 0..200 {
            seen = std::fs::read_dir(&task_dir)
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
            if seen.iter().any(|(c, _)| c == "instrfn-collect") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let status = child.wait().unwrap();
        assert!(status.success(), "{setting:?}: {status}");
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

#[test]
fn trace_signal_handlers_interrupting_trampolines() {
    // tracesig.c: a second thread signals the main thread again as soon as its handler ran,
    // so handlers (which trace 102 calls each) land between any two instructions of the
    // trampolines, with 4 KiB chunks that they often fill. Every run must give a nested trace
    // with every exit and the exact counts.
    let dir = workdir("trace-signals");
    for (name, flags) in [("pg", &["-pg"][..]), ("fentry", &["-pg", "-mfentry"][..])] {
        let exe = build_plain(&dir, "tracesig.c", flags, &["-lpthread"]);
        let exe_named = dir.join(format!("tracesig-{name}"));
        std::fs::rename(&exe, &exe_named).unwrap();
        for run in 0..4 {
            let context = format!("{name} run {run}");
            let (out, trace) =
                record_trace(&exe_named, &["3000"], &[("INSTRFN_BUFSIZE", "4096")], &dir);
            let text = stdout_of(&out);
            let (handled, calls) = tracesig_output(&text, &context);
            // 1000 unless the machine is busy (the sender then runs less often).
            assert!(handled >= 10, "{context}: {text}");
            let procs = instrfn_dump(&trace);
            let counts = assert_balanced(&procs[0], &context);
            assert_eq!(procs[0].lost, 0, "{context}");
            assert_tracesig_counts(&counts, handled, calls, &context);
        }
    }
}

/// The Lua 5.4 sources of the lua-src crate (a dev-dependency), found with `cargo metadata`.
fn lua_sources() -> PathBuf {
    let out = run_ok(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["metadata", "--format-version", "1", "--locked"])
            .current_dir(root()),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let manifest = text
        .split("\"manifest_path\":\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .find(|p| p.contains("/lua-src-547."))
        .expect("lua-src is a dev-dependency: cargo metadata names its manifest");
    let src = Path::new(manifest).parent().unwrap().join("lua-5.4.7");
    assert!(src.join("lua.h").is_file(), "{}", src.display());
    src
}

#[test]
fn trace_lua_errors_and_coroutines() {
    // Lua 5.4 built with -pg: its pcall/error and coroutines are setjmp/longjmp in C. Under
    // instrfn record the interpreter prints exactly what it prints without it, exits with the
    // same status (also for an uncaught error), and every thread's trace nests, with the
    // frames longjmp skipped closed as unwound.
    let dir = workdir("trace-lua");
    let src = lua_sources();
    let mut objs = Vec::new();
    let mut c_files: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "c")
                && !["lua.c", "luac.c"].contains(&p.file_name().unwrap().to_str().unwrap())
        })
        .collect();
    c_files.push(fixture("c/lua_driver.c"));
    for c in &c_files {
        let obj = dir.join(c.file_name().unwrap()).with_extension("o");
        run_ok(
            Command::new("gcc")
                .args(["-O2", "-pg", "-DLUA_USE_LINUX", "-c"])
                .arg("-I")
                .arg(&src)
                .arg(c)
                .arg("-o")
                .arg(&obj),
        );
        objs.push(obj);
    }
    let lua = dir.join("lua-pg");
    run_ok(
        Command::new("gcc")
            .args(&objs)
            .args(["-lm", "-ldl", "-o"])
            .arg(&lua),
    );
    for (script, status) in [("errors.lua", 0), ("fails.lua", 1)] {
        let script = fixture(&format!("lua/{script}"));
        let plain = run(Command::new(&lua).arg(&script).current_dir(&dir));
        assert_eq!(plain.status.code(), Some(status), "{}", stderr_of(&plain));
        let trace = dir.join("trace");
        let out = run(Command::new(instrfn_cli())
            .arg("record")
            .arg("-o")
            .arg(&trace)
            .arg("--")
            .arg(&lua)
            .arg(&script)
            .current_dir(&dir));
        let context = script.display().to_string();
        assert_eq!(out.status.code(), Some(status), "{context}");
        assert_eq!(stdout_of(&out), stdout_of(&plain), "{context}: stdout");
        // The interpreter's stderr, then instrfn's summary line.
        let err = stderr_of(&out);
        let (program, summary) = err.rsplit_once("instrfn: ").unwrap();
        assert_eq!(program, stderr_of(&plain), "{context}: stderr");
        assert!(summary.contains(" 0 lost"), "{context}: {summary}");
        let procs = instrfn_dump(&trace);
        let counts = assert_balanced(&procs[0], &context);
        assert_eq!(count_of(&counts, "entry", "main"), 1, "{context}");
        if status == 0 {
            // 2000 + 200 + 200 + 1 errors thrown (and those in coroutines): each a longjmp
            // from luaD_throw, which never returns.
            assert!(
                count_of(&counts, "unwound", "luaD_throw") >= 2401,
                "{context}: {:?}",
                count_of(&counts, "unwound", "luaD_throw")
            );
            assert_eq!(count_of(&counts, "exit", "luaD_throw"), 0, "{context}");
            assert!(
                count_of(&counts, "entry", "lua_resume") >= 1000,
                "{context}"
            );
        }
    }
}

#[test]
fn trace_names_functions_of_dlopened_libraries() {
    // Libraries loaded after start get `module` lines when dlopen returns (the wrapper notes
    // them), so their functions show by name even when the process is killed right after
    // (dlopenkill: no instrfn_flush(), nothing written at exit); and before a dlclose unloads
    // them, at exit and on instrfn_flush() as before.
    const N: u64 = 300;
    let dir = workdir("trace-dlopen");
    let libwork = build_library(&dir, "libwork.so", &[]);
    let libother = build_library(&dir, "libother.so", &["-DOTHER"]);
    let obj = dir.join("loader.o");
    cc(
        X86_64,
        &[
            OsStr::new("-O2"),
            OsStr::new("-pg"),
            OsStr::new("-c"),
            fixture("c/libuser.c").as_os_str(),
        ],
        &obj,
    );
    let loader = cc(
        X86_64,
        &[obj.as_os_str(), OsStr::new("-ldl")],
        &dir.join("loader"),
    );
    let (lw, lo) = (libwork.to_str().unwrap(), libother.to_str().unwrap());
    for (args, names) in [
        (vec!["dlopen", "300", lw], vec!["lib_outer"]),
        (
            vec!["reload", "300", lw, lo],
            vec!["lib_outer", "other_outer"],
        ),
        (vec!["flushkill", "300", lw], vec!["lib_outer"]),
        (vec!["dlopenkill", "300", lw], vec!["lib_outer"]),
    ] {
        let context = args.join(" ");
        let trace = dir.join("trace");
        let _ = std::fs::remove_dir_all(&trace);
        let out = run(Command::new(instrfn_cli())
            .arg("record")
            .arg("-o")
            .arg(&trace)
            .arg("--")
            .arg(&loader)
            .args(&args)
            .current_dir(&dir));
        let killed = args[0].ends_with("kill");
        assert_eq!(
            out.status.code(),
            if killed { None } else { Some(0) },
            "{context}: {}",
            stderr_of(&out)
        );
        let procs = instrfn_dump(&trace);
        let counts = assert_balanced_or_open(&procs[0], killed, &context);
        for name in names {
            let n = if name == "other_outer" { 2 * N } else { N };
            assert_eq!(count_of(&counts, "entry", name), 1, "{context}: {name}");
            let inner = name.replace("outer", "inner");
            assert_eq!(count_of(&counts, "entry", &inner), n, "{context}: {inner}");
        }
        assert_eq!(count_of(&counts, "entry", "local"), N, "{context}");
    }
}

/// Event counts of `p`, after checking that its events nest (all closed unless the process
/// was killed, when the frames still open at the kill stay open).
fn assert_balanced_or_open(
    p: &DumpProcess,
    killed: bool,
    context: &str,
) -> std::collections::BTreeMap<(String, String), u64> {
    if !killed {
        return assert_balanced(p, context);
    }
    let mut counts = std::collections::BTreeMap::new();
    for e in p.threads.values().flatten() {
        *counts.entry((e.kind.clone(), e.name.clone())).or_default() += 1;
    }
    counts
}

#[test]
fn trace_survives_swapcontext_coroutines() {
    // Two coroutines on stacks of their own (in the heap, in mappings of their own, in .bss)
    // interleave their calls on one thread: each returns through its own entry (the newer
    // entries of the other coroutine stay), nothing aborts, the output is the program's own.
    // Frames a longjmp skips on a coroutine's stack are not judged gone by address (such a
    // stack may lie anywhere): they stay open.
    // With `walk` every leaf() call also runs backtrace(), whose walk passes the tombstone
    // that fa's entry becomes when fa returns under fb's newer entry: before the walk's end
    // looked at live entries only, it read the tombstone's slot (1) as an address (SIGSEGV).
    let dir = workdir("trace-coroutines");
    let exe = build_c(&dir, "coroutines.c", &[], Link::Preload);
    for (kind, walk) in [("heap", ""), ("mmap", ""), ("static", ""), ("heap", "walk")] {
        let args = [kind, "100", walk];
        let args = &args[..if walk.is_empty() { 2 } else { 3 }];
        let plain = run_ok(Command::new(&exe).args(args).current_dir(&dir));
        let (out, trace) = record_trace(&exe, args, &[], &dir);
        assert_eq!(stdout_of(&out), stdout_of(&plain), "{kind} {walk}");
        let procs = instrfn_dump(&trace);
        let mut counts = std::collections::BTreeMap::<(String, String), u64>::new();
        for e in procs[0].threads.values().flatten() {
            *counts.entry((e.kind.clone(), e.name.clone())).or_default() += 1;
        }
        for (kind_, name, n) in [
            ("entry", "fa", 100),
            ("exit", "fa", 100),
            ("entry", "fb", 100),
            ("exit", "fb", 100),
            ("entry", "leaf", 400),
            ("exit", "leaf", 400),
            ("entry", "dive", 40),
            ("exit", "dive", 0),
            ("entry", "run_a", 1),
            ("exit", "run_a", 0),
            ("exit", "main", 1),
        ] {
            assert_eq!(count_of(&counts, kind_, name), n, "{kind}: {kind_} {name}");
        }
    }
}

#[test]
fn return_pad_unwind_expression_is_its_generators() {
    // src/arch/<arch>/exit.s's return pad FDEs hold scripts/return-pad-cfi.py's output (its
    // branch offsets are computed there): they must not drift apart.
    require_tool("python3");
    for arch in ["x86_64", "aarch64", "riscv64", "s390x"] {
        let script = root().join("scripts/return-pad-cfi.py");
        let out = run_ok(Command::new("python3").arg(script).arg(arch));
        let generated = String::from_utf8(out.stdout).unwrap();
        let asm = std::fs::read_to_string(root().join(format!("src/arch/{arch}/exit.s"))).unwrap();
        assert!(generated.lines().count() > 2, "{generated}");
        assert!(
            asm.contains(&generated),
            "src/arch/{arch}/exit.s does not hold scripts/return-pad-cfi.py {arch}'s output:\n{generated}"
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

#[test]
fn programs_under_a_file_size_limit_keep_running_and_keep_what_fits() {
    // A write past RLIMIT_FSIZE raises SIGXFSZ, whose default action ends the program with a
    // core dump: under `ulimit -f 256` a traced program died as its trace files
    // passed 256 KiB, before printing anything (exit status 128+25), and one whose gmon.out
    // was larger than the limit died at exit. instrfn checks its own writes against the limit:
    // the program runs and exits as it does untraced, says once what was left out, and keeps
    // what fits.
    const T: u64 = 2;
    const N: u64 = 200_000;
    let dir = workdir("fsize");
    let exe = build_c(&dir, "threads.c", &[], Link::Preload);
    let (t, n) = (T.to_string(), N.to_string());
    let plain = run_ok(Command::new(&exe).args([&t, &n]).current_dir(&dir));
    let traced = |limit: u64, env: &[(&str, &str)]| {
        let mut cmd = Command::new(&exe);
        cmd.args([&t, &n])
            .current_dir(&dir)
            .env("LD_PRELOAD", preload_path())
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
        &gprof_flat(X86_64, &exe, &gmon),
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
    // temporary file left (SIGXFSZ killed `instrfn export -o` and left its temporary file).
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
