//! The collector: a thread of the runtime that keeps trace chunks ready for the threads that
//! fill them, and commits the full ones, so that a thread's chunk switch is a pointer swap.
//!
//! Why: a fresh chunk is fresh page cache. Allocating, zeroing and mapping it costs more than
//! the events written into it (scripts/bench/pagecache.c measures it: docs/performance.md),
//! while writing into pages already mapped, then `pwrite`-ing them out, costs a few ns per
//! call. So threads write into
//! chunks of a *staging file* that are mapped once and reused: when a thread's chunk is full
//! it takes a ready one from a small pool (one atomic swap), wakes the collector (futex) and
//! goes on; the collector copies the full chunk to the events file with `pwrite`
//! (chunks.rs `commit`), clears it and puts it back in the pool. The data path stays
//! crash-safe: events go straight into shared file mappings, whose pages belong to the page
//! cache the moment they are stored to, and readers read both files. If the pool is empty (the
//! collector is behind, or not running), the thread commits a retired chunk itself and fills
//! it next ([`commit_one_retired`]), or, if none is waiting, maps a new staging chunk; with no
//! collector it also commits its own chunks: slower, never blocked, nothing lost.
//!
//! The thread is made with a raw `clone` (the flags of a pthread, all signals blocked), not
//! `pthread_create`: trace mode starts at the program's first instrumented call, which may be
//! in a signal handler, where pthread_create (it allocates) could deadlock. So libc does not
//! know the thread: it runs only code of this module and chunks.rs, with raw system calls
//! (never errno, never thread-local storage: its thread pointer is its creator's). It never exits: the process's exit (or exec) ends it; a fork child starts its
//! own. INSTRFN_COLLECTOR=off keeps the process at the threads the program made.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::chunks::{active, all_written, commit, new_chunk};
use super::settings::chunk_bytes;
use crate::abi::{self, Tls};
use crate::sys;
use crate::sys::raw::{self, syscall, thread_pointer};

/// Prepared chunks kept ready, at most.
const POOL: usize = 4;
/// Chunks handed back for committing, waiting for the collector.
const RETIRED: usize = 8;
/// Committed (cleared) chunks kept for reuse beyond the pool, at most: more are unmapped (their
/// place in the staging file stays unused).
const SPARE: usize = 16;
/// The collector's stack (plus a guard page below it).
const STACK_BYTES: usize = 64 << 10;
const PAGE: usize = 4096;

static READY: [AtomicUsize; POOL] = [const { AtomicUsize::new(0) }; POOL];
static FREE: [AtomicUsize; SPARE] = [const { AtomicUsize::new(0) }; SPARE];
static RETIRE: [AtomicUsize; RETIRED] = [const { AtomicUsize::new(0) }; RETIRED];
/// A RETIRE slot taken by a thread that is writing its end and base, or by one reading its
/// chunk (see `take_written`).
const CLAIMED: usize = 1;
/// Where the events of each retired chunk end (written before the chunk is published).
static RETIRE_END: [AtomicUsize; RETIRED] = [const { AtomicUsize::new(0) }; RETIRED];
/// Bumped by every thread that took a chunk or retired one; the collector waits on it.
static WAKE: AtomicU32 = AtomicU32::new(0);
/// INSTRFN_COLLECTOR.
static WANTED: AtomicBool = AtomicBool::new(true);
/// INSTRFN_COLLECTOR_NICE.
static NICE: AtomicU32 = AtomicU32::new(19);
/// The collector's thread id (0: none in this process).
static TID: AtomicI32 = AtomicI32::new(0);
/// Base of the stack mapping (kept for a fork child's collector).
static STACK: AtomicUsize = AtomicUsize::new(0);
/// Set at the end of the trace: the collector prepares nothing more (it still commits).
static STOP: AtomicBool = AtomicBool::new(false);
/// Set by [`pause`]: the collector thread exits.
static PAUSE: AtomicBool = AtomicBool::new(false);
/// Chunks the threads took from the pool, and chunks they had to prepare themselves.
static PREPARED: AtomicU64 = AtomicU64::new(0);
/// Chunks the threads took, from the pool or made themselves.
static TAKEN: AtomicU64 = AtomicU64::new(0);
static BY_THREADS: AtomicU64 = AtomicU64::new(0);

