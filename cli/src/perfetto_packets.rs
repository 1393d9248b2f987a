//! The packets of `instrfn export --format perfetto` (see perfetto.rs for the layout): the
//! field numbers of Perfetto's trace protos, and the writing of each kind of packet. Uses
//! protobuf and sink.

use instrfn_trace::{Process, SourceLine};

use crate::protobuf::{message, string, uint};
use crate::sink::Sink;

/// Field numbers and enum values of Perfetto's trace protos (github.com/google/perfetto,
/// protos/perfetto/trace/). The `perfetto` Python package's `perfetto_trace_pb2` has the same.
pub mod field {
    // trace.proto, message Trace.
    pub const PACKET: u32 = 1;
    // trace_packet.proto, message TracePacket.
    pub const CLOCK_SNAPSHOT: u32 = 6;
    pub const TIMESTAMP: u32 = 8;
    pub const TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    pub const INTERNED_DATA: u32 = 12;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const TIMESTAMP_CLOCK_ID: u32 = 58;
    pub const TRACE_PACKET_DEFAULTS: u32 = 59;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    // TracePacket.SequenceFlags.
    pub const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
    // trace_packet_defaults.proto: TracePacketDefaults, TrackEventDefaults.
    pub const DEFAULTS_TIMESTAMP_CLOCK_ID: u32 = 58;
    pub const DEFAULTS_TRACK_EVENT: u32 = 11;
    pub const TRACK_EVENT_DEFAULTS_TRACK_UUID: u32 = 11;
    // clock_snapshot.proto: ClockSnapshot, ClockSnapshot.Clock.
    pub const SNAPSHOT_CLOCKS: u32 = 1;
    pub const SNAPSHOT_PRIMARY_TRACE_CLOCK: u32 = 2;
    pub const CLOCK_ID: u32 = 1;
    pub const CLOCK_TIMESTAMP: u32 = 2;
    pub const CLOCK_IS_INCREMENTAL: u32 = 3;
    // common/builtin_clock.proto, BuiltinClock; ids 64-127 are clocks of one sequence.
    pub const BUILTIN_CLOCK_REALTIME: u64 = 1;
    pub const BUILTIN_CLOCK_MONOTONIC: u64 = 3;
    pub const SEQUENCE_CLOCK: u64 = 64;
    // track_event/track_descriptor.proto, message TrackDescriptor.
    pub const TRACK_UUID: u32 = 1;
    pub const TRACK_PROCESS: u32 = 3;
    pub const TRACK_THREAD: u32 = 4;
    pub const TRACK_PARENT_UUID: u32 = 5;
    // track_event/process_descriptor.proto, message ProcessDescriptor.
    pub const PROCESS_PID: u32 = 1;
    pub const PROCESS_CMDLINE: u32 = 2;
    pub const PROCESS_NAME: u32 = 6;
    // track_event/thread_descriptor.proto, message ThreadDescriptor.
    pub const THREAD_PID: u32 = 1;
    pub const THREAD_TID: u32 = 2;
    pub const THREAD_NAME: u32 = 5;
    // track_event/track_event.proto, message TrackEvent and TrackEvent.Type.
    pub const EVENT_DEBUG_ANNOTATIONS: u32 = 4;
    pub const EVENT_TYPE: u32 = 9;
    pub const EVENT_NAME_IID: u32 = 10;
    pub const EVENT_SOURCE_LOCATION_IID: u32 = 34;
    pub const TYPE_SLICE_BEGIN: u64 = 1;
    pub const TYPE_SLICE_END: u64 = 2;
    pub const TYPE_INSTANT: u64 = 3;
    // track_event/debug_annotation.proto, message DebugAnnotation.
    pub const ANNOTATION_UINT_VALUE: u32 = 3;
    pub const ANNOTATION_STRING_VALUE: u32 = 6;
    pub const ANNOTATION_NAME: u32 = 10;
    // interned_data/interned_data.proto, message InternedData.
    pub const INTERNED_EVENT_NAMES: u32 = 2;
    pub const INTERNED_SOURCE_LOCATIONS: u32 = 4;
    // track_event/track_event.proto, message EventName: iid, name.
    pub const NAME_IID: u32 = 1;
    pub const NAME_NAME: u32 = 2;
    // track_event/source_location.proto, message SourceLocation.
    pub const LOCATION_IID: u32 = 1;
    pub const LOCATION_FILE_NAME: u32 = 2;
    pub const LOCATION_FUNCTION_NAME: u32 = 3;
    pub const LOCATION_LINE_NUMBER: u32 = 4;
}

