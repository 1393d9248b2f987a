//! An independent parser of trace files: the chunks of the events and staging files read
//! byte by byte from docs/trace-format.md (magic, version, byte order, slot, sequence number,
//! and the events by form: short, long, call word). It deliberately shares no code with the
//! reader crate (`instrfn-trace`) or the format crate: the tests use it to check what the
//! reader reports (and the forms the runtime chose), and a parser that reused the reader's
//! code would repeat the reader's mistakes instead of catching them.

use std::path::{Path, PathBuf};

/// One chunk of an events file as it lies on disk (docs/trace-format.md).
#[derive(Debug, Clone, Copy)]
pub struct RawChunk {
    /// Whether its version field reads 1 little-endian (else it does big-endian).
    pub little_endian: bool,
    pub slot: u32,
    pub seq: u64,
    /// The kind of its first event (0: none written).
    pub first_kind: u64,
    /// Its events, up to the first unwritten one: short ones (8 bytes, version 2 and 3), long
    /// ones (16 bytes: every event of a version 1 chunk) and call words (8 bytes for an entry
    /// and its exit, version 3 only).
    pub short: u64,
    pub long: u64,
    pub calls: u64,
}

/// The chunks of every events and staging file in trace directory `dir`, read without the
/// reader crate (a chunk in both files, committed as the process ended, once).
pub fn raw_chunks(dir: &Path) -> Vec<RawChunk> {
    let mut chunks: Vec<RawChunk> = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "events" || e == "stage"))
        .collect();
    paths.sort();
    for path in paths {
        let data = std::fs::read(&path).unwrap();
        // The first chunk written (one the collector prepared may be all zero).
        let Some(first) = (0..data.len().saturating_sub(63))
            .step_by(4096)
            .find(|&o| data[o..o + 8] == *b"IFNCHNK1")
        else {
            continue;
        };
        let data = &data[..];
        let version = u32::from_le_bytes(data[first + 8..first + 12].try_into().unwrap());
        let le = (1..=3).contains(&version);
        let u32_at = |b: &[u8], i: usize| {
            let a: [u8; 4] = b[i..i + 4].try_into().unwrap();
            if le {
                u32::from_le_bytes(a)
            } else {
                u32::from_be_bytes(a)
            }
        };
        let u64_at = |b: &[u8], i: usize| {
            let a: [u8; 8] = b[i..i + 8].try_into().unwrap();
            if le {
                u64::from_le_bytes(a)
            } else {
                u64::from_be_bytes(a)
            }
        };
        let version = u32_at(data, first + 8);
        assert!((1..=3).contains(&version), "{}: version", path.display());
        let size = u32_at(data, first + 12) as usize;
        for chunk in data
            .chunks(size)
            .filter(|c| c.len() >= 80 && &c[..8] == b"IFNCHNK1")
        {
            let (slot, seq) = (u32_at(chunk, 16), u64_at(chunk, 24));
            // Events up to the first unwritten one (version 2 and 3: the low two bits of an
            // event's first word are 1 or 2 for a short one, 3 for a long one or, with bit 7
            // set in version 3, a call word).
            let (mut short, mut long, mut calls, mut at) = (0, 0, 0, 64);
            let mut first_kind = 0;
            while at + 16 <= chunk.len() {
                let w = u64_at(chunk, at);
                if version == 1 {
                    if u64_at(chunk, at + 8) == 0 {
                        break;
                    }
                    first_kind = if long == 0 {
                        u64_at(chunk, at + 8) & 15
                    } else {
                        first_kind
                    };
                    long += 1;
                    at += 16;
                } else if w & 3 == 3 && version == 3 && w & 0x80 != 0 {
                    first_kind = if short + long + calls == 0 {
                        1
                    } else {
                        first_kind
                    };
                    calls += 1;
                    at += 8;
                } else if w & 3 == 3 {
                    first_kind = if short + long + calls == 0 {
                        (w >> 2) & 7
                    } else {
                        first_kind
                    };
                    long += 1;
                    at += 16;
                } else if w != 0 {
                    first_kind = if short + long + calls == 0 {
                        w & 3
                    } else {
                        first_kind
                    };
                    short += 1;
                    at += 8;
                } else {
                    break;
                }
            }
            if !chunks.iter().any(|c| (c.slot, c.seq) == (slot, seq)) {
                chunks.push(RawChunk {
                    little_endian: le,
                    slot,
                    seq,
                    first_kind,
                    short,
                    long,
                    calls,
                });
            }
        }
    }
    chunks
}
