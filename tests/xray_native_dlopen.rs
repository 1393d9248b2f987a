//! XRay sleds of dlopen'ed libraries, patched by the runtime itself (no compiler-rt linked
//! anywhere): the dlopen wrapper patches a plugin's sleds before dlopen returns, whichever
//! thread loads it, so every call of its functions is traced from the first; dlerror() and
//! the caller's library search path are what they are without instrfn.

#[macro_use]
mod common;

use common::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

feature_tests! {
    xray_native_dlopen:
    clang_dlopened_plugin_traced_from_its_first_call(x86_64),
    clang_dlopen_keeps_dlerror_and_the_callers_library_path(x86_64),
    clang_dlopen_from_many_threads_at_once(x86_64),
}

/// The threads of the dlopen fixture's runs.
const T: u64 = 4;

/// The dlopen fixtures (tests/fixtures/xray/dlopen_main.c and plugin.c), clang XRay sleds, no
/// compiler-rt linked anywhere.
struct Dlopen {
    /// `<dir>/libplug.so` (also copied to `<dir>/sub/libplug.so`).
    plugin: PathBuf,
    /// The program, plain.
    plain: PathBuf,
    /// With `-rpath <dir>/sub` as a DT_RPATH, and as a DT_RUNPATH.
    rpath: PathBuf,
    runpath: PathBuf,
    /// With libinstrfn.a linked in and the RUNPATH.
    linked: PathBuf,
}

fn dlopen_fixture(dir: &Path) -> Dlopen {
    require_tool("clang");
    let xray = ["-O2", "-fxray-instrument", "-fxray-instruction-threshold=1"];
    let compile = |src: &str, pic: &[&str], obj: &Path| {
        run_ok(
            Command::new("clang")
                .args(xray)
                .args(pic)
                .arg("-c")
                .arg(fixture(src))
                .arg("-o")
                .arg(obj),
        );
    };
    let plugin_obj = dir.join("plugin.o");
    compile("xray/plugin.c", &["-fPIC"], &plugin_obj);
    let plugin = dir.join("libplug.so");
    run_ok(
        Command::new("clang")
            .arg("-shared")
            .arg(&plugin_obj)
            .arg("-o")
            .arg(&plugin),
    );
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::copy(&plugin, sub.join("libplug.so")).unwrap();
    let main_obj = dir.join("dlopen_main.o");
    compile("xray/dlopen_main.c", &[], &main_obj);
    // Linked without -fxray-instrument: no compiler-rt.
    let link = |name: &str, extra: &[&OsStr]| {
        let exe = dir.join(name);
        run_ok(
            Command::new("clang")
                .arg(&main_obj)
                .args(extra)
                .args(["-lpthread", "-ldl"])
                .arg("-o")
                .arg(&exe),
        );
        exe
    };
    let rpath = |tags: &str| format!("-Wl,--{tags}-new-dtags,-rpath,{}", sub.display());
    let (old, new) = (rpath("disable"), rpath("enable"));
    let archive = runtime_lib(X86_64, Lib::Static);
    Dlopen {
        plain: link("dlopen_main", &[]),
        rpath: link("dlopen_main-rpath", &[OsStr::new(&old)]),
        runpath: link("dlopen_main-runpath", &[OsStr::new(&new)]),
        linked: link(
            "dlopen_main-linked",
            &[
                OsStr::new(&new),
                OsStr::new("-Wl,-u,instrfn_start"),
                archive.as_os_str(),
            ],
        ),
        plugin,
    }
}

/// Lines of the meta files that start with `kind` and mention `part`.
fn meta_lines(trace: &Path, kind: &str, part: &str) -> usize {
    meta_text(trace)
        .lines()
        .filter(|l| l.starts_with(kind) && l.contains(part))
        .count()
}

