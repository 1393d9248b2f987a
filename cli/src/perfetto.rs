//! `instrfn export --format perfetto`: the trace as Perfetto's native protobuf trace, for
//! ui.perfetto.dev and `trace_processor`. Each call is a slice on its thread's track: a
//! TYPE_SLICE_BEGIN event at its entry and a TYPE_SLICE_END event at its end. Uses filter,
//! names, perfetto_packets and sink.
//!
//! The file is a `Trace`: a stream of `TracePacket`s, which perfetto_packets.rs writes (with
//! the field numbers of Perfetto's protos/perfetto/trace/*.proto). The layout:
//! - first, a `ClockSnapshot` of CLOCK_MONOTONIC and CLOCK_REALTIME that makes MONOTONIC the
//!   trace's clock (`primary_trace_clock`): the runtime records MONOTONIC.
//! - per process (pid), a `TrackDescriptor` with its `ProcessDescriptor` (pid, command line).
//! - per thread, one packet sequence (`trusted_packet_sequence_id`). Its first packet clears
//!   the incremental state (`SEQ_INCREMENTAL_STATE_CLEARED`). It sets the `TracePacketDefaults`:
//!   the thread's track uuid, and clock 64 for timestamps. Its `ClockSnapshot` defines clock
//!   64 as an incremental clock equal to MONOTONIC at the thread's first event. So each packet
//!   carries only the nanoseconds since the sequence's previous one. The second packet is the
//!   thread's `TrackDescriptor` (pid, tid, name), a child of its process's track.
//! - then one packet per event. Function names are interned per sequence (`InternedData`
//!   `event_names`, sent with the first event that uses them) and events carry only `name_iid`.
//!   A slice begin costs 12 bytes, an end 10 (with one-byte time deltas).
//!
//! Calls closed by unwinding (longjmp, an exception) and calls still open at the end of the
//! trace end with a debug annotation `closed`. Losses, and entries without exit, are instant
//! events. Exits whose entry lies before the trace (the thread was inside those calls when
//! recording began) are slices from the thread's first event: a first walk over the slot
//! finds them, since their begin comes before everything else. An exit without entry under
//! calls still open (its entry was lost) is an instant event.
//!
//! Slices must nest on a track. When a call ends below calls that stay open (coroutines
//! switching stacks, lost exits), the slices above it end there too, annotated as cut.
//!
//! Output streams: each thread's events are written as they are read. The filters that need
//! a call's length (`--min-duration`, `--time-range`) hold its begin until the call is long
//! enough, or overlaps the range, or ends. So memory is the open calls, plus the events kept
//! while an outer call waits for that decision, plus the names per thread.

use std::collections::{HashMap, VecDeque};

use instrfn_trace::calls::{Call, End, Visitor, trace_end, walk};
use instrfn_trace::{Clock, Process, SourceLine};

use crate::filter::{Filter, FilterArgs};
use crate::names::{FunctionKey, Names};
use crate::perfetto_packets::field::{TYPE_INSTANT, TYPE_SLICE_BEGIN, TYPE_SLICE_END};
use crate::perfetto_packets::{
    Note, Out, ThreadTrack, event, process_track, thread_sequence, trace_clock,
};
use crate::sink::Sink;

/// A counter value as whole nanoseconds of CLOCK_MONOTONIC.
fn mono_ns(clock: &Clock, ts: u64) -> u64 {
    clock.ns(ts).round().max(0.0) as u64
}

/// An instant event's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Name {
    Func(u64),
    Lost,
}

/// What an event is.
#[derive(Debug, Clone, Copy)]
enum What {
    Begin(u64, Option<Note>),
    End(Option<Note>),
    Instant(Name, Note),
}

/// An event waiting to be written, in time order. `keep` is None while a time filter has not
/// decided on its call yet (a begin only).
#[derive(Debug)]
struct Item {
    ts: u64,
    keep: Option<bool>,
    what: What,
}

/// What became of an open call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The filters left it out.
    Dropped,
    /// Its begin is queued at this position, undecided.
    Pending(u64),
    /// Its begin is (or will be) written; its end will be.
    Kept,
    /// Its end was written early (cut).
    Ended,
}

