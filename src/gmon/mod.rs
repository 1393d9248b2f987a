//! gmon mode: every counting call is an arc `(caller, callee)` counted in its thread's table,
//! the pc is sampled with SIGPROF, and gmon.out is written for gprof (GNU tagged format,
//! version 1).
//!
//! One profile per module: the main executable's (named by crate::process), and one for each
//! shared library with instrumented code, `<that name>.<library file name>`, in the library's
//! own link-time addresses, so `gprof libfoo.so gmon.out.libfoo.so` reads it. An arc goes to
//! the profile of the module that holds both its ends (gprof drops the others); a library
//! unloaded by `dlclose` gets its profile written then, and its counts are kept apart from
//! whatever is loaded at the same address later (retired.rs).
//!
//! The writer allocates nothing from the heap (scratch memory is mapped), so it can run at
//! exit, from the dump-signal handler, on a crash or in a fork child. The files, bottom up:
//! `recorded` (what every thread counted), `file` (the gmon.out format, written under a
//! temporary name and renamed), `retired` (unloaded libraries), `sampler` (the pc histogram),
//! and this file: the slow path's insert, the writers and their lock. Uses `config`,
//! `process` and every layer below the outputs.

pub mod file;
pub mod recorded;
pub mod retired;
pub mod sampler;

use core::ffi::{CStr, c_int};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::abi::Tls;
use crate::base::{Bytes, StackBuf};
use crate::config::Config;
use crate::sys::objects::{self, Module};
use crate::tables::arcs::{self, Insert};
use crate::thread::ThreadBlock;
use crate::{process, sys, tables, thread};
use file::{PATH_MAX, Written, write_profile};
use recorded::Recorded;

/// Slow-path entries (start-up, new threads, table growth): far fewer than calls, unless the
/// trampolines' hash disagreed with `arcs::hash` (the verbose summary shows it).
pub static SLOW_PATHS: AtomicU64 = AtomicU64::new(0);

/// The gmon slow path: counts the call `(from_pc, self_pc)` in the thread's table, growing it
/// if it is half full (the trampolines insert other new arcs themselves). With the guard held
/// and every signal blocked.
pub fn record(tls: &mut Tls, block: &ThreadBlock, from_pc: usize, self_pc: usize, max_arcs: usize) {
    // SAFETY: tls.table is the current table of this thread's block.
    let table = unsafe { &*tls.table };
    if let Insert::Grew(table) = arcs::insert(table, from_pc, self_pc, max_arcs) {
        block.table.store(table, Ordering::Release);
        tls.table = table;
    }
}

/// Serialises writers (exit, API, dump signal, exec, dlclose, crash). Control plane only.
static WRITER: WriterLock = WriterLock {
    owner: AtomicU32::new(0),
};

/// Warnings that should be printed once per process, not at every write.
static WARNED_HANDLER: AtomicBool = AtomicBool::new(false);

/// A spin lock that knows its owner thread, so that a writer re-entered on the thread that
/// holds it (a crash inside the writer) gives up instead of spinning forever.
struct WriterLock {
    /// Kernel tid of the holder, 0 when free.
    owner: AtomicU32,
}

struct WriterGuard;

impl WriterLock {
    /// None if the calling thread holds the lock already.
    fn lock(&self) -> Option<WriterGuard> {
        self.lock_within(u64::MAX)
    }

    /// As [`lock`](Self::lock), and None after `ns` nanoseconds of waiting for another thread.
    fn lock_within(&self, ns: u64) -> Option<WriterGuard> {
        let me = sys::gettid();
        let start = sys::monotonic_ns();
        let mut spins = 0u32;
        loop {
            match self
                .owner
                .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Some(WriterGuard),
                Err(owner) if owner == me => return None,
                Err(_) => {
                    core::hint::spin_loop();
                    spins = spins.wrapping_add(1);
                    if ns != u64::MAX
                        && spins.is_multiple_of(1024)
                        && sys::monotonic_ns().saturating_sub(start) > ns
                    {
                        return None;
                    }
                }
            }
        }
    }
}

impl Drop for WriterGuard {
    fn drop(&mut self) {
        WRITER.owner.store(0, Ordering::Release);
    }
}

/// In the child after fork: a writer that was running on another thread of the parent does
/// not exist here; its lock is free.
pub fn reset_after_fork() {
    WRITER.owner.store(0, Ordering::Relaxed);
}

/// What one write produced, for messages.
struct Summary {
    exe: Written,
    /// Library profiles written, and what they hold together.
    libraries: usize,
    library: Written,
    /// Arcs (and their calls) no profile holds: their ends lie in different modules, or in
    /// code outside every module written (gprof could not show them).
    foreign_arcs: usize,
    foreign_calls: u64,
    lost: u64,
    samples: u64,
    samples_lost: u64,
    /// Probe lengths over the arcs of every thread's current table: (arcs, sum, longest).
    probes: (u64, u64, u64),
}

/// Writes every profile. Returns 0 or an errno value (after printing why). `quiet` suppresses
/// the summary and loss lines, not errors.
pub fn write(config: &Config, exe: &Module, quiet: bool) -> c_int {
    match WRITER.lock() {
        Some(lock) => write_locked(config, exe, quiet, &lock),
        None => libc::EDEADLK,
    }
}

