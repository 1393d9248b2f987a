//! gmon mode on riscv64: where a call site passes its caller's pc, a0 (gcc, rustc) or -8(s0)
//! (clang 14), decided once per site from the two candidates (which is a return address just
//! after a call of this function), remembered for every thread, and marked in the thread's arc
//! table for the fast path.

use core::sync::atomic::AtomicUsize;

use super::{MARK_A0, MARK_FRAME, Site, remember_stack, stack_bounds};
use crate::sys::maps::{Mapping, read_maps};
use crate::tables::arcs::{self, ArcTable};
use crate::tables::sites::Sites;

/// log2 of the words of `instrfn_riscv64_decided` (64 KiB of .bss, touched as used): up to
/// 4096 sites are remembered.
pub const DECIDED_BITS: u32 = 13;

unsafe extern "C" {
    /// The decisions made so far, by any thread (see [`decided`]).
    static instrfn_riscv64_decided: [[AtomicUsize; 1]; 1 << DECIDED_BITS];
}

/// Where this call's caller is, for gmon mode's slow path: `(from_pc, a decision to mark in
/// the thread's table once the call is counted)`. The decision comes from the site's marker
/// in `table`, from another thread, or is made now (then remembered).
pub fn caller(
    table: Option<&ArcTable>,
    a0: usize,
    self_pc: usize,
    s0: usize,
    sp: usize,
) -> (usize, Option<Caller>) {
    let site = Site {
        a0,
        self_pc,
        s0,
        sp,
    };
    let marked = table.and_then(|t| marked(t, self_pc));
    let (from_pc, caller) = match marked.or_else(|| remembered(self_pc)) {
        Some(caller) => (from_pc_of(caller, &site), Some(caller)),
        None => {
            let (from_pc, caller) = decide(&site);
            if let Some(caller) = caller {
                remember(self_pc, caller);
            }
            (from_pc, caller)
        }
    };
    (from_pc, if marked.is_none() { caller } else { None })
}

/// Marks the site `self_pc` in the thread's `table` with its decision (unless the table is
/// full: then the next call comes to the slow path again).
pub fn mark(table: &ArcTable, self_pc: usize, caller: Caller) {
    arcs::put_marker(table, self_pc.wrapping_add(caller.marker()), self_pc);
}

/// Where a call site passes its caller's pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// In a0 (gcc, rustc).
    A0,
    /// At -8(s0), in the frame record (clang).
    Frame,
}

impl Caller {
    fn marker(self) -> usize {
        match self {
            Caller::A0 => MARK_A0,
            Caller::Frame => MARK_FRAME,
        }
    }
}

/// The marker of `self_pc` in `table`, if any.
fn marked(table: &ArcTable, self_pc: usize) -> Option<Caller> {
    [Caller::Frame, Caller::A0]
        .into_iter()
        .find(|c| arcs::has_key(table, self_pc.wrapping_add(c.marker()), self_pc))
}

/// from_pc of a call at a site already decided: a0, or -8(s0) when s0 lies in this thread's
/// stack (else a0: the marker cannot be right for this call).
fn from_pc_of(caller: Caller, site: &Site) -> usize {
    if caller == Caller::A0 {
        return site.a0;
    }
    if let Some(f) = frame_slot(site, stack_bounds()) {
        return f;
    }
    match read_maps([site.sp]) {
        Some([Some(stack)]) => {
            remember_stack(&stack);
            frame_slot(site, stack.readable()).unwrap_or(site.a0)
        }
        _ => site.a0,
    }
}

