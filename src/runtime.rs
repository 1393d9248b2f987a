//! The control plane: lazy start-up, the slow path of every counting call, thread exit, fork,
//! exit, the dump signal, the glibc gmon entry points instrfn takes over, and the C API.
//!
//! Every way into the runtime from outside is a `guarded_entry!` (a naked shim that holds this
//! thread's guard before any Rust code runs), or the slow path, which the trampolines enter with
//! the guard held. So when instrfn itself is compiled with `-Zinstrument-mcount`, its own
//! counting calls return at once instead of recursing.
//!
//! Two phases:
//! - On load, an `.init_array` constructor (asm/data.s) does what needs libc's locks or the
//!   allocator, while that is safe (before `main`, one thread, never in a signal handler):
//!   the thread-exit key, the fork handlers, the process-tree marker (src/process.rs).
//!   Nothing observable: no timer, no file, no output.
//! - Start-up is lazy and happens once, on whichever comes first: gcrt's `__monstartup` (run
//!   from `_init`), the first counting call, or an API call. It may run inside a signal handler
//!   (the program's first counting call can be there), so it is async-signal-safe: it reads
//!   the environment, installs signal handlers, maps memory, makes no lock-taking libc call.
//!   A process that never makes a counting call (a shell that inherited `LD_PRELOAD`) stays
//!   inert: no timer, no file.
//!
//! The profile is written at exit by an `.fini_array` destructor, which runs after the
//! program's `atexit` handlers (so their calls count too), and never twice.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

use crate::arcs::{self, Insert};
use crate::config::Config;
use crate::modules::Module;
use crate::sys::StackBuf;
use crate::thread::{self, ThreadBlock, Tls};
use crate::{arch, gmon, process, sampler, sys};

pub struct Runtime {
    pub config: Config,
    pub exe: Module,
    /// The pid this runtime state belongs to: the process that started it, or the child after
    /// fork. A vfork child (same memory, no fork handlers) has another pid.
    pid: AtomicI32,
    /// Whether this process is a fork child whose parent started the runtime.
    fork_child: AtomicBool,
}

impl Runtime {
    /// Whether the calling process owns this state (not a vfork child of its owner).
    pub fn owned_here(&self) -> bool {
        // SAFETY: getpid has no preconditions.
        self.pid.load(Ordering::Relaxed) == unsafe { libc::getpid() }
    }
}

static RUNTIME: spin::Once<Runtime> = spin::Once::new();
/// The configuration read at load in trace mode (XRay sleds are patched there, with its
/// filters), taken over by start-up so every setting is read, and said, once.
static EARLY_CONFIG: spin::Once<Config> = spin::Once::new();
/// The pthread key whose destructor gives a thread's block back, plus one (0: none).
static THREAD_KEY: AtomicU32 = AtomicU32::new(0);
/// Set by the load-time constructor.
static LOADED: AtomicBool = AtomicBool::new(false);
/// Slow-path entries (start-up, new threads, table growth): far fewer than calls, unless the
/// trampolines' hash disagreed with `arcs::hash` (the verbose summary shows it).
static SLOW_PATHS: AtomicU64 = AtomicU64::new(0);
/// Calls lost because a new thread could not get a block (no memory).
static LOST_WITHOUT_BLOCK: AtomicU64 = AtomicU64::new(0);
/// Set once the exit destructor has written the profile.
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

/// The runtime if it has started (a process that never recorded has none).
pub fn started() -> Option<&'static Runtime> {
    RUNTIME.get()
}

guarded_entry! {
    /// The load-time constructor (listed in `.init_array` by asm/data.s).
    #[unsafe(no_mangle)]
    pub fn instrfn_on_load() => on_load
}

