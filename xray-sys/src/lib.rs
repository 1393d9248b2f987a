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
//! function's sleds relative to the entry, number of sleds); older ones, and the compiler-rt
//! they come with (Debian 12's is 14), use (absolute begin, absolute end). compiler-rt 14
//! reading a binary of today's rustc takes the relative start for an address:
//! `__xray_function_address`, `__xray_patch_function` and `__xray_unpatch_function` fault
//! (SIGSEGV). Patching everything (`__xray_patch`) walks the sled map instead and is not
//! affected. The wrappers here read the index's format from its entries before the first call
//! that uses it. Unless it is known to be one compiler-rt reads (absolute entries with a
//! compiler-rt before 17), they take the index out of compiler-rt's copy of the sled map (its
//! `XRayInstrMap`, whose four words are checked against the sections first), so that
//! compiler-rt finds each function's sleds by walking the map, as it does for binaries built
//! with `-C llvm-args=-xray-function-index=false`: per-function patching then works, in time
//! linear in the number of sleds. Where that copy cannot be checked (another compiler-rt),
//! PC-relative entries are trusted to a compiler-rt of 17 or later; otherwise
//! [`function_address`] computes addresses from the sled map itself, and per-function
//! patching returns [`PatchError::IndexUnreadable`] instead of crashing.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

use std::ffi::CStr;
use std::ops::RangeInclusive;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

/// compiler-rt's C interface (`<xray/xray_interface.h>`, `<xray/xray_log_interface.h>`),
/// unchanged. C enums are `c_int` here, with their values as constants: a Rust enum receiving a
/// value it does not list would be undefined behaviour.
pub mod raw {
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
        pub fn __xray_log_init_mode(
            mode: *const c_char,
            config: *const c_char,
        ) -> XRayLogInitStatus;
        /// Stops the current mode's recording.
        pub fn __xray_log_finalize() -> XRayLogInitStatus;
        /// Writes the current mode's log.
        pub fn __xray_log_flushLog() -> XRayLogFlushStatus;
    }
}

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

/// Patches the sleds of function `id` only (see [`function_ids`]).
pub fn patch_function(id: i32) -> Result<(), PatchError> {
    state().per_function()?;
    // SAFETY: compiler-rt reads a function index it understands, or none (state()).
    PatchError::from_status(unsafe { raw::__xray_patch_function(id) })
}

/// Unpatches the sleds of function `id`.
pub fn unpatch_function(id: i32) -> Result<(), PatchError> {
    state().per_function()?;
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

/// The kind of a sled (`xray_instr_map` entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SledKind {
    Entry,
    Exit,
    Tail,
    LogArgsEntry,
    CustomEvent,
    TypedEvent,
    Other(u8),
}

/// One entry of the sled map, addresses resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sled {
    /// Where the sled is.
    pub address: usize,
    /// The function it belongs to (its entry address).
    pub function: usize,
    pub kind: SledKind,
    /// Set for functions marked `xray_always_instrument`.
    pub always_instrument: bool,
    /// Entry version: 2 means both addresses are relative to their own fields.
    pub version: u8,
}

/// The executable's sled map, `xray_instr_map`: 32-byte entries (address, function, kind,
/// always-instrument, version, padding).
#[derive(Clone, Copy, Debug)]
pub struct SledMap {
    start: usize,
    entries: usize,
}

/// Bytes of one sled map entry.
pub const SLED_ENTRY_SIZE: usize = 32;
/// Bytes of one function index entry.
pub const INDEX_ENTRY_SIZE: usize = 16;

impl SledMap {
    /// Number of sleds.
    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Address of the first entry.
    pub fn start(&self) -> usize {
        self.start
    }

    /// Sled `i` (`i < len()`).
    pub fn get(&self, i: usize) -> Option<Sled> {
        if i >= self.entries {
            return None;
        }
        let e = self.start + i * SLED_ENTRY_SIZE;
        // SAFETY: entry i lies within the linker-delimited section (checked above), which is
        // mapped read-only for the life of the program.
        let (address, function, kind, always, version) = unsafe {
            (
                (e as *const u64).read_unaligned(),
                ((e + 8) as *const u64).read_unaligned(),
                ((e + 16) as *const u8).read(),
                ((e + 17) as *const u8).read(),
                ((e + 18) as *const u8).read(),
            )
        };
        let (address, function) = if version >= 2 {
            (
                e.wrapping_add(address as usize),
                (e + 8).wrapping_add(function as usize),
            )
        } else {
            (address as usize, function as usize)
        };
        let kind = match kind {
            0 => SledKind::Entry,
            1 => SledKind::Exit,
            2 => SledKind::Tail,
            3 => SledKind::LogArgsEntry,
            4 => SledKind::CustomEvent,
            5 => SledKind::TypedEvent,
            k => SledKind::Other(k),
        };
        Some(Sled {
            address,
            function,
            kind,
            always_instrument: always != 0,
            version,
        })
    }