/// Unmaps a chunk (the collector's or the caller's).
fn unmap(base: usize, len: usize) {
    // SAFETY: a chunk mapping nobody writes any more.
    unsafe { syscall(libc::SYS_munmap, [base, len, 0, 0, 0, 0]) };
}

/// INSTRFN_COLLECTOR and INSTRFN_COLLECTOR_NICE (before the trace starts).
pub fn configure(wanted: bool, nice: u8) {
    WANTED.store(wanted, Ordering::Relaxed);
    NICE.store(nice as u32, Ordering::Relaxed);
}

/// Starts the collector of this process, once (trace start-up, and again in a fork child).
/// Async-signal-safe. Says so in one line if the thread cannot be made.
pub fn start() {
    if !WANTED.load(Ordering::Relaxed) {
        return;
    }
    start_thread(
        collector_main,
        "collector",
        "each thread maps its own chunks",
    );
}

/// Starts `entry` on the runtime's own thread, if it has none: the collector in trace mode,
/// the trigger watcher in ring mode (crate::trace::trigger), which has no collector. The same
/// thread rules hold for both: raw system calls only, no thread-local storage.
/// `what` names the thread and `without` says what happens without it, in the one line said
/// if it cannot be made. Returns whether the thread runs.
pub fn start_thread(entry: extern "C" fn(usize) -> !, what: &str, without: &str) -> bool {
    if TID.load(Ordering::Relaxed) != 0 {
        return true;
    }
    STOP.store(false, Ordering::SeqCst);
    let mut stack = STACK.load(Ordering::Relaxed);
    if stack == 0 {
        let p = match sys::mem::map_anon(STACK_BYTES + PAGE) {
            Ok(p) => p,
            Err(e) => {
                message!(
                    "cannot map the {what} thread's stack: {}; {without}",
                    sys::Errno(e)
                );
                return false;
            }
        };
        // SAFETY: the lowest page of our own fresh mapping becomes the guard page.
        unsafe { sys::mem::guard_page(p, PAGE) };
        stack = p.as_ptr() as usize;
        STACK.store(stack, Ordering::Relaxed);
    }
    let Some(tp) = fake_tls(what, without) else {
        return false;
    };
    let flags = libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM
        | libc::CLONE_SETTLS;
    let all: u64 = !0;
    let mut old: u64 = 0;
    // SAFETY: the signal mask is set to block everything around the clone (the collector
    // inherits it, so no signal is ever delivered to it) and put back; the stack is ours and
    // unused (a fork child's copy of its parent's collector stack is unused in the child).
    let tid = unsafe {
        syscall(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as usize,
                &all as *const u64 as usize,
                &mut old as *mut u64 as usize,
                8,
                0,
                0,
            ],
        );
        let tid = raw::spawn(flags as usize, stack + PAGE + STACK_BYTES, tp, entry, 0);
        syscall(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as usize,
                &old as *const u64 as usize,
                0,
                8,
                0,
                0,
            ],
        );
        tid
    };
    if tid <= 0 {
        message!(
            "cannot start the {what} thread: {}; {without}",
            sys::Errno(-tid as i32)
        );
        return false;
    }
    TID.store(tid as i32, Ordering::Relaxed);
    true
}

/// Ends the collector thread, for a system call that needs the process to be one thread
/// (`unshare(CLONE_NEWUSER)`, `setns` into a user namespace: src/runtime/interpose.c), and waits until
/// the kernel has removed it from the thread group. Returns whether there was one and it is
/// gone (then [`resume`] starts it again); false if there was none, or it did not go within
/// two seconds. Meanwhile the threads commit their own chunks, as without a collector.
pub fn pause() -> bool {
    let tid = TID.load(Ordering::Relaxed);
    if tid <= 0 {
        return false;
    }
    PAUSE.store(true, Ordering::SeqCst);
    wake();
    // SAFETY: getpid(2).
    let pid = unsafe { syscall(libc::SYS_getpid, [0; 6]) };
    let nap = libc::timespec {
        tv_sec: 0,
        tv_nsec: 100_000,
    };
    for _ in 0..20_000 {
        // SAFETY: tgkill(2) with signal 0 only asks whether the thread exists.
        let r = unsafe { syscall(libc::SYS_tgkill, [pid as usize, tid as usize, 0, 0, 0, 0]) };
        if r == -(libc::ESRCH as isize) {
            // Gone, and out of the thread group (tgkill finds a thread until it is).
            TID.store(0, Ordering::Relaxed);
            PAUSE.store(false, Ordering::SeqCst);
            return true;
        }
        // SAFETY: nanosleep(2) of a local timespec.
        unsafe {
            syscall(
                libc::SYS_nanosleep,
                [&nap as *const libc::timespec as usize, 0, 0, 0, 0, 0],
            )
        };
    }
    false
}

