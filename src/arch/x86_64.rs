//! x86_64 (System V ABI): `mcount`/`_mcount` after the prologue (from_pc at `8(%rbp)`) and
//! `__fentry__` before it (from_pc at `8(%rsp)`). The routines and their register contracts are
//! in `asm/x86_64.s`.

use core::arch::global_asm;

global_asm!(include_str!("../../asm/x86_64.s"), options(att_syntax));

/// `mcount`: called by `gcc -pg` and rustc `-Zinstrument-mcount` code after the prologue.
/// ABI here: every register preserved (see `FAST_PATH` in asm/x86_64.s).
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcount() {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "jmp instrfn_x86_64_mcount",
        ".cfi_endproc",
        options(att_syntax)
    )
}

/// `_mcount`: glibc's name for the same entry.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _mcount() {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "jmp instrfn_x86_64_mcount",
        ".cfi_endproc",
        options(att_syntax)
    )
}

/// `__fentry__`: called as the first instruction by `gcc -pg -mfentry` code.
/// ABI here: every register preserved.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __fentry__() {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "jmp instrfn_x86_64_fentry",
        ".cfi_endproc",
        options(att_syntax)
    )
}

/// Defines a naked `extern "C"` function that calls `$inner` (an `extern "C"` Rust function
/// taking at most three register arguments) through `instrfn_x86_64_guarded`: guard held,
/// errno preserved, all signals blocked.
macro_rules! guarded_entry {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?
        => $inner:path) => {
        $(#[$m])*
        #[unsafe(naked)]
        $vis extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "leaq {inner}(%rip), %rax",
                "jmp instrfn_x86_64_guarded",
                ".cfi_endproc",
                inner = sym $inner,
                options(att_syntax)
            )
        }
    };
}

/// Offset of the interrupted pc in the ucontext a signal handler gets.
/// Kernel layout (arch/x86/include/uapi/asm/ucontext.h, sigcontext.h): uc_flags, uc_link,
/// uc_stack (24 bytes), then struct sigcontext, whose 17th word is rip: 40 + 16 * 8 = 168.
/// glibc's and musl's ucontext_t share this prefix.
pub const UC_PC_OFFSET: usize = 168;
