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
//! The pc tables are per thread and keyed by pc, so the writer can bin samples for any module
//! (the executable, shared libraries) at write time. Only the handler writes them, and it
//! never nests (it runs with every signal blocked); other threads read with atomics.
//!
//! Coexistence: if the program already has a SIGPROF handler or a running ITIMER_PROF when
//! instrfn starts, instrfn steps aside (no histogram) and says so. If the program installs its
//! own handler later, the histogram stops there; the writer notices, says so and stops the
//! timers.

use core::ffi::{c_int, c_void};
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::{arch, sys, thread};

/// Slots in a thread's first pc table.
const FIRST_CAPACITY: usize = 1024;
/// Distinct pcs one thread's table chain takes; samples of further pcs are counted as lost.
pub const MAX_PCS: usize = 1 << 18;

/// One sampled pc: `pc` 0 means empty.
#[repr(C)]
struct PcSlot {
    pc: AtomicUsize,
    count: AtomicU64,
}

/// A pc table; `capacity` slots follow the header. Like the arc tables, a full table is
/// replaced by a larger one with the same keys, and keeps the counts it collected.
#[repr(C)]
pub struct PcTable {
    capacity: usize,
    shift: u32,
    len: AtomicUsize,
    prev: *mut PcTable,
    /// Samples (weights) that found no room.
    lost: AtomicU64,
}

const HEADER: usize = core::mem::size_of::<PcTable>().next_multiple_of(16);

impl PcTable {
    fn create(capacity: usize, prev: *mut PcTable) -> *mut PcTable {
        let Some(mem) = sys::map_zeroed(HEADER + capacity * core::mem::size_of::<PcSlot>()) else {
            return ptr::null_mut();
        };
        let t = mem.cast::<PcTable>().as_ptr();
        // SAFETY: a fresh, zeroed, page-aligned mapping large enough for the header.
        unsafe {
            t.write(PcTable {
                capacity,
                shift: 64 - capacity.trailing_zeros(),
                len: AtomicUsize::new(0),
                prev,
                lost: AtomicU64::new(0),
            })
        };
        t
    }

    fn slot(&self, i: usize) -> &PcSlot {
        debug_assert!(i < self.capacity);
        // SAFETY: i < capacity keeps the slot inside the mapping made by `create`.
        unsafe {
            &*ptr::from_ref(self)
                .cast::<u8>()
                .add(HEADER)
                .cast::<PcSlot>()
                .add(i)
        }
    }

    /// The slot of `pc`, adding it if there is room (at most half full).
    fn find_or_add(&self, pc: usize) -> Option<&PcSlot> {
        let mask = self.capacity - 1;
        let mut i = ((pc as u64).wrapping_mul(crate::arcs::HASH_MUL) >> self.shift) as usize;
        loop {
            let slot = self.slot(i);
            match slot.pc.load(Ordering::Relaxed) {
                0 => break,
                p if p == pc => return Some(slot),
                _ => i = (i + 1) & mask,
            }
        }
        let len = self.len.load(Ordering::Relaxed);
        if (len + 1) * 2 > self.capacity {
            return None;
        }
        let slot = self.slot(i);
        slot.count.store(0, Ordering::Relaxed);
        slot.pc.store(pc, Ordering::Release);
        self.len.store(len + 1, Ordering::Relaxed);
        Some(slot)
    }
}

/// The tables of a chain, newest first.
fn chain(head: *mut PcTable) -> impl Iterator<Item = &'static PcTable> {
    let mut t = head;
    core::iter::from_fn(move || {
        // SAFETY: pc tables are never unmapped; prev links are immutable.
        let tab = unsafe { t.as_ref()? };
        t = tab.prev;
        Some(tab)
    })
}

/// Adds `weight` samples at `pc` to the chain at `head`. Only by the owning thread's handler.
fn add_sample(head: &AtomicPtr<PcTable>, pc: usize, weight: u64) {
    let mut t = head.load(Ordering::Relaxed);
    if t.is_null() {
        t = PcTable::create(FIRST_CAPACITY, ptr::null_mut());
        if t.is_null() {
            LOST_NO_TABLE.fetch_add(weight, Ordering::Relaxed);
            return;
        }
        head.store(t, Ordering::Release);
    }
    // SAFETY: a table of this chain, never unmapped.
    let tab = unsafe { &*t };
    let slot = match tab.find_or_add(pc) {
        Some(slot) => slot,
        None if tab.capacity * 4 <= 2 * MAX_PCS => {
            let grown = PcTable::create(tab.capacity * 4, t);
            if grown.is_null() {
                tab.lost.fetch_add(weight, Ordering::Relaxed);
                return;
            }
            // SAFETY: just created, not yet visible to anybody.
            let new = unsafe { &*grown };
            for i in 0..tab.capacity {
                let p = tab.slot(i).pc.load(Ordering::Relaxed);
                if p != 0 {
                    let _ = new.find_or_add(p);
                }
            }
            head.store(grown, Ordering::Release);
            match new.find_or_add(pc) {
                Some(slot) => slot,
                None => return,
            }
        }
        None => {
            tab.lost.fetch_add(weight, Ordering::Relaxed);
            return;
        }
    };
    slot.count.store(
        slot.count.load(Ordering::Relaxed) + weight,
        Ordering::Release,
    );
}