/// Starts the collector again after [`pause`].
pub fn resume() {
    start();
}

/// The collector's thread pointer: a zeroed area in which this runtime's Tls lies where the
/// trampolines look for it, with its guard set for good. A program built with instrumentation
/// throughout (a Rust program that links this crate and is built with -Zinstrument-mcount)
/// has the collector's own code call the trampolines: they see the guard held and return at
/// once, as they do for runtime code on any thread. Nothing else uses the thread pointer here.
fn fake_tls(what: &str, without: &str) -> Option<usize> {
    static AREA: AtomicUsize = AtomicUsize::new(0);
    static TP: AtomicUsize = AtomicUsize::new(0);
    if AREA.load(Ordering::Relaxed) != 0 {
        return Some(TP.load(Ordering::Relaxed));
    }
    let real_tp = thread_pointer();
    let off = abi::tls() as isize - real_tp as isize;
    let tls_bytes = core::mem::size_of::<Tls>() as isize;
    if real_tp == 0 || off.unsigned_abs() > 64 << 20 {
        message!("cannot place the {what} thread's data; {without}");
        return None;
    }
    // The area spans the thread pointer (and the self pointer at it) and the Tls.
    let below = (-off).max(0) as usize;
    let above = (off + tls_bytes).max(16) as usize;
    let lead = below.next_multiple_of(PAGE) + PAGE;
    let size = lead + above.next_multiple_of(PAGE) + PAGE;
    // Zeroed; untouched pages cost nothing.
    let area = match sys::mem::map_anon(size) {
        Ok(p) => p.as_ptr() as usize,
        Err(e) => {
            message!(
                "cannot map the {what} thread's data: {}; {without}",
                sys::Errno(e)
            );
            return None;
        }
    };
    // Same alignment within a page as the real one (the Tls's alignment comes with it).
    let tp = area as usize + lead + (real_tp & (PAGE - 1)) - PAGE;
    // SAFETY: both lie inside the area: tp - below >= area, tp + above <= area + size.
    unsafe {
        *(tp as *mut usize) = tp;
        let tls = (tp as isize + off) as *mut Tls;
        core::ptr::addr_of_mut!((*tls).guard).write(1);
    }
    TP.store(tp, Ordering::Relaxed);
    AREA.store(area as usize, Ordering::Relaxed);
    Some(tp)
}

/// Names the calling thread (PR_SET_NAME: at most 15 bytes), for `ps -T` and debuggers.
pub fn name_this_thread(name: &core::ffi::CStr) {
    // SAFETY: PR_SET_NAME with a NUL-terminated name; the kernel copies at most 16 bytes.
    unsafe {
        syscall(
            libc::SYS_prctl,
            [
                libc::PR_SET_NAME as usize,
                name.as_ptr() as usize,
                0,
                0,
                0,
                0,
            ],
        )
    };
}

