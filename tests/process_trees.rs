//! Process trees: a fork child writes a profile of its own (starting from zero), exec never
//! kills the new image and each image writes its profile, posix_spawn'ed children and programs
//! under a shell that inherited LD_PRELOAD each write theirs while the shell stays inert, the
//! dump signal during forks deadlocks nothing; in trace mode every process of a tree records
//! into one directory (named from where the tree started, whatever directory it changes to),
//! and thousands of short threads use a bounded number of files and chunks.

#[macro_use]
mod common;

use common::*;
use std::process::Command;

feature_tests! {
    process_trees:
    fork_child_writes_its_own_file(x86_64, aarch64, riscv64, s390x),
    exec_never_kills_the_new_image(x86_64),
    one_profile_per_image(x86_64),
    fork_while_the_dump_signal_arrives(x86_64),
    inherited_preload_stays_inert(x86_64),
    trace_one_directory_and_many_threads(x86_64),
    trace_relative_output_holds_after_chdir(x86_64),
}

/// scenarios.c `fork N`: the parent's gmon.out has its 2N calls of in_parent and none of the
/// child's; the child's gmon.out.<pid> its 2N calls of in_child and none of the parent's (it
/// starts from zero). x86_64 preloaded and linked, the others linked.
fn fork_child_writes_its_own_file(arch: Arch) {
    let (links, n): (&[Link], u64) = if arch == X86_64 {
        (&[Link::Preload, Link::Static], 5000)
    } else {
        (&[Link::Static], 2000)
    };
    let preload = preload_path(arch);
    for &link in links {
        let context = format!("{} {link:?}", arch.name);
        let dir = workdir(&format!("{}-fork-{link:?}", arch.name));
        let exe = build_c(arch, &dir, "scenarios.c", &[], link);
        let env = env_for(link, &preload, &[]);
        let out = run_exe(arch, &exe, &["fork", &n.to_string()], &env, &dir);
        let child = reported(&stdout_of(&out), "child") as u32;
        let p = gprof_flat(arch, &exe, &dir.join("gmon.out"));
        let expected = [("in_parent", 2 * n), ("in_child", 0)];
        assert_calls(&p, &expected, &format!("{context} parent"));
        let c = gprof_flat(arch, &exe, &dir.join(format!("gmon.out.{child}")));
        let expected = [("in_child", 2 * n), ("in_parent", 0)];
        assert_calls(
            &c,
            &expected,
            &format!("{context} child (starts from zero)"),
        );
    }
}

/// ITIMER_PROF and a pending SIGPROF survive execve while the handler does not: a -pg
/// program that execs a CPU-bound shell loop is killed ("Profiling timer expired") under
/// glibc's gcrt. instrfn's per-thread POSIX timers are deleted by exec and never leave a
/// signal pending, through the libc wrappers and the raw system call alike; the image's
/// profile is written before it is replaced (unless a fork child recorded nothing).
fn exec_never_kills_the_new_image(arch: Arch) {
    let preload = preload_path(arch);
    const N: u64 = 3000;
    for link in [Link::Preload, Link::Static] {
        let dir = workdir(&format!("exec-{link:?}"));
        let exe = build_c(arch, &dir, "tree.c", &[], link);
        let env = env_for(link, &preload, &[("INSTRFN_HZ", "10000")]);

        let out = run_exe(arch, &exe, &["forkexec", &N.to_string()], &env, &dir);
        let text = stdout_of(&out);
        assert!(text.contains("child-done"), "{link:?} forkexec: {text}");
        assert_eq!(reported(&text, "status"), 0.0, "{link:?} forkexec: {text}");
        let files = profiles(arch, &dir, &exe);
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
            let out = run_exe(arch, &exe, &[mode, &N.to_string()], &env, &dir);
            let text = stdout_of(&out);
            assert!(text.contains("exec-done"), "{link:?} {mode}: {text}");
            if mode == "exec" {
                let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
                assert_calls(&flat, &[("work_a", N)], &format!("{link:?} before exec"));
            } else {
                // No wrapper saw the raw system call: nothing written, nothing killed.
                assert!(!dir.join("gmon.out").exists(), "{link:?} rawexec");
            }
        }

        // A failed exec leaves profiling running: counts and samples go on.
        let _ = std::fs::remove_file(dir.join("gmon.out"));
        let out = run_exe(arch, &exe, &["execfail", &N.to_string()], &env, &dir);
        assert_eq!(reported(&stdout_of(&out), "errno"), 2.0);
        let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
        assert_calls(&flat, &[("work_a", 2 * N)], &format!("{link:?} execfail"));
        // hot() spins for 0.3 s of CPU time after it: without sampling it would have no
        // samples. How many a loaded host's tick accounting gives varies (a third of the CPU
        // time, or less), so the bar is relative: hot() holds at least half of all samples,
        // as it takes nearly all of the program's CPU time.
        let hot = flat.entries.get("hot").map_or(0.0, |e| e.self_seconds);
        let total = flat.total_seconds();
        assert!(
            hot > 0.0 && hot >= 0.5 * total,
            "{link:?}: hot() has {hot} of {total} s sampled after the failed exec\n{}",
            flat.text
        );
    }
}

