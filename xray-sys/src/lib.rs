//! Bindings to compiler-rt's XRay runtime (`libclang_rt.xray-<arch>.a`), for programs built
//! with XRay sleds: rustc `-Zinstrument-xray`, clang `-fxray-instrument`.
//!
//! Depending on this crate links compiler-rt's runtime into the executable, whole-archive (its
//! initialiser runs from `.preinit_array` and reads the executable's sled map). The build
//! script finds the archive with `clang -print-file-name` (`CLANG` names another clang);
//! features `basic` and `fdr` add compiler-rt's logging modes. Only executables can link it
//! (a shared object may not have a `.preinit_array`), and compiler-rt patches the sleds of the
//! executable only, never those of shared libraries.
//!
//! [`raw`] is compiler-rt's C interface as it is. The functions at the top level wrap it:
//! - [`patch`], [`unpatch`], [`patch_function`], [`unpatch_function`] return a `Result` of
//!   compiler-rt's status;
//! - [`function_address`] an `Option`, [`function_ids`] the range of valid ids;
//! - [`set_handler`] is `unsafe`: see there what a handler must never do;
//! - [`sled_map`] reads the sled map itself (`xray_instr_map`), [`index_format`] says which
//!   function index (`xray_fn_idx`) the executable carries.
//!
//! ## The function index
//! Newer LLVMs (today's rustc uses LLVM 22) write each `xray_fn_idx` entry as (start of the
//! function's sleds relative to the entry, number of sleds). Older ones write (absolute begin,
//! absolute end), and the compiler-rt they come with reads that (Debian 12's is 14).
//! compiler-rt 14 takes the relative start of a newer entry for an address:
//! `__xray_function_address`, `__xray_patch_function` and `__xray_unpatch_function` then fault
//! (SIGSEGV). `__xray_patch` walks the sled map instead and is not affected.
//!
//! The wrappers here read the index's format from its entries before the first call that uses
//! it. No index, or absolute entries with a compiler-rt before 17, are left alone. Otherwise
//! they take the index out of compiler-rt's copy of the sled map (its `XRayInstrMap`, whose
//! four words are checked against the sections first). compiler-rt then finds each function's
//! sleds by walking the map, as it does for binaries built with
//! `-C llvm-args=-xray-function-index=false`: per-function patching works, in time linear in
//! the number of sleds. Where that copy cannot be checked (another compiler-rt), PC-relative
//! entries are trusted to a compiler-rt of 17 or later. Otherwise [`function_address`]
//! computes addresses from the sled map itself, and per-function patching returns
//! [`PatchError::IndexUnreadable`] instead of crashing.
//!
//! ## Modules
//! `raw` (the C interface) and `sections` (where the linker put the sections) use nothing;
//! `sled` (the sled map) uses sections; `index` (the function index) uses all three. The
//! wrappers at the top level use them all.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

use std::ffi::CStr;
use std::ops::RangeInclusive;

mod index;
pub mod raw;
mod sections;
mod sled;

pub use index::{INDEX_ENTRY_SIZE, IndexFormat, IndexUse, index_format, index_use};
pub use sled::{Function, SLED_ENTRY_SIZE, Sled, SledKind, SledMap, sled_map};

use index::state;

/// Why a handler is called ([`raw::XRayEntryType`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryType {
    Entry,
    Exit,
    /// The function leaves by a tail call.
    Tail,
    LogArgsEntry,
    CustomEvent,
    TypedEvent,
}

impl EntryType {
    /// The type compiler-rt passed as `raw`, if it is one of these.
    pub fn from_raw(raw: raw::XRayEntryType) -> Option<EntryType> {
        Some(match raw {
            raw::ENTRY => EntryType::Entry,
            raw::EXIT => EntryType::Exit,
            raw::TAIL => EntryType::Tail,
            raw::LOG_ARGS_ENTRY => EntryType::LogArgsEntry,
            raw::CUSTOM_EVENT => EntryType::CustomEvent,
            raw::TYPED_EVENT => EntryType::TypedEvent,
            _ => return None,
        })
    }
}

/// Why patching or unpatching did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchError {
    /// compiler-rt is not initialised: the executable has no sled map (it was not built with
    /// XRay instrumentation).
    NotInitialized,
    /// Another thread is patching or unpatching right now.
    Ongoing,
    /// compiler-rt failed (no such function id, or the code could not be made writable).
    Failed,
    /// A status this crate does not know.
    Other(i32),
    /// Per-function patching refused: compiler-rt would misread this executable's function
    /// index (see the crate documentation) and its copy of it could not be set aside.
    IndexUnreadable,
}

