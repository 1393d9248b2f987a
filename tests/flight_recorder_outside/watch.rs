//! `instrfn record --ring --no-exit-snapshot`, and `instrfn snapshot --watch`: its lines as the
//! program takes snapshots, and how it ends.

use super::*;
use std::io::Read;
use std::process::ExitStatus;
use std::sync::mpsc;

/// `record --ring --no-exit-snapshot` leaves no snapshot and says how to take one; without
/// ring mode the option is one line of error.
pub fn record_without_the_exit_snapshot(arch: Arch) {
    let (dir, exe) = ring_fixture(arch, "no-exit");
    let trace = dir.join("trace");
    let record = |args: &[&str]| {
        let mut cmd = Command::new(instrfn_cli());
        cmd.arg("record").arg("-o").arg(&trace).args(args).arg(&exe);
        cmd.args(["2", "2000", "exit"]).current_dir(&dir);
        cmd
    };
    let out = run_within(&mut record(&["--ring", "--no-exit-snapshot"]), 300);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(!trace.join("snapshots").exists(), "{err}");
    let t = trace.display();
    assert_eq!(
        err,
        format!(
            "instrfn: no snapshot of the rings in {t} (--no-exit-snapshot, and no trigger or \
             signal took one): take one with instrfn snapshot {t}\n"
        )
    );
    for args in [
        &["--no-exit-snapshot"][..],
        &["--mode", "gmon", "--no-exit-snapshot"],
    ] {
        let out = run(&mut record(args));
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(
            err, "instrfn: --no-exit-snapshot is for ring mode: add --ring\n",
            "{args:?}"
        );
    }
}

/// `instrfn snapshot --watch ARGS… DIR`, running; killed when dropped.
struct Watch {
    child: Child,
    out: Option<std::thread::JoinHandle<String>>,
    err: Option<std::thread::JoinHandle<String>>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a watch and waits for its line on stderr: it has listed what was there.
fn start_watch(args: &[&str], trace: &Path) -> Watch {
    let mut child = Command::new(instrfn_cli())
        .args(["snapshot", "--watch"])
        .args(args)
        .arg(trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let err = std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(stderr);
        let mut first = String::new();
        r.read_line(&mut first).unwrap();
        tx.send(first.clone()).unwrap();
        let mut rest = String::new();
        r.read_to_string(&mut rest).unwrap();
        first + &rest
    });
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).unwrap();
        s
    });
    let first = rx.recv_timeout(DEADLINE).expect("the watch never started");
    assert!(first.starts_with("instrfn: watching "), "{first}");
    Watch {
        child,
        out: Some(out),
        err: Some(err),
    }
}

impl Watch {
    /// Waits for the watch to end (a guard against a hang): its status, stdout and stderr.
    fn finish(mut self) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the watch did not end");
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = self.out.take().unwrap().join().unwrap();
        let err = self.err.take().unwrap().join().unwrap();
        (status, out, err)
    }
}

/// The line the watch gives `snap`: its reason, threads (`window` lines), events (as
/// `instrfn dump --summary` counts them) and, `trigger` for a trigger's snapshot.
fn expected_line(snap: &Path, reason: &str) -> String {
    let meta = snapshot_meta(snap);
    let threads = meta.lines().filter(|l| l.starts_with("window ")).count();
    let out = run_ok(
        Command::new(instrfn_cli())
            .args(["dump", "--summary"])
            .arg(snap),
    );
    let summary = stdout_of(&out) + &stderr_of(&out);
    let events = numbers_of(summary.trim_start_matches("instrfn: "))[0];
    let mut line = format!(
        "{}: {reason}, {threads} thread{}, {events} events",
        snap.display(),
        if threads == 1 { "" } else { "s" }
    );
    if let Some(t) = meta.lines().find_map(|l| l.strip_prefix("trigger ")) {
        let f: Vec<&str> = t.split(' ').collect();
        let ms = f[5].parse::<f64>().unwrap() / 1e6;
        line += &format!(", trigger: {} {ms:.1} ms {}", f[7], f[6]);
    }
    line
}

/// A watch started before the program lists its snapshots as they come: `--count 2` of five
/// trigger snapshots prints the first two and ends; without `--count` the watch ends after
/// the program; SIGINT ends it with status 0. Bad options are one line of error.
pub fn watch_lists_snapshots_as_they_come(arch: Arch) {
    let (dir, exe) = ring_fixture(arch, "watch");
    let trace = dir.join("trace");
    let watch = start_watch(&["--count", "2"], &trace);
    let env = [
        ("INSTRFN_TRIGGER", "slow_call>5ms"),
        ("INSTRFN_TRIGGER_LIMIT", "1000"),
        ("INSTRFN_EXIT_SNAPSHOT", "off"),
    ];
    let out = run_within(
        &mut ring_command(arch, &exe, &["2", "20000", "slow5"], &trace, &env),
        300,
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let (status, lines, err) = watch.finish();
    assert!(status.success(), "{err}");
    let expected: Vec<String> = (1..=2)
        .map(|n| expected_line(&trace.join(format!("snapshots/{n}")), "trigger"))
        .collect();
    assert_eq!(lines.lines().collect::<Vec<_>>(), expected, "{err}");
    assert!(expected[0].ends_with(" ms whole"), "{}", expected[0]);

    // Without --count: the api and exit snapshots, then the end of the recording ends it.
    let trace = dir.join("trace2");
    let watch = start_watch(&[], &trace);
    let out = run_within(
        &mut ring_command(arch, &exe, &["2", "2000", "api"], &trace, &[]),
        300,
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let (status, lines, err) = watch.finish();
    assert!(status.success(), "{err}");
    let mut expected: Vec<String> = ["api", "exit"]
        .iter()
        .enumerate()
        .map(|(i, r)| expected_line(&trace.join(format!("snapshots/{}", i + 1)), r))
        .collect();
    let mut got: Vec<String> = lines.lines().map(str::to_string).collect();
    // The api snapshot is taken before the exit one; compare as sets all the same.
    expected.sort();
    got.sort();
    assert_eq!(got, expected, "{err}");

    // A finished recording: the watch lists it and waits, until SIGINT.
    let watch = start_watch(&[], &trace);
    // SAFETY: kill(2) of the watch this test started.
    unsafe { libc::kill(watch.child.id() as i32, libc::SIGINT) };
    let (status, lines, err) = watch.finish();
    assert!(status.success(), "{status:?}: {err}");
    assert_eq!(lines.lines().count(), 2, "{lines}");

    let exe_path = exe.display().to_string();
    for (args, expected) in [
        (
            &["snapshot", "--count", "2"][..],
            "instrfn: --count goes with --watch\n",
        ),
        (
            &["snapshot", "--watch", "--pid", "1"],
            "instrfn: --pid goes without --watch: a watch lists every process's snapshots\n",
        ),
        (
            &["snapshot", "--watch", exe_path.as_str()],
            &format!("instrfn: {exe_path}: not a directory\n"),
        ),
    ] {
        let out = run(Command::new(instrfn_cli()).args(args));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(stderr_of(&out), expected, "{args:?}");
    }
}
