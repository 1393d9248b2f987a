//! Unwind information for the exit trampoline's return addresses, for unwinders that cannot be
//! wrapped (x86_64 musl: the program links its unwinder statically, LLVM's libunwind in Rust
//! programs).
//!
//! On glibc the unwinder's entry points are wrapped (src/interpose.c): the original return
//! addresses go back into the frames before it walks. A static unwinder walks them as they
//! are: from a frame whose return address was replaced it reaches the exit trampoline, looks it
//! up as address - 1, finds no FDE there (`instrfn_x86_64_return_pad`, the nop before
//! `instrfn_x86_64_exit`, lies outside every FDE of the program) and stops: a panic then fails
//! to start ("failed to initiate panic") and a backtrace ends early. So at load this module
//! maps a page of its own with a thunk — a nop, then a jump to `instrfn_x86_64_exit` — makes
//! the thunk's second byte the return address trace mode puts into frames
//! (`instrfn_x86_64_return_to`), and registers one FDE for the thunk with the program's
//! unwinder (`__register_frame`, given the FDE: LLVM's libunwind takes one FDE, libgcc a
//! sequence that starts there; the CIE it names lies before it). An address outside the
//! program's mappings sends LLVM's libunwind straight to the registered FDEs; inside them, it
//! first scans the program's whole `.eh_frame` when its index has no entry (perf: 85% of 150 µs
//! per panic through 5 traced frames, with the FDE for the nop in the program's text instead;
//! libgcc looks at registered FDEs first). Where the page cannot be mapped, or return
//! addresses were replaced before this ran (another constructor's counting call), the FDE
//! covers that nop instead. The FDE's rules describe a frame between the returning function and its caller: the caller's
//! rsp is the function's CFA (rsp now, as after its `ret`), the frame's own CFA 8 above it
//! (one of its own: see `build`), and the return address at the address a DWARF expression
//! computes — the `ret` word of the newest
//! shadow entry whose slot is rsp - 8, found by walking the thread registry (src/thread.rs:
//! blocks are never freed, and neither are their shadow stack mappings) and each block's
//! entries upwards from its base up to the first free one (slot 0; a free entry's slot is
//! always 0, and an orphaned block's entries are cleared before its next owner pushes). A slot
//! is an address in the walking thread's own stack, which no other thread's live entry holds;
//! no entry found: a zero word, a return address of 0, where every unwinder stops.
//!
//! The frames such a walk unwinds are closed at the thread's next event, as after a
//! `longjmp` (frames left behind: src/trace.rs).

use core::ptr;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::trace::layout::{SH_BYTES, SH_RET, SH_SLOT};

unsafe extern "C" {
    fn instrfn_x86_64_return_pad();
    fn instrfn_x86_64_exit();
    fn instrfn_register_frame_address() -> usize;
    static mut instrfn_x86_64_return_to: usize;
}

/// The thunk: a nop (where a return address to the next byte is looked up), then `jmp
/// *0(%rip)` and the address it jumps to.
const THUNK: [u8; 7] = [0x90, 0xff, 0x25, 0, 0, 0, 0];
const THUNK_BYTES: usize = THUNK.len() + 8;

/// Maps the thunk's page (read and execute only once written); None if it cannot be mapped.
fn map_thunk() -> Option<usize> {
    let page = crate::sys::map_zeroed(4096)?.as_ptr();
    // SAFETY: a fresh private mapping of 4096 bytes, writable until the mprotect below.
    unsafe {
        core::ptr::copy_nonoverlapping(THUNK.as_ptr(), page, THUNK.len());
        let target = (instrfn_x86_64_exit as *const () as u64).to_le_bytes();
        core::ptr::copy_nonoverlapping(target.as_ptr(), page.add(THUNK.len()), 8);
        if libc::mprotect(page.cast(), 4096, libc::PROT_READ | libc::PROT_EXEC) != 0 {
            libc::munmap(page.cast(), 4096);
            return None;
        }
    }
    Some(page as usize)
}

/// A return address of 0 (no entry found): every unwinder stops there.
static ZERO: usize = 0;