    /// Every sled, in map order.
    pub fn iter(&self) -> impl Iterator<Item = Sled> + '_ {
        (0..self.entries).filter_map(|i| self.get(i))
    }

    /// The address of every function, indexed by function id - 1, numbered as compiler-rt
    /// numbers them when it patches: a new id each time a sled's function differs from the
    /// previous sled's (LLVM emits each function's sleds together, so this is the order in
    /// which functions first appear in the map).
    pub fn function_addresses(&self) -> Vec<usize> {
        let mut v = Vec::new();
        let mut last = 0;
        for s in self.iter() {
            if s.function != last {
                v.push(s.function);
                last = s.function;
            }
        }
        v
    }
}

/// The executable's sled map, `None` if it has none.
pub fn sled_map() -> Option<SledMap> {
    let s = symbols();
    if s.instr_map_start == 0 || s.instr_map_stop <= s.instr_map_start {
        return None;
    }
    Some(SledMap {
        start: s.instr_map_start,
        entries: (s.instr_map_stop - s.instr_map_start) / SLED_ENTRY_SIZE,
    })
}

/// The executable's function index, `xray_fn_idx`, as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexFormat {
    /// No index (`-C llvm-args=-xray-function-index=false`, or no sleds): compiler-rt walks
    /// the sled map.
    None,
    /// (absolute begin, absolute end) per function: older LLVMs (clang 14), what compiler-rt
    /// 14 reads.
    Absolute,
    /// (start relative to the entry itself, sled count) per function: newer LLVMs (today's
    /// rustc, LLVM 22).
    PcRelative,
    /// Neither reading fits every entry.
    Unrecognised,
}

/// Which format this executable's function index has (read from the entries: each must
/// delimit a whole run of sleds within the sled map).
pub fn index_format() -> IndexFormat {
    state().format
}

/// How compiler-rt stands with this executable's function index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexUse {
    /// compiler-rt reads the index as it is written, or there is none.
    Readable,
    /// compiler-rt would misread it; this crate took it out of compiler-rt's sled map, which
    /// now finds each function's sleds by walking the map.
    SetAside,
    /// compiler-rt would misread it and it could not be set aside: per-function patching is
    /// refused, addresses come from the sled map.
    Unreadable,
}

/// What the wrappers found, and did, about the function index (see the crate documentation).
pub fn index_use() -> IndexUse {
    state().index_use
}

/// Must match `struct xray_sys_symbols` in src/shim.c.
#[repr(C)]
#[derive(Default)]
struct Symbols {
    instr_map_start: usize,
    instr_map_stop: usize,
    fn_idx_start: usize,
    fn_idx_stop: usize,
    crt_sled_map: usize,
    crt_sled_map_lock: usize,
}

unsafe extern "C" {
    fn xray_sys_symbols(out: *mut Symbols);
}

fn symbols() -> Symbols {
    let mut s = Symbols::default();
    // SAFETY: the shim fills the struct it is given (same layout) and nothing else.
    unsafe { xray_sys_symbols(&mut s) };
    s
}

struct State {
    format: IndexFormat,
    index_use: IndexUse,
    /// Function addresses by id - 1, from the sled map.
    functions: Vec<usize>,
}

impl State {
    fn crt_reads_index(&self) -> bool {
        self.index_use != IndexUse::Unreadable
    }

    fn per_function(&self) -> Result<(), PatchError> {
        if self.crt_reads_index() {
            Ok(())
        } else {
            Err(PatchError::IndexUnreadable)
        }
    }
}

/// The major version of the clang whose compiler-rt is linked (0 if unknown).
fn crt_major() -> u32 {
    env!("XRAY_SYS_CLANG_MAJOR").parse().unwrap_or(0)
}

