//! Triggers (INSTRFN_TRIGGER, ring mode): a snapshot when a call of a chosen function lasts
//! longer than its trigger's duration.
//!
//! The threads do nothing for it. A watcher thread of the runtime reads every ring behind its
//! writer, once a millisecond, and follows each thread's calls from the events: entries on a
//! small stack per slot, exits matched to them by function. An exit that closes a call longer
//! than a trigger's duration, of a function whose name matches its pattern, takes a snapshot
//! on the watcher thread (at most INSTRFN_TRIGGER_LIMIT per second). The snapshot's `trigger`
//! line names the call, and says whether the thread's window reaches back to its entry.
//!
//! The watcher reads a chunk as a snapshot does: its sequence number before and after, and
//! what it read counts only if the number held. A short entry that is a thread's newest event
//! may still become a call word (docs/trace-format.md): the watcher stops before it.
//!
//! Names come from the ELF symbols of the object that holds the function (the executable, or
//! a library its `module` line in the meta file names), read with raw system calls: the
//! watcher has no thread-local storage and takes no lock. Uses `ring`, `meta`, `files`,
//! `collector` (the thread), `xray::elf` (symbols), and the layers below the outputs.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

use super::collector;
use super::files;
use super::meta::clock_pair;
use super::ring::{self, Fired};
use crate::abi::format::*;
use crate::base::StackBuf;
use crate::base::glob::matches;
use crate::sys;
use crate::sys::file::File;
use crate::sys::objects::{MAX_PATH, Module};
use crate::sys::raw::{self, syscall};
use crate::thread;
use crate::xray::elf::{Elf, Symbols};

/// Triggers at most.
const MAX_TRIGGERS: usize = 8;
/// Longest pattern kept.
const MAX_PATTERN: usize = 256;
/// Calls followed per slot; deeper ones are counted, not kept.
const DEPTH: usize = 120;
/// Slots followed: a slot beyond them has no triggers.
const SLOTS: usize = 1 << 14;
/// Functions whose verdict is kept (a power of two).
const VERDICTS: usize = 1 << 12;
/// Objects whose symbols are kept.
const OBJECTS: usize = 16;
/// How often the watcher reads the rings.
const PERIOD_NS: u64 = 1_000_000;

/// INSTRFN_TRIGGER and INSTRFN_TRIGGER_LIMIT, set once before the watcher starts.
struct Table {
    patterns: [[u8; MAX_PATTERN]; MAX_TRIGGERS],
    lens: [usize; MAX_TRIGGERS],
    ns: [u64; MAX_TRIGGERS],
    count: usize,
    limit: u32,
}

struct Shared(UnsafeCell<Table>);
// SAFETY: written only by `configure`, at start-up before the watcher thread exists (and
// again identically in no other place); read only by the watcher.
unsafe impl Sync for Shared {}

static TABLE: Shared = Shared(UnsafeCell::new(Table {
    patterns: [[0; MAX_PATTERN]; MAX_TRIGGERS],
    lens: [0; MAX_TRIGGERS],
    ns: [0; MAX_TRIGGERS],
    count: 0,
    limit: 1,
}));
/// The watcher's state mapping (0: not made yet).
static STATE: AtomicUsize = AtomicUsize::new(0);
/// A pass asked of the watcher (bumped by [`flush`]; it sleeps on this word), and the last
/// one it finished.
static ASKED: AtomicU32 = AtomicU32::new(0);
static DONE: AtomicU32 = AtomicU32::new(0);
/// Whether the watcher runs in this process.
static RUNNING: AtomicBool = AtomicBool::new(false);
/// The counter and CLOCK_MONOTONIC when it was started: its pace is measured from there.
static START: AtomicU64 = AtomicU64::new(0);
static START_NS: AtomicU64 = AtomicU64::new(0);

fn table() -> &'static Table {
    // SAFETY: see `Shared`.
    unsafe { &*TABLE.0.get() }
}

/// Sets the triggers (start-up, before the trace starts). Says in one line what it cannot
/// keep.
pub fn configure<'a>(triggers: impl Iterator<Item = (&'a [u8], u64)>, limit: u32) {
    // SAFETY: start-up, one thread, no watcher yet (see `Shared`).
    let t = unsafe { &mut *TABLE.0.get() };
    t.count = 0;
    t.limit = limit.max(1);
    for (pattern, ns) in triggers {
        if t.count == MAX_TRIGGERS || pattern.len() > MAX_PATTERN {
            message!(
                "INSTRFN_TRIGGER: keeping {MAX_TRIGGERS} triggers of patterns up to \
                 {MAX_PATTERN} bytes; ignoring the rest"
            );
            break;
        }
        t.patterns[t.count][..pattern.len()].copy_from_slice(pattern);
        t.lens[t.count] = pattern.len();
        t.ns[t.count] = ns;
        t.count += 1;
    }
}