use field::*;

/// The output: packets appended to a buffer, written to the sink in blocks.
pub struct Out<'a> {
    pub sink: &'a mut Sink,
    pub buf: Vec<u8>,
    pub error: Option<String>,
    pub next_sequence: u32,
    pub next_uuid: u64,
}

impl Out<'_> {
    /// Appends one `TracePacket` whose fields `f` writes.
    pub fn packet(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        message(&mut self.buf, PACKET, f);
        if self.buf.len() >= 1 << 16 {
            self.flush();
        }
    }

    pub fn flush(&mut self) {
        if self.error.is_none()
            && let Err(e) = self.sink.write_bytes(&self.buf)
        {
            self.error = Some(e);
        }
        self.buf.clear();
    }

    pub fn sequence(&mut self) -> u32 {
        self.next_sequence += 1;
        self.next_sequence
    }

    pub fn uuid(&mut self) -> u64 {
        self.next_uuid += 1;
        self.next_uuid
    }
}

/// A `ClockSnapshot.Clock`.
fn clock(b: &mut Vec<u8>, id: u64, ns: u64, incremental: bool) {
    message(b, SNAPSHOT_CLOCKS, |c| {
        uint(c, CLOCK_ID, id);
        uint(c, CLOCK_TIMESTAMP, ns);
        if incremental {
            uint(c, CLOCK_IS_INCREMENTAL, 1);
        }
    });
}

/// What an end or an instant says besides its name: one debug annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note {
    Unwound,
    Open,
    Cut,
    NoExit,
    NoEntry,
    BeforeTrace,
    Lost(u64),
}

/// A debug annotation's value.
enum Value {
    Text(&'static str),
    Count(u64),
}

impl Note {
    fn annotation(self) -> (&'static str, Value) {
        match self {
            Note::Unwound => ("closed", Value::Text("unwound")),
            Note::Open => ("closed", Value::Text("open at the end of the trace")),
            Note::Cut => ("closed", Value::Text("cut: a call below it ended")),
            Note::NoExit => ("exit", Value::Text("not recorded")),
            Note::NoEntry => ("entry", Value::Text("not in the trace")),
            Note::BeforeTrace => ("entry", Value::Text("before the trace")),
            Note::Lost(n) => ("lost", Value::Count(n)),
        }
    }
}

/// A thread's track: its uuid, its process's track, pid, tid and name.
pub struct ThreadTrack<'a> {
    pub uuid: u64,
    pub parent: u64,
    pub pid: u32,
    pub tid: u32,
    pub name: &'a str,
}

/// The first packet of the trace: its clock is MONOTONIC (`mono` ns), tied to REALTIME
/// (`real` ns since the epoch) at that moment.
pub fn trace_clock(out: &mut Out, mono: u64, real: u64) {
    out.packet(|p| {
        message(p, CLOCK_SNAPSHOT, |c| {
            clock(c, BUILTIN_CLOCK_MONOTONIC, mono, false);
            clock(c, BUILTIN_CLOCK_REALTIME, real, false);
            uint(c, SNAPSHOT_PRIMARY_TRACE_CLOCK, BUILTIN_CLOCK_MONOTONIC);
        });
    });
}

