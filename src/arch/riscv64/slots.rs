//!
//! The fast path (counting.s, `.Lmcount_trace`) needs the address of the instrumented
//! function's return slot, where it put its return address, to replace it with the exit
//! trampoline; and the exit trampoline must tell from sp at the return which frame returns.
//! gcc -O2 keeps no frame pointer, so neither a0 (the caller's pc) nor s0 says where the slot
//! is. The slot is found once per call site, by decoding the instructions from the function's
//! entry to the counting call ([`prologue`]): the compilers emit a straight-line prologue there
//! (sp moved down, ra stored, registers saved and moved), since the counting call sits in the
//! entry block and needs ra saved. Only slots at CFA - 8, where gcc, clang and rustc put ra in
//! every function without variable arguments, are replaced: then sp at the return (= the CFA)
//! names the frame. Other sites (variadic functions, -msave-restore, prologues with anything
//! the decoder does not model) are traced as entries without exit, through the slow path.
//!
//! The alternatives, and why not: the word equal to a0 above sp (what gcc just stored) can be
//! anywhere a stale copy of the same return address was left, below the real slot, by an
//! earlier call from the same call site (this runtime's own slow path saves a0 in its frame);
//! .eh_frame is not emitted by gcc for C on riscv64 without -fasynchronous-unwind-tables;
//! -fno-omit-frame-pointer alone would not do either, since gcc -O2 code may hold any value in
//! s0, also a frame pointer of an ancestor whose return slot holds the same address (indirect
//! recursion), so a decision from the frame record needs the code anyway.

use core::sync::atomic::AtomicUsize;

use super::prologue;
use super::{Site, exit_trampoline, remember_stack, stack_bounds};
use crate::sys::maps::read_maps;
use crate::tables::sites::Sites;

unsafe extern "C" {
    /// The rules of the sites decided so far (see [`sites`]).
    static instrfn_riscv64_sites: [[AtomicUsize; 2]; 1 << SITE_BITS];
}

/// The rules of the call sites decided so far, for every thread (crate::tables::sites): the
/// fast path looks them up, and the slow path decides the others.
pub fn sites() -> Sites<2, 0> {
    /// Entries of `instrfn_riscv64_sites` claimed.
    static CLAIMED: AtomicUsize = AtomicUsize::new(0);
    // SAFETY: a static of the assembly, only accessed atomically (the fast path loads whole
    // words).
    let entries = unsafe { &*core::ptr::addr_of!(instrfn_riscv64_sites) };
    Sites::new(entries, SITE_BITS, &CLAIMED)
}

/// The return slot to give trace mode's slow path for this mcount call: found from the site's
/// rule (decided now if no thread has), with the rule's guard checked; or, where no slot can
/// be proven, `spare` (a word of the slow path's own frame, below sp at the call) holding 1,
/// which [`replaceable`](super::replaceable) refuses: an entry without exit. Frames that
/// `longjmp` left behind below sp are closed either way.
///
/// A slot that holds the exit trampoline already is the frame of a function whose return was
/// replaced and that tail-called this one (same CFA): this call is an entry without exit, and
/// the return, through the trampoline, closes the caller's entry, still the newest.
///
/// # Safety
/// `a0`, `self_pc` (ra), `s0` and `sp` are the instrumented code's at its counting call,
/// `spare` a writable word below `sp`.
pub unsafe fn trace_slot(
    a0: usize,
    self_pc: usize,
    s0: usize,
    sp: usize,
    spare: *mut usize,
) -> *mut usize {
    let site = Site {
        a0,
        self_pc,
        s0,
        sp,
    };
    let stack = trace_stack(sp);
    let rule = sites().get(self_pc).unwrap_or_else(|| {
        let rule = decide_site(&site, stack);
        if let Some(rule) = rule {
            sites().put(self_pc, rule);
        }
        rule.unwrap_or(RULE_NONE)
    });
    // SAFETY: rule_slot returns only slots inside the stack mapping that holds sp.
    let slot = rule_slot(rule, &site, stack).filter(|&s| unsafe { *s } != exit_trampoline());
    slot.unwrap_or_else(|| {
        // SAFETY: per the contract, a word of the caller's frame.
        unsafe { spare.write(1) };
        spare
    })
}

/// log2 of the entries of `instrfn_riscv64_sites` (16 bytes each, 1 MiB of .bss, touched as
/// used, in trace mode only): up to 32768 call sites keep their rule; further sites are decided
/// again on each call, in the slow path.
pub const SITE_BITS: u32 = 16;

/// A site's rule (see counting.s, `.Lmcount_trace`): `(D << 3) | guard`, the slot at sp + D.
/// Guard: a0 holds the slot's word (gcc: `mv a0, ra` before the call).
pub const RULE_A0: usize = 1;

/// Guard: s0 = slot + 8, the CFA (a frame pointer: clang, gcc -fno-omit-frame-pointer, rustc).
pub const RULE_FRAME: usize = 2;