/// Whether any trigger is set.
pub fn wanted() -> bool {
    ring::on() && table().count > 0
}

/// Starts the watcher (ring mode's start, and again in a fork child).
pub fn start() {
    let (c, m, _) = clock_pair();
    START.store(c, Ordering::Relaxed);
    START_NS.store(m, Ordering::Relaxed);
    let runs = wanted() && collector::start_thread(watch, "trigger", "no triggers fire");
    RUNNING.store(runs, Ordering::Release);
}

/// At the end of the image: one last pass of the watcher over the rings, so that a call that
/// ended just before is seen. Waits for it at most 2 s (a watcher starved of CPU time).
pub fn flush() {
    if !RUNNING.load(Ordering::Acquire) {
        return;
    }
    let want = ASKED.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
    raw::futex(&ASKED, libc::FUTEX_WAKE, 1, None);
    let ms = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    for _ in 0..2000 {
        let done = DONE.load(Ordering::Acquire);
        if done.wrapping_sub(want) as i32 >= 0 {
            return;
        }
        raw::futex(&DONE, libc::FUTEX_WAIT, done, Some(&ms));
    }
}

/// What the watcher knows of one slot.
#[repr(C)]
struct Slot {
    /// The writer's tid when last read (0: not read yet).
    tid: u32,
    /// Calls open: the first DEPTH are in `stack`.
    depth: u32,
    /// The chunk read next, and where in it.
    seq: u64,
    pos: usize,
    /// The time of the first event read since the watcher last lost events (0: none yet): a
    /// call whose exit comes without its entry began before it.
    since: u64,
    /// (function, entry time) of the open calls.
    stack: [(usize, u64); DEPTH],
}

/// The watcher's memory, zeroed: a slot per ring, and the verdicts.
#[repr(C)]
struct State {
    /// (function, verdict): bit i set if trigger i's pattern matches; bit 15: decided.
    verdicts: [(usize, u16); VERDICTS],
    slots: [Slot; SLOTS],
}

/// An object's code range, load bias and symbols.
struct Object {
    start: usize,
    end: usize,
    bias: usize,
    symbols: Option<Symbols>,
}

const DECIDED: u16 = 1 << 15;

