//! instrfn's XRay handler. compiler-rt (linked by [`xray_sys`]) patches the executable's XRay
//! sleds. Every patched entry, exit and tail exit becomes an event in instrfn's per-thread
//! trace rings: the same events `-finstrument-functions` code makes. So `instrfn dump`,
//! `report` and `export` read the result as any other trace.
//!
//! ```no_run
//! // at the top level of the program's crate: the whole run is traced
//! instrfn_xray::install_before_main!();
//! // or, first thing in main (main's own entry is then not in the trace):
//! instrfn_xray::install().expect("XRay");
//! ```
//! Build the program with `RUSTFLAGS=-Zinstrument-xray=always cargo +nightly build --target
//! <triple>` and run it with `INSTRFN_MODE=trace` (or under `instrfn record`): the runtime is
//! linked in as a dependency of this crate, as in instrfn's "A Rust program" route.
//!
//! The handler (asm/x86_64.s) is assembly, so nothing on its path has sleds, even when the
//! whole program (instrfn, this crate and xray-sys included) is compiled with
//! `-Zinstrument-xray`. It maps compiler-rt's function id to the function's address through a
//! table that [`install`] (or [`set_handler`]) builds once from the executable's sled map. It
//! finds the instrumented function's frame at an offset above its own stack pointer, measured
//! once on compiler-rt's trampolines ([`frame_offsets`]). Then it continues in the runtime's
//! `instrfn_xray_handler_entry` / `instrfn_xray_handler_exit`, the fast paths of natively
//! patched sleds. These make shadow entries for the frames, so that frames a panic or an
//! exception unwinds through are closed at the catch. They check the runtime's per-thread
//! guard first, so calls made by the runtime's own instrumented code are ignored. They take no
//! lock and make no system call; the runtime's slow path (a thread's first event, each chunk
//! switch) does, as in every mode.
//!
//! Limits: x86_64 only (elsewhere [`install`] returns [`Error::Unsupported`]); the executable
//! only (compiler-rt patches no shared library); trace mode (in gmon mode the handler's calls
//! are counted from an unknown caller and written nowhere).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[cfg(target_arch = "x86_64")]
use std::sync::OnceLock;
#[cfg(target_arch = "x86_64")]
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

// The runtime: the handler continues in its __cyg_profile_func_enter/_exit.
use instrfn as _;
pub use xray_sys;
use xray_sys::PatchError;

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(include_str!("../asm/x86_64.s"), options(att_syntax));

/// `instrfn_xray_table` in asm/x86_64.s: the id -> address table the handler reads.
#[cfg(target_arch = "x86_64")]
#[repr(C)]
struct Table {
    /// `len` addresses, by function id (index 0 unused; bits 63 and 62: no entry sled, no
    /// exit sled); written before `len`.
    ptr: AtomicPtr<usize>,
    /// Entries at `ptr`; 0 until the table is published.
    len: AtomicUsize,
    /// Where the instrumented function's frame is, above the handler's stack pointer, by entry
    /// type (written by `instrfn_xray_probe`; 0: not known).
    frame: [AtomicUsize; 4],
}

/// A table entry's flag: the function has no entry sled (as the runtime's own tables).
#[cfg(target_arch = "x86_64")]
const EXITS_ONLY: usize = 1 << 63;
/// A table entry's flag: the function has no exit or tail sled.
#[cfg(target_arch = "x86_64")]
const NO_EXIT: usize = 1 << 62;

#[cfg(target_arch = "x86_64")]
unsafe extern "C" {
    static instrfn_xray_table: Table;
    fn instrfn_xray_handler(id: i32, kind: xray_sys::raw::XRayEntryType);
    /// Runs compiler-rt's trampolines once with a probe handler set: the frame offsets of the
    /// table (1: all known).
    fn instrfn_xray_probe() -> i32;
}

/// Why instrfn's handler could not be installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// This architecture has no handler (x86_64 only).
    Unsupported,
    /// The executable has no XRay sleds (not built with `-Zinstrument-xray`), or compiler-rt
    /// did not initialise.
    NoSleds,
    /// compiler-rt did not patch (or unpatch).
    Patch(PatchError),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Unsupported => f.write_str("instrfn-xray has no XRay handler for this architecture"),
            Error::NoSleds => f.write_str(
                "the executable has no XRay sleds (build it with -Zinstrument-xray) or XRay did not initialise",
            ),
            Error::Patch(e) => write!(f, "XRay patching: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<PatchError> for Error {
    fn from(e: PatchError) -> Error {
        match e {
            PatchError::NotInitialized => Error::NoSleds,
            e => Error::Patch(e),
        }
    }
}