extern "C" fn on_load() {
    if LOADED.swap(true, Ordering::Relaxed) {
        return;
    }
    // SAFETY: plain libc registrations with valid function pointers; each handler is a
    // guarded entry. THREAD_KEY is written once here, before any block is claimed (the
    // slow path reads it only after start-up, which cannot finish a claim before this runs:
    // a claim made earlier just has no key and is reclaimed when its thread is gone).
    unsafe {
        let mut key: libc::pthread_key_t = 0;
        if libc::pthread_key_create(&mut key, Some(instrfn_thread_exit_entry)) == 0 {
            THREAD_KEY.store(key as u32 + 1, Ordering::Relaxed);
        }
        libc::pthread_atfork(None, None, Some(instrfn_fork_child_entry));
    }
    process::mark_tree();
    // Trace mode is chosen here, before the program's first call can reach a fast path, so
    // that call is traced too (its files are made by start-up, at that call).
    if arch::TRACE_SUPPORTED
        && !sys::secure_mode()
        && sys::getenv(c"INSTRFN_MODE").is_some_and(|v| v.trim_ascii() == b"trace")
    {
        // (In a static program another constructor may have made a counting call first,
        // which started the runtime and chose the mode, entries only with INSTRFN_EXITS=off:
        // that choice stands.)
        if started().is_none() {
            arch::set_mode(1);
        }
        // XRay sleds have no counting call to start the runtime lazily from: they are patched
        // now (src/xray.rs), and their first call starts it.
        let config = EARLY_CONFIG.call_once(Config::from_env);
        if config.trace {
            crate::xray::on_load(config);
        }
    }
    #[cfg(instrfn_wrapped)]
    crate::interpose::keep_linked();
}

fn start_up() -> Runtime {
    let config = match EARLY_CONFIG.get() {
        Some(c) => c.clone(),
        None => Config::from_env(),
    };
    let exe = Module::executable();
    process::init();
    set_recording(config.start);
    let trace = config.trace && start_tracing(&config);
    if trace {
        // (trace::start chose 2 if return addresses are not to be replaced)
        if arch::mode() == 0 {
            arch::set_mode(1);
        }
        if arch::mode() == 2 {
            crate::xray::exits_off();
        }
    } else {
        arch::set_mode(0);
        crate::xray::disable();
    }
    if exe.count == 0 && !trace {
        message!("cannot find the executable's code segments; gmon.out will hold no data");
    }
    if !trace && config.hz > 0 && sampler::start(config.hz) && config.start {
        sampler::resume();
    }
    if let Some(sig) = config.dump_signal {
        install_dump_signal(sig);
    }
    if config.crash_write {
        crate::crash::install();
    }
    Runtime {
        config,
        exe,
        // SAFETY: getpid has no preconditions.
        pid: AtomicI32::new(unsafe { libc::getpid() }),
        fork_child: AtomicBool::new(false),
    }
}

/// Trace mode (src/trace.rs), if this architecture has its trampolines and the files can be
/// made; otherwise gmon mode, said in one line.
fn start_tracing(config: &Config) -> bool {
    if !arch::TRACE_SUPPORTED {
        message!("INSTRFN_MODE=trace is not available on this architecture yet; writing gmon.out");
        return false;
    }
    crate::collector::configure(config.collector, config.collector_nice);
    crate::trace::configure_filters(config.depth, config.min_duration_ns, config.call_words);
    let depth = if config.depth > 0 {
        config.depth
    } else {
        config.max_depth
    };
    let ok = crate::trace::start(
        config.output(),
        config.bufsize,
        config.trace_limit,
        depth,
        config.exits,
    );
    if !ok {
        arch::set_mode(0);
    }
    ok
}

