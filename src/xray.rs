//! XRay sleds patched by the runtime itself, without compiler-rt (trace mode only).
//!
//! `clang -fxray-instrument` and rustc `-Zinstrument-xray` leave a sled of nops at each
//! function's entry and at each of its exits, and list them in the object's `xray_instr_map`
//! section. An unpatched sled costs next to nothing (x86_64: the entry sled is a 2-byte jump
//! over 9 bytes of nop, an exit sled is the `ret` followed by 10 bytes of nop). In trace mode
//! (INSTRFN_MODE=trace, `instrfn record`) the runtime finds those sections in every loaded
//! object and patches the sleds of the functions INSTRFN_FILTER / INSTRFN_EXCLUDE choose into
//! calls of its own trampolines (asm/x86_64-xray.s, asm/aarch64-xray.s), which record entry and exit events exactly
//! as the mcount trampolines do: the same events, the same shadow stack (entries without a
//! return address to restore), the same unwinding repair (src/trace.rs). Every command that
//! reads a trace works unchanged.
//!
//! Discovery, per object (the executable at start-up, libraries as they are noted, see
//! [`note_objects`]): the section headers of its ELF file (the loader's path, or
//! /proc/self/exe) are read with raw open/pread; the map lies in memory at its section address
//! plus the load bias. Entries are 32 bytes: the sled's address, the function's address, the
//! kind (0 entry, 1 exit, 2 tail call, 3 entry with argument logging, treated as an entry;
//! custom and typed events and anything else are left alone), and a version: 2 means both
//! addresses are relative to their own field, 0 and 1 absolute. Function ids are compiler-rt's:
//! 1, 2, 3, … each time the function differs from the previous entry's (LLVM emits a
//! function's sleds together, so this is the order in which functions first appear). The
//! `xray_fn_idx` section is not used (LLVM 22 and compiler-rt 14 disagree on its layout).
//! Each object gets an id -> function address table and a stub page within ±2 GiB of its code
//! (a rel32 call must reach it) whose stubs load that table into %r11 and jump to the real
//! trampolines.
//!
//! Patching is safe while other threads run through the sleds: the last store of patching, and
//! the only one of unpatching, is the sled's head alone, the part that decides which form runs
//! (x86_64: its first byte, `eb`/`c3` <-> `68`; aarch64: its first instruction, `b #32` <->
//! `nop`, one aligned 4-byte store; see `mod sled`); the rest of the patched form is written first, where the original
//! head skips it, and left in place when the head is put back (a thread preempted inside a
//! patched sled resumes in the same patched code, which reaches a trampoline). The code is
//! written through /proc/self/mem, which never makes text writable (the kernel copies a
//! one-byte write with one byte store, whatever its memcpy; README says what arm64's does with
//! 4 bytes); where that does not work
//! (qemu-user ignores such writes: every write is read back) the runtime falls back to
//! mprotect, adding PROT_WRITE to the segment and never taking PROT_EXEC away.
//! INSTRFN_XRAY_WRITE=mprotect forces the fallback (for the tests).
//!
//! Stopping (instrfn_stop, moncontrol(0)) puts the heads back by default; with
//! INSTRFN_XRAY_STOP=pause it leaves the sleds patched and the trampolines return at once while
//! recording is off (what the trampolines alone cost; INSTRFN_START=off then patches at load).
//!
//! Everything here is async-signal-safe (raw system calls, no allocation beyond mmap).

use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use crate::collector::syscall;
use crate::modules::Module;
use crate::sys::StackBuf;

/// Most objects with sleds (or without: they are remembered so their file is read once).
const MAX_OBJECTS: usize = 512;
/// Longest INSTRFN_FILTER / INSTRFN_EXCLUDE.
const MAX_PATTERNS: usize = crate::config::MAX_PREFIX;
/// The section instrfn-xray's handler keeps its table in: an object that has it is traced
/// through compiler-rt (which patches its sleds), not patched here.
const CRT_ROUTE_SECTION: &[u8] = b"instrfn_xray_route";
/// Bytes of one `xray_instr_map` entry.
const ENTRY_BYTES: usize = 32;
/// A table entry's flag: the function has no entry sled (rustc `skip-entry`): its exits are
/// recorded without a matching entry.
pub const EXITS_ONLY: usize = 1 << 63;
/// A table entry's flag: the function has no exit or tail sled (rustc `skip-exit`, or it
/// never returns): its entries are recorded as entries without exit (nothing is pushed).
pub const NO_EXIT: usize = 1 << 62;

/// Sled kinds of the map.
const KIND_ENTRY: u8 = 0;
const KIND_EXIT: u8 = 1;
const KIND_TAIL: u8 = 2;
const KIND_LOG_ARGS: u8 = 3;