/// A call open on the thread (one per call the walk has open: the same stack).
#[derive(Debug, Clone, Copy)]
struct Open {
    func: u64,
    start: u64,
    state: State,
}

/// The filters that need a call's length: `--min-duration`, `--time-range`.
struct Times {
    min_ns: Option<f64>,
    range: Option<(f64, f64)>,
}

impl Times {
    fn any(&self) -> bool {
        self.min_ns.is_some() || self.range.is_some()
    }

    /// Ns since the process's start, as the filters count.
    fn since_start(clock: &Clock, ts: u64) -> f64 {
        clock.ns(ts) - clock.ns(clock.start.0)
    }

    /// Whether a call starting at `start` is out of the range whatever its end.
    fn out_at_start(&self, clock: &Clock, start: u64) -> bool {
        self.range
            .is_some_and(|(_, hi)| Times::since_start(clock, start) > hi)
    }

    /// Whether a call starting at `start` and still open at `now` passes the filters whatever
    /// its end (it is long enough, and overlaps the range). Its start is in the range.
    fn sure(&self, clock: &Clock, start: u64, now: u64) -> bool {
        let (a, b) = (
            Times::since_start(clock, start),
            Times::since_start(clock, now),
        );
        self.min_ns.is_none_or(|m| b - a >= m) && self.range.is_none_or(|(lo, _)| b >= lo)
    }
}

/// The per-thread state of a packet sequence.
struct Sequence {
    id: u32,
    /// The timestamp of the last packet, in ns: the next packet's delta is from it.
    last_ns: u64,
    names: HashMap<(Name, Option<usize>), u64>,
    locations: HashMap<FunctionKey, u64>,
}

/// A function's name and, with --lines, where it starts.
type Label = (String, Option<SourceLine>);

/// Exits whose entry lies before the trace, per thread of a slot (in the order the threads
/// took it): (function, time), the innermost first.
#[derive(Default)]
struct BeforeTrace {
    threads: Vec<Vec<(u64, u64)>>,
}

impl Visitor for BeforeTrace {
    fn call(&mut self, _call: &Call, _stack: &[u64]) {}
    fn thread(&mut self, _tid: u32, _ts: u64) {
        self.threads.push(Vec::new());
    }
    fn orphan_exit(&mut self, _tid: u32, ts: u64, func: u64, open: &[u64]) {
        // With calls open, a matching entry was lost inside the trace: an instant, not a
        // slice from the start (it could not nest).
        if open.is_empty()
            && let Some(t) = self.threads.last_mut()
        {
            t.push((func, ts));
        }
    }
}

/// Writes one slot's threads as packet sequences.
struct SlotWriter<'a, 'o> {
    out: &'a mut Out<'o>,
    p: &'a Process,
    names: &'a Names,
    labels: &'a mut HashMap<FunctionKey, Label>,
    lines: bool,
    /// The filters without the time ones (decided at a call's entry), and all of them.
    entry: Filter,
    full: Filter,
    times: Times,
    process_uuid: u64,
    before: Vec<Vec<(u64, u64)>>,
    /// Threads of the slot begun so far.
    threads: usize,
    seq: Option<Sequence>,
    tid: u32,
    open: Vec<Open>,
    /// Whether the filters keep each slice begun before the trace (innermost first), and
    /// how many of them have ended.
    before_kept: Vec<bool>,
    before_ended: usize,
    queue: VecDeque<Item>,
    /// The position of the queue's front.
    base: u64,
    bar: &'a indicatif::ProgressBar,
    seen: u64,
}

impl SlotWriter<'_, '_> {
    fn push(&mut self, ts: u64, keep: Option<bool>, what: What) -> u64 {
        self.queue.push_back(Item { ts, keep, what });
        self.base + self.queue.len() as u64 - 1
    }

    fn decide(&mut self, at: u64, keep: bool) {
        if let Some(item) = self.queue.get_mut((at - self.base) as usize) {
            item.keep = Some(keep);
        }
        while self.queue.back().is_some_and(|i| i.keep == Some(false)) {
            self.queue.pop_back();
        }
    }

