//! Packages the `instrfn` runtime as `libinstrfn.so` (for `LD_PRELOAD`) and `libinstrfn.a` (for
//! static linking into C programs). Every exported symbol (`mcount`, `_mcount`, `__fentry__`, the
//! gcrt entry points `__monstartup`/`_mcleanup`/`moncontrol` and the `instrfn_*` C API) comes
//! from the runtime crate; this crate only links it into those two artifact kinds.
//!
//! No Rust std: the artifacts contain the runtime, `core` and nothing that allocates or unwinds,
//! so a C program (musl included) links them with no extra libraries.
#![cfg_attr(not(test), no_std)]

pub use runtime::*;

/// The runtime does not panic on purpose; should it ever, the process aborts.
#[cfg(not(test))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // SAFETY: abort has no preconditions.
    unsafe { libc::abort() }
}

/// The precompiled `core` refers to the unwinding personality routine from its unwind tables
/// even when nothing unwinds (everything here is built with panic=abort). A static C link
/// would then fail on the missing symbol; this definition is never called.
#[cfg(not(test))]
#[unsafe(no_mangle)]
pub extern "C" fn rust_eh_personality() {}

// Not part of libinstrfn.so's interface: hidden, so only the ABI's names and the documented C
// API are exported (the static archive still resolves it for a C link).
#[cfg(not(test))]
core::arch::global_asm!(".hidden rust_eh_personality");
