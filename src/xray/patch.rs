//! Patching an object's sleds: its stub page within reach of its code (with unwind info for
//! the stubs), then each chosen sled's patched form written around its head, the head last;
//! unpatching writes the heads back.

use super::writer::{Writer, code_at};
use super::*;
use crate::arch::{KIND_ENTRY, KIND_EXIT, KIND_TAIL, UNWIND_BYTES};
use crate::sys::mem::unmap_addr as unmap;

pub const UNWIND_AT: usize = 128;

const _: () = assert!(3 * sled::STUB_BYTES <= UNWIND_AT && UNWIND_AT + UNWIND_BYTES <= 4096);

/// Stub pages' unwind info not given to the unwinder yet (0: free).
pub static UNWIND_PENDING: [AtomicUsize; MAX_OBJECTS] =
    [const { AtomicUsize::new(0) }; MAX_OBJECTS];

/// Gives the unwinder (libgcc's `__register_frame`) the unwind info of the stub pages made
/// since the last call. Only where `dlopen` is safe to call: at load and after a dlopen the
/// wrapper made — never from the paths a signal handler can take (a page made elsewhere, for
/// an object first seen at exit, dlclose or instrfn_start, waits for the next of these). Where libgcc_s is not loaded yet it is loaded
/// (glibc's backtrace() loads it too, at its first call); a static program without a dynamic
/// loader, or an unwinder without `__register_frame`, gets none: a walk from inside a stub
/// stops there.
pub fn register_unwind_info() {
    let mut register: Option<unsafe extern "C" fn(*const u8)> = None;
    for p in &UNWIND_PENDING {
        if p.load(Ordering::Relaxed) == 0 {
            continue;
        }
        if register.is_none() {
            register = register_frame_fn();
            if register.is_none() {
                return;
            }
        }
        let at = p.swap(0, Ordering::Relaxed);
        if let (Some(f), true) = (register, at != 0) {
            // SAFETY: `at` is a complete .eh_frame list (CIE, FDE, terminator) in a stub page
            // that stays mapped for the life of the process, as __register_frame requires.
            unsafe { f(at as *const u8) };
        }
    }
}

/// libgcc's `__register_frame`, from the loaded libgcc_s or one loaded now (None if there is
/// none). Looked up once.
pub fn register_frame_fn() -> Option<unsafe extern "C" fn(*const u8)> {
    static FOUND: AtomicUsize = AtomicUsize::new(0); // 1: looked, none
    let mut f = FOUND.load(Ordering::Relaxed);
    if f == 0 {
        // SAFETY: dlsym/dlopen with NUL-terminated names, where the caller says it is safe;
        // the loader's own dlopen (RTLD_NEXT), not this library's wrapper.
        f = unsafe {
            let mut sym = libc::dlsym(libc::RTLD_DEFAULT, c"__register_frame".as_ptr());
            if sym.is_null() {
                let open = libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr());
                if !open.is_null() {
                    let open: unsafe extern "C" fn(
                        *const libc::c_char,
                        libc::c_int,
                    ) -> *mut libc::c_void = core::mem::transmute(open);
                    let h = open(c"libgcc_s.so.1".as_ptr(), libc::RTLD_NOW);
                    if !h.is_null() {
                        sym = libc::dlsym(h, c"__register_frame".as_ptr());
                    }
                }
            }
            // A lookup that failed left its message for dlerror(): taken, so that the program's
            // next dlerror() says what it would have said without us (nothing: this runs at
            // load and after a dlopen of the program's that succeeded).
            libc::dlerror();
            if sym.is_null() { 1 } else { sym as usize }
        };
        FOUND.store(f, Ordering::Relaxed);
    }
    // SAFETY: a function of this signature (libgcc's unwind-dw2-fde.c).
    (f > 1).then(|| unsafe { core::mem::transmute::<usize, unsafe extern "C" fn(*const u8)>(f) })
}

