//! aarch64 sleds (LLVM's AArch64AsmPrinter, compiler-rt's xray_AArch64.cpp): `b #32` and
//! 7 nops, for entry, exit (before the `ret`) and tail call (before the `b`) alike. Patched
//! (not compiler-rt's form, whose first instruction becomes an `stp`):
//!   nop ; mov x16, x30 ; movz w17, #id_lo ; movk w17, #id_hi, lsl #16 ; bl <stub> ;
//!   bti j ; nop ; nop
//! where the stub, on a page within the `bl`'s ±128 MiB, saves x0 and the function's x30
//! (in x16) below sp, loads the object's table into x0 and branches to the trampoline, which
//! puts x0, x30 and sp back itself and branches (`br x16`) to the `bti j` (a landing pad
//! where BTI is on, a nop elsewhere). No instruction of the sled moves sp or loses x30, so
//! the function's own unwind information holds at each of them (compiler-rt's form pushes the
//! pair in the sled: an unwinder that starts between the push and the pop computes the
//! function's frame 16 bytes off). Words
//! 1..7 are written first (the original `b #32` skips them), then word 0 alone: `b #32` <->
//! `nop`, the one store unpatching makes too. B and NOP are among the instructions the
//! architecture lets one thread replace with each other while another executes them (Arm
//! ARM, "Concurrent modification and execution of instructions"; the kernel's
//! `aarch64_insn_hotpatch_safe`): the executing thread runs the old or the new one.

use crate::arch::UNWIND_BYTES;

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
/// it) goes on: as the trampolines' own CFI does (src/arch/aarch64/xray.s), it gives the
/// function's return address — in x16 before the stub's `stp`, at CFA - 8 after it, the
/// CFA then sp + 16 — as this frame's, so the walk goes from the stub to the function's
/// caller (the function, at its sled, has no frame of its own yet, or no more).
pub fn unwind_info(code: usize, len: usize) -> [u8; UNWIND_BYTES] {
    let mut e = [0u8; UNWIND_BYTES];
    // CIE: length 20; id 0; version 1; "zR"; code alignment 4; data alignment -8; return
    // address column 30 (x30); augmentation data: absolute FDE addresses; DW_CFA_def_cfa
    // sp (31), 0; DW_CFA_register x30, x16; one DW_CFA_nop.
    e[..24].copy_from_slice(&[
        20, 0, 0, 0, 0, 0, 0, 0, 1, b'z', b'R', 0, 4, 0x78, 30, 1, 0, 0x0c, 31, 0, 0x09, 30, 16, 0,
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
