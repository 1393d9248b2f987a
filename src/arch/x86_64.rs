//! x86_64 (System V ABI): `mcount`/`_mcount` after the prologue (from_pc at `8(%rbp)`) and
//! `__fentry__` before it (from_pc at `8(%rsp)`). The routines and their register contracts are
//! in `asm/x86_64.s`.

use core::arch::global_asm;

global_asm!(include_str!("../../asm/x86_64.s"), options(att_syntax));

/// Whether this build has trampolines (false only on unsupported architectures).
pub const SUPPORTED: bool = true;

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

unsafe extern "C" {
    fn instrfn_tls_get() -> *mut crate::thread::Tls;
    /// Defined in asm/x86_64.s; read by every fast path.
    static instrfn_enabled: core::sync::atomic::AtomicU8;
}

/// The global recording switch the trampolines test.
#[inline]
pub fn enabled() -> &'static core::sync::atomic::AtomicU8 {
    // SAFETY: a static defined in the assembly, one byte, only accessed atomically.
    unsafe { &*core::ptr::addr_of!(instrfn_enabled) }
}

/// This thread's [`Tls`](crate::thread::Tls) block.
#[inline]
pub fn tls() -> *mut crate::thread::Tls {
    // SAFETY: instrfn_tls_get only reads the thread pointer and a link-time constant.
    unsafe { instrfn_tls_get() }
}

/// The pc at which a signal interrupted this thread, from the handler's `ucontext` argument.
///
/// # Safety
/// `uc` must be the third argument of an `SA_SIGINFO` handler.
#[inline]
pub unsafe fn interrupted_pc(uc: *const libc::c_void) -> usize {
    // Kernel layout (arch/x86/include/uapi/asm/ucontext.h, sigcontext.h): uc_flags, uc_link,
    // uc_stack (24 bytes), then struct sigcontext, whose 17th word is rip: 40 + 16 * 8 = 168.
    // glibc's and musl's ucontext_t share this prefix.
    // SAFETY: per the contract uc points to a kernel-built ucontext.
    unsafe { *(uc.cast::<u8>().add(168).cast::<usize>()) }
}
