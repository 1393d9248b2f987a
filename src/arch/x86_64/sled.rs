//! x86_64 sleds (LLVM's X86MCInstLower, compiler-rt's xray_x86_64.cpp):
//! entry and tail: `eb 09` (jmp +9) and a 9-byte nop; exit: `c3` (ret) and a 10-byte nop.
//! Patched (not compiler-rt's form): entry and tail `a9 <w>` (test $w, %eax: flags only;
//! w = (id << 8) | 9), then `e8 <rel32>` (call) to the object's stub and one `90` (nop);
//! exit `e8 <rel32>` in place of the `ret`, then `c3` (the `ret`, after the trampoline
//! returned into the sled) and the id (4 bytes of data, never executed). The trampolines
//! find the id from their return address (entry, tail: in the test's immediate 9 bytes
//! before it; exit: 1 byte after it) and return with a plain `ret` into the sled, so every
//! call is matched by its return (no return mispredicted). No form moves %rsp before its
//! call, so the function's own unwind information stays true at every instruction boundary
//! of the sled (a signal handler that walks the stack there reads the right return
//! address; with a `push` before the call it read the pushed word:
//! tests/fixtures/c/sweep.c). Everything after byte 0 is written first (an entry or tail
//! sled's `jmp +9` skips bytes 2..10, and byte 1, the jump's 09, is the test immediate's low
//! byte; nothing after an exit sled's `ret` runs), then byte 0 alone: `eb` -> `a9`, `c3` ->
//! `e8`, a one-byte store, atomic whatever copies it. Unpatching writes byte 0 back alone;
//! the rest stays (a thread preempted between the `test` and the `call` resumes at the
//! `call`).

use crate::arch::{KIND_EXIT, UNWIND_BYTES};

pub const SUPPORTED: bool = true;
pub const BYTES: usize = 11;
/// Bytes written last, with one store: the one byte that decides which form runs.
pub const HEAD: usize = 1;
/// The highest function id a patched sled can carry (24 bits above the test immediate's
/// low byte; objects with more functions are refused).
pub const MAX_ID: u32 = (1 << 24) - 1;
/// The first byte of the part written before the head: bytes HEAD..rest(kind) are the same
/// in both forms (an entry or tail sled's 09).
pub fn rest(kind: u8) -> usize {
    if kind == KIND_EXIT { 1 } else { 2 }
}
/// The store that writes the head.
pub fn store_head(at: usize, head: [u8; HEAD]) {
    // SAFETY: a sled's first byte in a writable segment (the caller's contract); one byte
    // store, so another thread executes either the old or the new instruction.
    unsafe {
        (*(at as *const core::sync::atomic::AtomicU8))
            .store(head[0], core::sync::atomic::Ordering::Release)
    };
}
/// Reach of the rel32 of the patched call/jmp.
pub const REACH: usize = 1 << 31;

/// Whether `code` (the sled's bytes now) is an unpatched sled of `kind` (its first
/// instruction; what follows is its nop, or, once patched and put back, the patched rest).
pub fn original(kind: u8, code: &[u8; BYTES]) -> bool {
    match kind {
        KIND_EXIT => code[0] == 0xc3,
        _ => code[0] == 0xeb && code[1] == 0x09,
    }
}

/// The patched sled (its head is `patched[..HEAD]`), or None if the stub is out of the
/// rel32's reach or the id too high.
pub fn patched(kind: u8, id: u32, at: usize, stub: usize) -> Option<[u8; BYTES]> {
    if id > MAX_ID {
        return None;
    }
    let exit = kind == KIND_EXIT;
    let call = if exit { 0 } else { 5 }; // where the call is
    let rel = (stub as i64).wrapping_sub((at + call + 5) as i64);
    let rel: i32 = rel.try_into().ok()?;
    let mut p = [0x90u8; BYTES];
    p[call] = 0xe8;
    p[call + 1..call + 5].copy_from_slice(&rel.to_le_bytes());
    if exit {
        p[5] = 0xc3;
        p[6..10].copy_from_slice(&id.to_le_bytes());
    } else {
        p[0] = 0xa9;
        p[1..5].copy_from_slice(&((id << 8) | 0x09).to_le_bytes());
    }
    Some(p)
}

/// Bytes of one stub.
pub const STUB_BYTES: usize = 32;

/// One stub: `movabs $table, %r11; jmp *target(%rip)` with the target after it.
pub fn stub(table: usize, target: usize) -> [u8; STUB_BYTES] {
    let mut s = [0xccu8; STUB_BYTES];
    s[0] = 0x49;
    s[1] = 0xbb;
    s[2..10].copy_from_slice(&(table as u64).to_le_bytes());
    s[10..16].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    s[16..24].copy_from_slice(&(target as u64).to_le_bytes());
    s
}

