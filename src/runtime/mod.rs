//! The runtime on top: its lifecycle, the public C API, glibc's gmon entry points, the hooks
//! the libc wrappers call (src/runtime/interpose.c), crashes, and the slow-path entries the
//! assembly calls. Uses every layer; nothing uses it but the crate root.
//!
//! Every way into the runtime from outside is a `guarded_entry!` (a naked shim that holds this
//! thread's guard before any Rust code runs), or a slow path, which the trampolines enter with
//! the guard held. So when instrfn itself is compiled with `-Zinstrument-mcount`, its own
//! counting calls return at once instead of recursing.
//!
//! Two phases:
//! - On load, an `.init_array` constructor (src/abi/data.s) does what needs libc's locks or the
//!   allocator, while that is safe (before `main`, one thread, never in a signal handler):
//!   the thread-exit key, the fork handlers, the process-tree marker. Nothing observable: no
//!   timer, no file, no output.
//! - Start-up is lazy and happens once, on whichever comes first: gcrt's `__monstartup` (run
//!   from `_init`), the first counting call, or an API call. It may run inside a signal
//!   handler (the program's first counting call can be there), so it is async-signal-safe: it
//!   reads the environment, installs signal handlers, maps memory, makes no lock-taking libc
//!   call. A process that never makes a counting call (a shell that inherited `LD_PRELOAD`)
//!   stays inert: no timer, no file.
//!
//! The profile is written at exit by an `.fini_array` destructor, which runs after the
//! program's `atexit` handlers (so their calls count too), and never twice.

pub mod api;
pub mod crash;
pub mod hooks;
#[cfg(instrfn_wrapped)]
pub mod interpose;
pub mod slow;

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

use crate::abi::{self, Mode, Tls};
use crate::config::Config;
use crate::sys::objects::Module;
use crate::thread::{self, ThreadBlock};
use crate::{output, process, sys};

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
        self.pid.load(Ordering::Relaxed) == sys::getpid()
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
/// Set once the exit destructor has written the profile.
static EXIT_WRITTEN: AtomicBool = AtomicBool::new(false);

/// The runtime, started on first use. Must run with the guard held.
fn runtime() -> &'static Runtime {
    RUNTIME.call_once(start_up)
}

/// The runtime if it has started (a process that never recorded has none).
pub fn started() -> Option<&'static Runtime> {
    RUNTIME.get()
}

guarded_entry! {
    /// The load-time constructor (listed in `.init_array` by src/abi/data.s).
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
    if crate::arch::TRACE_SUPPORTED
        && !sys::secure_mode()
        && sys::getenv(c"INSTRFN_MODE")
            .is_some_and(|v| matches!(v.trim_ascii(), b"trace" | b"ring"))
    {
        // (In a static program another constructor may have made a counting call first,
        // which started the runtime and chose the mode, entries only with INSTRFN_EXITS=off:
        // that choice stands.)
        if started().is_none() {
            abi::set_mode(Mode::Trace);
        }
        let config = EARLY_CONFIG.call_once(Config::from_env);
        output::on_load(config);
    }
    #[cfg(instrfn_wrapped)]
    interpose::keep_linked();
}

fn start_up() -> Runtime {
    let config = match EARLY_CONFIG.get() {
        Some(c) => c.clone(),
        None => Config::from_env(),
    };
    let exe = Module::executable();
    process::init();
    abi::set_recording(config.start);
    let mode = output::start(&config);
    if exe.count == 0 && !mode.traces() {
        message!("cannot find the executable's code segments; gmon.out will hold no data");
    }
    output::start_sampling(&config);
    if let Some(sig) = config.dump_signal {
        api::install_dump_signal(sig);
    }
    if let Some(sig) = config.snapshot_signal
        && config.ring > 0
    {
        api::install_snapshot_signal(sig);
    }
    if config.crash_write {
        crash::install();
    }
    Runtime {
        config,
        exe,
        pid: AtomicI32::new(sys::getpid()),
        fork_child: AtomicBool::new(false),
    }
}

/// This thread's block, claimed on its first call (start-up first), or None if recording is
/// off or no block could be had (counted). Slow path only (guard held, signals blocked).
pub fn ready_block(tls: &mut Tls) -> Option<&'static ThreadBlock> {
    let rt = runtime();
    if !abi::recording() {
        return None;
    }
    if tls.block.is_null() {
        let block = thread::claim_block(rt.config.max_arcs);
        if block.is_null() {
            thread::count_lost_without_block();
            return None;
        }
        // SAFETY: claim_block returned a live block owned by this thread.
        let block = unsafe { &*block };
        tls.table = block.table.load(Ordering::Relaxed);
        tls.block = core::ptr::from_ref(block).cast_mut().cast();
        register_thread_exit(block);
        crash::thread_started(block);
        output::thread_started(tls, block);
    }
    thread::block_of(tls)
}

/// Asks for the thread-exit destructor, when that is async-signal-safe: always on musl (its
/// pthread_setspecific never allocates); on glibc for keys below 32, which live in the thread
/// descriptor (from 32 on, glibc may calloc a second-level array). Otherwise the block is
/// reclaimed once the thread is gone (crate::thread).
fn register_thread_exit(block: &ThreadBlock) {
    let key = THREAD_KEY.load(Ordering::Relaxed);
    let safe = key != 0 && (cfg!(not(target_env = "gnu")) || key - 1 < 32);
    if !safe {
        thread::exit_unreported();
        return;
    }
    let value = core::ptr::from_ref(block).cast::<c_void>();
    // SAFETY: the key was created by the constructor; the value is only read by our
    // destructor.
    if unsafe { libc::pthread_setspecific(key as libc::pthread_key_t - 1, value) } != 0 {
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
    let tls = unsafe { &mut *abi::tls() };
    if tls.block == block.cast() {
        // SAFETY: this thread's live block.
        output::thread_ended(tls, unsafe { &*block });
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
/// Counts start from zero; the child writes a profile of its own (crate::process names it).
extern "C" fn fork_child() {
    output::reset_writer_after_fork();
    let Some(rt) = started() else {
        return;
    };
    rt.pid.store(sys::getpid(), Ordering::Relaxed);
    rt.fork_child.store(true, Ordering::Relaxed);
    EXIT_WRITTEN.store(false, Ordering::Relaxed);
    // SAFETY: this thread's TLS block.
    let current = unsafe { (*abi::tls()).block }.cast::<ThreadBlock>();
    thread::reset_after_fork(current);
    output::after_fork(&rt.config, current);
}

guarded_entry! {
    /// The exit destructor (listed in `.fini_array` by src/abi/data.s).
    #[unsafe(no_mangle)]
    pub fn instrfn_on_exit() => at_exit
}

extern "C" fn at_exit() {
    let Some(rt) = started() else {
        return;
    };
    if rt.owned_here() && !EXIT_WRITTEN.swap(true, Ordering::Relaxed) {
        output::finish(&rt.config, &rt.exe);
    }
}
