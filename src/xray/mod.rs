//! XRay sleds patched by the runtime itself, without compiler-rt (trace mode only).
//!
//! `clang -fxray-instrument` and rustc `-Zinstrument-xray` leave a sled of nops at each
//! function's entry and at each of its exits, and list them in the object's `xray_instr_map`
//! section. An unpatched sled costs next to nothing (x86_64: the entry sled is a 2-byte jump
//! over 9 bytes of nop, an exit sled is the `ret` followed by 10 bytes of nop). In trace mode
//! (INSTRFN_MODE=trace, `instrfn record`) the runtime finds those sections in every loaded
//! object and patches the sleds of the functions INSTRFN_FILTER / INSTRFN_EXCLUDE choose into
//! calls of its own trampolines (src/arch/x86_64/xray.s, src/arch/aarch64/xray.s), which record
//! entry and exit events exactly
//! as the mcount trampolines do: the same events, the same shadow stack (entries without a
//! return address to restore), the same unwinding repair (crate::trace). Every command that
//! reads a trace works unchanged.
//!
//! Discovery, per object (the executable at start-up, libraries as they are noted, see
//! [`note_objects`]): the section headers of its ELF file (the loader's path, or
//! /proc/self/exe) are read with raw open/pread; the map lies in memory at its section address
//! plus the load bias. Entries are 32 bytes: the sled's address, the function's address, the
//! kind (0 entry, 1 exit, 2 tail call, 3 entry with argument logging, treated as an entry;
//! custom and typed events and anything else are left alone), and a version: 2 means both
//! addresses are relative to their own field, 0 and 1 absolute. Function ids are compiler-rt's:
//! 1, 2, 3, … each time the function differs from the previous entry's (LLVM emits a
//! function's sleds together, so this is the order in which functions first appear). The
//! `xray_fn_idx` section is not used (LLVM 22 and compiler-rt 14 disagree on its layout).
//! Each object gets an id -> function address table and a stub page within ±2 GiB of its code
//! (a rel32 call must reach it) whose stubs load that table into %r11 and jump to the real
//! trampolines.
//!
//! Patching is safe while other threads run through the sleds: the last store of patching, and
//! the only one of unpatching, is the sled's head alone, the part that decides which form runs
//! (x86_64: its first byte; aarch64: its first instruction, one aligned 4-byte store; see
//! `arch::sled`); the rest of the patched form is written first, where the original
//! head skips it, and left in place when the head is put back (a thread preempted inside a
//! patched sled resumes in the same patched code, which reaches a trampoline). The code is
//! written through /proc/self/mem, which never makes text writable (the kernel copies a
//! one-byte write with one byte store, whatever its memcpy; docs/xray.md says what arm64's does
//! with 4 bytes); where that does not work
//! (qemu-user ignores such writes: every write is read back) the runtime falls back to
//! mprotect, adding PROT_WRITE to the segment and never taking PROT_EXEC away.
//! INSTRFN_XRAY_WRITE=mprotect forces the fallback (for the tests).
//!
//! Stopping (instrfn_stop, moncontrol(0)) puts the heads back by default; with
//! INSTRFN_XRAY_STOP=pause it leaves the sleds patched and the trampolines return at once while
//! recording is off (what the trampolines alone cost; INSTRFN_START=off then patches at load).
//!
//! Everything here is async-signal-safe (raw system calls, no allocation beyond mmap).
//!
//! The files, bottom up: `elf` (section headers, symbols), `writer` (code writes through
//! /proc/self/mem), `discover` (an object's sleds and function ids), `patch` (stub pages,
//! patching and unpatching), and this file: the registry of objects and the switches. The sled
//! encodings are the architecture's (crate::arch::sled). Uses `config` and every layer below
//! the outputs.

pub mod discover;
pub mod elf;
pub mod patch;
pub mod writer;

use discover::discover;
use patch::{patch, register_unwind_info, unpatch};
use writer::Writer;

use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use crate::arch::sled;
use crate::base::StackBuf;
use crate::sys::objects::Module;
use crate::sys::raw::syscall;

/// Most objects with sleds (or without: they are remembered so their file is read once).
pub const MAX_OBJECTS: usize = 512;

/// Longest INSTRFN_FILTER / INSTRFN_EXCLUDE.
pub const MAX_PATTERNS: usize = crate::config::MAX_PREFIX;

/// The section instrfn-xray's handler keeps its table in: an object that has it is traced
/// through compiler-rt (which patches its sleds), not patched here.
pub const CRT_ROUTE_SECTION: &[u8] = b"instrfn_xray_route";

/// Bytes of one `xray_instr_map` entry.
pub const ENTRY_BYTES: usize = 32;

/// A table entry's flag: the function has no entry sled (rustc `skip-entry`): its exits are
/// recorded without a matching entry.
pub const EXITS_ONLY: usize = 1 << 63;

/// A table entry's flag: the function has no exit or tail sled (rustc `skip-exit`, or it
/// never returns): its entries are recorded as entries without exit (nothing is pushed).
pub const NO_EXIT: usize = 1 << 62;

