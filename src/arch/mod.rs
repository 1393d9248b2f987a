//! Per-architecture trampolines, one module per architecture behind this dispatcher.
//!
//! Each architecture module provides, with the same names and meanings:
//! - the exported counting entry points its compilers call (`mcount`, `_mcount`, `__fentry__`),
//!   as `entry_point!`s: naked functions that jump into the assembly in `asm/<arch>.s`;
//! - `naked!`, `naked_asm!` with the architecture's assembler options;
//! - `guarded_jump!`, the body of a `guarded_entry!`: load the Rust function, jump to the
//!   architecture's guarded routine;
//! - `UC_PC_OFFSET`, where a signal handler's ucontext holds the interrupted pc.
//!
//! `guarded_entry!` defines a naked function that runs a Rust function with this thread's
//! re-entry guard held and all signals blocked, so a runtime that is itself compiled with
//! `-Zinstrument-mcount` never counts or recurses into itself.
//!
//! The assembly of every architecture defines the same data symbols, so `tls()` (this
//! thread's [`Tls`](crate::thread::Tls) block), `enabled()` (the recording switch the fast
//! paths test) and `interrupted_pc()` are shared below.
//!
//! `x86_64` is the fully annotated reference; the others document only how they differ.

#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "s390x"
))]
/// An exported naked entry point: `.cfi` bracket around `$asm` (a jump into the assembly).
macro_rules! entry_point {
    ($(#[$m:meta])* $name:ident => $($asm:literal),+) => {
        $(#[$m])*
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name() {
            naked!(".cfi_startproc", $($asm,)+ ".cfi_endproc")
        }
    };
}

#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "s390x"
))]
/// A naked `extern "C"` function that calls `$inner` (an `extern "C"` Rust function taking at
/// most three register arguments) through the architecture's guarded routine: guard held,
/// errno preserved, all signals blocked.
macro_rules! guarded_entry {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?
        => $inner:path) => {
        $(#[$m])*
        #[unsafe(naked)]
        $vis extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            guarded_jump!($inner)
        }
    };
}

