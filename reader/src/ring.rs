//! Ring files (docs/trace-format.md, "Rings"): ring mode's `<pid>.<image>.ring`, one ring of
//! chunks per thread slot, which the program's threads rewrite while it runs. A ring's newest
//! chunks are copied here, and only those proven not rewritten during the copy are kept. Also
//! the snapshots of a ring-mode trace, and what an events file of copied chunks holds. Uses
//! error, endian, chunk and event.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

use instrfn_format::{
    CHUNK_ALIGN, CHUNK_HEADER, CHUNK_MAGIC, EV_BYTES, HDR_SEQ, RF_CHUNK, RF_CHUNKS, RF_REGION,
    RF_VERSION, RH_NEWEST, RH_TID, RH_WRAPS, RING_FILE_HEADER, RING_FILE_MAGIC, RING_HEADER,
    RING_MAGIC, RING_VERSION, SEQ_REWRITING,
};

use crate::chunk::Chunks;
use crate::endian::{u32_at, u64_at};
use crate::error::{Error, error};
use crate::event::{Events, Kind};

/// A ring file, mapped read-only. The mapping is shared: it shows the threads' stores as they
/// happen (the pages are the page cache's).
pub struct RingFile {
    path: PathBuf,
    file: File,
    /// The file as long as it was when opened (None: no ring yet).
    map: Option<memmap2::Mmap>,
    /// The byte order of the program that writes it.
    pub little_endian: bool,
    /// Bytes of a chunk, and chunks per ring.
    pub chunk_size: usize,
    pub chunks: usize,
    /// Bytes of a ring's region: its header and its chunks.
    region: usize,
}

/// A ring's newest chunks, copied: its `window` line's fields and the chunks kept.
pub struct RingCopy {
    pub slot: u32,
    /// The thread that writes the ring now.
    pub tid: u32,
    /// Sequence numbers of the oldest and the newest chunk kept (0 and 0: none).
    pub first: u64,
    pub last: u64,
    /// How many times the ring went round.
    pub wraps: u64,
    /// Chunks rewritten during the copy (or being rewritten when the program died).
    pub dropped: u32,
    /// The chunks kept, oldest first, each as its bytes lie in the file.
    pub chunks: Vec<Vec<u8>>,
}

/// What became of one chunk's copy.
enum Copied {
    Kept,
    /// Its sequence number is older than the one asked for: the thread skipped that number
    /// (docs/trace-format.md, "Chunks in a ring"), the chunk keeps older events.
    Older,
    /// Rewritten before or during the copy.
    Rewritten,
}

impl RingFile {
    /// Opens the ring file at `path` and reads its header. None: its header is not written
    /// yet (the program is starting).
    pub fn open(path: &Path) -> Result<Option<RingFile>, Error> {
        let file = File::open(path).map_err(|e| error(path, format!("cannot open: {e}")))?;
        let mut h = [0u8; 32];
        let n = file
            .read_at(&mut h, 0)
            .map_err(|e| error(path, format!("cannot read: {e}")))?;
        if n < h.len() || h[..8].iter().all(|&b| b == 0) {
            return Ok(None);
        }
        if &h[..8] != RING_FILE_MAGIC {
            return Err(error(path, "not an instrfn ring file (bad magic)"));
        }
        // The byte order is the one in which the version reads as the known one.
        let little_endian = u32_at(&h, RF_VERSION, true) == RING_VERSION;
        if !little_endian && u32_at(&h, RF_VERSION, false) != RING_VERSION {
            return Err(error(path, "unknown ring file version"));
        }
        let chunk_size = u32_at(&h, RF_CHUNK, little_endian) as usize;
        let chunks = u32_at(&h, RF_CHUNKS, little_endian) as usize;
        let region = u64_at(&h, RF_REGION, little_endian) as usize;
        if chunk_size < CHUNK_HEADER + EV_BYTES
            || !chunk_size.is_multiple_of(CHUNK_ALIGN)
            || !(1..=1 << 16).contains(&chunks)
            || Some(region) != chunks.checked_mul(chunk_size).map(|b| b + RING_HEADER)
        {
            return Err(error(path, "corrupt ring file header"));
        }
        let len = file
            .metadata()
            .map_err(|e| error(path, format!("cannot stat: {e}")))?
            .len();
        let map = if len as usize >= RING_FILE_HEADER + region {
            // SAFETY: a read-only mapping of a file the runtime never truncates; its threads
            // store into it meanwhile, which is why it is only read with atomic loads.
            Some(
                unsafe { memmap2::Mmap::map(&file) }
                    .map_err(|e| error(path, format!("cannot map: {e}")))?,
            )
        } else {
            None
        };
        Ok(Some(RingFile {
            path: path.to_path_buf(),
            file,
            map,
            little_endian,
            chunk_size,
            chunks,
            region,
        }))
    }