/// Whether this architecture's sleds are patched.
pub const SUPPORTED: bool = sled::SUPPORTED;

/// One sled of an object (an mmap'd array per object).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Sled {
    pub addr: usize,
    pub id: u32,
    pub kind: u8,
    /// Whether the filters chose its function.
    pub chosen: u8,
    /// 1 while patched; 2: not the expected bytes (left alone for good).
    pub state: u8,
    /// Its first bytes (`sled::HEAD`) before patching.
    pub orig: [u8; sled::HEAD],
}

/// A loaded object, once looked at.
#[derive(Clone, Copy)]
pub struct Object {
    /// Its lowest code address (the key; 0: a free entry).
    pub lo: usize,
    /// Its sleds (mmap'd), and how many.
    pub sleds: usize,
    pub nsleds: usize,
    pub sleds_bytes: usize,
    /// id -> function address (`| EXITS_ONLY`), index 0 unused (mmap'd).
    pub table: usize,
    /// Functions with sleds (the highest id).
    pub nfuncs: usize,
    pub table_bytes: usize,
    /// The stub page near its code (0: none yet).
    pub stubs: usize,
    /// Its executable segments [start, end) page-aligned, and their protection (for the
    /// mprotect route).
    pub segs: [(usize, usize, i32); crate::sys::objects::MAX_SEGMENTS],
    pub nsegs: usize,
}

impl Object {
    const EMPTY: Object = Object {
        lo: 0,
        sleds: 0,
        nsleds: 0,
        sleds_bytes: 0,
        table: 0,
        nfuncs: 0,
        table_bytes: 0,
        stubs: 0,
        segs: [(0, 0, 0); crate::sys::objects::MAX_SEGMENTS],
        nsegs: 0,
    };

    pub fn sleds(&self) -> &'static mut [Sled] {
        if self.sleds == 0 {
            return &mut [];
        }
        // SAFETY: the object's mmap'd sled array of nsleds entries, used under REGISTRY's lock.
        unsafe { core::slice::from_raw_parts_mut(self.sleds as *mut Sled, self.nsleds) }
    }
}

pub struct Registry {
    pub objects: [Object; MAX_OBJECTS],
}

pub static REGISTRY: spin::mutex::SpinMutex<Registry> = spin::mutex::SpinMutex::new(Registry {
    objects: [Object::EMPTY; MAX_OBJECTS],
});

/// Whether the chosen sleds should be patched now (trace mode and recording on).
pub static WANTED: AtomicBool = AtomicBool::new(false);

/// INSTRFN_XRAY_STOP=pause: stopping leaves the sleds patched.
pub static PAUSE: AtomicBool = AtomicBool::new(false);

/// Whether exit and tail sleds are patched (INSTRFN_EXITS; entries only without).
pub static EXITS: AtomicBool = AtomicBool::new(true);

/// Whether the runtime looks at sleds at all (trace mode was chosen at load).
pub static ENABLED: AtomicBool = AtomicBool::new(false);

/// How code is written: 0 /proc/self/mem (if it works), 1 mprotect.
pub static ROUTE: AtomicU8 = AtomicU8::new(0);

/// The patterns (copied at load).
pub static FILTER: spin::mutex::SpinMutex<([u8; MAX_PATTERNS], usize, [u8; MAX_PATTERNS], usize)> =
    spin::mutex::SpinMutex::new(([0; MAX_PATTERNS], 0, [0; MAX_PATTERNS], 0));

/// Sleds patched now, all objects (for the tests' and the verbose summary's sake).
pub static PATCHED: AtomicUsize = AtomicUsize::new(0);

/// Warnings said once.
pub static SAID_MISMATCH: AtomicBool = AtomicBool::new(false);

pub static SAID_REACH: AtomicBool = AtomicBool::new(false);

pub static SAID_UNSUPPORTED: AtomicBool = AtomicBool::new(false);

pub static SAID_FULL: AtomicBool = AtomicBool::new(false);

pub static SAID_IDS: AtomicBool = AtomicBool::new(false);

/// At load, in trace mode: remembers the filters and patches the sleds of every loaded object
/// (if recording starts at once, or INSTRFN_XRAY_STOP=pause; else [`recording`] does when it
/// starts).
pub fn on_load(config: &crate::config::Config) {
    {
        let mut f = FILTER.lock();
        let (inc, exc) = (config.filter(), config.exclude());
        f.0[..inc.len()].copy_from_slice(inc);
        f.1 = inc.len();
        f.2[..exc.len()].copy_from_slice(exc);
        f.3 = exc.len();
    }
    match crate::sys::getenv(c"INSTRFN_XRAY_WRITE").map(|v| v.trim_ascii()) {
        None | Some(b"" | b"auto") => {}
        Some(b"mprotect") => ROUTE.store(1, Ordering::Relaxed),
        Some(v) => message!(
            "ignoring INSTRFN_XRAY_WRITE=\"{}\": expected mprotect or auto; using auto",
            crate::base::Bytes(v)
        ),
    }
    EXITS.store(config.exits, Ordering::Relaxed);
    PAUSE.store(config.xray_pause, Ordering::Relaxed);
    ENABLED.store(true, Ordering::Relaxed);
    // Paused, the sleds are patched whether recording or not (INSTRFN_START=off included).
    WANTED.store(config.start || config.xray_pause, Ordering::Relaxed);
    note_objects();
    register_unwind_info();
}