#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "s390x"
))]
/// Assembles an `asm/<arch>.s` with the layouts it shares with Rust passed as named `const`
/// operands (`{TLS_GUARD}`, `{TBL_LEN}`, `{SLOT_COUNT}`, `{HASH_MUL}`, trace mode's `{TLS_TRACE_POS}`,
/// `{SH_SLOT}`, `{EV_SHORT_BYTES}`, ...): every offset and constant is defined once, in
/// `src/thread.rs`, `src/arcs.rs` and `src/trace.rs`. (rustc requires every operand
/// to be used, so each block names all of them at least in a header comment; braces in the
/// files are placeholders, so they appear nowhere else.) An architecture may add operands of
/// its own after a `;` (`NAME = const value, ...`). `"a.s" + "b.s"` assembles the files as one
/// block, in that order (b.s may use a.s's macros).
macro_rules! trampoline_asm {
    ($file:literal $(+ $more:literal)* $(, $opt:ident)? $(; $($name:ident = const $value:expr),+ $(,)?)?) => {
        core::arch::global_asm!(
            include_str!($file),
            $(include_str!($more),)*
            TLS_TABLE = const core::mem::offset_of!(crate::thread::Tls, table),
            TLS_GUARD = const core::mem::offset_of!(crate::thread::Tls, guard),
            TBL_MASK = const crate::arcs::layout::MASK,
            TBL_LEN = const crate::arcs::layout::LEN,
            TBL_LIMIT = const crate::arcs::layout::LIMIT,
            TBL_SHIFT = const crate::arcs::layout::SHIFT,
            TBL_LAST = const crate::arcs::layout::LAST,
            TBL_LOST = const crate::arcs::layout::LOST,
            SLOT_SELF = const crate::arcs::SLOTS_OFFSET + crate::arcs::layout::SELF_PC,
            SLOT_FROM = const crate::arcs::SLOTS_OFFSET + crate::arcs::layout::FROM_PC,
            SLOT_COUNT = const crate::arcs::SLOTS_OFFSET + crate::arcs::layout::COUNT,
            SLOT_SIZE = const crate::arcs::SLOT_BYTES,
            SLOT_SHIFT = const crate::arcs::SLOT_BYTES.trailing_zeros(),
            HASH_MUL = const crate::arcs::HASH_MUL,
            TLS_TRACE_POS = const core::mem::offset_of!(crate::thread::Tls, trace_pos),
            TLS_TRACE_END = const core::mem::offset_of!(crate::thread::Tls, trace_end),
            TLS_SHADOW_TOP = const core::mem::offset_of!(crate::thread::Tls, shadow_top),
            TLS_SHADOW_END = const core::mem::offset_of!(crate::thread::Tls, shadow_end),
            TLS_SHADOW_BASE = const core::mem::offset_of!(crate::thread::Tls, shadow_base),
            TLS_UNWOUND = const core::mem::offset_of!(crate::thread::Tls, unwound),
            TLS_DROPPED = const core::mem::offset_of!(crate::thread::Tls, dropped),
            TLS_TRACE_TBASE = const core::mem::offset_of!(crate::thread::Tls, trace_tbase),
            TLS_TRACE_CBASE = const core::mem::offset_of!(crate::thread::Tls, trace_cbase),
            SH_RET = const crate::trace::layout::SH_RET,
            SH_SLOT = const crate::trace::layout::SH_SLOT,
            SH_FN = const crate::trace::layout::SH_FN,
            SH_BYTES = const crate::trace::layout::SH_BYTES,
            BLK_SHADOW = const crate::thread::BLOCK_SHADOW,
            EV_BYTES = const crate::trace::layout::EV_BYTES,
            EV_SHORT_BYTES = const crate::trace::layout::EV_SHORT_BYTES,
            EV_TAG_ENTRY = const crate::trace::layout::EV_TAG_ENTRY,
            EV_TAG_EXIT = const crate::trace::layout::EV_TAG_EXIT,
            EV_TAG_LONG = const crate::trace::layout::EV_TAG_LONG,
            EV_LONG_SHIFT = const crate::trace::layout::EV_LONG_SHIFT,
            EV_TS_SHIFT = const crate::trace::layout::EV_TS_SHIFT,
            EV_TIME_BITS = const crate::trace::layout::EV_TIME_BITS,
            EV_ENTRY = const crate::trace::layout::EV_ENTRY,
            EV_EXIT = const crate::trace::layout::EV_EXIT,
            // Call words (MERGE_CALL, S390_MERGE).
            TLS_TRACE_PIN = const core::mem::offset_of!(crate::thread::Tls, trace_pin),
            EV_CALL_MARK = const crate::trace::layout::EV_CALL_MARK,
            EV_CALL_T0_BITS = const crate::trace::layout::EV_CALL_T0_BITS,
            EV_CALL_DUR_BITS = const crate::trace::layout::EV_CALL_DUR_BITS,
            EV_CALL_FN_BITS = const crate::trace::layout::EV_CALL_FN_BITS,
            $($($name = const $value,)+)?
            $(options($opt))?
        );
    };
}

#[cfg(target_arch = "x86_64")]
#[macro_use]
mod x86_64;
#[cfg(target_arch = "x86_64")]
pub use x86_64::*;

#[cfg(target_arch = "aarch64")]
#[macro_use]
mod aarch64;
#[cfg(target_arch = "aarch64")]
pub use aarch64::*;

#[cfg(target_arch = "riscv64")]
#[macro_use]
mod riscv64;
#[cfg(target_arch = "riscv64")]
pub use riscv64::*;

#[cfg(target_arch = "s390x")]
#[macro_use]
mod s390x;
#[cfg(target_arch = "s390x")]
pub use s390x::*;

/// What every architecture with trampolines shares: its `asm/<arch>.s` defines these symbols
/// under the same names.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "s390x"
))]
mod shared {
    use core::sync::atomic::{AtomicU8, Ordering};