    /// How many thread slots the file has room for (made or not).
    pub fn slots(&self) -> u32 {
        self.map.as_ref().map_or(0, |m| {
            ((m.len() - RING_FILE_HEADER) / self.region).min(u32::MAX as usize) as u32
        })
    }

    /// The map's aligned word at byte `at`, loaded atomically (another process may be storing
    /// it), in the machine's byte order: as it lies in the file.
    fn raw(&self, at: usize) -> u64 {
        let map = self.map.as_ref().expect("a mapped ring");
        assert!(at.is_multiple_of(8) && at + 8 <= map.len());
        // SAFETY: in the mapping, 8-aligned (the mapping is page-aligned); AtomicU64 has u64's
        // layout. The memory is never written through this mapping (PROT_READ).
        unsafe { AtomicU64::from_ptr(map.as_ptr().add(at) as *mut u64) }.load(Ordering::Relaxed)
    }

    /// The word at byte `at`, in the file's byte order.
    fn word(&self, at: usize) -> u64 {
        let v = self.raw(at);
        if self.little_endian == cfg!(target_endian = "little") {
            v
        } else {
            v.swap_bytes()
        }
    }

    /// The u32 at byte `at` (4-aligned), in the file's byte order.
    fn word32(&self, at: usize) -> u32 {
        let map = self.map.as_ref().expect("a mapped ring");
        assert!(at.is_multiple_of(4) && at + 4 <= map.len());
        // SAFETY: as in `raw`, for a u32.
        let v = unsafe { AtomicU32::from_ptr(map.as_ptr().add(at) as *mut u32) }
            .load(Ordering::Relaxed);
        if self.little_endian == cfg!(target_endian = "little") {
            v
        } else {
            v.swap_bytes()
        }
    }

    /// Copies the chunk at byte `at` into `out` if its sequence number is `expect` before and
    /// after the copy (a seqlock's read side: the thread marks a chunk it rewrites with
    /// SEQ_REWRITING, a fence, then its new events; its new number last).
    fn copy_chunk(&self, at: usize, expect: u64, out: &mut Vec<u8>) -> Copied {
        let before = self.word(at + HDR_SEQ);
        // The copy's loads come after that one.
        fence(Ordering::Acquire);
        if before != expect {
            return if before < expect {
                Copied::Older
            } else {
                Copied::Rewritten // SEQ_REWRITING, or a newer number
            };
        }
        // Where the events end: the first zero word. The thread may still rewrite its newest
        // event (an entry that becomes a call word) but no event before it: once a later
        // word is written, the earlier ones are final. So the copy takes the words up to
        // that end, read after it was found, and zeros after: every word but the last is
        // final, and the last reads as before or after its rewrite, both whole.
        let mut end = at + CHUNK_HEADER;
        while end < at + self.chunk_size && self.raw(end) != 0 {
            end += 8;
        }
        fence(Ordering::Acquire);
        out.clear();
        out.reserve(self.chunk_size);
        for w in (at..end).step_by(8) {
            out.extend_from_slice(&self.raw(w).to_ne_bytes());
        }
        out.resize(self.chunk_size, 0);
        // The copy's loads come before the second look at the number.
        fence(Ordering::Acquire);
        if self.word(at + HDR_SEQ) != expect || &out[..8] != CHUNK_MAGIC {
            return Copied::Rewritten;
        }
        Copied::Kept
    }