    /// Writes the queued events that are decided, in order, up to the first undecided one
    /// (which is decided here if the call has been open long enough at `now`).
    fn flush(&mut self, now: u64) {
        while let Some(front) = self.queue.front() {
            match front.keep {
                Some(keep) => {
                    let item = self.queue.pop_front().expect("front");
                    self.base += 1;
                    if keep {
                        self.emit(&item);
                    }
                }
                None => {
                    let base = self.base;
                    let clock = &self.p.clock;
                    let times = &self.times;
                    let Some(o) = self
                        .open
                        .iter_mut()
                        .find(|o| o.state == State::Pending(base))
                    else {
                        // Not open any more: cannot happen (an end decides); never stall.
                        self.queue[0].keep = Some(false);
                        continue;
                    };
                    if !times.sure(clock, o.start, now) {
                        break;
                    }
                    o.state = State::Kept;
                    self.queue[0].keep = Some(true);
                }
            }
        }
        if self.seen >= 1 << 16 {
            self.bar.inc(self.seen);
            self.seen = 0;
        }
    }

    /// Whether `full` keeps a call of `func` from `start` to `end` with `depth` calls below.
    fn keeps(&mut self, func: u64, start: u64, end: u64, depth: usize) -> bool {
        let c = Call {
            tid: self.tid,
            func,
            start,
            end,
            depth: depth as u32,
            self_ticks: 0,
            how: End::Exit,
            outermost: true,
        };
        let names = self.names;
        self.full.keep(&c, &self.p.clock, |f| names.name(f, start))
    }

    /// The name iid of `name` on this sequence, and its string if it is new here.
    fn name_iid(&mut self, name: Name, ts: u64) -> (u64, Option<String>) {
        let (names, labels, lines) = (self.names, &mut *self.labels, self.lines);
        let seq = self.seq.as_mut().expect("a sequence is open");
        let key = match name {
            Name::Func(f) => (name, names.key(f, ts).1),
            Name::Lost => (name, None),
        };
        let next = seq.names.len() as u64 + 1;
        let iid = *seq.names.entry(key).or_insert(next);
        if iid != next {
            return (iid, None);
        }
        let text = match name {
            Name::Func(f) => label(names, labels, lines, f, ts).0.clone(),
            Name::Lost => "events lost".to_string(),
        };
        (iid, Some(text))
    }

    /// The source location iid of function `f` on this sequence (with --lines, where known),
    /// and the location if it is new here.
    fn location_iid(&mut self, f: u64, ts: u64) -> Option<(u64, Option<(String, SourceLine)>)> {
        if !self.lines {
            return None;
        }
        let (name, line) = label(self.names, self.labels, true, f, ts).clone();
        let line = line?;
        let seq = self.seq.as_mut().expect("a sequence is open");
        let next = seq.locations.len() as u64 + 1;
        let iid = *seq.locations.entry(self.names.key(f, ts)).or_insert(next);
        Some((iid, (iid == next).then_some((name, line))))
    }

    /// Writes one event as a packet of the thread's sequence.
    fn emit(&mut self, item: &Item) {
        let ns = mono_ns(&self.p.clock, item.ts);
        let (kind, name, note) = match item.what {
            What::Begin(f, note) => (TYPE_SLICE_BEGIN, Some(Name::Func(f)), note),
            What::End(note) => (TYPE_SLICE_END, None, note),
            What::Instant(name, note) => (TYPE_INSTANT, Some(name), Some(note)),
        };
        let name = name.map(|n| self.name_iid(n, item.ts));
        let location = match item.what {
            What::Begin(f, _) | What::Instant(Name::Func(f), _) => self.location_iid(f, item.ts),
            _ => None,
        };
        let seq = self.seq.as_mut().expect("a sequence is open");
        let delta = ns.saturating_sub(seq.last_ns);
        seq.last_ns = seq.last_ns.max(ns);
        let id = seq.id;
        let name = name.as_ref().map(|(iid, s)| (*iid, s.as_deref()));
        let location = location
            .as_ref()
            .map(|(iid, l)| (*iid, l.as_ref().map(|(f, line)| (f.as_str(), line))));
        event(self.out, id, delta, kind, name, location, note);
    }