fn write_locked(config: &Config, exe: &Module, quiet: bool, _lock: &WriterGuard) -> c_int {
    let mut path = StackBuf::<PATH_MAX>::new();
    process::profile_path(config.prefix(), &mut path);
    let Some(path) = path.as_cstr() else {
        message!("the gmon.out path is too long or contains a NUL byte; nothing written");
        return libc::ENAMETOOLONG;
    };
    let Some(rec) = Recorded::gather() else {
        message!(
            "cannot map memory to collect the profile; {} not written",
            Bytes(path.to_bytes())
        );
        return libc::ENOMEM;
    };
    let snap = sampler::snapshot();
    if !snap.handler_intact && !WARNED_HANDLER.swap(true, Ordering::Relaxed) {
        message!(
            "the program replaced instrfn's SIGPROF handler; the pc histogram stops where it did"
        );
    }
    let mut summary = Summary {
        exe: Written::default(),
        libraries: 0,
        library: Written::default(),
        foreign_arcs: 0,
        foreign_calls: 0,
        lost: rec.lost,
        samples: rec.samples().iter().map(|s| s.count).sum(),
        samples_lost: snap.lost,
        probes: thread::blocks()
            .map(|b| tables::arcs::probe_stats(&b.table))
            .fold((0, 0, 0), |(n, sum, max), (bn, bsum, bmax)| {
                (n + bn, sum + bsum, max.max(bmax))
            }),
    };
    let result = write_profile(config, path, exe, &rec, true);
    let result = result.map(|w| summary.exe = w);
    let mut placed = summary.exe.calls;
    // Every shared library with instrumented code: a callee of some arc lies in it.
    objects::for_each_shared_object(|m| {
        if !rec.arcs().iter().any(|a| m.contains(a.to)) {
            return;
        }
        let mut lib_path = StackBuf::<PATH_MAX>::new();
        lib_path.push(path.to_bytes());
        lib_path.push(b".");
        lib_path.push(m.file_name());
        if let Some(lib_path) = lib_path.as_cstr()
            && let Ok(w) = write_profile(config, lib_path, m, &rec, false)
        {
            summary.libraries += 1;
            summary.library.arcs += w.arcs;
            summary.library.calls += w.calls;
            summary.library.samples += w.samples;
            placed += w.calls;
        }
    });
    let total_calls: u64 = rec.arcs().iter().map(|a| a.count).sum();
    let placed_arcs = summary.exe.arcs + summary.library.arcs;
    summary.foreign_arcs = rec.arcs().len().saturating_sub(placed_arcs);
    summary.foreign_calls = total_calls.saturating_sub(placed);
    if !quiet {
        report(config, path, &summary);
    }
    match result {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// The program crashed (crate::runtime::crash): writes every profile, unless the writer is running on
/// this very thread (the crash is in it) or does not finish on another within two seconds.
pub fn write_on_crash(config: &Config, exe: &Module) {
    match WRITER.lock_within(2_000_000_000) {
        Some(lock) => {
            write_locked(config, exe, false, &lock);
        }
        None => message!("the program crashed while the profile was being written; not written"),
    }
}

/// A library is about to be unloaded (the dlclose wrapper): the memory that will keep its
/// counts apart is mapped now, before the loader frees its address range.
pub fn prepare_unload() {
    if let Some(_lock) = WRITER.lock() {
        retired::prepare();
    }
}

/// The library `m` has just been unloaded (the dlclose wrapper): writes its profile now,
/// and keeps its counts apart from whatever is loaded at its addresses later.
pub fn write_unloaded(config: &Config, m: &Module) {
    let Some(_lock) = WRITER.lock() else {
        return;
    };
    let Some(rec) = Recorded::gather() else {
        message!("cannot map memory to write the profile of an unloaded library");
        return;
    };
    if rec.arcs().iter().any(|a| m.contains(a.to)) {
        let mut path = StackBuf::<PATH_MAX>::new();
        process::profile_path(config.prefix(), &mut path);
        path.push(b".");
        path.push(m.file_name());
        if let Some(path) = path.as_cstr() {
            let _ = write_profile(config, path, m, &rec, false);
        }
    }
    retired::record(m, &rec);
}

fn report(config: &Config, path: &CStr, s: &Summary) {
    if s.lost > 0 {
        message!(
            "{} calls were not counted: a thread's arc table reached INSTRFN_MAX_ARCS={} or memory \
             ran out; raise INSTRFN_MAX_ARCS",
            s.lost,
            config.max_arcs
        );
    }
    if s.samples_lost > 0 {
        message!(
            "{} pc samples were not kept: a thread sampled more than {} distinct pcs, or memory \
             ran out",
            s.samples_lost,
            tables::pcs::MAX_PCS
        );
    }
    if config.verbose {
        let (blocks, threads) = thread::block_stats();
        let mean_x100 = (s.probes.1 * 100).checked_div(s.probes.0).unwrap_or(0);
        let outside = s.samples - s.exe.samples - s.library.samples;
        message!(
            "wrote {}: {} arcs, {} calls, {} samples ({} outside the executable); {} library \
             profiles: {} arcs, {} calls, {} samples; {} arcs ({} calls) between modules or \
             into code outside them; {} samples in no profile; {} thread blocks for {} claims; \
             {} slow paths; {} calls lost; probes per arc {}.{:02} mean, {} max",
            Bytes(path.to_bytes()),
            s.exe.arcs,
            s.exe.calls,
            s.samples,
            s.samples - s.exe.samples,
            s.libraries,
            s.library.arcs,
            s.library.calls,
            s.library.samples,
            s.foreign_arcs,
            s.foreign_calls,
            outside,
            blocks,
            threads,
            SLOW_PATHS.load(Ordering::Relaxed),
            s.lost,
            mean_x100 / 100,
            mean_x100 % 100,
            s.probes.2
        );
    }
}
