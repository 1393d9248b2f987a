//! The trace format's numbers, in one place: the runtime (`instrfn`) writes with them, the
//! reader (`instrfn-trace`) reads with them. docs/trace-format.md says what each means.
//!
//! Constants only: the runtime is preloaded into C programs and built with
//! `-Zinstrument-mcount` by Rust users, so nothing here may be a function that runs.
//! Types are those the runtime's assembly operands and Rust code use.

#![no_std]

/// The meta file's first line: `instrfn-trace <META_VERSION>`.
pub const META_VERSION: u32 = 4;

/// Bytes of a chunk header.
pub const CHUNK_HEADER: usize = 64;
/// A chunk's first 8 bytes; 0 there means an unused (or cleared) chunk.
pub const CHUNK_MAGIC: &[u8; 8] = b"IFNCHNK1";
/// The chunk version the runtime writes: 3, compact events and call words. Readers also take
/// version 1 (16-byte events) and 2 (compact events without call words).
pub const CHUNK_VERSION: u32 = 3;
/// Chunk version 1: events of 16 bytes, the timestamp then `value << EV_WIDE_VALUE_SHIFT | kind`.
pub const CHUNK_VERSION_WIDE: u32 = 1;
pub const EV_WIDE_VALUE_SHIFT: usize = 4;
/// The first chunk version with call words.
pub const CHUNK_VERSION_CALLS: u32 = 3;
/// Chunks start at multiples of this (the chunk size is a multiple of it).
pub const CHUNK_ALIGN: usize = 4096;
/// Where the chunk header keeps its fields (byte offsets).
pub const HDR_VERSION: usize = 8;
pub const HDR_SIZE: usize = 12;
pub const HDR_SLOT: usize = 16;
pub const HDR_TID: usize = 20;
pub const HDR_SEQ: usize = 24;
/// Versions 2 and 3: the time base and the code base of the chunk's short events.
pub const HDR_TBASE: usize = 32;
pub const HDR_CBASE: usize = 40;

/// Event kinds.
pub const EV_ENTRY: usize = 1;
pub const EV_EXIT: usize = 2;
pub const EV_UNWOUND: usize = 3;
pub const EV_LOST: usize = 4;
pub const EV_NOEXIT: usize = 5;
pub const EV_THREAD: usize = 6;

/// Compact events (chunk versions 2 and 3): the low two bits of an event's first word tell its
/// form. A short event is that one word, `(function - code base) << 32 | (time - time base)
/// << 2 | tag`, for an entry (tag 1) or an exit (tag 2) whose function lies within 4 GiB above
/// the chunk's code base and whose time within 2^30 ticks after its time base. Any other event
/// is long: `value << 8 | t << 5 | kind << 2 | 3`, where t is the timestamp's low two bits,
/// then the timestamp with those bits 0. No second word of a long event has a tag: a word with
/// tag 3 always starts a long event (or is a call word).
pub const EV_BYTES: usize = 16;
pub const EV_SHORT_BYTES: usize = 8;
/// The tag's width; a short event's time offset and a long event's kind start above it.
pub const EV_TAG_BITS: usize = 2;
/// Where a short event's function offset starts.
pub const EV_SHORT_FN_SHIFT: usize = 32;
pub const EV_TAG_ENTRY: usize = 1;
pub const EV_TAG_EXIT: usize = 2;
pub const EV_TAG_LONG: usize = 3;
pub const EV_LONG_SHIFT: usize = 8;
pub const EV_TS_SHIFT: usize = 5;
pub const EV_TIME_BITS: usize = 30;
/// A chunk's code base lies this far below the function of the event that made the thread take
/// it: short events reach 2 GiB on either side.
pub const EV_CODE_HALF: u64 = 1 << 31;

/// Call words (chunk version 3): an exit whose entry is the thread's newest event, a short
/// one, replaces that entry with one word telling both: tag 3 with bit 7 set (a long event's
/// first word has bit 7 clear). Its bits 63..8 and 6..2 hold, as high 56 and low 5 bits, a
/// 61-bit value `f << 38 | d << 26 | t`: t the entry's time - time base (26 bits), d the
/// call's length in ticks (12 bits), f the function - code base - EV_CALL_FN_OFFSET (23 bits:
/// 4 MiB on either side of the code base's middle).
pub const EV_CALL_MARK: usize = 0x80;
/// How many of the value's low bits a call word holds in its bits 6..2.
pub const EV_CALL_LOW_BITS: usize = 5;
pub const EV_CALL_T0_BITS: usize = 26;
pub const EV_CALL_DUR_BITS: usize = 12;
pub const EV_CALL_FN_BITS: usize = 23;
pub const EV_CALL_FN_OFFSET: u64 = EV_CODE_HALF - (1 << (EV_CALL_FN_BITS - 1));

const _: () = assert!(EV_CALL_T0_BITS + EV_CALL_DUR_BITS + EV_CALL_FN_BITS == 61);
const _: () = assert!(EV_CALL_T0_BITS <= EV_TIME_BITS);
const _: () = assert!(HDR_CBASE + 8 <= CHUNK_HEADER);
const _: () = assert!(EV_SHORT_FN_SHIFT == EV_TAG_BITS + EV_TIME_BITS);
const _: () = assert!(EV_CALL_MARK == 1 << (EV_TAG_BITS + EV_CALL_LOW_BITS));
const _: () = assert!(EV_LONG_SHIFT == EV_TAG_BITS + EV_CALL_LOW_BITS + 1);

/// Ring mode (`INSTRFN_MODE=ring`): the ring file `<pid>.<image>.ring`. Its first
/// `RING_FILE_HEADER` bytes are the file header; ring r (the rings of thread slot r) starts at
/// `RING_FILE_HEADER + r * region`, where region = `RING_HEADER + chunks * chunk size`.
pub const RING_FILE_MAGIC: &[u8; 8] = b"IFNRINGS";
pub const RING_MAGIC: &[u8; 8] = b"IFNRING1";
pub const RING_VERSION: u32 = 1;
pub const RING_FILE_HEADER: usize = 4096;
pub const RING_HEADER: usize = 4096;
/// The file header's fields (byte offsets): version, chunk size, chunks per ring (u32 each),
/// then the bytes of one ring's region (u64).
pub const RF_VERSION: usize = 8;
pub const RF_CHUNK: usize = 12;
pub const RF_CHUNKS: usize = 16;
pub const RF_REGION: usize = 24;
/// A ring header's fields: version, slot, tid (u32 each), then the sequence number of the
/// newest chunk and how many times the ring went round (u64 each).
pub const RH_VERSION: usize = 8;
pub const RH_SLOT: usize = 12;
pub const RH_TID: usize = 16;
pub const RH_NEWEST: usize = 24;
pub const RH_WRAPS: usize = 32;
/// A ring chunk's sequence number while the thread rewrites it: a reader that sees it, or sees
/// the number change across its copy, drops the copy.
pub const SEQ_REWRITING: u64 = u64::MAX;