/// Sets instrfn's handler with compiler-rt and patches every sled of the executable: from
/// here on, every instrumented function's entry and exit is a trace event.
///
/// Functions already running when it is called (`main`, and the start-up code of std that is
/// instantiated in the program's crate and calls it) had no entry recorded, and their exits
/// are not recorded either (no shadow entry of their frames; [`install_before_main!`] has
/// none). Inlined into its caller, so that no frame of this crate is running while compiler-rt
/// patches.
#[inline(always)]
pub fn install() -> Result<(), Error> {
    set_handler()?;
    // SAFETY: compiler-rt patches every sled (it walks the sled map, never the function
    // index); the handler just set is instrfn's, which has no sleds.
    PatchError::from_status(unsafe { xray_sys::raw::__xray_patch() })?;
    Ok(())
}

/// Installs instrfn's handler before `main`, from a constructor: the whole run is traced, with
/// every function's entry and exit, `main`'s and std's start-up code's included. Use it once,
/// at the top level of the program's crate (not in a library):
/// ```no_run
/// instrfn_xray::install_before_main!();
/// fn main() { /* traced, main included */ }
/// ```
/// The constructor sets the handler up, then patches every sled from assembly, with no Rust
/// frame running. If it cannot, it says why in one line on stderr and the program runs
/// untraced.
#[macro_export]
macro_rules! install_before_main {
    () => {
        #[used]
        #[unsafe(link_section = ".init_array")]
        static __INSTRFN_XRAY_INSTALL: unsafe extern "C" fn() = $crate::__constructor;
    };
}

/// The constructor of [`install_before_main!`]: [`set_handler`] (Rust, before anything is
/// patched), then `__xray_patch` called from here, so that no Rust frame is running while the
/// sleds are patched.
/// ABI here: an ordinary C function (libc's start-up calls it with arguments it ignores).
#[cfg(target_arch = "x86_64")]
#[doc(hidden)]
#[unsafe(naked)]
pub unsafe extern "C" fn __constructor() {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "subq $8, %rsp",               // 16-byte aligned for the calls
        ".cfi_adjust_cfa_offset 8",
        "call {prepare}",
        "testl %eax, %eax",
        "jnz 1f",                      // said why
        "call {patch}",
        "cmpl ${success}, %eax",
        "je 1f",
        "movl %eax, %edi",
        "call {failed}",               // says why (an instrumented function: traced)
        "1:",
        "addq $8, %rsp",
        ".cfi_adjust_cfa_offset -8",
        "ret",
        ".cfi_endproc",
        prepare = sym constructor_prepare,
        patch = sym xray_sys::raw::__xray_patch,
        failed = sym constructor_failed,
        success = const xray_sys::raw::SUCCESS,
        options(att_syntax)
    )
}

/// Elsewhere there is no handler: the constructor says so.
#[cfg(not(target_arch = "x86_64"))]
#[doc(hidden)]
pub unsafe extern "C" fn __constructor() {
    constructor_prepare();
}

/// The constructor's first step: 0 when the handler is set, else 1 after one line on stderr.
extern "C" fn constructor_prepare() -> i32 {
    #[cfg(target_arch = "x86_64")]
    {
        unsafe extern "C" {
            /// The runtime's load-time constructor (src/runtime.rs): it picks trace mode
            /// before the first event can reach a fast path.
            fn instrfn_on_load();
        }
        // SAFETY: a guarded entry of the runtime that does its work once, whoever calls it
        // first; this constructor may run before the runtime's own (the program's crate comes
        // first in `.init_array`), and then the first events would find trace mode not chosen
        // yet and be dropped.
        unsafe { instrfn_on_load() };
    }
    match set_handler() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("instrfn-xray: {e}; the program runs untraced");
            1
        }
    }
}

