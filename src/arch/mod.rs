//! Per-architecture code, one folder per architecture behind this dispatcher: the trampolines
//! (assembly split by concern: base, trace events, counting, the exit trampoline, guarded
//! entries, XRay), the naked entry points the compilers call, the clock, the decoders of
//! prologues and call sites, and the XRay sled encodings. Uses `sys`, `tables`, `abi` and
//! `thread` (layouts the assembly shares); the assembly reaches the Rust slow paths
//! (crate::runtime::slow) by symbol.
//!
//! Each architecture module provides, with the same names and meanings:
//! - the exported counting entry points its compilers call (`mcount`, `_mcount`, `__fentry__`,
//!   `__cyg_profile_func_enter/exit`), as `entry_point!`s: naked functions that jump into the
//!   assembly;
//! - `naked!`, `naked_asm!` with the architecture's assembler options;
//! - `guarded_jump!`, the body of a `guarded_entry!`: load the Rust function, jump to the
//!   architecture's guarded routine;
//! - `UC_PC_OFFSET`, where a signal handler's ucontext holds the interrupted pc;
//! - `counter()` and `CLOCK_NAME`, the trace clock;
//! - `exit_trampoline()`, `replaceable()`, `second_slot()`, `forget_sites()` for trace mode;
//! - `sled`, the XRay sled encodings (where the architecture has native XRay patching).
//!
//! `guarded_entry!` defines a naked function that runs a Rust function with this thread's
//! re-entry guard held and all signals blocked, so a runtime that is itself compiled with
//! `-Zinstrument-mcount` never counts or recurses into itself.
//!
//! `x86_64` is the fully annotated reference; the others document only how they differ.

#[cfg(instrfn_arch)]
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

#[cfg(instrfn_arch)]
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