/// The watcher thread: reads the rings every millisecond, forever.
extern "C" fn watch(_: usize) -> ! {
    collector::name_this_thread(c"instrfn-trigger");
    let mut state = STATE.load(Ordering::Relaxed);
    if state == 0 {
        // Zeroed, and untouched pages cost nothing: a slot's page is touched when it is used.
        match sys::mem::map_anon(core::mem::size_of::<State>()) {
            Ok(p) => state = p.as_ptr() as usize,
            Err(e) => {
                message!(
                    "cannot map the trigger watcher's state: {}; no triggers fire",
                    sys::Errno(e)
                );
                RUNNING.store(false, Ordering::Release);
                park();
            }
        }
        STATE.store(state, Ordering::Relaxed);
    } else {
        // A fork child: the parent's slots described the parent's rings.
        // SAFETY: our own mapping of a State; the watcher is its only user.
        unsafe { core::ptr::write_bytes(state as *mut u8, 0, core::mem::size_of::<State>()) };
    }
    // SAFETY: the zeroed mapping is a valid State (integers only); only this thread uses it.
    let state = unsafe { &mut *(state as *mut State) };
    let mut objects: [Option<Object>; OBJECTS] = [const { None }; OBJECTS];
    let t = table();
    let (c0, m0) = (
        START.load(Ordering::Relaxed),
        START_NS.load(Ordering::Relaxed),
    );
    let mut ticks = [u64::MAX; MAX_TRIGGERS];
    let mut last_snapshot: Option<u64> = None;
    let gap = 1_000_000_000 / t.limit as u64;
    let period = libc::timespec {
        tv_sec: 0,
        tv_nsec: PERIOD_NS as libc::c_long,
    };
    loop {
        let asked = ASKED.load(Ordering::Acquire);
        if asked == DONE.load(Ordering::Relaxed) {
            raw::futex(&ASKED, libc::FUTEX_WAIT, asked, Some(&period));
        }
        let asked = ASKED.load(Ordering::Acquire);
        let (c, m, _) = clock_pair();
        if m > m0 + PERIOD_NS && c > c0 {
            // Ticks per trigger, from the counter's pace since the watcher started.
            for (ticks, &ns) in ticks.iter_mut().zip(&t.ns[..t.count]) {
                *ticks = (ns as u128 * (c - c0) as u128 / (m - m0) as u128) as u64;
            }
        }
        let least = ticks[..t.count].iter().copied().min().unwrap_or(u64::MAX);
        let mut fired: Option<(Fired<'static>, usize)> = None;
        for block in thread::blocks() {
            let Some((base, n, size)) = ring::view(block) else {
                continue;
            };
            let index = block.index as usize;
            if index >= SLOTS {
                continue;
            }
            let slot = &mut state.slots[index];
            let mut check = |func: usize, entry: u64, exit: u64, seen: bool| {
                let len = exit.wrapping_sub(entry);
                if len < least || fired.is_some() {
                    return;
                }
                let verdict = verdict(&mut state.verdicts, &mut objects, func, t);
                for (i, &at_least) in ticks[..t.count].iter().enumerate() {
                    if verdict & (1 << i) != 0 && len >= at_least {
                        let ns = (len as u128 * (m - m0) as u128 / (c - c0).max(1) as u128) as u64;
                        fired = Some((
                            Fired {
                                slot: index as u32,
                                tid: 0,
                                func,
                                entry,
                                exit,
                                seen,
                                ns,
                                pattern: &t.patterns[i][..t.lens[i]],
                            },
                            i,
                        ));
                        return;
                    }
                }
            };
            follow(slot, base, n, size, least, &mut check);
            if let Some((f, _)) = fired.as_mut()
                && f.slot == index as u32
                && f.tid == 0
            {
                f.tid = slot.tid;
            }
        }
        if let Some((f, _)) = fired
            && last_snapshot.is_none_or(|at| m >= at + gap)
        {
            last_snapshot = Some(m);
            ring::snapshot_for(b"trigger", Some(&f));
        }
        DONE.store(asked, Ordering::Release);
        raw::futex(&DONE, libc::FUTEX_WAKE, 1, None);
    }
}

/// Reads the ring at `base` (n chunks of `size` bytes) from where `slot` stopped, up to its
/// writer, and calls `check(function, entry, exit, entry seen)` for each call at least
/// `least` ticks long that ended there (entry not seen: the call began before that time).
fn follow(
    slot: &mut Slot,
    base: usize,
    n: usize,
    size: usize,
    least: u64,
    check: &mut impl FnMut(usize, u64, u64, bool),
) {
    let read = |at: usize| -> u64 {
        // SAFETY: inside the ring mapping, which stays mapped while the process lives (a fork
        // child's watcher starts afresh); its writer may store meanwhile.
        unsafe { (at as *const u64).read_volatile() }
    };
    let n64 = n as u64;
    // SAFETY: the ring header's tid word, as `read`.
    let tid = unsafe { ((base + RH_TID) as *const u32).read_volatile() };
    let mut newest = read(base + RH_NEWEST);
    fence(Ordering::Acquire);
    if newest == SEQ_REWRITING {
        return; // no chunk yet
    }
    if slot.tid != tid {
        // A new writer (or the first look): no call of its is open yet.
        slot.tid = tid;
        slot.depth = 0;
        restart(slot, newest);
    } else if newest >= slot.seq.saturating_add(n64) {
        restart(slot, newest);
    }
    for _ in 0..2 * n {
        let chunk = base + RING_HEADER + (slot.seq % n64) as usize * size;
        let seq = read(chunk + HDR_SEQ);
        if seq != slot.seq {
            if seq != SEQ_REWRITING && seq < slot.seq && slot.seq < newest {
                // A chunk the writer skipped: it kept older events.
                slot.seq += 1;
                slot.pos = CHUNK_HEADER;
                continue;
            }
            if seq == SEQ_REWRITING || seq > slot.seq {
                // Rewritten since: the watcher fell a ring behind.
                newest = read(base + RH_NEWEST);
                fence(Ordering::Acquire);
                restart(slot, newest);
            }
            return;
        }
        fence(Ordering::Acquire);
        let done = slot.seq < newest;
        let tbase = read(chunk + HDR_TBASE);
        let cbase = read(chunk + HDR_CBASE) as usize;
        // Calls that end here are checked once the chunk proves unchanged.
        // Only calls at least `least` long: few, so a small array holds a pass's.
        let mut ended: [(usize, u64, u64, bool); 32] = [(0, 0, 0, true); 32];
        let mut count = 0;
        // What was read counts only if the chunk proves unchanged: the open calls before.
        let (depth, saved) = (slot.depth, slot.stack);
        let mut pos = slot.pos.max(CHUNK_HEADER);
        while pos + 8 <= size {
            let w = read(chunk + pos);
            if w == 0 {
                break;
            }
            let tag = w as usize & ((1 << EV_TAG_BITS) - 1);
            let (kind, func, ts, len) = if tag == EV_TAG_LONG && w as usize & EV_CALL_MARK == 0 {
                if pos + 16 > size {
                    break;
                }
                let w1 = read(chunk + pos + 8);
                if w1 == 0 {
                    break;
                }
                let kind = (w >> EV_TAG_BITS) as usize & 7;
                let ts = (w1 & !3) | ((w >> EV_TS_SHIFT) & 3);
                (kind, (w >> EV_LONG_SHIFT) as usize, ts, 16)
            } else if tag == EV_TAG_LONG {
                // A call word: the whole call.
                let v = (w >> EV_LONG_SHIFT) << EV_CALL_LOW_BITS
                    | (w >> EV_TAG_BITS) & ((1 << EV_CALL_LOW_BITS) - 1);
                let t0 = tbase.wrapping_add(v & ((1 << EV_CALL_T0_BITS) - 1));
                let d = (v >> EV_CALL_T0_BITS) & ((1 << EV_CALL_DUR_BITS) - 1);
                let f = (cbase as u64)
                    .wrapping_add(EV_CALL_FN_OFFSET)
                    .wrapping_add(v >> (EV_CALL_T0_BITS + EV_CALL_DUR_BITS));
                if d >= least && count < ended.len() {
                    ended[count] = (f as usize, t0, t0.wrapping_add(d), true);
                    count += 1;
                }
                pos += 8;
                continue;
            } else {
                if tag == EV_TAG_ENTRY && !done && (pos + 16 > size || read(chunk + pos + 8) == 0) {
                    // The writer's newest event: it may still become a call word.
                    break;
                }
                let kind = if tag == EV_TAG_ENTRY {
                    EV_ENTRY
                } else {
                    EV_EXIT
                };
                let ts = tbase.wrapping_add((w >> EV_TAG_BITS) & ((1 << EV_TIME_BITS) - 1));
                (
                    kind,
                    cbase.wrapping_add((w >> EV_SHORT_FN_SHIFT) as usize),
                    ts,
                    8,
                )
            };
            pos += len;
            if slot.since == 0 {
                slot.since = ts;
            }
            match kind {
                EV_ENTRY => {
                    if (slot.depth as usize) < DEPTH {
                        slot.stack[slot.depth as usize] = (func, ts);
                    }
                    slot.depth = slot.depth.saturating_add(1);
                }
                EV_EXIT | EV_UNWOUND => {
                    if slot.depth as usize > DEPTH {
                        slot.depth -= 1;
                    } else if let Some(i) = (0..slot.depth as usize)
                        .rev()
                        .find(|&i| slot.stack[i].0 == func)
                    {
                        if ts.wrapping_sub(slot.stack[i].1) >= least && count < ended.len() {
                            ended[count] = (func, slot.stack[i].1, ts, true);
                            count += 1;
                        }
                        slot.depth = i as u32;
                    } else if ts.wrapping_sub(slot.since) >= least && count < ended.len() {
                        // Begun before `since`: at least this long.
                        ended[count] = (func, slot.since, ts, false);
                        count += 1;
                    }
                }
                EV_THREAD => slot.depth = 0,
                _ => {}
            }
        }
        fence(Ordering::Acquire);
        if read(chunk + HDR_SEQ) != slot.seq {
            // Rewritten while read: what was read may be torn.
            slot.depth = depth;
            slot.stack = saved;
            newest = read(base + RH_NEWEST);
            fence(Ordering::Acquire);
            restart(slot, newest);
            return;
        }
        slot.pos = pos;
        for &(f, a, b, seen) in &ended[..count] {
            check(f, a, b, seen);
        }
        if !done {
            return;
        }
        slot.seq += 1;
        slot.pos = CHUNK_HEADER;
    }
}

/// Follows the ring again from the start of its newest chunk (the watcher fell a ring
/// behind). The calls it saw open stay open: their exits are still to come, and a call whose
/// exit was missed is closed when a caller's exit is matched below it.
fn restart(slot: &mut Slot, newest: u64) {
    slot.seq = newest;
    slot.pos = CHUNK_HEADER;
    slot.since = 0;
}

/// Which triggers' patterns match the function at `func` (bit i: trigger i), decided once.
fn verdict(
    verdicts: &mut [(usize, u16); VERDICTS],
    objects: &mut [Option<Object>; OBJECTS],
    func: usize,
    t: &Table,
) -> u16 {
    let home = (func >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52;
    for probe in 0..VERDICTS {
        let e = &mut verdicts[(home + probe) & (VERDICTS - 1)];
        if e.1 & DECIDED != 0 && e.0 == func {
            return e.1 & !DECIDED;
        }
        if e.1 & DECIDED == 0 {
            let mut name = StackBuf::<1024>::new();
            let mut v = 0;
            if name_of(objects, func, &mut name) {
                for i in 0..t.count {
                    if matches(&t.patterns[i][..t.lens[i]], name.as_bytes()) {
                        v |= 1 << i;
                    }
                }
            }
            *e = (func, v | DECIDED);
            return v;
        }
    }
    0
}

/// The name of the function that holds `func`, from its object's symbols.
fn name_of(objects: &mut [Option<Object>; OBJECTS], func: usize, out: &mut StackBuf<1024>) -> bool {
    if let Some(o) = objects
        .iter()
        .flatten()
        .find(|o| o.start <= func && func < o.end)
    {
        return o
            .symbols
            .as_ref()
            .is_some_and(|s| s.name_containing((func - o.bias) as u64, out));
    }
    let Some(free) = objects.iter_mut().find(|o| o.is_none()) else {
        return false;
    };
    let exe = Module::executable();
    let mut path = StackBuf::<{ MAX_PATH + 1 }>::new();
    let (start, end, bias) = if exe.contains(func) {
        path.push(b"/proc/self/exe");
        let (lo, hi) = exe.code_range();
        (lo, hi, exe.bias)
    } else if let Some(m) = module_line(func, &mut path) {
        m
    } else {
        return false;
    };
    let symbols = path
        .as_cstr()
        .and_then(Elf::open)
        .and_then(|elf| Symbols::load(&elf));
    let known = symbols
        .as_ref()
        .is_some_and(|s| s.name_containing((func - bias) as u64, out));
    *free = Some(Object {
        start,
        end,
        bias,
        symbols,
    });
    known
}

/// The meta file's `module` line of the object whose code holds `func`: (start, end, bias),
/// its path into `path`.
fn module_line(
    func: usize,
    path: &mut StackBuf<{ MAX_PATH + 1 }>,
) -> Option<(usize, usize, usize)> {
    let mut meta = StackBuf::<1200>::new();
    files::with_path(|dir, name| {
        meta.push(dir);
        meta.push(b"/");
        meta.push(name);
        meta.push(b".meta");
    });
    let file = File::open(meta.as_cstr()?)?;
    let mut block = [0u8; 4096];
    let mut line = [0u8; 4096];
    let mut len = 0usize;
    loop {
        let n = file.read(&mut block);
        if n <= 0 {
            return None;
        }
        for &b in &block[..n as usize] {
            if b != b'\n' {
                if len < line.len() {
                    line[len] = b;
                }
                len += 1;
                continue;
            }
            let whole = len <= line.len();
            let l = &line[..len.min(line.len())];
            len = 0;
            let mut w = l.split(|&b| b == b' ');
            if !whole || w.next() != Some(&b"module"[..]) {
                continue;
            }
            let (Some(bias), Some(start), Some(end), Some(p)) = (
                w.next().and_then(hex),
                w.next().and_then(hex),
                w.next().and_then(hex),
                w.next(),
            ) else {
                continue;
            };
            if start <= func && func < end {
                decode_word(p, path);
                return Some((start, end, bias));
            }
        }
    }
}

/// A `0x…` number.
fn hex(w: &[u8]) -> Option<usize> {
    let d = w.strip_prefix(b"0x")?;
    let mut v = 0usize;
    for &b in d {
        v = v.checked_mul(16)? + (b as char).to_digit(16)? as usize;
    }
    Some(v)
}

/// A meta word, its `%XX` escapes decoded.
fn decode_word(w: &[u8], out: &mut StackBuf<{ MAX_PATH + 1 }>) {
    let mut i = 0;
    while i < w.len() {
        if w[i] == b'%'
            && i + 2 < w.len()
            && let (Some(a), Some(b)) = (
                (w[i + 1] as char).to_digit(16),
                (w[i + 2] as char).to_digit(16),
            )
        {
            out.push(&[(a * 16 + b) as u8]);
            i += 3;
        } else {
            out.push(&w[i..i + 1]);
            i += 1;
        }
    }
}

fn sleep(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: nanosleep(2) of a local timespec.
    unsafe {
        syscall(
            libc::SYS_nanosleep,
            [&ts as *const libc::timespec as usize, 0, 0, 0, 0, 0],
        )
    };
}

/// Sleeps for good (the watcher cannot work; the process's exit ends it).
fn park() -> ! {
    loop {
        sleep(3_600_000_000_000);
    }
}
