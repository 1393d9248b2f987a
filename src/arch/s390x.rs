//! s390x (z/Architecture ELF ABI): `_mcount`/`mcount` before the prologue (self_pc = %r14,
//! from_pc stored at `8(%r15)`) and `__fentry__` as the first instruction (self_pc = %r0,
//! from_pc = %r14, return through %r1). The routines and their register contracts are in
//! `asm/s390x.s`.

use core::arch::global_asm;

global_asm!(include_str!("../../asm/s390x.s"));

/// Whether this build has trampolines (false only on unsupported architectures).
pub const SUPPORTED: bool = true;

/// `mcount`: called by rustc `-Zinstrument-mcount` (LLVM) code before the prologue, after
/// `stg %r14,8(%r15)`. ABI here: every register but %r0 and %r1 preserved (LLVM assumes the
/// AnyReg mask: r2-r15, f0-f15, v0-v31); see `FAST_PATH` in asm/s390x.s.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcount() {
    core::arch::naked_asm!(".cfi_startproc", "jg instrfn_s390x_mcount", ".cfi_endproc")
}

/// `_mcount`: the name `gcc -pg` calls, same sequence and ABI as `mcount`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _mcount() {
    core::arch::naked_asm!(".cfi_startproc", "jg instrfn_s390x_mcount", ".cfi_endproc")
}

/// `__fentry__`: `brasl %r0,__fentry__` as the first instruction (`gcc -pg -mfentry`).
/// ABI here: every register but %r0 and %r1 preserved, %r14 included; returns through %r1.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __fentry__() {
    core::arch::naked_asm!(
        ".cfi_startproc",
        ".cfi_return_column %r0",
        "jg instrfn_s390x_fentry",
        ".cfi_endproc",
    )
}

/// Defines a naked `extern "C"` function that calls `$inner` (an `extern "C"` Rust function
/// taking at most three register arguments) through `instrfn_s390x_guarded`: guard held,
/// errno preserved, all signals blocked. %r1 carries `$inner`: the ABI lets a call clobber it,
/// and it carries no argument.
macro_rules! guarded_entry {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?
        => $inner:path) => {
        $(#[$m])*
        #[unsafe(naked)]
        $vis extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "larl %r1, {inner}",
                "jg instrfn_s390x_guarded",
                ".cfi_endproc",
                inner = sym $inner,
            )
        }
    };
}

unsafe extern "C" {
    fn instrfn_tls_get() -> *mut crate::thread::Tls;
    /// Defined in asm/s390x.s; read by every fast path.
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
    // Kernel layout (arch/s390/include/uapi/asm/ucontext.h, sigcontext.h): uc_flags, uc_link,
    // uc_stack (ss_sp, ss_flags padded to 8, ss_size: 24 bytes), then _sigregs, which starts
    // with the PSW {mask, addr} (8-byte aligned): the pc is the PSW address at 40 + 8 = 48.
    // glibc's and musl's ucontext_t (uc_mcontext.psw.addr) share this prefix.
    // SAFETY: per the contract uc points to a kernel-built ucontext.
    unsafe { *(uc.cast::<u8>().add(48).cast::<usize>()) }
}