/// No slot can be proven: entries only.
pub const RULE_NONE: usize = 4;

/// The stack that holds `sp`, `[lo, hi)`: the cached bounds if they hold it, else read now
/// (and cached for the fast path, off the alternate signal stack); (0, 0) if unknown.
fn trace_stack(sp: usize) -> (usize, usize) {
    let cached = stack_bounds();
    if cached.0 <= sp && sp < cached.1 {
        return cached;
    }
    match read_maps([sp]) {
        Some([Some(stack)]) => {
            remember_stack(&stack);
            stack.readable()
        }
        _ => (0, 0),
    }
}

/// The return slot of this call by `rule`, if its guard holds: inside the stack `[lo, hi)`
/// that holds sp, and a0 = its word (RULE_A0) or s0 = slot + 8 (RULE_FRAME).
fn rule_slot(rule: usize, site: &Site, (lo, hi): (usize, usize)) -> Option<*mut usize> {
    let guard = rule & 7;
    let slot = site.sp.checked_add(rule >> 3)?;
    if !(lo <= site.sp && slot.checked_add(8).is_some_and(|end| end <= hi)) {
        return None;
    }
    let ok = match guard {
        RULE_A0 => {
            // SAFETY: [slot, slot + 8) lies in the mapping that holds this thread's sp.
            unsafe { *(slot as *const usize) == site.a0 }
        }
        RULE_FRAME => site.s0 == slot + 8,
        _ => false,
    };
    ok.then_some(slot as *mut usize)
}

