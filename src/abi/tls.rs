//! This thread's state as the trampolines see it: the `Tls` block (`instrfn_tls` in data.s,
//! initial-exec TLS). The assembly addresses its fields through the `{TLS_*}` operands of
//! `trampoline_asm!` (src/arch/mod.rs).

use core::ffi::c_void;
use core::ptr;

use crate::tables::arcs::ArcTable;

#[repr(C)]
pub struct Tls {
    /// The current arc table of this thread's block, or null before its first slow path.
    pub table: *mut ArcTable,
    /// Nonzero while runtime code runs on this thread (set by the assembly only).
    pub guard: usize,
    /// The `ThreadBlock` this thread has claimed (crate::thread), or null.
    pub block: *mut c_void,
    /// Trace mode: where this thread's next event goes, in its current chunk; the trampolines
    /// reserve an event with one read-modify-write instruction.
    pub trace_pos: usize,
    /// The end of the current chunk (0: none yet).
    pub trace_end: usize,
    /// The shadow stack of replaced return addresses: the next free entry, and its end.
    pub shadow_top: usize,
    pub shadow_end: usize,
    /// Its base.
    pub shadow_base: usize,
    /// Events this thread could not write (no chunk), not yet reported in the trace.
    pub trace_lost: usize,
    /// Entries whose exit is not traced: the shadow stack was full, or replacing return
    /// addresses is off (hardware shadow stacks).
    pub entry_only: usize,
    /// Nonzero after an unwinder walked this thread's stack with the original return addresses
    /// put back: 1, the next event puts the exit trampoline back into the frames that are
    /// still alive; 2, a backtrace is walking right now.
    pub unwound: usize,
    /// This thread's alternate signal stack, [lo, hi) (0, 0 if none known): frames there are
    /// not compared with frames on the thread's own stack.
    pub alt_lo: usize,
    pub alt_hi: usize,
    /// While a backtrace walks (`unwound` 2): the shadow stack top when it began; the entries
    /// below are the walked frames, left alone until it is done.
    pub walk_base: usize,
    /// This thread's own stack, [lo, hi) (0, 0 until needed): frames elsewhere (coroutine
    /// stacks) are never compared with frames on it.
    pub stack_lo: usize,
    pub stack_hi: usize,
    /// Calls trace mode left out at record time (INSTRFN_MIN_DURATION), not yet reported.
    pub dropped: usize,
    /// Compact events: the current chunk's time base and code base, copies of its header's. A
    /// short event stores its time and its function relative to them. The trampolines read
    /// them before they reserve the event (a handler that gives the thread a new chunk
    /// meanwhile moves `trace_pos`, and the reservation is tried again).
    pub trace_tbase: u64,
    pub trace_cbase: usize,
    /// The end of the chunk an exit trampoline is making a call word in (0: none; 1 with
    /// INSTRFN_CALL_WORDS=off). While it is set, a signal handler that interrupted it and
    /// fills chunks does not retire that chunk, so the word's store never lands in a chunk
    /// already committed and reused.
    pub trace_pin: usize,
}

impl Tls {
    #[allow(dead_code)] // used by architectures without trampolines
    pub const EMPTY: Tls = Tls {
        table: ptr::null_mut(),
        guard: 0,
        block: ptr::null_mut(),
        trace_pos: 0,
        trace_end: 0,
        shadow_top: 0,
        shadow_end: 0,
        shadow_base: 0,
        trace_lost: 0,
        entry_only: 0,
        unwound: 0,
        alt_lo: 0,
        alt_hi: 0,
        walk_base: 0,
        stack_lo: 0,
        stack_hi: 0,
        dropped: 0,
        trace_tbase: 0,
        trace_cbase: 0,
        trace_pin: 0,
    };
}

/// Bytes of the Tls block (data.s reserves as many).
pub const TLS_BYTES: usize = 160;
const _: () = assert!(core::mem::size_of::<Tls>() == TLS_BYTES);

#[cfg(instrfn_arch)]
unsafe extern "C" {
    fn instrfn_tls_get() -> *mut Tls;
}

/// This thread's Tls block.
#[cfg(instrfn_arch)]
#[inline]
pub fn tls() -> *mut Tls {
    // SAFETY: instrfn_tls_get (src/arch/<arch>/guarded.s) only reads the thread pointer and a
    // link-time constant.
    unsafe { instrfn_tls_get() }
}

/// Without trampolines nothing records: one block for every thread, never used concurrently.
#[cfg(not(instrfn_arch))]
pub fn tls() -> *mut Tls {
    struct TlsCell(core::cell::UnsafeCell<Tls>);
    // SAFETY: never used concurrently: without trampolines no thread records anything.
    unsafe impl Sync for TlsCell {}
    static DUMMY: TlsCell = TlsCell(core::cell::UnsafeCell::new(Tls::EMPTY));
    DUMMY.0.get()
}