    /// The newest chunks of thread slot `slot`'s ring, copied: newest first, back to the
    /// first chunk that was rewritten before or during its copy, so that the chunks kept
    /// follow each other with no gap (the thread rewrites its oldest chunk first: when one is
    /// found rewritten, every older one is too). None: the ring was never made.
    pub fn copy_ring(&self, slot: u32) -> Result<Option<RingCopy>, Error> {
        let ring = RING_FILE_HEADER + slot as usize * self.region;
        if self
            .map
            .as_ref()
            .is_none_or(|m| ring + self.region > m.len())
        {
            return Ok(None);
        }
        // The magic is read with pread: a ring never made may be a hole, which a mapping must
        // not read (tmpfs would allocate a page for it, or raise SIGBUS when full).
        let mut magic = [0u8; 8];
        self.file
            .read_exact_at(&mut magic, ring as u64)
            .map_err(|e| error(&self.path, format!("cannot read: {e}")))?;
        if &magic != RING_MAGIC {
            return if magic == [0; 8] {
                Ok(None)
            } else {
                Err(error(
                    &self.path,
                    format!("corrupt ring header of slot {slot} (bad magic)"),
                ))
            };
        }
        let mut copy = RingCopy {
            slot,
            tid: 0,
            first: 0,
            last: 0,
            wraps: 0,
            dropped: 0,
            chunks: Vec::new(),
        };
        // The header's newest number is written after its chunk's: until then (SEQ_REWRITING)
        // no chunk is whole, and a chunk's number may still be the zero it was made with.
        // A newest chunk found rewritten: the thread lapped the copy, or (a weakly ordered
        // machine) the header's number was seen before its chunk's. Copied again, a few times.
        for _ in 0..4 {
            self.copy_newest(ring, &mut copy);
            if !copy.chunks.is_empty() || copy.dropped == 0 {
                break;
            }
        }
        copy.tid = self.word32(ring + RH_TID);
        copy.wraps = self.word(ring + RH_WRAPS);
        Ok(Some(copy))
    }

    /// [`RingFile::copy_ring`]'s copy of the ring at byte `ring`: its chunks, first, last and
    /// dropped.
    fn copy_newest(&self, ring: usize, copy: &mut RingCopy) {
        let n = self.chunks as u64;
        let chunk_at = |seq: u64| ring + RING_HEADER + (seq % n) as usize * self.chunk_size;
        (copy.first, copy.last, copy.dropped) = (0, 0, 0);
        copy.chunks.clear();
        let newest = self.word(ring + RH_NEWEST);
        fence(Ordering::Acquire);
        if newest != SEQ_REWRITING {
            // A chunk published after the header was read may be newer.
            let newest = (0..n)
                .map(|j| self.word(chunk_at(j) + HDR_SEQ))
                .filter(|&s| s != SEQ_REWRITING)
                .fold(newest, u64::max);
            let span = n.min(newest + 1);
            let mut kept = Vec::new();
            let mut buf = Vec::new();
            for i in 0..span {
                let seq = newest - i;
                match self.copy_chunk(chunk_at(seq), seq, &mut buf) {
                    Copied::Kept => {
                        kept.push(std::mem::take(&mut buf));
                        copy.first = seq;
                        copy.last = copy.last.max(seq);
                    }
                    Copied::Older => {}
                    Copied::Rewritten => {
                        copy.dropped = (span - i) as u32;
                        break;
                    }
                }
            }
            kept.reverse();
            copy.chunks = kept;
        }
    }
}