fn state() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(|| {
        // SAFETY: compiler-rt's initialiser: does nothing if it already ran (from
        // .preinit_array), so compiler-rt's sled map is set up before we look at it.
        unsafe { raw::__xray_init() };
        let syms = symbols();
        let map = sled_map();
        let functions = map.map(|m| m.function_addresses()).unwrap_or_default();
        let format = read_format(&syms, map);
        // compiler-rt 14 reads absolute entries; newer ones read PC-relative entries (the
        // version where that changed is only trusted when there is nothing to check: walking
        // the map is right for every version whose map can be checked).
        let index_use = if format == IndexFormat::None
            || (format == IndexFormat::Absolute && (1..17).contains(&crt_major()))
        {
            IndexUse::Readable
        } else if set_index_aside(&syms, map, functions.len()) {
            IndexUse::SetAside
        } else if format == IndexFormat::PcRelative && crt_major() >= 17 {
            IndexUse::Readable
        } else {
            IndexUse::Unreadable
        };
        State {
            format,
            index_use,
            functions,
        }
    })
}

fn read_format(syms: &Symbols, map: Option<SledMap>) -> IndexFormat {
    if syms.fn_idx_start == 0 || syms.fn_idx_stop <= syms.fn_idx_start {
        return IndexFormat::None;
    }
    let Some(map) = map else {
        return IndexFormat::Unrecognised;
    };
    let (lo, hi) = (map.start, map.start + map.entries * SLED_ENTRY_SIZE);
    let on_entry = |a: usize| a >= lo && a <= hi && (a - lo).is_multiple_of(SLED_ENTRY_SIZE);
    let n = (syms.fn_idx_stop - syms.fn_idx_start) / INDEX_ENTRY_SIZE;
    let (mut absolute, mut relative) = (true, true);
    for i in 0..n {
        let e = syms.fn_idx_start + i * INDEX_ENTRY_SIZE;
        // SAFETY: entry i lies within the linker-delimited index section, mapped read-only.
        let (w0, w1) = unsafe {
            (
                (e as *const u64).read_unaligned() as usize,
                ((e + 8) as *const u64).read_unaligned() as usize,
            )
        };
        absolute &= on_entry(w0) && on_entry(w1) && w0 < w1;
        let begin = e.wrapping_add(w0);
        relative &= on_entry(begin) && w1 >= 1 && w1 <= (hi - begin.min(hi)) / SLED_ENTRY_SIZE;
        if !absolute && !relative {
            break;
        }
    }
    match (absolute, relative) {
        (true, false) => IndexFormat::Absolute,
        (false, true) => IndexFormat::PcRelative,
        _ => IndexFormat::Unrecognised,
    }
}