/// A plugin with XRay sleds, dlopen'ed after 4 threads have started, never instrfn_flush:
/// the wrapper patches its sleds before dlopen returns, so every call of its functions is
/// traced, from the first; dlclose, then dlopen again (twice), with the same exact counts;
/// dlmopen(LM_ID_BASE) the same. Its constructor runs inside the loader's dlopen, before
/// the sleds are patched: that call is not in the trace.
fn clang_dlopened_plugin_traced_from_its_first_call(arch: Arch) {
    let dir = workdir("xray-dlopen");
    let dl = dlopen_fixture(&dir);
    let trace = dir.join("trace");
    let lib = dl.plugin.to_str().unwrap();
    const DN: u64 = 500;
    let n = DN.to_string();
    for (mode, rounds) in [("threads", 1u64), ("threads", 3), ("mbase", 1)] {
        let r = rounds.to_string();
        let args: Vec<&str> = if mode == "mbase" {
            vec![mode, "4", &n, lib]
        } else {
            vec![mode, "4", &n, &r, lib]
        };
        let plain = run_ok(Command::new(&dl.plain).args(&args));
        let calls = T * DN * rounds;
        assert_eq!(stdout_of(&plain), format!("sum {}\n", calls * 6));
        for route in [Route::Record, Route::Preload] {
            let context = format!("{route:?} {}", args.join(" "));
            let out = traced(arch, route, &dl.plain, &args, &[], &trace);
            assert_eq!(stdout_of(&out), stdout_of(&plain), "{context}");
            let (rows, doc) = report_calls(&trace);
            assert_eq!(calls_in(&rows, "plug_work"), calls, "{context}: {rows:?}");
            assert_eq!(calls_in(&rows, "plug_leaf"), 3 * calls, "{context}");
            assert_eq!(calls_in(&rows, "call_plugin"), calls, "{context}");
            assert_eq!(calls_in(&rows, "main_tick"), calls, "{context}");
            assert_eq!(calls_in(&rows, "worker"), T, "{context}");
            assert_eq!(calls_in(&rows, "main"), 1, "{context}");
            assert_eq!(calls_in(&rows, "plug_ctor_helper"), 0, "{context}");
            assert_eq!(doc["exits_without_entry"], 0, "{context}");
            let procs = instrfn_dump(&trace);
            assert_eq!(procs.len(), 1, "{context}");
            assert_eq!(procs[0].lost, 0, "{context}");
            let counts = assert_balanced(&procs[0], &context);
            for (f, k) in [("plug_work", 1), ("plug_leaf", 3)] {
                for kind in ["entry", "exit"] {
                    assert_eq!(
                        count_of(&counts, kind, f),
                        k * calls,
                        "{context}: {kind} {f}"
                    );
                }
            }
            // Each worker thread made its own calls, from its first one.
            let per_thread: Vec<u64> = procs[0]
                .threads
                .values()
                .filter(|evs| evs.iter().any(|e| e.name == "worker"))
                .map(|evs| {
                    evs.iter()
                        .filter(|e| e.kind == "entry" && e.name == "plug_work")
                        .count() as u64
                })
                .collect();
            assert_eq!(per_thread, vec![DN * rounds; 4], "{context}");
            // A `module` line for each load, an `unload` line for each dlclose.
            assert_eq!(
                meta_lines(&trace, "module ", "/libplug.so "),
                rounds as usize,
                "{context}:\n{}",
                meta_text(&trace)
            );
            assert_eq!(
                meta_lines(&trace, "unload ", ""),
                rounds as usize - 1,
                "{context}"
            );
        }
    }
}

