//! Architectures without trampolines: the crate builds (so a workspace that depends on it still
//! compiles), nothing is counted, and build.rs says so with a warning.

macro_rules! guarded_entry {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?
        => $inner:path) => {
        $(#[$m])*
        $vis extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            $inner($($arg),*)
        }
    };
}

/// # Safety
/// Never called: no sampling without trampolines.
pub unsafe fn interrupted_pc(_uc: *const libc::c_void) -> usize {
    0
}

pub const TRACE_SUPPORTED: bool = false;
pub const CLOCK_NAME: &str = "monotonic";

pub fn counter() -> u64 {
    crate::sys::monotonic_ns()
}

/// A second word that holds a replaced return address for a while (none here).
pub fn second_slot(_slot: usize) -> Option<usize> {
    None
}

pub fn exit_trampoline() -> usize {
    0
}

/// After dlclose unloaded the code in [lo, hi): decisions cached per call site there are
/// dropped (this architecture caches none).
pub fn forget_sites(_lo: usize, _hi: usize) {}

/// Whether the exit trampoline takes back the entries of calls shorter than
/// INSTRFN_MIN_DURATION (not on this architecture).
pub const MIN_DURATION_SUPPORTED: bool = false;

pub fn replaceable(_ret: usize) -> bool {
    false
}