/// The collector thread: commits retired chunks, fills the pool, sleeps until woken (or a
/// second has passed).
extern "C" fn collector_main(_: usize) -> ! {
    name_this_thread(c"instrfn-collect");
    // Nice 19 (INSTRFN_COLLECTOR_NICE): the collector takes CPU time the program's threads
    // leave, and little of theirs where they keep every CPU busy — there its work only
    // displaced theirs, with context switches on top. Starved, it lets the pool run dry and
    // the threads prepare and commit their own chunks (as with INSTRFN_COLLECTOR=off); nothing
    // ever waits for it, and unlike SCHED_IDLE it keeps a share (weight 15 against 1024) for
    // the chunks it holds (docs/performance.md has the measurement). Lowering one's own
    // priority needs no privilege; if it fails the collector runs as it is.
    // SAFETY: setpriority(PRIO_PROCESS, 0: this thread, nice) reads nothing of ours.
    unsafe {
        syscall(
            libc::SYS_setpriority,
            [
                libc::PRIO_PROCESS as usize,
                0,
                NICE.load(Ordering::Relaxed) as usize,
                0,
                0,
                0,
            ],
        )
    };
    let second = libc::timespec {
        tv_sec: 1,
        tv_nsec: 0,
    };
    loop {
        let seen = WAKE.load(Ordering::Acquire);
        commit_retired();
        if PAUSE.load(Ordering::SeqCst) {
            // SAFETY: exit(2) of this thread alone; it holds no chunk (the retired ones are
            // committed, the pool's stay for the threads) and nothing waits on it.
            unsafe { syscall(libc::SYS_exit, [0, 0, 0, 0, 0, 0]) };
        }
        if !STOP.load(Ordering::SeqCst) && active() {
            // As many ready as the threads' appetite asks for: none before the first chunk is
            // taken (a process that writes a few events keeps one chunk), then up to POOL.
            let taken = TAKEN.load(Ordering::Relaxed) as usize;
            let target = taken.div_ceil(2).min(POOL);
            for r in READY.iter().take(target) {
                if r.load(Ordering::Relaxed) != 0 {
                    continue;
                }
                let base = match pop(&FREE) {
                    0 => match new_chunk() {
                        Some(b) => b,
                        None => break,
                    },
                    b => b,
                };
                if r.compare_exchange(0, base, Ordering::Release, Ordering::Relaxed)
                    .is_err()
                {
                    recycle(base);
                }
            }
        }
        raw::futex(&WAKE, libc::FUTEX_WAIT, seen, Some(&second));
    }
}

/// Takes a chunk out of `list` (0 if it has none).
fn pop(list: &[AtomicUsize]) -> usize {
    for r in list {
        if r.load(Ordering::Relaxed) != 0 {
            let base = r.swap(0, Ordering::Acquire);
            if base != 0 {
                return base;
            }
        }
    }
    0
}

/// Keeps a committed (cleared) chunk for reuse, or unmaps it if there are spares enough.
fn recycle(base: usize) {
    for r in &FREE {
        if r.load(Ordering::Relaxed) == 0
            && r.compare_exchange(0, base, Ordering::Release, Ordering::Relaxed)
                .is_ok()
        {
            return;
        }
    }
    unmap(base, chunk_bytes());
}

/// Commits a chunk whose events are all written and reuses it; one the events file could not
/// take stays in the staging file as it is (its mapping goes).
fn commit_and_recycle(base: usize) {
    if commit(base) {
        recycle(base);
    } else {
        unmap(base, chunk_bytes());
    }
}

