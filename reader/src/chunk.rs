//! The events and staging files of one program image (docs/trace-format.md, "Events and
//! staging files"). Both are mapped. Their chunks are found by header and listed per slot, in
//! sequence order. This module reads each event's raw words; event.rs decodes them. Uses error
//! and endian.

use std::path::{Path, PathBuf};

use instrfn_format::{
    CHUNK_ALIGN, CHUNK_HEADER, CHUNK_MAGIC, CHUNK_VERSION, CHUNK_VERSION_CALLS, CHUNK_VERSION_WIDE,
    EV_BYTES, EV_CALL_MARK, EV_SHORT_BYTES, EV_TAG_BITS, EV_TAG_LONG, HDR_CBASE, HDR_SEQ, HDR_SIZE,
    HDR_SLOT, HDR_TBASE, HDR_TID, HDR_VERSION,
};

use crate::endian::{u32_at, u64_at};
use crate::error::{Error, error};

/// The events file (0) and the staging file (1).
const EVENTS: usize = 0;
const STAGE: usize = 1;

/// One chunk of an events or staging file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chunk {
    /// Which file: [`EVENTS`] or [`STAGE`].
    file: usize,
    pub offset: usize,
    len: usize,
    pub slot: u32,
    pub tid: u32,
    seq: u64,
    /// 1: events of 16 bytes; 2: compact events, relative to the time and code bases; 3: also
    /// call words.
    pub version: u32,
    pub tbase: u64,
    pub cbase: u64,
}

/// The tag of a compact event's first word (its low bits).
pub(crate) fn tag(w: u64) -> usize {
    (w & ((1 << EV_TAG_BITS) - 1)) as usize
}

/// Whether `w`, the first word of an event of chunk `c`, is a call word.
pub(crate) fn is_call_word(c: &Chunk, w: u64) -> bool {
    c.version >= CHUNK_VERSION_CALLS && tag(w) == EV_TAG_LONG && w & EV_CALL_MARK as u64 != 0
}

/// The mapped files and their chunks.
pub(crate) struct Chunks {
    /// The events file's and the staging file's paths.
    paths: [PathBuf; 2],
    /// Their mappings (None: empty or absent).
    maps: [Option<memmap2::Mmap>; 2],
    little_endian: bool,
    /// Ordered by (slot, sequence number); one copy of each.
    list: Vec<Chunk>,
}

/// The byte ranges of a file that hold data, from `lseek(SEEK_DATA / SEEK_HOLE)`; the whole
/// file where the file system cannot tell.
fn data_ranges(f: &std::fs::File, len: usize) -> Vec<(usize, usize)> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    let mut ranges = Vec::new();
    let mut at = 0usize;
    while at < len {
        // SAFETY: lseek on a descriptor we own; it only moves the file offset.
        let start = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if start < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) {
                break; // no data after `at`
            }
            return vec![(0, len)];
        }
        // SAFETY: as above.
        let end = unsafe { libc::lseek(fd, start, libc::SEEK_HOLE) };
        if end <= start {
            return vec![(0, len)];
        }
        ranges.push((start as usize, (end as usize).min(len)));
        at = end as usize;
    }
    ranges
}

impl Chunks {
    /// Maps the events file and the staging file and lists their chunks. A chunk is in one of
    /// them, or in both after a SIGKILL between a commit's copy and the clearing of its
    /// staging chunk: then the copy with more events counts.
    pub(crate) fn open(events_path: &Path, stage_path: &Path) -> Result<Chunks, Error> {
        let mut c = Chunks {
            paths: [events_path.to_path_buf(), stage_path.to_path_buf()],
            maps: [None, None],
            little_endian: cfg!(target_endian = "little"),
            list: Vec::new(),
        };
        let mut sizes = Vec::new();
        for file in [EVENTS, STAGE] {
            if let Some(size) = c.map_file(file)? {
                sizes.push(size);
            }
        }
        if sizes.windows(2).any(|w| w[0] != w[1]) {
            return Err(error(
                stage_path,
                "corrupt: its chunk size differs from the events file's",
            ));
        }
        c.list.sort_by_key(|k| (k.slot, k.seq, k.file));
        let chunks = std::mem::take(&mut c.list);
        let mut kept: Vec<Chunk> = Vec::with_capacity(chunks.len());
        for k in chunks {
            match kept.last_mut() {
                Some(last) if (last.slot, last.seq) == (k.slot, k.seq) => {
                    if c.written(&k) > c.written(last) {
                        *last = k;
                    }
                }
                _ => kept.push(k),
            }
        }
        c.list = kept;
        Ok(c)
    }

    /// Every chunk, ordered by (slot, sequence number).
    pub(crate) fn all(&self) -> &[Chunk] {
        &self.list
    }

    /// The file that holds chunk `c`.
    pub(crate) fn path(&self, c: &Chunk) -> &Path {
        &self.paths[c.file]
    }

    /// Events written in a chunk (up to the first unwritten one).
    fn written(&self, c: &Chunk) -> usize {
        let mut n = 0;
        let mut pos = CHUNK_HEADER;
        while let Some((_, len)) = self.raw_event(c, pos) {
            n += 1;
            pos += len;
        }
        n
    }