/// The first two packets of a thread's sequence `id`, whose first event is at `t0` ns of
/// MONOTONIC: the incremental state cleared, the packet defaults (the thread's track, clock 64)
/// and clock 64 defined as MONOTONIC incremented by each packet's timestamp; then the
/// thread's track descriptor.
pub fn thread_sequence(out: &mut Out, id: u32, t0: u64, track: &ThreadTrack) {
    out.packet(|p| {
        uint(p, TRUSTED_PACKET_SEQUENCE_ID, u64::from(id));
        uint(p, SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
        message(p, TRACE_PACKET_DEFAULTS, |d| {
            uint(d, DEFAULTS_TIMESTAMP_CLOCK_ID, SEQUENCE_CLOCK);
            message(d, DEFAULTS_TRACK_EVENT, |t| {
                uint(t, TRACK_EVENT_DEFAULTS_TRACK_UUID, track.uuid)
            });
        });
        message(p, CLOCK_SNAPSHOT, |c| {
            clock(c, BUILTIN_CLOCK_MONOTONIC, t0, false);
            clock(c, SEQUENCE_CLOCK, t0, true);
        });
    });
    out.packet(|p| {
        uint(p, TIMESTAMP, 0);
        uint(p, TRUSTED_PACKET_SEQUENCE_ID, u64::from(id));
        message(p, TRACK_DESCRIPTOR, |d| {
            uint(d, TRACK_UUID, track.uuid);
            uint(d, TRACK_PARENT_UUID, track.parent);
            message(d, TRACK_THREAD, |t| {
                uint(t, THREAD_PID, u64::from(track.pid));
                uint(t, THREAD_TID, u64::from(track.tid));
                if !track.name.is_empty() {
                    string(t, THREAD_NAME, track.name);
                }
            });
        });
    });
}

/// The process's `TrackDescriptor`, in a packet of its own sequence.
pub fn process_track(out: &mut Out, p: &Process, uuid: u64) {
    let id = out.sequence();
    let mut name = p.cmdline.join(" ");
    if name.is_empty()
        && let Some(exe) = &p.exe
    {
        name = exe.path.display().to_string();
    }
    let start = p.clock.start.1;
    out.packet(|b| {
        uint(b, TIMESTAMP, start);
        uint(b, TIMESTAMP_CLOCK_ID, BUILTIN_CLOCK_MONOTONIC);
        uint(b, TRUSTED_PACKET_SEQUENCE_ID, u64::from(id));
        message(b, TRACK_DESCRIPTOR, |d| {
            uint(d, TRACK_UUID, uuid);
            message(d, TRACK_PROCESS, |pd| {
                uint(pd, PROCESS_PID, u64::from(p.pid));
                for arg in &p.cmdline {
                    string(pd, PROCESS_CMDLINE, arg);
                }
                if !name.is_empty() {
                    string(pd, PROCESS_NAME, &name);
                }
            });
        });
    });
}

/// An event's name: its iid on the sequence, and the name if this packet interns it.
pub type EventName<'a> = Option<(u64, Option<&'a str>)>;
/// An event's source location: its iid, and (function, line) if this packet interns it.
pub type EventLocation<'a> = Option<(u64, Option<(&'a str, &'a SourceLine)>)>;

/// One track event of sequence `id`, `delta` ns after the sequence's previous packet: its
/// type (TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT), name, source location and note.
pub fn event(
    out: &mut Out,
    id: u32,
    delta: u64,
    kind: u64,
    name: EventName,
    location: EventLocation,
    note: Option<Note>,
) {
    out.packet(|p| {
        uint(p, TIMESTAMP, delta);
        uint(p, TRUSTED_PACKET_SEQUENCE_ID, u64::from(id));
        let new_name = name.and_then(|(iid, s)| s.map(|s| (iid, s)));
        let new_location = location.and_then(|(iid, l)| l.map(|l| (iid, l)));
        if new_name.is_some() || new_location.is_some() {
            message(p, INTERNED_DATA, |d| {
                if let Some((iid, s)) = new_name {
                    message(d, INTERNED_EVENT_NAMES, |n| {
                        uint(n, NAME_IID, iid);
                        string(n, NAME_NAME, s);
                    });
                }
                if let Some((iid, (func, line))) = new_location {
                    message(d, INTERNED_SOURCE_LOCATIONS, |l| {
                        uint(l, LOCATION_IID, iid);
                        string(l, LOCATION_FILE_NAME, &line.file);
                        string(l, LOCATION_FUNCTION_NAME, func);
                        uint(l, LOCATION_LINE_NUMBER, u64::from(line.line));
                    });
                }
            });
        }
        message(p, TRACK_EVENT, |e| {
            uint(e, EVENT_TYPE, kind);
            if let Some((iid, _)) = name {
                uint(e, EVENT_NAME_IID, iid);
            }
            if let Some((iid, _)) = location {
                uint(e, EVENT_SOURCE_LOCATION_IID, iid);
            }
            if let Some(note) = note {
                let (key, value) = note.annotation();
                message(e, EVENT_DEBUG_ANNOTATIONS, |a| {
                    string(a, ANNOTATION_NAME, key);
                    match value {
                        Value::Text(s) => string(a, ANNOTATION_STRING_VALUE, s),
                        Value::Count(n) => uint(a, ANNOTATION_UINT_VALUE, n),
                    }
                });
            }
        });
    });
}