#[cfg(target_arch = "x86_64")]
mod sled {
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
        if kind == super::KIND_EXIT { 1 } else { 2 }
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
            super::KIND_EXIT => code[0] == 0xc3,
            _ => code[0] == 0xeb && code[1] == 0x09,
        }
    }

    /// The patched sled (its head is `patched[..HEAD]`), or None if the stub is out of the
    /// rel32's reach or the id too high.
    pub fn patched(kind: u8, id: u32, at: usize, stub: usize) -> Option<[u8; BYTES]> {
        if id > MAX_ID {
            return None;
        }
        let exit = kind == super::KIND_EXIT;
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
    pub fn unwind_info(code: usize, len: usize) -> [u8; super::UNWIND_BYTES] {
        let mut e = [0u8; super::UNWIND_BYTES];
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
            assert!(end + 4 <= super::super::UNWIND_BYTES);
        }

        #[test]
        fn patched_forms() {
            let at = 0x10_0000;
            let stub = at + 0x1000;
            let e = patched(super::super::KIND_ENTRY, 0x123456, at, stub).unwrap();
            let rel = (stub - at - 10) as u32;
            let mut want = vec![0xa9, 0x09, 0x56, 0x34, 0x12, 0xe8];
            want.extend_from_slice(&rel.to_le_bytes());
            want.push(0x90);
            assert_eq!(e.to_vec(), want);
            // Byte 1 is the entry sled's own 09: only bytes 2.. and then byte 0 are written.
            assert_eq!(rest(super::super::KIND_ENTRY), 2);
            let x = patched(super::super::KIND_EXIT, 1, at, stub).unwrap();
            let rel = (stub - at - 5) as u32;
            let mut want = vec![0xe8];
            want.extend_from_slice(&rel.to_le_bytes());
            want.extend_from_slice(&[0xc3, 1, 0, 0, 0, 0x90]);
            assert_eq!(x.to_vec(), want);
            assert_eq!(rest(super::super::KIND_EXIT), 1);
            assert!(patched(super::super::KIND_ENTRY, MAX_ID, at, stub).unwrap()[4] == 0xff);
            assert!(patched(super::super::KIND_ENTRY, MAX_ID + 1, at, stub).is_none());
            assert!(patched(super::super::KIND_ENTRY, 1, at, at + (3 << 30)).is_none());
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod sled {
    //! aarch64 sleds (LLVM's AArch64AsmPrinter, compiler-rt's xray_AArch64.cpp): `b #32` and
    //! 7 nops, for entry, exit (before the `ret`) and tail call (before the `b`) alike. Patched
    //! (not compiler-rt's form, whose first instruction becomes an `stp`):
    //!   nop ; mov x16, x30 ; movz w17, #id_lo ; movk w17, #id_hi, lsl #16 ; bl <stub> ;
    //!   bti j ; nop ; nop
    //! where the stub, on a page within the `bl`'s ±128 MiB, saves x0 and the function's x30
    //! (in x16) below sp, loads the object's table into x0 and branches to the trampoline, which
    //! puts x0, x30 and sp back itself and branches (`br x16`) to the `bti j` (a landing pad
    //! where BTI is on, a nop elsewhere). No instruction of the sled moves sp or loses x30, so
    //! the function's own unwind information holds at each of them (compiler-rt's form, and
    //! this one before, pushed the pair in the sled: an unwinder that started between the push
    //! and the pop computed the function's frame 16 bytes off). Words
    //! 1..7 are written first (the original `b #32` skips them), then word 0 alone: `b #32` <->
    //! `nop`, the one store unpatching makes too. B and NOP are among the instructions the
    //! architecture lets one thread replace with each other while another executes them (Arm
    //! ARM, "Concurrent modification and execution of instructions"; the kernel's
    //! `aarch64_insn_hotpatch_safe`): the executing thread runs the old or the new one.
    pub const SUPPORTED: bool = true;
    pub const BYTES: usize = 32;
    pub const HEAD: usize = 4;
    /// Reach of the `bl`.
    pub const REACH: usize = 1 << 27;
    const B32: u32 = 0x1400_0008;
    const NOP: u32 = 0xd503_201f;

    fn word(code: &[u8], i: usize) -> u32 {
        u32::from_le_bytes(code[4 * i..4 * i + 4].try_into().unwrap())
    }

    /// Whether `code` is an unpatched sled: its first instruction (what follows is skipped: its
    /// nops, or, once patched and put back, the patched rest).
    pub fn original(_kind: u8, code: &[u8; BYTES]) -> bool {
        word(code, 0) == B32
    }

    /// Ids are 32 bits (movz + movk).
    pub const MAX_ID: u32 = u32::MAX;

    /// The part written before the head: everything after the first instruction.
    pub fn rest(_kind: u8) -> usize {
        HEAD
    }

    pub fn patched(_kind: u8, id: u32, at: usize, stub: usize) -> Option<[u8; BYTES]> {
        let bl_at = at + 16;
        let off = (stub as i64).wrapping_sub(bl_at as i64);
        if off % 4 != 0 || !(-(1i64 << 27)..(1i64 << 27)).contains(&off) {
            return None;
        }
        let words = [
            NOP,
            0xaa1e_03f0,                                    // mov x16, x30
            0x5280_0011 | ((id & 0xffff) << 5),             // movz w17, #lo
            0x72a0_0011 | ((id >> 16) << 5),                // movk w17, #hi, lsl #16
            0x9400_0000 | ((off >> 2) as u32 & 0x3ff_ffff), // bl stub
            0xd503_249f,                                    // bti j
            NOP,
            NOP,
        ];
        let mut p = [0u8; BYTES];
        for (i, w) in words.iter().enumerate() {
            p[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        Some(p)
    }

    pub fn store_head(at: usize, head: [u8; HEAD]) {
        // SAFETY: a sled's first instruction (4-aligned) in a writable segment (the caller's
        // contract): one 32-bit single-copy-atomic store.
        unsafe {
            (*(at as *const core::sync::atomic::AtomicU32)).store(
                u32::from_le_bytes(head),
                core::sync::atomic::Ordering::Release,
            )
        };
    }

    pub const STUB_BYTES: usize = 32;

    /// `stp x0, x16, [sp, #-16]! ; ldr x0, #12 (table) ; ldr x16, #16 (trampoline) ; br x16`,
    /// the two literals after it (its unwind info: [`unwind_info`]).
    pub fn stub(table: usize, target: usize) -> [u8; STUB_BYTES] {
        let mut s = [0u8; STUB_BYTES];
        s[0..4].copy_from_slice(&0xa9bf_43e0u32.to_le_bytes());
        s[4..8].copy_from_slice(&0x5800_0060u32.to_le_bytes());
        s[8..12].copy_from_slice(&0x5800_0090u32.to_le_bytes());
        s[12..16].copy_from_slice(&0xd61f_0200u32.to_le_bytes());
        s[16..24].copy_from_slice(&(table as u64).to_le_bytes());
        s[24..32].copy_from_slice(&(target as u64).to_le_bytes());
        s
    }

    pub fn trampolines() -> [usize; 3] {
        unsafe extern "C" {
            fn instrfn_aarch64_xray_entry();
            fn instrfn_aarch64_xray_exit();
            fn instrfn_aarch64_xray_tail();
        }
        [
            instrfn_aarch64_xray_entry as *const () as usize,
            instrfn_aarch64_xray_exit as *const () as usize,
            instrfn_aarch64_xray_tail as *const () as usize,
        ]
    }

    /// Unwind info for the stubs at [code, code + len) (`STUB_BYTES` each), in `.eh_frame`
    /// form for `__register_frame` (one CIE, an FDE per stub over its four instructions, the
    /// zero terminator), so that a walk from inside a stub (a signal handler that interrupted
    /// it) goes on: as the trampolines' own CFI does (asm/aarch64-xray.s), it gives the
    /// function's return address — in x16 before the stub's `stp`, at CFA - 8 after it, the
    /// CFA then sp + 16 — as this frame's, so the walk goes from the stub to the function's
    /// caller (the function, at its sled, has no frame of its own yet, or no more).
    pub fn unwind_info(code: usize, len: usize) -> [u8; super::UNWIND_BYTES] {
        let mut e = [0u8; super::UNWIND_BYTES];
        // CIE: length 20; id 0; version 1; "zR"; code alignment 4; data alignment -8; return
        // address column 30 (x30); augmentation data: absolute FDE addresses; DW_CFA_def_cfa
        // sp (31), 0; DW_CFA_register x30, x16; one DW_CFA_nop.
        e[..24].copy_from_slice(&[
            20, 0, 0, 0, 0, 0, 0, 0, 1, b'z', b'R', 0, 4, 0x78, 30, 1, 0, 0x0c, 31, 0, 0x09, 30,
            16, 0,
        ]);
        let mut at = 24;
        for stub in (code..code + len).step_by(STUB_BYTES) {
            // FDE: length 28; CIE pointer (back to offset 0); pc_begin; pc_range 16; no
            // augmentation data; DW_CFA_advance_loc 1 (past the stp), DW_CFA_def_cfa_offset 16,
            // DW_CFA_offset x30, 1 * -8; two DW_CFA_nop.
            e[at..at + 4].copy_from_slice(&28u32.to_le_bytes());
            e[at + 4..at + 8].copy_from_slice(&(at as u32 + 4).to_le_bytes());
            e[at + 8..at + 16].copy_from_slice(&(stub as u64).to_le_bytes());
            e[at + 16..at + 24].copy_from_slice(&16u64.to_le_bytes());
            e[at + 24..at + 32].copy_from_slice(&[0, 0x41, 0x0e, 16, 0x9e, 1, 0, 0]);
            at += 32;
        }
        e
    }

    /// After code at [at, at + len) changed through a data mapping: cleaned to the point of
    /// unification, the instruction cache invalidated (line sizes from CTR_EL0).
    pub fn flush(at: usize, len: usize) {
        let ctr: u64;
        // SAFETY: CTR_EL0 is readable at EL0 on Linux; cache maintenance by address of our own
        // mapped code.
        unsafe {
            core::arch::asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack));
            let dline = 4usize << ((ctr >> 16) & 0xf);
            let iline = 4usize << (ctr & 0xf);
            let mut a = at & !(dline - 1);
            while a < at + len {
                core::arch::asm!("dc cvau, {}", in(reg) a, options(nostack));
                a += dline;
            }
            core::arch::asm!("dsb ish", options(nostack));
            let mut a = at & !(iline - 1);
            while a < at + len {
                core::arch::asm!("ic ivau, {}", in(reg) a, options(nostack));
                a += iline;
            }
            core::arch::asm!("dsb ish", "isb", options(nostack));
        }
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod sled {
    //! No sled patching on this architecture (yet).
    pub const SUPPORTED: bool = false;
    pub const BYTES: usize = 11;
    pub const HEAD: usize = 1;
    pub const REACH: usize = 0;
    pub const MAX_ID: u32 = 0;
    pub fn original(_kind: u8, _code: &[u8; BYTES]) -> bool {
        false
    }
    pub fn rest(_kind: u8) -> usize {
        HEAD
    }
    pub fn patched(_kind: u8, _id: u32, _at: usize, _stub: usize) -> Option<[u8; BYTES]> {
        None
    }
    pub fn store_head(_at: usize, _head: [u8; HEAD]) {}
    pub const STUB_BYTES: usize = 32;
    pub fn stub(_table: usize, _target: usize) -> [u8; STUB_BYTES] {
        [0; STUB_BYTES]
    }
    pub fn trampolines() -> [usize; 3] {
        [0; 3]
    }
    pub fn flush(_at: usize, _len: usize) {}
    pub fn unwind_info(_code: usize, _len: usize) -> [u8; super::UNWIND_BYTES] {
        [0; super::UNWIND_BYTES]
    }
}

/// Bytes of a stub page's unwind info ([`sled::unwind_info`]; none where it is all zero), kept
/// at UNWIND_AT in the page.
const UNWIND_BYTES: usize = 128;
const UNWIND_AT: usize = 128;
const _: () = assert!(3 * sled::STUB_BYTES <= UNWIND_AT && UNWIND_AT + UNWIND_BYTES <= 4096);

/// Stub pages' unwind info not given to the unwinder yet (0: free).
static UNWIND_PENDING: [AtomicUsize; MAX_OBJECTS] = [const { AtomicUsize::new(0) }; MAX_OBJECTS];

/// Gives the unwinder (libgcc's `__register_frame`) the unwind info of the stub pages made
/// since the last call. Only where `dlopen` is safe to call: at load and after a dlopen the
/// wrapper made — never from the paths a signal handler can take (a page made elsewhere, for
/// an object first seen at exit, dlclose or instrfn_start, waits for the next of these). Where libgcc_s is not loaded yet it is loaded
/// (glibc's backtrace() loads it too, at its first call); a static program without a dynamic
/// loader, or an unwinder without `__register_frame`, gets none: a walk from inside a stub
/// stops there.
fn register_unwind_info() {
    let mut register: Option<unsafe extern "C" fn(*const u8)> = None;
    for p in &UNWIND_PENDING {
        if p.load(Ordering::Relaxed) == 0 {
            continue;
        }
        if register.is_none() {
            register = register_frame_fn();
            if register.is_none() {
                return;
            }
        }
        let at = p.swap(0, Ordering::Relaxed);
        if let (Some(f), true) = (register, at != 0) {
            // SAFETY: `at` is a complete .eh_frame list (CIE, FDE, terminator) in a stub page
            // that stays mapped for the life of the process, as __register_frame requires.
            unsafe { f(at as *const u8) };
        }
    }
}

/// libgcc's `__register_frame`, from the loaded libgcc_s or one loaded now (None if there is
/// none). Looked up once.
fn register_frame_fn() -> Option<unsafe extern "C" fn(*const u8)> {
    static FOUND: AtomicUsize = AtomicUsize::new(0); // 1: looked, none
    let mut f = FOUND.load(Ordering::Relaxed);
    if f == 0 {
        // SAFETY: dlsym/dlopen with NUL-terminated names, where the caller says it is safe;
        // the loader's own dlopen (RTLD_NEXT), not this library's wrapper.
        f = unsafe {
            let mut sym = libc::dlsym(libc::RTLD_DEFAULT, c"__register_frame".as_ptr());
            if sym.is_null() {
                let open = libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr());
                if !open.is_null() {
                    let open: unsafe extern "C" fn(
                        *const libc::c_char,
                        libc::c_int,
                    ) -> *mut libc::c_void = core::mem::transmute(open);
                    let h = open(c"libgcc_s.so.1".as_ptr(), libc::RTLD_NOW);
                    if !h.is_null() {
                        sym = libc::dlsym(h, c"__register_frame".as_ptr());
                    }
                }
            }
            // A lookup that failed left its message for dlerror(): taken, so that the program's
            // next dlerror() says what it would have said without us (nothing: this runs at
            // load and after a dlopen of the program's that succeeded).
            libc::dlerror();
            if sym.is_null() { 1 } else { sym as usize }
        };
        FOUND.store(f, Ordering::Relaxed);
    }
    // SAFETY: a function of this signature (libgcc's unwind-dw2-fde.c).
    (f > 1).then(|| unsafe { core::mem::transmute::<usize, unsafe extern "C" fn(*const u8)>(f) })
}

/// Whether this architecture's sleds are patched.
pub const SUPPORTED: bool = sled::SUPPORTED;

/// One sled of an object (an mmap'd array per object).
#[repr(C)]
#[derive(Clone, Copy)]
struct Sled {
    addr: usize,
    id: u32,
    kind: u8,
    /// Whether the filters chose its function.
    chosen: u8,
    /// 1 while patched; 2: not the expected bytes (left alone for good).
    state: u8,
    /// Its first bytes (`sled::HEAD`) before patching.
    orig: [u8; sled::HEAD],
}

/// A loaded object, once looked at.
#[derive(Clone, Copy)]
struct Object {
    /// Its lowest code address (the key; 0: a free entry).
    lo: usize,
    /// Its sleds (mmap'd), and how many.
    sleds: usize,
    nsleds: usize,
    sleds_bytes: usize,
    /// id -> function address (`| EXITS_ONLY`), index 0 unused (mmap'd).
    table: usize,
    /// Functions with sleds (the highest id).
    nfuncs: usize,
    table_bytes: usize,
    /// The stub page near its code (0: none yet).
    stubs: usize,
    /// Its executable segments [start, end) page-aligned, and their protection (for the
    /// mprotect route).
    segs: [(usize, usize, i32); crate::modules::MAX_SEGMENTS],
    nsegs: usize,
}

impl Object {
    const EMPTY: Object = Object {
        lo: 0,
        sleds: 0,
        nsleds: 0,
        sleds_bytes: 0,
        table: 0,
        nfuncs: 0,
        table_bytes: 0,
        stubs: 0,
        segs: [(0, 0, 0); crate::modules::MAX_SEGMENTS],
        nsegs: 0,
    };

    fn sleds(&self) -> &'static mut [Sled] {
        if self.sleds == 0 {
            return &mut [];
        }
        // SAFETY: the object's mmap'd sled array of nsleds entries, used under REGISTRY's lock.
        unsafe { core::slice::from_raw_parts_mut(self.sleds as *mut Sled, self.nsleds) }
    }
}

struct Registry {
    objects: [Object; MAX_OBJECTS],
}

static REGISTRY: spin::mutex::SpinMutex<Registry> = spin::mutex::SpinMutex::new(Registry {
    objects: [Object::EMPTY; MAX_OBJECTS],
});

/// Whether the chosen sleds should be patched now (trace mode and recording on).
static WANTED: AtomicBool = AtomicBool::new(false);
/// INSTRFN_XRAY_STOP=pause: stopping leaves the sleds patched.
static PAUSE: AtomicBool = AtomicBool::new(false);
/// Whether exit and tail sleds are patched (INSTRFN_EXITS; entries only without).
static EXITS: AtomicBool = AtomicBool::new(true);
/// Whether the runtime looks at sleds at all (trace mode was chosen at load).
static ENABLED: AtomicBool = AtomicBool::new(false);
/// How code is written: 0 /proc/self/mem (if it works), 1 mprotect.
static ROUTE: AtomicU8 = AtomicU8::new(0);
/// The patterns (copied at load).
static FILTER: spin::mutex::SpinMutex<([u8; MAX_PATTERNS], usize, [u8; MAX_PATTERNS], usize)> =
    spin::mutex::SpinMutex::new(([0; MAX_PATTERNS], 0, [0; MAX_PATTERNS], 0));
/// Sleds patched now, all objects (for the tests' and the verbose summary's sake).
static PATCHED: AtomicUsize = AtomicUsize::new(0);
/// Warnings said once.
static SAID_MISMATCH: AtomicBool = AtomicBool::new(false);
static SAID_REACH: AtomicBool = AtomicBool::new(false);
static SAID_UNSUPPORTED: AtomicBool = AtomicBool::new(false);
static SAID_FULL: AtomicBool = AtomicBool::new(false);
static SAID_IDS: AtomicBool = AtomicBool::new(false);

/// At load, in trace mode: remembers the filters and patches the sleds of every loaded object
/// (if recording starts at once, or INSTRFN_XRAY_STOP=pause; else [`recording`] does when it
/// starts).
pub fn on_load(config: &crate::config::Config) {
    {
        let mut f = FILTER.lock();
        let (inc, exc) = (config.filter(), config.exclude());
        f.0[..inc.len()].copy_from_slice(inc);
        f.1 = inc.len();
        f.2[..exc.len()].copy_from_slice(exc);
        f.3 = exc.len();
    }
    match crate::sys::getenv(c"INSTRFN_XRAY_WRITE").map(|v| v.trim_ascii()) {
        None | Some(b"" | b"auto") => {}
        Some(b"mprotect") => ROUTE.store(1, Ordering::Relaxed),
        Some(v) => message!(
            "ignoring INSTRFN_XRAY_WRITE=\"{}\": expected mprotect or auto; using auto",
            crate::sys::Bytes(v)
        ),
    }
    EXITS.store(config.exits, Ordering::Relaxed);
    PAUSE.store(config.xray_pause, Ordering::Relaxed);
    ENABLED.store(true, Ordering::Relaxed);
    // Paused, the sleds are patched whether recording or not (INSTRFN_START=off included).
    WANTED.store(config.start || config.xray_pause, Ordering::Relaxed);
    note_objects();
    register_unwind_info();
}

/// Recording starts (true) or stops (false) (instrfn_start/instrfn_stop, moncontrol): every
/// chosen sled is patched, or put back; with INSTRFN_XRAY_STOP=pause they stay patched (since
/// load) and the trampolines return at once while recording is off.
pub fn recording(on: bool) {
    if !PAUSE.load(Ordering::Relaxed) {
        set_wanted(on);
    }
}

/// Whether the chosen sleds are to be patched from now on: every one is patched, or put back.
fn set_wanted(on: bool) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    WANTED.store(on, Ordering::Relaxed);
    let mut reg = REGISTRY.lock();
    let mut w = Writer::new();
    for o in reg.objects.iter_mut().filter(|o| o.lo != 0 && o.nsleds > 0) {
        if on {
            patch(o, &mut w);
        } else {
            unpatch(o, &mut w);
        }
    }
}

/// Trace mode records entries only after all (a hardware shadow stack, src/trace.rs): the
/// exit and tail sleds go back.
pub fn exits_off() {
    if !ENABLED.load(Ordering::Relaxed) || !EXITS.swap(false, Ordering::Relaxed) {
        return;
    }
    let mut reg = REGISTRY.lock();
    let mut w = Writer::new();
    for o in reg.objects.iter_mut().filter(|o| o.lo != 0 && o.nsleds > 0) {
        unpatch(o, &mut w);
        if WANTED.load(Ordering::Relaxed) {
            patch(o, &mut w);
        }
    }
}

/// Tracing could not start after all (gmon mode): the sleds go back, for good.
pub fn disable() {
    set_wanted(false);
    ENABLED.store(false, Ordering::Relaxed);
}

/// Looks at every loaded object not seen yet: finds its sleds and patches the chosen ones if
/// recording is on. At load, and wherever trace mode notes new objects (src/trace.rs
/// `note_modules`: exit, exec, dlclose, `instrfn_flush`). Skipped if another thread is at it
/// (or this one, interrupted: a crash handler).
pub fn note_objects() {
    note(false)
}

/// [`note_objects`], waiting for another thread that is at it: after a dlopen, whose objects
/// must be patched before it returns (src/runtime.rs `module_opened`; signals blocked, so
/// nothing that holds the lock on this thread can be interrupted by it).
pub fn note_objects_waiting() {
    note(true);
    register_unwind_info();
}

fn note(wait: bool) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let Some(mut reg) = (if wait {
        Some(REGISTRY.lock())
    } else {
        REGISTRY.try_lock()
    }) else {
        return;
    };
    let mut w = Writer::new();
    // Which registered objects are still loaded: one another thread's dlopen was loading when
    // it was registered may have failed and been unmapped since (never unloaded through
    // dlclose, so never forgotten); another object may now be where it was.
    let mut seen = [false; MAX_OBJECTS];
    let mut look = |m: &Module| {
        let Some(lo) = m.segments().iter().map(|s| s.start).min() else {
            return;
        };
        if let Some(i) = reg.objects.iter().position(|o| o.lo == lo) {
            seen[i] = true;
            return;
        }
        let Some(i) = reg.objects.iter().position(|o| o.lo == 0) else {
            if !SAID_FULL.swap(true, Ordering::Relaxed) {
                message!(
                    "more than {MAX_OBJECTS} loaded objects: the later ones' XRay sleds are not patched"
                );
            }
            return;
        };
        seen[i] = true;
        let slot = &mut reg.objects[i];
        *slot = discover(m, lo);
        if slot.nsleds > 0 && !SUPPORTED {
            if !SAID_UNSUPPORTED.swap(true, Ordering::Relaxed) {
                message!("XRay sleds are not patched on this architecture");
            }
            return;
        }
        if slot.nsleds > 0 && WANTED.load(Ordering::Relaxed) {
            patch(slot, &mut w);
        }
    };
    look(&Module::executable());
    crate::modules::for_each_shared_object(|m| look(m));
    for (o, _) in reg
        .objects
        .iter_mut()
        .zip(seen)
        .filter(|(o, s)| o.lo != 0 && !s)
    {
        // Gone without dlclose: nothing of its code is touched again.
        let patched = o.sleds().iter().filter(|s| s.state == 1).count();
        PATCHED.fetch_sub(patched, Ordering::Relaxed);
        *o = Object::EMPTY;
    }
}

