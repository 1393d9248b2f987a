//! aarch64 (AAPCS64): `_mcount` after the prologue, an ordinary call with x0 = from_pc (the
//! instrumented function's return address) and x30 = self_pc; `mcount` is the same entry.
//! There is no `__fentry__` on aarch64. `__cyg_profile_func_enter/exit` serve
//! `-finstrument-functions` code. The routines and their register contracts are in
//! `asm/aarch64.s`; this file has the Rust side of trace mode: which call sites may have their
//! return address replaced (pointer authentication), tail calls, and the exit trampoline's
//! slow path.

use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crate::thread::Tls;
use crate::trace::layout::{SH_BYTES, SH_FN, SH_RET, SH_SLOT};

/// aarch64's use of the shadow entry's spare word: the frame pointer the function returns with
/// (the saved x29 of its frame record), which is how the exit trampoline knows the entry.
const SH_FP: usize = 24;
const _: () = assert!(SH_RET + 8 == SH_SLOT && SH_FN + 8 == SH_FP && SH_FP + 8 == SH_BYTES);
const _: () = assert!(SH_RET == 0 && SH_FN == 16);

/// The call-site table (asm/aarch64.s `instrfn_aarch64_sites`): 1 << SITE_BITS words, each
/// `self_pc | class`, indexed by bits 2.. of `self_pc ^ (self_pc >> SITE_SHIFT)`.
const SITE_BITS: u32 = 12;
const SITE_SHIFT: u32 = SITE_BITS + 2;
/// The function does not sign its return address: it may be replaced.
const SITE_PLAIN: usize = 1;
/// The function signs its return address (pac-ret), or its prologue was not understood:
/// entries only.
const SITE_ENTRY_ONLY: usize = 2;

// The trampolines, then the XRay trampolines (src/xray.rs patches sleds to reach them), as one
// block: asm/aarch64-xray.s uses asm/aarch64.s's macros (TLS_ADDR, TRACE_EVENT, SHADOW_RESERVE,
// SHADOW_RELEASE) and this one operand list.
trampoline_asm!("base.s" + "events.s" + "counting.s" + "exit.s" + "guarded.s" + "xray.s";
    TLS_ENTRY_ONLY = const core::mem::offset_of!(crate::thread::Tls, entry_only),
    SH_FP = const SH_FP,
    EV_NOEXIT = const crate::trace::layout::EV_NOEXIT,
    SITE_BITS = const SITE_BITS,
    SITE_SHIFT = const SITE_SHIFT,
    SITE_PLAIN = const SITE_PLAIN,
    SITE_ENTRY_ONLY = const SITE_ENTRY_ONLY,
);

/// `naked_asm!` as the assembly is written (default options).
macro_rules! naked {
    ($($t:tt)*) => { core::arch::naked_asm!($($t)*) };
}

entry_point! {
    /// `_mcount`: called by `gcc -pg`, `clang -pg` and rustc `-Zinstrument-mcount` code after
    /// the prologue. ABI here: x30 = self_pc, from_pc in the frame record at x29; x0, x16, x17
    /// and the flags are clobbered, every other register preserved (see `FAST_PATH` in
    /// asm/aarch64.s).
    _mcount => "b instrfn_aarch64_mcount"
}
entry_point! {
    /// `mcount`: the same entry, for compilers (and older rustc) that call it by this name.
    mcount => "b instrfn_aarch64_mcount"
}
entry_point! {
    /// `__cyg_profile_func_enter(this_fn, call_site)`: called by `-finstrument-functions` code
    /// (gcc, clang) at every function's entry, as an ordinary AAPCS64 call (x0, x9, x16, x17
    /// and the flags clobbered, all else preserved).
    __cyg_profile_func_enter => "b instrfn_aarch64_cyg_enter"
}
entry_point! {
    /// `__cyg_profile_func_exit(this_fn, call_site)`: before every return of such code.
    __cyg_profile_func_exit => "b instrfn_aarch64_cyg_exit"
}

/// The body of a naked function that continues at `$f` with every register as it came (a
/// linker veneer on the `b` may use x16/x17, as for any call).
#[allow(unused_macros)] // only glibc targets have wrappers (src/interpose.rs)
macro_rules! tail_call {
    ($f:path) => {
        naked!(".cfi_startproc", "b {f}", ".cfi_endproc", f = sym $f)
    };
}