/// The CIE, the FDE and the terminator; written once, before registration, and never again.
struct Frame(core::cell::UnsafeCell<[u8; FRAME_BYTES]>);
// SAFETY: written only by `register` (once: REGISTERED), read by unwinders after that.
unsafe impl Sync for Frame {}
const FRAME_BYTES: usize = 320;
static FRAME: Frame = Frame(core::cell::UnsafeCell::new([0; FRAME_BYTES]));
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// Whether the program links an unwinder that takes registered frames (then trace mode
/// replaces return addresses by default: INSTRFN_EXITS).
pub fn available() -> bool {
    // SAFETY: an asm routine that only loads an address (asm/x86_64.s).
    unsafe { instrfn_register_frame_address() != 0 }
}

/// Registers the FDE (once; from the load-time constructor, never from a signal handler: the
/// unwinder takes its locks and may allocate). `depth`: shadow stack entries per thread.
/// `early`: no return address has been replaced yet, so the thunk can become the one
/// replaced ones hold (else frames would hold two different ones: the FDE is then the nop's).
pub fn register(depth: usize, early: bool) {
    // SAFETY: as in `available`.
    let f = unsafe { instrfn_register_frame_address() };
    if f == 0 || REGISTERED.swap(true, Ordering::Relaxed) {
        return;
    }
    let thunk = if early { map_thunk() } else { None };
    let (start, len) = match thunk {
        Some(page) => (page, THUNK_BYTES),
        None => (instrfn_x86_64_return_pad as *const () as usize, 1),
    };
    let mut out = Bytes::new();
    let fde = build(&mut out, depth, start, len);
    let Some(fde) = fde else {
        return; // (cannot happen: the buffer is sized for the expression)
    };
    // SAFETY: the only writer, once (REGISTERED), before any unwinder knows of the buffer.
    let buf = unsafe { &mut *FRAME.0.get() };
    buf[..out.len].copy_from_slice(&out.buf[..out.len]);
    // SAFETY: `f` is the unwinder's __register_frame; the FDE, its CIE before it and the
    // terminator after it stay in place for the life of the process.
    unsafe {
        let register: unsafe extern "C" fn(*const u8) = core::mem::transmute(f);
        register(buf.as_ptr().add(fde));
    }
    if let Some(page) = thunk {
        // SAFETY: the word the fast paths read (asm/x86_64.s); no return address has been
        // replaced yet (the load-time constructor runs before the program's first call).
        unsafe { core::ptr::addr_of_mut!(instrfn_x86_64_return_to).write_volatile(page + 1) };
    }
}

/// A small byte buffer with DWARF's encodings.
struct Bytes {
    buf: [u8; FRAME_BYTES],
    len: usize,
    full: bool,
}

impl Bytes {
    fn new() -> Bytes {
        Bytes {
            buf: [0; FRAME_BYTES],
            len: 0,
            full: false,
        }
    }
    fn u8(&mut self, b: u8) {
        if self.len < FRAME_BYTES {
            self.buf[self.len] = b;
            self.len += 1;
        } else {
            self.full = true;
        }
    }
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.u8(x);
        }
    }
    fn uleb(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.u8(b);
                return;
            }
            self.u8(b | 0x80);
        }
    }
    fn sleb(&mut self, mut v: i64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if (v == 0 && b & 0x40 == 0) || (v == -1 && b & 0x40 != 0) {
                self.u8(b);
                return;
            }
            self.u8(b | 0x80);
        }
    }
    fn u32_at(&mut self, at: usize, v: u32) {
        self.buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
}

// DWARF expression operations (DWARF 5, 7.7.1).
const OP_CONST8U: u8 = 0x0e;
const OP_DEREF: u8 = 0x06;
const OP_DUP: u8 = 0x12;
const OP_DROP: u8 = 0x13;
const OP_PICK: u8 = 0x15;
const OP_SWAP: u8 = 0x16;
const OP_ROT: u8 = 0x17;
const OP_EQ: u8 = 0x29;
const OP_GE: u8 = 0x2a;
const OP_PLUS_UCONST: u8 = 0x23;
const OP_BRA: u8 = 0x28;
const OP_SKIP: u8 = 0x2f;
const OP_LIT0: u8 = 0x30;
const OP_BREG7: u8 = 0x77; // rsp
// Call frame instructions.
const CFA_DEF_CFA: u8 = 0x0c;
const CFA_EXPRESSION: u8 = 0x10;
const CFA_VAL_EXPRESSION: u8 = 0x16;
const CFA_OFFSET_RIP: u8 = 0x80 | 16;
const RIP: u64 = 16;
const RSP: u64 = 7;