/// The stub page of an object, mapped near its code on first use: within reach of every
/// address in [lo, hi).
pub fn stub_page(o: &mut Object) -> usize {
    if o.stubs != 0 {
        return o.stubs;
    }
    let lo = o.segs[..o.nsegs].iter().map(|s| s.0).min().unwrap_or(o.lo);
    let hi = o.segs[..o.nsegs].iter().map(|s| s.1).max().unwrap_or(o.lo);
    let reach = |p: usize| {
        hi.saturating_sub(p) < sled::REACH.saturating_sub(4096)
            && (p + 4096).saturating_sub(lo) < sled::REACH.saturating_sub(4096)
    };
    const MAP_FIXED_NOREPLACE: i32 = 0x100000;
    let step = 1 << 16;
    let mut page = 0;
    'search: for dir in [0, 1] {
        for k in 1..4096usize {
            let hint = if dir == 0 {
                (lo & !(step - 1)).checked_sub(k * step)
            } else {
                (hi.next_multiple_of(step)).checked_add((k - 1) * step)
            };
            let Some(hint) = hint else { break };
            if hint == 0 || !reach(hint) {
                break;
            }
            // SAFETY: an anonymous mapping at a free address (NOREPLACE: never over another).
            let p = unsafe {
                crate::sys::raw::mmap(
                    hint,
                    4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p < 0 {
                continue;
            }
            let p = p as usize;
            if p == hint || reach(p) {
                page = p;
                break 'search;
            }
            unmap(p, 4096); // an old kernel took the flag for a hint and went elsewhere
        }
    }
    if page == 0 {
        return 0;
    }
    for (i, t) in sled::trampolines().into_iter().enumerate() {
        let s = sled::stub(o.table, t);
        // SAFETY: inside the fresh page (3 stubs of STUB_BYTES).
        unsafe {
            core::ptr::copy_nonoverlapping(
                s.as_ptr(),
                (page + i * sled::STUB_BYTES) as *mut u8,
                s.len(),
            )
        };
    }
    let unwind = sled::unwind_info(page, 3 * sled::STUB_BYTES);
    if unwind.iter().any(|&b| b != 0) {
        // SAFETY: inside the fresh page, after the stubs.
        unsafe {
            core::ptr::copy_nonoverlapping(
                unwind.as_ptr(),
                (page + UNWIND_AT) as *mut u8,
                UNWIND_BYTES,
            )
        };
        if let Some(free) = UNWIND_PENDING
            .iter()
            .find(|p| p.load(Ordering::Relaxed) == 0)
        {
            free.store(page + UNWIND_AT, Ordering::Relaxed);
        }
    }
    sled::flush(page, 4096);
    // SAFETY: our own page.
    unsafe {
        syscall(
            libc::SYS_mprotect,
            [
                page,
                4096,
                (libc::PROT_READ | libc::PROT_EXEC) as usize,
                0,
                0,
                0,
            ],
        )
    };
    o.stubs = page;
    page
}

/// The stub a sled of `kind` calls.
pub fn stub_of(page: usize, kind: u8) -> usize {
    page + sled::STUB_BYTES
        * match kind {
            KIND_EXIT => 1,
            KIND_TAIL => 2,
            _ => 0,
        }
}

/// Patches the chosen sleds of `o` that are not patched yet.
pub fn patch(o: &mut Object, w: &mut Writer) {
    if o.nfuncs > sled::MAX_ID as usize {
        if !SAID_IDS.swap(true, Ordering::Relaxed) {
            message!(
                "an object has {} functions with XRay sleds, more than the {} a patched sled can name: its sleds are not patched",
                o.nfuncs,
                sled::MAX_ID
            );
        }
        return;
    }
    let page = stub_page(o);
    if page == 0 {
        if !SAID_REACH.swap(true, Ordering::Relaxed) {
            message!(
                "no free memory within reach of an object's code: its XRay sleds are not patched"
            );
        }
        return;
    }
    let exits = EXITS.load(Ordering::Relaxed);
    w.begin(o);
    for s in o.sleds().iter_mut() {
        if s.chosen == 0 || s.state != 0 || (!exits && s.kind != KIND_ENTRY) {
            continue;
        }
        let code = code_at(s.addr);
        if !sled::original(s.kind, &code) {
            s.state = 2;
            if !SAID_MISMATCH.swap(true, Ordering::Relaxed) {
                message!(
                    "an XRay sled at {:#x} does not hold the expected code ({:02x} {:02x} ...): left alone",
                    s.addr,
                    code[0],
                    code[1]
                );
            }
            continue;
        }
        let Some(new) = sled::patched(s.kind, s.id, s.addr, stub_of(page, s.kind)) else {
            s.state = 2;
            if !SAID_REACH.swap(true, Ordering::Relaxed) {
                message!(
                    "an XRay sled at {:#x} cannot reach its trampoline: left alone",
                    s.addr
                );
            }
            continue;
        };
        s.orig.copy_from_slice(&code[..sled::HEAD]);
        // The rest first (never executed while the head is the original instruction), unless
        // it is there already (patched before, and put back since); then the head, alone.
        let from = sled::rest(s.kind);
        let rest_ok = code[from..] == new[from..] || w.write(o, s.addr + from, &new[from..]);
        let mut head = [0u8; sled::HEAD];
        head.copy_from_slice(&new[..sled::HEAD]);
        if rest_ok && w.write_head(o, s.addr, head) {
            s.state = 1;
            PATCHED.fetch_add(1, Ordering::Relaxed);
        }
    }
    w.end(o);
}

/// Puts the head (x86_64: the first byte; aarch64: the first instruction) of every patched
/// sled of `o` back, with one store each: the rest stays, skipped again.
pub fn unpatch(o: &mut Object, w: &mut Writer) {
    w.begin(o);
    for s in o.sleds().iter_mut().filter(|s| s.state == 1) {
        if w.write_head(o, s.addr, s.orig) {
            s.state = 0;
            PATCHED.fetch_sub(1, Ordering::Relaxed);
        }
    }
    w.end(o);
}
