//! The pc histogram: SIGPROF from ITIMER_PROF (process CPU time, so every thread is sampled
//! while it runs), one 32-bit bin per 4 bytes of the executable's code.
//!
//! The kernel delivers at most one ITIMER_PROF signal per tick and CPU, whatever rate is asked,
//! so the rate written to gmon.out is the one achieved: samples taken divided by the CPU time
//! they cover. gprof's seconds then add up to the process's CPU time.
//!
//! Coexistence: if the program already has a SIGPROF handler or a running ITIMER_PROF when
//! instrfn starts, instrfn steps aside (no histogram) and says so. If the program installs its
//! own handler later, the histogram stops there; the writer notices and says so.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use crate::exe::Executable;
use crate::{arch, sys};

/// Bins of one executable segment.
struct Bins {
    start: AtomicU64,
    len: AtomicU64,
    bins: AtomicPtr<AtomicU32>,
}

#[allow(clippy::declare_interior_mutable_const)] // only used to initialise SEGMENTS
const NO_BINS: Bins = Bins {
    start: AtomicU64::new(0),
    len: AtomicU64::new(0),
    bins: AtomicPtr::new(core::ptr::null_mut()),
};

static SEGMENTS: [Bins; crate::exe::MAX_SEGMENTS] = [NO_BINS; crate::exe::MAX_SEGMENTS];
/// Samples taken (in the executable or not).
static TOTAL: AtomicU64 = AtomicU64::new(0);
/// Samples whose pc was outside the executable (shared libraries, the vDSO, the runtime when
/// preloaded).
static OUTSIDE: AtomicU64 = AtomicU64::new(0);
/// Samples dropped because their bin was full (needs 2^32 samples in 4 bytes of code).
static SATURATED: AtomicU64 = AtomicU64::new(0);
/// Whether our timer and handler are installed.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Requested interval, microseconds.
static INTERVAL_US: AtomicU64 = AtomicU64::new(0);
/// CPU time sampled so far while recording was on, and the CPU clock when the current stretch
/// began (u64::MAX while stopped).
static CPU_ACCUM_NS: AtomicU64 = AtomicU64::new(0);
static CPU_SINCE_NS: AtomicU64 = AtomicU64::new(u64::MAX);

guarded_entry! {
    /// SIGPROF handler (SA_SIGINFO). Runs the Rust handler with the guard held.
    fn instrfn_sigprof_entry(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void)
        => on_sigprof
}

extern "C" fn on_sigprof(_sig: c_int, _info: *mut libc::siginfo_t, uc: *mut c_void) {
    if !crate::runtime::recording() {
        return;
    }
    // SAFETY: uc is the third argument of an SA_SIGINFO handler.
    let pc = unsafe { arch::interrupted_pc(uc) };
    TOTAL.fetch_add(1, Ordering::Relaxed);
    for seg in &SEGMENTS {
        let start = seg.start.load(Ordering::Relaxed) as usize;
        let len = seg.len.load(Ordering::Relaxed) as usize;
        let bins = seg.bins.load(Ordering::Relaxed);
        if bins.is_null() || pc < start || pc - start >= len * 4 {
            continue;
        }
        // SAFETY: the index is below len, the number of bins mapped.
        let bin = unsafe { &*bins.add((pc - start) / 4) };
        if bin.load(Ordering::Relaxed) == u32::MAX {
            SATURATED.fetch_add(1, Ordering::Relaxed);
        } else {
            bin.fetch_add(1, Ordering::Relaxed);
        }
        return;
    }
    OUTSIDE.fetch_add(1, Ordering::Relaxed);
}

/// Maps the bins and starts sampling at `hz`. Returns false (after saying why) when the program
/// owns SIGPROF or ITIMER_PROF already, or memory is short.
pub fn start(exe: &Executable, hz: u32) -> bool {
    if hz == 0 {
        return false;
    }
    // SAFETY: queries only (null new action / value).
    let (old_action, old_timer) = unsafe {
        let mut act: libc::sigaction = core::mem::zeroed();
        libc::sigaction(libc::SIGPROF, core::ptr::null(), &mut act);
        let mut it: libc::itimerval = core::mem::zeroed();
        libc::getitimer(libc::ITIMER_PROF, &mut it);
        (act, it)
    };
    if old_action.sa_sigaction != libc::SIG_DFL && old_action.sa_sigaction != libc::SIG_IGN {
        message!("the program has its own SIGPROF handler; gmon.out will have no pc histogram");
        return false;
    }
    if old_timer.it_value.tv_sec != 0 || old_timer.it_value.tv_usec != 0 {
        message!("the program runs its own ITIMER_PROF; gmon.out will have no pc histogram");
        return false;
    }
    for (seg, bins) in exe.segments().iter().zip(&SEGMENTS) {
        let n = (seg.end - seg.start) / 4;
        let Some(mem) = sys::map_zeroed(n * 4) else {
            message!(
                "cannot map {} KiB for the pc histogram; continuing without it",
                n / 256
            );
            return false;
        };
        bins.start.store(seg.start as u64, Ordering::Relaxed);
        bins.len.store(n as u64, Ordering::Relaxed);
        bins.bins.store(mem.as_ptr().cast(), Ordering::Release);
    }
    // SAFETY: installs a handler whose entry is a valid SA_SIGINFO function; the mask blocks
    // every signal while it runs.
    let installed = unsafe {
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = instrfn_sigprof_entry as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigfillset(&mut act.sa_mask);
        libc::sigaction(libc::SIGPROF, &act, core::ptr::null_mut()) == 0
    };
    if !installed {
        message!(
            "cannot install the SIGPROF handler: {}",
            sys::Errno(sys::errno())
        );
        return false;
    }
    INTERVAL_US.store((1_000_000 / hz as u64).max(1), Ordering::Relaxed);
    ACTIVE.store(true, Ordering::Release);
    resume();
    true
}