/// The expression, in `e`: the address of the return address (see the module documentation).
/// Stack states are written [bottom .. top].
fn expression(e: &mut Bytes, depth: usize) {
    let (head, next_at, shadow_at) = crate::thread::registry_layout();
    let mut fix = Fixups::default();
    e.u8(OP_BREG7); // [key]: rsp - 8, the slot of the frame that returned here
    e.sleb(-8);
    e.u8(OP_CONST8U); // [key b]: the newest block
    e.bytes(&(head as u64).to_le_bytes());
    e.u8(OP_DEREF);
    e.u8(OP_CONST8U); // [key b best]: nothing found yet
    e.bytes(&(ptr::addr_of!(ZERO) as u64).to_le_bytes());
    let blocks = e.len; // LOOP_B [key b best]
    e.bytes(&[OP_PICK, 1, OP_LIT0, OP_EQ]);
    fix.branch(e, OP_BRA, Label::Done); // no more blocks
    e.bytes(&[OP_PICK, 1, OP_PLUS_UCONST]); // [key b best base]
    e.uleb(shadow_at as u64);
    e.u8(OP_DEREF);
    e.bytes(&[OP_DUP, OP_LIT0, OP_EQ]);
    fix.branch(e, OP_BRA, Label::NoShadow); // no shadow stack mapped
    e.bytes(&[OP_DUP, OP_PLUS_UCONST]); // [key b best base end]
    e.uleb((depth * SH_BYTES) as u64);
    e.u8(OP_ROT); // [key b end best e]: e = base
    let entries = e.len; // LOOP_E [key b end best e]
    e.bytes(&[OP_DUP, OP_PICK, 3, OP_GE]);
    fix.branch(e, OP_BRA, Label::NextBlock); // e past the mapping
    e.bytes(&[OP_DUP, OP_PLUS_UCONST]); // [key b end best e slot]
    e.uleb(SH_SLOT as u64);
    e.bytes(&[OP_DEREF, OP_DUP, OP_LIT0, OP_EQ]);
    fix.branch(e, OP_BRA, Label::FreeEntry); // a free entry: the last live one is below
    e.bytes(&[OP_PICK, 5, OP_EQ]); // [key b end best e (slot == key)]
    fix.branch(e, OP_BRA, Label::Match);
    e.u8(OP_PLUS_UCONST); // [key b end best e']
    e.uleb(SH_BYTES as u64);
    fix.back(e, OP_SKIP, entries);
    fix.place(e, Label::Match); // [key b end best e]: best = &e.ret, on to the next entry
    e.bytes(&[OP_SWAP, OP_DROP, OP_DUP, OP_PLUS_UCONST]);
    e.uleb(SH_RET as u64);
    e.bytes(&[OP_SWAP, OP_PLUS_UCONST]); // [key b end best' e']
    e.uleb(SH_BYTES as u64);
    fix.back(e, OP_SKIP, entries);
    fix.place(e, Label::FreeEntry); // [key b end best e slot]
    e.u8(OP_DROP);
    fix.place(e, Label::NextBlock); // [key b end best e]
    e.bytes(&[OP_DROP, OP_SWAP, OP_DROP]); // [key b best]
    fix.branch(e, OP_SKIP, Label::Advance);
    fix.place(e, Label::NoShadow); // [key b best base]
    e.u8(OP_DROP);
    fix.place(e, Label::Advance); // [key b best] -> [key next best]
    e.u8(OP_SWAP);
    if next_at != 0 {
        e.u8(OP_PLUS_UCONST);
        e.uleb(next_at as u64);
    }
    e.bytes(&[OP_DEREF, OP_SWAP]);
    fix.back(e, OP_SKIP, blocks);
    fix.place(e, Label::Done); // [key b best]: the result is on top
    fix.resolve(e);
}

#[derive(Clone, Copy, PartialEq)]
enum Label {
    Done,
    NoShadow,
    NextBlock,
    FreeEntry,
    Match,
    Advance,
}

