//! The control plane: lazy start-up, the slow path of every counting call, thread exit, fork,
//! exit, the dump signal, the glibc gmon entry points instrfn takes over, and the C API.
//!
//! Every way into the runtime from outside is a `guarded_entry!` (a naked shim that holds this
//! thread's guard before any Rust code runs), or the slow path, which the trampolines enter with
//! the guard held. So when instrfn itself is compiled with `-Zinstrument-mcount`, its own
//! counting calls return at once instead of recursing.
//!
//! Start-up is lazy and happens once, on whichever comes first: gcrt's `__monstartup` (run from
//! `_init`, before any constructor), the first counting call, or an API call. A process that
//! never makes one (a shell that inherited `LD_PRELOAD`) stays inert: no timer, no file.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::arcs::{self, Insert};
use crate::config::Config;
use crate::exe::Executable;
use crate::thread::{self, ThreadBlock, Tls};
use crate::{arch, gmon, sampler, sys};

pub struct Runtime {
    pub config: Config,
    pub exe: Executable,
    fork_child: AtomicBool,
}

impl Runtime {
    pub fn is_fork_child(&self) -> bool {
        self.fork_child.load(Ordering::Relaxed)
    }
}

static RUNTIME: spin::Once<Runtime> = spin::Once::new();
/// The pthread key whose destructor gives a thread's block back.
static THREAD_KEY: AtomicU32 = AtomicU32::new(0);
/// Slow-path entries (start-up, new threads, table growth): far fewer than calls, unless the
/// trampolines' hash disagreed with `arcs::hash` (the verbose summary shows it).
static SLOW_PATHS: AtomicU64 = AtomicU64::new(0);
/// Calls lost because a new thread could not get a block (no memory).
static LOST_WITHOUT_BLOCK: AtomicU64 = AtomicU64::new(0);
/// Set once an exit hook has written gmon.out; later exit writes are quiet.
static EXIT_WRITTEN: AtomicBool = AtomicBool::new(false);

/// Two functions that only name things in gmon.out: calls that could not be counted are
/// written as calls of `instrfn_calls_lost` from `instrfn_runtime`, so gprof shows the loss
/// (when the runtime is linked into the executable; a preloaded one is outside it). Never
/// called; their different bodies keep the compiler from merging them.
#[unsafe(no_mangle)]
pub extern "C" fn instrfn_runtime() -> u32 {
    1
}

#[unsafe(no_mangle)]
pub extern "C" fn instrfn_calls_lost() -> u32 {
    2
}

/// (from_pc, self_pc) of the loss arc: inside the two marker functions.
pub fn loss_markers() -> (usize, usize) {
    (
        instrfn_runtime as *const () as usize,
        instrfn_calls_lost as *const () as usize,
    )
}

pub fn slow_paths() -> u64 {
    SLOW_PATHS.load(Ordering::Relaxed)
}

pub fn lost_without_block() -> u64 {
    LOST_WITHOUT_BLOCK.load(Ordering::Relaxed)
}

/// Whether counting calls are recorded now (instrfn::start/stop, moncontrol).
pub fn recording() -> bool {
    arch::enabled().load(Ordering::Relaxed) != 0
}

fn set_recording(on: bool) {
    arch::enabled().store(on as u8, Ordering::Relaxed);
}

/// The runtime, started on first use. Must run with the guard held.
fn runtime() -> &'static Runtime {
    RUNTIME.call_once(start_up)
}

fn start_up() -> Runtime {
    let config = Config::from_env();
    let exe = Executable::find();
    set_recording(config.start);
    // SAFETY: plain libc registrations with valid function pointers; each handler is a
    // guarded entry. THREAD_KEY is written once here, before any block is claimed.
    unsafe {
        let mut key: libc::pthread_key_t = 0;
        if libc::pthread_key_create(&mut key, Some(instrfn_thread_exit_entry)) == 0 {
            THREAD_KEY.store(key as u32 + 1, Ordering::Relaxed);
        } else {
            message!("no pthread key left: threads' tables will not be reused when they exit");
        }
        libc::pthread_atfork(
            Some(instrfn_fork_prepare_entry),
            Some(instrfn_fork_parent_entry),
            Some(instrfn_fork_child_entry),
        );
        libc::atexit(instrfn_exit_entry);
    }
    if exe.count == 0 {
        message!("cannot find the executable's code segments; gmon.out will hold no data");
    }
    if config.hz > 0 && sampler::start(&exe, config.hz) && !config.start {
        sampler::pause();
    }
    if let Some(sig) = config.dump_signal {
        install_dump_signal(sig);
    }
    Runtime {
        config,
        exe,
        fork_child: AtomicBool::new(false),
    }
}

fn install_dump_signal(sig: c_int) {
    // SAFETY: query, then install a valid SA_SIGINFO handler with every signal masked.
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        libc::sigaction(sig, core::ptr::null(), &mut old);
        if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
            message!(
                "INSTRFN_DUMP_SIGNAL: the program handles signal {sig} itself; not installing \
                 the dump handler"
            );
            return;
        }
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = instrfn_dump_entry as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigfillset(&mut act.sa_mask);
        if libc::sigaction(sig, &act, core::ptr::null_mut()) != 0 {
            message!(
                "cannot install the handler for signal {sig}: {}",
                sys::Errno(sys::errno())
            );
        }
    }
}