/// A chunk for the calling thread, if the pool (or, when it is empty, the spares) has one (0
/// if not). The collector is woken to prepare the next. A spare counts as the collector's when
/// it runs (it committed and cleared it, and only missed moving it into the pool), else as the
/// threads' (they committed it).
pub fn take() -> usize {
    let mut base = pop(&READY);
    if base != 0 {
        PREPARED.fetch_add(1, Ordering::Relaxed);
    } else {
        base = pop(&FREE);
        if base != 0 {
            if TID.load(Ordering::Relaxed) != 0 {
                PREPARED.fetch_add(1, Ordering::Relaxed);
            } else {
                BY_THREADS.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    if base != 0 {
        TAKEN.fetch_add(1, Ordering::Relaxed);
    }
    if TID.load(Ordering::Relaxed) != 0 {
        wake();
    }
    base
}

/// Counts a chunk a thread had to map itself (the pool was empty), and wakes the collector
/// again: the wake-up of [`take`] came before this chunk was counted, so the collector may have
/// seen no appetite yet (a thread's first chunk) and gone back to sleep, leaving the thread to
/// prepare its next chunk itself too, in the middle of the run.
pub fn prepared_by_thread() {
    BY_THREADS.fetch_add(1, Ordering::Relaxed);
    TAKEN.fetch_add(1, Ordering::Relaxed);
    if TID.load(Ordering::Relaxed) != 0 {
        wake();
    }
}

/// Hands a chunk the thread left (its events end at `end`) to the collector, which commits it
/// once every event reserved in it is written: code that a signal handler interrupted between
/// reserving an event and writing it writes it after the handler returns, even if the handler
/// made its thread take the next chunks meanwhile. Without the collector (or with a backlog)
/// the thread commits it now if it can; a chunk that still has an event on its way stays in
/// the staging file, mapped, for good (readers find it there; a mapping leaked, never a fault).
pub fn retire(base: usize, end: usize) {
    if TID.load(Ordering::Relaxed) != 0 {
        for (r, e) in RETIRE.iter().zip(&RETIRE_END) {
            // The slot is claimed first (CLAIMED), then its end and base are written: two
            // threads retiring at once never mix one's end with the other's chunk.
            if r.load(Ordering::Relaxed) == 0
                && r.compare_exchange(0, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                e.store(end, Ordering::Relaxed);
                r.store(base, Ordering::Release);
                return;
            }
        }
    }
    if all_written(base, end) {
        commit_and_recycle(base);
    }
}

/// For a thread that found the pool empty: commits a chunk waiting for the collector (one
/// whose events are all written) and returns it, cleared, for the thread to fill next (0 if
/// there is none). Where the program keeps every CPU busy, the collector (nice 19) falls
/// behind; a `pwrite` of a chunk costs the thread about a fifth of what mapping fresh pages
/// of the staging file costs (scripts/bench/pagecache.c: `fpwrite` against `populate`), and
/// the staging file stops growing. Raw system calls only, as chunks.rs.
pub fn commit_one_retired() -> usize {
    let Some(base) = RETIRE.iter().zip(&RETIRE_END).find_map(take_written) else {
        return 0;
    };
    if commit(base) {
        return base;
    }
    // The events file cannot grow: the chunk stays in the staging file as it is.
    unmap(base, chunk_bytes());
    0
}

/// Commits the retired chunks whose events are all written.
fn commit_retired() {
    for slot in RETIRE.iter().zip(&RETIRE_END) {
        if let Some(base) = take_written(slot) {
            commit_and_recycle(base);
        }
    }
}

/// The chunk in this RETIRE slot (and its end), taken out of it, if its events are all
/// written. The collector and threads that found the pool empty ([`commit_one_retired`]) look
/// at the slots at once, and the one that takes a chunk may commit and unmap it: so the slot
/// is taken (CLAIMED) before the chunk is read, and given back if an event in it is still on
/// its way. Without the claim, a scanner could read pages another had just unmapped, or pair
/// a recycled chunk with an older retirement's end. Claimed, the slot is skipped by retiring
/// threads (they take free ones) and by other scanners.
fn take_written((r, e): (&AtomicUsize, &AtomicUsize)) -> Option<usize> {
    let base = r.load(Ordering::Relaxed);
    if base <= CLAIMED
        || r.compare_exchange(base, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return None;
    }
    // The end was stored before the base was released into the slot (see `retire`).
    if all_written(base, e.load(Ordering::Relaxed)) {
        r.store(0, Ordering::Release);
        Some(base)
    } else {
        r.store(base, Ordering::Release);
        None
    }
}

fn wake() {
    WAKE.fetch_add(1, Ordering::Release);
    raw::futex(&WAKE, libc::FUTEX_WAKE, 1, None);
}

/// At the end of the trace (exit, exec): nothing more is prepared (the chunks in the pool stay
/// as they are: cleared, unused chunks of the staging file). Returns the collector's tid, its CPU time in nanoseconds, the
/// chunks threads took from its pool and the ones they prepared themselves (for the meta
/// file).
pub fn finish() -> (i32, u64, u64, u64) {
    STOP.store(true, Ordering::SeqCst);
    let tid = TID.load(Ordering::Relaxed);
    let mut cpu = 0;
    if tid > 0 {
        // The thread's CPU-time clock: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED).
        let clock = (!tid << 3) | 6;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime into a local timespec.
        if unsafe {
            syscall(
                libc::SYS_clock_gettime,
                [
                    clock as usize,
                    &mut ts as *mut libc::timespec as usize,
                    0,
                    0,
                    0,
                    0,
                ],
            )
        } == 0
        {
            cpu = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        }
    }
    (
        tid,
        cpu,
        PREPARED.load(Ordering::Relaxed),
        BY_THREADS.load(Ordering::Relaxed),
    )
}

/// In a fork child: the collector was not copied, and the chunks it held belong to the
/// parent's staging file (the child's mappings of them go; the parent's collector commits
/// the retired ones).
pub fn after_fork() {
    TID.store(0, Ordering::Relaxed);
    let chunk = chunk_bytes();
    for r in READY.iter().chain(RETIRE.iter()).chain(FREE.iter()) {
        let base = r.swap(0, Ordering::Relaxed);
        if base > CLAIMED {
            unmap(base, chunk);
        }
    }
    PREPARED.store(0, Ordering::Relaxed);
    BY_THREADS.store(0, Ordering::Relaxed);
    TAKEN.store(0, Ordering::Relaxed);
}
