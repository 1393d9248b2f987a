//! A trace directory: its `<pid>.<image>.meta` files found, and each program image read.
//! Uses error and process.

use std::path::{Path, PathBuf};

use crate::error::{Error, NO_TRACE, error};
use crate::process::Process;

/// A whole trace directory: its processes, ordered by (pid, image).
pub struct Trace {
    pub dir: PathBuf,
    pub processes: Vec<Process>,
}

impl Trace {
    /// Reads every process image in `dir`.
    pub fn open(dir: &Path) -> Result<Trace, Error> {
        let entries = std::fs::read_dir(dir).map_err(|e| {
            error(
                dir,
                if e.kind() == std::io::ErrorKind::NotFound {
                    "no such trace directory".to_string()
                } else {
                    format!("cannot read the trace directory: {e}")
                },
            )
        })?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(".meta").map(str::to_string))
            .collect();
        names.sort();
        if names.is_empty() {
            return Err(error(dir, NO_TRACE));
        }
        let mut processes = names
            .iter()
            .map(|n| {
                Process::open(
                    &dir.join(format!("{n}.meta")),
                    &dir.join(format!("{n}.events")),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        processes.sort_by_key(|p| (p.pid, p.image));
        Ok(Trace {
            dir: dir.to_path_buf(),
            processes,
        })
    }
}

#[cfg(test)]
mod tests {
    use instrfn_format::{
        CHUNK_HEADER, CHUNK_MAGIC, EV_CALL_DUR_BITS, EV_CALL_FN_OFFSET, EV_CALL_LOW_BITS,
        EV_CALL_MARK, EV_CALL_T0_BITS, EV_LONG_SHIFT, EV_TAG_BITS, EV_TAG_LONG, HDR_CBASE,
        HDR_SIZE, HDR_TBASE, HDR_TID, HDR_VERSION,
    };

    use super::*;
    use crate::event::Kind;

    /// A trace directory of one process whose staging file holds one chunk of `version` with
    /// these event words (little-endian), its time base 1000 and code base 0x1000_0000.
    fn trace_of(name: &str, version: u32, words: &[u64]) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("instrfn-reader-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("1.1.meta"),
            "instrfn-trace 4\nprocess 1 0 1\nclock tsc 0x0 0 0\n",
        )
        .unwrap();
        std::fs::write(dir.join("1.1.events"), b"").unwrap();
        let mut chunk = vec![0u8; 4096];
        chunk[..8].copy_from_slice(CHUNK_MAGIC);
        chunk[HDR_VERSION..][..4].copy_from_slice(&version.to_le_bytes());
        chunk[HDR_SIZE..][..4].copy_from_slice(&4096u32.to_le_bytes());
        chunk[HDR_TID..][..4].copy_from_slice(&7u32.to_le_bytes());
        chunk[HDR_TBASE..][..8].copy_from_slice(&1000u64.to_le_bytes());
        chunk[HDR_CBASE..][..8].copy_from_slice(&0x1000_0000u64.to_le_bytes());
        for (i, w) in words.iter().enumerate() {
            chunk[CHUNK_HEADER + 8 * i..][..8].copy_from_slice(&w.to_le_bytes());
        }
        std::fs::write(dir.join("1.1.stage"), chunk).unwrap();
        dir
    }

    fn events_of(dir: &Path) -> Vec<Result<(u64, Kind, u64), String>> {
        let t = Trace::open(dir).unwrap();
        let p = &t.processes[0];
        p.events(0)
            .map(|e| e.map(|e| (e.ts, e.kind, e.value)).map_err(|e| e.message))
            .collect()
    }

    /// A call word as docs/trace-format.md lays it out (and asm/x86_64.s MERGE_CALL makes it).
    fn call_word(t0: u64, length: u64, f: u64) -> u64 {
        let v = f << (EV_CALL_T0_BITS + EV_CALL_DUR_BITS) | length << EV_CALL_T0_BITS | t0;
        let low = (1 << EV_CALL_LOW_BITS) - 1;
        (v >> EV_CALL_LOW_BITS) << EV_LONG_SHIFT
            | (v & low) << EV_TAG_BITS
            | (EV_CALL_MARK | EV_TAG_LONG) as u64
    }

    #[test]
    fn a_call_word_is_an_entry_and_its_exit() {
        // Every field at its widest, and at its smallest, then a long exit (bit 7 clear) and a
        // short entry after it: the events in that order, each at its time.
        let wide = call_word((1 << 26) - 1, (1 << 12) - 1, (1 << 23) - 1);
        let long = (0x5000u64 << 8) | (2 << 5) | (2 << 2) | 3;
        let short = (0x40u64 << 32) | (77 << 2) | 1;
        let dir = trace_of(
            "calls",
            3,
            &[call_word(20, 30, 5), wide, long, 999_996, short],
        );
        let base = 0x1000_0000 + EV_CALL_FN_OFFSET;
        let last = base + (1 << 23) - 1;
        assert_eq!(
            events_of(&dir),
            vec![
                Ok((1020, Kind::Entry, base + 5)),
                Ok((1050, Kind::Exit, base + 5)),
                Ok((1000 + (1 << 26) - 1, Kind::Entry, last)),
                Ok((1000 + (1 << 26) - 1 + (1 << 12) - 1, Kind::Exit, last)),
                Ok((999_998, Kind::Exit, 0x5000)),
                Ok((1077, Kind::Entry, 0x1000_0040)),
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_version_2_chunk_has_no_call_words() {
        // The same word in a version 2 chunk is a long event of an unknown kind: an error.
        let dir = trace_of("v2", 2, &[call_word(20, 30, 5), 1_000_000]);
        let events = events_of(&dir);
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(
            events[0]
                .as_ref()
                .is_err_and(|e| e.contains("corrupt event")),
            "{events:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