/// The slow path of every trampoline: the runtime has not started, the thread has no table
/// yet, or its table is half full and must grow (the trampolines insert other new arcs
/// themselves). Entered from the assembly with the guard held, all signals blocked and every
/// register of the instrumented code saved.
///
/// # Safety
/// Only the trampolines call this, with `tls` = this thread's TLS block.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_slow_path(tls: *mut Tls, from_pc: usize, self_pc: usize) {
    let saved_errno = sys::errno();
    SLOW_PATHS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: per the contract tls is this thread's block, used by this thread only.
    record(unsafe { &mut *tls }, from_pc, self_pc);
    // SAFETY: restores this thread's errno.
    unsafe { *libc::__errno_location() = saved_errno };
}

fn record(tls: &mut Tls, from_pc: usize, self_pc: usize) {
    let rt = runtime();
    if !recording() {
        return;
    }
    if tls.table.is_null() {
        let block = thread::claim_block(rt.config.max_arcs);
        if block.is_null() {
            LOST_WITHOUT_BLOCK.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // SAFETY: claim_block returned a live block owned by this thread.
        tls.table = unsafe { (*block).table.load(Ordering::Relaxed) };
        tls.block = block;
        let key = THREAD_KEY.load(Ordering::Relaxed);
        if key != 0 {
            // SAFETY: the key was created at start-up; the value is only read by our
            // destructor.
            unsafe { libc::pthread_setspecific(key as libc::pthread_key_t - 1, block.cast()) };
        }
    }
    // SAFETY: tls.table is the current table of this thread's block.
    let table = unsafe { &*tls.table };
    if let Insert::Grew(table) = arcs::insert(table, from_pc, self_pc, rt.config.max_arcs) {
        // SAFETY: tls.block is this thread's live block.
        unsafe { (*tls.block).table.store(table, Ordering::Release) };
        tls.table = table;
    }
}

guarded_entry! {
    /// pthread key destructor: the thread is exiting; give its block back.
    fn instrfn_thread_exit_entry(block: *mut c_void) => thread_exit
}

extern "C" fn thread_exit(block: *mut c_void) {
    let block = block.cast::<ThreadBlock>();
    // SAFETY: this thread's TLS block, used by this thread only.
    let tls = unsafe { &mut *arch::tls() };
    if tls.block == block {
        tls.table = core::ptr::null_mut();
        tls.block = core::ptr::null_mut();
    }
    thread::release_block(block);
}

guarded_entry! {
    fn instrfn_fork_prepare_entry() => fork_prepare
}
guarded_entry! {
    fn instrfn_fork_parent_entry() => fork_parent
}
guarded_entry! {
    fn instrfn_fork_child_entry() => fork_child
}

extern "C" fn fork_prepare() {
    // No writer may be half-way through when the address space is copied.
    gmon::lock_for_fork();
}

extern "C" fn fork_parent() {
    gmon::unlock_after_fork();
}

extern "C" fn fork_child() {
    gmon::unlock_after_fork();
    let rt = runtime();
    rt.fork_child.store(true, Ordering::Relaxed);
    EXIT_WRITTEN.store(false, Ordering::Relaxed);
    // SAFETY: this thread's TLS block.
    let current = unsafe { (*arch::tls()).block };
    thread::reset_after_fork(current);
    LOST_WITHOUT_BLOCK.store(0, Ordering::Relaxed);
    sampler::reset_after_fork();
}

guarded_entry! {
    /// atexit handler registered at start-up.
    fn instrfn_exit_entry() => at_exit
}

extern "C" fn at_exit() {
    let rt = runtime();
    let quiet = EXIT_WRITTEN.swap(true, Ordering::Relaxed);
    gmon::write(rt, quiet);
}

guarded_entry! {
    /// Handler of INSTRFN_DUMP_SIGNAL: writes gmon.out now.
    fn instrfn_dump_entry(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void)
        => on_dump_signal
}

extern "C" fn on_dump_signal(_sig: c_int, _info: *mut libc::siginfo_t, _uc: *mut c_void) {
    gmon::write(runtime(), false);
}

// glibc's gmon entry points. gcrt1.o (linked by `gcc -pg` and by rustc, which passes -pg to
// the linker) calls __monstartup from _init and registers _mcleanup with atexit; defining them
// here (in the executable, or preloaded) keeps glibc's own profiler from running and writing
// a second gmon.out over ours.

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
    /// gcrt's exit hook: writes gmon.out.
    #[unsafe(no_mangle)]
    pub fn _mcleanup() => at_exit
}
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

// The C API, also used by the Rust API in lib.rs.

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

extern "C" fn api_calls_recorded() -> u64 {
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
    let tls = unsafe { &mut *arch::tls() };
    if !tls.table.is_null() {
        // SAFETY: the table of this thread's block; only this thread writes it.
        arcs::clear(unsafe { &*tls.table });
    }
}

extern "C" fn api_start() {
    runtime();
    set_recording(true);
    sampler::resume();
}

extern "C" fn api_stop() {
    runtime();
    set_recording(false);
    sampler::pause();
}

extern "C" fn api_write() -> c_int {
    gmon::write(runtime(), false)
}

extern "C" fn call_guarded(f: extern "C" fn(*mut c_void), arg: *mut c_void) {
    f(arg)
}
