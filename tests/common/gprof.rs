//! gprof's output: the flat profile and the call graph of `gprof -b`, parsed into counts
//! per function and per (caller, callee) arc, the runtime's INSTRFN_VERBOSE summary line, and
//! the assertions the gmon tests make on them.

use super::run::run_ok;
use super::toolchain::{Arch, require_tool};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// One line of gprof's flat profile.
#[derive(Debug, Clone, Default)]
pub struct FlatEntry {
    pub self_seconds: f64,
    /// None when gprof shows no call count.
    pub calls: Option<u64>,
}

/// `gprof -b -p exe gmon`: function name -> entry, plus the seconds one sample counts as.
pub struct Flat {
    pub entries: BTreeMap<String, FlatEntry>,
    pub seconds_per_sample: Option<f64>,
    pub text: String,
}

impl Flat {
    /// Panics if a function of the runtime has a call count: the runtime is instrumented too
    /// when RUSTFLAGS reach every crate, and its guard must keep its own calls out. (A
    /// histogram sample may land in runtime code, a thread's exit path say: time, not a call.)
    pub fn assert_no_runtime_calls(&self, context: &str) {
        let counted: Vec<&String> = self
            .entries
            .iter()
            .filter(|(name, e)| name.contains("instrfn::") && e.calls.is_some_and(|c| c > 0))
            .map(|(name, _)| name)
            .collect();
        assert!(
            counted.is_empty(),
            "{context}: runtime functions were counted: {counted:?}\n{}",
            self.text
        );
    }

    /// The call count gprof shows for `name` (0 when absent or blank).
    pub fn calls(&self, name: &str) -> u64 {
        self.entries.get(name).and_then(|e| e.calls).unwrap_or(0)
    }

    /// Sum of the self seconds of every function.
    pub fn total_seconds(&self) -> f64 {
        self.entries.values().map(|e| e.self_seconds).sum()
    }
}

/// Runs the target's gprof on `exe` and `gmon` and parses the flat profile.
pub fn gprof_flat(arch: Arch, exe: &Path, gmon: &Path) -> Flat {
    require_tool(arch.gprof);
    assert!(gmon.is_file(), "{} was not written", gmon.display());
    let out = run_ok(
        Command::new(arch.gprof)
            .args(["-b", "-p"])
            .arg(exe)
            .arg(gmon),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.stderr.is_empty(),
        "gprof complained about {}:\n{}",
        gmon.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_flat(&text)
}

/// Parses `gprof -b -p` output.
pub fn parse_flat(text: &str) -> Flat {
    let mut entries = BTreeMap::new();
    let mut seconds_per_sample = None;
    for line in text.lines() {
        if let Some(rest) = line.trim().strip_prefix("Each sample counts as ") {
            seconds_per_sample = rest.split_whitespace().next().and_then(|s| s.parse().ok());
            continue;
        }
        let tokens: Vec<&str> = line.split_whitespace().collect();
        if tokens.len() < 4 {
            continue;
        }
        let nums: Vec<Option<f64>> = tokens.iter().map(|t| t.parse::<f64>().ok()).collect();
        if nums[0].is_none() || nums[1].is_none() || nums[2].is_none() {
            continue;
        }
        // "%time cumulative self [calls self/call total/call] name"
        let (calls, name_start) =
            if tokens.len() >= 7 && nums[3].is_some() && nums[4].is_some() && nums[5].is_some() {
                (tokens[3].parse::<u64>().ok(), 6)
            } else {
                (None, 3)
            };
        let name = tokens[name_start..].join(" ");
        entries.insert(
            name,
            FlatEntry {
                self_seconds: nums[2].unwrap(),
                calls,
            },
        );
    }
    Flat {
        entries,
        seconds_per_sample,
        text: text.to_string(),
    }
}

/// The number just before `label` in the INSTRFN_VERBOSE summary line ("slow paths",
/// "calls lost", "thread blocks for", …).
pub fn summary_value(stderr: &str, label: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("instrfn: wrote "))
        .unwrap_or_else(|| panic!("no INSTRFN_VERBOSE summary in: {stderr}"));
    line.split([';', ':', ','])
        .find_map(|part| {
            let before = &part[..part.find(label)?];
            before.split_whitespace().last()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no \"{label}\" in: {line}"))
}

/// Asserts that the trampolines' fast path found the arcs the slow path inserted: slow paths
/// (one per new arc or thread) are few while calls are many. Catches a hash in the runtime's
/// assembly that disagrees with `arcs::hash`, which would leave the counts right but send
/// every call down the slow path.
pub fn assert_fast_path_used(stderr: &str, calls: u64, context: &str) {
    let slow = summary_value(stderr, "slow paths");
    assert!(
        slow > 0 && slow < 200 && slow * 100 < calls,
        "{context}: {slow} slow paths for {calls} calls"
    );
}

/// Asserts that the register driver's 5000 new arcs were inserted by the trampoline itself:
/// the slow path ran only for start-up, the driver's four threads and a few table growths.
pub fn assert_inserts_in_trampoline(stderr: &str, context: &str) {
    let slow = summary_value(stderr, "slow paths");
    assert!(slow <= 16, "{context}: {slow} slow paths for 5000 new arcs");
}