/// `__xray_patch` failed in the constructor with `status`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
extern "C" fn constructor_failed(status: xray_sys::raw::XRayPatchingStatus) {
    if let Err(e) = PatchError::from_status(status) {
        eprintln!("instrfn-xray: XRay patching: {e}; the program runs untraced");
    }
}

/// Unpatches every sled and removes the handler. Functions running at the time keep their
/// entries without exits (an unpatched exit sled records nothing; if the handler is installed
/// again, the first event that finds such a frame gone closes it as unwound).
#[inline(always)]
pub fn uninstall() -> Result<(), Error> {
    // SAFETY: compiler-rt restores every sled's nops.
    let r = PatchError::from_status(unsafe { xray_sys::raw::__xray_unpatch() });
    // After the sleds: a thread between a sled and the handler still finds the handler valid
    // (it stays valid for good).
    xray_sys::remove_handler();
    r.map_err(Error::from)
}

/// Sets instrfn's handler with compiler-rt without patching anything, for programs that
/// patch some functions only ([`xray_sys::patch_function`]). Builds the id -> address table
/// the first time (from the executable's sled map, numbered as compiler-rt numbers functions
/// when it patches).
pub fn set_handler() -> Result<(), Error> {
    #[cfg(target_arch = "x86_64")]
    {
        publish_table()?;
        let handler: xray_sys::raw::Handler = instrfn_xray_handler;
        // SAFETY: the handler is assembly with no sleds; it reads only instrfn_xray_table,
        // whose array is never freed, and continues in the runtime's guarded entry points.
        unsafe { xray_sys::set_handler(handler) }.map_err(|_| Error::NoSleds)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Err(Error::Unsupported)
    }
}

/// Where compiler-rt's trampolines call the handler from, as found when the handler was first
/// set ([`set_handler`], [`install`]): the offset of the instrumented function's return slot
/// above the handler's stack pointer, for an entry, an exit, a tail exit and an argument-logging
/// entry (compiler-rt 14: 272, 80, 272, 272). With them the handler records exactly as natively
/// patched sleds do, frames closed on unwinding included. `None`: not set yet, or
/// compiler-rt's trampolines would not tell (then the handler records through
/// `__cyg_profile_func_enter/_exit`, and frames left by a panic or an exception stay open).
pub fn frame_offsets() -> Option<[usize; 4]> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the static of asm/x86_64.s, written once before the table is published.
        let t = unsafe { &instrfn_xray_table };
        let f = t.frame.each_ref().map(|o| o.load(Ordering::Acquire));
        (t.len.load(Ordering::Acquire) != 0 && f.iter().all(|&o| o != 0)).then_some(f)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// The address of instrfn's handler (`None` where there is none): a function that has no
/// XRay sleds whatever the program was built with.
pub fn handler_address() -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        Some(instrfn_xray_handler as *const () as usize)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Builds the table once and publishes it to the handler: ptr, then len (Release).
#[cfg(target_arch = "x86_64")]
fn publish_table() -> Result<(), Error> {
    static BUILT: OnceLock<Result<(), Error>> = OnceLock::new();
    *BUILT.get_or_init(|| {
        let map = xray_sys::sled_map().ok_or(Error::NoSleds)?;
        let functions = map.functions();
        let mut table = vec![0usize; functions.len().max(xray_sys::max_function_id()) + 1];
        for (entry, f) in table[1..].iter_mut().zip(&functions) {
            *entry = f.address
                | if f.has_entry { 0 } else { EXITS_ONLY }
                | if f.has_exit { 0 } else { NO_EXIT };
        }
        let table: &'static mut [usize] = table.leak();
        // SAFETY: assembly (no sleds) that calls compiler-rt's trampolines and handler setter
        // with a handler of its own, before any of our sleds is patched (this runs once, before
        // the first set_handler); it writes only the table's frame offsets.
        unsafe { instrfn_xray_probe() };
        // SAFETY: a static defined in asm/x86_64.s with Table's layout, written only here
        // (once) and read by the handler.
        let t = unsafe { &instrfn_xray_table };
        t.ptr.store(table.as_mut_ptr(), Ordering::Relaxed);
        t.len.store(table.len(), Ordering::Release);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn install_without_sleds_says_so() {
        // This test binary is not built with -Zinstrument-xray.
        assert_eq!(super::install(), Err(super::Error::NoSleds));
        assert!(super::handler_address().is_some());
    }
}
