//! The pc histogram. Every thread that records samples its own user CPU time: a POSIX CPU timer
//! on the thread's user-time clock, delivering SIGPROF to that very thread
//! (`SIGEV_THREAD_ID`), every 1/INSTRFN_HZ s. The handler adds the expirations the signal
//! stands for (1 + `si_overrun`: the kernel checks CPU timers once per tick, so at 1000 Hz one
//! signal per 4 ms tick carries 4) to the interrupted pc's count in the thread's own pc table.
//! So the histogram is written at exactly INSTRFN_HZ, and gprof's seconds are the user CPU
//! time of the threads that recorded.
//!
//! Why not ITIMER_PROF, as glibc: it survives `execve` while the handler does not, so a timer
//! left running kills the new image ("Profiling timer expired"); POSIX timers are deleted by
//! exec. A user-time clock only expires on a tick that interrupts user code, so the signal is
//! never raised during a system call: it interrupts no `poll`, `nanosleep` or `read`, and
//! none is pending when a thread calls `execve`. A per-thread timer never wakes a sleeping
//! thread, and leaves threads that never call an instrumented function alone.
//!
//! The pc tables (crate::tables::pcs) are per thread and keyed by pc, so the writer can bin
//! samples for any module (the executable, shared libraries) at write time.
//!
//! Coexistence: if the program already has a SIGPROF handler or a running ITIMER_PROF when
//! instrfn starts, instrfn steps aside (no histogram) and says so. If the program installs its
//! own handler later, the histogram stops there; the writer notices, says so and stops the
//! timers.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use crate::tables::pcs;
use crate::{abi, arch, sys, thread};

/// Whether sampling was set up (handler installed).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Whether the timers run (recording on).
static RUNNING: AtomicBool = AtomicBool::new(false);
/// Set when the writer found our handler replaced: the timers stay off.
static EVICTED: AtomicBool = AtomicBool::new(false);
/// Timer period, nanoseconds.
static INTERVAL_NS: AtomicU64 = AtomicU64::new(0);
/// The rate written to gmon.out.
static HZ: AtomicU64 = AtomicU64::new(0);
/// Samples (weights) taken by a thread that could not map a pc table.
static LOST_NO_TABLE: AtomicU64 = AtomicU64::new(0);

guarded_entry! {
    /// SIGPROF handler (SA_SIGINFO). Runs the Rust handler with the guard held.
    fn instrfn_sigprof_entry(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void)
        => on_sigprof
}

/// Offset of `si_overrun` in a 64-bit Linux siginfo: si_signo, si_errno, si_code, padding,
/// then the timer member of the union: si_tid (int), si_overrun (int).
const SI_OVERRUN_OFFSET: usize = 20;

extern "C" fn on_sigprof(_sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    if !abi::recording() {
        return;
    }
    // SAFETY: info is the kernel's siginfo of an SA_SIGINFO handler.
    let (code, overrun) = unsafe {
        (
            (*info).si_code,
            *info.cast::<u8>().add(SI_OVERRUN_OFFSET).cast::<c_int>(),
        )
    };
    // 1 + overruns for our timer's signals; 1 for a SIGPROF sent by other means (kill).
    let weight = if code == libc::SI_TIMER {
        1 + overrun.max(0) as u64
    } else {
        1
    };
    // SAFETY: uc is the third argument of an SA_SIGINFO handler.
    let pc = unsafe { arch::interrupted_pc(uc) };
    // SAFETY: this thread's TLS block.
    let Some(block) = thread::block_of(unsafe { &*abi::tls() }) else {
        LOST_NO_TABLE.fetch_add(weight, Ordering::Relaxed);
        return;
    };
    if !pcs::add_sample(&block.samples, pc, weight) {
        LOST_NO_TABLE.fetch_add(weight, Ordering::Relaxed);
    }
}