#[cfg(instrfn_arch)]
/// Assembles an architecture's `.s` files with the layouts they share with Rust passed as
/// named `const` operands (`{TLS_GUARD}`, `{TBL_LEN}`, `{SLOT_COUNT}`, `{HASH_MUL}`, trace
/// mode's `{TLS_TRACE_POS}`, `{SH_SLOT}`, `{EV_SHORT_BYTES}`, ...): every offset and constant
/// is defined once, in `abi`, `tables::arcs`, `thread` and the `instrfn-format` crate. (rustc
/// requires every operand to be used, so each block names all of them at least in a header
/// comment; braces in the files are placeholders, so they appear nowhere else.) An
/// architecture may add operands of its own after a `;` (`NAME = const value, ...`).
/// `"a.s" + "b.s"` assembles the files as one block, in that order (b.s may use a.s's
/// macros).
macro_rules! trampoline_asm {
    ($file:literal $(+ $more:literal)* $(, $opt:ident)? $(; $($name:ident = const $value:expr),+ $(,)?)?) => {
        core::arch::global_asm!(
            include_str!($file),
            $(include_str!($more),)*
            TLS_TABLE = const core::mem::offset_of!(crate::abi::Tls, table),
            TLS_GUARD = const core::mem::offset_of!(crate::abi::Tls, guard),
            TBL_MASK = const crate::tables::arcs::layout::MASK,
            TBL_LEN = const crate::tables::arcs::layout::LEN,
            TBL_LIMIT = const crate::tables::arcs::layout::LIMIT,
            TBL_SHIFT = const crate::tables::arcs::layout::SHIFT,
            TBL_LAST = const crate::tables::arcs::layout::LAST,
            TBL_LOST = const crate::tables::arcs::layout::LOST,
            SLOT_SELF = const crate::tables::arcs::SLOTS_OFFSET + crate::tables::arcs::layout::SELF_PC,
            SLOT_FROM = const crate::tables::arcs::SLOTS_OFFSET + crate::tables::arcs::layout::FROM_PC,
            SLOT_COUNT = const crate::tables::arcs::SLOTS_OFFSET + crate::tables::arcs::layout::COUNT,
            SLOT_SIZE = const crate::tables::arcs::SLOT_BYTES,
            SLOT_SHIFT = const crate::tables::arcs::SLOT_BYTES.trailing_zeros(),
            HASH_MUL = const crate::tables::arcs::HASH_MUL,
            TLS_TRACE_POS = const core::mem::offset_of!(crate::abi::Tls, trace_pos),
            TLS_TRACE_END = const core::mem::offset_of!(crate::abi::Tls, trace_end),
            TLS_SHADOW_TOP = const core::mem::offset_of!(crate::abi::Tls, shadow_top),
            TLS_SHADOW_END = const core::mem::offset_of!(crate::abi::Tls, shadow_end),
            TLS_SHADOW_BASE = const core::mem::offset_of!(crate::abi::Tls, shadow_base),
            TLS_UNWOUND = const core::mem::offset_of!(crate::abi::Tls, unwound),
            TLS_DROPPED = const core::mem::offset_of!(crate::abi::Tls, dropped),
            TLS_TRACE_TBASE = const core::mem::offset_of!(crate::abi::Tls, trace_tbase),
            TLS_TRACE_CBASE = const core::mem::offset_of!(crate::abi::Tls, trace_cbase),
            SH_RET = const crate::abi::shadow::SH_RET,
            SH_SLOT = const crate::abi::shadow::SH_SLOT,
            SH_FN = const crate::abi::shadow::SH_FN,
            SH_BYTES = const crate::abi::shadow::SH_BYTES,
            BLK_SHADOW = const crate::thread::BLOCK_SHADOW,
            EV_BYTES = const crate::abi::format::EV_BYTES,
            EV_SHORT_BYTES = const crate::abi::format::EV_SHORT_BYTES,
            EV_TAG_ENTRY = const crate::abi::format::EV_TAG_ENTRY,
            EV_TAG_EXIT = const crate::abi::format::EV_TAG_EXIT,
            EV_TAG_LONG = const crate::abi::format::EV_TAG_LONG,
            EV_LONG_SHIFT = const crate::abi::format::EV_LONG_SHIFT,
            EV_TS_SHIFT = const crate::abi::format::EV_TS_SHIFT,
            EV_TIME_BITS = const crate::abi::format::EV_TIME_BITS,
            EV_ENTRY = const crate::abi::format::EV_ENTRY,
            EV_EXIT = const crate::abi::format::EV_EXIT,
            // Call words (MERGE_CALL, S390_MERGE).
            TLS_TRACE_PIN = const core::mem::offset_of!(crate::abi::Tls, trace_pin),
            EV_CALL_MARK = const crate::abi::format::EV_CALL_MARK,
            EV_CALL_T0_BITS = const crate::abi::format::EV_CALL_T0_BITS,
            EV_CALL_DUR_BITS = const crate::abi::format::EV_CALL_DUR_BITS,
            EV_CALL_FN_BITS = const crate::abi::format::EV_CALL_FN_BITS,
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

/// No native XRay patching on this architecture: the same interface, refusing every sled.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[path = "nosled.rs"]
pub mod sled;

/// Whether this build has trampolines.
pub const SUPPORTED: bool = cfg!(instrfn_arch);

/// XRay sled kinds, as an object's `xray_instr_map` lists them.
pub const KIND_ENTRY: u8 = 0;
pub const KIND_EXIT: u8 = 1;
pub const KIND_TAIL: u8 = 2;
/// An entry that logs its first argument (patched as an entry).
pub const KIND_LOG_ARGS: u8 = 3;

/// Bytes of a stub page's XRay unwind info (`sled::unwind_info`; none where it is all zero).
pub const UNWIND_BYTES: usize = 128;

// The return pads' unwind expressions were generated for 1-byte operands
// (scripts/return-pad-cfi.py; src/arch/<arch>/exit.s).
const _: () = assert!(
    crate::thread::BLOCK_SHADOW < 128
        && crate::abi::shadow::SH_BYTES < 128
        && crate::abi::shadow::SH_SLOT < 128
        && crate::abi::shadow::SH_RET < 128
        && crate::abi::shadow::SH_FN + 8 < 128
);

/// The pc at which a signal interrupted this thread, from the handler's `ucontext`.
///
/// # Safety
/// `uc` must be the third argument of an `SA_SIGINFO` handler.
#[cfg(instrfn_arch)]
#[inline]
pub unsafe fn interrupted_pc(uc: *const libc::c_void) -> usize {
    // SAFETY: per the contract uc points to a kernel-built ucontext, whose pc lies at the
    // architecture's offset.
    unsafe { *(uc.cast::<u8>().add(UC_PC_OFFSET).cast::<usize>()) }
}

#[cfg(not(instrfn_arch))]
#[macro_use]
mod unsupported;
#[cfg(not(instrfn_arch))]
pub use unsupported::*;
