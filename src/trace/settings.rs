//! Trace mode's record-time settings, set once at start-up (and again in a fork child) and read
//! everywhere in the trace: chunk size, trace limit, shadow stack depth, what the exits do.
//! Uses nothing else of the crate.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Chunk size (INSTRFN_BUFSIZE).
pub static CHUNK_BYTES: AtomicUsize = AtomicUsize::new(1 << 20);

/// The most chunks the events file may hold (INSTRFN_TRACE_LIMIT).
pub static MAX_CHUNKS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Shadow stack entries per thread (INSTRFN_MAX_DEPTH).
pub static DEPTH: AtomicUsize = AtomicUsize::new(4096);

/// Whether return addresses may be replaced (not with a hardware shadow stack).
pub static HIJACK: AtomicBool = AtomicBool::new(true);

/// INSTRFN_DEPTH: calls deeper than the shadow stack leave no events (instead of entries
/// without exit).
pub static DROP_DEEP: AtomicBool = AtomicBool::new(false);

/// INSTRFN_CALL_WORDS=off.
pub static NO_CALL_WORDS: AtomicBool = AtomicBool::new(false);

/// Events recorded as entries without exit because the shadow stack was full, or hijacking is
/// off (all threads, for the summary).
pub static NOEXIT: AtomicU64 = AtomicU64::new(0);

/// Bytes of a chunk.
pub fn chunk_bytes() -> usize {
    CHUNK_BYTES.load(Ordering::Relaxed)
}
