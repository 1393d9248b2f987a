//! Architectures without trampolines: the crate builds (so a workspace that depends on it still
//! compiles), nothing is counted, and build.rs says so with a warning.

/// Whether this build has trampolines.
pub const SUPPORTED: bool = false;

macro_rules! guarded_entry {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?
        => $inner:path) => {
        $(#[$m])*
        $vis extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            $inner($($arg),*)
        }
    };
}

struct TlsCell(core::cell::UnsafeCell<crate::thread::Tls>);
// SAFETY: never used concurrently: without trampolines no thread records anything.
unsafe impl Sync for TlsCell {}
static DUMMY: TlsCell = TlsCell(core::cell::UnsafeCell::new(crate::thread::Tls::EMPTY));

pub fn tls() -> *mut crate::thread::Tls {
    DUMMY.0.get()
}

/// # Safety
/// Never called: no sampling without trampolines.
pub unsafe fn interrupted_pc(_uc: *const libc::c_void) -> usize {
    0
}

static ENABLED: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(1);

pub fn enabled() -> &'static core::sync::atomic::AtomicU8 {
    &ENABLED
}

pub const TRACE_SUPPORTED: bool = false;
pub const CLOCK_NAME: &str = "monotonic";

pub fn counter() -> u64 {
    crate::sys::monotonic_ns()
}

/// A second word that holds a replaced return address for a while (none here: see
/// asm/s390x.s's [`second_slot`](crate::arch::second_slot)).
pub fn second_slot(_slot: usize) -> Option<usize> {
    None
}

pub fn exit_trampoline() -> usize {
    0
}

pub fn set_mode(_mode: u8) {}

pub fn set_min_ticks(_ticks: u64) {}

/// After dlclose unloaded the code in [lo, hi): decisions cached per call site there are
/// dropped (this architecture caches none).
pub fn forget_sites(_lo: usize, _hi: usize) {}

/// Whether the exit trampoline takes back the entries of calls shorter than
/// INSTRFN_MIN_DURATION (not on this architecture yet).
pub const MIN_DURATION_SUPPORTED: bool = false;

pub fn replaceable(_ret: usize) -> bool {
    false
}

pub fn mode() -> u8 {
    0
}

/// (No trampolines, no return pad.)
pub fn set_shadow_registry(_head: usize, _bytes: usize) {}
