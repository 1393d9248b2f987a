//! riscv64 (LP64D psABI): `mv a0, ra; call _mcount` after the prologue, so from_pc = a0 and
//! self_pc = ra. There is no `__fentry__` on riscv64. The routines and their register contracts
//! are in `asm/riscv64.s`.
//!
//! The naked stubs reach the assembly with a `jal` (`j`, +-1 MiB): the mcount stubs have no
//! register to spare for a longer jump (a0 and ra carry the arguments and everything else is
//! preserved), and they are emitted in the same codegen unit, so the same object file, as the
//! assembly. The `guarded_entry!` stubs live in other modules and use an `auipc`/`jalr` pair
//! through t2, which reaches anywhere.

trampoline_asm!("../../asm/riscv64.s");

/// `naked_asm!` as the assembly is written (default options).
macro_rules! naked {
    ($($t:tt)*) => { core::arch::naked_asm!($($t)*) };
}

entry_point! {
    /// `mcount`: the name older rustc `-Zinstrument-mcount` emitted; same entry as `_mcount`.
    /// ABI here: a0 = from_pc, ra = self_pc, every register preserved (see asm/riscv64.s).
    mcount => "j instrfn_riscv64_mcount"
}
entry_point! {
    /// `_mcount`: called by `gcc -pg` code (`mv a0, ra; call _mcount`); glibc's only name on
    /// riscv64. ABI here: a0 = from_pc, ra = self_pc, every register preserved.
    _mcount => "j instrfn_riscv64_mcount"
}

/// The body of a naked function that continues at `$f` with every register but t1 (the
/// `tail` pseudo-instruction's scratch, caller-saved) as it came.
#[allow(unused_macros)] // only glibc targets have wrappers (src/interpose.rs)
macro_rules! tail_call {
    ($f:path) => {
        naked!(".cfi_startproc", "tail {f}", ".cfi_endproc", f = sym $f)
    };
}

/// The body of a `guarded_entry!`: t0 = `$inner`, then `instrfn_riscv64_guarded` through an
/// `auipc`/`jalr` pair (t2 is its scratch register), which reaches anywhere.
macro_rules! guarded_jump {
    ($inner:path) => {
        naked!(
            ".cfi_startproc",
            "lla t0, {inner}",
            "2: auipc t2, %pcrel_hi(instrfn_riscv64_guarded)",
            "jalr zero, %pcrel_lo(2b)(t2)",
            ".cfi_endproc",
            inner = sym $inner
        )
    };
}

/// Offset of the interrupted pc in the ucontext a signal handler gets.
/// Kernel layout (arch/riscv/include/uapi/asm/ucontext.h, sigcontext.h, ptrace.h):
/// uc_flags (8), uc_link (8), uc_stack (24: ss_sp, ss_flags + padding, ss_size), then
/// uc_sigmask (8) and __unused[1024 / 8 - 8] = 128 bytes in all, ending at 168; then
/// struct sigcontext, 16-byte aligned because its FP union holds the 16-byte aligned
/// __riscv_q_ext_state, so it starts at 176; its first member, user_regs_struct, starts with
/// pc. glibc's ucontext_t (128-byte sigset_t, no reserved bytes left, mcontext_t 16-aligned)
/// and musl's share this prefix, and so does qemu-user's frame.
pub const UC_PC_OFFSET: usize = 176;
