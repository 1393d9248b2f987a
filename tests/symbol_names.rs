//! Names in `instrfn report` and `instrfn export` (x86_64, real programs): Rust symbols of
//! both manglings demangled without their hashes (and raw with --no-demangle), C++ names
//! demangled, functions of a dlopen'ed library by name — and as raw addresses, said once,
//! when the library's file changed or went since recording — and `--lines` (file:line of each
//! function from DWARF).

#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

feature_tests! {
    symbol_names:
    rust_names_of_both_manglings(x86_64),
    cpp_names_demangled(x86_64),
    library_functions_by_name_until_the_library_changes(x86_64),
    lines_from_dwarf(x86_64),
    guest_paths_of_another_machine_stay_raw(aarch64),
    stripped_executables_take_names_from_their_debug_file(x86_64),
}

/// `instrfn ARGS…`, checked to succeed.
fn instrfn_ok(args: &[&OsStr]) -> Output {
    let out = run(Command::new(instrfn_cli()).args(args));
    assert!(
        out.status.success(),
        "instrfn {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `instrfn report DIR --format json extra…`: the document and stderr.
fn report(trace: &Path, extra: &[&str]) -> (Value, String) {
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("report"),
        trace.as_os_str(),
        OsStr::new("--format"),
        OsStr::new("json"),
    ];
    args.extend(extra.iter().map(OsStr::new));
    let out = instrfn_ok(&args);
    let doc = serde_json::from_slice(&out.stdout).expect("report --format json is JSON");
    (doc, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// name -> (calls, the row) of a JSON report.
fn rows(doc: &Value) -> BTreeMap<String, (u64, Value)> {
    doc["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                (f["calls"].as_u64().unwrap(), f.clone()),
            )
        })
        .collect()
}

/// `instrfn export DIR --format chrome extra…`: the function events (X and i) and stderr.
fn chrome(trace: &Path, extra: &[&str]) -> (Vec<Value>, String) {
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("export"),
        trace.as_os_str(),
        OsStr::new("--format"),
        OsStr::new("chrome"),
    ];
    args.extend(extra.iter().map(OsStr::new));
    let out = instrfn_ok(&args);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("chrome export is JSON");
    let events = doc["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["cat"] == "function")
        .cloned()
        .collect();
    (events, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// How many chrome events each name has.
fn event_counts(events: &[Value]) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for e in events {
        *m.entry(e["name"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    m
}

/// `instrfn record -o DIR/trace -- exe args` (in `dir`), checked to succeed.
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

/// The defined text symbols of `exe` (`nm`).
fn text_symbols(exe: &Path) -> Vec<String> {
    let out = run_ok(Command::new("nm").arg("--defined-only").arg(exe));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (_, kind, name) = (w.next()?, w.next()?, w.next()?);
            matches!(kind, "t" | "T").then(|| name.to_string())
        })
        .collect()
}

/// Whether `s` is a legacy Rust symbol's hash part: `h` and 16 hex digits.
fn is_hash(s: &str) -> bool {
    s.len() == 17 && s.starts_with('h') && s[1..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `s` holds a v0 crate disambiguator as `{:}` (not `{:#}`) would show it:
/// `crate[0123abcd]`.
fn has_disambiguator(s: &str) -> bool {
    s.split('[').skip(1).any(|rest| {
        rest.split_once(']').is_some_and(|(inside, _)| {
            !inside.is_empty() && inside.bytes().all(|b| b.is_ascii_hexdigit())
        })
    })
}

/// rust-app (2 threads, 100 iterations: worker twice, work_a and work_b 200 times each),
/// built with the nightly's default mangling for instrumented builds (v0: `_R…`) and with
/// legacy mangling (`_ZN…17h<hash>E`), checked with nm. Both reports and both timelines name
/// the functions `rust_app::work_a` (no hash, no crate disambiguator) with exact calls;
/// --no-demangle shows the symbols as nm shows them.
fn rust_names_of_both_manglings(_: Arch) {
    for (flags, prefix) in [
        ("", "_R"),
        ("-Zunstable-options -Csymbol-mangling-version=legacy", "_ZN"),
    ] {
        let context = if flags.is_empty() { "v0" } else { "legacy" };
        let exe = build_instrumented_rust_with("rust-app", X86_64.triple, "rust-app", flags);
        let symbols = text_symbols(&exe);
        let raw_of = |f: &str| -> String {
            let tail = format!("8rust_app{}{f}", f.len());
            symbols
                .iter()
                .find(|s| s.starts_with(prefix) && s.contains(&tail))
                .unwrap_or_else(|| panic!("{context}: no {prefix}… symbol for {f} in nm"))
                .clone()
        };
        let dir = workdir(&format!("names-rust-{context}"));
        let trace = dir.join("trace");
        let t = trace.display().to_string();
        run_exe(
            X86_64,
            &exe,
            &["2", "100"],
            &[("INSTRFN_MODE", "trace"), ("INSTRFN_OUTPUT", &t)],
            &dir,
        );
        let (doc, _) = report(&trace, &[]);
        let names = rows(&doc);
        for (f, calls) in [("worker", 2), ("work_a", 200), ("work_b", 200)] {
            let name = format!("rust_app::{f}");
            assert_eq!(
                names.get(&name).map(|r| r.0),
                Some(calls),
                "{context}: {name} in {:?}",
                names.keys().collect::<Vec<_>>()
            );
        }
        for name in names.keys() {
            assert!(
                !name.starts_with("_R") && !name.starts_with("_ZN"),
                "{context}: {name} is not demangled"
            );
            assert!(
                !name.split("::").any(is_hash) && !has_disambiguator(name),
                "{context}: {name} has a hash"
            );
        }
        let (events, _) = chrome(&trace, &[]);
        let counts = event_counts(&events);
        assert_eq!(counts.get("rust_app::work_a"), Some(&200), "{context}");
        assert_eq!(counts.get("rust_app::worker"), Some(&2), "{context}");

        let (raw, _) = report(&trace, &["--no-demangle"]);
        let raw = rows(&raw);
        for (f, calls) in [("worker", 2), ("work_a", 200), ("work_b", 200)] {
            let sym = raw_of(f);
            if prefix == "_ZN" {
                let body = sym.strip_suffix('E').unwrap();
                let hash = &body[body.len().saturating_sub(17)..];
                assert!(is_hash(hash), "{context}: {sym} has no hash");
            }
            assert_eq!(raw.get(&sym).map(|r| r.0), Some(calls), "{context}: {sym}");
        }
        let (events, _) = chrome(&trace, &["--no-demangle"]);
        assert_eq!(
            event_counts(&events).get(&raw_of("work_b")),
            Some(&200),
            "{context}"
        );
    }
}

/// names.cpp (g++ -pg): a method, two overloads, two instances of a template, each called
/// N times: each is a row of its own with its demangled name, in the report and the
/// timeline; --no-demangle shows the Itanium symbols.
fn cpp_names_demangled(_: Arch) {
    const N: u64 = 100;
    let dir = workdir("names-cpp");
    require_tool("g++");
    let exe = dir.join("names");
    run_ok(
        Command::new("g++")
            .args(["-O2", "-pg"])
            .arg(fixture("c/names.cpp"))
            .arg("-o")
            .arg(&exe),
    );
    let trace = record(&dir, &exe, &["100"]);
    let expected = [
        "geometry::Square::area() const",
        "geometry::scale(double, int)",
        "geometry::scale(double)",
        "int geometry::twice<int>(int)",
        "double geometry::twice<double>(double)",
    ];
    let (doc, _) = report(&trace, &[]);
    let names = rows(&doc);
    for name in expected {
        assert_eq!(names.get(name).map(|r| r.0), Some(N), "{name}: {names:?}");
    }
    assert_eq!(names.get("main").map(|r| r.0), Some(1));
    assert!(
        names.keys().all(|n| !n.starts_with("_Z")),
        "{:?}",
        names.keys()
    );
    let counts = event_counts(&chrome(&trace, &[]).0);
    for name in expected {
        assert_eq!(counts.get(name), Some(&N), "{name}: {counts:?}");
    }
    let (raw, _) = report(&trace, &["--no-demangle"]);
    let raw = rows(&raw);
    for sym in [
        "_ZNK8geometry6Square4areaEv",
        "_ZN8geometry5scaleEdi",
        "_ZN8geometry5scaleEd",
        "_ZN8geometry5twiceIiEET_S1_",
        "_ZN8geometry5twiceIdEET_S1_",
    ] {
        assert_eq!(raw.get(sym).map(|r| r.0), Some(N), "{sym}: {raw:?}");
    }
}

/// Builds libwork.so (tests/fixtures/c/libwork.c) into `dir` with -pg and `extra`.
fn build_libwork(dir: &Path, extra: &[&str]) -> PathBuf {
    let mut args: Vec<&OsStr> = ["-pg", "-fPIC", "-shared"].iter().map(OsStr::new).collect();
    args.extend(extra.iter().map(OsStr::new));
    let src = fixture("c/libwork.c");
    args.push(src.as_os_str());
    cc(X86_64, &args, &dir.join("libwork.so"))
}

/// The lines of `stderr` that name `what`.
fn lines_naming<'a>(stderr: &'a str, what: &str) -> Vec<&'a str> {
    stderr.lines().filter(|l| l.contains(what)).collect()
}

/// libuser.c dlopens libwork.so (given as a relative path) and calls lib_outer(N), which
/// calls lib_inner N times. The report and the timeline name them. Then libwork.so is
/// rebuilt differently (its file is no longer the one that was loaded): the report and the
/// export each say so once, in one line naming the file, and show those functions as
/// addresses — with the same calls — while the executable's functions keep their names.
/// With the library gone, the same, saying it is gone.
fn library_functions_by_name_until_the_library_changes(_: Arch) {
    const N: u64 = 300;
    let dir = workdir("names-library");
    build_libwork(&dir, &["-O2"]);
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
    let trace = record(&dir, &loader, &["dlopen", "300", "./libwork.so"]);
    let library = dir.join("libwork.so").display().to_string();
    let (doc, stderr) = report(&trace, &[]);
    let names = rows(&doc);
    assert_eq!(names.get("lib_outer").map(|r| r.0), Some(1), "{names:?}");
    assert_eq!(names.get("lib_inner").map(|r| r.0), Some(N), "{names:?}");
    assert_eq!(names.get("local").map(|r| r.0), Some(N), "{names:?}");
    assert!(lines_naming(&stderr, "libwork").is_empty(), "{stderr}");
    let (events, stderr) = chrome(&trace, &[]);
    let counts = event_counts(&events);
    assert_eq!(counts.get("lib_inner"), Some(&N), "{counts:?}");
    assert_eq!(counts.get("lib_outer"), Some(&1), "{counts:?}");
    assert!(lines_naming(&stderr, "libwork").is_empty(), "{stderr}");

    for (change, why) in [
        ("rebuilt", "changed since the trace was recorded"),
        ("removed", "gone"),
    ] {
        if change == "rebuilt" {
            // Other code (-O0 instead of -O2): another build-id.
            build_libwork(&dir, &["-O0"]);
        } else {
            std::fs::remove_file(&library).unwrap();
        }
        let (doc, stderr) = report(&trace, &[]);
        let said = lines_naming(&stderr, "libwork.so");
        assert_eq!(said.len(), 1, "{change}: said once: {stderr}");
        assert!(
            said[0].contains(&library) && said[0].contains(why),
            "{change}: {}",
            said[0]
        );
        let names = rows(&doc);
        assert!(
            !names.contains_key("lib_inner") && !names.contains_key("lib_outer"),
            "{change}: resolved with the wrong file: {names:?}"
        );
        let raw: Vec<u64> = names
            .iter()
            .filter(|(n, _)| n.starts_with("0x"))
            .map(|(_, r)| r.0)
            .collect();
        assert!(
            raw.contains(&N) && raw.contains(&1),
            "{change}: the library's calls as addresses: {names:?}"
        );
        assert_eq!(names.get("local").map(|r| r.0), Some(N), "{change}");
        assert_eq!(names.get("main").map(|r| r.0), Some(1), "{change}");

        let (events, stderr) = chrome(&trace, &[]);
        assert_eq!(
            lines_naming(&stderr, "libwork.so").len(),
            1,
            "{change}: export says it once: {stderr}"
        );
        let counts = event_counts(&events);
        assert!(!counts.contains_key("lib_inner"), "{change}: {counts:?}");
        assert!(
            counts.iter().any(|(n, &c)| n.starts_with("0x") && c == N),
            "{change}: {counts:?}"
        );
        assert_eq!(counts.get("local"), Some(&N), "{change}");
    }
}

/// The 1-based number of the first line of `source` that starts with `prefix`.
fn line_of(source: &str, prefix: &str) -> u64 {
    source
        .lines()
        .position(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix}")) as u64
        + 1
}

/// calltree.c built with -g: --lines gives each function the file and line of its
/// definition, in the report (JSON and text) and in the timeline's args; built without -g,
/// no function has a line.
fn lines_from_dwarf(_: Arch) {
    let dir = workdir("names-lines");
    let src = fixture("c/calltree.c");
    let source = std::fs::read_to_string(&src).unwrap();
    let expected = [
        ("c", line_of(&source, "COUNTED unsigned long c(")),
        ("b", line_of(&source, "COUNTED unsigned long b(")),
        ("a", line_of(&source, "COUNTED unsigned long a(")),
        ("run", line_of(&source, "COUNTED void *run(")),
        ("main", line_of(&source, "int main(")),
    ];
    let build = |name: &str, debug: bool| {
        let mut args: Vec<&OsStr> = vec![OsStr::new("-O2"), OsStr::new("-pg")];
        if debug {
            args.push(OsStr::new("-g"));
        }
        args.push(src.as_os_str());
        args.push(OsStr::new("-lpthread"));
        cc(X86_64, &args, &dir.join(name))
    };
    let exe = build("calltree", true);
    let trace = record(&dir, &exe, &["2", "5"]);
    let (doc, _) = report(&trace, &["--lines"]);
    let names = rows(&doc);
    for (f, line) in expected {
        let row = &names.get(f).unwrap_or_else(|| panic!("{f}: {names:?}")).1;
        let file = row["file"].as_str().unwrap_or_else(|| panic!("{f}: {row}"));
        assert!(
            Path::new(file).ends_with("tests/fixtures/c/calltree.c"),
            "{f}: {file}"
        );
        assert_eq!(row["line"].as_u64(), Some(line), "{f}: {row}");
    }
    let text = instrfn_ok(&[
        OsStr::new("report"),
        trace.as_os_str(),
        OsStr::new("--lines"),
    ]);
    let text = String::from_utf8_lossy(&text.stdout);
    let c_line = format!("calltree.c:{})", expected[0].1);
    assert!(
        text.lines()
            .any(|l| l.contains(" c (") && l.ends_with(&c_line)),
        "{text}"
    );
    let (events, _) = chrome(&trace, &["--lines"]);
    for (f, line) in expected {
        let e: Vec<&Value> = events.iter().filter(|e| e["name"] == f).collect();
        assert!(!e.is_empty(), "{f}");
        for e in e {
            assert_eq!(e["args"]["line"].as_u64(), Some(line), "{f}: {e}");
            assert!(
                e["args"]["file"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("calltree.c")),
                "{f}: {e}"
            );
        }
    }
    // Without --lines, no file or line anywhere.
    let (plain, _) = report(&trace, &[]);
    assert!(rows(&plain).values().all(|r| r.1.get("file").is_none()));

    let exe = build("calltree-nodebug", false);
    let trace = record(&dir, &exe, &["2", "5"]);
    let (doc, _) = report(&trace, &["--lines"]);
    let names = rows(&doc);
    assert_eq!(names.get("c").map(|r| r.0), Some(2 * 5 * 2));
    for (name, (_, row)) in &names {
        assert!(row["line"].is_null(), "{name}: {row}");
    }
}

/// Under qemu-user a program's modules are recorded with the guest's paths, which on the
/// host may name another machine's file. Here an aarch64 program (run by qemu-aarch64 with
/// a prefix, -L, that holds the aarch64 libwork.so at <dir>/libwork.so) dlopens
/// <dir>/libwork.so, and on the host that path holds an x86_64 build of it: the report says
/// so once, shows the library's functions as addresses, and names the program's own.
fn guest_paths_of_another_machine_stay_raw(_: Arch) {
    const N: u64 = 300;
    let dir = workdir("names-qemu");
    let preload = runtime_lib(AARCH64, Lib::Shared);
    let prefix = dir.join("guest");
    let guest_dir = prefix.join(dir.strip_prefix("/").unwrap());
    std::fs::create_dir_all(&guest_dir).unwrap();
    std::os::unix::fs::symlink(
        Path::new(AARCH64.sysroot.unwrap()).join("lib"),
        prefix.join("lib"),
    )
    .unwrap();
    let src = fixture("c/libwork.c");
    for (arch, out) in [
        (AARCH64, guest_dir.join("libwork.so")),
        (X86_64, dir.join("libwork.so")),
    ] {
        cc(
            arch,
            &[
                OsStr::new("-O2"),
                OsStr::new("-pg"),
                OsStr::new("-fPIC"),
                OsStr::new("-shared"),
                src.as_os_str(),
            ],
            &out,
        );
    }
    let loader = cc(
        AARCH64,
        &[
            OsStr::new("-O2"),
            OsStr::new("-pg"),
            fixture("c/libuser.c").as_os_str(),
            OsStr::new("-ldl"),
        ],
        &dir.join("loader"),
    );
    let trace = dir.join("trace");
    let library = dir.join("libwork.so").display().to_string();
    require_tool(AARCH64.qemu.unwrap());
    run_ok(
        Command::new(AARCH64.qemu.unwrap())
            .arg("-L")
            .arg(&prefix)
            .arg("-E")
            .arg(format!("LD_PRELOAD={}", preload.display()))
            .args(["-E", "INSTRFN_MODE=trace", "-E"])
            .arg(format!("INSTRFN_OUTPUT={}", trace.display()))
            .arg(&loader)
            .args(["dlopen", "300", &library])
            .current_dir(&dir),
    );
    let (doc, stderr) = report(&trace, &[]);
    let said = lines_naming(&stderr, "libwork.so");
    assert_eq!(said.len(), 1, "said once: {stderr}");
    assert!(
        said[0].contains(&library) && said[0].contains("X86_64") && said[0].contains("Aarch64"),
        "{}",
        said[0]
    );
    let names = rows(&doc);
    assert!(!names.contains_key("lib_inner"), "{names:?}");
    assert!(
        names.iter().any(|(n, r)| n.starts_with("0x") && r.0 == N),
        "{names:?}"
    );
    assert_eq!(names.get("local").map(|r| r.0), Some(N), "{names:?}");
}

/// calltree.c, 2 threads x 10 rounds, stripped (`strip --strip-all`: no .symtab, and its
/// functions are not exported) with its symbols kept apart (`objcopy --only-keep-debug`)
/// and named by a .gnu_debuglink: the report names every function from the debug file,
/// with exact calls, and says nothing. Without the debug file, or with the debug file of
/// another build (another build-id; without build-ids, another CRC-32), the calls are the
/// same, shown as addresses, and it says so once, naming the file. The same with no
/// build-id and the right debug file (the CRC-32 matches): named.
fn stripped_executables_take_names_from_their_debug_file(_: Arch) {
    const T: u64 = 2;
    const K: u64 = 10;
    let expected = [
        ("main", 1),
        ("run", T),
        ("a", T * K),
        ("b", 2 * T * K),
        ("c", 2 * T * K),
    ];
    let dir = workdir("names-stripped");
    require_tool("objcopy");
    require_tool("strip");
    let build = |name: &str, flags: &[&str]| -> PathBuf {
        let mut args: Vec<&OsStr> = ["-O2", "-pg"].iter().map(OsStr::new).collect();
        args.extend(flags.iter().map(OsStr::new));
        let src = fixture("c/calltree.c");
        args.push(src.as_os_str());
        args.push(OsStr::new("-lpthread"));
        cc(X86_64, &args, &dir.join(name))
    };
    let tool = |name: &str, args: &[&OsStr]| {
        run_ok(Command::new(name).args(args).current_dir(&dir));
    };
    // Stripped `exe`, its debug file beside it as `exe.debug`, and a debug link to that.
    let split = |exe: &Path| {
        let debug = exe.with_extension("debug");
        tool(
            "objcopy",
            &[
                OsStr::new("--only-keep-debug"),
                exe.as_os_str(),
                debug.as_os_str(),
            ],
        );
        tool("strip", &[OsStr::new("--strip-all"), exe.as_os_str()]);
        let link = format!("--add-gnu-debuglink={}", debug.display());
        tool("objcopy", &[OsStr::new(&link), exe.as_os_str()]);
        debug
    };
    let check = |trace: &Path, exe: &Path, named: bool, context: &str| {
        let (doc, stderr) = report(trace, &[]);
        let names = rows(&doc);
        let exe_name = exe.display().to_string();
        let said = lines_naming(&stderr, &exe_name);
        if named {
            for (f, calls) in expected {
                assert_eq!(
                    names.get(f).map(|r| r.0),
                    Some(calls),
                    "{context}: {f}: {names:?}"
                );
            }
            assert!(said.is_empty(), "{context}: {stderr}");
        } else {
            assert!(
                expected.iter().all(|(f, _)| !names.contains_key(*f)),
                "{context}: named without symbols: {names:?}"
            );
            let mut raw: Vec<u64> = names
                .iter()
                .filter(|(n, _)| n.starts_with("0x"))
                .map(|(_, r)| r.0)
                .collect();
            raw.sort();
            let mut want: Vec<u64> = expected.iter().map(|e| e.1).collect();
            want.sort();
            assert_eq!(raw, want, "{context}: the calls as addresses: {names:?}");
            assert_eq!(said.len(), 1, "{context}: said once: {stderr}");
            assert!(said[0].contains("stripped"), "{context}: {}", said[0]);
        }
    };
    let args = [T.to_string(), K.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    // With a build-id (gcc's default here).
    let exe = build("calltree", &[]);
    let debug = split(&exe);
    let trace = record(&dir, &exe, &args);
    check(&trace, &exe, true, "debug file beside it");
    let away = dir.join("away.debug");
    std::fs::rename(&debug, &away).unwrap();
    check(&trace, &exe, false, "no debug file");
    // Another build's debug file (-O1: other code, another build-id) in its place.
    let other = build("other", &["-O1"]);
    let other_debug = split(&other);
    std::fs::rename(&other_debug, &debug).unwrap();
    check(&trace, &exe, false, "another build's debug file");
    std::fs::rename(&away, &debug).unwrap();
    check(&trace, &exe, true, "the debug file back");

    // Without build-ids: the debug link's CRC-32 decides.
    let exe = build("nobuildid", &["-Wl,--build-id=none"]);
    let debug = split(&exe);
    let trace = record(&dir, &exe, &args);
    check(&trace, &exe, true, "no build-id, the right debug file");
    let other = build("nobuildid-other", &["-O1", "-Wl,--build-id=none"]);
    let other_debug = split(&other);
    std::fs::rename(&other_debug, &debug).unwrap();
    check(
        &trace,
        &exe,
        false,
        "no build-id, another build's debug file",
    );
}