/// The trampolines the stubs jump to: entry, exit, tail.
pub fn trampolines() -> [usize; 3] {
    unsafe extern "C" {
        fn instrfn_x86_64_xray_entry();
        fn instrfn_x86_64_xray_exit();
        fn instrfn_x86_64_xray_tail();
    }
    [
        instrfn_x86_64_xray_entry as *const () as usize,
        instrfn_x86_64_xray_exit as *const () as usize,
        instrfn_x86_64_xray_tail as *const () as usize,
    ]
}

/// After the code at [at, at + len) changed through a writable mapping: nothing to do
/// (x86 keeps instruction fetch coherent with stores).
pub fn flush(_at: usize, _len: usize) {}

/// Unwind info for the stubs at [code, code + len), in `.eh_frame` form (one CIE, one FDE,
/// the zero terminator) for the unwinder's `__register_frame`, so that a walk from inside
/// a stub (a signal handler that interrupted it) goes on into the function: a stub moves
/// no register an unwinder needs, so throughout it the CFA is %rsp + 8 and the return
/// address (into the sled) is at CFA - 8, as at any function's first instruction.
pub fn unwind_info(code: usize, len: usize) -> [u8; UNWIND_BYTES] {
    let mut e = [0u8; UNWIND_BYTES];
    // CIE: length 20; id 0; version 1; "zR"; code alignment 1; data alignment -8; return
    // address column 16 (%rip); augmentation data: FDE addresses absolute (DW_EH_PE_absptr);
    // DW_CFA_def_cfa %rsp (7), 8; DW_CFA_offset %rip, 1 * -8; two DW_CFA_nop.
    e[..24].copy_from_slice(&[
        20, 0, 0, 0, 0, 0, 0, 0, 1, b'z', b'R', 0, 1, 0x78, 16, 1, 0, 0x0c, 7, 8, 0x90, 1, 0, 0,
    ]);
    // FDE: length 28; CIE pointer 28 (back from this field to the CIE); pc_begin, pc_range;
    // no augmentation data; seven DW_CFA_nop. Then the terminator (zero length).
    e[24..32].copy_from_slice(&[28, 0, 0, 0, 28, 0, 0, 0]);
    e[32..40].copy_from_slice(&(code as u64).to_le_bytes());
    e[40..48].copy_from_slice(&(len as u64).to_le_bytes());
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::KIND_ENTRY;

    #[test]
    fn stub_unwind_info_is_one_cie_one_fde_and_the_terminator() {
        let e = unwind_info(0x7f00_1234_5000, 96);
        let word = |at: usize| u32::from_le_bytes(e[at..at + 4].try_into().unwrap()) as usize;
        let cie = word(0);
        assert_eq!((cie + 4) % 8, 0);
        assert_eq!(word(4), 0, "CIE id");
        assert_eq!(&e[8..12], &[1, b'z', b'R', 0]);
        let fde = cie + 4;
        assert_eq!((word(fde) + 4) % 8, 0);
        assert_eq!(word(fde + 4), fde + 4, "CIE pointer: back to offset 0");
        let begin = u64::from_le_bytes(e[fde + 8..fde + 16].try_into().unwrap());
        let range = u64::from_le_bytes(e[fde + 16..fde + 24].try_into().unwrap());
        assert_eq!((begin, range), (0x7f00_1234_5000, 96));
        let end = fde + 4 + word(fde);
        assert_eq!(word(end), 0, "terminator");
        assert!(end + 4 <= super::UNWIND_BYTES);
    }

    #[test]
    fn patched_forms() {
        let at = 0x10_0000;
        let stub = at + 0x1000;
        let e = patched(KIND_ENTRY, 0x123456, at, stub).unwrap();
        let rel = (stub - at - 10) as u32;
        let mut want = vec![0xa9, 0x09, 0x56, 0x34, 0x12, 0xe8];
        want.extend_from_slice(&rel.to_le_bytes());
        want.push(0x90);
        assert_eq!(e.to_vec(), want);
        // Byte 1 is the entry sled's own 09: only bytes 2.. and then byte 0 are written.
        assert_eq!(rest(KIND_ENTRY), 2);
        let x = patched(KIND_EXIT, 1, at, stub).unwrap();
        let rel = (stub - at - 5) as u32;
        let mut want = vec![0xe8];
        want.extend_from_slice(&rel.to_le_bytes());
        want.extend_from_slice(&[0xc3, 1, 0, 0, 0, 0x90]);
        assert_eq!(x.to_vec(), want);
        assert_eq!(rest(KIND_EXIT), 1);
        assert!(patched(KIND_ENTRY, MAX_ID, at, stub).unwrap()[4] == 0xff);
        assert!(patched(KIND_ENTRY, MAX_ID + 1, at, stub).is_none());
        assert!(patched(KIND_ENTRY, 1, at, at + (3 << 30)).is_none());
    }
}