/// The object whose code started at `lo` is unloaded (dlclose): forgotten, so another
/// object loaded there is looked at afresh. (Its stub page and tables stay mapped: a thread
/// may still be in a stub.)
pub fn forget(lo: usize) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let mut reg = REGISTRY.lock();
    for o in reg.objects.iter_mut().filter(|o| o.lo == lo) {
        let patched = o.sleds().iter().filter(|s| s.state == 1).count();
        PATCHED.fetch_sub(patched, Ordering::Relaxed);
        *o = Object::EMPTY;
    }
}

// ---------------------------------------------------------------------------------------------
// Discovery

/// Maps `len` bytes of zeroed memory (raw mmap), or 0.
fn map(len: usize) -> usize {
    // SAFETY: an anonymous private mapping.
    let p = unsafe {
        crate::collector::mmap(
            0,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p < 0 { 0 } else { p as usize }
}

fn unmap(p: usize, len: usize) {
    if p != 0 {
        // SAFETY: a mapping of ours that nothing uses any more.
        unsafe { syscall(libc::SYS_munmap, [p, len, 0, 0, 0, 0]) };
    }
}

/// An open file (raw descriptor), closed on drop.
struct File(i32);

impl File {
    fn open(path: &core::ffi::CStr) -> Option<File> {
        // SAFETY: openat(2) of a NUL-terminated path, read-only.
        let fd = unsafe {
            syscall(
                libc::SYS_openat,
                [
                    libc::AT_FDCWD as isize as usize,
                    path.as_ptr() as usize,
                    (libc::O_RDONLY | libc::O_CLOEXEC) as usize,
                    0,
                    0,
                    0,
                ],
            )
        };
        (fd >= 0).then_some(File(fd as i32))
    }

    /// Reads exactly `buf.len()` bytes at `off`.
    fn read_at(&self, buf: &mut [u8], off: u64) -> bool {
        let mut done = 0;
        while done < buf.len() {
            // SAFETY: pread64(2) into the rest of `buf`.
            let n = unsafe {
                syscall(
                    libc::SYS_pread64,
                    [
                        self.0 as usize,
                        buf[done..].as_mut_ptr() as usize,
                        buf.len() - done,
                        off as usize + done,
                        0,
                        0,
                    ],
                )
            };
            if n == -(libc::EINTR as isize) {
                continue;
            }
            if n <= 0 {
                return false;
            }
            done += n as usize;
        }
        true
    }

    /// `len` bytes at `off` in fresh mapped memory (unmapped by the caller: [`unmap`]).
    fn read_mapped(&self, off: u64, len: usize) -> Option<usize> {
        let p = map(len.max(1));
        if p == 0 {
            return None;
        }
        // SAFETY: the fresh mapping of len bytes.
        let buf = unsafe { core::slice::from_raw_parts_mut(p as *mut u8, len) };
        if self.read_at(buf, off) {
            Some(p)
        } else {
            unmap(p, len.max(1));
            None
        }
    }
}

impl Drop for File {
    fn drop(&mut self) {
        // SAFETY: our own descriptor.
        unsafe { syscall(libc::SYS_close, [self.0 as usize, 0, 0, 0, 0, 0]) };
    }
}

/// The parts of a section header used here.
#[derive(Clone, Copy, Default)]
struct Section {
    kind: u32,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
    entsize: u64,
}

/// An object's ELF file: its section headers and section name table (mapped).
struct Elf {
    file: File,
    shdrs: usize,
    shnum: usize,
    names: usize,
    names_len: usize,
}

const SHDR_BYTES: usize = 64;

impl Elf {
    fn open(path: &core::ffi::CStr) -> Option<Elf> {
        let file = File::open(path)?;
        let mut ehdr = [0u8; 64];
        if !file.read_at(&mut ehdr, 0) || &ehdr[..4] != b"\x7fELF" || ehdr[4] != 2 {
            return None;
        }
        let little = ehdr[5] == 1;
        if little != cfg!(target_endian = "little") {
            return None;
        }
        let u16_at = |i: usize| u16::from_ne_bytes([ehdr[i], ehdr[i + 1]]) as usize;
        let shoff = u64::from_ne_bytes(ehdr[40..48].try_into().unwrap());
        let (shentsize, shnum, shstrndx) = (u16_at(58), u16_at(60), u16_at(62));
        if shoff == 0 || shnum == 0 || shentsize != SHDR_BYTES || shstrndx >= shnum {
            return None;
        }
        let shdrs = file.read_mapped(shoff, shnum * SHDR_BYTES)?;
        let mut elf = Elf {
            file,
            shdrs,
            shnum,
            names: 0,
            names_len: 0,
        };
        let n = elf.section(shstrndx);
        elf.names_len = n.size as usize;
        elf.names = elf.file.read_mapped(n.offset, elf.names_len)?;
        Some(elf)
    }

    fn section(&self, i: usize) -> Section {
        // SAFETY: inside the mapped section header table (i < shnum).
        let h = unsafe {
            core::slice::from_raw_parts((self.shdrs + i * SHDR_BYTES) as *const u8, SHDR_BYTES)
        };
        let u32_at = |o: usize| u32::from_ne_bytes(h[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_ne_bytes(h[o..o + 8].try_into().unwrap());
        Section {
            kind: u32_at(4),
            addr: u64_at(16),
            offset: u64_at(24),
            size: u64_at(32),
            link: u32_at(40),
            entsize: u64_at(56),
        }
    }

    fn name_of(&self, i: usize) -> &[u8] {
        // SAFETY: as in section(); the name table is mapped, names_len bytes.
        let h = unsafe {
            core::slice::from_raw_parts((self.shdrs + i * SHDR_BYTES) as *const u8, SHDR_BYTES)
        };
        let at = u32::from_ne_bytes(h[0..4].try_into().unwrap()) as usize;
        // SAFETY: the mapped section name table.
        let names = unsafe { core::slice::from_raw_parts(self.names as *const u8, self.names_len) };
        let s = names.get(at..).unwrap_or(&[]);
        &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]
    }

    fn find(&self, name: &[u8]) -> Option<Section> {
        (0..self.shnum)
            .find(|&i| self.name_of(i) == name)
            .map(|i| self.section(i))
    }
}

impl Drop for Elf {
    fn drop(&mut self) {
        unmap(self.shdrs, self.shnum * SHDR_BYTES);
        unmap(self.names, self.names_len.max(1));
    }
}

/// The object's ELF file path as a C string: the loader's, or /proc/self/exe.
fn object_path<'a>(
    m: &Module,
    buf: &'a mut StackBuf<{ crate::modules::MAX_PATH + 1 }>,
) -> Option<&'a core::ffi::CStr> {
    if m.path().is_empty() {
        return Some(c"/proc/self/exe");
    }
    buf.push(m.path());
    buf.as_cstr()
}

/// Reads an object's sled map and builds its tables (no patching). An object without sleds
/// gives an entry with `nsleds` 0 (remembered, never read again).
fn discover(m: &Module, lo: usize) -> Object {
    let mut o = Object::EMPTY;
    o.lo = lo;
    for h in m
        .headers()
        .iter()
        .filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_X != 0)
    {
        if o.nsegs == o.segs.len() {
            break;
        }
        let start = (h.p_vaddr as usize).wrapping_add(m.bias) & !4095;
        let end = ((h.p_vaddr + h.p_memsz) as usize)
            .wrapping_add(m.bias)
            .next_multiple_of(4096);
        let mut prot = libc::PROT_EXEC;
        if h.p_flags & libc::PF_R != 0 {
            prot |= libc::PROT_READ;
        }
        if h.p_flags & libc::PF_W != 0 {
            prot |= libc::PROT_WRITE;
        }
        o.segs[o.nsegs] = (start, end, prot);
        o.nsegs += 1;
    }
    let mut pbuf = StackBuf::new();
    let Some(path) = object_path(m, &mut pbuf) else {
        return o;
    };
    let Some(elf) = Elf::open(path) else {
        return o;
    };
    // An object that links instrfn-xray's handler (instrfn-xray/asm/x86_64.s keeps its table in
    // a section of this name) has compiler-rt patch its sleds with that handler: two patchers
    // would fight over them (whether this runtime is the one linked there or a preloaded one).
    if elf.find(CRT_ROUTE_SECTION).is_some() {
        return o;
    }
    let Some(map_section) = elf.find(b"xray_instr_map") else {
        return o;
    };
    let n = map_section.size as usize / ENTRY_BYTES;
    let base = (map_section.addr as usize).wrapping_add(m.bias);
    // The map must lie in a loaded segment (it is SHF_ALLOC).
    let inside = m.headers().iter().any(|h| {
        let s = (h.p_vaddr as usize).wrapping_add(m.bias);
        h.p_type == libc::PT_LOAD && s <= base && base + n * ENTRY_BYTES <= s + h.p_filesz as usize
    });
    if n == 0 || !inside {
        return o;
    }
    // SAFETY: the map in memory, inside a loaded segment (checked).
    let entries = unsafe { core::slice::from_raw_parts(base as *const [u8; ENTRY_BYTES], n) };
    let code = |a: usize| m.contains(a);
    let decode = |i: usize| -> (usize, usize, u8) {
        let e = &entries[i];
        let a = usize::from_ne_bytes(e[0..8].try_into().unwrap());
        let f = usize::from_ne_bytes(e[8..16].try_into().unwrap());
        let (kind, version) = (e[16], e[18]);
        if version >= 2 {
            let at = base + i * ENTRY_BYTES;
            (at.wrapping_add(a), (at + 8).wrapping_add(f), kind)
        } else {
            // Absolute: relocated by the loader in a position-independent object; else the
            // link-time address (plus the bias, for an object that is loaded elsewhere).
            let fix = |x: usize| if code(x) { x } else { x.wrapping_add(m.bias) };
            (fix(a), fix(f), kind)
        }
    };
    // Function count (compiler-rt's numbering: a new id whenever the function changes).
    let mut nfuncs = 0usize;
    let mut last = 0usize;
    for i in 0..n {
        let (_, f, _) = decode(i);
        if i == 0 || f != last {
            nfuncs += 1;
            last = f;
        }
    }
    let sleds_bytes = (n * core::mem::size_of::<Sled>()).next_multiple_of(4096);
    let table_bytes = ((nfuncs + 1) * 8).next_multiple_of(4096);
    let (sleds, table) = (map(sleds_bytes), map(table_bytes));
    if sleds == 0 || table == 0 {
        unmap(sleds, sleds_bytes);
        unmap(table, table_bytes);
        return o;
    }
    // SAFETY: the fresh mappings, sized above.
    let (sl, tb) = unsafe {
        (
            core::slice::from_raw_parts_mut(sleds as *mut Sled, n),
            core::slice::from_raw_parts_mut(table as *mut usize, nfuncs + 1),
        )
    };
    let mut id = 0u32;
    let mut count = 0;
    for i in 0..n {
        let (a, f, kind) = decode(i);
        if i == 0 || f != last {
            id += 1;
            last = f;
            tb[id as usize] = f | EXITS_ONLY | NO_EXIT;
        }
        if matches!(kind, KIND_ENTRY | KIND_LOG_ARGS) {
            tb[id as usize] &= !EXITS_ONLY;
        }
        if matches!(kind, KIND_EXIT | KIND_TAIL) {
            tb[id as usize] &= !NO_EXIT;
        }
        if !matches!(kind, KIND_ENTRY | KIND_EXIT | KIND_TAIL | KIND_LOG_ARGS)
            || !code(a)
            || !code(a + sled::BYTES - 1)
        {
            continue;
        }
        sl[count] = Sled {
            addr: a,
            id,
            kind: if kind == KIND_LOG_ARGS {
                KIND_ENTRY
            } else {
                kind
            },
            chosen: 1,
            state: 0,
            orig: [0; sled::HEAD],
        };
        count += 1;
    }
    tb[0] = nfuncs;
    choose(&elf, m, tb, &mut sl[..count]);
    o.sleds = sleds;
    o.nsleds = count;
    o.sleds_bytes = sleds_bytes;
    o.table = table;
    o.nfuncs = nfuncs;
    o.table_bytes = table_bytes;
    // The table is read-only from now on.
    // SAFETY: our own mapping.
    unsafe {
        syscall(
            libc::SYS_mprotect,
            [table, table_bytes, libc::PROT_READ as usize, 0, 0, 0],
        )
    };
    o
}

