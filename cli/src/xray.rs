//! `instrfn export --format xray`: the trace as compiler-rt's basic-mode ("naive") XRay log.
//! `llvm-xray account|convert|stack|graph -instr_map BINARY` read it as they read a log that
//! compiler-rt wrote.
//!
//! The file (compiler-rt `include/xray/xray_records.h`), little-endian:
//! - a 32-byte header: version 3 (u16: the version basic mode writes, records carry the pid),
//!   type 0 (u16: basic mode), flags (u32: bit 0 constant TSC, bit 1 nonstop TSC), the
//!   counter's ticks per second (u64), 16 bytes of zero;
//! - 32-byte records: record type 0 (u16), CPU (u8, written 0: not recorded), entry type (u8:
//!   0 entry, 1 exit), function id (i32), the raw counter (u64), thread id (u32), process id
//!   (u32), 8 bytes of zero.
//!
//! Function ids are those of the executable's instrumentation map (instrfn_trace::xray).
//!
//! Records are in time order over all threads: the threads' event streams are merged by
//! timestamp, with one event per thread in memory at a time. `llvm-xray account` needs that
//! order without `convert --sort`: it rejects a record that goes back in time.
//!
//! Every thread's records nest, since account and stack match an exit with the newest open
//! entry of its thread. Calls closed by unwinding end at the time the trace says they went. So
//! do calls left open under a call that returned (longjmp out of `-finstrument-functions`
//! code, lost exits). Calls still open when a thread's events end (exit() called inside them,
//! the process killed) end at the end of the trace, as `instrfn report` counts them. An entry
//! recorded without exit is a call of length 0.
//!
//! Uses filter, names and sink.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use instrfn_trace::calls::{AddrMap, Call, End};
use instrfn_trace::xray::InstrMap;
use instrfn_trace::{Events, Kind, Module, Process};

use crate::filter::{Filter, FilterArgs};
use crate::names::Names;
use crate::sink::Sink;

const RECORD: usize = 32;
/// Basic mode's log version (2 added tail exits, 3 the pid in records).
const VERSION: u16 = 3;
const ENTER: u8 = 0;
const EXIT: u8 = 1;

/// What the log is made of, checked before any output file is created.
pub struct Prepared<'a> {
    map: InstrMap,
    procs: Vec<(&'a Process, Module)>,
}

/// Reads the executable's instrumentation map; the processes must all be images of that one
/// executable (llvm-xray reads one binary's map per log).
pub fn prepare<'a>(procs: &[&'a Process], filter: &FilterArgs) -> Result<Prepared<'a>, String> {
    if filter.min_duration.is_some() || filter.time_range.is_some() {
        return Err(
            "--min-duration and --time-range do not apply to --format xray (a call's entry is \
             written before its end is read); --filter, --exclude, --depth and --tid do"
                .into(),
        );
    }
    // One executable: the same path and the same file (its identity when recorded).
    let same = |a: &Process, b: &Process| match (&a.exe, &b.exe) {
        (Some(x), Some(y)) => {
            x.path == y.path
                && ((x.build_id.is_some() && x.build_id == y.build_id)
                    || (x.size, x.mtime_ns, &x.head_hash) == (y.size, y.mtime_ns, &y.head_hash))
        }
        _ => false,
    };
    let first = procs[0];
    if let Some(other) = procs[1..].iter().find(|p| !same(first, p)) {
        let exe = |p: &Process| {
            p.exe.as_ref().map_or("an unknown executable".into(), |e| {
                e.path.display().to_string()
            })
        };
        return Err(format!(
            "pid {} ran {} and pid {} ran {}: an XRay log holds the processes of one executable \
             (llvm-xray reads one instrumentation map): pick one with --pid",
            first.pid,
            exe(first),
            other.pid,
            exe(other)
        ));
    }
    let (map, module) = InstrMap::of_executable(first).map_err(|e| e.to_string())?;
    let mut out = vec![(first, module)];
    for p in &procs[1..] {
        let module = p
            .modules
            .iter()
            .find(|m| m.path == map.path)
            .ok_or_else(|| {
                format!(
                    "{}: no `module` line for the executable {}",
                    p.meta_path.display(),
                    map.path.display()
                )
            })?;
        out.push((p, module.clone()));
    }
    Ok(Prepared { map, procs: out })
}

/// One process's part: its executable's bias and code range, the id of each address seen.
struct ProcessIds<'a> {
    p: &'a Process,
    module: Module,
    names: Option<Names>,
    ids: AddrMap<Option<i32>>,
    /// Calls of functions the map does not list, per function.
    unmapped: AddrMap<u64>,
}

impl ProcessIds<'_> {
    fn id(&mut self, map: &InstrMap, addr: u64) -> Option<i32> {
        let module = &self.module;
        *self.ids.entry(addr).or_insert_with(|| {
            (module.start..module.end)
                .contains(&addr)
                .then(|| map.id(addr.wrapping_sub(module.bias)))
                .flatten()
        })
    }
}

