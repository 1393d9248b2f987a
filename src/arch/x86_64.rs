//! x86_64 (System V ABI): `mcount`/`_mcount` after the prologue (from_pc at `8(%rbp)`) and
//! `__fentry__` before it (from_pc at `8(%rsp)`). The routines and their register contracts are
//! in `asm/x86_64.s`.

trampoline_asm!("../../asm/x86_64.s", att_syntax);

/// `naked_asm!` in AT&T syntax, like asm/x86_64.s.
macro_rules! naked {
    ($($t:tt)*) => { core::arch::naked_asm!($($t)*, options(att_syntax)) };
}

entry_point! {
    /// `mcount`: called by `gcc -pg` and rustc `-Zinstrument-mcount` code after the prologue.
    /// ABI here: every register preserved (see `FAST_PATH` in asm/x86_64.s).
    mcount => "jmp instrfn_x86_64_mcount"
}
entry_point! {
    /// `_mcount`: glibc's name for the same entry.
    _mcount => "jmp instrfn_x86_64_mcount"
}
entry_point! {
    /// `__fentry__`: called as the first instruction by `gcc -pg -mfentry` code.
    /// ABI here: every register preserved.
    __fentry__ => "jmp instrfn_x86_64_fentry"
}

/// The body of a naked function that continues at `$f` with every register as it came.
#[allow(unused_macros)] // only glibc targets have wrappers (src/interpose.rs)
macro_rules! tail_call {
    ($f:path) => {
        naked!(".cfi_startproc", "jmp {f}", ".cfi_endproc", f = sym $f)
    };
}

/// The body of a `guarded_entry!`: %rax = `$inner`, then `instrfn_x86_64_guarded`.
macro_rules! guarded_jump {
    ($inner:path) => {
        naked!(
            ".cfi_startproc",
            "leaq {inner}(%rip), %rax",
            "jmp instrfn_x86_64_guarded",
            ".cfi_endproc",
            inner = sym $inner
        )
    };
}

/// Offset of the interrupted pc in the ucontext a signal handler gets.
/// Kernel layout (arch/x86/include/uapi/asm/ucontext.h, sigcontext.h): uc_flags, uc_link,
/// uc_stack (24 bytes), then struct sigcontext, whose 17th word is rip: 40 + 16 * 8 = 168.
/// glibc's and musl's ucontext_t share this prefix.
pub const UC_PC_OFFSET: usize = 168;
