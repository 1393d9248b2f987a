//! The executable's function index (`xray_fn_idx`): which format it has, whether the linked
//! compiler-rt reads it correctly, and if not, the index set aside so that compiler-rt walks
//! the sled map instead (see the crate documentation). Uses raw, sections and sled.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::raw;
use crate::sections::{Symbols, symbols};
use crate::sled::{SLED_ENTRY_SIZE, SledMap, sled_map};

/// Bytes of one function index entry.
pub const INDEX_ENTRY_SIZE: usize = 16;

/// The executable's function index, `xray_fn_idx`, as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexFormat {
    /// No index (`-C llvm-args=-xray-function-index=false`, or no sleds): compiler-rt walks
    /// the sled map.
    None,
    /// (absolute begin, absolute end) per function: older LLVMs (clang 14), what compiler-rt
    /// 14 reads.
    Absolute,
    /// (start relative to the entry itself, sled count) per function: newer LLVMs (today's
    /// rustc, LLVM 22).
    PcRelative,
    /// Neither reading fits every entry.
    Unrecognised,
}

/// Which format this executable's function index has (read from the entries: each must
/// delimit a whole run of sleds within the sled map).
pub fn index_format() -> IndexFormat {
    state().format
}

/// How compiler-rt stands with this executable's function index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexUse {
    /// compiler-rt reads the index as it is written, or there is none.
    Readable,
    /// compiler-rt would misread it; this crate took it out of compiler-rt's sled map, which
    /// now finds each function's sleds by walking the map.
    SetAside,
    /// compiler-rt would misread it and it could not be set aside: per-function patching is
    /// refused, addresses come from the sled map.
    Unreadable,
}

/// What the wrappers found, and did, about the function index (see the crate documentation).
pub fn index_use() -> IndexUse {
    state().index_use
}

/// What the wrappers found, and did, about the function index.
pub(crate) struct State {
    format: IndexFormat,
    index_use: IndexUse,
    /// Function addresses by id - 1, from the sled map.
    pub(crate) functions: Vec<usize>,
}

impl State {
    /// Whether compiler-rt's calls that read the index may be made.
    pub(crate) fn crt_reads_index(&self) -> bool {
        self.index_use != IndexUse::Unreadable
    }
}

/// The major version of the clang whose compiler-rt is linked (0 if unknown).
fn crt_major() -> u32 {
    env!("XRAY_SYS_CLANG_MAJOR").parse().unwrap_or(0)
}

pub(crate) fn state() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(|| {
        // SAFETY: compiler-rt's initialiser: does nothing if it already ran (from
        // .preinit_array), so compiler-rt's sled map is set up before we look at it.
        unsafe { raw::__xray_init() };
        let syms = symbols();
        let map = sled_map();
        let functions = map.map(|m| m.function_addresses()).unwrap_or_default();
        let format = read_format(&syms, map);
        // compiler-rt 14 reads absolute entries; newer ones read PC-relative entries (the
        // version where that changed is only trusted when there is nothing to check: walking
        // the map is right for every version whose map can be checked).
        let index_use = if format == IndexFormat::None
            || (format == IndexFormat::Absolute && (1..17).contains(&crt_major()))
        {
            IndexUse::Readable
        } else if set_index_aside(&syms, map, functions.len()) {
            IndexUse::SetAside
        } else if format == IndexFormat::PcRelative && crt_major() >= 17 {
            IndexUse::Readable
        } else {
            IndexUse::Unreadable
        };
        State {
            format,
            index_use,
            functions,
        }
    })
}

fn read_format(syms: &Symbols, map: Option<SledMap>) -> IndexFormat {
    if syms.fn_idx_start == 0 || syms.fn_idx_stop <= syms.fn_idx_start {
        return IndexFormat::None;
    }
    let Some(map) = map else {
        return IndexFormat::Unrecognised;
    };
    let (lo, hi) = (map.start(), map.start() + map.len() * SLED_ENTRY_SIZE);
    let on_entry = |a: usize| a >= lo && a <= hi && (a - lo).is_multiple_of(SLED_ENTRY_SIZE);
    let n = (syms.fn_idx_stop - syms.fn_idx_start) / INDEX_ENTRY_SIZE;
    let (mut absolute, mut relative) = (true, true);
    for i in 0..n {
        let e = syms.fn_idx_start + i * INDEX_ENTRY_SIZE;
        // SAFETY: entry i lies within the linker-delimited index section, mapped read-only.
        let (w0, w1) = unsafe {
            (
                (e as *const u64).read_unaligned() as usize,
                ((e + 8) as *const u64).read_unaligned() as usize,
            )
        };
        absolute &= on_entry(w0) && on_entry(w1) && w0 < w1;
        let begin = e.wrapping_add(w0);
        relative &= on_entry(begin) && w1 >= 1 && w1 <= (hi - begin.min(hi)) / SLED_ENTRY_SIZE;
        if !absolute && !relative {
            break;
        }
    }
    match (absolute, relative) {
        (true, false) => IndexFormat::Absolute,
        (false, true) => IndexFormat::PcRelative,
        _ => IndexFormat::Unrecognised,
    }
}