#[derive(Clone, Copy)]
struct Frame {
    func: u64,
    /// The function id written at its entry (None: left out, no records).
    id: Option<i32>,
}

#[derive(Clone, Copy)]
struct Record {
    ts: u64,
    kind: u8,
    id: i32,
    tid: u32,
}

/// One thread slot's events, turned into records one event at a time.
struct Stream<'a> {
    proc: usize,
    events: Events<'a>,
    tid: u32,
    stack: Vec<Frame>,
    pending: VecDeque<Record>,
    /// The newest timestamp seen: records never go back in time (a signal handler's events
    /// can come before the event it interrupted was written).
    last: u64,
    /// Where calls still open at the end close (the process's end, or its last event).
    end: u64,
    done: bool,
}

#[derive(Default)]
struct Counts {
    events: u64,
    records: u64,
    lost: u64,
    orphan_exits: u64,
}

impl Stream<'_> {
    fn close(&mut self, frame: Frame, ts: u64) {
        if let Some(id) = frame.id {
            self.pending.push_back(Record {
                ts,
                kind: EXIT,
                id,
                tid: self.tid,
            });
        }
    }

    fn close_all(&mut self, ts: u64) {
        while let Some(f) = self.stack.pop() {
            self.close(f, ts);
        }
    }

    /// Reads events until at least one record is pending or the slot's events end.
    fn advance(
        &mut self,
        map: &InstrMap,
        procs: &mut [ProcessIds],
        filter: &mut Filter,
        counts: &mut Counts,
    ) -> Result<(), String> {
        while self.pending.is_empty() && !self.done {
            let Some(e) = self.events.next() else {
                self.done = true;
                let end = self.end.max(self.last);
                self.close_all(end);
                break;
            };
            let e = e.map_err(|e| e.to_string())?;
            counts.events += 1;
            let ts = e.ts.max(self.last);
            self.last = ts;
            let tid = self.events.tid();
            if tid != self.tid {
                // Another thread took the slot: the one before is gone.
                self.close_all(ts);
                self.tid = tid;
            }
            match e.kind {
                Kind::Entry | Kind::EntryNoExit => {
                    let pi = &mut procs[self.proc];
                    let mut id = pi.id(map, e.value);
                    if id.is_some() && !keep(pi, filter, tid, e.value, ts, self.stack.len()) {
                        id = None;
                    } else if id.is_none() && filter.thread(tid) {
                        *pi.unmapped.entry(e.value).or_insert(0) += 1;
                    }
                    let frame = Frame { func: e.value, id };
                    if let Some(id) = id {
                        self.pending.push_back(Record {
                            ts,
                            kind: ENTER,
                            id,
                            tid,
                        });
                    }
                    if e.kind == Kind::Entry {
                        self.stack.push(frame);
                    } else {
                        self.close(frame, ts);
                    }
                }
                Kind::Exit | Kind::Unwound => {
                    match self.stack.iter().rposition(|f| f.func == e.value) {
                        Some(i) => {
                            // The frames above it went without an exit of their own.
                            while self.stack.len() > i {
                                let f = self.stack.pop().expect("above i");
                                self.close(f, ts);
                            }
                        }
                        None => counts.orphan_exits += 1,
                    }
                }
                Kind::Lost => counts.lost += e.value,
                Kind::Thread => {}
            }
        }
        Ok(())
    }
}

/// Whether the filters keep a call of `func` entered at `ts` with `depth` calls open below.
fn keep(pi: &ProcessIds, filter: &mut Filter, tid: u32, func: u64, ts: u64, depth: usize) -> bool {
    let call = Call {
        tid,
        func,
        start: ts,
        end: ts,
        depth: depth as u32,
        self_ticks: 0,
        how: End::Exit,
        outermost: true,
    };
    filter.keep(&call, &pi.p.clock, |f| {
        pi.names.as_ref().map_or(String::new(), |n| n.name(f, ts))
    })
}