/// The body of a naked function that asks `$route(x0, x1, x2, return address)` where to go (an
/// ordinary call), then continues at the function it returns with every argument register, the
/// stack, x29 and x30 as the caller left them: the function it jumps to sees the original
/// caller (the dlopen wrappers, src/interpose.c). The jump is a `br x16`, which a `bti c`
/// landing pad accepts.
#[allow(unused_macros)] // only glibc targets have wrappers (src/interpose.rs)
macro_rules! routed_jump {
    ($route:path) => {
        naked!(
            ".cfi_startproc",
            "stp x29, x30, [sp, #-48]!",
            ".cfi_def_cfa_offset 48",
            ".cfi_offset x29, -48",
            ".cfi_offset x30, -40",
            "mov x29, sp",
            "stp x0, x1, [sp, #16]",
            "str x2, [sp, #32]",
            "mov x3, x30",
            "bl {route}",
            "mov x16, x0",
            "ldp x0, x1, [sp, #16]",
            "ldr x2, [sp, #32]",
            "ldp x29, x30, [sp], #48",
            ".cfi_def_cfa_offset 0",
            ".cfi_restore x29",
            ".cfi_restore x30",
            "br x16",
            ".cfi_endproc",
            route = sym $route
        )
    };
}

/// The body of a `guarded_entry!`: x9 = `$inner`, then `instrfn_aarch64_guarded` (x9, not
/// x16/x17: a linker veneer on the `b` may clobber those).
macro_rules! guarded_jump {
    ($inner:path) => {
        naked!(
            ".cfi_startproc",
            "adrp x9, {inner}",
            "add x9, x9, :lo12:{inner}",
            "b instrfn_aarch64_guarded",
            ".cfi_endproc",
            inner = sym $inner
        )
    };
}

/// Offset of the interrupted pc in the kernel's `struct ucontext` for arm64
/// (arch/arm64/include/uapi/asm/ucontext.h, sigcontext.h): uc_flags (8), uc_link (8),
/// uc_stack (stack_t: ss_sp, ss_flags + padding, ss_size: 24), uc_sigmask (8), a reserved area
/// that pads the sigset to 1024 bits (120), so 168 bytes, then `struct sigcontext uc_mcontext`,
/// 16-byte aligned, at 176: fault_address (8), regs[31] (248), sp (8), then pc at 264.
/// 176 + 264 = 440. glibc's and musl's ucontext_t (a 128-byte sigset) share this layout.
pub const UC_PC_OFFSET: usize = 440;

const _: () = assert!(
    core::mem::offset_of!(libc::ucontext_t, uc_mcontext)
        + core::mem::offset_of!(libc::mcontext_t, pc)
        == UC_PC_OFFSET
);

/// Trace mode has its trampolines here.
pub const TRACE_SUPPORTED: bool = true;
/// The trace clock (docs/trace-format.md): the virtual counter, CNTVCT_EL0.
pub const CLOCK_NAME: &str = "cntvct";

/// The trace clock now (what the fast paths store in an event).
#[inline]
pub fn counter() -> u64 {
    let v: u64;
    // SAFETY: reads the system counter; no memory is touched.
    unsafe { core::arch::asm!("mrs {v}, cntvct_el0", v = out(reg) v, options(nomem, nostack)) };
    v
}

unsafe extern "C" {
    fn instrfn_aarch64_exit();
    fn instrfn_aarch64_class_get() -> *mut usize;
    static instrfn_aarch64_sites: [AtomicUsize; 1 << SITE_BITS];
    static instrfn_aarch64_sve: AtomicU8;
}

/// The address an instrumented function returns to in trace mode.
/// A second word that holds a replaced return address for a while (none here: see
/// asm/s390x.s's [`second_slot`](crate::arch::second_slot)).
pub fn second_slot(_slot: usize) -> Option<usize> {
    None
}

pub fn exit_trampoline() -> usize {
    instrfn_aarch64_exit as *const () as usize
}

/// Whether the exit trampoline takes back the entries of calls shorter than
/// INSTRFN_MIN_DURATION (asm/aarch64.s `.Lexit_short`; the threshold is set by
/// [`set_min_ticks`](crate::arch::set_min_ticks)).
pub const MIN_DURATION_SUPPORTED: bool = true;

/// Whether trace mode may replace the return address `ret` with the exit trampoline (else the
/// call is recorded as an entry without exit): only for a call site classified as not
/// signing its return address (the trace slow path sets this thread's class word for the
/// call it records), and only if `ret` carries no pointer authentication code and is not
/// the trampoline already.
pub fn replaceable(ret: usize) -> bool {
    // SAFETY: this thread's own class word (instrfn_aarch64_class_get reads tpidr_el0 only).
    let class = unsafe { *instrfn_aarch64_class_get() };
    class == SITE_PLAIN && strip(ret) == ret && ret != exit_trampoline()
}