fn set_timer(interval_us: u64) {
    // SAFETY: all-zero is a valid timeval.
    let mut tv: libc::timeval = unsafe { core::mem::zeroed() };
    tv.tv_sec = (interval_us / 1_000_000) as _;
    tv.tv_usec = (interval_us % 1_000_000) as _;
    let it = libc::itimerval {
        it_interval: tv,
        it_value: tv,
    };
    // SAFETY: valid itimerval; no old value requested.
    unsafe { libc::setitimer(libc::ITIMER_PROF, &it, core::ptr::null_mut()) };
}

/// Restarts the timer and the CPU clock of the current stretch (start, moncontrol(1)).
pub fn resume() {
    if !ACTIVE.load(Ordering::Acquire) {
        return;
    }
    if CPU_SINCE_NS
        .compare_exchange(
            u64::MAX,
            sys::process_cpu_ns(),
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
    {
        set_timer(INTERVAL_US.load(Ordering::Relaxed));
    }
}

/// Stops the timer and books the CPU time of the current stretch (stop, moncontrol(0)).
pub fn pause() {
    if !ACTIVE.load(Ordering::Acquire) {
        return;
    }
    let since = CPU_SINCE_NS.swap(u64::MAX, Ordering::AcqRel);
    if since != u64::MAX {
        set_timer(0);
        CPU_ACCUM_NS.fetch_add(
            sys::process_cpu_ns().saturating_sub(since),
            Ordering::Relaxed,
        );
    }
}

/// In the child after fork: itimers are not inherited; start from zero with a timer of its own.
pub fn reset_after_fork() {
    for seg in &SEGMENTS {
        let bins = seg.bins.load(Ordering::Relaxed);
        let len = seg.len.load(Ordering::Relaxed) as usize;
        for i in 0..len {
            // SAFETY: i < len, the number of bins mapped; only this thread exists.
            unsafe { (*bins.add(i)).store(0, Ordering::Relaxed) };
        }
    }
    TOTAL.store(0, Ordering::Relaxed);
    OUTSIDE.store(0, Ordering::Relaxed);
    SATURATED.store(0, Ordering::Relaxed);
    CPU_ACCUM_NS.store(0, Ordering::Relaxed);
    let was_running = CPU_SINCE_NS.swap(u64::MAX, Ordering::Relaxed) != u64::MAX;
    if was_running {
        resume();
    }
}

/// What the writer needs of the histogram.
pub struct Snapshot {
    /// Samples per second of CPU time, as achieved.
    pub rate: u32,
    pub total: u64,
    /// Samples whose pc lay outside the executable (libraries, vDSO; gprof cannot show them).
    pub outside: u64,
    /// Samples dropped because their bin was full.
    pub saturated: u64,
    /// False when the program replaced our SIGPROF handler at some point.
    pub handler_intact: bool,
}

/// Whether sampling runs.
pub fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

pub fn snapshot(requested_hz: u32) -> Snapshot {
    let total = TOTAL.load(Ordering::Relaxed);
    let mut cpu_ns = CPU_ACCUM_NS.load(Ordering::Relaxed);
    let since = CPU_SINCE_NS.load(Ordering::Relaxed);
    if since != u64::MAX {
        cpu_ns += sys::process_cpu_ns().saturating_sub(since);
    }
    // The achieved rate, so that samples / rate = CPU seconds sampled.
    let rate = if total > 0 && cpu_ns > 0 {
        ((total as u128 * 1_000_000_000 + cpu_ns as u128 / 2) / cpu_ns as u128) as u32
    } else {
        requested_hz.max(1)
    };
    // SAFETY: query only.
    let handler_intact = unsafe {
        let mut act: libc::sigaction = core::mem::zeroed();
        libc::sigaction(libc::SIGPROF, core::ptr::null(), &mut act);
        act.sa_sigaction == instrfn_sigprof_entry as *const () as usize
    };
    Snapshot {
        rate: rate.max(1),
        total,
        outside: OUTSIDE.load(Ordering::Relaxed),
        saturated: SATURATED.load(Ordering::Relaxed),
        handler_intact,
    }
}

/// Calls `f(start, bins)` for each segment's bins (runtime addresses).
pub fn for_each_segment(mut f: impl FnMut(usize, &[AtomicU32])) {
    for seg in &SEGMENTS {
        let bins = seg.bins.load(Ordering::Acquire);
        if bins.is_null() {
            continue;
        }
        let len = seg.len.load(Ordering::Relaxed) as usize;
        // SAFETY: bins points to len mapped bins that are never unmapped.
        let slice = unsafe { core::slice::from_raw_parts(bins, len) };
        f(seg.start.load(Ordering::Relaxed) as usize, slice);
    }
}
