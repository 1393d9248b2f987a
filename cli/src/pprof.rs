//! `instrfn export --format pprof`: calls and self time per distinct stack, as a gzipped
//! `profile.proto` (github.com/google/pprof, proto/profile.proto). `go tool pprof` reads it,
//! and so do the continuous-profiling systems that ingest pprof. Uses filter, names, protobuf
//! and sink.
//!
//! The profile:
//! - two sample types: `calls`/`count` and `self`/`nanoseconds` (the default). pprof adds up
//!   the self time of a frame's callees into its cumulative time itself.
//! - one sample per distinct stack of each process: its location ids, leaf first; its values,
//!   how many calls of the leaf had exactly that stack, and their self time. A `pid` label.
//! - a location per function of a process, at the function's address, in the mapping of the
//!   module that holds it; one line: the function, and with `--lines` its first line.
//! - functions by name (demangled unless `--no-demangle`), with `--lines` their file and line.
//! - a mapping per module of each process (executable and shared libraries), marked as
//!   symbolized (`has_functions`), so pprof does not look for the binaries.
//! - `period_type` calls/count and `period` 1; `time_nanos` (CLOCK_REALTIME at the earliest
//!   process's start) and `duration_nanos` (the span of the trace).
//! - the string table, each string once, `""` first.
//!
//! Repeated fields are written as they are made, in any order (protobuf allows it): samples
//! after each process, the string table last. The bytes go through gzip to the output in
//! blocks. Memory grows with the distinct stacks of one process, the functions and the
//! strings, never with the number of events.

use std::collections::HashMap;
use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use instrfn_trace::Process;
use instrfn_trace::calls::{Call, End, Visitor, trace_end, walk};

use crate::filter::{Filter, FilterArgs};
use crate::names::Names;
use crate::protobuf::{message, string, uint, varint, varint_len};
use crate::sink::Sink;

/// Field numbers of pprof's proto/profile.proto.
mod field {
    // message Profile.
    pub const SAMPLE_TYPE: u32 = 1;
    pub const SAMPLE: u32 = 2;
    pub const MAPPING: u32 = 3;
    pub const LOCATION: u32 = 4;
    pub const FUNCTION: u32 = 5;
    pub const STRING_TABLE: u32 = 6;
    pub const TIME_NANOS: u32 = 9;
    pub const DURATION_NANOS: u32 = 10;
    pub const PERIOD_TYPE: u32 = 11;
    pub const PERIOD: u32 = 12;
    pub const DEFAULT_SAMPLE_TYPE: u32 = 14;
    // message ValueType.
    pub const VALUE_TYPE: u32 = 1;
    pub const VALUE_UNIT: u32 = 2;
    // message Sample (location_id and value packed, as proto3 writes them).
    pub const SAMPLE_LOCATION_ID: u32 = 1;
    pub const SAMPLE_VALUE: u32 = 2;
    pub const SAMPLE_LABEL: u32 = 3;
    // message Label.
    pub const LABEL_KEY: u32 = 1;
    pub const LABEL_NUM: u32 = 3;
    // message Mapping.
    pub const MAPPING_ID: u32 = 1;
    pub const MAPPING_MEMORY_START: u32 = 2;
    pub const MAPPING_MEMORY_LIMIT: u32 = 3;
    pub const MAPPING_FILE_OFFSET: u32 = 4;
    pub const MAPPING_FILENAME: u32 = 5;
    pub const MAPPING_BUILD_ID: u32 = 6;
    pub const MAPPING_HAS_FUNCTIONS: u32 = 7;
    pub const MAPPING_HAS_FILENAMES: u32 = 8;
    pub const MAPPING_HAS_LINE_NUMBERS: u32 = 9;
    // message Location.
    pub const LOCATION_ID: u32 = 1;
    pub const LOCATION_MAPPING_ID: u32 = 2;
    pub const LOCATION_ADDRESS: u32 = 3;
    pub const LOCATION_LINE: u32 = 4;
    // message Line.
    pub const LINE_FUNCTION_ID: u32 = 1;
    pub const LINE_LINE: u32 = 2;
    // message Function.
    pub const FUNCTION_ID: u32 = 1;
    pub const FUNCTION_NAME: u32 = 2;
    pub const FUNCTION_SYSTEM_NAME: u32 = 3;
    pub const FUNCTION_FILENAME: u32 = 4;
    pub const FUNCTION_START_LINE: u32 = 5;
}

use field::*;

/// The string table: each string once, by index; `""` is index 0.
struct Strings {
    index: HashMap<String, u64>,
    list: Vec<String>,
}

impl Strings {
    fn new() -> Strings {
        Strings {
            index: HashMap::from([(String::new(), 0)]),
            list: vec![String::new()],
        }
    }

    fn get(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u64;
        self.index.insert(s.to_string(), i);
        self.list.push(s.to_string());
        i
    }
}

/// The gzipped output: fields of the Profile message, compressed and written in blocks.
struct Gz<'a> {
    sink: &'a mut Sink,
    gz: GzEncoder<Vec<u8>>,
    field: Vec<u8>,
}