/// What an events file of copied chunks holds: its events (thread and loss markers not
/// counted) and the newest timestamp among them (the raw counter), None if it has none.
pub fn events_in(events_path: &Path) -> Result<(u64, Option<u64>), Error> {
    let chunks = Chunks::open(events_path, &events_path.with_extension("stage"))?;
    let mut slots: Vec<u32> = chunks.all().iter().map(|c| c.slot).collect();
    slots.dedup();
    let (mut events, mut newest) = (0u64, None::<u64>);
    for slot in slots {
        for e in Events::new(&chunks, slot) {
            let e = e?;
            newest = Some(newest.map_or(e.ts, |n| n.max(e.ts)));
            if !matches!(e.kind, Kind::Thread | Kind::Lost) {
                events += 1;
            }
        }
    }
    Ok((events, newest))
}

/// Whether `dir` holds a ring-mode trace: ring files, and no events file.
pub fn is_ring_trace(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.iter().any(|n| n.ends_with(".ring")) && !names.iter().any(|n| n.ends_with(".events"))
}

/// Whether snapshot directory `snap` is whole: it has meta files and each ends in its
/// `complete` line (a snapshot being taken, or whose taker was stopped, lacks one).
pub fn snapshot_complete(snap: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(snap) else {
        return false;
    };
    let metas: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "meta"))
        .collect();
    !metas.is_empty()
        && metas.iter().all(|m| {
            std::fs::read_to_string(m).is_ok_and(|t| t.lines().any(|l| l.starts_with("complete ")))
        })
}

/// The snapshot directories of the ring-mode trace in `dir`, `dir/snapshots/<n>`, by n
/// (complete or not).
pub fn snapshots(dir: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir.join("snapshots")) else {
        return Vec::new();
    };
    let mut numbered: Vec<(u64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
        .collect();
    numbered.sort();
    numbered
}

/// The reason in snapshot directory `snap`'s `snapshot` line (`exit`, `trigger`, …).
pub fn snapshot_reason(snap: &Path) -> Option<String> {
    std::fs::read_dir(snap)
        .ok()?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "meta"))
        .find_map(|e| {
            let text = std::fs::read_to_string(e.path()).ok()?;
            let line = text.lines().find_map(|l| l.strip_prefix("snapshot "))?;
            Some(line.split(' ').next()?.to_string())
        })
}

/// The newest complete snapshot of the ring-mode trace in `dir` (`dir/snapshots/<n>`, the
/// highest n that is complete), and its `snapshot` line's reason.
pub fn newest_snapshot(dir: &Path) -> Option<(PathBuf, String)> {
    let snap = snapshots(dir)
        .into_iter()
        .rev()
        .map(|(_, p)| p)
        .find(|p| snapshot_complete(p))?;
    let reason = snapshot_reason(&snap).unwrap_or_default();
    Some((snap, reason))
}

#[cfg(test)]
mod tests {
    use instrfn_format::{HDR_SLOT, RH_SLOT, RH_VERSION};

    use super::*;

    const C: usize = 4096;
    const N: usize = 4;