    /// Starts the packet sequence of thread `tid`, whose first event is at `ts`.
    fn begin_thread(&mut self, tid: u32, ts: u64) {
        self.end_thread();
        self.tid = tid;
        let id = self.out.sequence();
        let uuid = self.out.uuid();
        let t0 = mono_ns(&self.p.clock, ts);
        let name = self
            .p
            .threads
            .iter()
            .rev()
            .find(|t| t.tid == tid)
            .map(|t| t.name.as_str())
            .unwrap_or("");
        let track = ThreadTrack {
            uuid,
            parent: self.process_uuid,
            pid: self.p.pid,
            tid,
            name,
        };
        thread_sequence(self.out, id, t0, &track);
        self.seq = Some(Sequence {
            id,
            last_ns: t0,
            names: HashMap::new(),
            locations: HashMap::new(),
        });
        // Calls the thread was in when the trace began: slices from its first event, the
        // outermost first.
        let before = self.before.get(self.threads).cloned().unwrap_or_default();
        self.threads += 1;
        let n = before.len();
        self.before_kept = before
            .iter()
            .enumerate()
            .map(|(i, &(f, end))| self.keeps(f, ts, end, n - 1 - i))
            .collect();
        self.before_ended = 0;
        for (i, &(f, _)) in before.iter().enumerate().rev() {
            let keep = self.before_kept[i];
            self.push(ts, Some(keep), What::Begin(f, Some(Note::BeforeTrace)));
        }
        self.flush(ts);
    }

    /// Writes what the thread's sequence still holds.
    fn end_thread(&mut self) {
        if self.seq.is_some() {
            self.flush(u64::MAX);
        }
        self.queue.clear();
        self.open.clear();
    }
}

/// The name and source line of function `f` of the process (looked up once).
fn label<'l>(
    names: &Names,
    labels: &'l mut HashMap<FunctionKey, Label>,
    lines: bool,
    f: u64,
    ts: u64,
) -> &'l Label {
    labels.entry(names.key(f, ts)).or_insert_with(|| {
        (
            names.name(f, ts),
            lines.then(|| names.line(f, ts)).flatten(),
        )
    })
}

impl Visitor for SlotWriter<'_, '_> {
    fn thread(&mut self, tid: u32, ts: u64) {
        self.begin_thread(tid, ts);
    }

    fn enter(&mut self, tid: u32, ts: u64, stack: &[u64]) {
        // The event entered before is decided now (unless it was an entry without exit).
        self.flush(ts);
        self.seen += 1;
        let depth = stack.len() - 1;
        let func = stack[depth];
        let c = Call {
            tid,
            func,
            start: ts,
            end: ts,
            depth: depth as u32,
            self_ticks: 0,
            how: End::Exit,
            outermost: true,
        };
        let names = self.names;
        let state = if !self.entry.keep(&c, &self.p.clock, |f| names.name(f, ts))
            || self.times.out_at_start(&self.p.clock, ts)
        {
            State::Dropped
        } else if self.times.any() {
            State::Pending(self.push(ts, None, What::Begin(func, None)))
        } else {
            self.push(ts, Some(true), What::Begin(func, None));
            State::Kept
        };
        self.open.push(Open {
            func,
            start: ts,
            state,
        });
    }

    fn call(&mut self, c: &Call, _stack: &[u64]) {
        let i = c.depth as usize;
        if c.how == End::NoExit {
            // Entered just now: its begin is the last event queued, and becomes an instant.
            let o = self.open.remove(i);
            if o.state != State::Dropped {
                let names = self.names;
                let keep = self.full.keep(c, &self.p.clock, |f| names.name(f, c.start));
                if let Some(last) = self.queue.back_mut() {
                    last.what = What::Instant(Name::Func(c.func), Note::NoExit);
                    last.keep = Some(keep);
                }
            }
            self.flush(c.end);
            return;
        }
        self.seen += 1;
        // Calls still open above it end here too: slices nest.
        for j in (i + 1..self.open.len()).rev() {
            let o = self.open[j];
            let keep = match o.state {
                State::Kept => true,
                State::Pending(at) => {
                    let keep = self.keeps(o.func, o.start, c.end, j);
                    self.decide(at, keep);
                    keep
                }
                State::Dropped | State::Ended => continue,
            };
            if keep {
                self.push(c.end, Some(true), What::End(Some(Note::Cut)));
                self.open[j].state = State::Ended;
            } else {
                self.open[j].state = State::Dropped;
            }
        }
        let o = self.open.remove(i);
        let note = match c.how {
            End::Exit | End::NoExit => None,
            End::Unwound => Some(Note::Unwound),
            End::Open => Some(Note::Open),
        };
        let keep = match o.state {
            State::Kept => true,
            State::Pending(at) => {
                let names = self.names;
                let keep = self.full.keep(c, &self.p.clock, |f| names.name(f, c.start));
                self.decide(at, keep);
                keep
            }
            State::Dropped | State::Ended => false,
        };
        if keep {
            self.push(c.end, Some(true), What::End(note));
        }
        self.flush(c.end);
    }