/// Installs the handler and sets the rate. Returns false (after saying why) when the program
/// owns SIGPROF or ITIMER_PROF already. Timers are made per thread ([`thread_started`]).
pub fn start(hz: u32) -> bool {
    if hz == 0 {
        return false;
    }
    let old_action = sys::handler_of(libc::SIGPROF);
    // SAFETY: a query only (all-zero is a valid itimerval to fill).
    let old_timer = unsafe {
        let mut it: libc::itimerval = core::mem::zeroed();
        libc::getitimer(libc::ITIMER_PROF, &mut it);
        it
    };
    if old_action != libc::SIG_DFL && old_action != libc::SIG_IGN {
        message!("the program has its own SIGPROF handler; gmon.out will have no pc histogram");
        return false;
    }
    if old_timer.it_value.tv_sec != 0 || old_timer.it_value.tv_usec != 0 {
        message!("the program runs its own ITIMER_PROF; gmon.out will have no pc histogram");
        return false;
    }
    let entry = instrfn_sigprof_entry as *const () as usize;
    if !sys::install_handler(libc::SIGPROF, entry, libc::SA_RESTART) {
        message!(
            "cannot install the SIGPROF handler: {}",
            sys::Errno(sys::errno())
        );
        return false;
    }
    INTERVAL_NS.store(1_000_000_000 / hz as u64, Ordering::Relaxed);
    HZ.store(hz as u64, Ordering::Relaxed);
    ACTIVE.store(true, Ordering::Release);
    true
}

/// The sampling rate written to gmon.out, when sampling.
pub fn hz() -> Option<u32> {
    active().then(|| HZ.load(Ordering::Relaxed) as u32)
}

/// Whether sampling was set up.
pub fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// Makes the calling thread's sampling timer (armed if recording) and stores its id in
/// `timer`. Called from the slow path when a thread claims its block. Raw system calls only.
pub fn thread_started(timer: &AtomicI32) {
    if !active() || EVICTED.load(Ordering::Relaxed) || timer.load(Ordering::Relaxed) >= 0 {
        return;
    }
    let Some(id) = sys::signal::thread_cpu_timer(libc::SIGPROF, sys::gettid()) else {
        return;
    };
    timer.store(id, Ordering::Relaxed);
    if RUNNING.load(Ordering::Relaxed) {
        sys::signal::arm_timer(id, INTERVAL_NS.load(Ordering::Relaxed));
    }
}

/// Arms or disarms every thread's timer.
fn set_all(on: bool) {
    let interval = if on {
        INTERVAL_NS.load(Ordering::Relaxed)
    } else {
        0
    };
    for block in thread::blocks() {
        let id = block.timer.load(Ordering::Relaxed);
        if id >= 0 {
            sys::signal::arm_timer(id, interval);
        }
    }
}

/// Starts the timers (start, moncontrol(1)).
pub fn resume() {
    if active() && !EVICTED.load(Ordering::Relaxed) && !RUNNING.swap(true, Ordering::AcqRel) {
        set_all(true);
    }
}

/// Stops the timers (stop, moncontrol(0), before exec).
pub fn pause() {
    if active() && RUNNING.swap(false, Ordering::AcqRel) {
        set_all(false);
    }
}

/// Whether the timers run.
pub fn running() -> bool {
    RUNNING.load(Ordering::Relaxed)
}

/// In the child after fork: POSIX timers are not inherited and only this thread exists. Every
/// count starts from zero; this thread gets a timer of its own.
pub fn reset_after_fork(current: *mut thread::ThreadBlock) {
    for block in thread::blocks() {
        block.timer.store(-1, Ordering::Relaxed);
        pcs::zero(&block.samples);
    }
    LOST_NO_TABLE.store(0, Ordering::Relaxed);
    if !current.is_null() {
        // SAFETY: the forking thread's live block.
        thread_started(unsafe { &(*current).timer });
    }
}

/// What the writer needs to know of the sampler.
pub struct Snapshot {
    /// Samples lost: no table could be mapped, or a thread's table was full.
    pub lost: u64,
    /// False when the program replaced our SIGPROF handler at some point.
    pub handler_intact: bool,
}

/// Checks the handler (stopping the timers for good if the program replaced it) and sums the
/// losses.
pub fn snapshot() -> Snapshot {
    let handler_intact =
        !active() || sys::handler_of(libc::SIGPROF) == instrfn_sigprof_entry as *const () as usize;
    if !handler_intact && !EVICTED.swap(true, Ordering::Relaxed) {
        pause();
    }
    let lost = LOST_NO_TABLE.load(Ordering::Relaxed)
        + thread::blocks()
            .map(|b| pcs::chain_lost(&b.samples))
            .sum::<u64>();
    Snapshot {
        lost,
        handler_intact,
    }
}
