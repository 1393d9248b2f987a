//! Events: what each kind means, and one slot's events decoded from its chunks' words, in the
//! order they were written (docs/trace-format.md: version 1 events, compact events, call
//! words). Uses error and chunk.

use instrfn_format::{
    CHUNK_HEADER, CHUNK_VERSION_WIDE, EV_CALL_DUR_BITS, EV_CALL_FN_OFFSET, EV_CALL_LOW_BITS,
    EV_CALL_MARK, EV_CALL_T0_BITS, EV_ENTRY, EV_EXIT, EV_LONG_SHIFT, EV_LOST, EV_NOEXIT,
    EV_SHORT_FN_SHIFT, EV_TAG_BITS, EV_TAG_ENTRY, EV_TAG_LONG, EV_THREAD, EV_TIME_BITS,
    EV_TS_SHIFT, EV_UNWOUND, EV_WIDE_VALUE_SHIFT,
};

use crate::chunk::{Chunk, Chunks, is_call_word, tag};
use crate::error::{Error, error};

/// What an event says: its kind (docs/trace-format.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A function was entered.
    Entry,
    /// A function returned.
    Exit,
    /// A function's frame was removed by unwinding or longjmp (closed at this time).
    Unwound,
    /// `value` events were lost just before this point.
    Lost,
    /// A function was entered, and its exit will not be recorded (shadow stack full, or
    /// return addresses could not be replaced).
    EntryNoExit,
    /// Another thread (tid = `value`) took over the slot here: the events after it are its.
    Thread,
}

impl Kind {
    fn from_bits(k: u64) -> Option<Kind> {
        Some(match k as usize {
            EV_ENTRY => Kind::Entry,
            EV_EXIT => Kind::Exit,
            EV_UNWOUND => Kind::Unwound,
            EV_LOST => Kind::Lost,
            EV_NOEXIT => Kind::EntryNoExit,
            EV_THREAD => Kind::Thread,
            _ => return None,
        })
    }

    /// The word `instrfn dump` prints.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Entry => "entry",
            Kind::Exit => "exit",
            Kind::Unwound => "unwound",
            Kind::Lost => "lost",
            Kind::EntryNoExit => "entry-no-exit",
            Kind::Thread => "thread",
        }
    }
}

/// One event of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The raw counter ([`crate::Clock::ns`] converts it).
    pub ts: u64,
    pub kind: Kind,
    /// The function's runtime address, or (for [`Kind::Lost`]) the number of events lost.
    pub value: u64,
}

/// `bits` ones.
const fn mask(bits: usize) -> u64 {
    (1 << bits) - 1
}

/// A long event's kind field (above the tag, below the timestamp's low bits).
const LONG_KIND: u64 = mask(EV_TS_SHIFT - EV_TAG_BITS);

/// The events of one slot ([`crate::Process::events`]).
pub struct Events<'a> {
    files: &'a Chunks,
    chunks: Vec<Chunk>,
    next_chunk: usize,
    /// Byte position in the current chunk (0: start the next chunk).
    pos: usize,
    tid: u32,
    /// The exit of the call word just read, returned next.
    exit: Option<Event>,
}

impl Events<'_> {
    /// The events of `slot` in `files`.
    pub(crate) fn new(files: &Chunks, slot: u32) -> Events<'_> {
        Events {
            files,
            chunks: files
                .all()
                .iter()
                .filter(|c| c.slot == slot)
                .copied()
                .collect(),
            next_chunk: 0,
            pos: 0,
            tid: 0,
            exit: None,
        }
    }

    /// The tid of the thread that wrote the last event returned.
    pub fn tid(&self) -> u32 {
        self.tid
    }
}

/// The (timestamp, kind, value) of the event of chunk `c` whose words are `w0`, `w1` (0 for
/// an 8-byte event), and for a call word the exit it also tells.
fn decode(c: &Chunk, w0: u64, w1: u64) -> (u64, u64, u64, Option<Event>) {
    if c.version == CHUNK_VERSION_WIDE {
        return (
            w0,
            w1 & mask(EV_WIDE_VALUE_SHIFT),
            w1 >> EV_WIDE_VALUE_SHIFT,
            None,
        );
    }
    if is_call_word(c, w0) {
        // The entry now, its exit next.
        let v = (w0 >> EV_LONG_SHIFT) << EV_CALL_LOW_BITS
            | (w0 >> EV_TAG_BITS) & mask(EV_CALL_LOW_BITS);
        let start = c.tbase.wrapping_add(v & mask(EV_CALL_T0_BITS));
        let length = (v >> EV_CALL_T0_BITS) & mask(EV_CALL_DUR_BITS);
        let func = c
            .cbase
            .wrapping_add(EV_CALL_FN_OFFSET)
            .wrapping_add(v >> (EV_CALL_T0_BITS + EV_CALL_DUR_BITS));
        let exit = Event {
            ts: start.wrapping_add(length),
            kind: Kind::Exit,
            value: func,
        };
        return (start, EV_ENTRY as u64, func, Some(exit));
    }
    if tag(w0) == EV_TAG_LONG {
        // The call mark reads as the kind's bit 3: set in a long event, the kind is unknown.
        let mark = (w0 & EV_CALL_MARK as u64 != 0) as u64;
        let kind = (w0 >> EV_TAG_BITS) & LONG_KIND | mark << 3;
        let ts = (w1 & !mask(EV_TAG_BITS)) | ((w0 >> EV_TS_SHIFT) & mask(EV_TAG_BITS));
        return (ts, kind, w0 >> EV_LONG_SHIFT, None);
    }
    // A short entry or exit.
    let kind = if tag(w0) == EV_TAG_ENTRY {
        EV_ENTRY
    } else {
        EV_EXIT
    };
    (
        c.tbase
            .wrapping_add((w0 >> EV_TAG_BITS) & mask(EV_TIME_BITS)),
        kind as u64,
        c.cbase.wrapping_add(w0 >> EV_SHORT_FN_SHIFT),
        None,
    )
}

impl Iterator for Events<'_> {
    type Item = Result<Event, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(exit) = self.exit.take() {
            return Some(Ok(exit));
        }
        loop {
            let chunk = *self.chunks.get(self.next_chunk)?;
            if self.pos == 0 {
                self.pos = CHUNK_HEADER;
                self.tid = chunk.tid;
            }
            let at = chunk.offset + self.pos;
            let Some(((w0, w1), len)) = self.files.raw_event(&chunk, self.pos) else {
                self.next_chunk += 1;
                self.pos = 0;
                continue;
            };
            self.pos += len;
            let (ts, kind, value, exit) = decode(&chunk, w0, w1);
            self.exit = exit;
            if kind == EV_THREAD as u64 {
                self.tid = value as u32;
            }
            return Some(match Kind::from_bits(kind) {
                Some(kind) => Ok(Event { ts, kind, value }),
                None => Err(error(
                    self.files.path(&chunk),
                    format!("corrupt event at offset {at} (kind {kind})"),
                )),
            });
        }
    }
}