    fn lost(&mut self, tid: u32, ts: u64, count: u64) {
        self.flush(ts);
        if self.full.thread(tid) {
            self.push(ts, Some(true), What::Instant(Name::Lost, Note::Lost(count)));
        }
        self.flush(ts);
    }

    fn orphan_exit(&mut self, _tid: u32, ts: u64, func: u64, open: &[u64]) {
        self.flush(ts);
        self.seen += 1;
        if open.is_empty() {
            // The innermost slice begun before the trace that is still open.
            let i = self.before_ended;
            self.before_ended += 1;
            if self.before_kept.get(i) == Some(&true) {
                self.push(ts, Some(true), What::End(None));
            }
        } else {
            let keep = self.keeps(func, ts, ts, open.len());
            self.push(
                ts,
                Some(keep),
                What::Instant(Name::Func(func), Note::NoEntry),
            );
        }
        self.flush(ts);
    }
}

/// Writes the calls of `procs` that `filter` keeps as a Perfetto trace; function names
/// demangled or not, with `lines` their source locations.
pub fn write(
    procs: &[&Process],
    filter: &FilterArgs,
    demangle: bool,
    lines: bool,
    sink: &mut Sink,
    bar: &indicatif::ProgressBar,
) -> Result<(), String> {
    let mut out = Out {
        sink,
        buf: Vec::with_capacity(1 << 17),
        error: None,
        next_sequence: 0,
        next_uuid: 0,
    };
    // The trace's clock: MONOTONIC, tied to REALTIME by the earliest process's start.
    if let Some(first) = procs.iter().min_by_key(|p| p.clock.start.1) {
        trace_clock(&mut out, first.clock.start.1, first.clock.realtime_start);
    }
    let untimed = FilterArgs {
        min_duration: None,
        time_range: None,
        ..filter.clone()
    };
    let mut process_uuids: HashMap<u32, u64> = HashMap::new();
    for p in procs {
        let names = Names::of(p, demangle, lines);
        let process_uuid = match process_uuids.get(&p.pid) {
            Some(&u) => u,
            None => {
                let u = out.uuid();
                process_track(&mut out, p, u);
                process_uuids.insert(p.pid, u);
                u
            }
        };
        let mut labels = HashMap::new();
        for slot in p.slots() {
            let mut before = BeforeTrace::default();
            walk(p, slot, trace_end(p), &mut before).map_err(|e| e.to_string())?;
            let mut w = SlotWriter {
                out: &mut out,
                p,
                names: &names,
                labels: &mut labels,
                lines,
                entry: Filter::new(&untimed),
                full: Filter::new(filter),
                times: Times {
                    min_ns: filter.min_duration,
                    range: filter.time_range,
                },
                process_uuid,
                before: before.threads,
                threads: 0,
                seq: None,
                tid: 0,
                open: Vec::new(),
                before_kept: Vec::new(),
                before_ended: 0,
                queue: VecDeque::new(),
                base: 0,
                bar,
                seen: 0,
            };
            let r = walk(p, slot, trace_end(p), &mut w);
            w.end_thread();
            bar.inc(w.seen);
            if let Some(e) = out.error.take() {
                return Err(e);
            }
            r.map_err(|e| e.to_string())?;
        }
    }
    out.flush();
    match out.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