/// Writes the log of `prepared` into `sink`: the calls `filter` keeps (names demangled or not
/// for its patterns).
pub fn write(
    prepared: Prepared,
    filter: &FilterArgs,
    demangle: bool,
    sink: &mut Sink,
    bar: &indicatif::ProgressBar,
) -> Result<(), String> {
    let Prepared { map, procs } = prepared;
    let by_name = !filter.include.is_empty() || !filter.exclude.is_empty();
    let mut ids: Vec<ProcessIds> = procs
        .iter()
        .map(|(p, m)| ProcessIds {
            p,
            module: m.clone(),
            names: by_name.then(|| Names::of(p, demangle, false)),
            ids: AddrMap::default(),
            unmapped: AddrMap::default(),
        })
        .collect();
    let mut streams: Vec<Stream> = Vec::new();
    for (i, (p, _)) in procs.iter().enumerate() {
        for slot in p.slots() {
            streams.push(Stream {
                proc: i,
                events: p.events(slot),
                tid: p.first_tid(slot).unwrap_or(0),
                stack: Vec::new(),
                pending: VecDeque::new(),
                last: 0,
                end: instrfn_trace::calls::trace_end(p),
                done: false,
            });
        }
    }
    // A filter per process, as in the other exports (it decides names once per address).
    let mut filters: Vec<Filter> = procs.iter().map(|_| Filter::new(filter)).collect();
    let mut counts = Counts::default();
    let mut heap = BinaryHeap::new();
    for (i, s) in streams.iter_mut().enumerate() {
        s.advance(&map, &mut ids, &mut filters[s.proc], &mut counts)?;
        if let Some(r) = s.pending.front() {
            heap.push(Reverse((r.ts, i)));
        }
    }
    let clock = &procs[0].0.clock;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    buf.extend_from_slice(&header(1e9 / clock.ns_per_tick()));
    let mut shown = 0u64;
    while let Some(Reverse((_, i))) = heap.pop() {
        let s = &mut streams[i];
        let r = s
            .pending
            .pop_front()
            .expect("a stream in the heap has a record");
        record(&mut buf, &r, ids[s.proc].p.pid);
        counts.records += 1;
        if s.pending.is_empty() {
            s.advance(&map, &mut ids, &mut filters[s.proc], &mut counts)?;
        }
        if let Some(next) = s.pending.front() {
            heap.push(Reverse((next.ts, i)));
        }
        if buf.len() >= 1 << 16 {
            sink.write_bytes(&buf)?;
            buf.clear();
            bar.inc(counts.events - shown);
            shown = counts.events;
        }
    }
    // Slots whose events produced no record at all were never in the heap: still count them.
    bar.inc(counts.events - shown);
    if counts.records == 0 {
        return Err(format!(
            "no calls of functions in {}'s XRay instrumentation map in this trace{}",
            map.path.display(),
            if by_name || filter.depth.is_some() || !filter.tid.is_empty() {
                " (or the filters left none)"
            } else {
                ""
            }
        ));
    }
    sink.write_bytes(&buf)?;
    // Functions left out, each once over all processes: by module and offset in it.
    let mut functions = std::collections::BTreeSet::new();
    let mut calls = 0;
    for pi in &ids {
        for (&addr, &n) in &pi.unmapped {
            calls += n;
            functions.insert(match pi.p.module_of(addr) {
                Some(m) => (Some(&m.path), addr.wrapping_sub(m.bias)),
                None => (None, addr),
            });
        }
    }
    let functions = functions.len();
    let say = |line: String| crate::names::say(&line);
    if calls > 0 {
        say(format!(
            "instrfn: left out {calls} calls of {functions} function{} that {}'s XRay \
             instrumentation map does not list (shared libraries, functions without sleds)",
            if functions == 1 { "" } else { "s" },
            map.path.display()
        ));
    }
    if counts.lost > 0 {
        say(format!(
            "instrfn: the trace lost {} events: calls around the losses may be missing or end \
             early in the XRay log",
            counts.lost
        ));
    }
    Ok(())
}

/// The 32-byte file header for a counter of `hz` ticks per second.
fn header(hz: f64) -> [u8; RECORD] {
    let mut h = [0u8; RECORD];
    h[0..2].copy_from_slice(&VERSION.to_le_bytes());
    // h[2..4]: type 0, basic mode.
    // The counters instrfn reads run at a constant rate and do not stop.
    h[4..8].copy_from_slice(&3u32.to_le_bytes());
    h[8..16].copy_from_slice(&(hz.round() as u64).to_le_bytes());
    h
}

fn record(buf: &mut Vec<u8>, r: &Record, pid: u32) {
    let mut b = [0u8; RECORD];
    // b[0..2]: record type 0 (a function record); b[2]: CPU, not recorded.
    b[3] = r.kind;
    b[4..8].copy_from_slice(&r.id.to_le_bytes());
    b[8..16].copy_from_slice(&r.ts.to_le_bytes());
    b[16..20].copy_from_slice(&r.tid.to_le_bytes());
    b[20..24].copy_from_slice(&pid.to_le_bytes());
    buf.extend_from_slice(&b);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_record_layout() {
        let h = header(2.5e9);
        assert_eq!(&h[0..8], &[3, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(
            u64::from_le_bytes(h[8..16].try_into().unwrap()),
            2_500_000_000
        );
        assert!(h[16..].iter().all(|&b| b == 0));
        let mut buf = Vec::new();
        let r = Record {
            ts: 0x1122_3344_5566_7788,
            kind: EXIT,
            id: 7,
            tid: 42,
        };
        record(&mut buf, &r, 99);
        assert_eq!(buf.len(), RECORD);
        assert_eq!(&buf[0..4], &[0, 0, 0, 1]);
        assert_eq!(i32::from_le_bytes(buf[4..8].try_into().unwrap()), 7);
        assert_eq!(
            u64::from_le_bytes(buf[8..16].try_into().unwrap()),
            0x1122_3344_5566_7788
        );
        assert_eq!(u32::from_le_bytes(buf[16..20].try_into().unwrap()), 42);
        assert_eq!(u32::from_le_bytes(buf[20..24].try_into().unwrap()), 99);
        assert!(buf[24..].iter().all(|&b| b == 0));
    }
}