impl PatchError {
    /// compiler-rt's patching status as a result.
    #[inline]
    pub fn from_status(status: raw::XRayPatchingStatus) -> Result<(), PatchError> {
        match status {
            raw::SUCCESS => Ok(()),
            raw::NOT_INITIALIZED => Err(PatchError::NotInitialized),
            raw::ONGOING => Err(PatchError::Ongoing),
            raw::FAILED => Err(PatchError::Failed),
            s => Err(PatchError::Other(s)),
        }
    }
}

impl std::fmt::Display for PatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PatchError::NotInitialized => {
                f.write_str("XRay is not initialised (the executable has no XRay sleds)")
            }
            PatchError::Ongoing => f.write_str("another thread is patching XRay sleds"),
            PatchError::Failed => f.write_str("compiler-rt could not patch (bad function id?)"),
            PatchError::Other(s) => write!(f, "compiler-rt returned patching status {s}"),
            PatchError::IndexUnreadable => f.write_str(
                "per-function patching is not possible: compiler-rt cannot read this \
                 executable's XRay function index (build with \
                 -C llvm-args=-xray-function-index=false)",
            ),
        }
    }
}

impl std::error::Error for PatchError {}

/// Patches every sled of the executable: from now on each instrumented function calls the
/// handler at entry and exit. Safe: compiler-rt writes each sled so that a thread running
/// through it sees either the nops or the complete call, and with no handler set the
/// trampolines call nothing.
pub fn patch() -> Result<(), PatchError> {
    // SAFETY: see above; compiler-rt walks the sled map (not the function index).
    PatchError::from_status(unsafe { raw::__xray_patch() })
}

/// Puts every sled back to its nops.
pub fn unpatch() -> Result<(), PatchError> {
    // SAFETY: as patch().
    PatchError::from_status(unsafe { raw::__xray_unpatch() })
}

/// Refuses per-function patching where compiler-rt would misread the function index.
fn per_function() -> Result<(), PatchError> {
    if state().crt_reads_index() {
        Ok(())
    } else {
        Err(PatchError::IndexUnreadable)
    }
}

/// Patches the sleds of function `id` only (see [`function_ids`]).
pub fn patch_function(id: i32) -> Result<(), PatchError> {
    per_function()?;
    // SAFETY: compiler-rt reads a function index it understands, or none (state()).
    PatchError::from_status(unsafe { raw::__xray_patch_function(id) })
}

/// Unpatches the sleds of function `id`.
pub fn unpatch_function(id: i32) -> Result<(), PatchError> {
    per_function()?;
    // SAFETY: as patch_function.
    PatchError::from_status(unsafe { raw::__xray_unpatch_function(id) })
}

/// The largest function id compiler-rt knows (0: no instrumented function).
pub fn max_function_id() -> usize {
    // SAFETY: reads compiler-rt's count (the function index's size, or the sled map's).
    unsafe { raw::__xray_max_function_id() }
}

/// The valid function ids: `1..=max_function_id()` (empty when there are none).
pub fn function_ids() -> RangeInclusive<i32> {
    1..=i32::try_from(max_function_id()).unwrap_or(i32::MAX)
}

/// The address of function `id`'s code (its entry, where its first sled's function field
/// points), or `None` for an id outside [`function_ids`].
pub fn function_address(id: i32) -> Option<usize> {
    let s = state();
    if s.crt_reads_index() {
        // SAFETY: compiler-rt reads a function index it understands, or walks the map.
        let a = unsafe { raw::__xray_function_address(id) };
        return (a != 0).then_some(a);
    }
    let i = usize::try_from(id).ok()?.checked_sub(1)?;
    s.functions.get(i).copied()
}

/// compiler-rt is not initialised: the executable has no sled map (it was not built with
/// XRay instrumentation), so no handler can be set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotInitialized;

impl std::fmt::Display for NotInitialized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("XRay is not initialised (the executable has no XRay sleds)")
    }
}

impl std::error::Error for NotInitialized {}

/// Sets the handler that every patched sled calls with (function id, [`raw::XRayEntryType`]).
/// Fails when XRay is not initialised (the executable has no sled map).
///
/// # Safety
/// The handler runs inside the instrumented functions, on any thread, at any time — also
/// inside signal handlers, concurrently on many threads, and even after
/// [`remove_handler`] returns (a trampoline may have loaded the pointer just before) — so:
/// - neither it nor anything it calls may have patched sleds: an instrumented handler calls
///   itself from its own entry sled until the stack overflows. A Rust handler in a program
///   built with `-Zinstrument-xray` must be a naked function or assembly (rustc may inline
///   or instantiate ordinary Rust code into instrumented crates), or live in a crate compiled
///   without the flag;
/// - it must stay valid, with everything it reads, for the rest of the program;
/// - it must be async-signal-safe (no locks, no allocation) and preserve what the C ABI says a
///   callee preserves (compiler-rt's trampolines save the rest).
pub unsafe fn set_handler(handler: raw::Handler) -> Result<(), NotInitialized> {
    // SAFETY: the caller vouches for the handler.
    match unsafe { raw::__xray_set_handler(Some(handler)) } {
        1 => Ok(()),
        _ => Err(NotInitialized),
    }
}