/// Forward branches waiting for their label, and the labels placed.
#[derive(Default)]
struct Fixups {
    pending: [(usize, Option<Label>); 8],
    n: usize,
    placed: [(Option<Label>, usize); 8],
    m: usize,
}

impl Fixups {
    /// A branch (bra or skip) to `to`, resolved once `to` is placed.
    fn branch(&mut self, e: &mut Bytes, op: u8, to: Label) {
        if self.n < self.pending.len() {
            self.pending[self.n] = (e.len, Some(to));
            self.n += 1;
        } else {
            e.full = true;
        }
        e.bytes(&[op, 0, 0]);
    }
    /// A branch back to `at`.
    fn back(&mut self, e: &mut Bytes, op: u8, at: usize) {
        let off = at as i64 - (e.len as i64 + 3);
        e.u8(op);
        e.bytes(&(off as i16).to_le_bytes());
    }
    fn place(&mut self, e: &mut Bytes, l: Label) {
        if self.m < self.placed.len() {
            self.placed[self.m] = (Some(l), e.len);
            self.m += 1;
        } else {
            e.full = true;
        }
    }
    fn resolve(&self, e: &mut Bytes) {
        for &(at, to) in &self.pending[..self.n] {
            let target = self.placed[..self.m]
                .iter()
                .find(|p| p.0 == to)
                .map(|p| p.1);
            match target {
                Some(t) if !e.full => {
                    let off = (t as i64 - (at as i64 + 3)) as i16;
                    e.buf[at + 1..at + 3].copy_from_slice(&off.to_le_bytes());
                }
                _ => e.full = true,
            }
        }
    }
}

/// Writes the CIE, the FDE (for `len` bytes at `start`) and the terminator into `out`; returns
/// the FDE's offset (None if they did not fit).
fn build(out: &mut Bytes, depth: usize, start: usize, len: usize) -> Option<usize> {
    // CIE: version 1, "zR" (FDE addresses absolute), code alignment 1, data alignment -8, the
    // return address in column 16 (rip); initially CFA = rsp + 8, rip at CFA - 8.
    out.bytes(&[0; 4]);
    out.bytes(&[0, 0, 0, 0, 1, b'z', b'R', 0]);
    out.uleb(1);
    out.sleb(-8);
    out.uleb(RIP);
    out.uleb(1);
    out.u8(0x00); // DW_EH_PE_absptr
    out.bytes(&[CFA_DEF_CFA, RSP as u8, 8, CFA_OFFSET_RIP, 1]);
    while !out.len.is_multiple_of(8) {
        out.u8(0); // DW_CFA_nop
    }
    out.u32_at(0, (out.len - 4) as u32);
    // FDE: the thunk (at its nop and its jump the frame is the same), or the nop before
    // instrfn_x86_64_exit.
    let fde = out.len;
    out.bytes(&[0; 4]);
    out.bytes(&((fde + 4) as u32).to_le_bytes()); // back to the CIE
    out.bytes(&(start as u64).to_le_bytes());
    out.bytes(&(len as u64).to_le_bytes());
    out.uleb(0); // no augmentation data
    // CFA = rsp + 8, and the caller's rsp = CFA - 8 = rsp (the returned function's CFA, as
    // after its ret): a CFA of its own, not the returned function's, which libgcc's unwinder
    // would take for the catching frame's identity (the next frame's CFA) and abort at.
    // (The caller's rsp as an expression, `rsp`: LLVM's libunwind does not take
    // DW_CFA_val_offset.)
    out.bytes(&[
        CFA_DEF_CFA,
        RSP as u8,
        8,
        CFA_VAL_EXPRESSION,
        RSP as u8,
        2,
        OP_BREG7,
        0,
    ]);
    let mut e = Bytes::new();
    expression(&mut e, depth);
    if e.full {
        return None;
    }
    out.u8(CFA_EXPRESSION);
    out.uleb(RIP);
    out.uleb(e.len as u64);
    out.bytes(&e.buf[..e.len]);
    while !out.len.is_multiple_of(8) {
        out.u8(0); // DW_CFA_nop
    }
    out.u32_at(fde, (out.len - fde - 4) as u32);
    out.bytes(&[0; 4]); // terminator
    (!out.full).then_some(fde)
}