/// Recording starts (true) or stops (false) (instrfn_start/instrfn_stop, moncontrol): every
/// chosen sled is patched, or put back; with INSTRFN_XRAY_STOP=pause they stay patched (since
/// load) and the trampolines return at once while recording is off.
pub fn recording(on: bool) {
    if !PAUSE.load(Ordering::Relaxed) {
        set_wanted(on);
    }
}

/// Whether the chosen sleds are to be patched from now on: every one is patched, or put back.
pub fn set_wanted(on: bool) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    WANTED.store(on, Ordering::Relaxed);
    let mut reg = REGISTRY.lock();
    let mut w = Writer::new();
    for o in reg.objects.iter_mut().filter(|o| o.lo != 0 && o.nsleds > 0) {
        if on {
            patch(o, &mut w);
        } else {
            unpatch(o, &mut w);
        }
    }
}

/// Trace mode records entries only after all (a hardware shadow stack, src/trace/): the
/// exit and tail sleds go back.
pub fn exits_off() {
    if !ENABLED.load(Ordering::Relaxed) || !EXITS.swap(false, Ordering::Relaxed) {
        return;
    }
    let mut reg = REGISTRY.lock();
    let mut w = Writer::new();
    for o in reg.objects.iter_mut().filter(|o| o.lo != 0 && o.nsleds > 0) {
        unpatch(o, &mut w);
        if WANTED.load(Ordering::Relaxed) {
            patch(o, &mut w);
        }
    }
}

/// Tracing could not start after all (gmon mode): the sleds go back, for good.
pub fn disable() {
    set_wanted(false);
    ENABLED.store(false, Ordering::Relaxed);
}

/// Looks at every loaded object not seen yet: finds its sleds and patches the chosen ones if
/// recording is on. At load, and wherever trace mode notes new objects (src/trace/
/// `note_modules`: exit, exec, dlclose, `instrfn_flush`). Skipped if another thread is at it
/// (or this one, interrupted: a crash handler).
pub fn note_objects() {
    note(false)
}

/// [`note_objects`], waiting for another thread that is at it: after a dlopen, whose objects
/// must be patched before it returns (src/runtime/ `module_opened`; signals blocked, so
/// nothing that holds the lock on this thread can be interrupted by it).
pub fn note_objects_waiting() {
    note(true);
    register_unwind_info();
}

pub fn note(wait: bool) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let Some(mut reg) = (if wait {
        Some(REGISTRY.lock())
    } else {
        REGISTRY.try_lock()
    }) else {
        return;
    };
    let mut w = Writer::new();
    // Which registered objects are still loaded: one another thread's dlopen was loading when
    // it was registered may have failed and been unmapped since (never unloaded through
    // dlclose, so never forgotten); another object may now be where it was.
    let mut seen = [false; MAX_OBJECTS];
    let mut look = |m: &Module| {
        let Some(lo) = m.code_start() else {
            return;
        };
        if let Some(i) = reg.objects.iter().position(|o| o.lo == lo) {
            seen[i] = true;
            return;
        }
        let Some(i) = reg.objects.iter().position(|o| o.lo == 0) else {
            if !SAID_FULL.swap(true, Ordering::Relaxed) {
                message!(
                    "more than {MAX_OBJECTS} loaded objects: the later ones' XRay sleds are not patched"
                );
            }
            return;
        };
        seen[i] = true;
        let slot = &mut reg.objects[i];
        *slot = discover(m, lo);
        if slot.nsleds > 0 && !SUPPORTED {
            if !SAID_UNSUPPORTED.swap(true, Ordering::Relaxed) {
                message!("XRay sleds are not patched on this architecture");
            }
            return;
        }
        if slot.nsleds > 0 && WANTED.load(Ordering::Relaxed) {
            patch(slot, &mut w);
        }
    };
    look(&Module::executable());
    crate::sys::objects::for_each_shared_object(|m| look(m));
    for (o, _) in reg
        .objects
        .iter_mut()
        .zip(seen)
        .filter(|(o, s)| o.lo != 0 && !s)
    {
        // Gone without dlclose: nothing of its code is touched again.
        let patched = o.sleds().iter().filter(|s| s.state == 1).count();
        PATCHED.fetch_sub(patched, Ordering::Relaxed);
        *o = Object::EMPTY;
    }
}

/// The object whose code started at `lo` is unloaded (dlclose): forgotten, so another
/// object loaded there is looked at afresh. (Its stub page and tables stay mapped: a thread
/// may still be in a stub.)
pub fn forget(lo: usize) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let mut reg = REGISTRY.lock();
    for o in reg.objects.iter_mut().filter(|o| o.lo == lo) {
        let patched = o.sleds().iter().filter(|s| s.state == 1).count();
        PATCHED.fetch_sub(patched, Ordering::Relaxed);
        *o = Object::EMPTY;
    }
}
