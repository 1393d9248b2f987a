//! Controlling gmon mode and where its files go: the dump signal and the C API write a profile
//! while the program runs (also every 2 ms while 8 threads count), INSTRFN_START=off waits for
//! instrfn_start(), bad settings warn and fall back to the defaults, GMON_OUT_PREFIX names the
//! files by pid, an unwritable directory is said, not fatal, and a symlink in the way is
//! replaced, not followed.

#[macro_use]
mod common;

use common::*;

feature_tests! {
    gmon_control:
    dump_signal_writes_while_running(x86_64),
    c_api_writes_stops_and_starts(x86_64),
    bad_configuration_warns_and_uses_defaults(x86_64),
    profiles_written_while_8_threads_count(x86_64),
    gmon_out_prefix_names_the_file_by_pid(x86_64),
    unwritable_directory_warns_and_is_not_fatal(x86_64),
    existing_symlink_is_replaced_not_followed(x86_64),
}

/// INSTRFN_DUMP_SIGNAL=USR1: the signal (raised after N calls) writes gmon.dump with the N
/// calls made so far; the profile at exit has all 2N.
fn dump_signal_writes_while_running(arch: Arch) {
    let dir = workdir("dump");
    let exe = build_c(arch, &dir, "scenarios.c", &[], Link::Static);
    run_exe(
        arch,
        &exe,
        &["dump", "7000"],
        &[("INSTRFN_DUMP_SIGNAL", "USR1")],
        &dir,
    );
    let mid = gprof_flat(arch, &exe, &dir.join("gmon.dump"));
    assert_calls(&mid, &[("work_a", 7000)], "at the dump signal");
    let end = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    assert_calls(&end, &[("work_a", 14_000)], "at exit");
}

/// instrfn_write_gmon() writes the calls so far; calls made while stopped (instrfn_stop) are
/// not counted. With INSTRFN_START=off nothing is recorded until instrfn_start().
fn c_api_writes_stops_and_starts(arch: Arch) {
    let dir = workdir("c-api");
    let exe = build_c(arch, &dir, "scenarios.c", &[], Link::Static);
    run_exe(arch, &exe, &["api", "3000"], &[], &dir);
    let mid = gprof_flat(arch, &exe, &dir.join("gmon.api"));
    assert_calls(
        &mid,
        &[("work_a", 3000), ("work_b", 0)],
        "instrfn_write_gmon",
    );
    let end = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    assert_calls(
        &end,
        &[("work_a", 3000), ("work_b", 3000)],
        "stopped calls are not counted",
    );

    // INSTRFN_START=off: nothing is recorded until instrfn_start().
    run_exe(
        arch,
        &exe,
        &["api", "3000"],
        &[("INSTRFN_START", "off")],
        &dir,
    );
    let mid = gprof_flat(arch, &exe, &dir.join("gmon.api"));
    assert_calls(
        &mid,
        &[("work_a", 0), ("work_b", 0)],
        "INSTRFN_START=off, before start",
    );
    let end = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    assert_calls(
        &end,
        &[("work_a", 0), ("work_b", 3000)],
        "INSTRFN_START=off, after start",
    );
}

/// Malformed settings: one line each on stderr naming the variable, its value, what was
/// expected and the default used; the program's own output unchanged; the defaults in force.
fn bad_configuration_warns_and_uses_defaults(arch: Arch) {
    let dir = workdir("bad-config");
    let exe = build_c(arch, &dir, "threads.c", &[], Link::Static);
    let good = run_exe(arch, &exe, &["2", "1000"], &[], &dir);
    let bad = [
        ("INSTRFN_HZ", "fast"),
        ("INSTRFN_DUMP_SIGNAL", "KILL"),
        ("INSTRFN_MAX_ARCS", "-3"),
        ("INSTRFN_START", "maybe"),
        ("INSTRFN_CALL_WORDS", "sometimes"),
        ("INSTRFN_COLLECTOR_NICE", "-5"),
    ];
    let out = run_exe(arch, &exe, &["2", "1000"], &bad, &dir);
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
    let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    assert_calls(
        &flat,
        &[("work_a", 2000), ("work_b", 2000)],
        "defaults after bad values",
    );
}

/// A write every 2 ms while 8 threads count: every file readable, counts never go down
/// from one write to the next, and the last write (at exit) is exact.
fn profiles_written_while_8_threads_count(arch: Arch) {
    let dir = workdir("dumps");
    let exe = build_c(arch, &dir, "scenarios.c", &[], Link::Static);
    const M: u64 = 5_000_000;
    let out = run_exe(arch, &exe, &["dumps", "8", &M.to_string()], &[], &dir);
    let dumps = reported(&stdout_of(&out), "dumps") as usize;
    assert!(dumps >= 3, "only {dumps} writes while counting");
    let mut last = 0;
    for k in 0..dumps {
        let flat = gprof_flat(arch, &exe, &dir.join(format!("gmon.dump.{k}")));
        let now = flat.calls("work_a");
        assert!(now >= last, "write {k}: {now} calls after {last}");
        last = now;
    }
    let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    assert_calls(&flat, &[("work_a", 8 * M)], "at exit");
}

/// GMON_OUT_PREFIX=prof/app: parent and fork child each write prof/app.<pid>, no gmon.out.
fn gmon_out_prefix_names_the_file_by_pid(arch: Arch) {
    let dir = workdir("prefix");
    let exe = build_c(arch, &dir, "scenarios.c", &[], Link::Static);
    let out = run_exe(
        arch,
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
    let p = gprof_flat(arch, &exe, &dir.join(format!("prof/app.{parent}")));
    assert_calls(&p, &[("in_parent", 200)], "prefix parent");
    let c = gprof_flat(arch, &exe, &dir.join(format!("prof/app.{child}")));
    assert_calls(&c, &[("in_child", 200)], "prefix child");
}

/// A profile that cannot be written: one line on stderr naming the file, and the program
/// still exits with status 0.
fn unwritable_directory_warns_and_is_not_fatal(arch: Arch) {
    let dir = workdir("unwritable");
    let exe = build_c(arch, &dir, "threads.c", &[], Link::Static);
    let out = run_exe(
        arch,
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

/// A symlink named gmon.out is replaced by the profile (O_NOFOLLOW): the file it pointed to
/// keeps its contents.
fn existing_symlink_is_replaced_not_followed(arch: Arch) {
    let dir = workdir("symlink");
    let exe = build_c(arch, &dir, "threads.c", &[], Link::Static);
    let victim = dir.join("victim");
    std::fs::write(&victim, b"keep me").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("gmon.out")).unwrap();
    run_exe(arch, &exe, &["1", "100"], &[], &dir);
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    assert!(
        !std::fs::symlink_metadata(dir.join("gmon.out"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    assert_calls(&flat, &[("work_a", 100)], "after replacing the symlink");
}
