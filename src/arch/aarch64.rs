//! aarch64 (AAPCS64): `_mcount` after the prologue, an ordinary call with x0 = from_pc (the
//! instrumented function's return address) and x30 = self_pc; `mcount` is the same entry.
//! There is no `__fentry__` on aarch64. The routines and their register contracts are in
//! `asm/aarch64.s`.

trampoline_asm!("../../asm/aarch64.s");

/// `naked_asm!` as the assembly is written (default options).
macro_rules! naked {
    ($($t:tt)*) => { core::arch::naked_asm!($($t)*) };
}

entry_point! {
    /// `_mcount`: called by `gcc -pg` and rustc `-Zinstrument-mcount` code after the prologue.
    /// ABI here: x0 = from_pc, x30 = self_pc; x0, x16, x17 and the flags are clobbered, every
    /// other register preserved (see `instrfn_aarch64_mcount` in asm/aarch64.s).
    _mcount => "b instrfn_aarch64_mcount"
}
entry_point! {
    /// `mcount`: the same entry, for compilers (and older rustc) that call it by this name.
    mcount => "b instrfn_aarch64_mcount"
}

/// The body of a naked function that continues at `$f` with every register as it came (a
/// linker veneer on the `b` may use x16/x17, as for any call).
#[allow(unused_macros)] // only glibc targets have wrappers (src/interpose.rs)
macro_rules! tail_call {
    ($f:path) => {
        naked!(".cfi_startproc", "b {f}", ".cfi_endproc", f = sym $f)
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

/// Trace mode is not yet available on this architecture: INSTRFN_MODE=trace writes gmon.out.
pub const TRACE_SUPPORTED: bool = false;
/// The trace clock (docs/trace-format.md).
pub const CLOCK_NAME: &str = "cntvct";

/// The trace clock now.
#[inline]
pub fn counter() -> u64 {
    let v: u64;
    // SAFETY: reads the system counter; no memory is touched.
    unsafe { core::arch::asm!("mrs {v}, cntvct_el0", v = out(reg) v, options(nomem, nostack)) };
    v
}

/// Where instrumented functions return to in trace mode (none yet here).
pub fn exit_trampoline() -> usize {
    0
}

/// Whether trace mode may replace the return address `ret` with the exit trampoline (else the
/// call is recorded as an entry without exit).
pub fn replaceable(_ret: usize) -> bool {
    true
}
