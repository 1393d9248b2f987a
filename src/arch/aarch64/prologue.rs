//! Which functions sign their return address: the prologue read backwards from the `bl
//! _mcount`, decided once per call site (the class table in src/arch/aarch64/guarded.s).
//! Pure code over the instructions, with `mincore` before reading a page further back.

use super::{SITE_ENTRY_ONLY, SITE_PLAIN};

/// What one instruction of a prologue says, read backwards from the `bl _mcount`.
#[derive(PartialEq, Eq, Debug)]
enum Step {
    /// What a prologue may hold: any load, store, data-processing or SIMD/FP/SVE instruction,
    /// or a hint (xpaclri), moving sp down by the given bytes (a `sub sp, sp, #n`, a store
    /// with pre-index writeback to sp): look further back. (Compilers schedule more than the
    /// frame setup before the call: gcc computes addresses there, e.g. `add x19, sp, #64`.)
    Prologue(u64),
    /// `add x29, sp, #n` (`mov x29, sp`): the frame record is set up n bytes above sp.
    FramePointer(u64),
    /// paciasp / pacibsp / paciaz / pacibz: the function signs its return address.
    Signs,
    /// The function's start (`bti`), or the end of the code before it (ret, b, bl, br, nop,
    /// udf, brk): the function does not sign. (No function falls through into the next.)
    Boundary,
    /// Any other branch or system instruction, or one that moves sp in another way: not a
    /// prologue as compilers write it.
    Unknown,
}

fn step(w: u32) -> Step {
    let rd = w & 31;
    let rn = (w >> 5) & 31;
    match w {
        0xd503_233f | 0xd503_237f | 0xd503_231f | 0xd503_235f => Step::Signs,
        0xd503_201f | 0xd65f_0bff | 0xd65f_0fff => Step::Boundary, // nop, retaa, retab
        _ if w & 0xffff_ff3f == 0xd503_241f => Step::Boundary,     // bti, bti c/j/jc
        _ if w & 0xffff_f01f == 0xd503_201f => Step::Prologue(0),  // other hints (xpaclri)
        _ if w & 0xffff_fc1f == 0xd65f_0000 => Step::Boundary,     // ret
        _ if w & 0xffff_fc1f == 0xd61f_0000 => Step::Boundary,     // br
        _ if w & 0x7c00_0000 == 0x1400_0000 => Step::Boundary,     // b, bl
        _ if w & 0xffe0_001f == 0xd420_0000 => Step::Boundary,     // brk
        _ if w & 0xffff_0000 == 0 => Step::Boundary,               // udf (padding)
        _ if (w >> 26) & 7 == 0b101 => Step::Unknown, // other branches, exceptions, system
        _ if (w >> 25) & 0xf == 0 => Step::Unknown,   // reserved
        // sub sp, sp, #imm{, lsl #12}
        _ if w & 0xff80_03ff == 0xd100_03ff => {
            Step::Prologue((((w >> 10) & 0xfff) as u64) << (12 * ((w >> 22) & 1)))
        }
        // add x29, sp, #imm{, lsl #12}
        _ if w & 0xff80_03ff == 0x9100_03fd => {
            Step::FramePointer((((w >> 10) & 0xfff) as u64) << (12 * ((w >> 22) & 1)))
        }
        // any other add/sub (immediate or extended register) or logical immediate into sp,
        // and SVE's addvl/addpl
        _ if rd == 31 && w & 0x3f00_0000 == 0x1100_0000 => Step::Unknown,
        _ if rd == 31 && w & 0x3f20_0000 == 0x0b20_0000 => Step::Unknown,
        _ if rd == 31 && w & 0x1f80_0000 == 0x1200_0000 && (w >> 29) & 3 != 3 => Step::Unknown,
        _ if rd == 31 && w & 0xffa0_f800 == 0x0420_5000 => Step::Unknown,
        // load/store pair with writeback to sp: a store pre-indexed moves sp down
        _ if rn == 31 && w & 0x3a00_0000 == 0x2800_0000 && (w >> 23) & 1 == 1 => {
            let vector = (w >> 26) & 1 == 1;
            let opc = w >> 30;
            let scale = if vector { 4 << opc } else { 4 << (opc >> 1) };
            let imm = (((w >> 15) & 0x7f) as i64) << 57 >> 57;
            let store = (w >> 22) & 1 == 0;
            if (w >> 24) & 1 == 1 && store && imm < 0 {
                Step::Prologue((-imm * scale) as u64)
            } else {
                Step::Unknown
            }
        }
        // load/store register (9-bit offset) with writeback to sp
        _ if rn == 31 && w & 0x3b20_0000 == 0x3800_0000 && (w >> 10) & 1 == 1 => {
            let imm = (((w >> 12) & 0x1ff) as i64) << 55 >> 55;
            let opc = (w >> 22) & 3;
            let store = opc == 0 || ((w >> 26) & 1 == 1 && opc == 2);
            if (w >> 11) & 1 == 1 && store && imm < 0 {
                Step::Prologue(-imm as u64)
            } else {
                Step::Unknown
            }
        }
        _ => Step::Prologue(0),
    }
}

