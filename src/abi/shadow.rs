//! The shadow stack entry trace mode pushes for each call whose exit it will record: its
//! layout, shared with the assembly (the `{SH_*}` operands).

/// The original return address (0 for an XRay frame: nothing was replaced).
pub const SH_RET: usize = 0;
/// The address of the return slot it was taken from (0 while the entry is being pushed).
pub const SH_SLOT: usize = 8;
/// The function.
pub const SH_FN: usize = 16;
/// A spare word: aarch64 keeps the frame pointer there; s390x's fast path makes its event's
/// word there while the entry is being pushed.
pub const SH_SPARE: usize = 24;
pub const SH_BYTES: usize = 32;

/// One shadow stack entry.
#[repr(C)]
pub struct Shadow {
    pub ret: usize,
    pub slot: *mut usize,
    pub func: usize,
    pub spare: usize,
}

const _: () = assert!(core::mem::size_of::<Shadow>() == SH_BYTES);
const _: () = assert!(core::mem::offset_of!(Shadow, ret) == SH_RET);
const _: () = assert!(core::mem::offset_of!(Shadow, slot) == SH_SLOT);
const _: () = assert!(core::mem::offset_of!(Shadow, func) == SH_FN);
const _: () = assert!(core::mem::offset_of!(Shadow, spare) == SH_SPARE);
// The aarch64, riscv64 and s390x return pads write SH_RET into their CFI as a one-byte
// SLEB128.
const _: () = assert!(SH_RET < 64);
