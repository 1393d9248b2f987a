//! Crashes keep the profile. On SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT (abort, a Rust
//! panic with panic=abort), the profile is written, then the process ends exactly as it would
//! have: the default action is put back and, for a fault the kernel raised, the faulting
//! instruction runs again (a real core dump); a signal sent by a program (raise, kill, abort)
//! is sent again. Only signals still at their default action when instrfn starts are taken,
//! so a program's own handlers keep their behaviour; one it installs later replaces
//! instrfn's.
//!
//! Rust's std installs its stack-overflow handler only if SIGSEGV is at its default when
//! `main` starts, which may be after instrfn started (rustc instantiates `lang_start` in the
//! program, instrumented). So on glibc, instrfn wraps `sigaction` (interpose.c): while its
//! handler is installed, the program is shown SIG_DFL for that signal, and a program that sets
//! its own handler replaces instrfn's. On musl there is no wrapper (the program links libc
//! statically), so SIGSEGV and SIGBUS are left to the program there.
//!
//! The handler runs on an alternate signal stack (so a stack overflow is caught too): each
//! thread that records gets one unless it has its own. It holds the guard and blocks every
//! signal; a crash inside the writer (the writer lock held by this very thread) or a writer
//! that does not finish within two seconds on another thread is given up: the process still
//! ends as it would have. `INSTRFN_CRASH_WRITE=off` turns all of this off.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};

use super::started;
use crate::thread::ThreadBlock;
use crate::{output, sys};

/// The signals taken, in this order (the bit of each in [`TAKEN`]).
#[cfg(instrfn_wrapped)]
const SIGNALS: [c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];
#[cfg(not(instrfn_wrapped))]
const SIGNALS: [c_int; 3] = [libc::SIGILL, libc::SIGFPE, libc::SIGABRT];

/// Bit i set while instrfn's handler is installed for `SIGNALS[i]`.
static TAKEN: AtomicU32 = AtomicU32::new(0);
/// Set by the first crash that wrote (or tried to write) the profile.
static WRITTEN: AtomicBool = AtomicBool::new(false);
/// Bytes of a thread's alternate signal stack.
const ALT_STACK_BYTES: usize = 64 * 1024;
/// The stack the profile is written on after a crash (one: only the first crash writes). A
/// signal may arrive on a small stack: a program's alternate one (Rust's std aborts from its
/// stack-overflow handler, on its own alternate stack), or what is left of an overflowed one.
const CRASH_STACK_BYTES: usize = 512 * 1024;
static CRASH_STACK: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());

unsafe extern "C" {
    /// src/arch/<arch>/guarded.s: calls `f(arg)` with the stack pointer at `top`.
    fn instrfn_call_on_stack(f: extern "C" fn(*mut c_void), arg: *mut c_void, top: *mut u8);
}

fn index(sig: c_int) -> Option<usize> {
    SIGNALS.iter().position(|&s| s == sig)
}

/// Installs the handlers (start-up; async-signal-safe).
pub fn install() {
    let Some(stack) = sys::map_zeroed(CRASH_STACK_BYTES) else {
        message!("cannot map a stack for writing after a crash; crashes will not write");
        return;
    };
    CRASH_STACK.store(stack.as_ptr(), Ordering::Release);
    for (i, &sig) in SIGNALS.iter().enumerate() {
        if sys::handler_of(sig) != libc::SIG_DFL {
            continue;
        }
        // Faults from a stack overflow need the alternate stack; the others run where they
        // are raised (a program's small alternate stack is not for the writer).
        let onstack = if matches!(sig, libc::SIGSEGV | libc::SIGBUS) {
            libc::SA_ONSTACK
        } else {
            0
        };
        TAKEN.fetch_or(1 << i, Ordering::Relaxed);
        if !sys::install_handler(sig, instrfn_crash_entry as *const () as usize, onstack) {
            TAKEN.fetch_and(!(1 << i), Ordering::Relaxed);
        }
    }
}

/// A thread has claimed `block`: it gets an alternate signal stack for the fault handlers
/// (mapped with the block the first time, and handed on with it).
pub fn thread_started(block: &ThreadBlock) {
    if !wants_alt_stack() {
        return;
    }
    let mut stack = block.altstack.load(Ordering::Relaxed);
    if stack.is_null()
        && let Some(mem) = sys::map_zeroed(ALT_STACK_BYTES)
    {
        stack = mem.as_ptr();
        block.altstack.store(stack, Ordering::Relaxed);
    }
    if !stack.is_null() {
        use_alt_stack(stack);
    }
}