/// `gprof -b -q` call graph text.
pub fn gprof_graph(arch: Arch, exe: &Path, gmon: &Path) -> String {
    let out = run_ok(
        Command::new(arch.gprof)
            .args(["-b", "-q"])
            .arg(exe)
            .arg(gmon),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The call graph of `gprof -b -q` output as arcs: (caller, callee) -> calls.
///
/// Each entry of the graph is a block between dashed lines: the lines above its primary line
/// (the one that starts with `[index]`) are its callers, with `calls/total` in the called
/// column; the lines below are its callees, likewise. Both halves are read, so an arc appears
/// whether gprof shows its caller's entry or only its callee's (a caller that was itself
/// never called from inside the executable, e.g. a thread's start routine, has no entry of its
/// own); where both show an arc they must agree. `<spontaneous>` lines name no caller and are
/// skipped; a recursive arc (`f` calling `f`, shown without a total) is read like any other.
/// Members of a cycle keep their plain names (` <cycle N>` is dropped), and the
/// `<cycle N as a whole>` entries, which list members rather than callees, are skipped.
pub fn parse_call_graph(text: &str) -> BTreeMap<(String, String), u64> {
    /// (name, calls) of a caller or callee line, (name, None) of a primary line.
    fn parse_line(line: &str) -> Option<(bool, String, Option<u64>)> {
        let mut tokens: Vec<&str> = line.split_whitespace().collect();
        let is_index = |t: &str| {
            t.len() > 2
                && t.starts_with('[')
                && t.ends_with(']')
                && t[1..t.len() - 1].bytes().all(|b| b.is_ascii_digit())
        };
        // Every line that names a function ends with its index.
        if !tokens.last().is_some_and(|t| is_index(t)) {
            return None;
        }
        tokens.pop();
        let primary = tokens.first().is_some_and(|t| is_index(t));
        if primary {
            tokens.remove(0);
        }
        // %time, self and children: numbers with a decimal point (possibly absent).
        let mut i = 0;
        while i < tokens.len() && tokens[i].contains('.') && tokens[i].parse::<f64>().is_ok() {
            i += 1;
        }
        // The called column: n, n/total, or n+recursive on a primary line.
        let called = tokens.get(i).filter(|t| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_digit() || b == b'/' || b == b'+')
        });
        let calls = called.and_then(|t| t.split(['/', '+']).next()?.parse::<u64>().ok());
        if called.is_some() {
            i += 1;
        }
        let mut name = tokens[i..].join(" ");
        if let Some(cut) = name.find(" <cycle ") {
            name.truncate(cut);
        }
        if name.is_empty() {
            return None;
        }
        Some((primary, name, if primary { None } else { calls }))
    }

    let mut arcs: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut add = |caller: &str, callee: &str, calls: u64| {
        let key = (caller.to_string(), callee.to_string());
        if let Some(&seen) = arcs.get(&key) {
            assert_eq!(
                seen, calls,
                "gprof shows {caller} -> {callee} with {seen} and {calls} calls:\n{text}"
            );
        }
        arcs.insert(key, calls);
    };
    for block in text.split("\n-----------------------------------------------") {
        let lines: Vec<(bool, String, Option<u64>)> =
            block.lines().filter_map(parse_line).collect();
        let Some(p) = lines.iter().position(|(primary, ..)| *primary) else {
            continue;
        };
        let me = &lines[p].1;
        if me.starts_with("<cycle ") {
            continue;
        }
        for (_, caller, calls) in &lines[..p] {
            if let Some(n) = calls {
                add(caller, me, *n);
            }
        }
        for (_, callee, calls) in &lines[p + 1..] {
            if let Some(n) = calls {
                add(me, callee, *n);
            }
        }
    }
    arcs
}

/// Runs the target's gprof on `exe` and `gmon` and returns the call graph's arcs (see
/// [`parse_call_graph`]) and the text they were read from.
pub fn gprof_arcs(
    arch: Arch,
    exe: &Path,
    gmon: &Path,
) -> (BTreeMap<(String, String), u64>, String) {
    require_tool(arch.gprof);
    assert!(gmon.is_file(), "{} was not written", gmon.display());
    let text = gprof_graph(arch, exe, gmon);
    (parse_call_graph(&text), text)
}

/// Asserts that gprof's call graph shows exactly `expected` calls on each (caller, callee) arc.
pub fn assert_arcs(
    arcs: &(BTreeMap<(String, String), u64>, String),
    expected: &[(&str, &str, u64)],
    context: &str,
) {
    for (caller, callee, n) in expected {
        let got = arcs
            .0
            .get(&(caller.to_string(), callee.to_string()))
            .copied()
            .unwrap_or(0);
        assert_eq!(
            got, *n,
            "{context}: gprof shows {got} calls of {callee} from {caller}, expected {n}\n{}",
            arcs.1
        );
    }
}

/// Asserts that gprof shows exactly `expected` calls for each named function.
pub fn assert_calls(flat: &Flat, expected: &[(&str, u64)], context: &str) {
    for (name, n) in expected {
        assert_eq!(
            flat.calls(name),
            *n,
            "{context}: gprof shows {} calls of {name}, expected {n}\n{}",
            flat.calls(name),
            flat.text
        );
    }
}

/// The arcs gprof must show for calltree.c at `t` threads of `k` rounds (see its header):
/// run calls a once per round, a calls b twice, b calls c once, exactly.
pub fn calltree_arcs(t: u64, k: u64) -> [(&'static str, &'static str, u64); 3] {
    [
        ("run", "a", t * k),
        ("a", "b", 2 * t * k),
        ("b", "c", 2 * t * k),
    ]
}

/// The profile files `gmon.out*` a directory holds (name -> gprof's flat profile of `exe`).
pub fn profiles(arch: Arch, dir: &Path, exe: &Path) -> BTreeMap<String, Flat> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gmon.out"))
        .map(|n| {
            let flat = gprof_flat(arch, exe, &dir.join(&n));
            (n, flat)
        })
        .collect()
}
