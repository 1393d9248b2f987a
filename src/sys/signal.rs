//! Signal handlers and the per-thread CPU timers that raise SIGPROF.

use core::ffi::c_int;
use core::ptr;

use super::raw::syscall;

#[cfg(instrfn_wrapped)]
unsafe extern "C" {
    /// libc's own sigaction (src/runtime/interpose.c wraps the exported name), or null before that
    /// file's constructor has run.
    static instrfn_real_sigaction:
        Option<unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int>;
}

/// libc's sigaction, past instrfn's own wrapper of it (which hides instrfn's crash handlers
/// from the program). Returns whether it succeeded.
pub fn sigaction(
    sig: c_int,
    act: Option<&libc::sigaction>,
    old: Option<&mut libc::sigaction>,
) -> bool {
    let act = act.map_or(ptr::null(), |a| a as *const libc::sigaction);
    let old = old.map_or(ptr::null_mut(), |o| o as *mut libc::sigaction);
    #[cfg(instrfn_wrapped)]
    // SAFETY: reads a pointer the C constructor wrote before any runtime code ran.
    if let Some(real) = unsafe { instrfn_real_sigaction } {
        // SAFETY: valid (or null) action pointers for libc's sigaction.
        return unsafe { real(sig, act, old) } == 0;
    }
    // SAFETY: valid (or null) action pointers.
    unsafe { libc::sigaction(sig, act, old) == 0 }
}

/// The handler address installed for `sig` (SIG_DFL, SIG_IGN or a function).
pub fn handler_of(sig: c_int) -> usize {
    // SAFETY: all-zero is a valid sigaction to be filled.
    let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
    sigaction(sig, None, Some(&mut old));
    old.sa_sigaction
}

/// Installs `handler` (an SA_SIGINFO function) for `sig` with every signal masked while it
/// runs, and `flags` added.
pub fn install_handler(sig: c_int, handler: usize, flags: c_int) -> bool {
    // SAFETY: all-zero is a valid sigaction; sigfillset fills its mask.
    let mut act: libc::sigaction = unsafe { core::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = libc::SA_SIGINFO | flags;
    // SAFETY: act.sa_mask is a valid sigset.
    unsafe { libc::sigfillset(&mut act.sa_mask) };
    sigaction(sig, Some(&act), None)
}

/// The clock of the calling thread's user CPU time: the kernel's
/// MAKE_THREAD_CPUCLOCK(0, CPUCLOCK_VIRT) = (~0 << 3) | CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_VIRT.
const THREAD_USER_CLOCK: libc::clockid_t = (!0 << 3) | 4 | 1;
const SIGEV_THREAD_ID: c_int = 4;

/// The kernel's `struct sigevent` for SIGEV_THREAD_ID (64 bytes, the tid at offset 16).
#[repr(C)]
struct KernelSigevent {
    value: u64,
    signo: c_int,
    notify: c_int,
    tid: c_int,
    _pad: [c_int; 11],
}

/// A timer on thread `tid`'s user CPU time that sends it `signo` (disarmed), or None.
pub fn thread_cpu_timer(signo: c_int, tid: u32) -> Option<c_int> {
    let ev = KernelSigevent {
        value: 0,
        signo,
        notify: SIGEV_THREAD_ID,
        tid: tid as c_int,
        _pad: [0; 11],
    };
    let mut id: c_int = -1;
    // SAFETY: valid sigevent and out-pointer for the kernel's timer_create.
    let r = unsafe {
        syscall(
            libc::SYS_timer_create,
            [
                THREAD_USER_CLOCK as usize,
                &ev as *const KernelSigevent as usize,
                &mut id as *mut c_int as usize,
                0,
                0,
                0,
            ],
        )
    };
    (r == 0).then_some(id)
}

/// Arms timer `id` to expire every `interval_ns` (0 disarms it).
pub fn arm_timer(id: c_int, interval_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (interval_ns / 1_000_000_000) as _,
        tv_nsec: (interval_ns % 1_000_000_000) as _,
    };
    let its = libc::itimerspec {
        it_interval: ts,
        it_value: ts,
    };
    // SAFETY: a valid itimerspec for a timer of this process; no old value requested.
    unsafe {
        syscall(
            libc::SYS_timer_settime,
            [
                id as usize,
                0,
                &its as *const libc::itimerspec as usize,
                0,
                0,
                0,
            ],
        )
    };
}

/// Deletes timer `id`.
pub fn delete_timer(id: c_int) {
    // SAFETY: deletes a timer this process made.
    unsafe { syscall(libc::SYS_timer_delete, [id as usize, 0, 0, 0, 0, 0]) };
}