// ---------------------------------------------------------------------------------------------
// INSTRFN_FILTER / INSTRFN_EXCLUDE

/// Marks the sleds of the functions the filters leave out (`chosen` 0). Names come from the
/// object's .symtab (else .dynsym); Rust names are demangled (without the hash), C++ names are
/// matched as they are (mangled).
fn choose(elf: &Elf, m: &Module, table: &[usize], sleds: &mut [Sled]) {
    let f = FILTER.lock();
    let (inc, exc) = (&f.0[..f.1], &f.2[..f.3]);
    if inc.is_empty() && exc.is_empty() {
        return;
    }
    let syms = Symbols::load(elf);
    let nfuncs = table.len() - 1;
    // Decided per function: 0 unknown, 1 chosen, 2 left out.
    let decided_bytes = (nfuncs + 1).next_multiple_of(4096);
    let decided = map(decided_bytes);
    if decided == 0 {
        return;
    }
    // SAFETY: the fresh mapping.
    let decided_s = unsafe { core::slice::from_raw_parts_mut(decided as *mut u8, nfuncs + 1) };
    for s in sleds.iter_mut() {
        let id = s.id as usize;
        if decided_s[id] == 0 {
            let addr = (table[id] & !(EXITS_ONLY | NO_EXIT)).wrapping_sub(m.bias);
            let mut name = StackBuf::<1024>::new();
            let known = syms
                .as_ref()
                .is_some_and(|syms| syms.name(addr as u64, &mut name));
            let n = name.as_bytes();
            let included = inc.is_empty() || (known && any_matches(inc, n));
            let excluded = known && any_matches(exc, n);
            decided_s[id] = if included && !excluded { 1 } else { 2 };
        }
        s.chosen = (decided_s[id] == 1) as u8;
    }
    unmap(decided, decided_bytes);
}

