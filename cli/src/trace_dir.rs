//! The trace a reading command (`report`, `export`, `dump`) reads: the directory it was
//! given, or, for a ring-mode trace (ring files and no events file), that trace's newest
//! complete snapshot, said on stderr. Uses nothing else of the CLI.

use std::path::Path;

use instrfn_trace::Trace;
use instrfn_trace::ring::{is_ring_trace, newest_snapshot};

/// The trace in `dir`, or its newest snapshot if `dir` holds a ring-mode trace.
pub fn open(dir: &Path) -> Result<Trace, String> {
    if !is_ring_trace(dir) {
        return Trace::open(dir).map_err(|e| e.to_string());
    }
    let Some((snap, reason)) = newest_snapshot(dir) else {
        return Err(format!(
            "{0} is a ring-mode trace: take a snapshot with instrfn snapshot {0}",
            dir.display()
        ));
    };
    eprintln!(
        "instrfn: {} is a ring-mode trace: reading its newest snapshot, {} ({reason})",
        dir.display(),
        snap.display()
    );
    Trace::open(&snap).map_err(|e| e.to_string())
}
