//! aarch64 (AAPCS64): `_mcount` after the prologue, an ordinary call with x0 = from_pc (the
//! instrumented function's return address) and x30 = self_pc; `mcount` is the same entry.
//! There is no `__fentry__` on aarch64. `__cyg_profile_func_enter/exit` serve
//! `-finstrument-functions` code. The routines and their register contracts are in
//! `src/arch/aarch64/`; this file has the Rust side of trace mode: which call sites may have their
//! return address replaced (pointer authentication), tail calls, and the exit trampoline's
//! slow path.

mod prologue;
pub mod sled;

use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crate::abi::shadow::{SH_BYTES, SH_FN, SH_RET, SH_SLOT};
use prologue::classify;

/// aarch64's use of the shadow entry's spare word: the frame pointer the function returns with
/// (the saved x29 of its frame record), which is how the exit trampoline knows the entry.
pub const SH_FP: usize = 24;
const _: () = assert!(SH_RET + 8 == SH_SLOT && SH_FN + 8 == SH_FP && SH_FP + 8 == SH_BYTES);
const _: () = assert!(SH_RET == 0 && SH_FN == 16);

/// The call-site table (src/arch/aarch64/ `instrfn_aarch64_sites`): 1 << SITE_BITS words, each
/// `self_pc | class`, indexed by bits 2.. of `self_pc ^ (self_pc >> SITE_SHIFT)`.
const SITE_BITS: u32 = 12;
const SITE_SHIFT: u32 = SITE_BITS + 2;
/// The function does not sign its return address: it may be replaced.
const SITE_PLAIN: usize = 1;
/// The function signs its return address (pac-ret), or its prologue was not understood:
/// entries only.
const SITE_ENTRY_ONLY: usize = 2;

// The trampolines, then the XRay trampolines (src/xray/ patches sleds to reach them), as one
// block: src/arch/aarch64/xray.s uses src/arch/aarch64/'s macros (TLS_ADDR, TRACE_EVENT, SHADOW_RESERVE,
// SHADOW_RELEASE) and this one operand list.
trampoline_asm!("base.s" + "events.s" + "counting.s" + "exit.s" + "guarded.s" + "xray.s";
    TLS_ENTRY_ONLY = const core::mem::offset_of!(crate::abi::Tls, entry_only),
    SH_FP = const SH_FP,
    EV_NOEXIT = const crate::abi::format::EV_NOEXIT,
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
    /// src/arch/aarch64/).
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
#[allow(unused_macros)] // only glibc targets have wrappers (src/runtime/interpose.rs)
macro_rules! tail_call {
    ($f:path) => {
        naked!(".cfi_startproc", "b {f}", ".cfi_endproc", f = sym $f)
    };
}

/// The body of a naked function that asks `$route(x0, x1, x2, return address)` where to go (an
/// ordinary call), then continues at the function it returns with every argument register, the
/// stack, x29 and x30 as the caller left them: the function it jumps to sees the original
/// caller (the dlopen wrappers, src/runtime/interpose.c). The jump is a `br x16`, which a `bti c`
/// landing pad accepts.
#[allow(unused_macros)] // only glibc targets have wrappers (src/runtime/interpose.rs)
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
/// src/arch/s390x/'s [`second_slot`](crate::arch::second_slot)).
pub fn second_slot(_slot: usize) -> Option<usize> {
    None
}

pub fn exit_trampoline() -> usize {
    instrfn_aarch64_exit as *const () as usize
}

/// Whether the exit trampoline takes back the entries of calls shorter than
/// INSTRFN_MIN_DURATION (src/arch/aarch64/ `.Lexit_short`; the threshold is set by
/// [`set_min_ticks`](crate::abi::set_min_ticks)).
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

/// This thread's call-site class word, which [`replaceable`] reads: the trace slow path sets it
/// for the call it records.
pub fn class_word() -> &'static mut usize {
    // SAFETY: this thread's own class word (instrfn_aarch64_class_get reads tpidr_el0 only),
    // used by this thread only.
    unsafe { &mut *instrfn_aarch64_class_get() }
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
pub fn site_class(self_pc: usize) -> usize {
    let entry = &sites()[site_index(self_pc)];
    let e = entry.load(Ordering::Relaxed);
    if e & !3 == self_pc {
        return e & 3;
    }
    let class = classify(self_pc);
    entry.store(self_pc | class, Ordering::Relaxed);
    class
}

/// Load-time constructor (src/arch/aarch64/ .init_array): whether the slow paths must save the SVE
/// state (AT_HWCAP's HWCAP_SVE).
#[unsafe(no_mangle)]
extern "C" fn instrfn_aarch64_init() {
    const HWCAP_SVE: libc::c_ulong = 1 << 22;
    // SAFETY: getauxval has no preconditions.
    let sve = unsafe { libc::getauxval(libc::AT_HWCAP) } & HWCAP_SVE != 0;
    // SAFETY: a static defined in the assembly, one byte, only accessed atomically.
    unsafe { &*core::ptr::addr_of!(instrfn_aarch64_sve) }.store(sve as u8, Ordering::Relaxed);
}