/// Calls `f(pc, count)` for every sample of a chain (a pc may come from several tables).
pub fn for_each_sample(head: &AtomicPtr<PcTable>, mut f: impl FnMut(usize, u64)) {
    for tab in chain(head.load(Ordering::Acquire)) {
        for i in 0..tab.capacity {
            let slot = tab.slot(i);
            let pc = slot.pc.load(Ordering::Acquire);
            if pc == 0 {
                continue;
            }
            let n = slot.count.load(Ordering::Acquire);
            if n != 0 {
                f(pc, n);
            }
        }
    }
}

/// Distinct pcs in a chain (an upper bound for [`for_each_sample`] when read before it).
pub fn chain_len(head: &AtomicPtr<PcTable>) -> usize {
    chain(head.load(Ordering::Acquire))
        .map(|t| t.len.load(Ordering::Relaxed))
        .sum()
}

/// Samples that found no room in a chain.
pub fn chain_lost(head: &AtomicPtr<PcTable>) -> u64 {
    chain(head.load(Ordering::Acquire))
        .map(|t| t.lost.load(Ordering::Relaxed))
        .sum()
}

/// Zeroes every count of a chain (the child after fork: no other thread exists).
pub fn zero(head: &AtomicPtr<PcTable>) {
    for tab in chain(head.load(Ordering::Relaxed)) {
        for i in 0..tab.capacity {
            tab.slot(i).count.store(0, Ordering::Relaxed);
        }
        tab.lost.store(0, Ordering::Relaxed);
    }
}

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
    if !crate::runtime::recording() {
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
    let block = unsafe { (*arch::tls()).block };
    if block.is_null() {
        LOST_NO_TABLE.fetch_add(weight, Ordering::Relaxed);
        return;
    }
    // SAFETY: the calling thread's live block.
    add_sample(unsafe { &(*block).samples }, pc, weight);
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

/// Makes the calling thread's sampling timer (armed if recording) and stores its id in
/// `timer`. Called from the slow path when a thread claims its block. Raw system calls only.
pub fn thread_started(timer: &AtomicI32) {
    if !active() || EVICTED.load(Ordering::Relaxed) || timer.load(Ordering::Relaxed) >= 0 {
        return;
    }
    let ev = KernelSigevent {
        value: 0,
        signo: libc::SIGPROF,
        notify: SIGEV_THREAD_ID,
        tid: sys::gettid() as c_int,
        _pad: [0; 11],
    };
    let mut id: c_int = -1;
    // SAFETY: valid sigevent and out-pointer for the kernel's timer_create.
    let r = unsafe {
        libc::syscall(
            libc::SYS_timer_create,
            THREAD_USER_CLOCK as libc::c_long,
            &ev as *const KernelSigevent,
            &mut id as *mut c_int,
        )
    };
    if r != 0 {
        return;
    }
    timer.store(id, Ordering::Relaxed);
    if RUNNING.load(Ordering::Relaxed) {
        arm(id, INTERVAL_NS.load(Ordering::Relaxed));
    }
}

/// Deletes a thread's timer (its thread exited, or is about to).
pub fn thread_ended(timer: &AtomicI32) {
    let id = timer.swap(-1, Ordering::Relaxed);
    if id >= 0 {
        // SAFETY: deletes a timer this process made.
        unsafe { libc::syscall(libc::SYS_timer_delete, id as libc::c_long) };
    }
}

fn arm(id: c_int, interval_ns: u64) {
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
        libc::syscall(
            libc::SYS_timer_settime,
            id as libc::c_long,
            0 as libc::c_long,
            &its as *const libc::itimerspec,
            ptr::null_mut::<libc::itimerspec>(),
        )
    };
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
            arm(id, interval);
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
        zero(&block.samples);
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
            .map(|b| chain_lost(&b.samples))
            .sum::<u64>();
    Snapshot {
        lost,
        handler_intact,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pc_tables_count_exactly_across_growth() {
        let head = AtomicPtr::new(ptr::null_mut());
        for pc in 1..=20_000usize {
            add_sample(&head, pc * 4, pc as u64 % 5 + 1);
        }
        let mut got = std::collections::BTreeMap::new();
        for_each_sample(&head, |pc, n| *got.entry(pc).or_insert(0) += n);
        assert_eq!(got.len(), 20_000);
        assert!(got.iter().all(|(pc, n)| *n == (pc / 4) as u64 % 5 + 1));
        assert_eq!(chain_lost(&head), 0);
    }
}