/// What dlerror() says after failed and successful dlopens, RTLD_NOLOAD, dlopen(NULL), a bad
/// mode and dlmopen(LM_ID_NEWLM) is what it says without instrfn (preloaded, recorded, and
/// linked in), and the plugin loaded in the base namespace is traced at once.
fn clang_dlopen_keeps_dlerror_and_the_callers_library_path(arch: Arch) {
    let dir = workdir("xray-dlopen-caller");
    let dl = dlopen_fixture(&dir);
    let trace = dir.join("trace");
    let lib = dl.plugin.to_str().unwrap();
    let plain = stdout_of(&run_ok(Command::new(&dl.plain).args(["dlerror", lib])));
    for line in [
        "missing path: NULL; /nonexistent-instrfn/libnope.so: cannot open shared object file",
        "read again: (null)\n",
        "missing name: NULL; libnope-instrfn.so: cannot open shared object file",
        "loaded: handle; (null)\n",
        "then missing: NULL; /nonexistent-instrfn/libother.so: cannot open shared object file",
        "noload loaded: same handle; (null)\n",
        "self: handle; (null)\n",
        "bad mode: NULL; ",
        "new namespace: handle; (null)\n",
        "sum 60\n",
    ] {
        assert!(plain.contains(line), "{line:?} not in:\n{plain}");
    }
    let linked_run = |exe: &Path, args: &[&str], env: &[(&str, &str)]| {
        let _ = std::fs::remove_dir_all(&trace);
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .env("INSTRFN_MODE", "trace")
            .env("INSTRFN_OUTPUT", &trace)
            .envs(env.iter().copied());
        run_within(&mut cmd, 120)
    };
    for route in [Some(Route::Preload), Some(Route::Record), None] {
        let out = match route {
            Some(r) => traced(arch, r, &dl.plain, &["dlerror", lib], &[], &trace),
            None => linked_run(&dl.linked, &["dlerror", lib], &[]),
        };
        assert_eq!(stdout_of(&out), plain, "{route:?}");
        let (rows, _) = report_calls(&trace);
        // The call in the other namespace (plug_work(4) there) is not: instrfn sees only the
        // base namespace.
        assert_eq!(calls_in(&rows, "plug_work"), 10, "{route:?}: {rows:?}");
        assert_eq!(calls_in(&rows, "plug_leaf"), 30, "{route:?}");
    }

    // The loader looks for a name without a slash along the caller's search path and
    // substitutes $ORIGIN with the caller's directory: the wrapper calls dlopen on the
    // program's behalf only when that changes nothing (here: the program's RPATH, which the
    // loader also searches for the preloaded runtime, and LD_LIBRARY_PATH; or the runtime
    // linked into the program, which then is the caller). Otherwise (the program's RUNPATH,
    // $ORIGIN) the call goes to libc untouched: the plugin is found as without instrfn, and
    // noticed at exit (its `module` line), too late for its calls to be traced.
    const DN: u64 = 200;
    let n = DN.to_string();
    let sub = dir.join("sub");
    let path = sub.to_str().unwrap();
    let origin = "$ORIGIN/sub/libplug.so";
    for (exe, env, name, now) in [
        (&dl.rpath, vec![], "libplug.so", true),
        (
            &dl.plain,
            vec![("LD_LIBRARY_PATH", path)],
            "libplug.so",
            true,
        ),
        (&dl.runpath, vec![], "libplug.so", false),
        (&dl.plain, vec![], origin, false),
    ] {
        let args = ["name", n.as_str(), name];
        let context = format!("{} {env:?} {name}", exe.display());
        let plain = run_ok(Command::new(exe).args(args).envs(env.iter().copied()));
        assert_eq!(stdout_of(&plain), format!("ok {}\n", DN * 6), "{context}");
        for route in [Route::Preload, Route::Record] {
            let out = traced(arch, route, exe, &args, &env, &trace);
            assert_eq!(stdout_of(&out), stdout_of(&plain), "{context} {route:?}");
            let (rows, _) = report_calls(&trace);
            let calls = if now { DN } else { 0 };
            assert_eq!(calls_in(&rows, "plug_work"), calls, "{context} {route:?}");
            assert_eq!(
                calls_in(&rows, "plug_leaf"),
                3 * calls,
                "{context} {route:?}"
            );
            assert_eq!(calls_in(&rows, "call_plugin"), DN, "{context} {route:?}");
            assert_eq!(
                meta_lines(&trace, "module ", "/libplug.so "),
                1,
                "{context}"
            );
        }
    }
    let out = linked_run(&dl.linked, &["name", &n, "libplug.so"], &[]);
    assert_eq!(stdout_of(&out), format!("ok {}\n", DN * 6));
    let (rows, _) = report_calls(&trace);
    assert_eq!(calls_in(&rows, "plug_work"), DN, "linked: {rows:?}");
}

/// 8 threads dlopen at the same moment (two copies of the plugin, four threads each: one
/// thread's dlopen loads a copy while the others' find it loading or loaded) and call it at
/// once: each dlopen returns with the copy's sleds patched, whichever thread patched them.
fn clang_dlopen_from_many_threads_at_once(arch: Arch) {
    let dir = workdir("xray-dlopen-threads");
    let dl = dlopen_fixture(&dir);
    let trace = dir.join("trace");
    let (a, b) = (dir.join("libplug.so"), dir.join("sub/libplug.so"));
    const DN: u64 = 300;
    const DT: u64 = 8;
    let (t, n) = (DT.to_string(), DN.to_string());
    let args = ["each", &t, &n, a.to_str().unwrap(), b.to_str().unwrap()];
    let plain = run_ok(Command::new(&dl.plain).args(args));
    assert_eq!(stdout_of(&plain), format!("sum {}\n", DT * DN * 6));
    for (round, route) in [Route::Preload, Route::Record]
        .iter()
        .cycle()
        .take(6)
        .enumerate()
    {
        let context = format!("{route:?} run {round}");
        let out = traced(arch, *route, &dl.plain, &args, &[], &trace);
        assert_eq!(stdout_of(&out), stdout_of(&plain), "{context}");
        let (_, doc) = report_calls(&trace);
        // Calls per name, both copies together.
        let calls = |name: &str| -> u64 {
            doc["functions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["name"] == name)
                .map(|f| f["calls"].as_u64().unwrap())
                .sum()
        };
        assert_eq!(calls("plug_work"), DT * DN, "{context}");
        assert_eq!(calls("plug_leaf"), 3 * DT * DN, "{context}");
        assert_eq!(calls("main_tick"), DT * DN, "{context}");
        let procs = instrfn_dump(&trace);
        let counts = assert_balanced(&procs[0], &context);
        assert_eq!(count_of(&counts, "exit", "plug_work"), DT * DN, "{context}");
        assert_eq!(
            meta_lines(&trace, "module ", "/libplug.so "),
            2,
            "{context}"
        );
    }
}
