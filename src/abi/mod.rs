//! What the assembly and the Rust code share: the per-thread `Tls` block, the shadow stack
//! entry, the switches every fast path reads (recording on, the mode, the shortest call
//! traced, where the return pads find the shadow stacks), and the trace format's numbers
//! (the `instrfn-format` crate, shared with the reader). Uses `base`, `sys` and `tables`
//! (the arc table the Tls points to, the hash data.s holds).

pub mod shadow;
pub mod tls;

pub use instrfn_format as format;
pub use tls::{TLS_BYTES, Tls, tls};

use core::sync::atomic::{AtomicU8, Ordering};

/// What the fast paths do with a call (`instrfn_mode` in data.s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Count call arcs (gmon.out).
    Gmon = 0,
    /// Trace entries and exits.
    Trace = 1,
    /// Trace entries only: return addresses are not replaced (INSTRFN_EXITS=off, or a
    /// hardware shadow stack).
    TraceEntries = 2,
    /// As `Trace`, with code that calls gcc's `__return__` loaded (x86_64): `__fentry__` of
    /// that code replaces no return address (crate::trace::returns).
    TraceReturn = 3,
}

impl Mode {
    pub fn traces(self) -> bool {
        self != Mode::Gmon
    }
}

#[cfg(instrfn_arch)]
mod data {
    use core::sync::atomic::{AtomicU8, AtomicU64};

    core::arch::global_asm!(
        include_str!("data.s"),
        HASH_MUL = const crate::tables::arcs::HASH_MUL,
        TLS_BYTES = const super::TLS_BYTES,
    );

    unsafe extern "C" {
        /// Read by every fast path.
        pub static instrfn_enabled: AtomicU8;
        /// A `Mode`: read by every fast path.
        pub static instrfn_mode: AtomicU8;
        /// INSTRFN_MIN_DURATION in counter ticks (0: off).
        pub static instrfn_min_ticks: AtomicU64;
        /// What the return pads' unwind info reads.
        pub static mut instrfn_registry: [usize; 3];
    }

    pub fn enabled() -> &'static AtomicU8 {
        // SAFETY: a static of data.s, one byte, only accessed atomically.
        unsafe { &*core::ptr::addr_of!(instrfn_enabled) }
    }

    pub fn mode() -> &'static AtomicU8 {
        // SAFETY: as above.
        unsafe { &*core::ptr::addr_of!(instrfn_mode) }
    }

    pub fn min_ticks() -> &'static AtomicU64 {
        // SAFETY: a static of data.s, 8 bytes, only accessed atomically.
        unsafe { &*core::ptr::addr_of!(instrfn_min_ticks) }
    }

    pub fn set_registry(head: usize, bytes: usize) {
        // SAFETY: plain words of data.s, read by unwinders only; the size is written before
        // the head, which makes a walk find blocks.
        unsafe {
            let r = core::ptr::addr_of_mut!(instrfn_registry).cast::<usize>();
            r.add(1).write_volatile(bytes);
            r.write_volatile(head);
        }
    }
}

/// Without trampolines: the same switches as plain statics, read by nobody.
#[cfg(not(instrfn_arch))]
mod data {
    use core::sync::atomic::{AtomicU8, AtomicU64};

    static ENABLED: AtomicU8 = AtomicU8::new(1);
    static MODE: AtomicU8 = AtomicU8::new(0);
    static MIN_TICKS: AtomicU64 = AtomicU64::new(0);

    pub fn enabled() -> &'static AtomicU8 {
        &ENABLED
    }

    pub fn mode() -> &'static AtomicU8 {
        &MODE
    }

    pub fn min_ticks() -> &'static AtomicU64 {
        &MIN_TICKS
    }

    pub fn set_registry(_head: usize, _bytes: usize) {}
}

/// The global recording switch the trampolines test (instrfn::start/stop, moncontrol).
#[inline]
pub fn enabled() -> &'static AtomicU8 {
    data::enabled()
}

/// Whether counting calls are recorded now.
pub fn recording() -> bool {
    enabled().load(Ordering::Relaxed) != 0
}

/// Turns recording on or off.
pub fn set_recording(on: bool) {
    enabled().store(on as u8, Ordering::Relaxed);
}

/// The mode the fast paths take.
pub fn mode() -> Mode {
    match data::mode().load(Ordering::Relaxed) {
        1 => Mode::Trace,
        2 => Mode::TraceEntries,
        3 => Mode::TraceReturn,
        _ => Mode::Gmon,
    }
}

/// Sets the mode the fast paths take (start-up, before recording). Without trampolines the
/// mode stays gmon.
pub fn set_mode(mode: Mode) {
    if cfg!(instrfn_arch) {
        data::mode().store(mode as u8, Ordering::Relaxed);
    }
}

/// Sets the shortest call trace mode records, in counter ticks (start-up).
pub fn set_min_ticks(ticks: u64) {
    data::min_ticks().store(ticks, Ordering::Relaxed);
}

/// Tells the return pads' unwind info where the shadow stacks are: the registry head's
/// address and the bytes of one shadow stack mapping (trace mode's start, before any return
/// address is replaced).
pub fn set_shadow_registry(head: usize, bytes: usize) {
    data::set_registry(head, bytes);
}
