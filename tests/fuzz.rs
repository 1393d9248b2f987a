//! Property test of the trace reader and the commands on mutated real traces (the corpus in
//! tests/fixtures/corpus: x86_64 traces with threads, losses, longjmp and a process tree, and
//! a big-endian s390x one, in 16-byte events; two of compact events, in the staging file of
//! 4 KiB chunks, short and long ones: compact.c's and calltree.c's at 4 threads; and one of
//! calltree.c's with call words, chunk version 3): whatever the bytes, reading never panics,
//! and `instrfn report`, `export` and `dump` end with status 0 or with status 2 and one line
//! on stderr. Deterministic (a fixed seed), bounded by count and by time.

#[macro_use]
mod common;

use common::*;
use instrfn_trace::calls::{Call, Visitor, trace_end, walk};
use instrfn_trace::{Symbols, Trace};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

feature_tests! {
    fuzz:
    mutated_traces_never_crash_the_reader_or_the_commands(x86_64),
}

/// xorshift64*: a small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

struct Null;
impl Visitor for Null {
    fn call(&mut self, c: &Call, stack: &[u64]) {
        assert!(!stack.is_empty() && c.end >= c.start);
    }
}

fn corpus() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(fixture("corpus"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    assert!(v.len() >= 8, "the corpus is in tests/fixtures/corpus");
    v
}

/// One mutation of the files of `dir` (copied from `from`).
fn mutate(from: &Path, dir: &Path, rng: &mut Rng) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(from)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for f in &files {
        std::fs::copy(f, dir.join(f.file_name().unwrap())).unwrap();
    }
    let target = dir.join(files[rng.below(files.len())].file_name().unwrap());
    let mut bytes = std::fs::read(&target).unwrap();
    let meta = target.extension().is_some_and(|e| e == "meta");
    for _ in 0..1 + rng.below(3) {
        match rng.below(if meta { 8 } else { 6 }) {
            // Flip a few bytes.
            0 => {
                for _ in 0..1 + rng.below(8) {
                    if !bytes.is_empty() {
                        let i = rng.below(bytes.len());
                        bytes[i] ^= 1 << rng.below(8);
                    }
                }
            }
            // An aligned 8-byte word set to something else (an event's tag or timestamp, a
            // header field).
            1 => {
                if bytes.len() >= 8 {
                    let i = rng.below(bytes.len() / 8) * 8;
                    let v = match rng.below(4) {
                        0 => 0,
                        1 => u64::MAX,
                        2 => rng.next() & 0xff,
                        _ => rng.next(),
                    };
                    bytes[i..i + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
            // Cut short.
            2 => {
                let n = rng.below(bytes.len() + 1);
                bytes.truncate(n);
            }
            // A range zeroed.
            3 => {
                if !bytes.is_empty() {
                    let a = rng.below(bytes.len());
                    let b = (a + rng.below(256)).min(bytes.len());
                    bytes[a..b].fill(0);
                }
            }
            // Grown with garbage.
            4 => {
                for _ in 0..rng.below(5000) {
                    bytes.push(rng.next() as u8);
                }
            }
            // A copy of one region over another.
            5 => {
                if bytes.len() > 64 {
                    let n = rng.below(bytes.len() / 2).max(1);
                    let a = rng.below(bytes.len() - n);
                    let b = rng.below(bytes.len() - n);
                    let chunk = bytes[a..a + n].to_vec();
                    bytes[b..b + n].copy_from_slice(&chunk);
                }
            }
            // Meta: a line dropped, doubled, or a field replaced.
            6 | 7 => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
                if !lines.is_empty() {
                    let i = rng.below(lines.len());
                    match rng.below(4) {
                        0 => {
                            lines.remove(i);
                        }
                        1 => {
                            let l = lines[i].clone();
                            lines.insert(rng.below(lines.len() + 1), l);
                        }
                        _ => {
                            let mut w: Vec<String> =
                                lines[i].split(' ').map(str::to_string).collect();
                            let j = rng.below(w.len());
                            w[j] = ["-1", "0", "18446744073709551616", "0x", "zz", "", "%", "%G"]
                                [rng.below(8)]
                            .to_string();
                            lines[i] = w.join(" ");
                        }
                    }
                }
                bytes = (lines.join("\n") + "\n").into_bytes();
            }
            _ => unreachable!(),
        }
    }
    std::fs::write(&target, bytes).unwrap();
}

/// Reads everything in-process: must not panic. Whether the trace opened.
fn read_all(dir: &Path) -> bool {
    let Ok(t) = Trace::open(dir) else {
        return false;
    };
    {
        for p in &t.processes {
            let _ = Symbols::of(p);
            for slot in p.slots() {
                for e in p.events(slot) {
                    let _ = e;
                }
                let _ = walk(p, slot, trace_end(p), &mut Null);
            }
        }
    }
    true
}

fn check_cli(dir: &Path, context: &str) {
    for args in [
        vec!["report", "--format", "json"],
        vec!["report", "--threads"],
        vec!["export", "--format", "chrome"],
        vec!["export", "--format", "folded"],
        vec!["dump"],
    ] {
        let out = run(Command::new(instrfn_cli())
            .args(&args[..1])
            .arg(dir)
            .args(&args[1..]));
        let err = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        assert!(
            code == Some(0) || code == Some(2),
            "{context} {args:?}: status {:?}\n{err}",
            out.status
        );
        assert!(!err.contains("panicked"), "{context} {args:?}: {err}");
        if code == Some(2) {
            assert_eq!(
                err.trim_end().lines().count(),
                1,
                "{context} {args:?}: {err}"
            );
        }
    }
}

/// The corpus reads cleanly; then mutants of it (a fixed seed): reading never panics, and
/// the commands end with status 0, or with status 2 and one line; the mutations reach traces
/// that still open and ones that are refused.
fn mutated_traces_never_crash_the_reader_or_the_commands(_: Arch) {
    let work = workdir("fuzz");
    let start = Instant::now();
    let budget = Duration::from_secs(30);
    let mut rng = Rng(0x1f2e_3d4c_5b6a_7988);
    let corpus = corpus();
    // The originals read cleanly.
    for c in &corpus {
        Trace::open(c).unwrap_or_else(|e| panic!("{}: {e}", c.display()));
        check_cli(c, &c.display().to_string());
    }
    let mut n = 0;
    let mut opened = 0;
    // At least 200 mutants, however long they take (a loaded host is slower, not wrong); then
    // on, up to 3000, while the time budget lasts.
    while n < 3000 && (n < 200 || start.elapsed() < budget) {
        let from = &corpus[n % corpus.len()];
        let dir = work.join("mutant");
        mutate(from, &dir, &mut rng);
        let context = format!("mutant {n} of {}", from.display());
        match std::panic::catch_unwind(|| read_all(&dir)) {
            Ok(true) => opened += 1,
            Ok(false) => {}
            Err(_) => {
                let keep = work.join(format!("crash-{n}"));
                let _ = std::fs::rename(&dir, &keep);
                panic!(
                    "{context}: the reader panicked; the input is kept in {}",
                    keep.display()
                );
            }
        }
        if n % 40 == 0 {
            check_cli(&dir, &context);
        }
        n += 1;
    }
    assert!(n >= 200, "only {n} mutants in {budget:?}");
    // The mutations reach both sides: traces that still open (and are walked) and ones that
    // are refused.
    assert!(
        opened >= n / 10 && n - opened >= n / 10,
        "{opened} of {n} opened"
    );
    eprintln!("{n} mutants read, {opened} opened");
}