/// Decides a site's rule from its code ([`prologue::decode`]) and the call's registers, which
/// must agree with what the code proves. None if it cannot be decided now (/proc/self/maps
/// unreadable, sp in no stack known): then nothing is remembered.
fn decide_site(site: &Site, stack: (usize, usize)) -> Option<usize> {
    let [code] = read_maps([site.self_pc.wrapping_sub(1)])?;
    let Some(code) = code.filter(|m| m.read && m.exec) else {
        return Some(RULE_NONE);
    };
    let base = code
        .start
        .max(site.self_pc.saturating_sub(prologue::WINDOW + 4));
    if base >= site.self_pc {
        return Some(RULE_NONE);
    }
    // SAFETY: [base, self_pc) lies in one readable mapping (checked above).
    let bytes = unsafe { core::slice::from_raw_parts(base as *const u8, site.self_pc - base) };
    let Some(frame) = prologue::decode(bytes, base, site.self_pc) else {
        return Some(RULE_NONE);
    };
    let (lo, hi) = stack;
    let slot = site.sp + frame.slot;
    if !(lo <= site.sp && slot + 8 <= hi) {
        return None;
    }
    let rule = if frame.s0_is_cfa && site.s0 == slot + 8 {
        RULE_FRAME
    // SAFETY: [slot, slot + 8) lies in the stack that holds sp (checked above).
    } else if frame.a0_is_ra && unsafe { *(slot as *const usize) } == site.a0 {
        RULE_A0
    } else {
        return Some(RULE_NONE);
    };
    Some(frame.slot << 3 | rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Little-endian bytes of instructions given as objdump shows them (16- or 32-bit).
    fn code(insns: &[u32]) -> Vec<u8> {
        let mut v = Vec::new();
        for &i in insns {
            if i & 3 == 3 {
                v.extend_from_slice(&i.to_le_bytes());
            } else {
                v.extend_from_slice(&(i as u16).to_le_bytes());
            }
        }
        v
    }

    /// Decodes `insns` as the bytes before a counting call's return address.
    fn frame(insns: &[u32]) -> Option<prologue::Frame> {
        let bytes = code(insns);
        let base = 0x1_0000;
        prologue::decode(&bytes, base, base + bytes.len())
    }

    const CALL: [u32; 2] = [0x0000_0097, 0x0000_80e7]; // auipc ra, 0; jalr ra
    const RET: u32 = 0x8082;

    fn with_call(prefix: &[u32]) -> Vec<u32> {
        let mut v = prefix.to_vec();
        v.extend_from_slice(&CALL);
        v
    }

    #[test]
    fn prologues_of_the_compilers() {
        let frame_of = |slot, a0_is_ra, s0_is_cfa| {
            Some(prologue::Frame {
                slot,
                a0_is_ra,
                s0_is_cfa,
            })
        };
        // gcc -O2 -pg: addi sp,sp,-16; sd ra,8(sp); sd s0,0(sp); mv s0,a0; mv a0,ra; call
        let gcc = [RET, 0x1141, 0xe406, 0xe022, 0x842a, 0x8506];
        assert_eq!(frame(&with_call(&gcc)), frame_of(8, true, false));
        // ... with the call relaxed to jal ra (a static link)
        let mut jal = gcc.to_vec();
        jal.push(0x8bbe_50ef);
        assert_eq!(frame(&jal), frame_of(8, true, false));
        // gcc -O2 -pg -fno-omit-frame-pointer: sd s0; sd ra; addi s0,sp,32 (c.addi4spn); ...
        let gcc_fp = [RET, 0x1101, 0xe822, 0xec06, 0x1000, 0xe426, 0x84aa, 0x8506];
        assert_eq!(frame(&with_call(&gcc_fp)), frame_of(24, true, true));
        // clang 14 -pg: a frame pointer, a0 an argument
        let clang = [RET, 0x1101, 0xec06, 0xe822, 0xe426, 0x1000, 0x84aa];
        assert_eq!(frame(&with_call(&clang)), frame_of(24, false, true));
        // gcc, a two-step frame whose constant is loaded before the first sp move:
        // lui t0,0xffffe; addi sp,sp,-32; addi t0,t0,208; sd ra,24(sp); sd s0,16(sp);
        // add sp,sp,t0; mv s0,a0; mv a0,ra
        let big = [
            RET,
            0x72f9,
            0x1101,
            0x0d02_8293,
            0xec06,
            0xe822,
            0x9116,
            0x842a,
            0x8506,
        ];
        assert_eq!(frame(&with_call(&big)), frame_of(8008, true, false));
        // clang, a two-step frame: addi sp,sp,-2032; sd ra,2024(sp); sd s0,2016(sp);
        // addi s0,sp,2032; lui a1,0x1; addiw a1,a1,-1088; sub sp,sp,a1; mv s1,a0
        let clang_big = [
            RET,
            0x8101_0113,
            0x7e11_3423,
            0x7e81_3023,
            0x7f01_0413,
            0x6585,
            0xbc05_859b,
            0x40b1_0133,
            0x84aa,
        ];
        assert_eq!(frame(&with_call(&clang_big)), frame_of(5032, false, true));
    }

    #[test]
    fn prologues_without_a_provable_slot() {
        // gcc, variadic: ra at 24(sp) of a 96-byte frame (below the register save area)
        let vari = [RET, 0x711d, 0xec06, 0xe822, 0x842a, 0x8506, 0xe4be, 0xf42e];
        assert_eq!(frame(&with_call(&vari)), None);
        // the slot overwritten after ra was stored: sd s0,8(sp)
        assert_eq!(
            frame(&with_call(&[RET, 0x1141, 0xe406, 0xe422, 0x8506])),
            None
        );
        // a store through an unknown address (it might hit the slot): sd a1,0(a0)
        assert_eq!(
            frame(&with_call(&[RET, 0x1141, 0xe406, 0xe10c, 0x8506])),
            None
        );
        // a branch between entry and call: beqz a0, .+4
        assert_eq!(
            frame(&with_call(&[RET, 0x1141, 0xe406, 0xc111, 0x8506])),
            None
        );
        // ra written before it was stored: mv ra,a1; sd ra,8(sp)
        assert_eq!(
            frame(&with_call(&[RET, 0x1141, 0x80ae, 0xe406, 0x8506])),
            None
        );
        // an sp move down before the entry: addi sp,sp,-48 then the gcc prologue (ra at the
        // top of the second allocation, not at the CFA - 8)
        let twice = [RET, 0x7179, 0x1141, 0xe406, 0xe022, 0x842a, 0x8506];
        assert_eq!(frame(&with_call(&twice)), None);
        // -msave-restore: call t0, __riscv_save_0 (jal t0); addi sp,sp,-16; mv a0,ra
        let save = [RET, 0x0000_02ef, 0x1141, 0x8506];
        assert_eq!(frame(&with_call(&save)), None);
        // no call before self_pc
        assert_eq!(frame(&[RET, 0x1141, 0xe406, 0x8506, 0x0001]), None);
        // sp not 16-byte aligned at the call: addi sp,sp,-8
        assert_eq!(frame(&with_call(&[RET, 0x1161, 0xe006, 0x8506])), None);
    }

    #[test]
    fn rules_are_kept_for_every_site() {
        // Sites whose home entries collide are all kept; a site decided again (after
        // forget_sites) takes its new rule.
        let pcs: Vec<usize> = (0..500).map(|i| 0x5000_0000 + i * 22).collect();
        for (i, &pc) in pcs.iter().enumerate() {
            sites().put(pc, RULE_NONE);
            sites().put(pc, (i * 8) << 3 | RULE_A0);
        }
        for (i, &pc) in pcs.iter().enumerate() {
            assert_eq!(sites().get(pc), Some((i * 8) << 3 | RULE_A0), "{pc:#x}");
        }
        assert_eq!(sites().get(0x4fff_fff0), None);
        sites().forget(0x5000_0000, 0x5000_0000 + 22 * 250);
        assert_eq!(sites().get(pcs[0]), None);
        assert_eq!(sites().get(pcs[499]), Some((499 * 8) << 3 | RULE_A0));
    }
}