impl Gz<'_> {
    /// Appends one top-level field, which `f` writes.
    fn put(&mut self, f: impl FnOnce(&mut Vec<u8>)) -> Result<(), String> {
        self.field.clear();
        f(&mut self.field);
        // Writing into a Vec does not fail.
        let _ = self.gz.write_all(&self.field);
        if self.gz.get_ref().len() >= 1 << 16 {
            self.sink.write_bytes(self.gz.get_ref())?;
            self.gz.get_mut().clear();
        }
        Ok(())
    }

    fn finish(self) -> Result<(), String> {
        let rest = self
            .gz
            .finish()
            .map_err(|e| format!("cannot compress the profile: {e}"))?;
        self.sink.write_bytes(&rest)
    }
}

/// A packed repeated varint field.
fn packed(b: &mut Vec<u8>, field: u32, values: &[u64]) {
    let len: usize = values.iter().map(|&v| varint_len(v)).sum();
    varint(b, u64::from(field << 3 | 2));
    varint(b, len as u64);
    for &v in values {
        varint(b, v);
    }
}

/// Calls and self time per distinct stack of one process.
struct Stacks<'a> {
    p: &'a Process,
    names: &'a Names,
    filter: Filter,
    stacks: HashMap<Vec<u64>, (u64, f64)>,
    /// The latest end of any call (ns of CLOCK_MONOTONIC).
    end_ns: f64,
    bar: &'a indicatif::ProgressBar,
    seen: u64,
}

impl Visitor for Stacks<'_> {
    fn call(&mut self, c: &Call, stack: &[u64]) {
        self.seen += if c.how == End::NoExit { 1 } else { 2 };
        if self.seen >= 1 << 16 {
            self.bar.inc(self.seen);
            self.seen = 0;
        }
        let (p, names) = (self.p, self.names);
        self.end_ns = self.end_ns.max(p.clock.ns(c.end));
        if !self.filter.keep(c, &p.clock, |f| names.name(f, c.start)) {
            return;
        }
        let ns = c.self_ticks as f64 * p.clock.ns_per_tick();
        match self.stacks.get_mut(stack) {
            Some((calls, total)) => {
                *calls += 1;
                *total += ns;
            }
            None => {
                self.stacks.insert(stack.to_vec(), (1, ns));
            }
        }
    }
}

/// The profile's tables, shared by every process.
struct Tables {
    strings: Strings,
    /// (name, file, line) -> function id.
    functions: HashMap<(u64, u64, u64), u64>,
    next_location: u64,
    next_mapping: u64,
}