fn any_matches(patterns: &[u8], name: &[u8]) -> bool {
    patterns
        .split(|&b| b == b',')
        .map(|p| p.trim_ascii())
        .filter(|p| !p.is_empty())
        .any(|p| matches(p, name))
}

use crate::glob::matches;

/// An object's function symbols, sorted by address (mapped memory).
struct Symbols {
    /// (address, name offset) pairs.
    index: usize,
    count: usize,
    index_bytes: usize,
    strings: usize,
    strings_len: usize,
}

impl Symbols {
    fn load(elf: &Elf) -> Option<Symbols> {
        let sym = (0..elf.shnum)
            .map(|i| elf.section(i))
            .find(|s| s.kind == 2) // SHT_SYMTAB
            .or_else(|| {
                (0..elf.shnum)
                    .map(|i| elf.section(i))
                    .find(|s| s.kind == 11)
            })?; // SHT_DYNSYM
        if sym.entsize != 24 || sym.link as usize >= elf.shnum {
            return None;
        }
        let strtab = elf.section(sym.link as usize);
        let n = sym.size as usize / 24;
        let raw = elf.file.read_mapped(sym.offset, n * 24)?;
        let index_bytes = (n * 16).max(1);
        let index = map(index_bytes);
        let strings = elf.file.read_mapped(strtab.offset, strtab.size as usize);
        let result = (|| {
            let strings = strings?;
            if index == 0 {
                return None;
            }
            // SAFETY: the mappings made above.
            let (raw_s, idx) = unsafe {
                (
                    core::slice::from_raw_parts(raw as *const [u8; 24], n),
                    core::slice::from_raw_parts_mut(index as *mut (u64, u64), n),
                )
            };
            let mut count = 0;
            for e in raw_s {
                let name = u32::from_ne_bytes(e[0..4].try_into().unwrap()) as u64;
                let info = e[4];
                let shndx = u16::from_ne_bytes([e[6], e[7]]);
                let value = u64::from_ne_bytes(e[8..16].try_into().unwrap());
                if info & 0xf == 2 && shndx != 0 && value != 0 {
                    idx[count] = (value, name);
                    count += 1;
                }
            }
            idx[..count].sort_unstable();
            Some(Symbols {
                index,
                count,
                index_bytes,
                strings,
                strings_len: strtab.size as usize,
            })
        })();
        unmap(raw, (n * 24).max(1));
        if result.is_none() {
            unmap(index, index_bytes);
            if let Some(s) = strings {
                unmap(s, (strtab.size as usize).max(1));
            }
        }
        result
    }