    core::arch::global_asm!(
        include_str!("data.s"),
        HASH_MUL = const crate::arcs::HASH_MUL,
        TLS_BYTES = const crate::thread::TLS_BYTES,
    );

    unsafe extern "C" {
        fn instrfn_tls_get() -> *mut crate::thread::Tls;
        /// Read by every fast path.
        static instrfn_enabled: AtomicU8;
        /// 0 gmon, 1 trace: read by every fast path.
        static instrfn_mode: AtomicU8;
        /// INSTRFN_MIN_DURATION in counter ticks (0: off).
        static instrfn_min_ticks: core::sync::atomic::AtomicU64;
        /// What the return pads' unwind info reads (asm/data.s).
        static mut instrfn_registry: [usize; 3];
    }

    // The return pads' unwind expressions were generated for 1-byte operands
    // (scripts/return-pad-cfi.py; asm/<arch>.s).
    const _: () = assert!(
        crate::thread::BLOCK_SHADOW < 128
            && crate::trace::layout::SH_BYTES < 128
            && crate::trace::layout::SH_SLOT < 128
            && crate::trace::layout::SH_RET < 128
            && crate::trace::layout::SH_FN + 8 < 128
    );

    /// Tells the return pads' unwind info where the shadow stacks are: the registry head's
    /// address and the bytes of one shadow stack mapping (trace mode's start, before any return
    /// address is replaced).
    pub fn set_shadow_registry(head: usize, bytes: usize) {
        // SAFETY: plain words of asm/data.s, read by unwinders only; the size is written before
        // the head, which makes a walk find blocks.
        unsafe {
            let r = core::ptr::addr_of_mut!(instrfn_registry).cast::<usize>();
            r.add(1).write_volatile(bytes);
            r.write_volatile(head);
        }
    }

    /// Sets the shortest call trace mode records, in counter ticks (start-up).
    pub fn set_min_ticks(ticks: u64) {
        // SAFETY: a static defined in the assembly, 8 bytes, only accessed atomically.
        unsafe { &*core::ptr::addr_of!(instrfn_min_ticks) }.store(ticks, Ordering::Relaxed);
    }

    /// The mode the fast paths take: 0 gmon, 1 trace, 2 trace without exits.
    pub fn mode() -> u8 {
        // SAFETY: as in set_mode.
        unsafe { &*core::ptr::addr_of!(instrfn_mode) }.load(Ordering::Relaxed)
    }

    /// Sets the mode the fast paths take (start-up, before recording).
    pub fn set_mode(mode: u8) {
        // SAFETY: a static defined in the assembly, one byte, only accessed atomically.
        unsafe { &*core::ptr::addr_of!(instrfn_mode) }.store(mode, Ordering::Relaxed);
    }

    /// Whether this build has trampolines.
    pub const SUPPORTED: bool = true;

    /// The global recording switch the trampolines test.
    #[inline]
    pub fn enabled() -> &'static AtomicU8 {
        // SAFETY: a static defined in the assembly, one byte, only accessed atomically.
        unsafe { &*core::ptr::addr_of!(instrfn_enabled) }
    }

    /// This thread's [`Tls`](crate::thread::Tls) block.
    #[inline]
    pub fn tls() -> *mut crate::thread::Tls {
        // SAFETY: instrfn_tls_get only reads the thread pointer and a link-time constant.
        unsafe { instrfn_tls_get() }
    }

    /// The pc at which a signal interrupted this thread, from the handler's `ucontext`.
    ///
    /// # Safety
    /// `uc` must be the third argument of an `SA_SIGINFO` handler.
    #[inline]
    pub unsafe fn interrupted_pc(uc: *const libc::c_void) -> usize {
        // SAFETY: per the contract uc points to a kernel-built ucontext, whose pc lies at the
        // architecture's offset.
        unsafe { *(uc.cast::<u8>().add(super::UC_PC_OFFSET).cast::<usize>()) }
    }
}
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "s390x"
))]
pub use shared::*;

#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "s390x"
)))]
#[macro_use]
mod unsupported;
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "s390x"
)))]
pub use unsupported::*;