/// tree.c: three images of one pid, each exec'ing the next, write gmon.out, gmon.out.<pid>.2
/// and .3; posix_spawn'ed children (with the parent's environment and with one of their own)
/// write gmon.out.<their pid>; instrumented programs under an uninstrumented shell that
/// inherited LD_PRELOAD each write theirs, and the shell, the root, writes nothing.
fn one_profile_per_image(arch: Arch) {
    let preload = preload_path(arch);
    const N: u64 = 1000;
    let dir = workdir("tree");
    let exe = build_c(arch, &dir, "tree.c", &[], Link::Preload);
    let env = [("LD_PRELOAD", preload.as_str())];

    // Three images of one pid, each exec'ing the next: gmon.out, gmon.out.<pid>.2, .3.
    let out = run_exe(arch, &exe, &["reexec", &N.to_string(), "2"], &env, &dir);
    let pid = reported(&stdout_of(&out), "pid") as u32;
    let files = profiles(arch, &dir, &exe);
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    let (second, third) = (format!("gmon.out.{pid}.2"), format!("gmon.out.{pid}.3"));
    assert_eq!(names, ["gmon.out", second.as_str(), third.as_str()]);
    for (name, flat) in &files {
        assert_calls(flat, &[("work_a", N)], name);
    }

    // posix_spawn'ed children, with the parent's environment and with one of their own.
    for envmode in ["inherit", "own"] {
        let dir = workdir(&format!("tree-spawn-{envmode}"));
        let out = run_exe(arch, &exe, &["spawn", &N.to_string(), envmode], &env, &dir);
        let child = reported(&stdout_of(&out), "child") as u32;
        let files = profiles(arch, &dir, &exe);
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
    let files = profiles(arch, &dir, &exe);
    assert_eq!(files.len(), 2, "{:?}", files.keys());
    assert!(!files.contains_key("gmon.out"));
    let mut counts: Vec<u64> = files.values().map(|f| f.calls("work_b")).collect();
    counts.sort();
    assert_eq!(counts, [100, 200]);
}

/// The dump signal hammers the forking thread: neither the fork handlers nor the writer may
/// hold a lock across fork that the signal's writer then waits for (a deadlock, which the
/// 120 s deadline catches). Every file each process wrote is readable, with its exact counts.
fn fork_while_the_dump_signal_arrives(arch: Arch) {
    let dir = workdir("forkdump");
    let exe = build_c(arch, &dir, "scenarios.c", &[], Link::Static);
    const N: u64 = 100;
    let mut cmd = command(
        arch,
        &exe,
        &["forkdump", &N.to_string()],
        &[("INSTRFN_DUMP_SIGNAL", "USR1")],
        &dir,
    );
    run_within(&mut cmd, 120);
    let files = profiles(arch, &dir, &exe);
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

/// SIGPROF's number on Linux.
const SIGPROF: u32 = 27;

/// A shell that inherited LD_PRELOAD never calls a counting function: no timer, no file.
fn inherited_preload_stays_inert(arch: Arch) {
    let dir = workdir("inert");
    let preload = preload_path(arch);
    let out = run_ok(
        Command::new("sh")
            .args(["-c", "grep -E '^SigCgt' /proc/$$/status; sleep 0.05; true"])
            .env("LD_PRELOAD", &preload)
            .current_dir(&dir),
    );
    let sigcgt = stdout_of(&out);
    let mask = u64::from_str_radix(sigcgt.split_whitespace().nth(1).unwrap(), 16).unwrap();
    assert_eq!(
        mask & (1 << (SIGPROF - 1)),
        0,
        "SIGPROF caught by an inert shell: {sigcgt}"
    );
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "the shell wrote a file"
    );
    assert!(stderr_of(&out).is_empty(), "{}", stderr_of(&out));
}

/// Every process of a tree records into the same directory, each image its own files;
/// thousands of short threads use a bounded number of files and chunks.
fn trace_one_directory_and_many_threads(arch: Arch) {
    let dir = workdir("trace-tree");
    let exe = build_c(arch, &dir, "tree.c", &[], Link::Preload);
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
    let churn = build_c(arch, &dir, "scenarios.c", &[], Link::Preload);
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

/// LD_PRELOAD with a relative INSTRFN_OUTPUT (and with none: instrfn.data), and a shell
/// that changes directory before it runs the traced program, which posix_spawns a child:
/// both record into the directory named from where the tree started (the runtime makes
/// the path absolute at load, and the exec and spawn wrappers pass it on — the shell's
/// too, which traces nothing itself), none into the one the shell changed to.
fn trace_relative_output_holds_after_chdir(arch: Arch) {
    let dir = workdir("trace-chdir");
    let exe = build_c(arch, &dir, "tree.c", &[], Link::Preload);
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let script = format!("cd sub && exec {} spawn 100 inherit", exe.display());
    for output in [Some("rel-trace"), None] {
        let name = output.unwrap_or("instrfn.data");
        let _ = std::fs::remove_dir_all(dir.join(name));
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script])
            .current_dir(&dir)
            .env("LD_PRELOAD", preload_path(arch))
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