/// Whether any fault handler needs a per-thread alternate stack.
fn wants_alt_stack() -> bool {
    TAKEN.load(Ordering::Relaxed) & 0b11 != 0 && cfg!(instrfn_wrapped)
}

/// Gives the calling thread `stack` (ALT_STACK_BYTES) as its alternate signal stack, unless
/// it has one of its own. Raw system call.
fn use_alt_stack(stack: *mut u8) {
    // SAFETY: all-zero is a valid stack_t to fill; sigaltstack only reads/writes them.
    unsafe {
        let mut old: libc::stack_t = core::mem::zeroed();
        if libc::sigaltstack(core::ptr::null(), &mut old) != 0
            || old.ss_flags & libc::SS_DISABLE == 0
        {
            return;
        }
        let new = libc::stack_t {
            ss_sp: stack.cast(),
            ss_flags: 0,
            ss_size: ALT_STACK_BYTES,
        };
        libc::sigaltstack(&new, core::ptr::null_mut());
    }
}

guarded_entry! {
    /// The crash handler (SA_SIGINFO).
    fn instrfn_crash_entry(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) => on_crash
}

extern "C" fn on_crash(sig: c_int, info: *mut libc::siginfo_t, _uc: *mut c_void) {
    let stack = CRASH_STACK.load(Ordering::Acquire);
    if !WRITTEN.swap(true, Ordering::AcqRel)
        && !stack.is_null()
        && let Some(rt) = started()
        && rt.owned_here()
    {
        extern "C" fn write(rt: *mut c_void) {
            // SAFETY: the runtime passed below, which lives for the whole process.
            let rt = unsafe { &*rt.cast::<super::Runtime>() };
            output::write_on_crash(&rt.config, &rt.exe);
        }
        // SAFETY: the crash stack is CRASH_STACK_BYTES of mapped memory nobody else uses (only
        // the first crash gets here); its top is passed.
        unsafe {
            instrfn_call_on_stack(
                write,
                core::ptr::from_ref(rt).cast_mut().cast(),
                stack.add(CRASH_STACK_BYTES),
            )
        };
    }
    // End as without instrfn: the default action back, and the signal again.
    if let Some(i) = index(sig) {
        TAKEN.fetch_and(!(1 << i), Ordering::Relaxed);
    }
    // SAFETY: all-zero with SIG_DFL is the default action.
    let mut dfl: libc::sigaction = unsafe { core::mem::zeroed() };
    dfl.sa_sigaction = libc::SIG_DFL;
    sys::sigaction(sig, Some(&dfl), None);
    // SAFETY: info is the kernel's siginfo for this handler.
    let code = unsafe { (*info).si_code };
    if code <= 0 {
        // Sent by a program (kill, raise, abort): send it again; it is blocked while this
        // handler runs and arrives, to the default action, when the handler returns. A fault
        // the kernel raised (code > 0) repeats by itself when the instruction runs again.
        // SAFETY: tgkill to this very thread.
        unsafe {
            libc::syscall(
                libc::SYS_tgkill,
                libc::getpid() as libc::c_long,
                sys::gettid() as libc::c_long,
                sig as libc::c_long,
            )
        };
    }
}

/// For the sigaction wrapper: whether instrfn's handler for `sig` is installed, and if so the
/// action to show the program instead (SIG_DFL: only signals at their default are taken).
extern "C" fn crash_hidden(sig: c_int, shown: *mut libc::sigaction) -> c_int {
    let Some(i) = index(sig) else {
        return 0;
    };
    if TAKEN.load(Ordering::Relaxed) & (1 << i) == 0 {
        return 0;
    }
    // SAFETY: the wrapper's buffer; SIG_DFL with an empty mask and no flags.
    unsafe {
        shown.write(core::mem::zeroed());
        (*shown).sa_sigaction = libc::SIG_DFL;
    }
    1
}

/// For the sigaction wrapper: the program installed its own action for `sig`.
extern "C" fn crash_yield(sig: c_int) {
    if let Some(i) = index(sig) {
        TAKEN.fetch_and(!(1 << i), Ordering::Relaxed);
    }
}

guarded_entry! {
    /// Called by the sigaction wrapper (interpose.c).
    #[unsafe(no_mangle)]
    pub fn instrfn_crash_hidden(sig: c_int, shown: *mut libc::sigaction) -> c_int => crash_hidden
}
guarded_entry! {
    /// Called by the sigaction wrapper when the program sets an action instrfn had taken.
    #[unsafe(no_mangle)]
    pub fn instrfn_crash_yield(sig: c_int) => crash_yield
}