/// Writes the calls of `procs` that `filter` keeps as a gzipped pprof profile; function
/// names demangled or not, with `lines` their files and lines.
pub fn write(
    procs: &[&Process],
    filter: &FilterArgs,
    demangle: bool,
    lines: bool,
    sink: &mut Sink,
    bar: &indicatif::ProgressBar,
) -> Result<(), String> {
    let mut out = Gz {
        sink,
        gz: GzEncoder::new(Vec::with_capacity(1 << 17), Compression::default()),
        field: Vec::new(),
    };
    let mut t = Tables {
        strings: Strings::new(),
        functions: HashMap::new(),
        next_location: 0,
        next_mapping: 0,
    };
    let s = &mut t.strings;
    let (calls, count, self_, nanos, pid_key) = (
        s.get("calls"),
        s.get("count"),
        s.get("self"),
        s.get("nanoseconds"),
        s.get("pid"),
    );
    for (ty, unit) in [(calls, count), (self_, nanos)] {
        out.put(|b| {
            message(b, SAMPLE_TYPE, |v| {
                uint(v, VALUE_TYPE, ty);
                uint(v, VALUE_UNIT, unit);
            })
        })?;
    }
    out.put(|b| {
        message(b, PERIOD_TYPE, |v| {
            uint(v, VALUE_TYPE, calls);
            uint(v, VALUE_UNIT, count);
        });
        uint(b, PERIOD, 1);
        uint(b, DEFAULT_SAMPLE_TYPE, self_);
    })?;

    let mut start_ns = f64::INFINITY;
    let mut end_ns = f64::NEG_INFINITY;
    let mut time_nanos = 0;
    for p in procs {
        let names = Names::of(p, demangle, lines);
        if (p.clock.start.1 as f64) < start_ns {
            start_ns = p.clock.start.1 as f64;
            time_nanos = p.clock.realtime_start;
        }
        if let Some((_, ns)) = p.clock.end {
            end_ns = end_ns.max(ns as f64);
        }
        // Mappings: the process's modules, its executable first (pprof takes the first
        // mapping for the main binary).
        let exe = p.exe.as_ref().map(|e| e.path.as_path());
        let mut order: Vec<usize> = (0..p.modules.len()).collect();
        order.sort_by_key(|&i| Some(p.modules[i].path.as_path()) != exe);
        let mut mapping_ids = vec![0; p.modules.len()];
        for i in order {
            let m = &p.modules[i];
            t.next_mapping += 1;
            let id = t.next_mapping;
            mapping_ids[i] = id;
            let file = t.strings.get(&m.path.display().to_string());
            let build_id = m
                .identity
                .as_ref()
                .and_then(|i| i.build_id.as_deref())
                .map_or(0, |b| t.strings.get(b));
            out.put(|b| {
                message(b, MAPPING, |v| {
                    uint(v, MAPPING_ID, id);
                    uint(v, MAPPING_MEMORY_START, m.start);
                    uint(v, MAPPING_MEMORY_LIMIT, m.end);
                    // The link-time address of the mapping's start: for the code segments ld
                    // lays out, the file offset too.
                    uint(v, MAPPING_FILE_OFFSET, m.start.wrapping_sub(m.bias));
                    uint(v, MAPPING_FILENAME, file);
                    if build_id != 0 {
                        uint(v, MAPPING_BUILD_ID, build_id);
                    }
                    uint(v, MAPPING_HAS_FUNCTIONS, 1);
                    if lines {
                        uint(v, MAPPING_HAS_FILENAMES, 1);
                        uint(v, MAPPING_HAS_LINE_NUMBERS, 1);
                    }
                })
            })?;
        }
        let mut walker = Stacks {
            p,
            names: &names,
            filter: Filter::new(filter),
            stacks: HashMap::new(),
            end_ns: f64::NEG_INFINITY,
            bar,
            seen: 0,
        };
        for slot in p.slots() {
            walk(p, slot, trace_end(p), &mut walker).map_err(|e| e.to_string())?;
        }
        bar.inc(walker.seen);
        end_ns = end_ns.max(walker.end_ns);
        let mut stacks: Vec<(Vec<u64>, (u64, f64))> = walker.stacks.into_iter().collect();
        stacks.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        // Locations: one per function of the process, made as stacks first name them.
        let mut locations: HashMap<u64, u64> = HashMap::new();
        for (stack, (n, ns)) in stacks {
            let mut ids = Vec::with_capacity(stack.len());
            for &f in stack.iter().rev() {
                let id = match locations.get(&f) {
                    Some(&id) => id,
                    None => {
                        let id = location(&mut out, &mut t, p, &names, &mapping_ids, f)?;
                        locations.insert(f, id);
                        id
                    }
                };
                ids.push(id);
            }
            let pid = u64::from(p.pid);
            out.put(|b| {
                message(b, SAMPLE, |v| {
                    packed(v, SAMPLE_LOCATION_ID, &ids);
                    packed(v, SAMPLE_VALUE, &[n, ns.round() as u64]);
                    message(v, SAMPLE_LABEL, |l| {
                        uint(l, LABEL_KEY, pid_key);
                        uint(l, LABEL_NUM, pid);
                    });
                })
            })?;
        }
    }
    let duration = if end_ns > start_ns {
        (end_ns - start_ns).round() as u64
    } else {
        0
    };
    out.put(|b| {
        uint(b, TIME_NANOS, time_nanos);
        uint(b, DURATION_NANOS, duration);
    })?;
    for s in std::mem::take(&mut t.strings.list) {
        out.put(|b| string(b, STRING_TABLE, &s))?;
    }
    out.finish()
}

/// Writes the location of function `f` of process `p` (and its function, if new): its id.
fn location(
    out: &mut Gz,
    t: &mut Tables,
    p: &Process,
    names: &Names,
    mapping_ids: &[u64],
    f: u64,
) -> Result<u64, String> {
    // As the folded export names stack frames: by the module at the end of the trace.
    let name = names.name(f, u64::MAX);
    let line = names.line(f, u64::MAX);
    let name = t.strings.get(&name);
    let (file, start) = line
        .as_ref()
        .map_or((0, 0), |l| (t.strings.get(&l.file), u64::from(l.line)));
    let next = t.functions.len() as u64 + 1;
    let function = *t.functions.entry((name, file, start)).or_insert(next);
    if function == next {
        out.put(|b| {
            message(b, FUNCTION, |v| {
                uint(v, FUNCTION_ID, function);
                uint(v, FUNCTION_NAME, name);
                uint(v, FUNCTION_SYSTEM_NAME, name);
                if file != 0 {
                    uint(v, FUNCTION_FILENAME, file);
                    uint(v, FUNCTION_START_LINE, start);
                }
            })
        })?;
    }
    t.next_location += 1;
    let id = t.next_location;
    let mapping = p
        .modules
        .iter()
        .position(|m| (m.start..m.end).contains(&f))
        .map(|i| mapping_ids[i]);
    out.put(|b| {
        message(b, LOCATION, |v| {
            uint(v, LOCATION_ID, id);
            if let Some(m) = mapping {
                uint(v, LOCATION_MAPPING_ID, m);
            }
            uint(v, LOCATION_ADDRESS, f);
            message(v, LOCATION_LINE, |l| {
                uint(l, LINE_FUNCTION_ID, function);
                if start != 0 {
                    uint(l, LINE_LINE, start);
                }
            });
        })
    })?;
    Ok(id)
}
