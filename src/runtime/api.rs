//! The public C API (`instrfn_start`, `instrfn_stop`, `instrfn_write_gmon`, `instrfn_flush`,
//! ...), glibc's gmon entry points that instrfn takes over (`__monstartup`, `monstartup`,
//! `_mcleanup`, `moncontrol`), and the dump signal.
//!
//! gcrt1.o (linked by `gcc -pg` and by rustc, which passes -pg to the linker) calls
//! `__monstartup` from _init and registers `_mcleanup` with atexit; defining them here (in the
//! executable, or preloaded) keeps glibc's own profiler from running and writing a second
//! gmon.out over ours.

use core::ffi::{c_int, c_void};

use super::{runtime, started};
use crate::tables::arcs;
use crate::{abi, output, sys, thread};

pub fn install_dump_signal(sig: c_int) {
    install_signal(
        sig,
        "INSTRFN_DUMP_SIGNAL",
        instrfn_dump_entry as *const () as usize,
    );
}

/// INSTRFN_SNAPSHOT_SIGNAL: a snapshot of the rings on `sig`.
pub fn install_snapshot_signal(sig: c_int) {
    install_signal(
        sig,
        "INSTRFN_SNAPSHOT_SIGNAL",
        instrfn_snapshot_signal_entry as *const () as usize,
    );
}

/// Installs `handler` for `sig`, unless the program handles it itself (said in one line).
fn install_signal(sig: c_int, setting: &str, handler: usize) {
    let old = sys::handler_of(sig);
    if old != libc::SIG_DFL && old != libc::SIG_IGN {
        message!("{setting}: the program handles signal {sig} itself; not installing a handler");
        return;
    }
    if !sys::install_handler(sig, handler, libc::SA_RESTART) {
        message!(
            "cannot install the handler for signal {sig}: {}",
            sys::Errno(sys::errno())
        );
    }
}

guarded_entry! {
    /// Handler of INSTRFN_DUMP_SIGNAL: writes gmon.out now.
    fn instrfn_dump_entry(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void)
        => on_dump_signal
}

guarded_entry! {
    /// Handler of INSTRFN_SNAPSHOT_SIGNAL: a snapshot of the rings now.
    fn instrfn_snapshot_signal_entry(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void)
        => on_snapshot_signal
}

extern "C" fn on_snapshot_signal(_sig: c_int, _info: *mut libc::siginfo_t, _uc: *mut c_void) {
    if let Some(rt) = started()
        && rt.owned_here()
    {
        output::snapshot(b"signal");
    }
}

guarded_entry! {
    /// Ring mode: takes a snapshot of every thread's ring into `<INSTRFN_OUTPUT>/snapshots/<n>/`
    /// now; the threads keep recording. Returns 0, or an errno value (EINVAL: the process does
    /// not record into rings; others after printing why on stderr).
    #[unsafe(no_mangle)]
    pub fn instrfn_snapshot() -> c_int => api_snapshot
}

extern "C" fn api_snapshot() -> c_int {
    match started() {
        Some(rt) if rt.owned_here() => output::snapshot(b"api"),
        _ => libc::EINVAL,
    }
}

extern "C" fn on_dump_signal(_sig: c_int, _info: *mut libc::siginfo_t, _uc: *mut c_void) {
    if let Some(rt) = started()
        && rt.owned_here()
    {
        output::write_gmon(&rt.config, &rt.exe);
    }
}

guarded_entry! {
    /// gcrt's start of profiling: starts instrfn (the range arguments are not needed).
    #[unsafe(no_mangle)]
    pub fn __monstartup(lowpc: usize, highpc: usize) => monstartup_inner
}
guarded_entry! {
    /// glibc's public alias of `__monstartup`.
    #[unsafe(no_mangle)]
    pub fn monstartup(lowpc: usize, highpc: usize) => monstartup_inner
}
guarded_entry! {
    /// gcrt's exit hook (registered with atexit by gcrt1.o). instrfn writes its profile from
    /// its own exit destructor, after every atexit handler, so this does nothing: one profile,
    /// written once.
    #[unsafe(no_mangle)]
    pub fn _mcleanup() => mcleanup_inner
}

