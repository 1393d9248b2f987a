//! instrfn: the runtime behind compiler function instrumentation on Linux.
//!
//! Compilers plant a call in every function: `gcc -pg` and rustc `-Zinstrument-mcount` call
//! `mcount` (`_mcount` on aarch64 and riscv64, and from gcc on s390x), `gcc -pg -mfentry`
//! calls `__fentry__`. This
//! crate defines those symbols with per-architecture trampolines that count each call arc
//! `(caller, callee)` exactly, per thread and without locks, samples the pc with SIGPROF, and
//! writes `gmon.out` for `gprof` — without glibc's gcrt, so it also works on musl, under
//! threads (glibc drops arcs there), and preloaded into any instrumented binary.
//!
//! Ways in:
//! - as a dependency of an instrumented Rust program: add `use instrfn as _;` and build with
//!   `RUSTFLAGS=-Zinstrument-mcount cargo +nightly build --target <triple>`;
//! - `LD_PRELOAD=libinstrfn.so ./app` under a `-pg` binary;
//! - `libinstrfn.a` linked into a C program compiled with `-pg`.
//!
//! Configuration comes from `INSTRFN_*` environment variables (docs/configuration.md); this
//! module adds a small API for programs that link the crate.
//!
//! The crate is `no_std`: nothing in it allocates, and the preload artifacts carry no Rust std.

#![cfg_attr(not(test), no_std)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

// The layers, bottom up: each module uses only the ones above it in this list (the test
// command checks it: tests/layers.rs). docs/architecture.md has the map.
mod base;
#[macro_use]
mod sys;
mod abi;
mod config;
mod process;
mod tables;
mod thread;
#[macro_use]
mod arch;
mod gmon;
mod output;
mod runtime;
mod trace;
mod xray;

pub use runtime::api::{
    __monstartup, _mcleanup, instrfn_calls_recorded, instrfn_debug_call_guarded,
    instrfn_debug_clear_thread, instrfn_flush, instrfn_snapshot, instrfn_start, instrfn_stop,
    instrfn_write_gmon, moncontrol, monstartup,
};

// libc, linked by name whatever features other packages of a build turn on in the `libc` crate:
// with its `std` feature it emits no link attribute (std links libc), and a no_std cdylib
// (libinstrfn.so) would then need no libc.so.6, leaving every libc symbol unversioned and
// glibc's libc_nonshared.a (pthread_atfork) out. A static libc is linked by the final link.
#[cfg(all(target_os = "linux", not(target_feature = "crt-static")))]
#[link(name = "c")]
unsafe extern "C" {}

/// Whether this build has trampolines for the target architecture.
pub const SUPPORTED: bool = arch::SUPPORTED;

/// Starts (or resumes) recording call arcs and pc samples.
pub fn start() {
    runtime::api::instrfn_start()
}

/// Stops recording. What was recorded is kept and written at exit (or by [`write_gmon`]).
pub fn stop() {
    runtime::api::instrfn_stop()
}

/// Writes `gmon.out` (or `$GMON_OUT_PREFIX.<pid>`) now, with everything recorded so far.
/// Recording goes on; the file is replaced atomically by later writes and at exit.
/// The reason for a failure has also been printed on stderr.
pub fn write_gmon() -> Result<(), Errno> {
    match runtime::api::instrfn_write_gmon() {
        0 => Ok(()),
        e => Err(Errno(e)),
    }
}

/// Makes what was recorded so far safe on disk: gmon mode writes `gmon.out` (as
/// [`write_gmon`]); trace mode (`INSTRFN_MODE=trace`) adds the calling thread's pending loss
/// count and the libraries loaded since to the trace, and syncs its files. Events themselves
/// need no flush: they are in the trace files the moment they are recorded.
pub fn flush() -> Result<(), Errno> {
    match runtime::api::instrfn_flush() {
        0 => Ok(()),
        e => Err(Errno(e)),
    }
}

/// Ring mode (`INSTRFN_MODE=ring`): takes a snapshot of every thread's ring into
/// `<INSTRFN_OUTPUT>/snapshots/<n>/` now, a trace directory `instrfn report` reads. The threads
/// keep recording. `Err(Errno(EINVAL))`: the process does not record into rings.
pub fn snapshot() -> Result<(), Errno> {
    match runtime::api::instrfn_snapshot() {
        0 => Ok(()),
        e => Err(Errno(e)),
    }
}

/// Calls recorded so far, all threads and arcs together.
pub fn calls_recorded() -> u64 {
    runtime::api::instrfn_calls_recorded()
}

/// An OS error number (`std::io::Error::from_raw_os_error(e.0)` makes an `io::Error` of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl core::fmt::Display for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&sys::Errno(self.0), f)
    }
}

impl core::error::Error for Errno {}