/// Where a handler of a signal delivered on this thread's stack puts its frames: below the
/// kernel's signal frame, whose register context alone (`struct sigcontext`, with its 4096
/// reserved bytes) is larger than this. A frame record no deeper than this below its
/// function's CFA therefore always lies above every frame of such a handler.
const SIGNAL_FRAME_MIN: u64 = 4096;

/// Decides whether the return address of the function whose `bl _mcount` returns to
/// `self_pc` may be replaced: reads its prologue backwards from the instruction before the
/// `bl`, through instructions a prologue may hold (everything but control flow, system
/// instructions and unusual ways of moving sp), adding up how far it moved sp and noting where
/// it set up x29, until `paciasp`/`pacibsp` (it signs: entry-only) or a function boundary (no
/// function falls through into the next, so the code before it ends in ret, b, br, a noreturn
/// bl, or padding). Entry-only too: anything else, a prologue longer than 64 instructions, no
/// frame record, and a frame record more than SIGNAL_FRAME_MIN bytes below the CFA (gcc up
/// to 13 puts the locals above it). Why the last: while such a function returns (its frame
/// popped, its shadow entry not yet), a signal handler's frames can lie above its return slot,
/// and trace mode would take the entry for one left behind by longjmp and close it. A replaced
/// address that the function authenticates would fault; a missing exit only costs the exit.
/// Never reads an unmapped page (mincore first).
pub fn classify(self_pc: usize) -> usize {
    // SAFETY: getauxval has no preconditions.
    let page = match unsafe { libc::getauxval(libc::AT_PAGESZ) } as usize {
        0 => 4096,
        p => p,
    };
    let call = self_pc.wrapping_sub(4);
    if call & 3 != 0 {
        return SITE_ENTRY_ONLY;
    }
    // The page of the call itself is mapped: the call was just executed.
    let mut mapped_from = call & !(page - 1);
    // SAFETY: an instruction in a mapped code page.
    let bl = unsafe { (call as *const u32).read_volatile() };
    if bl & 0xfc00_0000 != 0x9400_0000 {
        return SITE_ENTRY_ONLY;
    }
    // sp moved down after the instruction at hand (so far), and (sp moved after it, offset)
    // of the instruction that set x29 last.
    let mut below: u64 = 0;
    let mut frame_pointer: Option<(u64, u64)> = None;
    for i in 1..=64usize {
        let at = call.wrapping_sub(4 * i);
        if at < mapped_from {
            let p = at & !(page - 1);
            let mut vec = 0u8;
            // SAFETY: mincore of one page-aligned page into a one-byte vector; fails with
            // ENOMEM where nothing is mapped.
            if unsafe { libc::mincore(p as *mut libc::c_void, page, &mut vec) } != 0 {
                return SITE_ENTRY_ONLY;
            }
            mapped_from = p;
        }
        // SAFETY: at lies in a mapped page (checked above) of this function's code segment or
        // the one just before it; code pages are readable.
        let w = unsafe { (at as *const u32).read_volatile() };
        match step(w) {
            Step::Prologue(n) => below += n,
            Step::FramePointer(off) => {
                frame_pointer.get_or_insert((below, off));
            }
            Step::Signs | Step::Unknown => return SITE_ENTRY_ONLY,
            Step::Boundary => {
                // CFA - x29 = (everything sp moved) - (what it moved after x29 was set) - off
                let Some((after, off)) = frame_pointer else {
                    return SITE_ENTRY_ONLY;
                };
                let record = below.wrapping_sub(after).wrapping_sub(off);
                return if (16..=SIGNAL_FRAME_MIN).contains(&record) {
                    SITE_PLAIN
                } else {
                    SITE_ENTRY_ONLY
                };
            }
        }
    }
    SITE_ENTRY_ONLY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prologue_steps() {
        assert_eq!(step(0xd503_233f), Step::Signs); // paciasp
        assert_eq!(step(0xd503_237f), Step::Signs); // pacibsp
        assert_eq!(step(0xa9be_7bfd), Step::Prologue(32)); // stp x29, x30, [sp, #-32]!
        assert_eq!(step(0xf900_0bf3), Step::Prologue(0)); // str x19, [sp, #16]
        assert_eq!(step(0xf81f_0ff3), Step::Prologue(16)); // str x19, [sp, #-16]!
        assert_eq!(step(0x6dbf_27e8), Step::Prologue(16)); // stp d8, d9, [sp, #-16]!
        assert_eq!(step(0xd109_03ff), Step::Prologue(0x240)); // sub sp, sp, #0x240
        assert_eq!(step(0xd140_07ff), Step::Prologue(0x1000)); // sub sp, sp, #1, lsl #12
        assert_eq!(step(0x9100_03fd), Step::FramePointer(0)); // mov x29, sp
        assert_eq!(step(0x9100_43fd), Step::FramePointer(16)); // add x29, sp, #16
        assert_eq!(step(0xaa00_03f3), Step::Prologue(0)); // mov x19, x0
        assert_eq!(step(0x2a00_03f3), Step::Prologue(0)); // mov w19, w0
        assert_eq!(step(0xaa1e_03e0), Step::Prologue(0)); // mov x0, x30
        assert_eq!(step(0xd503_20ff), Step::Prologue(0)); // xpaclri
        assert_eq!(step(0x9101_03f3), Step::Prologue(0)); // add x19, sp, #64
        assert_eq!(step(0xf940_0020), Step::Prologue(0)); // ldr x0, [x1]
        assert_eq!(step(0xd65f_03c0), Step::Boundary); // ret
        assert_eq!(step(0xd503_245f), Step::Boundary); // bti c
        assert_eq!(step(0xd503_201f), Step::Boundary); // nop
        assert_eq!(step(0x1400_0010), Step::Boundary); // b
        assert_eq!(step(0xd61f_0200), Step::Boundary); // br x16
        assert_eq!(step(0x9400_0000), Step::Boundary); // bl
        assert_eq!(step(0x0000_0000), Step::Boundary); // udf #0
        assert_eq!(step(0xb400_0040), Step::Unknown); // cbz x0
        assert_eq!(step(0x5400_0041), Step::Unknown); // b.ne
        assert_eq!(step(0xd63f_0200), Step::Unknown); // blr x16
        assert_eq!(step(0xd53b_d040), Step::Unknown); // mrs x0, tpidr_el0
        assert_eq!(step(0x9100_43ff), Step::Unknown); // add sp, sp, #16
        assert_eq!(step(0xcb30_63ff), Step::Unknown); // sub sp, sp, x16
        assert_eq!(step(0x043f_57ff), Step::Unknown); // addvl sp, sp, #-1 (sve)
        assert_eq!(step(0xa8c1_7bfd), Step::Unknown); // ldp x29, x30, [sp], #16
    }
}
