//! Calls from events. One thread slot's entry and exit events are matched into calls, with
//! their duration and self time. Calls go to a [`Visitor`] in the order they end. `instrfn
//! report` and `instrfn export` build on this. Memory grows with a thread's deepest stack, not
//! with the length of the trace.
//!
//! Matching: an exit closes the newest open call of its function. That is normally the newest
//! call of all. When it is not (coroutines interleave calls on one thread, or events were
//! lost), the calls above it stay open and close with their own exits. An exit that matches no
//! open call (its entry was lost) is counted and otherwise ignored. `unwound` closes like an
//! exit: the frame was left by longjmp, an exception or thread exit. An entry without exit is
//! a call of unknown length. Calls still open when the slot's events end close at the end of
//! the trace ([`End::Open`]).
//!
//! Uses error, event and process.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::error::Error;
use crate::event::Kind;
use crate::process::Process;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum End {
    /// It returned.
    Exit,
    /// Its frame was left by unwinding (longjmp, an exception, a panic, thread exit).
    Unwound,
    /// Still open when the trace ended (or when its thread's slot went to another thread).
    Open,
    /// Recorded as an entry without exit: its length is unknown (`end == start`).
    NoExit,
}

/// One call of one function on one thread. Times are counter values (the process's
/// [`crate::Clock`] converts them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub tid: u32,
    /// The function's runtime address.
    pub func: u64,
    pub start: u64,
    pub end: u64,
    /// Calls open below it on its thread when it started (0: outermost).
    pub depth: u32,
    /// Its own time: its length minus that of the calls it made (counter ticks).
    pub self_ticks: u64,
    pub how: End,
    /// No other call of the same function is open below it (its length counts towards the
    /// function's total time; a recursive call's is inside its outermost one's).
    pub outermost: bool,
}

impl Call {
    /// Its length in counter ticks.
    pub fn ticks(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
}

/// What a walk reports, besides calls.
pub trait Visitor {
    /// A call ended. `stack` holds the functions of the calls open below it, outermost first,
    /// then its own.
    fn call(&mut self, call: &Call, stack: &[u64]);
    /// A call started (`stack` as for [`Visitor::call`], ending with it).
    fn enter(&mut self, _tid: u32, _ts: u64, _stack: &[u64]) {}
    /// `count` events of thread `tid` were lost just before `ts`.
    fn lost(&mut self, _tid: u32, _ts: u64, _count: u64) {}
    /// Thread `tid` starts writing in this slot at `ts` (first, or after another thread).
    fn thread(&mut self, _tid: u32, _ts: u64) {}
    /// An exit (or unwound event) of `func` at `ts` matched no open call: its entry was lost,
    /// or lies before the trace. `open` holds the functions of the calls open on the thread
    /// (outermost first). Counted in [`Walked::orphan_exits`] too.
    fn orphan_exit(&mut self, _tid: u32, _ts: u64, _func: u64, _open: &[u64]) {}
}

/// Counts of a walk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Walked {
    /// Function events read (entries, exits, unwound; not thread or loss markers).
    pub events: u64,
    /// Exits (or unwound events) whose entry was not open: lost, or recorded before the trace.
    pub orphan_exits: u64,
    /// Events reported lost by loss markers.
    pub lost: u64,
}

#[derive(Clone, Copy)]
struct Frame {
    func: u64,
    start: u64,
    children: u64,
}

/// A hash for function addresses (multiplicative: they are distinct, well spread integers).
#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by function address.
pub type AddrMap<V> = HashMap<u64, V, BuildHasherDefault<AddrHasher>>;

struct Thread {
    tid: u32,
    stack: Vec<Frame>,
    funcs: Vec<u64>,
    /// Open calls per function (recursion).
    active: AddrMap<u32>,
}

impl Thread {
    fn new(tid: u32) -> Thread {
        Thread {
            tid,
            stack: Vec::new(),
            funcs: Vec::new(),
            active: AddrMap::default(),
        }
    }