/// Removes the handler: patched sleds call nothing from now on (but see [`set_handler`]:
/// a call already on its way may still arrive).
pub fn remove_handler() -> bool {
    // SAFETY: an atomic store of null in compiler-rt.
    unsafe { raw::__xray_remove_handler() == 1 }
}

/// Sets the handler of the sleds of functions that log their first argument
/// (`xray_log_args`).
///
/// # Safety
/// As [`set_handler`].
pub unsafe fn set_handler_arg1(handler: raw::ArgHandler) -> Result<(), NotInitialized> {
    // SAFETY: the caller vouches for the handler.
    match unsafe { raw::__xray_set_handler_arg1(Some(handler)) } {
        1 => Ok(()),
        _ => Err(NotInitialized),
    }
}

/// Removes the arg1 handler.
pub fn remove_handler_arg1() -> bool {
    // SAFETY: an atomic store of null in compiler-rt.
    unsafe { raw::__xray_remove_handler_arg1() == 1 }
}

/// Selects logging mode `mode` ("xray-basic" with feature `basic`, "xray-fdr" with `fdr`).
/// `Err` holds compiler-rt's [`raw::XRayLogRegisterStatus`].
pub fn log_select_mode(mode: &CStr) -> Result<(), raw::XRayLogRegisterStatus> {
    // SAFETY: a NUL-terminated string compiler-rt only reads.
    match unsafe { raw::__xray_log_select_mode(mode.as_ptr()) } {
        raw::XRAY_REGISTRATION_OK => Ok(()),
        s => Err(s),
    }
}

/// Initialises mode `mode` with options `config` (e.g. `func_duration_threshold_us=0`);
/// returns compiler-rt's [`raw::XRayLogInitStatus`] (`XRAY_LOG_INITIALIZED` on success).
/// The mode's own handler is compiler-rt's; [`patch`] makes the sleds call it.
pub fn log_init_mode(mode: &CStr, config: &CStr) -> raw::XRayLogInitStatus {
    // SAFETY: NUL-terminated strings compiler-rt only reads (it copies what it keeps).
    unsafe { raw::__xray_log_init_mode(mode.as_ptr(), config.as_ptr()) }
}

/// Stops the current mode's recording (`XRAY_LOG_FINALIZED` on success).
pub fn log_finalize() -> raw::XRayLogInitStatus {
    // SAFETY: no arguments; compiler-rt checks its own state.
    unsafe { raw::__xray_log_finalize() }
}

/// Writes the current mode's log (`XRAY_LOG_FLUSHED` on success).
pub fn log_flush() -> raw::XRayLogFlushStatus {
    // SAFETY: as log_finalize.
    unsafe { raw::__xray_log_flushLog() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_without_sleds_is_refused_not_crashed() {
        // This test binary has no XRay instrumentation: compiler-rt does not initialise.
        assert!(sled_map().is_none());
        assert_eq!(index_format(), IndexFormat::None);
        assert_eq!(index_use(), IndexUse::Readable);
        assert_eq!(max_function_id(), 0);
        assert!(function_ids().is_empty());
        assert_eq!(function_address(1), None);
        assert_eq!(patch(), Err(PatchError::NotInitialized));
        assert_eq!(unpatch(), Err(PatchError::NotInitialized));
        assert!(patch_function(1).is_err());
        unsafe extern "C" fn nothing(_: i32, _: raw::XRayEntryType) {}
        // SAFETY: an empty handler (and it cannot be set: no sleds).
        assert_eq!(unsafe { set_handler(nothing) }, Err(NotInitialized));
    }

    #[test]
    fn modes_are_linked_with_their_features() {
        // Whole archive: each mode's registration runs at start-up (even with no sleds).
        let registered = |m: &CStr| log_select_mode(m) == Ok(());
        assert_eq!(registered(c"xray-basic"), cfg!(feature = "basic"));
        assert_eq!(registered(c"xray-fdr"), cfg!(feature = "fdr"));
        assert_eq!(
            log_select_mode(c"no-such-mode"),
            Err(raw::XRAY_MODE_NOT_FOUND)
        );
    }
}