/// Takes the function index out of compiler-rt's copy of the sled map, if that copy has
/// compiler-rt 14's layout `{ sleds, entries, index, functions }` and holds exactly this
/// executable's sections; `functions` becomes the count of the sled map walk, which is how
/// compiler-rt numbers functions without an index. Done under compiler-rt's lock of it.
fn set_index_aside(syms: &Symbols, map: Option<SledMap>, functions: usize) -> bool {
    let Some(map) = map else { return false };
    if syms.crt_sled_map == 0 || syms.crt_sled_map_lock == 0 || functions == 0 {
        return false;
    }
    let words = syms.crt_sled_map as *mut usize;
    // SAFETY: XRayInstrMapMutex is compiler-rt's StaticSpinMutex, one byte that is 0 when
    // free and set to 1 by an atomic exchange to take it; compiler-rt only ever accesses it
    // atomically.
    let lock = unsafe { AtomicU8::from_ptr(syms.crt_sled_map_lock as *mut u8) };
    while lock.swap(1, Ordering::Acquire) != 0 {
        std::hint::spin_loop();
    }
    let expected = [
        map.start,
        map.entries,
        syms.fn_idx_start,
        (syms.fn_idx_stop - syms.fn_idx_start) / INDEX_ENTRY_SIZE,
    ];
    // SAFETY: XRayInstrMap is a compiler-rt global of at least four words in every version
    // that defines it under this name (14: sleds, entries, index, functions); we hold its lock,
    // and write only after all four words read as this executable's sections.
    let ok = unsafe {
        let matches = (0..4).all(|i| words.add(i).read_volatile() == expected[i]);
        if matches {
            words.add(2).write_volatile(0);
            words.add(3).write_volatile(functions);
        }
        matches
    };
    lock.store(0, Ordering::Release);
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sled map of version-2 entries in `buf` (8-byte aligned): `sleds` as (function index,
    /// kind), function i at address 0x1000 * (i + 1) + base of nothing (any distinct values).
    fn sled_map_in(buf: &mut [u64], sleds: &[(usize, u8)]) -> (SledMap, Vec<usize>) {
        let start = buf.as_ptr() as usize;
        let fns: Vec<usize> = (0..8).map(|i| 0x7000_0000 + 0x1000 * i).collect();
        for (i, &(f, kind)) in sleds.iter().enumerate() {
            let e = start + i * SLED_ENTRY_SIZE;
            let w = &mut buf[i * 4..i * 4 + 4];
            // address and function relative to their own fields
            w[0] = (fns[f] + 16).wrapping_sub(e) as u64;
            w[1] = fns[f].wrapping_sub(e + 8) as u64;
            w[2] = u64::from(kind) | 1 << 8 | 2 << 16; // kind, always, version 2
            w[3] = 0;
        }
        (
            SledMap {
                start,
                entries: sleds.len(),
            },
            fns,
        )
    }

    const SLEDS: [(usize, u8); 6] = [(0, 0), (0, 1), (3, 0), (3, 2), (3, 1), (1, 0)];

    #[test]
    fn walk_numbers_functions_as_compiler_rt() {
        let mut buf = vec![0u64; 4 * SLEDS.len()];
        let (map, fns) = sled_map_in(&mut buf, &SLEDS);
        assert_eq!(map.function_addresses(), vec![fns[0], fns[3], fns[1]]);
        let s = map.get(3).unwrap();
        assert_eq!(
            (
                s.function,
                s.address,
                s.kind,
                s.always_instrument,
                s.version
            ),
            (fns[3], fns[3] + 16, SledKind::Tail, true, 2)
        );
        assert_eq!(map.get(6), None);
    }

    /// Symbols for `map` with an index of `entries` (two words each) in `idx`.
    fn syms(map: SledMap, idx: &[u64]) -> Symbols {
        Symbols {
            instr_map_start: map.start,
            instr_map_stop: map.start + map.entries * SLED_ENTRY_SIZE,
            fn_idx_start: idx.as_ptr() as usize,
            fn_idx_stop: idx.as_ptr() as usize + idx.len() * 8,
            ..Symbols::default()
        }
    }

    #[test]
    fn index_formats_are_told_apart() {
        let mut buf = vec![0u64; 4 * SLEDS.len()];
        let (map, _) = sled_map_in(&mut buf, &SLEDS);
        let at = |i: usize| (map.start + i * SLED_ENTRY_SIZE) as u64;
        // Functions' runs of sleds: [0, 2), [2, 5), [5, 6).
        let runs = [(0, 2), (2, 5), (5, 6)];
        let absolute: Vec<u64> = runs.iter().flat_map(|&(b, e)| [at(b), at(e)]).collect();
        assert_eq!(
            read_format(&syms(map, &absolute), Some(map)),
            IndexFormat::Absolute
        );
        let mut relative = vec![0u64; 6];
        let base = relative.as_ptr() as usize;
        for (i, &(b, e)) in runs.iter().enumerate() {
            relative[2 * i] = at(b).wrapping_sub((base + 16 * i) as u64);
            relative[2 * i + 1] = (e - b) as u64;
        }
        assert_eq!(
            read_format(&syms(map, &relative), Some(map)),
            IndexFormat::PcRelative
        );
        // A count that runs past the map, an entry off a sled boundary.
        let mut bad = relative.clone();
        bad[5] = 2;
        assert_eq!(
            read_format(&syms(map, &bad), Some(map)),
            IndexFormat::Unrecognised
        );
        let mut bad = absolute.clone();
        bad[2] += 8;
        assert_eq!(
            read_format(&syms(map, &bad), Some(map)),
            IndexFormat::Unrecognised
        );
        assert_eq!(read_format(&syms(map, &[]), Some(map)), IndexFormat::None);
    }

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

    #[test]
    fn index_is_set_aside_only_from_a_map_that_matches() {
        let mut buf = vec![0u64; 4 * SLEDS.len()];
        let (map, _) = sled_map_in(&mut buf, &SLEDS);
        let idx = [0u64; 6];
        for (matching, done) in [(true, true), (false, false)] {
            let mut crt = [
                map.start,
                map.entries,
                idx.as_ptr() as usize,
                if matching { 3 } else { 4 },
            ];
            let mut lock = [0u8];
            let before = crt;
            let s = Symbols {
                crt_sled_map: crt.as_mut_ptr() as usize,
                crt_sled_map_lock: lock.as_mut_ptr() as usize,
                ..syms(map, &idx)
            };
            assert_eq!(set_index_aside(&s, Some(map), 3), done);
            let after = crt;
            if done {
                assert_eq!(after, [before[0], before[1], 0, 3]);
            } else {
                assert_eq!(after, before);
            }
            assert_eq!(lock[0], 0, "the lock is released");
        }
    }
}