/// The rule of src/arch/riscv64/: (from_pc of this call, the site's caller), or (a0, None) when
/// it cannot be decided now (/proc/self/maps unreadable: out of descriptors, say), so that
/// the site is not marked and the next call decides again.
fn decide(site: &Site) -> (usize, Option<Caller>) {
    let undecided = (site.a0, None);
    let a0 = (site.a0, Some(Caller::A0));
    let cached = stack_bounds();
    let (f, a0_map, f_map) = if cached.0 <= site.sp && site.sp < cached.1 {
        // This thread's stack is known: rules 1 and 2 need no /proc/self/maps (most of gcc's
        // sites end here), and one read answers for both candidates.
        let Some(f) = frame_slot(site, cached).filter(|&f| f != site.a0) else {
            return a0;
        };
        let Some([a0_map, f_map]) = read_maps([site.a0, f]) else {
            return undecided;
        };
        (f, a0_map, f_map)
    } else {
        let Some([Some(stack), a0_map]) = read_maps([site.sp, site.a0]) else {
            return undecided;
        };
        remember_stack(&stack);
        let Some(f) = frame_slot(site, stack.readable()).filter(|&f| f != site.a0) else {
            return a0;
        };
        let Some([f_map]) = read_maps([f]) else {
            return undecided;
        };
        (f, a0_map, f_map)
    };
    let from_a0 = return_score(site.a0, a0_map, site.self_pc);
    let from_frame = return_score(f, f_map, site.self_pc);
    if from_frame > from_a0 {
        (f, Some(Caller::Frame))
    } else {
        a0
    }
}

/// -8(s0), if s0 is a frame address in the stack `[lo, hi)` that holds sp: 16-byte aligned,
/// above sp, at most hi. Never faults for any s0.
fn frame_slot(site: &Site, (lo, hi): (usize, usize)) -> Option<usize> {
    let Site { s0, sp, .. } = *site;
    if !(s0.is_multiple_of(16) && lo <= sp && sp < s0 && s0 <= hi && lo <= s0 - 8) {
        return None;
    }
    // SAFETY: [s0 - 8, s0) lies in [lo, hi), a mapping that holds this thread's sp (checked
    // by /proc/self/maps now, or when the bounds were cached): mapped and readable.
    Some(unsafe { ((s0 - 8) as *const usize).read() })
}

/// The most bytes from a direct call's target to self_pc for the call to count as one of the
/// function that makes the counting call: they span its prologue, which is far shorter.
const NEAR: usize = 512;

/// How surely `pc` is the return address of a call of the function whose counting call
/// returns to `self_pc`; `map` is the mapping that holds pc. 0: none (not in readable,
/// executable memory, or not after a call that links ra). 1: after `jal ra`, `jalr ra, ..(..)`
/// or `c.jalr`, or the signal return trampoline (`li a7, 139; ecall`, where the ra of a
/// signal handler points). 2: after a direct call whose target lies at most [`NEAR`] bytes
/// before self_pc: a call of this very function.
fn return_score(pc: usize, map: Option<Mapping>, self_pc: usize) -> u8 {
    let Some(map) = map.filter(|m| m.read && m.exec && pc.is_multiple_of(2)) else {
        return 0;
    };
    let insn = |addr: usize, len: usize| {
        map.holds(addr, len).then(|| {
            // SAFETY: [addr, addr + len) lies in a readable mapping (code may be 2-byte
            // aligned only, hence the unaligned reads).
            unsafe {
                if len == 4 {
                    (addr as *const u32).read_unaligned()
                } else {
                    u32::from((addr as *const u16).read_unaligned())
                }
            }
        })
    };
    let near = |target: usize| target < self_pc && self_pc - target <= NEAR;
    let call = pc.wrapping_sub(4);
    if let Some(w) = insn(call, 4) {
        if w & 0xfff == 0x0ef {
            // jal ra, offset
            return if near(call.wrapping_add_signed(jal_offset(w))) {
                2
            } else {
                1
            };
        }
        if w & 0x7fff == 0x0e7 {
            // jalr ra, offset(rs1); after auipc ra, hi (the `call` pseudo-instruction), direct
            let auipc = pc.wrapping_sub(8);
            if (w >> 15) & 31 == 1
                && let Some(hi) = insn(auipc, 4).filter(|hi| hi & 0xfff == 0x097)
            {
                let offset = (hi & 0xffff_f000) as i32 as isize + (w as i32 >> 20) as isize;
                return if near(auipc.wrapping_add_signed(offset)) {
                    2
                } else {
                    1
                };
            }
            return 1;
        }
    }
    if let Some(h) = insn(pc.wrapping_sub(2), 2)
        && h & 0xf07f == 0x9002
        && (h >> 7) & 31 != 0
    {
        return 1; // c.jalr rs1
    }
    if insn(pc, 4) == Some(0x08b0_0893) && insn(pc.wrapping_add(4), 4) == Some(0x0000_0073) {
        return 1; // li a7, 139 (rt_sigreturn); ecall
    }
    0
}