    /// The words of the event at byte `pos` of chunk `c` (the second 0 for an 8-byte event)
    /// and its length, or None where the chunk's events end (a zero word, or its end).
    pub(crate) fn raw_event(&self, c: &Chunk, pos: usize) -> Option<((u64, u64), usize)> {
        let map = self.maps[c.file].as_ref()?;
        let word = |at: usize| -> Option<u64> {
            (at + 8 <= c.len).then(|| u64_at(map, c.offset + at, self.little_endian))
        };
        if c.version == CHUNK_VERSION_WIDE {
            let (ts, tag) = (word(pos)?, word(pos + 8)?);
            return (tag != 0).then_some(((ts, tag), EV_BYTES));
        }
        let w = word(pos)?;
        match tag(w) {
            0 => None,
            _ if is_call_word(c, w) => Some(((w, 0), EV_SHORT_BYTES)),
            EV_TAG_LONG => {
                let ts = word(pos + 8)?;
                (ts != 0).then_some(((w, ts), EV_BYTES))
            }
            _ => Some(((w, 0), EV_SHORT_BYTES)),
        }
    }

    /// Maps one file and lists its chunks; returns its chunk size (None: no chunk in it). The
    /// events file must exist; a missing staging file is a version 1 trace's.
    fn map_file(&mut self, file: usize) -> Result<Option<usize>, Error> {
        let path = &self.paths[file];
        let f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && file == STAGE => {
                return Ok(None);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(error(
                    path,
                    "missing (the meta file names a process whose events file is gone)",
                ));
            }
            Err(e) => return Err(error(path, format!("cannot open: {e}"))),
        };
        let len = f
            .metadata()
            .map_err(|e| error(path, format!("cannot stat: {e}")))?
            .len() as usize;
        if len == 0 {
            return Ok(None);
        }
        // SAFETY: the file is only read; a writer still running could change it under us,
        // which at worst shows events that appear while we read (never invalid memory: the
        // mapping's length is fixed).
        let map = unsafe { memmap2::Mmap::map(&f) }
            .map_err(|e| error(path, format!("cannot map: {e}")))?;
        // Only the parts of the file that hold data are read: a hole's page (a chunk whose
        // allocation failed, the disk full) would have to be allocated to be read on some file
        // systems (tmpfs), which fails with SIGBUS when it is full.
        let data = data_ranges(&f, len);
        // Where the data run that holds `offset` ends (None: a hole).
        let data_end = |offset: usize| {
            data.iter()
                .find(|&&(a, b)| a <= offset && offset < b)
                .map(|&(_, b)| b)
        };
        // The first chunk header. Any chunk may be all zero (prepared by the collector and
        // never taken, chunk 0 included), and a staging chunk being cleared as the process
        // ended has its magic zeroed and old events after it.
        let starts = || {
            (0..len.saturating_sub(CHUNK_HEADER - 1))
                .step_by(CHUNK_ALIGN)
                .filter(|&o| data_end(o).is_some_and(|end| end >= o + CHUNK_HEADER))
        };
        let magic = CHUNK_MAGIC.len();
        let Some(first) = starts().find(|&o| &map[o..o + magic] == CHUNK_MAGIC) else {
            // None: nothing written, or (staging file) only chunks cleared or being cleared.
            return match starts().find(|&o| map[o..o + magic].iter().any(|&b| b != 0)) {
                Some(at) if file == EVENTS => Err(error(
                    path,
                    format!("not an instrfn events file (bad chunk magic at offset {at})"),
                )),
                _ => Ok(None),
            };
        };
        // The byte order is the one in which the version field reads as a known version.
        let known = |v: u32| (CHUNK_VERSION_WIDE..=CHUNK_VERSION).contains(&v);
        let le = known(u32_at(&map, first + HDR_VERSION, true));
        if !le && !known(u32_at(&map, first + HDR_VERSION, false)) {
            return Err(error(path, "unknown events file version"));
        }
        let size = u32_at(&map, first + HDR_SIZE, le) as usize;
        if size < CHUNK_HEADER + EV_BYTES
            || !size.is_multiple_of(EV_BYTES)
            || !first.is_multiple_of(size)
        {
            return Err(error(path, format!("corrupt chunk size {size}")));
        }
        let mut offset = 0;
        while offset < len {
            let Some(end) = data_end(offset) else {
                offset += size;
                continue;
            };
            let chunk = &map[offset..len.min(offset + size).min(end)];
            if chunk.len() < CHUNK_HEADER || chunk.iter().take(magic).all(|&b| b == 0) {
                // Allocated but never written (prepared and never taken, a staging chunk
                // committed and cleared, or the process died before its header), or cut short.
                offset += size;
                continue;
            }
            if &chunk[..magic] != CHUNK_MAGIC {
                return Err(error(
                    path,
                    format!("corrupt chunk at offset {offset} (bad magic)"),
                ));
            }
            let version = u32_at(chunk, HDR_VERSION, le);
            if !known(version) {
                return Err(error(
                    path,
                    format!("corrupt chunk at offset {offset} (version {version})"),
                ));
            }
            self.list.push(Chunk {
                file,
                offset,
                len: chunk.len(),
                slot: u32_at(chunk, HDR_SLOT, le),
                tid: u32_at(chunk, HDR_TID, le),
                seq: u64_at(chunk, HDR_SEQ, le),
                version,
                tbase: u64_at(chunk, HDR_TBASE, le),
                cbase: u64_at(chunk, HDR_CBASE, le),
            });
            offset += size;
        }
        self.little_endian = le;
        self.maps[file] = Some(map);
        Ok(Some(size))
    }

    /// Bytes of the chunks that hold events.
    pub(crate) fn bytes(&self) -> u64 {
        self.list.iter().map(|c| c.len as u64).sum()
    }
}