    /// The (demangled) name of the function at link-time address `addr`, into `out`.
    fn name(&self, addr: u64, out: &mut StackBuf<1024>) -> bool {
        // SAFETY: the mapped index of `count` pairs and string table.
        let (idx, strings) = unsafe {
            (
                core::slice::from_raw_parts(self.index as *const (u64, u64), self.count),
                core::slice::from_raw_parts(self.strings as *const u8, self.strings_len),
            )
        };
        let Ok(mut i) = idx.binary_search_by_key(&addr, |e| e.0) else {
            return false;
        };
        while i > 0 && idx[i - 1].0 == addr {
            i -= 1;
        }
        let s = strings.get(idx[i].1 as usize..).unwrap_or(&[]);
        let raw = &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())];
        match core::str::from_utf8(raw)
            .ok()
            .and_then(|r| rustc_demangle::try_demangle(r).ok())
        {
            Some(d) => {
                use core::fmt::Write as _;
                let _ = write!(out, "{d:#}");
            }
            None => out.push(raw),
        }
        true
    }
}

impl Drop for Symbols {
    fn drop(&mut self) {
        unmap(self.index, self.index_bytes);
        unmap(self.strings, self.strings_len.max(1));
    }
}

// ---------------------------------------------------------------------------------------------
// Patching