/// The byte offset of a `jal`.
fn jal_offset(w: u32) -> isize {
    let imm = ((w >> 31) & 1) << 20
        | ((w >> 21) & 0x3ff) << 1
        | ((w >> 20) & 1) << 11
        | ((w >> 12) & 0xff) << 12;
    (((imm << 11) as i32) >> 11) as isize
}

/// Sites decided on any thread (`instrfn_riscv64_decided`, defined in counting.s), so
/// that the other threads need not read /proc/self/maps for them (a new thread starts with an
/// empty table): the fast path of a thread that has no marker for a site inserts its arcs at
/// once if it was decided A0; a FRAME site gets its marker on the slow path, without a new
/// decision. One word per site (crate::tables::sites): self_pc + 1 (FRAME) or self_pc (A0).
fn decided() -> Sites<1, 1> {
    /// Words of `instrfn_riscv64_decided` claimed.
    static CLAIMED: AtomicUsize = AtomicUsize::new(0);
    // SAFETY: a static of the assembly, only accessed atomically (the fast path loads whole
    // words).
    let words = unsafe { &*core::ptr::addr_of!(instrfn_riscv64_decided) };
    Sites::new(words, DECIDED_BITS, &CLAIMED)
}

/// The decision made for `self_pc` by any thread, if remembered.
fn remembered(self_pc: usize) -> Option<Caller> {
    decided()
        .get(self_pc)
        .map(|v| if v != 0 { Caller::Frame } else { Caller::A0 })
}

