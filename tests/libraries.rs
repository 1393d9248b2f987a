//! Shared libraries: in gmon mode each -pg library gets a profile of its own at its link-time
//! addresses (linked, dlopen'ed, unloaded by dlclose, reloaded at another's address, loaded
//! twice); in trace mode dlopen'ed libraries' functions show by name, also when the process is
//! killed right after (the dlopen wrapper notes them before dlopen returns); dlerror() says
//! what it says without instrfn; and libinstrfn.so exports its interface and nothing else.

#[macro_use]
mod common;

use common::*;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

feature_tests! {
    libraries:
    gmon_profiles_of_their_own(x86_64, aarch64),
    dlopen_wrapper(aarch64, riscv64, s390x),
    trace_shows_dlopened_functions_by_name(x86_64),
    dynamic_symbols_are_the_interface(x86_64, aarch64, riscv64, s390x),
}

/// gprof reads one ELF file: each instrumented library gets its profile (gmon.out.<library>),
/// at its own link-time addresses, beside the executable's, whether linked or dlopen'ed, with
/// exact counts and arcs (lib_outer -> lib_inner). On x86_64 also: unloaded by dlclose before
/// exit (then written at the dlclose), another library loaded later at the same address does
/// not inherit its counts, and a library loaded twice sums both loads.
fn gmon_profiles_of_their_own(arch: Arch) {
    let preload = preload_path(arch);
    let n_calls: u64 = if arch == X86_64 { 5000 } else { 3000 };
    let name = arch.name;
    let dir = workdir(&format!("{name}-libraries"));
    let libwork = build_library(arch, &dir, "libwork.so", &[]);
    let src = fixture("c/libuser.c");
    let compile = |obj: &Path, defines: &[&str]| {
        let mut args: Vec<&OsStr> = ["-O2", "-pg", "-c"].iter().map(OsStr::new).collect();
        args.extend(defines.iter().map(OsStr::new));
        args.push(src.as_os_str());
        cc(arch, &args, obj);
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
    let linked = cc(arch, &linked_args, &dir.join("libuser"));
    let loader_args = [obj_loader.as_os_str(), OsStr::new("-ldl")];
    let loader = cc(arch, &loader_args, &dir.join("libuser-dl"));
    let env = [("LD_PRELOAD", preload.as_str())];
    let n = n_calls.to_string();
    let work = libwork.display().to_string();
    for (mode, exe, args) in [
        ("linked", &linked, vec!["linked", &n]),
        ("dlopen", &loader, vec!["dlopen", &n, &work]),
    ] {
        let context = format!("{name} {mode}");
        let run_dir = workdir(&format!("{name}-libraries-{mode}"));
        run_exe(arch, exe, &args, &env, &run_dir);
        let flat = gprof_flat(arch, exe, &run_dir.join("gmon.out"));
        assert_calls(&flat, &[("local", n_calls)], &context);
        let profile = run_dir.join("gmon.out.libwork.so");
        let lib = gprof_flat(arch, &libwork, &profile);
        assert_calls(&lib, &[("lib_inner", n_calls)], &context);
        let arcs = gprof_arcs(arch, &libwork, &profile);
        assert_arcs(&arcs, &[("lib_outer", "lib_inner", n_calls)], &context);
        if arch == X86_64 {
            let graph = &arcs.1;
            assert!(
                graph.contains(&format!("{n_calls}/{n_calls}        lib_outer")),
                "{context}: lib_outer -> lib_inner not in the call graph:\n{graph}"
            );
        }
    }
    if arch != X86_64 {
        return;
    }

    // Unloaded, then another library at the same address (the loader reuses the range). No
    // sampling here: a thread's first sample maps its pc table, which could take the range
    // before the loader does.
    let libother = build_library(arch, &dir, "libother.so", &["-DOTHER"]);
    let other = libother.display().to_string();
    let run_dir = workdir(&format!("{name}-libraries-reload"));
    let quiet = [("LD_PRELOAD", preload.as_str()), ("INSTRFN_HZ", "0")];
    let args = ["reload", &n, &work, &other];
    let out = run_exe(arch, &loader, &args, &quiet, &run_dir);
    let bases: Vec<String> = stdout_of(&out)
        .split_whitespace()
        .skip(1)
        .map(String::from)
        .collect();
    assert_eq!(
        bases[0], bases[1],
        "libother.so was not loaded where libwork.so was"
    );
    let work_flat = gprof_flat(arch, &libwork, &run_dir.join("gmon.out.libwork.so"));
    assert_calls(&work_flat, &[("lib_inner", n_calls)], "unloaded libwork.so");
    let other_flat = gprof_flat(arch, &libother, &run_dir.join("gmon.out.libother.so"));
    assert_calls(
        &other_flat,
        &[("other_inner", 2 * n_calls)],
        "libother.so, same address",
    );
    assert_eq!(
        other_flat.entries.len(),
        1,
        "libwork.so's counts leaked into libother.so's profile:\n{}",
        other_flat.text
    );

    // The same library loaded and unloaded twice: one profile with both loads.
    let run_dir = workdir(&format!("{name}-libraries-twice"));
    run_exe(arch, &loader, &["twice", &n, &work], &env, &run_dir);
    let flat = gprof_flat(arch, &libwork, &run_dir.join("gmon.out.libwork.so"));
    assert_calls(&flat, &[("lib_inner", 2 * n_calls)], "loaded twice");
}

/// The dlopen wrapper's routed jump (src/arch/*.rs `routed_jump!`), preloaded under qemu: in
/// gmon mode the call goes straight on to libc's dlopen (the library's own profile, exact); in
/// trace mode through the wrapper, which notes the library before dlopen returns: its `module`
/// line is in the trace of a process killed right after its calls (no instrfn_flush), so they
/// show by name. dlerror()'s message after a failed dlopen, and nothing after one that
/// succeeded, either way.
fn dlopen_wrapper(arch: Arch) {
    const N: u64 = 300;
    let name = arch.name;
    let dir = workdir(&format!("{name}-dlopen-wrapper"));
    let libwork = build_library(arch, &dir, "libwork.so", arch_flags(arch));
    let flags = [&["-pg"], arch_flags(arch)].concat();
    let obj = compile(arch, Compiler::Gcc, &dir, "libuser.c", &flags, "loader.o");
    let loader = cc(
        arch,
        &[obj.as_os_str(), OsStr::new("-ldl")],
        &dir.join("loader"),
    );
    let (n, work) = (N.to_string(), libwork.display().to_string());
    let preload = preload_path(arch);
    let trace = dir.join("trace");
    let t = trace.display().to_string();
    let preloaded = [("LD_PRELOAD", preload.as_str())];
    let traced = [
        ("LD_PRELOAD", preload.as_str()),
        ("INSTRFN_MODE", "trace"),
        ("INSTRFN_OUTPUT", t.as_str()),
    ];
    let stdout =
        |args: &[&str], env: &[(&str, &str)]| stdout_of(&run_exe(arch, &loader, args, env, &dir));

    // gmon mode: libc's dlopen, called as if unwrapped.
    stdout(&["dlopen", &n, &work], &preloaded);
    let flat = gprof_flat(arch, &libwork, &dir.join("gmon.out.libwork.so"));
    assert_calls(&flat, &[("lib_inner", N)], name);

    // dlerror() after a failed and a successful dlopen: the same lines in both modes.
    let missing = ["missing", n.as_str(), work.as_str()];
    let plain = stdout(&missing, &[]);
    assert!(
        plain.starts_with("NULL: /nonexistent-instrfn/libnope.so: cannot open")
            && plain.ends_with("\nloaded: (null)\n"),
        "{name}: {plain}"
    );
    assert_eq!(stdout(&missing, &preloaded), plain, "{name}");
    let _ = std::fs::remove_dir_all(&trace);
    assert_eq!(stdout(&missing, &traced), plain, "{name}");

    // Trace mode, killed after the calls: the library's module line came from the wrapper.
    let _ = std::fs::remove_dir_all(&trace);
    let args = ["dlopenkill", n.as_str(), work.as_str()];
    let out = run(&mut command(arch, &loader, &args, &traced, &dir));
    assert_eq!(out.status.code(), None, "{name}: not killed");
    let procs = instrfn_dump(&trace);
    let events = procs[0].threads.values().flatten();
    let inner = events
        .filter(|e| e.kind == "entry" && e.name == "lib_inner")
        .count() as u64;
    assert_eq!(inner, N, "{name}: {:?}", procs[0].header);
}

/// Libraries loaded after start get `module` lines when dlopen returns (the wrapper notes
/// them), so their functions show by name even when the process is killed right after
/// (dlopenkill: no instrfn_flush(), nothing written at exit); and before a dlclose unloads
/// them, at exit and on instrfn_flush() as before.
fn trace_shows_dlopened_functions_by_name(arch: Arch) {
    const N: u64 = 300;
    let dir = workdir("trace-dlopen");
    let libwork = build_library(arch, &dir, "libwork.so", &[]);
    let libother = build_library(arch, &dir, "libother.so", &["-DOTHER"]);
    let obj = dir.join("loader.o");
    cc(
        arch,
        &[
            OsStr::new("-O2"),
            OsStr::new("-pg"),
            OsStr::new("-c"),
            fixture("c/libuser.c").as_os_str(),
        ],
        &obj,
    );
    let loader = cc(
        arch,
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

/// libinstrfn.so defines and exports exactly the runtime's interface, read with `arch`'s nm:
/// the ABI's counting entry points (`__fentry__` on x86_64 and s390x, gcc's `__return__` on
/// x86_64), glibc's gmon entry
/// points, the documented C API, -finstrument-functions' hooks, and the libc functions the
/// runtime wraps.
fn dynamic_symbols_are_the_interface(arch: Arch) {
    let nm = if arch == X86_64 {
        "nm".to_string()
    } else {
        arch.cc.replace("gcc", "nm")
    };
    let fentry = matches!(arch.name, "x86_64" | "s390x");
    let mut expected = expected_exports(fentry, true);
    if arch == X86_64 {
        expected.push("__return__");
        expected.sort();
    }
    assert_eq!(exported_symbols(arch, &nm), expected, "{}", arch.name);
}

/// The symbols a libinstrfn.so for `arch` must export, and nothing else: the ABI's counting
/// entry points, glibc's gmon entry points, the documented C API, and the libc functions the
/// runtime wraps.
fn expected_exports(fentry: bool, cyg: bool) -> Vec<&'static str> {
    let mut v = vec![
        "mcount",
        "_mcount",
        "__monstartup",
        "monstartup",
        "_mcleanup",
        "moncontrol",
        "instrfn_start",
        "instrfn_stop",
        "instrfn_write_gmon",
        "instrfn_flush",
        "instrfn_calls_recorded",
        "instrfn_snapshot",
        "execve",
        "execv",
        "execvp",
        "execvpe",
        "execl",
        "execle",
        "execlp",
        "fexecve",
        "execveat",
        "posix_spawn",
        "posix_spawnp",
        "dlopen",
        "dlmopen",
        "dlclose",
        "sigaction",
        "_Unwind_RaiseException",
        "_Unwind_Resume",
        "_Unwind_Resume_or_Rethrow",
        "_Unwind_ForcedUnwind",
        "_Unwind_Backtrace",
        "backtrace",
        "__cxa_begin_catch",
        "unshare",
        "setns",
    ];
    if fentry {
        v.push("__fentry__");
    }
    if cyg {
        v.extend(["__cyg_profile_func_enter", "__cyg_profile_func_exit"]);
    }
    v.sort();
    v
}

/// The symbols `arch`'s libinstrfn.so defines and exports, read with `nm` (that arch's).
fn exported_symbols(arch: Arch, nm: &str) -> Vec<String> {
    require_tool(nm);
    let lib = runtime_lib(arch, Lib::Shared);
    let out = run_ok(Command::new(nm).args(["-D", "--defined-only"]).arg(&lib));
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(String::from))
        .collect();
    got.sort();
    got
}