    fn enter(&mut self, func: u64, ts: u64, v: &mut impl Visitor) {
        self.stack.push(Frame {
            func,
            start: ts,
            children: 0,
        });
        self.funcs.push(func);
        *self.active.entry(func).or_insert(0) += 1;
        v.enter(self.tid, ts, &self.funcs);
    }

    /// Closes the call at stack index `i` (the calls above it stay open).
    fn close(&mut self, i: usize, ts: u64, how: End, v: &mut impl Visitor) {
        let f = self.stack[i];
        let end = ts.max(f.start);
        let ticks = end - f.start;
        let active = self
            .active
            .get_mut(&f.func)
            .expect("an open call is active");
        *active -= 1;
        let outermost = *active == 0;
        let call = Call {
            tid: self.tid,
            func: f.func,
            start: f.start,
            end,
            depth: i as u32,
            self_ticks: ticks.saturating_sub(f.children),
            how,
            outermost,
        };
        if i + 1 == self.stack.len() {
            v.call(&call, &self.funcs);
        } else {
            // Rare (interleaved coroutines, lost events): report it with its own stack.
            let mut own: Vec<u64> = self.funcs[..i].to_vec();
            own.push(f.func);
            v.call(&call, &own);
        }
        self.stack.remove(i);
        self.funcs.remove(i);
        if i > 0 {
            self.stack[i - 1].children += ticks;
        }
    }

    fn close_all(&mut self, ts: u64, v: &mut impl Visitor) {
        while let Some(i) = self.stack.len().checked_sub(1) {
            self.close(i, ts, End::Open, v);
        }
    }
}

/// Walks the events of `slot` of `p`, calling `v` for every call as it ends; calls still open
/// at the end close at `end` (the counter value the trace ends at: [`trace_end`]).
pub fn walk(p: &Process, slot: u32, end: u64, v: &mut impl Visitor) -> Result<Walked, Error> {
    let mut walked = Walked::default();
    let mut events = p.events(slot);
    let mut thread: Option<Thread> = None;
    let mut last = 0;
    while let Some(e) = events.next() {
        let e = e?;
        if !matches!(e.kind, Kind::Thread | Kind::Lost) {
            walked.events += 1;
        }
        last = last.max(e.ts);
        let tid = events.tid();
        if thread.as_ref().is_none_or(|t| t.tid != tid) {
            if let Some(mut t) = thread.take() {
                t.close_all(e.ts, v);
            }
            thread = Some(Thread::new(tid));
            v.thread(tid, e.ts);
        }
        let t = thread.as_mut().expect("set above");
        match e.kind {
            Kind::Entry => t.enter(e.value, e.ts, v),
            Kind::Exit | Kind::Unwound => {
                let how = if e.kind == Kind::Exit {
                    End::Exit
                } else {
                    End::Unwound
                };
                match t.stack.iter().rposition(|f| f.func == e.value) {
                    Some(i) => t.close(i, e.ts, how, v),
                    None => {
                        walked.orphan_exits += 1;
                        v.orphan_exit(tid, e.ts, e.value, &t.funcs);
                    }
                }
            }
            Kind::EntryNoExit => {
                t.enter(e.value, e.ts, v);
                let i = t.stack.len() - 1;
                t.close(i, e.ts, End::NoExit, v);
            }
            Kind::Lost => {
                walked.lost += e.value;
                v.lost(tid, e.ts, e.value);
            }
            Kind::Thread => {}
        }
    }
    if let Some(mut t) = thread {
        t.close_all(end.max(last), v);
    }
    Ok(walked)
}

/// The counter value a process's trace ends at, if it wrote its `end` line (0 if not: a
/// process that was killed; [`walk`] then ends each slot at its last event).
pub fn trace_end(p: &Process) -> u64 {
    p.clock.end.map_or(0, |(counter, _)| counter)
}
