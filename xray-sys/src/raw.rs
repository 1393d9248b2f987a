//! compiler-rt's C interface (`<xray/xray_interface.h>`, `<xray/xray_log_interface.h>`),
//! unchanged. C enums are `c_int` here, with their values as constants: a Rust enum receiving a
//! value it does not list would be undefined behaviour. Uses nothing else of the crate.

use std::ffi::{c_char, c_int};

/// `enum XRayEntryType`: why a handler is called.
pub type XRayEntryType = c_int;
/// A function's entry sled.
pub const ENTRY: XRayEntryType = 0;
/// A function's exit sled (before `ret`).
pub const EXIT: XRayEntryType = 1;
/// A tail exit sled: the function leaves by a jump to another function.
pub const TAIL: XRayEntryType = 2;
/// An entry whose first argument is logged (the arg1 handler only).
pub const LOG_ARGS_ENTRY: XRayEntryType = 3;
/// A custom event sled.
pub const CUSTOM_EVENT: XRayEntryType = 4;
/// A typed event sled.
pub const TYPED_EVENT: XRayEntryType = 5;

/// `enum XRayPatchingStatus`.
pub type XRayPatchingStatus = c_int;
/// XRay is not initialised (no sled map in the executable).
pub const NOT_INITIALIZED: XRayPatchingStatus = 0;
pub const SUCCESS: XRayPatchingStatus = 1;
/// Another thread is patching.
pub const ONGOING: XRayPatchingStatus = 2;
pub const FAILED: XRayPatchingStatus = 3;

/// `enum XRayLogInitStatus`.
pub type XRayLogInitStatus = c_int;
pub const XRAY_LOG_UNINITIALIZED: XRayLogInitStatus = 0;
pub const XRAY_LOG_INITIALIZING: XRayLogInitStatus = 1;
pub const XRAY_LOG_INITIALIZED: XRayLogInitStatus = 2;
pub const XRAY_LOG_FINALIZING: XRayLogInitStatus = 3;
pub const XRAY_LOG_FINALIZED: XRayLogInitStatus = 4;

/// `enum XRayLogFlushStatus`.
pub type XRayLogFlushStatus = c_int;
pub const XRAY_LOG_NOT_FLUSHING: XRayLogFlushStatus = 0;
pub const XRAY_LOG_FLUSHING: XRayLogFlushStatus = 1;
pub const XRAY_LOG_FLUSHED: XRayLogFlushStatus = 2;

/// `enum XRayLogRegisterStatus`.
pub type XRayLogRegisterStatus = c_int;
pub const XRAY_REGISTRATION_OK: XRayLogRegisterStatus = 0;
pub const XRAY_DUPLICATE_MODE: XRayLogRegisterStatus = 1;
pub const XRAY_MODE_NOT_FOUND: XRayLogRegisterStatus = 2;
pub const XRAY_INCOMPLETE_IMPL: XRayLogRegisterStatus = 3;

/// A handler: (function id, entry type).
pub type Handler = unsafe extern "C" fn(i32, XRayEntryType);
/// An arg1 handler: (function id, entry type, first argument).
pub type ArgHandler = unsafe extern "C" fn(i32, XRayEntryType, u64);

unsafe extern "C" {
    /// Sets the handler every patched entry and exit sled calls. 1 if set, 0 if XRay is
    /// not initialised.
    pub fn __xray_set_handler(entry: Option<Handler>) -> c_int;
    /// Removes it (sleds stay patched and call nothing). 1 if done.
    pub fn __xray_remove_handler() -> c_int;
    /// Sets the handler of sleds of functions that log their first argument.
    pub fn __xray_set_handler_arg1(entry: Option<ArgHandler>) -> c_int;
    pub fn __xray_remove_handler_arg1() -> c_int;
    /// Patches every sled of the executable.
    pub fn __xray_patch() -> XRayPatchingStatus;
    /// Puts every sled back to its nops.
    pub fn __xray_unpatch() -> XRayPatchingStatus;
    /// Patches the sleds of function `id` (1-based). Reads `xray_fn_idx`: see the crate
    /// documentation before calling it on a binary of a newer LLVM than compiler-rt's.
    pub fn __xray_patch_function(id: i32) -> XRayPatchingStatus;
    /// Unpatches the sleds of function `id`. Reads `xray_fn_idx` as above.
    pub fn __xray_unpatch_function(id: i32) -> XRayPatchingStatus;
    /// The address of function `id`, 0 if there is none. Reads `xray_fn_idx` as above.
    pub fn __xray_function_address(id: i32) -> usize;
    /// The largest function id (ids run from 1).
    pub fn __xray_max_function_id() -> usize;
    /// Initialises XRay (run from `.preinit_array`; later calls do nothing).
    pub fn __xray_init();
    /// Selects a registered logging mode ("xray-basic", "xray-fdr", ...).
    pub fn __xray_log_select_mode(mode: *const c_char) -> XRayLogRegisterStatus;
    /// Initialises mode `mode` with its options in `config` (the mode's flag syntax).
    pub fn __xray_log_init_mode(mode: *const c_char, config: *const c_char) -> XRayLogInitStatus;
    /// Stops the current mode's recording.
    pub fn __xray_log_finalize() -> XRayLogInitStatus;
    /// Writes the current mode's log.
    pub fn __xray_log_flushLog() -> XRayLogFlushStatus;
}