    /// A ring file of 3 slots, 4 chunks of 4 KiB each, in the byte order `le`: slot 0 whose
    /// chunks hold `seqs[0]` by index, slot 1 never made, slot 2 holding `seqs[1]`; each
    /// chunk's first event word is its sequence number + 1.
    fn ring_file(name: &str, le: bool, seqs: [[u64; N]; 2]) -> PathBuf {
        let put32 = |b: &mut [u8], at: usize, v: u32| {
            b[at..at + 4].copy_from_slice(&if le { v.to_le_bytes() } else { v.to_be_bytes() })
        };
        let put64 = |b: &mut [u8], at: usize, v: u64| {
            b[at..at + 8].copy_from_slice(&if le { v.to_le_bytes() } else { v.to_be_bytes() })
        };
        let region = RING_HEADER + N * C;
        let mut f = vec![0u8; RING_FILE_HEADER + 3 * region];
        f[..8].copy_from_slice(RING_FILE_MAGIC);
        put32(&mut f, RF_VERSION, RING_VERSION);
        put32(&mut f, RF_CHUNK, C as u32);
        put32(&mut f, RF_CHUNKS, N as u32);
        put64(&mut f, RF_REGION, region as u64);
        for (slot, seqs) in [(0usize, seqs[0]), (2, seqs[1])] {
            let ring = RING_FILE_HEADER + slot * region;
            f[ring..ring + 8].copy_from_slice(RING_MAGIC);
            put32(&mut f, ring + RH_VERSION, RING_VERSION);
            put32(&mut f, ring + RH_SLOT, slot as u32);
            put32(&mut f, ring + RH_TID, 100 + slot as u32);
            let newest = seqs.iter().filter(|&&s| s != SEQ_REWRITING).max().unwrap();
            put64(&mut f, ring + RH_NEWEST, *newest);
            put64(&mut f, ring + RH_WRAPS, newest / N as u64);
            for (j, &seq) in seqs.iter().enumerate() {
                let c = ring + RING_HEADER + j * C;
                f[c..c + 8].copy_from_slice(CHUNK_MAGIC);
                put32(&mut f, c + HDR_SLOT, slot as u32);
                put64(&mut f, c + HDR_SEQ, seq);
                put64(&mut f, c + CHUNK_HEADER, seq.wrapping_add(1));
            }
        }
        let path =
            std::env::temp_dir().join(format!("instrfn-ring-{name}-{}.ring", std::process::id()));
        std::fs::write(&path, f).unwrap();
        path
    }

    /// (slot, tid, first, last, wraps, dropped) and the first event word of each chunk kept.
    fn copied(path: &Path) -> Vec<([u64; 6], Vec<u64>)> {
        let r = RingFile::open(path).unwrap().unwrap();
        assert_eq!(r.slots(), 3);
        (0..r.slots())
            .filter_map(|s| r.copy_ring(s).unwrap())
            .map(|c| {
                let firsts = c
                    .chunks
                    .iter()
                    .map(|b| u64_at(b, CHUNK_HEADER, r.little_endian))
                    .collect();
                let w = [c.slot as u64, c.tid as u64, c.first, c.last, c.wraps];
                ([w[0], w[1], w[2], w[3], w[4], c.dropped as u64], firsts)
            })
            .collect()
    }

    #[test]
    fn a_window_is_the_newest_chunks_back_to_the_first_rewritten_one() {
        for le in [true, false] {
            // Slot 0: went round once, every chunk whole. Slot 2: the oldest chunk (seq 4) is
            // being rewritten for seq 8: chunks 5 to 7 kept, one dropped.
            let path = ring_file(
                &format!("w{le}"),
                le,
                [[4, 5, 6, 7], [SEQ_REWRITING, 5, 6, 7]],
            );
            assert_eq!(
                copied(&path),
                vec![
                    ([0, 100, 4, 7, 1, 0], vec![5, 6, 7, 8]),
                    ([2, 102, 5, 7, 1, 1], vec![6, 7, 8]),
                ],
                "little-endian {le}"
            );
            std::fs::remove_file(path).unwrap();
        }
    }

    #[test]
    fn a_skipped_number_leaves_no_gap_and_a_young_ring_has_fewer_chunks() {
        // Slot 0: number 5 was skipped (its index keeps chunk 1). Slot 2: chunks 0 and 1 only.
        let path = ring_file("skip", true, [[4, 1, 6, 7], [0, 1, 0, 0]]);
        let c = copied(&path);
        assert_eq!(c[0], ([0, 100, 4, 7, 1, 0], vec![5, 7, 8]));
        assert_eq!(c[1], ([2, 102, 0, 1, 0, 0], vec![1, 2]));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn bad_headers_are_errors_and_an_empty_file_is_not_started() {
        let path = std::env::temp_dir().join(format!("instrfn-ring-bad-{}", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        assert!(RingFile::open(&path).unwrap().is_none());
        std::fs::write(&path, [b'x'; 64]).unwrap();
        let e = RingFile::open(&path).err().unwrap();
        assert!(e.message.contains("bad magic"), "{e}");
        std::fs::remove_file(path).unwrap();
    }
}