/// The stub page of an object, mapped near its code on first use: within reach of every
/// address in [lo, hi).
fn stub_page(o: &mut Object) -> usize {
    if o.stubs != 0 {
        return o.stubs;
    }
    let lo = o.segs[..o.nsegs].iter().map(|s| s.0).min().unwrap_or(o.lo);
    let hi = o.segs[..o.nsegs].iter().map(|s| s.1).max().unwrap_or(o.lo);
    let reach = |p: usize| {
        hi.saturating_sub(p) < sled::REACH.saturating_sub(4096)
            && (p + 4096).saturating_sub(lo) < sled::REACH.saturating_sub(4096)
    };
    const MAP_FIXED_NOREPLACE: i32 = 0x100000;
    let step = 1 << 16;
    let mut page = 0;
    'search: for dir in [0, 1] {
        for k in 1..4096usize {
            let hint = if dir == 0 {
                (lo & !(step - 1)).checked_sub(k * step)
            } else {
                (hi.next_multiple_of(step)).checked_add((k - 1) * step)
            };
            let Some(hint) = hint else { break };
            if hint == 0 || !reach(hint) {
                break;
            }
            // SAFETY: an anonymous mapping at a free address (NOREPLACE: never over another).
            let p = unsafe {
                crate::collector::mmap(
                    hint,
                    4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p < 0 {
                continue;
            }
            let p = p as usize;
            if p == hint || reach(p) {
                page = p;
                break 'search;
            }
            unmap(p, 4096); // an old kernel took the flag for a hint and went elsewhere
        }
    }
    if page == 0 {
        return 0;
    }
    for (i, t) in sled::trampolines().into_iter().enumerate() {
        let s = sled::stub(o.table, t);
        // SAFETY: inside the fresh page (3 stubs of STUB_BYTES).
        unsafe {
            core::ptr::copy_nonoverlapping(
                s.as_ptr(),
                (page + i * sled::STUB_BYTES) as *mut u8,
                s.len(),
            )
        };
    }
    let unwind = sled::unwind_info(page, 3 * sled::STUB_BYTES);
    if unwind.iter().any(|&b| b != 0) {
        // SAFETY: inside the fresh page, after the stubs.
        unsafe {
            core::ptr::copy_nonoverlapping(
                unwind.as_ptr(),
                (page + UNWIND_AT) as *mut u8,
                UNWIND_BYTES,
            )
        };
        if let Some(free) = UNWIND_PENDING
            .iter()
            .find(|p| p.load(Ordering::Relaxed) == 0)
        {
            free.store(page + UNWIND_AT, Ordering::Relaxed);
        }
    }
    sled::flush(page, 4096);
    // SAFETY: our own page.
    unsafe {
        syscall(
            libc::SYS_mprotect,
            [
                page,
                4096,
                (libc::PROT_READ | libc::PROT_EXEC) as usize,
                0,
                0,
                0,
            ],
        )
    };
    o.stubs = page;
    page
}

/// The stub a sled of `kind` calls.
fn stub_of(page: usize, kind: u8) -> usize {
    page + sled::STUB_BYTES
        * match kind {
            KIND_EXIT => 1,
            KIND_TAIL => 2,
            _ => 0,
        }
}

fn code_at(a: usize) -> [u8; sled::BYTES] {
    let mut c = [0u8; sled::BYTES];
    for (i, b) in c.iter_mut().enumerate() {
        // SAFETY: a sled inside the object's executable (readable) segment.
        *b = unsafe { core::ptr::read_volatile((a + i) as *const u8) };
    }
    c
}

/// Patches the chosen sleds of `o` that are not patched yet.
fn patch(o: &mut Object, w: &mut Writer) {
    if o.nfuncs > sled::MAX_ID as usize {
        if !SAID_IDS.swap(true, Ordering::Relaxed) {
            message!(
                "an object has {} functions with XRay sleds, more than the {} a patched sled can name: its sleds are not patched",
                o.nfuncs,
                sled::MAX_ID
            );
        }
        return;
    }
    let page = stub_page(o);
    if page == 0 {
        if !SAID_REACH.swap(true, Ordering::Relaxed) {
            message!(
                "no free memory within reach of an object's code: its XRay sleds are not patched"
            );
        }
        return;
    }
    let exits = EXITS.load(Ordering::Relaxed);
    w.begin(o);
    for s in o.sleds().iter_mut() {
        if s.chosen == 0 || s.state != 0 || (!exits && s.kind != KIND_ENTRY) {
            continue;
        }
        let code = code_at(s.addr);
        if !sled::original(s.kind, &code) {
            s.state = 2;
            if !SAID_MISMATCH.swap(true, Ordering::Relaxed) {
                message!(
                    "an XRay sled at {:#x} does not hold the expected code ({:02x} {:02x} ...): left alone",
                    s.addr,
                    code[0],
                    code[1]
                );
            }
            continue;
        }
        let Some(new) = sled::patched(s.kind, s.id, s.addr, stub_of(page, s.kind)) else {
            s.state = 2;
            if !SAID_REACH.swap(true, Ordering::Relaxed) {
                message!(
                    "an XRay sled at {:#x} cannot reach its trampoline: left alone",
                    s.addr
                );
            }
            continue;
        };
        s.orig.copy_from_slice(&code[..sled::HEAD]);
        // The rest first (never executed while the head is the original instruction), unless
        // it is there already (patched before, and put back since); then the head, alone.
        let from = sled::rest(s.kind);
        let rest_ok = code[from..] == new[from..] || w.write(o, s.addr + from, &new[from..]);
        let mut head = [0u8; sled::HEAD];
        head.copy_from_slice(&new[..sled::HEAD]);
        if rest_ok && w.write_head(o, s.addr, head) {
            s.state = 1;
            PATCHED.fetch_add(1, Ordering::Relaxed);
        }
    }
    w.end(o);
}

/// Puts the head (x86_64: the first byte; aarch64: the first instruction) of every patched
/// sled of `o` back, with one store each: the rest stays, skipped again.
fn unpatch(o: &mut Object, w: &mut Writer) {
    w.begin(o);
    for s in o.sleds().iter_mut().filter(|s| s.state == 1) {
        if w.write_head(o, s.addr, s.orig) {
            s.state = 0;
            PATCHED.fetch_sub(1, Ordering::Relaxed);
        }
    }
    w.end(o);
}

/// Writes code: through /proc/self/mem (opened per batch: a descriptor inherited over fork
/// would write the parent's memory), or with the segments made writable (never losing
/// PROT_EXEC) where that does not work.
struct Writer {
    mem: i32,
    /// What `mem` was opened as (src/tracefile.rs: the program may close any descriptor
    /// and reuse its number for a file of its own, which a pwrite at a code address would
    /// damage; it is checked before each write).
    mem_id: (u64, u64),
    /// Whether the current object's segments are writable now (mprotect route).
    open: bool,
}

impl Writer {
    fn new() -> Writer {
        Writer {
            mem: -1,
            mem_id: (0, 0),
            open: false,
        }
    }

    fn begin(&mut self, o: &Object) {
        if ROUTE.load(Ordering::Relaxed) == 0 && self.mem < 0 {
            self.open_mem();
        }
        if ROUTE.load(Ordering::Relaxed) == 1 {
            self.writable(o, true);
        }
    }

    /// Opens /proc/self/mem (at a high descriptor), or takes the mprotect route if it cannot.
    fn open_mem(&mut self) {
        // SAFETY: openat(2) of a constant path.
        let fd = unsafe {
            syscall(
                libc::SYS_openat,
                [
                    libc::AT_FDCWD as isize as usize,
                    c"/proc/self/mem".as_ptr() as usize,
                    (libc::O_RDWR | libc::O_CLOEXEC) as usize,
                    0,
                    0,
                    0,
                ],
            )
        };
        if fd < 0 {
            ROUTE.store(1, Ordering::Relaxed);
        } else {
            let fd = crate::tracefile::move_high(fd as i32);
            match crate::tracefile::identity(fd) {
                Ok(id) => {
                    self.mem = fd;
                    self.mem_id = id;
                }
                Err(_) => {
                    // Cannot be checked later: not used.
                    // SAFETY: the descriptor just opened.
                    unsafe { syscall(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]) };
                    ROUTE.store(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Whether `mem` is still the /proc/self/mem this writer opened.
    fn mem_is_ours(&self) -> bool {
        self.mem >= 0 && crate::tracefile::identity(self.mem) == Ok(self.mem_id)
    }

    fn end(&mut self, o: &Object) {
        if self.open {
            self.writable(o, false);
        }
    }

    fn writable(&mut self, o: &Object, on: bool) {
        if self.open == on {
            return;
        }
        for &(start, end, prot) in &o.segs[..o.nsegs] {
            let prot = if on { prot | libc::PROT_WRITE } else { prot };
            // SAFETY: the object's own executable segment, PROT_EXEC kept throughout.
            unsafe {
                syscall(
                    libc::SYS_mprotect,
                    [start, end - start, prot as usize, 0, 0, 0],
                )
            };
        }
        self.open = on;
    }

    /// Writes `bytes` at `at`; returns whether they are there.
    fn write(&mut self, o: &Object, at: usize, bytes: &[u8]) -> bool {
        if ROUTE.load(Ordering::Relaxed) == 0 && self.pwrite(at, bytes) {
            return true;
        }
        self.fallback(o);
        for (i, &b) in bytes.iter().enumerate() {
            // SAFETY: a sled's bytes in a segment made writable by `fallback`.
            unsafe { core::ptr::write_volatile((at + i) as *mut u8, b) };
        }
        sled::flush(at, bytes.len());
        code_at_is(at, bytes)
    }

    /// Writes a sled's first bytes (its first instruction) with one store.
    fn write_head(&mut self, o: &Object, at: usize, head: [u8; sled::HEAD]) -> bool {
        if ROUTE.load(Ordering::Relaxed) == 0 && self.pwrite(at, &head) {
            return true;
        }
        self.fallback(o);
        sled::store_head(at, head);
        sled::flush(at, sled::HEAD);
        code_at_is(at, &head)
    }

    /// The /proc/self/mem route: pwrite, then read back (qemu-user takes the write and
    /// leaves the guest's memory as it was).
    fn pwrite(&mut self, at: usize, bytes: &[u8]) -> bool {
        if self.mem < 0 {
            return false;
        }
        if !self.mem_is_ours() {
            // The program closed it (its number may be a file of the program's now: left
            // alone). Opened again.
            self.mem = -1;
            self.open_mem();
            if self.mem < 0 {
                return false;
            }
        }
        // SAFETY: pwrite64(2) of our own bytes into our own memory at a sled.
        let n = unsafe {
            syscall(
                libc::SYS_pwrite64,
                [
                    self.mem as usize,
                    bytes.as_ptr() as usize,
                    bytes.len(),
                    at,
                    0,
                    0,
                ],
            )
        };
        n == bytes.len() as isize && code_at_is(at, bytes)
    }

    /// From now on (this process), the mprotect route.
    fn fallback(&mut self, o: &Object) {
        ROUTE.store(1, Ordering::Relaxed);
        self.writable(o, true);
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if self.mem_is_ours() {
            // SAFETY: our own descriptor.
            unsafe { syscall(libc::SYS_close, [self.mem as usize, 0, 0, 0, 0, 0]) };
        }
    }
}

fn code_at_is(at: usize, bytes: &[u8]) -> bool {
    bytes.iter().enumerate().all(|(i, &b)| {
        // SAFETY: readable code bytes of a sled.
        unsafe { core::ptr::read_volatile((at + i) as *const u8) == b }
    })
}
