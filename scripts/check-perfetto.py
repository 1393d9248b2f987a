#!/usr/bin/env python3
"""Checks a Perfetto trace that `instrfn export --format perfetto` wrote, with Perfetto's own
schema (perfetto_trace_pb2 of the `perfetto` package on PyPI, read by `protobuf`).

Usage: check-perfetto.py TRACE

It follows the trace as trace_processor reads it: packets in file order, incremental state per
packet sequence (cleared by SEQ_INCREMENTAL_STATE_CLEARED), the packet defaults (clock and track),
interned event names and source locations, and clocks (the incremental clock of each sequence,
defined by its ClockSnapshot). It checks that:
- every event's track is a thread track whose parent is the track of a process with its pid;
- every name iid was interned on the event's sequence before use;
- timestamps never go back on a track, and slices nest: each end closes the newest open slice
  of its track, no slice is left open at the end.
Then it prints a summary as JSON: slices and instants per name, annotated ends per name,
losses, threads and processes. Exit status 1 (and the problems on stderr) if a check fails."""

import collections
import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

SEQ_INCREMENTAL_STATE_CLEARED = 1
MONOTONIC = 3
BOOTTIME = 6
BEGIN, END, INSTANT = 1, 2, 3


def annotations(event):
    out = {}
    for a in event.debug_annotations:
        value = a.string_value if a.HasField("string_value") else a.uint_value
        out[a.name] = value
    return out


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    problems = []
    primary_clock = None
    seqs = {}  # id -> state
    tracks = {}  # uuid -> descriptor summary
    stacks = collections.defaultdict(list)  # track uuid -> [(name, ts)]
    last_ts = {}  # track uuid -> ts
    slices = collections.Counter()
    instants = collections.Counter()
    closed = collections.defaultdict(collections.Counter)  # annotation value -> name -> n
    begun_before = collections.Counter()
    per_track = collections.Counter()
    lost = 0
    events = 0
    max_depth = 0
    for i, p in enumerate(trace.packet):
        seq_id = p.trusted_packet_sequence_id
        s = seqs.setdefault(seq_id, {"cleared": False, "defaults": None, "names": {},
                                     "locations": {}, "clocks": {}})
        if p.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED or p.incremental_state_cleared:
            s.update(cleared=True, defaults=None, names={}, locations={})
        if p.HasField("trace_packet_defaults"):
            s["defaults"] = p.trace_packet_defaults
        if p.HasField("interned_data"):
            if not s["cleared"]:
                problems.append(f"packet {i}: interned data before the state was cleared")
            for n in p.interned_data.event_names:
                if n.iid in s["names"] and s["names"][n.iid] != n.name:
                    problems.append(f"packet {i}: iid {n.iid} redefined")
                s["names"][n.iid] = n.name
            for loc in p.interned_data.source_locations:
                s["locations"][loc.iid] = (loc.file_name, loc.line_number)
        if p.HasField("clock_snapshot"):
            snap = p.clock_snapshot
            if snap.primary_trace_clock:
                primary_clock = snap.primary_trace_clock
            values = {c.clock_id: c for c in snap.clocks}
            for c in snap.clocks:
                if c.is_incremental:
                    if not 64 <= c.clock_id <= 127 or seq_id == 0:
                        problems.append(f"packet {i}: incremental clock {c.clock_id} "
                                        f"outside a sequence")
                    if MONOTONIC not in values or values[MONOTONIC].timestamp != c.timestamp:
                        problems.append(f"packet {i}: clock {c.clock_id} not tied to MONOTONIC")
                    s["clocks"][c.clock_id] = c.timestamp
            continue  # trace_processor reads nothing else of a clock snapshot packet
        ts = None
        if p.HasField("timestamp"):
            clock = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else (
                s["defaults"].timestamp_clock_id if s["defaults"] else BOOTTIME)
            if clock in s["clocks"]:
                s["clocks"][clock] += p.timestamp
                ts = s["clocks"][clock]
            elif clock == MONOTONIC:
                ts = p.timestamp
            else:
                problems.append(f"packet {i}: timestamp in unknown clock {clock}")
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.HasField("thread"):
                tracks[d.uuid] = {"kind": "thread", "pid": d.thread.pid, "tid": d.thread.tid,
                                  "name": d.thread.thread_name, "parent": d.parent_uuid}
            elif d.HasField("process"):
                tracks[d.uuid] = {"kind": "process", "pid": d.process.pid,
                                  "name": d.process.process_name}
            else:
                problems.append(f"packet {i}: track {d.uuid} is neither thread nor process")
        if p.HasField("track_event"):
            e = p.track_event
            events += 1
            if ts is None:
                problems.append(f"packet {i}: an event without timestamp")
                continue
            if e.HasField("track_uuid"):
                uuid = e.track_uuid
            elif s["defaults"] and s["defaults"].track_event_defaults.HasField("track_uuid"):
                uuid = s["defaults"].track_event_defaults.track_uuid
            else:
                problems.append(f"packet {i}: an event without track")
                continue
            if tracks.get(uuid, {}).get("kind") != "thread":
                problems.append(f"packet {i}: track {uuid} is not a thread track")
            if ts < last_ts.get(uuid, 0):
                problems.append(f"packet {i}: time goes back on track {uuid}")
            last_ts[uuid] = ts
            name = None
            if e.type in (BEGIN, INSTANT):
                if e.name_iid not in s["names"]:
                    problems.append(f"packet {i}: name iid {e.name_iid} not interned")
                    continue
                name = s["names"][e.name_iid]
                if e.HasField("source_location_iid") and \
                        e.source_location_iid not in s["locations"]:
                    problems.append(f"packet {i}: location iid not interned")
            notes = annotations(e)
            stack = stacks[uuid]
            if e.type == BEGIN:
                stack.append((name, ts))
                max_depth = max(max_depth, len(stack))
                if notes.get("entry") == "before the trace":
                    begun_before[name] += 1
            elif e.type == END:
                if not stack:
                    problems.append(f"packet {i}: an end with no slice open on {uuid}")
                    continue
                name, start = stack.pop()
                if ts < start:
                    problems.append(f"packet {i}: {name} ends before it begins")
                slices[name] += 1
                per_track[uuid] += 1
                if "closed" in notes:
                    closed[notes["closed"]][name] += 1
            elif e.type == INSTANT:
                instants[name] += 1
                lost += notes.get("lost", 0)
            else:
                problems.append(f"packet {i}: event type {e.type}")
    for uuid, stack in stacks.items():
        if stack:
            problems.append(f"track {uuid}: {len(stack)} slices never end")
    threads = []
    for uuid, t in tracks.items():
        if t["kind"] != "thread":
            continue
        parent = tracks.get(t["parent"])
        if not parent or parent["kind"] != "process" or parent["pid"] != t["pid"]:
            problems.append(f"thread track {uuid}: parent is not its process")
        threads.append({"pid": t["pid"], "tid": t["tid"], "name": t["name"],
                        "slices": per_track[uuid]})
    if primary_clock != MONOTONIC:
        problems.append(f"the trace clock is {primary_clock}, not MONOTONIC")
    summary = {
        "packets": len(trace.packet),
        "events": events,
        "sequences": len([k for k in seqs if k]),
        "slices": dict(slices),
        "instants": dict(instants),
        "closed": {k: dict(v) for k, v in closed.items()},
        "begun_before_the_trace": dict(begun_before),
        "lost": lost,
        "max_depth": max_depth,
        "threads": sorted(threads, key=lambda t: (t["pid"], t["tid"])),
        "processes": sorted(({"pid": t["pid"], "name": t["name"]} for t in tracks.values()
                             if t["kind"] == "process"), key=lambda t: t["pid"]),
    }
    print(json.dumps(summary, indent=1, sort_keys=True))
    for problem in problems[:20]:
        print(f"check-perfetto: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    sys.exit(main(sys.argv[1]))