/// Takes the function index out of compiler-rt's copy of the sled map, if that copy has
/// compiler-rt 14's layout `{ sleds, entries, index, functions }` and holds exactly this
/// executable's sections; `functions` becomes the count of the sled map walk, which is how
/// compiler-rt numbers functions without an index. Done under compiler-rt's lock of it.
fn set_index_aside(syms: &Symbols, map: Option<SledMap>, functions: usize) -> bool {
    let Some(map) = map else { return false };
    if syms.crt_sled_map == 0 || syms.crt_sled_map_lock == 0 || functions == 0 {
        return false;
    }
    let words = syms.crt_sled_map as *mut usize;
    // SAFETY: XRayInstrMapMutex is compiler-rt's StaticSpinMutex, one byte that is 0 when
    // free and set to 1 by an atomic exchange to take it; compiler-rt only ever accesses it
    // atomically.
    let lock = unsafe { AtomicU8::from_ptr(syms.crt_sled_map_lock as *mut u8) };
    while lock.swap(1, Ordering::Acquire) != 0 {
        std::hint::spin_loop();
    }
    let expected = [
        map.start(),
        map.len(),
        syms.fn_idx_start,
        (syms.fn_idx_stop - syms.fn_idx_start) / INDEX_ENTRY_SIZE,
    ];
    // SAFETY: XRayInstrMap is a compiler-rt global of at least four words in every version
    // that defines it under this name (14: sleds, entries, index, functions); we hold its lock,
    // and write only after all four words read as this executable's sections.
    let ok = unsafe {
        let matches = (0..4).all(|i| words.add(i).read_volatile() == expected[i]);
        if matches {
            words.add(2).write_volatile(0);
            words.add(3).write_volatile(functions);
        }
        matches
    };
    lock.store(0, Ordering::Release);
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sled::tests::{SLEDS, sled_map_in};

    /// Sections for `map` with an index of `entries` (two words each) in `idx`.
    fn syms(map: SledMap, idx: &[u64]) -> Symbols {
        Symbols {
            instr_map_start: map.start(),
            instr_map_stop: map.start() + map.len() * SLED_ENTRY_SIZE,
            fn_idx_start: idx.as_ptr() as usize,
            fn_idx_stop: idx.as_ptr() as usize + idx.len() * 8,
            ..Symbols::default()
        }
    }

    #[test]
    fn index_formats_are_told_apart() {
        let mut buf = vec![0u64; 4 * SLEDS.len()];
        let (map, _) = sled_map_in(&mut buf, &SLEDS);
        let at = |i: usize| (map.start() + i * SLED_ENTRY_SIZE) as u64;
        // Functions' runs of sleds: [0, 2), [2, 5), [5, 6).
        let runs = [(0, 2), (2, 5), (5, 6)];
        let absolute: Vec<u64> = runs.iter().flat_map(|&(b, e)| [at(b), at(e)]).collect();
        assert_eq!(
            read_format(&syms(map, &absolute), Some(map)),
            IndexFormat::Absolute
        );
        let mut relative = vec![0u64; 6];
        let base = relative.as_ptr() as usize;
        for (i, &(b, e)) in runs.iter().enumerate() {
            relative[2 * i] = at(b).wrapping_sub((base + 16 * i) as u64);
            relative[2 * i + 1] = (e - b) as u64;
        }
        assert_eq!(
            read_format(&syms(map, &relative), Some(map)),
            IndexFormat::PcRelative
        );
        // A count that runs past the map, an entry off a sled boundary.
        let mut bad = relative.clone();
        bad[5] = 2;
        assert_eq!(
            read_format(&syms(map, &bad), Some(map)),
            IndexFormat::Unrecognised
        );
        let mut bad = absolute.clone();
        bad[2] += 8;
        assert_eq!(
            read_format(&syms(map, &bad), Some(map)),
            IndexFormat::Unrecognised
        );
        assert_eq!(read_format(&syms(map, &[]), Some(map)), IndexFormat::None);
    }

    #[test]
    fn index_is_set_aside_only_from_a_map_that_matches() {
        let mut buf = vec![0u64; 4 * SLEDS.len()];
        let (map, _) = sled_map_in(&mut buf, &SLEDS);
        let idx = [0u64; 6];
        for (matching, done) in [(true, true), (false, false)] {
            let mut crt = [
                map.start(),
                map.len(),
                idx.as_ptr() as usize,
                if matching { 3 } else { 4 },
            ];
            let mut lock = [0u8];
            let before = crt;
            let s = Symbols {
                crt_sled_map: crt.as_mut_ptr() as usize,
                crt_sled_map_lock: lock.as_mut_ptr() as usize,
                ..syms(map, &idx)
            };
            assert_eq!(set_index_aside(&s, Some(map), 3), done);
            let after = crt;
            if done {
                assert_eq!(after, [before[0], before[1], 0, 3]);
            } else {
                assert_eq!(after, before);
            }
            assert_eq!(lock[0], 0, "the lock is released");
        }
    }
}