/// Remembers the decision for `self_pc` (the first one made, if threads race).
fn remember(self_pc: usize, caller: Caller) {
    decided().put(self_pc, (caller == Caller::Frame) as usize);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jal_offsets() {
        assert_eq!(jal_offset(0x0080_00ef), 8); // jal ra, .+8
        assert_eq!(jal_offset(0xff9f_f0ef), -8); // jal ra, .-8
        assert_eq!(jal_offset(0x8000_00ef), -(1 << 20)); // jal ra, .-1MiB
    }

    /// Two functions, each returning the return address of its (direct) call.
    #[inline(never)]
    extern "C" fn callee() -> usize {
        let ra: usize;
        // SAFETY: reads ra, which still holds this call's return address (no call yet).
        unsafe { core::arch::asm!("mv {}, ra", out(reg) ra) };
        core::hint::black_box(ra)
    }

    #[inline(never)]
    extern "C" fn other_callee() -> usize {
        let ra: usize;
        // SAFETY: as in callee.
        unsafe { core::arch::asm!("mv {}, ra", out(reg) ra) };
        core::hint::black_box(ra) + core::hint::black_box(0)
    }

    fn map_of(addr: usize) -> Option<Mapping> {
        read_maps([addr]).unwrap()[0]
    }

    #[test]
    fn return_addresses() {
        let ra = callee();
        let f = callee as *const () as usize;
        // A direct call of the function whose counting call is near its start scores 2,
        // of another function 1; data and odd addresses 0. (A function's entry may well
        // score 1: it follows whatever the function before it ends with, which can be a call
        // that does not return.)
        assert_eq!(return_score(ra, map_of(ra), f + 12), 2);
        assert_eq!(return_score(ra, map_of(ra), f + 4096), 1);
        let data = [0u64; 4];
        let d = data.as_ptr() as usize;
        assert_eq!(return_score(d + 8, map_of(d), f + 12), 0);
        assert_eq!(return_score(1, map_of(1), f + 12), 0);
        assert_eq!(return_score(ra + 1, map_of(ra), f + 12), 0);
    }

    /// A frame record: 16-byte aligned, with the caller's pc just below its end.
    #[repr(C, align(16))]
    struct Frame([usize; 2]);

    impl Frame {
        fn s0(&self) -> usize {
            self.0.as_ptr() as usize + 16
        }
    }

    fn sp() -> usize {
        let sp: usize;
        // SAFETY: reads sp.
        unsafe { core::arch::asm!("mv {}, sp", out(reg) sp) };
        sp
    }

    #[test]
    fn decisions() {
        let ra = callee();
        let self_pc = callee as *const () as usize + 12;
        let frame = Frame([0, ra]);
        let sp = sp();
        let garbage = 0x5a0a_0000_0a00_000a;
        // clang: an argument in a0, the caller in the frame record.
        let clang = Site {
            a0: garbage,
            self_pc,
            s0: frame.s0(),
            sp,
        };
        assert_eq!(decide(&clang), (ra, Some(Caller::Frame)));
        // Now this thread's stack is cached: the same with one read of /proc/self/maps (and
        // the gcc cases below with none).
        let (lo, hi) = stack_bounds();
        assert!(lo <= sp && sp < hi, "{lo:#x} {sp:#x} {hi:#x}");
        assert_eq!(decide(&clang), (ra, Some(Caller::Frame)));
        // gcc without a frame pointer: a0 = the caller, s0 anything; -8(s0) is read only
        // inside this stack, above sp.
        for s0 in [
            0,
            8,
            garbage,
            sp,
            sp - 16,
            frame.s0() + 8,
            hi + 16,
            usize::MAX & !15,
        ] {
            let gcc = Site {
                a0: ra,
                self_pc,
                s0,
                sp,
            };
            assert_eq!(decide(&gcc), (ra, Some(Caller::A0)), "s0 {s0:#x}");
        }
        // Both in a0 and the frame (gcc -fno-omit-frame-pointer, rustc).
        let both = Site { a0: ra, ..clang };
        assert_eq!(decide(&both), (ra, Some(Caller::A0)));
        // Two return addresses: a0, unless only the frame's is a direct call of this
        // function (an s0 inherited from an ancestor with a frame pointer holds the
        // ancestor's return address; a clang argument may happen to be a return address).
        let elsewhere = other_callee();
        let ancestor = Frame([0, elsewhere]);
        let gcc = Site {
            a0: ra,
            s0: ancestor.s0(),
            ..clang
        };
        assert_eq!(decide(&gcc), (ra, Some(Caller::A0)));
        let clang_code_pointer = Site {
            a0: elsewhere,
            ..clang
        };
        assert_eq!(decide(&clang_code_pointer), (ra, Some(Caller::Frame)));
        let far = Site {
            a0: elsewhere,
            self_pc: self_pc + 4096,
            ..clang
        };
        assert_eq!(decide(&far), (elsewhere, Some(Caller::A0)));
        // Neither is a return address: a0.
        let frame = Frame([0, garbage ^ 1]);
        let site = Site {
            s0: frame.s0(),
            ..clang
        };
        assert_eq!(decide(&site), (garbage, Some(Caller::A0)));
    }

    #[test]
    fn from_pc_of_a_marked_site() {
        let ra = callee();
        let frame = Frame([0, ra]);
        let site = Site {
            a0: 7,
            self_pc: 0x1000,
            s0: frame.s0(),
            sp: sp(),
        };
        assert_eq!(from_pc_of(Caller::Frame, &site), ra);
        assert_eq!(from_pc_of(Caller::A0, &site), 7);
        // A FRAME marker that does not fit this call: a0.
        let site = Site { s0: 0x18, ..site };
        assert_eq!(from_pc_of(Caller::Frame, &site), 7);
    }

    #[test]
    fn remembered_decisions() {
        // Sites whose home words collide are all kept, and the first decision stays.
        let sites: Vec<usize> = (0..3000).map(|i| 0x4000_0000 + i * 10).collect();
        for (i, &pc) in sites.iter().enumerate() {
            let caller = if i % 3 == 0 {
                Caller::Frame
            } else {
                Caller::A0
            };
            remember(pc, caller);
            remember(pc, Caller::A0);
        }
        for (i, &pc) in sites.iter().enumerate() {
            let caller = if i % 3 == 0 {
                Caller::Frame
            } else {
                Caller::A0
            };
            assert_eq!(remembered(pc), Some(caller), "{pc:#x}");
        }
        assert_eq!(remembered(0x3000_0000), None);
        assert_eq!(remembered(0x4000_0001), None);
    }
}