fn install_dump_signal(sig: c_int) {
    let old = sys::handler_of(sig);
    if old != libc::SIG_DFL && old != libc::SIG_IGN {
        message!(
            "INSTRFN_DUMP_SIGNAL: the program handles signal {sig} itself; not installing the \
             dump handler"
        );
        return;
    }
    if !sys::install_handler(
        sig,
        instrfn_dump_entry as *const () as usize,
        libc::SA_RESTART,
    ) {
        message!(
            "cannot install the handler for signal {sig}: {}",
            sys::Errno(sys::errno())
        );
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
    if ready_block(tls).is_none() {
        return;
    }
    // SAFETY: tls.table is the current table of this thread's block.
    let table = unsafe { &*tls.table };
    if let Insert::Grew(table) = arcs::insert(table, from_pc, self_pc, rt.config.max_arcs) {
        // SAFETY: tls.block is this thread's live block.
        unsafe { (*tls.block).table.store(table, Ordering::Release) };
        tls.table = table;
    }
}

/// This thread's block, claimed on its first call (start-up first), or None if recording is
/// off or no block could be had (counted). Slow path only (guard held, signals blocked).
pub fn ready_block(tls: &mut Tls) -> Option<&'static ThreadBlock> {
    let rt = runtime();
    if !recording() {
        return None;
    }
    if tls.block.is_null() {
        let block = thread::claim_block(rt.config.max_arcs);
        if block.is_null() {
            LOST_WITHOUT_BLOCK.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // SAFETY: claim_block returned a live block owned by this thread.
        tls.table = unsafe { (*block).table.load(Ordering::Relaxed) };
        tls.block = block;
        register_thread_exit(block);
        // SAFETY: the live block just claimed.
        crate::trace::thread_started(tls, unsafe { &*block });
    }
    // SAFETY: this thread's live block.
    Some(unsafe { &*tls.block })
}

/// Asks for the thread-exit destructor, when that is async-signal-safe: always on musl (its
/// pthread_setspecific never allocates); on glibc for keys below 32, which live in the thread
/// descriptor (from 32 on, glibc may calloc a second-level array). Otherwise the block is
/// reclaimed once the thread is gone (src/thread.rs).
fn register_thread_exit(block: *mut ThreadBlock) {
    let key = THREAD_KEY.load(Ordering::Relaxed);
    let safe = key != 0 && (cfg!(not(target_env = "gnu")) || key - 1 < 32);
    if !safe {
        thread::exit_unreported();
        return;
    }
    // SAFETY: the key was created by the constructor; the value is only read by our
    // destructor.
    if unsafe { libc::pthread_setspecific(key as libc::pthread_key_t - 1, block.cast()) } != 0 {
        thread::exit_unreported();
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
        // SAFETY: this thread's live block.
        crate::trace::thread_ended(tls, unsafe { &*block });
        tls.table = core::ptr::null_mut();
        tls.block = core::ptr::null_mut();
    }
    thread::release_block(block);
}

guarded_entry! {
    fn instrfn_fork_child_entry() => fork_child
}

/// In the child after fork: only the forking thread exists, with a copy of the parent's state.
/// A writer that was running on another thread never finishes here: its lock is released.
/// Counts start from zero; the child writes a profile of its own (src/process.rs names it).
extern "C" fn fork_child() {
    gmon::reset_after_fork();
    let Some(rt) = started() else {
        return;
    };
    // SAFETY: getpid has no preconditions.
    rt.pid.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    rt.fork_child.store(true, Ordering::Relaxed);
    EXIT_WRITTEN.store(false, Ordering::Relaxed);
    // SAFETY: this thread's TLS block.
    let current = unsafe { (*arch::tls()).block };
    thread::reset_after_fork(current);
    LOST_WITHOUT_BLOCK.store(0, Ordering::Relaxed);
    sampler::reset_after_fork(current);
    crate::trace::after_fork(rt.config.output());
}

guarded_entry! {
    /// The exit destructor (listed in `.fini_array` by asm/data.s).
    #[unsafe(no_mangle)]
    pub fn instrfn_on_exit() => at_exit
}

extern "C" fn at_exit() {
    let Some(rt) = started() else {
        return;
    };
    if rt.owned_here() && !EXIT_WRITTEN.swap(true, Ordering::Relaxed) {
        if crate::trace::active() {
            crate::trace::finish();
        } else {
            gmon::write(rt, false);
        }
    }
}

guarded_entry! {
    /// Handler of INSTRFN_DUMP_SIGNAL: writes gmon.out now.
    fn instrfn_dump_entry(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void)
        => on_dump_signal
}

extern "C" fn on_dump_signal(_sig: c_int, _info: *mut libc::siginfo_t, _uc: *mut c_void) {
    if let Some(rt) = started()
        && rt.owned_here()
    {
        gmon::write(rt, false);
    }
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
    crate::xray::recording(true);
    set_recording(true);
    sampler::resume();
}

extern "C" fn api_stop() {
    runtime();
    set_recording(false);
    // The XRay sleds go back to nops (the trampolines return at once meanwhile), unless
    // INSTRFN_XRAY_STOP=pause: then they stay patched.
    crate::xray::recording(false);
    sampler::pause();
}

/// Before this image is replaced by exec (src/interpose.c): writes the profile (unless this
/// is a fork child that recorded nothing, as in fork + exec), stops the sampling timers and
/// takes any SIGPROF still pending, and fills `marker` with the INSTRFN_TREE entry for the
/// next image. Nothing but the marker in a vfork child or a process that never recorded.
extern "C" fn exec_prepare(marker: *mut u8, len: usize) {
    let mut m = StackBuf::<64>::new();
    let mut wrote = false;
    if let Some(rt) = started()
        && rt.owned_here()
    {
        let nothing = rt.fork_child.load(Ordering::Relaxed) && api_calls_recorded() == 0;
        if crate::trace::active() {
            crate::trace::finish();
            wrote = true;
        } else if !nothing {
            wrote = gmon::write(rt, false) == 0;
        }
        let was_running = sampler::running();
        sampler::pause();
        EXEC_RESUME.store(was_running, Ordering::Relaxed);
        drain_sigprof();
        process::exec_marker(wrote, &mut m);
    } else {
        process::spawn_marker(&mut m);
    }
    copy_marker(&mut m, marker, len);
}

/// Whether the sampling timers ran before an exec that may fail.
static EXEC_RESUME: AtomicBool = AtomicBool::new(false);

/// The exec failed: profiling goes on as before.
extern "C" fn exec_failed() {
    if let Some(rt) = started()
        && rt.owned_here()
        && EXEC_RESUME.swap(false, Ordering::Relaxed)
    {
        sampler::resume();
    }
}

/// The INSTRFN_TREE entry for a child started by posix_spawn (src/interpose.c).
extern "C" fn spawn_marker(marker: *mut u8, len: usize) {
    let mut m = StackBuf::<64>::new();
    process::spawn_marker(&mut m);
    copy_marker(&mut m, marker, len);
}

fn copy_marker(m: &mut StackBuf<64>, out: *mut u8, len: usize) {
    let bytes = m.as_cstr().map_or(&b"\0"[..], |c| c.to_bytes_with_nul());
    if len >= bytes.len() {
        // SAFETY: the caller's buffer holds len >= bytes.len() bytes.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), out, bytes.len()) };
    } else if len > 0 {
        // SAFETY: len > 0 bytes are writable.
        unsafe { *out = 0 };
    }
}

/// Takes a SIGPROF that is pending for this thread (the program may block it), so none is
/// left for an image that does not handle it. Raw system calls.
fn drain_sigprof() {
    // SAFETY: rt_sigpending/rt_sigtimedwait with valid sets, a zero timeout and no info.
    unsafe {
        let mut pending: u64 = 0;
        libc::syscall(
            libc::SYS_rt_sigpending,
            &mut pending as *mut u64,
            8 as libc::c_long,
        );
        let bit = 1u64 << (libc::SIGPROF - 1);
        if pending & bit != 0 {
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            libc::syscall(
                libc::SYS_rt_sigtimedwait,
                &bit as *const u64,
                core::ptr::null_mut::<libc::siginfo_t>(),
                &zero as *const libc::timespec,
                8 as libc::c_long,
            );
        }
    }
}

guarded_entry! {
    /// Called by the exec wrappers (src/interpose.c) before the real exec.
    #[unsafe(no_mangle)]
    pub fn instrfn_exec_prepare(marker: *mut u8, len: usize) => exec_prepare
}
guarded_entry! {
    /// Called by the exec wrappers when the real exec returned (it failed).
    #[unsafe(no_mangle)]
    pub fn instrfn_exec_failed() => exec_failed
}
/// What the dlclose wrapper keeps between its two calls (src/interpose.c): the module as it
/// was before the real dlclose. The C side provides [`MODULE_STATE_BYTES`] bytes.
#[repr(C)]
struct Closing {
    valid: bool,
    module: Module,
}

/// Bytes of the state buffer src/interpose.c passes to the dlclose hooks.
pub const MODULE_STATE_BYTES: usize = 1024;
const _: () = assert!(core::mem::size_of::<Closing>() <= MODULE_STATE_BYTES);

/// Before dlclose of the object loaded at `bias` from `path`: remembers where its code is.
extern "C" fn module_closing(bias: usize, path: *const core::ffi::c_char, state: *mut c_void) {
    let state = state.cast::<Closing>();
    let found = match started() {
        // SAFETY: path is the loader's NUL-terminated name of the object (dlinfo).
        Some(rt) if rt.owned_here() && !path.is_null() => crate::modules::find_shared_object(
            bias,
            unsafe { core::ffi::CStr::from_ptr(path) }.to_bytes(),
        ),
        _ => None,
    };
    if found.is_some() {
        if crate::trace::active() {
            crate::trace::note_modules();
        } else {
            gmon::prepare_unload();
        }
    }
    // SAFETY: the caller's buffer holds MODULE_STATE_BYTES bytes, 8-aligned (src/interpose.c).
    unsafe {
        core::ptr::addr_of_mut!((*state).valid).write(found.is_some());
        if let Some(m) = found {
            core::ptr::addr_of_mut!((*state).module).write(m);
        }
    }
}

/// After the real dlclose: if the object is gone, writes its profile and keeps its counts
/// apart (src/retired.rs).
extern "C" fn module_closed(state: *mut c_void) {
    // SAFETY: filled by module_closing on this thread.
    let state = unsafe { &*state.cast::<Closing>() };
    if !state.valid {
        return;
    }
    let m = &state.module;
    if let Some(rt) = started()
        && crate::modules::find_shared_object(m.bias, m.path()).is_none()
    {
        let lo = m.segments().iter().map(|s| s.start).min().unwrap_or(0);
        let hi = m.segments().iter().map(|s| s.end).max().unwrap_or(0);
        arch::forget_sites(lo, hi);
        if crate::trace::active() {
            crate::trace::module_unloaded(m);
        } else {
            gmon::write_unloaded(rt, m);
        }
    }
}

guarded_entry! {
    /// Called by the dlclose wrapper before the real dlclose.
    #[unsafe(no_mangle)]
    pub fn instrfn_module_closing(bias: usize, path: *const core::ffi::c_char, state: *mut c_void)
        => module_closing
}
guarded_entry! {
    /// Called by the dlclose wrapper after the real dlclose.
    #[unsafe(no_mangle)]
    pub fn instrfn_module_closed(state: *mut c_void) => module_closed
}

/// Asked by the dlopen route (src/interpose.c) before the real call: whether the objects a
/// dlopen loads are to be noted at once. In trace mode (chosen at load, or started since):
/// their XRay sleds must be patched before the caller can call them, and their `module` lines
/// are best written while the process is sure to be alive. Gmon mode needs nothing: a
/// library's arcs are kept by address and its profile is found when it is written (or at
/// dlclose).
extern "C" fn dlopen_wanted() -> c_int {
    (arch::mode() != 0) as c_int
}

/// After a real dlopen (or dlmopen into the base namespace) that succeeded: the objects it
/// loaded are noted (src/trace.rs `note_opened`). Their constructors have already run.
extern "C" fn module_opened() {
    if arch::mode() == 0 || started().is_some_and(|rt| !rt.owned_here()) {
        return;
    }
    crate::trace::note_opened();
}

guarded_entry! {
    /// Called by the dlopen route before the real dlopen: 1 if the wrapper is to note what it
    /// loads.
    #[unsafe(no_mangle)]
    pub fn instrfn_dlopen_wanted() -> c_int => dlopen_wanted
}
guarded_entry! {
    /// Called by the dlopen wrapper after a real dlopen that succeeded.
    #[unsafe(no_mangle)]
    pub fn instrfn_module_opened() => module_opened
}

guarded_entry! {
    /// Called by the unshare and setns wrappers (src/interpose.c) when the real call failed
    /// for a process of more than one thread: ends the collector thread, if there is one;
    /// 1 if it is gone (the call is then made again).
    #[unsafe(no_mangle)]
    pub fn instrfn_collector_pause() -> c_int => collector_pause
}
guarded_entry! {
    /// After the call that [`instrfn_collector_pause`] made way for: the collector again.
    #[unsafe(no_mangle)]
    pub fn instrfn_collector_resume() => collector_resume
}

guarded_entry! {
    /// Called by the exec and posix_spawn wrappers (src/interpose.c): in trace mode, writes
    /// `INSTRFN_OUTPUT=<the trace directory, absolute>` and a NUL into `out` (`len` bytes) and
    /// returns 1, so that a child started after a `chdir` records into the same directory;
    /// else 0.
    #[unsafe(no_mangle)]
    pub fn instrfn_output_entry(out: *mut u8, len: usize) -> c_int => output_entry
}

extern "C" fn output_entry(out: *mut u8, len: usize) -> c_int {
    let Some(config) = EARLY_CONFIG.get().filter(|c| c.trace) else {
        return 0;
    };
    // SAFETY: the C side passes a buffer of `len` bytes.
    let out = unsafe { core::slice::from_raw_parts_mut(out, len) };
    config.output_entry(out) as c_int
}

extern "C" fn collector_pause() -> c_int {
    crate::collector::pause() as c_int
}

extern "C" fn collector_resume() {
    crate::collector::resume();
}

guarded_entry! {
    /// Called by the posix_spawn wrappers for the INSTRFN_TREE entry of the child.
    #[unsafe(no_mangle)]
    pub fn instrfn_spawn_marker(marker: *mut u8, len: usize) => spawn_marker
}

extern "C" fn api_write() -> c_int {
    gmon::write(runtime(), false)
}

extern "C" fn api_flush() -> c_int {
    let rt = runtime();
    if crate::trace::active() {
        crate::trace::flush()
    } else {
        gmon::write(rt, false)
    }
}

extern "C" fn call_guarded(f: extern "C" fn(*mut c_void), arg: *mut c_void) {
    f(arg)
}
