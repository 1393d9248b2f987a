//! Integers read from bytes in a given byte order (a trace's, or an ELF file's). Uses nothing
//! else of the crate.

/// The u32 at byte `at` of `b`; `b` must hold it.
pub(crate) fn u32_at(b: &[u8], at: usize, little_endian: bool) -> u32 {
    let a: [u8; 4] = b[at..at + 4].try_into().expect("4 bytes");
    if little_endian {
        u32::from_le_bytes(a)
    } else {
        u32::from_be_bytes(a)
    }
}

/// The u64 at byte `at` of `b`; `b` must hold it.
pub(crate) fn u64_at(b: &[u8], at: usize, little_endian: bool) -> u64 {
    let a: [u8; 8] = b[at..at + 8].try_into().expect("8 bytes");
    if little_endian {
        u64::from_le_bytes(a)
    } else {
        u64::from_be_bytes(a)
    }
}