/// `ret` without a pointer authentication code (xpaclri: a NOP where there is no PAC).
fn strip(ret: usize) -> usize {
    let mut v = ret;
    // SAFETY: xpaclri only rewrites x30, which is an operand here.
    unsafe { core::arch::asm!("hint #7", inout("x30") v, options(nomem, nostack)) };
    v
}

/// The call-site table.
fn sites() -> &'static [AtomicUsize; 1 << SITE_BITS] {
    // SAFETY: a table defined in the assembly, only accessed atomically.
    unsafe { &*core::ptr::addr_of!(instrfn_aarch64_sites) }
}

fn site_index(self_pc: usize) -> usize {
    ((self_pc ^ (self_pc >> SITE_SHIFT)) >> 2) & ((1 << SITE_BITS) - 1)
}

/// After dlclose unloaded the code in [lo, hi): its call sites' classes are dropped, so that
/// code loaded there later (which may sign its return addresses where the old code did not)
/// is classified afresh.
pub fn forget_sites(lo: usize, hi: usize) {
    for e in sites() {
        if (lo..hi).contains(&(e.load(Ordering::Relaxed) & !3)) {
            e.store(0, Ordering::Relaxed);
        }
    }
}

/// The class of the call site `self_pc`: from the table, else decided now and entered.
fn site_class(self_pc: usize) -> usize {
    let entry = &sites()[site_index(self_pc)];
    let e = entry.load(Ordering::Relaxed);
    if e & !3 == self_pc {
        return e & 3;
    }
    let class = classify(self_pc);
    entry.store(self_pc | class, Ordering::Relaxed);
    class
}

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
fn classify(self_pc: usize) -> usize {
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

/// The shadow entries of this thread, oldest first, as raw entry addresses.
fn entries(tls: &Tls) -> impl DoubleEndedIterator<Item = usize> {
    (tls.shadow_base..tls.shadow_top).step_by(SH_BYTES)
}

/// Reads word `off` of the shadow entry at `e`.
///
/// # Safety
/// `e` must be an entry of this thread's shadow stack.
unsafe fn field(e: usize, off: usize) -> usize {
    // SAFETY: per the contract.
    unsafe { ((e + off) as *const usize).read() }
}

/// A tail call: the function entered now jumped here from one whose return address we had
/// replaced (its return slot still holds the trampoline, the frame pointer it returns with is
/// the tail-calling function's). That function is done: its exit now, and this one gets its
/// original return address back (the caller it returns to is the real one). On x86_64 both
/// share one return slot and src/trace.rs sees it; here their frame records may lie apart.
///
/// # Safety
/// `slot` is the return slot of the instrumented function being entered (x29 + 8).
unsafe fn tail_call(tls: *mut Tls, slot: *mut usize) {
    // SAFETY: this thread's TLS block (the slow path's contract).
    let t = unsafe { &mut *tls };
    // SAFETY: slot and the saved x29 below it are the entered function's frame record.
    let (ret, fp) = unsafe { (*slot, *slot.sub(1)) };
    if ret != exit_trampoline() || t.shadow_top == t.shadow_base || t.unwound != 0 {
        return;
    }
    let top = t.shadow_top - SH_BYTES;
    // SAFETY: top is the newest entry.
    let (top_ret, top_slot, top_fn, top_fp) = unsafe {
        (
            field(top, SH_RET),
            field(top, SH_SLOT),
            field(top, SH_FN),
            field(top, SH_FP),
        )
    };
    // Not an entry being pushed (slot 0: this call is a signal handler's, which interrupted
    // that push) nor a tombstone (slot 1).
    if top_fp != fp || top_slot <= 1 {
        return;
    }
    // SAFETY: top is the newest entry: popped with its slot zeroed (src/trace.rs, `pop`).
    unsafe { ((top + SH_SLOT) as *mut usize).write(0) };
    t.shadow_top = top;
    // SAFETY: slot 1 records an exit event of top_fn (the -finstrument-functions route).
    unsafe { crate::trace::instrfn_trace_slow(tls, core::ptr::without_provenance_mut(1), top_fn) };
    // SAFETY: the entered function's return slot.
    unsafe { *slot = top_ret };
}

/// The trace slow path of the fast paths: `instrfn_trace_slow(tls, slot, self_pc)` with this
/// call site classified first (for `replaceable`), a tail call ended, and the frame pointer of
/// a shadow entry it pushed filled in. Returns 0 (return where the call came from).
///
/// # Safety
/// Only `instrfn_aarch64_slow` calls this, as `instrfn_trace_slow`'s contract says.
#[unsafe(no_mangle)]
unsafe extern "C" fn instrfn_aarch64_trace_slow(
    tls: *mut Tls,
    slot: *mut usize,
    self_pc: usize,
) -> usize {
    let saved_errno = crate::sys::errno();
    let hijack = slot as usize > 1;
    // SAFETY: this thread's class word.
    let class = unsafe { &mut *instrfn_aarch64_class_get() };
    if hijack {
        *class = site_class(self_pc);
        // SAFETY: per the contract.
        unsafe { tail_call(tls, slot) };
    }
    // SAFETY: per the contract.
    unsafe { crate::trace::instrfn_trace_slow(tls, slot, self_pc) };
    if hijack {
        *class = 0;
        // SAFETY: this thread's TLS block.
        let t = unsafe { &*tls };
        // The frame pointer goes in after the slot here: the slow path runs with every
        // signal blocked, so no handler on this thread sees the entry in between (the fast
        // path, which handlers do interrupt, writes it before the slot).
        if let Some(top) = entries(t).next_back()
            // SAFETY: the newest entry.
            && unsafe { field(top, SH_SLOT) } == slot as usize
        {
            // SAFETY: the entry just pushed, and the frame record below its slot.
            unsafe { ((top + SH_FP) as *mut usize).write(*slot.sub(1)) };
        }
    }
    // SAFETY: restores this thread's errno.
    unsafe { *libc::__errno_location() = saved_errno };
    0
}

/// The exit trampoline's slow path: finds the returning frame's shadow entry (the newest whose
/// frame pointer is `fp` and whose slot lies below `cfa`, leaving out entries being pushed,
/// slot 0, whose frame pointer may already be written, and tombstones, slot 1), then
/// `instrfn_trace_exit_slow(tls, slot)` closes the ones above it, pops it and writes its exit.
/// Returns the original return address.
///
/// # Safety
/// Only `instrfn_aarch64_exit_slow` calls this, with `cfa` = sp at the trampoline and `fp` =
/// x29 there.
#[unsafe(no_mangle)]
unsafe extern "C" fn instrfn_aarch64_trace_exit(tls: *mut Tls, cfa: usize, fp: usize) -> usize {
    // SAFETY: this thread's TLS block.
    let t = unsafe { &*tls };
    let found = entries(t).rev().find(|&e| {
        // SAFETY: entries of this thread's shadow stack.
        let slot = unsafe { field(e, SH_SLOT) };
        // SAFETY: as above.
        slot > 1 && slot < cfa && unsafe { field(e, SH_FP) } == fp
    });
    match found {
        // SAFETY: per the contract, with the returning frame's slot.
        Some(e) => unsafe { crate::trace::instrfn_trace_exit_slow(tls, field(e, SH_SLOT) as _) },
        None => {
            message!("trace mode lost track of a return address; aborting");
            // SAFETY: abort has no preconditions; there is nowhere to return to.
            unsafe { libc::abort() }
        }
    }
}

/// gmon mode's slow path, `instrfn_slow_path(tls, from_pc, self_pc)`, returning 0 (return where
/// the call came from) as `instrfn_aarch64_slow` expects.
///
/// # Safety
/// As `instrfn_slow_path`.
#[unsafe(no_mangle)]
unsafe extern "C" fn instrfn_aarch64_gmon_slow(
    tls: *mut Tls,
    from_pc: usize,
    self_pc: usize,
) -> usize {
    // SAFETY: per the contract.
    unsafe { crate::runtime::instrfn_slow_path(tls, from_pc, self_pc) };
    0
}

/// Load-time constructor (asm/aarch64.s .init_array): whether the slow paths must save the SVE
/// state (AT_HWCAP's HWCAP_SVE).
#[unsafe(no_mangle)]
extern "C" fn instrfn_aarch64_init() {
    const HWCAP_SVE: libc::c_ulong = 1 << 22;
    // SAFETY: getauxval has no preconditions.
    let sve = unsafe { libc::getauxval(libc::AT_HWCAP) } & HWCAP_SVE != 0;
    // SAFETY: a static defined in the assembly, one byte, only accessed atomically.
    unsafe { &*core::ptr::addr_of!(instrfn_aarch64_sve) }.store(sve as u8, Ordering::Relaxed);
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