extern "C" fn mcleanup_inner() {}
guarded_entry! {
    /// `moncontrol(0)` stops recording (arcs and samples), `moncontrol(1)` resumes it.
    #[unsafe(no_mangle)]
    pub fn moncontrol(mode: c_int) => moncontrol_inner
}

extern "C" fn monstartup_inner(_lowpc: usize, _highpc: usize) {
    unsafe extern "C" {
        static environ: *const *const core::ffi::c_char;
    }
    // riscv64's gcrt1.o calls __monstartup from .preinit_array, before libc has set up the
    // environment: starting now would miss every INSTRFN_* setting. Then the first counting
    // call starts the runtime instead.
    // SAFETY: reads libc's environment pointer, null until libc has initialised it.
    if !unsafe { environ }.is_null() {
        runtime();
    }
}

extern "C" fn moncontrol_inner(mode: c_int) {
    if mode != 0 {
        api_start()
    } else {
        api_stop()
    };
}

guarded_entry! {
    /// Starts (or resumes) recording.
    #[unsafe(no_mangle)]
    pub fn instrfn_start() => api_start
}
guarded_entry! {
    /// Stops recording; what was recorded stays and is written at exit.
    #[unsafe(no_mangle)]
    pub fn instrfn_stop() => api_stop
}
guarded_entry! {
    /// Writes gmon.out now. Returns 0, or an errno value after printing why on stderr.
    #[unsafe(no_mangle)]
    pub fn instrfn_write_gmon() -> c_int => api_write
}
guarded_entry! {
    /// Makes what was recorded so far safe on disk: in gmon mode it writes gmon.out (as
    /// `instrfn_write_gmon`); in trace mode it writes the calling thread's pending loss count
    /// and `module` lines for objects loaded since, and syncs the trace files (`fdatasync`).
    /// Returns 0, or an errno value.
    #[unsafe(no_mangle)]
    pub fn instrfn_flush() -> c_int => api_flush
}
guarded_entry! {
    /// Calls `f(arg)` with the calling thread's guard held, as the runtime does for its own code:
    /// counting calls made meanwhile on this thread are not recorded. For tests of the
    /// trampolines' guarded path; not needed by programs.
    #[unsafe(no_mangle)]
    pub fn instrfn_debug_call_guarded(f: extern "C" fn(*mut c_void), arg: *mut c_void)
        => call_guarded
}

guarded_entry! {
    /// Calls recorded so far, all threads and arcs together (what gmon.out would hold, and
    /// arcs gprof cannot show included).
    #[unsafe(no_mangle)]
    pub fn instrfn_calls_recorded() -> u64 => api_calls_recorded
}
guarded_entry! {
    /// Empties the calling thread's arc table (keys and counts), so that the next calls are
    /// first calls again. For the trampoline benchmarks; not needed by programs.
    #[unsafe(no_mangle)]
    pub fn instrfn_debug_clear_thread() => clear_thread
}

pub extern "C" fn api_calls_recorded() -> u64 {
    thread::blocks()
        .map(|b| {
            let mut n = 0;
            arcs::for_each_arc(&b.table, |_, _, c| n += c);
            n
        })
        .sum()
}

extern "C" fn clear_thread() {
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *abi::tls() };
    if !tls.table.is_null() {
        // SAFETY: the table of this thread's block; only this thread writes it.
        arcs::clear(unsafe { &*tls.table });
    }
}

extern "C" fn api_start() {
    runtime();
    output::recording(true);
}

extern "C" fn api_stop() {
    runtime();
    output::recording(false);
}

extern "C" fn api_write() -> c_int {
    let rt = runtime();
    output::write_gmon(&rt.config, &rt.exe)
}

extern "C" fn api_flush() -> c_int {
    let rt = runtime();
    output::flush(&rt.config, &rt.exe)
}

extern "C" fn call_guarded(f: extern "C" fn(*mut c_void), arg: *mut c_void) {
    f(arg)
}
