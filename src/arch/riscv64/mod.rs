//! riscv64 (LP64D psABI): `call _mcount` after the prologue, so self_pc = ra; from_pc is in a0
//! (gcc's `mv a0, ra`, rustc) or only at -8(s0) (clang 14, which leaves an argument in a0).
//! Which one is decided once per call site by [`instrfn_riscv64_slow_path`] and kept in the
//! thread's arc table as a marker the fast path looks up. There is no `__fentry__` on riscv64.
//! The routines, their register contracts and the decision rule are in `asm/riscv64.s`.
//! `__cyg_profile_func_enter/exit` (-finstrument-functions) pass (this_fn, call_site) in a0/a1.
//!
//! Trace mode replaces a function's return address only where the instructions from its entry
//! to its counting call prove where it saved ra (at CFA - 8): [`prologue`], decided once per
//! call site ([`instrfn_riscv64_trace_path`]); elsewhere it records entries without exit.
//!
//! The naked stubs reach the assembly with a `jal` (`j`, +-1 MiB): the mcount stubs have no
//! register to spare for a longer jump (a0, s0 and ra carry the arguments and everything else
//! is preserved), and they are emitted in the same codegen unit, so the same object file, as
//! the assembly. The `guarded_entry!` stubs live in other modules and use an `auipc`/`jalr`
//! pair through t2, which reaches anywhere.

use core::mem::{offset_of, size_of};
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::arcs;
use crate::thread::Tls;

/// The FRAME marker of a site is the key `(self_pc + MARK_FRAME, self_pc)`: "from_pc is at
/// -8(s0)".
pub const MARK_FRAME: usize = 1;
/// The A0 marker of a site is the key `(self_pc + MARK_A0, self_pc)`: "from_pc is a0".
/// Both offsets are odd, so a marker's from_pc is never a pc (code is 2-byte aligned), and no
/// plausible argument either: clang's a0 is probed as a from_pc first, and a marker it found
/// would be counted as an arc (small constants such as 1 or 2 would be, all the time).
pub const MARK_A0: usize = 3;

/// This thread's stack as the slow path last found it (`instrfn_riscv64_stack`, TLS): the
/// mapping `[lo, hi)` that held sp, or zeros. The fast path loads -8(s0) only when sp and s0
/// lie in it.
#[repr(C)]
pub struct StackBounds {
    lo: usize,
    hi: usize,
}

trampoline_asm!(
    "base.s" + "events.s" + "counting.s" + "exit.s" + "guarded.s";
    MARK_FRAME = const MARK_FRAME,
    MARK_A0 = const MARK_A0,
    STK_LO = const offset_of!(StackBounds, lo),
    STK_HI = const offset_of!(StackBounds, hi),
    STK_SIZE = const size_of::<StackBounds>(),
    DEC_BITS = const DECIDED_BITS,
    SITE_BITS = const SITE_BITS,
    RULE_A0 = const RULE_A0,
    RULE_FRAME = const RULE_FRAME,
    RULE_NONE = const RULE_NONE,
    // (Call words: MERGE_CALL subtracts the offset as such.)
    EV_CALL_FN_OFFSET = const crate::trace::layout::EV_CALL_FN_OFFSET,
);

/// log2 of the words of `instrfn_riscv64_decided` (64 KiB of .bss, touched as used): up to
/// 4096 sites are remembered.
const DECIDED_BITS: u32 = 13;

unsafe extern "C" {
    fn instrfn_riscv64_stack_get() -> *mut StackBounds;
    /// The decisions made so far, by any thread (see [`remembered`]).
    static instrfn_riscv64_decided: [AtomicUsize; 1 << DECIDED_BITS];
}

/// `naked_asm!` as the assembly is written (default options).
macro_rules! naked {
    ($($t:tt)*) => { core::arch::naked_asm!($($t)*) };
}

entry_point! {
    /// `mcount`: the name older rustc `-Zinstrument-mcount` emitted; same entry as `_mcount`.
    /// ABI here: ra = self_pc, from_pc in a0 or at -8(s0), every register preserved (see
    /// asm/riscv64.s).
    mcount => "j instrfn_riscv64_mcount"
}
entry_point! {
    /// `_mcount`: called by `gcc -pg` code (`mv a0, ra; call _mcount`), clang `-pg` code (a
    /// bare `call _mcount`, the caller in the frame record) and rustc; glibc's only name on
    /// riscv64. ABI here: ra = self_pc, from_pc in a0 or at -8(s0), every register preserved.
    _mcount => "j instrfn_riscv64_mcount"
}
entry_point! {
    /// `__cyg_profile_func_enter(this_fn, call_site)`: called by `-finstrument-functions` code
    /// (gcc, clang) at every function's entry, as an ordinary call. ABI here: every register
    /// preserved (more than the ordinary call it is allows).
    __cyg_profile_func_enter => "j instrfn_riscv64_cyg_enter"
}
entry_point! {
    /// `__cyg_profile_func_exit(this_fn, call_site)`: before every return of such code.
    __cyg_profile_func_exit => "j instrfn_riscv64_cyg_exit"
}

/// The body of a naked function that continues at `$f` with every register but t1 (the
/// `tail` pseudo-instruction's scratch, caller-saved) as it came.
#[allow(unused_macros)] // only glibc targets have wrappers (src/interpose.rs)
macro_rules! tail_call {
    ($f:path) => {
        naked!(".cfi_startproc", "tail {f}", ".cfi_endproc", f = sym $f)
    };
}

/// The body of a naked function that asks `$route(a0, a1, a2, return address)` where to go (an
/// ordinary call), then continues at the function it returns with every argument register, the
/// stack and ra as the caller left them: the function it jumps to sees the original caller
/// (the dlopen wrappers, src/interpose.c). t1 carries the target.
#[allow(unused_macros)] // only glibc targets have wrappers (src/interpose.rs)
macro_rules! routed_jump {
    ($route:path) => {
        naked!(
            ".cfi_startproc",
            "addi sp, sp, -32",
            ".cfi_def_cfa_offset 32",
            "sd ra, 24(sp)",
            ".cfi_offset ra, -8",
            "sd a0, 0(sp)",
            "sd a1, 8(sp)",
            "sd a2, 16(sp)",
            "mv a3, ra",
            "call {route}",
            "mv t1, a0",
            "ld a0, 0(sp)",
            "ld a1, 8(sp)",
            "ld a2, 16(sp)",
            "ld ra, 24(sp)",
            ".cfi_restore ra",
            "addi sp, sp, 32",
            ".cfi_def_cfa_offset 0",
            "jr t1",
            ".cfi_endproc",
            route = sym $route
        )
    };
}

/// The body of a `guarded_entry!`: t0 = `$inner`, then `instrfn_riscv64_guarded` through an
/// `auipc`/`jalr` pair (t2 is its scratch register), which reaches anywhere.
macro_rules! guarded_jump {
    ($inner:path) => {
        naked!(
            ".cfi_startproc",
            "lla t0, {inner}",
            "2: auipc t2, %pcrel_hi(instrfn_riscv64_guarded)",
            "jalr zero, %pcrel_lo(2b)(t2)",
            ".cfi_endproc",
            inner = sym $inner
        )
    };
}

/// Offset of the interrupted pc in the ucontext a signal handler gets.
/// Kernel layout (arch/riscv/include/uapi/asm/ucontext.h, sigcontext.h, ptrace.h):
/// uc_flags (8), uc_link (8), uc_stack (24: ss_sp, ss_flags + padding, ss_size), then
/// uc_sigmask (8) and __unused[1024 / 8 - 8] = 128 bytes in all, ending at 168; then
/// struct sigcontext, 16-byte aligned because its FP union holds the 16-byte aligned
/// __riscv_q_ext_state, so it starts at 176; its first member, user_regs_struct, starts with
/// pc. glibc's ucontext_t (128-byte sigset_t, no reserved bytes left, mcontext_t 16-aligned)
/// and musl's share this prefix, and so does qemu-user's frame.
pub const UC_PC_OFFSET: usize = 176;

/// Where a call site passes its caller's pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Caller {
    /// In a0 (gcc, rustc).
    A0,
    /// At -8(s0), in the frame record (clang).
    Frame,
}

impl Caller {
    fn marker(self) -> usize {
        match self {
            Caller::A0 => MARK_A0,
            Caller::Frame => MARK_FRAME,
        }
    }
}

/// A counting call as the slow path sees it: the instrumented code's a0, ra, s0 and sp.
#[derive(Clone, Copy, Debug)]
struct Site {
    a0: usize,
    self_pc: usize,
    s0: usize,
    sp: usize,
}

/// The slow path of the riscv64 trampolines: finds from_pc (from the site's marker, the
/// decision some thread made, or a decision of its own), records the call with
/// [`instrfn_slow_path`](crate::runtime::instrfn_slow_path), then marks the site in the
/// thread's table (once the table exists, and unless it is full: then the next call comes
/// here again). Everything here is async-signal-safe: no allocation, no lock, raw system
/// calls only.
///
/// # Safety
/// Only `instrfn_riscv64_slow` calls this, with the guard held and all signals blocked: `tls`
/// is this thread's TLS block, `a0`, `self_pc` (ra), `s0` and `sp` the instrumented code's at
/// its counting call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_riscv64_slow_path(
    tls: *mut Tls,
    a0: usize,
    self_pc: usize,
    s0: usize,
    sp: usize,
) {
    let site = Site {
        a0,
        self_pc,
        s0,
        sp,
    };
    // SAFETY: per the contract tls is this thread's block; its table is null or the current
    // table of this thread's block, which only this thread writes.
    let marked = unsafe { (*tls).table.as_ref() }.and_then(|t| marked(t, self_pc));
    let (from_pc, caller) = match marked.or_else(|| remembered(self_pc)) {
        Some(caller) => (from_pc_of(caller, &site), Some(caller)),
        None => {
            let (from_pc, caller) = decide(&site);
            if let Some(caller) = caller {
                remember(self_pc, caller);
            }
            (from_pc, caller)
        }
    };
    // SAFETY: the contract of instrfn_slow_path is this function's own.
    unsafe { crate::runtime::instrfn_slow_path(tls, from_pc, self_pc) };
    if let (None, Some(caller)) = (marked, caller) {
        // SAFETY: as above; the slow path may have given the thread its first table or a
        // larger one.
        if let Some(table) = unsafe { (*tls).table.as_ref() } {
            arcs::put_marker(table, self_pc.wrapping_add(caller.marker()), self_pc);
        }
    }
}

/// The marker of `self_pc` in `table`, if any.
fn marked(table: &arcs::ArcTable, self_pc: usize) -> Option<Caller> {
    [Caller::Frame, Caller::A0]
        .into_iter()
        .find(|c| arcs::has_key(table, self_pc.wrapping_add(c.marker()), self_pc))
}

/// from_pc of a call at a site already decided: a0, or -8(s0) when s0 lies in this thread's
/// stack (else a0: the marker cannot be right for this call).
fn from_pc_of(caller: Caller, site: &Site) -> usize {
    if caller == Caller::A0 {
        return site.a0;
    }
    if let Some(f) = frame_slot(site, stack_bounds()) {
        return f;
    }
    match read_maps([site.sp]) {
        Some([Some(stack)]) => {
            remember_stack(&stack);
            frame_slot(site, stack.readable()).unwrap_or(site.a0)
        }
        _ => site.a0,
    }
}

/// The rule of asm/riscv64.s: (from_pc of this call, the site's caller), or (a0, None) when
/// it cannot be decided now (/proc/self/maps unreadable: out of descriptors, say), so that
/// the site is not marked and the next call decides again.
fn decide(site: &Site) -> (usize, Option<Caller>) {
    let undecided = (site.a0, None);
    let a0 = (site.a0, Some(Caller::A0));
    let cached = stack_bounds();
    let (f, a0_map, f_map) = if cached.0 <= site.sp && site.sp < cached.1 {
        // This thread's stack is known: rules 1 and 2 need no /proc/self/maps (most of gcc's
        // sites end here), and one read answers for both candidates.
        let Some(f) = frame_slot(site, cached).filter(|&f| f != site.a0) else {
            return a0;
        };
        let Some([a0_map, f_map]) = read_maps([site.a0, f]) else {
            return undecided;
        };
        (f, a0_map, f_map)
    } else {
        let Some([Some(stack), a0_map]) = read_maps([site.sp, site.a0]) else {
            return undecided;
        };
        remember_stack(&stack);
        let Some(f) = frame_slot(site, stack.readable()).filter(|&f| f != site.a0) else {
            return a0;
        };
        let Some([f_map]) = read_maps([f]) else {
            return undecided;
        };
        (f, a0_map, f_map)
    };
    let from_a0 = return_score(site.a0, a0_map, site.self_pc);
    let from_frame = return_score(f, f_map, site.self_pc);
    if from_frame > from_a0 {
        (f, Some(Caller::Frame))
    } else {
        a0
    }
}

/// -8(s0), if s0 is a frame address in the stack `[lo, hi)` that holds sp: 16-byte aligned,
/// above sp, at most hi. Never faults for any s0.
fn frame_slot(site: &Site, (lo, hi): (usize, usize)) -> Option<usize> {
    let Site { s0, sp, .. } = *site;
    if !(s0.is_multiple_of(16) && lo <= sp && sp < s0 && s0 <= hi && lo <= s0 - 8) {
        return None;
    }
    // SAFETY: [s0 - 8, s0) lies in [lo, hi), a mapping that holds this thread's sp (checked
    // by /proc/self/maps now, or when the bounds were cached): mapped and readable.
    Some(unsafe { ((s0 - 8) as *const usize).read() })
}

/// The most bytes from a direct call's target to self_pc for the call to count as one of the
/// function that makes the counting call: they span its prologue, which is far shorter.
const NEAR: usize = 512;

/// How surely `pc` is the return address of a call of the function whose counting call
/// returns to `self_pc`; `map` is the mapping that holds pc. 0: none (not in readable,
/// executable memory, or not after a call that links ra). 1: after `jal ra`, `jalr ra, ..(..)`
/// or `c.jalr`, or the signal return trampoline (`li a7, 139; ecall`, where the ra of a
/// signal handler points). 2: after a direct call whose target lies at most [`NEAR`] bytes
/// before self_pc: a call of this very function.
fn return_score(pc: usize, map: Option<Mapping>, self_pc: usize) -> u8 {
    let Some(map) = map.filter(|m| m.read && m.exec && pc.is_multiple_of(2)) else {
        return 0;
    };
    let insn = |addr: usize, len: usize| {
        map.holds(addr, len).then(|| {
            // SAFETY: [addr, addr + len) lies in a readable mapping (code may be 2-byte
            // aligned only, hence the unaligned reads).
            unsafe {
                if len == 4 {
                    (addr as *const u32).read_unaligned()
                } else {
                    u32::from((addr as *const u16).read_unaligned())
                }
            }
        })
    };
    let near = |target: usize| target < self_pc && self_pc - target <= NEAR;
    let call = pc.wrapping_sub(4);
    if let Some(w) = insn(call, 4) {
        if w & 0xfff == 0x0ef {
            // jal ra, offset
            return if near(call.wrapping_add_signed(jal_offset(w))) {
                2
            } else {
                1
            };
        }
        if w & 0x7fff == 0x0e7 {
            // jalr ra, offset(rs1); after auipc ra, hi (the `call` pseudo-instruction), direct
            let auipc = pc.wrapping_sub(8);
            if (w >> 15) & 31 == 1
                && let Some(hi) = insn(auipc, 4).filter(|hi| hi & 0xfff == 0x097)
            {
                let offset = (hi & 0xffff_f000) as i32 as isize + (w as i32 >> 20) as isize;
                return if near(auipc.wrapping_add_signed(offset)) {
                    2
                } else {
                    1
                };
            }
            return 1;
        }
    }
    if let Some(h) = insn(pc.wrapping_sub(2), 2)
        && h & 0xf07f == 0x9002
        && (h >> 7) & 31 != 0
    {
        return 1; // c.jalr rs1
    }
    if insn(pc, 4) == Some(0x08b0_0893) && insn(pc.wrapping_add(4), 4) == Some(0x0000_0073) {
        return 1; // li a7, 139 (rt_sigreturn); ecall
    }
    0
}

/// The byte offset of a `jal`.
fn jal_offset(w: u32) -> isize {
    let imm = ((w >> 31) & 1) << 20
        | ((w >> 21) & 0x3ff) << 1
        | ((w >> 20) & 1) << 11
        | ((w >> 12) & 0xff) << 12;
    (((imm << 11) as i32) >> 11) as isize
}

/// This thread's cached stack bounds, `(lo, hi)`.
fn stack_bounds() -> (usize, usize) {
    // SAFETY: the getter only reads the thread pointer and a link-time constant; the bounds
    // are this thread's, written only by this thread.
    let b = unsafe { &*instrfn_riscv64_stack_get() };
    (b.lo, b.hi)
}

/// Caches `stack`, the mapping that holds sp, for the fast path; not while the thread runs on
/// its alternate signal stack, which the program may free and map anew, smaller, once the
/// handler is done (a thread's own stack lasts as long as the thread).
fn remember_stack(stack: &Mapping) {
    // SAFETY: a zeroed stack_t is a valid out-parameter; sigaltstack(NULL, &old) only reads
    // the thread's settings (raw system call: errno untouched).
    let on_altstack = unsafe {
        let mut old: libc::stack_t = core::mem::zeroed();
        syscall(
            libc::SYS_sigaltstack as usize,
            [0, &raw mut old as usize, 0, 0],
        ) != 0
            || old.ss_flags & libc::SS_ONSTACK != 0
    };
    if on_altstack {
        return;
    }
    let (lo, hi) = stack.readable();
    // SAFETY: as in stack_bounds; the trampolines read the bounds only on this thread, and a
    // signal handler cannot run in between (signals are blocked on the slow path).
    let b = unsafe { &mut *instrfn_riscv64_stack_get() };
    b.lo = lo;
    b.hi = hi;
}

/// Sites decided on any thread (`instrfn_riscv64_decided`, defined in asm/riscv64.s), so
/// that the other threads need not read /proc/self/maps for them (a new thread starts with an
/// empty table): the fast path of a thread that has no marker for a site inserts its arcs at
/// once if it was decided A0; a FRAME site gets its marker on the slow path, without a new
/// decision. An open-addressing set of words: self_pc + 1 (FRAME) or self_pc (A0), 0 when
/// empty; a word is claimed with a CAS and never changes again, and at most half of them are
/// claimed (further sites are decided by each thread that meets them), so every probe ends
/// at an empty word.
fn decided() -> &'static [AtomicUsize; 1 << DECIDED_BITS] {
    // SAFETY: a static of the assembly, only accessed atomically (the fast path loads whole
    // words).
    unsafe { &*core::ptr::addr_of!(instrfn_riscv64_decided) }
}

/// Words of `instrfn_riscv64_decided` claimed.
static DECIDED_COUNT: AtomicUsize = AtomicUsize::new(0);

/// The words of `decided()` to probe for `self_pc`, in order (the fast path's order).
fn decided_probe(self_pc: usize) -> impl Iterator<Item = &'static AtomicUsize> {
    let home = (self_pc as u64).wrapping_mul(arcs::HASH_MUL) >> (64 - DECIDED_BITS);
    let words = decided();
    (0..words.len()).map(move |i| &words[(home as usize + i) % words.len()])
}

/// The decision made for `self_pc` by any thread, if remembered.
fn remembered(self_pc: usize) -> Option<Caller> {
    for word in decided_probe(self_pc) {
        match word.load(Ordering::Relaxed) {
            0 => return None,
            v if v & !1 == self_pc => {
                return Some(if v & 1 != 0 {
                    Caller::Frame
                } else {
                    Caller::A0
                });
            }
            _ => {}
        }
    }
    None
}

/// Remembers the decision for `self_pc` (the first one made, if threads race).
fn remember(self_pc: usize, caller: Caller) {
    if self_pc == 0
        || !self_pc.is_multiple_of(2)
        || DECIDED_COUNT.load(Ordering::Relaxed) >= decided().len() / 2
    {
        return;
    }
    let value = self_pc | (caller == Caller::Frame) as usize;
    for word in decided_probe(self_pc) {
        match word.compare_exchange(0, value, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {
                DECIDED_COUNT.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(v) if v & !1 == self_pc => return,
            Err(_) => {}
        }
    }
}

/// A raw system call (no libc: nothing that may lock or set errno).
///
/// # Safety
/// As the system call `nr` with these arguments.
unsafe fn syscall(nr: usize, args: [usize; 4]) -> isize {
    let ret: isize;
    // SAFETY: ecall only enters the kernel, which preserves every register but a0; the
    // arguments are the caller's responsibility.
    unsafe {
        core::arch::asm!(
            "ecall",
            in("a7") nr,
            inlateout("a0") args[0] as isize => ret,
            in("a1") args[1],
            in("a2") args[2],
            in("a3") args[3],
            options(nostack),
        );
    }
    ret
}

/// One line of /proc/self/maps: `[start, end)` and two of its permissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    read: bool,
    exec: bool,
}

impl Mapping {
    /// `(start, end)` if readable, else an empty range.
    fn readable(&self) -> (usize, usize) {
        if self.read {
            (self.start, self.end)
        } else {
            (0, 0)
        }
    }

    /// Whether `[addr, addr + len)` lies inside.
    fn holds(&self, addr: usize, len: usize) -> bool {
        self.start <= addr && addr.checked_add(len).is_some_and(|e| e <= self.end)
    }
}

/// The mapping that holds each of `addrs`, from one read of /proc/self/maps (raw openat, read
/// and close into a small stack buffer: async-signal-safe). None if it cannot be read.
fn read_maps<const N: usize>(addrs: [usize; N]) -> Option<[Option<Mapping>; N]> {
    let path = c"/proc/self/maps";
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        syscall(
            libc::SYS_openat as usize,
            [
                libc::AT_FDCWD as usize,
                path.as_ptr() as usize,
                (libc::O_RDONLY | libc::O_CLOEXEC) as usize,
                0,
            ],
        )
    };
    if fd < 0 {
        return None;
    }
    let mut scan = MapsScan::new(addrs);
    let mut buf = [0u8; 512];
    let complete = loop {
        // SAFETY: buf is valid for its length.
        let n = unsafe {
            syscall(
                libc::SYS_read as usize,
                [fd as usize, buf.as_mut_ptr() as usize, buf.len(), 0],
            )
        };
        match n {
            0 => break true,
            n if n > 0 => scan.feed(&buf[..n as usize]),
            n if n == -(libc::EINTR as isize) => {}
            _ => break false,
        }
    };
    // SAFETY: closes the descriptor opened above.
    unsafe { syscall(libc::SYS_close as usize, [fd as usize, 0, 0, 0]) };
    complete.then(|| scan.finish())
}

/// A parser of /proc/self/maps lines (`start-end perms offset dev inode path`) fed in pieces
/// of any size, which keeps the mapping of each address asked for.
struct MapsScan<const N: usize> {
    addrs: [usize; N],
    found: [Option<Mapping>; N],
    /// 0 start, 1 end, 2 permissions, 3 the rest of the line (or a malformed line).
    field: u8,
    digits: u8,
    start: usize,
    end: usize,
    perm: u8,
    read: bool,
    exec: bool,
}

impl<const N: usize> MapsScan<N> {
    fn new(addrs: [usize; N]) -> Self {
        MapsScan {
            addrs,
            found: [None; N],
            field: 0,
            digits: 0,
            start: 0,
            end: 0,
            perm: 0,
            read: false,
            exec: false,
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                self.end_line();
                continue;
            }
            match self.field {
                0 | 1 => {
                    let digit = (b as char).to_digit(16);
                    match (digit, b) {
                        (Some(d), _) if self.digits < 16 => {
                            let v = if self.field == 0 {
                                &mut self.start
                            } else {
                                &mut self.end
                            };
                            *v = *v << 4 | d as usize;
                            self.digits += 1;
                        }
                        (None, b'-') if self.field == 0 && self.digits > 0 => {
                            self.field = 1;
                            self.digits = 0;
                        }
                        (None, b' ') if self.field == 1 && self.digits > 0 => self.field = 2,
                        _ => {
                            // Malformed: never matches (start is not below end).
                            (self.start, self.end) = (1, 0);
                            self.field = 3;
                        }
                    }
                }
                2 => {
                    match self.perm {
                        0 => self.read = b == b'r',
                        2 => self.exec = b == b'x',
                        _ => {}
                    }
                    self.perm += 1;
                    if self.perm == 4 {
                        self.field = 3;
                    }
                }
                _ => {}
            }
        }
    }

    fn end_line(&mut self) {
        if self.field == 3 && self.start < self.end {
            let m = Mapping {
                start: self.start,
                end: self.end,
                read: self.read,
                exec: self.exec,
            };
            for (addr, found) in self.addrs.iter().zip(self.found.iter_mut()) {
                if found.is_none() && m.holds(*addr, 1) {
                    *found = Some(m);
                }
            }
        }
        *self = MapsScan::new(self.addrs).with_found(self.found);
    }

    fn with_found(mut self, found: [Option<Mapping>; N]) -> Self {
        self.found = found;
        self
    }

    fn finish(mut self) -> [Option<Mapping>; N] {
        self.end_line();
        self.found
    }
}

// ---- Trace mode ---------------------------------------------------------------------------
//
// The fast path (asm/riscv64.s, `.Lmcount_trace`) needs the address of the instrumented
// function's return slot, where it put its return address, to replace it with the exit
// trampoline; and the exit trampoline must tell from sp at the return which frame returns.
// gcc -O2 keeps no frame pointer, so neither a0 (the caller's pc) nor s0 says where the slot
// is. The slot is found once per call site, by decoding the instructions from the function's
// entry to the counting call ([`prologue`]): the compilers emit a straight-line prologue there
// (sp moved down, ra stored, registers saved and moved), since the counting call sits in the
// entry block and needs ra saved. Only slots at CFA - 8, where gcc, clang and rustc put ra in
// every function without variable arguments, are replaced: then sp at the return (= the CFA)
// names the frame. Other sites (variadic functions, -msave-restore, prologues with anything
// the decoder does not model) are traced as entries without exit, through the slow path.
//
// The alternatives, and why not: the word equal to a0 above sp (what gcc just stored) can be
// anywhere a stale copy of the same return address was left, below the real slot, by an
// earlier call from the same call site (this runtime's own slow path saves a0 in its frame);
// .eh_frame is not emitted by gcc for C on riscv64 without -fasynchronous-unwind-tables;
// -fno-omit-frame-pointer alone would not do either, since gcc -O2 code may hold any value in
// s0, also a frame pointer of an ancestor whose return slot holds the same address (indirect
// recursion), so a decision from the frame record needs the code anyway.

/// log2 of the entries of `instrfn_riscv64_sites` (16 bytes each, 1 MiB of .bss, touched as
/// used, in trace mode only): up to 32768 call sites keep their rule; further sites are decided
/// again on each call, in the slow path.
const SITE_BITS: u32 = 16;
/// A site's rule (see asm/riscv64.s, `.Lmcount_trace`): `(D << 3) | guard`, the slot at sp + D.
/// Guard: a0 holds the slot's word (gcc: `mv a0, ra` before the call).
const RULE_A0: usize = 1;
/// Guard: s0 = slot + 8, the CFA (a frame pointer: clang, gcc -fno-omit-frame-pointer, rustc).
const RULE_FRAME: usize = 2;
/// No slot can be proven: entries only.
const RULE_NONE: usize = 4;

unsafe extern "C" {
    fn instrfn_riscv64_exit();
    /// The rules of the sites decided so far (see [`remembered_site`]).
    static instrfn_riscv64_sites: [[AtomicUsize; 2]; 1 << SITE_BITS];
}

/// Trace mode has its trampolines here.
pub const TRACE_SUPPORTED: bool = true;
/// The trace clock (docs/trace-format.md): the `time` CSR, read by `rdtime`.
pub const CLOCK_NAME: &str = "time";

/// The trace clock now (what the fast paths store in an event).
#[inline]
pub fn counter() -> u64 {
    let v: u64;
    // SAFETY: reads the time CSR; no memory is touched.
    unsafe { core::arch::asm!("rdtime {v}", v = out(reg) v, options(nomem, nostack)) };
    v
}

/// The address an instrumented function returns to in trace mode.
/// A second word that holds a replaced return address for a while (none here: see
/// asm/s390x.s's [`second_slot`](crate::arch::second_slot)).
pub fn second_slot(_slot: usize) -> Option<usize> {
    None
}

pub fn exit_trampoline() -> usize {
    instrfn_riscv64_exit as *const () as usize
}

/// Whether the exit trampoline takes back the entries of calls shorter than
/// INSTRFN_MIN_DURATION (asm/riscv64.s `.Lexit_short`; the threshold is set by
/// [`set_min_ticks`](crate::arch::set_min_ticks)).
pub const MIN_DURATION_SUPPORTED: bool = true;

/// Whether trace mode may replace the return address `ret` with the exit trampoline (else the
/// call is recorded as an entry without exit). Not an odd word, which is no return address
/// (code is 2-byte aligned): [`instrfn_riscv64_trace_path`] passes a slot holding 1 for a call
/// whose return slot it cannot prove. Not the exit trampoline either.
pub fn replaceable(ret: usize) -> bool {
    ret.is_multiple_of(2) && ret != exit_trampoline()
}

/// The slow path of a trace-mode mcount call (from `instrfn_riscv64_slow`, with the guard
/// held and all signals blocked): finds the call's return slot from the site's rule (decided
/// now if no thread has), checks the rule's guard, and records the call with
/// [`instrfn_trace_slow`](crate::trace::instrfn_trace_slow): with its slot, or, if there is
/// none it can prove, with `spare` (a word of the slow path's own frame, below sp at the call)
/// holding 1, which [`replaceable`] refuses: an entry without exit. Frames that `longjmp` left
/// behind below sp are closed either way.
///
/// A slot that holds the exit trampoline already is the frame of a function whose return was
/// replaced and that tail-called this one (same CFA): this call is an entry without exit, and
/// the return, through the trampoline, closes the caller's entry, still the newest.
///
/// # Safety
/// Only `instrfn_riscv64_slow` calls this: `tls` is this thread's TLS block, `a0`, `self_pc`
/// (ra), `s0` and `sp` the instrumented code's at its counting call, `spare` a writable word
/// below `sp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_riscv64_trace_path(
    tls: *mut Tls,
    a0: usize,
    self_pc: usize,
    s0: usize,
    sp: usize,
    _a1: usize,
    spare: *mut usize,
) {
    let site = Site {
        a0,
        self_pc,
        s0,
        sp,
    };
    let stack = trace_stack(sp);
    let rule = remembered_site(self_pc).unwrap_or_else(|| {
        let rule = decide_site(&site, stack);
        if let Some(rule) = rule {
            remember_site(self_pc, rule);
        }
        rule.unwrap_or(RULE_NONE)
    });
    // SAFETY: rule_slot returns only slots inside the stack mapping that holds sp.
    let slot = rule_slot(rule, &site, stack).filter(|&s| unsafe { *s } != exit_trampoline());
    let slot = slot.unwrap_or_else(|| {
        // SAFETY: per the contract, a word of the caller's frame.
        unsafe { spare.write(1) };
        spare
    });
    // SAFETY: the contract of instrfn_trace_slow: this thread's block, and a return slot of the
    // instrumented function (or a word that holds no return address).
    unsafe { crate::trace::instrfn_trace_slow(tls, slot, self_pc) };
}

/// The slow path of a gmon-mode `__cyg_profile_func_enter` (from `instrfn_riscv64_slow`):
/// the arc (call_site, this_fn).
///
/// # Safety
/// Only `instrfn_riscv64_slow` calls this, with `tls` = this thread's TLS block.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_riscv64_cyg_gmon(
    tls: *mut Tls,
    this_fn: usize,
    _ra: usize,
    _s0: usize,
    _sp: usize,
    call_site: usize,
) {
    // SAFETY: the contract of instrfn_slow_path is this function's own.
    unsafe { crate::runtime::instrfn_slow_path(tls, call_site, this_fn) };
}

/// The slow path of a trace-mode `__cyg_profile_func_enter`: an entry event of `this_fn`.
///
/// # Safety
/// As [`instrfn_riscv64_cyg_gmon`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_riscv64_cyg_trace_enter(tls: *mut Tls, this_fn: usize) {
    // SAFETY: slot 0: an entry of a __cyg_profile call, nothing replaced.
    unsafe { crate::trace::instrfn_trace_slow(tls, core::ptr::null_mut(), this_fn) };
}

/// The slow path of a trace-mode `__cyg_profile_func_exit`: an exit event of `this_fn`.
///
/// # Safety
/// As [`instrfn_riscv64_cyg_gmon`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_riscv64_cyg_trace_exit(tls: *mut Tls, this_fn: usize) {
    // SAFETY: slot 1 marks the exit of a __cyg_profile call.
    unsafe { crate::trace::instrfn_trace_slow(tls, core::ptr::without_provenance_mut(1), this_fn) };
}

/// The stack that holds `sp`, `[lo, hi)`: the cached bounds if they hold it, else read now
/// (and cached for the fast path, off the alternate signal stack); (0, 0) if unknown.
fn trace_stack(sp: usize) -> (usize, usize) {
    let cached = stack_bounds();
    if cached.0 <= sp && sp < cached.1 {
        return cached;
    }
    match read_maps([sp]) {
        Some([Some(stack)]) => {
            remember_stack(&stack);
            stack.readable()
        }
        _ => (0, 0),
    }
}

/// The return slot of this call by `rule`, if its guard holds: inside the stack `[lo, hi)`
/// that holds sp, and a0 = its word (RULE_A0) or s0 = slot + 8 (RULE_FRAME).
fn rule_slot(rule: usize, site: &Site, (lo, hi): (usize, usize)) -> Option<*mut usize> {
    let guard = rule & 7;
    let slot = site.sp.checked_add(rule >> 3)?;
    if !(lo <= site.sp && slot.checked_add(8).is_some_and(|end| end <= hi)) {
        return None;
    }
    let ok = match guard {
        RULE_A0 => {
            // SAFETY: [slot, slot + 8) lies in the mapping that holds this thread's sp.
            unsafe { *(slot as *const usize) == site.a0 }
        }
        RULE_FRAME => site.s0 == slot + 8,
        _ => false,
    };
    ok.then_some(slot as *mut usize)
}

/// Decides a site's rule from its code ([`prologue::decode`]) and the call's registers, which
/// must agree with what the code proves. None if it cannot be decided now (/proc/self/maps
/// unreadable, sp in no stack known): then nothing is remembered.
fn decide_site(site: &Site, stack: (usize, usize)) -> Option<usize> {
    let [code] = read_maps([site.self_pc.wrapping_sub(1)])?;
    let Some(code) = code.filter(|m| m.read && m.exec) else {
        return Some(RULE_NONE);
    };
    let base = code
        .start
        .max(site.self_pc.saturating_sub(prologue::WINDOW + 4));
    if base >= site.self_pc {
        return Some(RULE_NONE);
    }
    // SAFETY: [base, self_pc) lies in one readable mapping (checked above).
    let bytes = unsafe { core::slice::from_raw_parts(base as *const u8, site.self_pc - base) };
    let Some(frame) = prologue::decode(bytes, base, site.self_pc) else {
        return Some(RULE_NONE);
    };
    let (lo, hi) = stack;
    let slot = site.sp + frame.slot;
    if !(lo <= site.sp && slot + 8 <= hi) {
        return None;
    }
    let rule = if frame.s0_is_cfa && site.s0 == slot + 8 {
        RULE_FRAME
    // SAFETY: [slot, slot + 8) lies in the stack that holds sp (checked above).
    } else if frame.a0_is_ra && unsafe { *(slot as *const usize) } == site.a0 {
        RULE_A0
    } else {
        return Some(RULE_NONE);
    };
    Some(frame.slot << 3 | rule)
}

fn sites() -> &'static [[AtomicUsize; 2]; 1 << SITE_BITS] {
    // SAFETY: a static of the assembly, only accessed atomically (the fast path loads whole
    // words).
    unsafe { &*core::ptr::addr_of!(instrfn_riscv64_sites) }
}

/// Entries of `instrfn_riscv64_sites` claimed.
static SITE_COUNT: AtomicUsize = AtomicUsize::new(0);

/// The entries of `sites()` to probe for `self_pc`, in order (the fast path's order).
fn site_probe(self_pc: usize) -> impl Iterator<Item = &'static [AtomicUsize; 2]> {
    let home = (self_pc as u64).wrapping_mul(arcs::HASH_MUL) >> (64 - SITE_BITS);
    let entries = sites();
    (0..entries.len()).map(move |i| &entries[(home as usize + i) % entries.len()])
}

/// The rule of `self_pc`, if some thread decided it (and has written it).
fn remembered_site(self_pc: usize) -> Option<usize> {
    for e in site_probe(self_pc) {
        match e[0].load(Ordering::Acquire) {
            0 => return None,
            pc if pc == self_pc => {
                let rule = e[1].load(Ordering::Acquire);
                return (rule != 0).then_some(rule);
            }
            _ => {}
        }
    }
    None
}

/// Remembers the rule of `self_pc` (the first one, if threads race: they decide alike).
fn remember_site(self_pc: usize, rule: usize) {
    if self_pc == 0 || SITE_COUNT.load(Ordering::Relaxed) >= sites().len() / 2 {
        return;
    }
    for e in site_probe(self_pc) {
        match e[0].compare_exchange(0, self_pc, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                SITE_COUNT.fetch_add(1, Ordering::Relaxed);
                e[1].store(rule, Ordering::Release);
                return;
            }
            Err(pc) if pc == self_pc => {
                // Decided again after forget_sites: the entry stays (probe chains), the rule
                // is the new one.
                e[1].store(rule, Ordering::Release);
                return;
            }
            Err(_) => {}
        }
    }
}

/// After dlclose unloaded the code in [lo, hi): its call sites' rules are dropped (0: not
/// decided, the slow path decides again), so that code loaded there later is decoded afresh.
/// The entries keep their self_pc: removing them would break other sites' probe chains.
pub fn forget_sites(lo: usize, hi: usize) {
    for e in sites() {
        if (lo..hi).contains(&e[0].load(Ordering::Acquire)) {
            e[1].store(0, Ordering::Release);
        }
    }
}

/// Where the instructions from a function's entry to its counting call put the return address
/// (trace mode's slot rule). Pure code over the bytes: no memory is read but `code`.
///
/// The call that returns to `self_pc` is `auipc ra; jalr ra, lo(ra)` (`call`), `jal ra` (a
/// relaxed `call`), `jalr ra, lo(rs)` or `c.jalr rs`. The function's entry, where sp is the CFA
/// and ra the return address, is a position from which every instruction up to that call
/// decodes, in a straight line, to one of the kinds a prologue and the scheduled start of a
/// body consist of (the scheduler mixes them: gcc loads the constant of a two-step frame
/// before its first sp move, saves registers after moves of arguments):
/// - sp moved by a constant (`addi`, `c.addi16sp`, `add`/`sub sp, sp, r` with r a constant
///   from `li`/`lui`/`addi(w)`), never below its 16-byte alignment at the call;
/// - stores whose address is known relative to the CFA (base sp, or a register set from sp,
///   such as the frame pointer);
/// - loads, ALU and FP operations, moves, `auipc`, `lui`: anything that writes a register other
///   than sp and no memory;
/// - nothing else: no branch, jump, call, system, atomic or CSR instruction, no store through an
///   unknown address (it might hit the slot).
///
/// The entry ra (tracked through moves) must have been stored, 8 bytes, at CFA - 8 (sp at the
/// entry), and not overwritten. sp at the entry is the CFA unless the entry is preceded by more
/// of the prologue: the instruction before it must not move sp down (either reading of the
/// bytes before it, 2 or 4 bytes long). A prologue that calls `__riscv_save_N` (`-msave-restore`)
/// stores no ra itself, so it never decodes. Instruction boundaries are found by trying every
/// even start in the window: every start that decodes must agree, or the site has no rule.
pub(crate) mod prologue {
    /// The bytes before the call that are looked at.
    pub const WINDOW: usize = 320;

    /// What the code from the entry to the call proves.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Frame {
        /// The return slot (CFA - 8) minus sp at the call.
        pub slot: usize,
        /// a0 holds the entry ra at the call (gcc's `mv a0, ra`).
        pub a0_is_ra: bool,
        /// s0 holds the CFA at the call (a frame pointer).
        pub s0_is_cfa: bool,
    }

    /// A register's value as far as the decoder knows it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Val {
        Unknown,
        Const(i64),
        /// The CFA plus this.
        Cfa(i64),
        /// The return address the function was entered with.
        EntryRa,
    }

    /// The decoder's state along one straight line of instructions.
    struct State {
        x: [Val; 32],
        /// CFA - 8 holds the entry ra.
        slot_ok: bool,
    }

    const SP: usize = 2;
    const A0: usize = 10;
    const S0: usize = 8;

    impl State {
        /// The state at the function's entry.
        fn new() -> State {
            let mut x = [Val::Unknown; 32];
            x[0] = Val::Const(0);
            x[1] = Val::EntryRa;
            x[SP] = Val::Cfa(0);
            State { x, slot_ok: false }
        }

        /// Writes `v` to register `rd`; false if that breaks the model (sp not relative to the
        /// CFA any more).
        fn write(&mut self, rd: usize, v: Val) -> bool {
            match rd {
                0 => true,
                SP => {
                    self.x[SP] = v;
                    matches!(v, Val::Cfa(_))
                }
                _ => {
                    self.x[rd] = v;
                    true
                }
            }
        }

        /// A store of `width` bytes of `v` at `imm(base)`; false if its address is unknown.
        fn store(&mut self, base: usize, imm: i64, width: i64, v: Val) -> bool {
            let Val::Cfa(b) = self.x[base] else {
                return false;
            };
            let at = b.wrapping_add(imm);
            if width == 8 && at == -8 && v == Val::EntryRa {
                self.slot_ok = true;
            } else if at < 0 && at + width > -8 {
                self.slot_ok = false;
            }
            true
        }

        fn add(&self, rs: usize, imm: i64) -> Val {
            match self.x[rs] {
                Val::Const(c) => Val::Const(c.wrapping_add(imm)),
                Val::Cfa(c) => Val::Cfa(c.wrapping_add(imm)),
                Val::EntryRa if imm == 0 => Val::EntryRa,
                _ => Val::Unknown,
            }
        }

        fn addw(&self, rs: usize, imm: i64) -> Val {
            match self.x[rs] {
                Val::Const(c) => Val::Const(c.wrapping_add(imm) as i32 as i64),
                _ => Val::Unknown,
            }
        }

        /// rs1 + rs2 (`sub`: rs1 - rs2).
        fn add_reg(&self, rs1: usize, rs2: usize, sub: bool) -> Val {
            match (self.x[rs1], self.x[rs2]) {
                (Val::Const(a), Val::Const(b)) if sub => Val::Const(a.wrapping_sub(b)),
                (Val::Const(a), Val::Const(b)) => Val::Const(a.wrapping_add(b)),
                (Val::Cfa(a), Val::Const(b)) if sub => Val::Cfa(a.wrapping_sub(b)),
                (Val::Cfa(a), Val::Const(b)) => Val::Cfa(a.wrapping_add(b)),
                (Val::Const(a), Val::Cfa(b)) if !sub => Val::Cfa(a.wrapping_add(b)),
                (v, Val::Const(0)) => v,
                (Val::Const(0), v) if !sub => v,
                _ => Val::Unknown,
            }
        }

        fn shl(&self, rs: usize, sh: u32) -> Val {
            match self.x[rs] {
                Val::Const(c) => Val::Const(c.wrapping_shl(sh)),
                _ => Val::Unknown,
            }
        }
    }

    fn half(code: &[u8], at: usize) -> Option<u16> {
        Some(u16::from_le_bytes(code.get(at..at + 2)?.try_into().ok()?))
    }

    fn word(code: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(code.get(at..at + 4)?.try_into().ok()?))
    }

    /// The sign-extended `bits`-bit value `v`.
    fn sext(v: u32, bits: u32) -> i64 {
        ((v << (32 - bits)) as i32 >> (32 - bits)) as i64
    }

    /// Applies one 32-bit instruction; false if it is not one of the modelled kinds.
    fn step32(st: &mut State, w: u32) -> bool {
        let rd = ((w >> 7) & 31) as usize;
        let f3 = (w >> 12) & 7;
        let rs1 = ((w >> 15) & 31) as usize;
        let rs2 = ((w >> 20) & 31) as usize;
        let f7 = w >> 25;
        let imm_i = sext(w >> 20, 12);
        let imm_s = sext((w >> 25) << 5 | (w >> 7) & 31, 12);
        match w & 0x7f {
            0x03 if f3 != 7 => st.write(rd, Val::Unknown), // loads
            0x07 if f3 == 2 || f3 == 3 => true,            // flw, fld
            0x13 => {
                let v = match f3 {
                    0 => st.add(rs1, imm_i),                               // addi
                    1 if w >> 26 == 0 => st.shl(rs1, (imm_i & 63) as u32), // slli
                    _ => Val::Unknown,
                };
                st.write(rd, v)
            }
            0x17 | 0x37 => {
                let v = if w & 0x7f == 0x37 {
                    Val::Const((w & 0xffff_f000) as i32 as i64) // lui
                } else {
                    Val::Unknown // auipc
                };
                st.write(rd, v)
            }
            0x1b => {
                let v = if f3 == 0 {
                    st.addw(rs1, imm_i) // addiw
                } else {
                    Val::Unknown
                };
                st.write(rd, v)
            }
            0x23 if f3 <= 3 => st.store(rs1, imm_s, 1 << f3, st.x[rs2]), // sb, sh, sw, sd
            0x27 if f3 == 2 || f3 == 3 => st.store(rs1, imm_s, 1 << f3, Val::Unknown), // fsw, fsd
            0x33 => {
                let v = match (f7, f3) {
                    (0, 0) => st.add_reg(rs1, rs2, false),   // add
                    (0x20, 0) => st.add_reg(rs1, rs2, true), // sub
                    (0 | 0x20 | 1, _) => Val::Unknown,       // other ALU, M extension
                    _ => return false,
                };
                st.write(rd, v)
            }
            0x3b => st.write(rd, Val::Unknown), // OP-32
            0x43 | 0x47 | 0x4b | 0x4f => true,  // fused multiply-add (FP rd)
            0x53 => match w >> 27 {
                // compare, convert to integer, move to integer / classify: an integer rd
                0x14 | 0x18 | 0x1c => st.write(rd, Val::Unknown),
                _ => true,
            },
            _ => false,
        }
    }

    /// Applies one compressed instruction (RV64C); false if it is not one of the modelled
    /// kinds.
    fn step16(st: &mut State, h: u16) -> bool {
        let h = h as u32;
        let f3 = h >> 13;
        let rd = ((h >> 7) & 31) as usize;
        let rs2 = ((h >> 2) & 31) as usize;
        let rdp = (((h >> 2) & 7) + 8) as usize; // rd' / rs2' in bits 4:2
        let rs1p = (((h >> 7) & 7) + 8) as usize; // rs1' / rd' in bits 9:7
        let imm6 = sext((h >> 12 & 1) << 5 | (h >> 2) & 31, 6);
        // c.ld/c.sd/c.fld/c.fsd offsets: uimm[5:3] = 12:10, uimm[7:6] = 6:5
        let uimm_d = ((h >> 10) & 7) << 3 | ((h >> 5) & 3) << 6;
        // c.lw/c.sw: uimm[5:3] = 12:10, uimm[2] = 6, uimm[6] = 5
        let uimm_w = ((h >> 10) & 7) << 3 | ((h >> 6) & 1) << 2 | ((h >> 5) & 1) << 6;
        match (h & 3, f3) {
            (0, 0) => {
                // c.addi4spn rd', sp, nzuimm[5:4|9:6|2|3]
                let imm = ((h >> 11) & 3) << 4
                    | ((h >> 7) & 15) << 6
                    | ((h >> 6) & 1) << 2
                    | ((h >> 5) & 1) << 3;
                imm != 0 && st.write(rdp, st.add(SP, imm as i64))
            }
            (0, 1) => true,                                           // c.fld
            (0, 2) | (0, 3) => st.write(rdp, Val::Unknown),           // c.lw, c.ld
            (0, 5) => st.store(rs1p, uimm_d as i64, 8, Val::Unknown), // c.fsd
            (0, 6) => st.store(rs1p, uimm_w as i64, 4, st.x[rdp]),    // c.sw
            (0, 7) => st.store(rs1p, uimm_d as i64, 8, st.x[rdp]),    // c.sd
            (1, 0) => st.write(rd, st.add(rd, imm6)),                 // c.addi, c.nop
            (1, 1) => rd != 0 && st.write(rd, st.addw(rd, imm6)),     // c.addiw
            (1, 2) => st.write(rd, Val::Const(imm6)),                 // c.li
            (1, 3) if rd == SP => {
                // c.addi16sp: nzimm[9] = 12, nzimm[4|6|8:7|5] = 6:2
                let imm = (h >> 12 & 1) << 9
                    | ((h >> 6) & 1) << 4
                    | ((h >> 5) & 1) << 6
                    | ((h >> 3) & 3) << 7
                    | ((h >> 2) & 1) << 5;
                imm != 0 && st.write(SP, st.add(SP, sext(imm, 10)))
            }
            (1, 3) => imm6 != 0 && st.write(rd, Val::Const(imm6 << 12)), // c.lui
            (1, 4) => st.write(rs1p, Val::Unknown), // c.srli, c.srai, c.andi, c.sub, ...
            (2, 0) => st.write(rd, st.shl(rd, (imm6 & 63) as u32)), // c.slli
            (2, 1) => true,                         // c.fldsp
            (2, 2) | (2, 3) => rd != 0 && st.write(rd, Val::Unknown), // c.lwsp, c.ldsp
            (2, 4) => {
                let bit12 = h >> 12 & 1;
                match (bit12, rs2) {
                    (_, 0) => false,                               // c.jr, c.jalr, c.ebreak
                    (0, _) => st.write(rd, st.x[rs2]),             // c.mv
                    _ => st.write(rd, st.add_reg(rd, rs2, false)), // c.add
                }
            }
            (2, 5) => {
                // c.fsdsp: uimm[5:3] = 12:10, uimm[8:6] = 9:7
                let imm = ((h >> 10) & 7) << 3 | ((h >> 7) & 7) << 6;
                st.store(SP, imm as i64, 8, Val::Unknown)
            }
            (2, 6) => {
                // c.swsp: uimm[5:2] = 12:9, uimm[7:6] = 8:7
                let imm = ((h >> 9) & 15) << 2 | ((h >> 7) & 3) << 6;
                st.store(SP, imm as i64, 4, st.x[rs2])
            }
            (2, 7) => {
                // c.sdsp: uimm[5:3] = 12:10, uimm[8:6] = 9:7
                let imm = ((h >> 10) & 7) << 3 | ((h >> 7) & 7) << 6;
                st.store(SP, imm as i64, 8, st.x[rs2])
            }
            _ => false,
        }
    }

    /// The immediate of `addi sp, sp, imm` (or `c.addi16sp`, `c.addi sp`) at `at`, and the
    /// instruction's length, if that is what is there and it moves sp down.
    fn sp_down(code: &[u8], at: usize) -> Option<(i64, usize)> {
        let h = half(code, at)?;
        if h & 3 == 3 {
            let w = word(code, at)?;
            let imm = sext(w >> 20, 12);
            return (w & 0xf_ffff == 0x1_0113 && imm < 0).then_some((imm, 4));
        }
        let mut st = State::new();
        let is_sp = (h & 0xef83) == 0x6101 || (h & 0xef83) == 0x0101; // c.addi16sp, c.addi sp
        if !is_sp || !step16(&mut st, h) {
            return None;
        }
        match st.x[SP] {
            Val::Cfa(d) if d < 0 => Some((d, 2)),
            _ => None,
        }
    }

    /// Whether the instruction of `len` bytes at `at` may move sp down: `addi sp, sp, -N`
    /// (`c.addi16sp`, `c.addi sp`), or `add`/`sub sp, sp, r` (`c.add sp, r`).
    fn moves_sp_down(code: &[u8], at: usize, len: usize) -> bool {
        if sp_down(code, at).is_some_and(|(_, l)| l == len) {
            return true;
        }
        if len == 2 {
            let h = half(code, at).unwrap_or(0);
            return h & 0xff83 == 0x9102 && h & 0x7c != 0; // c.add sp, rs2
        }
        let w = word(code, at).unwrap_or(0);
        // add/sub sp, sp, rs2: opcode OP, rd = rs1 = sp, funct3 0, funct7 0 or 0x20
        w & 0xbe0f_ffff == 0x0001_0133
    }

    /// Decodes from the entry candidate at `entry` to the call at `call`: the frame, if the
    /// straight line reaches the call exactly and proves the slot.
    fn run(code: &[u8], entry: usize, call: usize) -> Option<Frame> {
        let mut st = State::new();
        let mut at = entry;
        while at < call {
            let h = half(code, at)?;
            if h & 3 == 3 {
                if !step32(&mut st, word(code, at)?) {
                    return None;
                }
                at += 4;
            } else {
                if !step16(&mut st, h) {
                    return None;
                }
                at += 2;
            }
        }
        let Val::Cfa(sp) = st.x[SP] else {
            return None;
        };
        if at != call || !st.slot_ok || sp > -16 || sp % 16 != 0 {
            return None;
        }
        Some(Frame {
            slot: (-8 - sp) as usize,
            a0_is_ra: st.x[A0] == Val::EntryRa,
            s0_is_cfa: st.x[S0] == Val::Cfa(0),
        })
    }

    /// The frame of the counting call that returns to `self_pc`, from `code` = the bytes
    /// `[base, self_pc)`; None unless every reading of the bytes that decodes agrees.
    pub fn decode(code: &[u8], base: usize, self_pc: usize) -> Option<Frame> {
        if self_pc.checked_sub(base)? != code.len() || code.len() < 2 || !base.is_multiple_of(2) {
            return None;
        }
        let end = code.len();
        let mut calls = [None; 3];
        if end >= 8
            && word(code, end - 8)? & 0xfff == 0x097
            && word(code, end - 4)? & 0xf_ffff == 0x0_80e7
        {
            calls[0] = Some(end - 8); // auipc ra; jalr ra, lo(ra)
        }
        if end >= 4 {
            let w = word(code, end - 4)?;
            if w & 0xfff == 0x0ef || w & 0x7fff == 0x0e7 {
                calls[1] = Some(end - 4); // jal ra; jalr ra, lo(rs)
            }
        }
        let h = half(code, end - 2)?;
        if h & 0xf07f == 0x9002 && (h >> 7) & 31 != 0 {
            calls[2] = Some(end - 2); // c.jalr rs
        }
        let first = end.saturating_sub(WINDOW);
        let mut found: Option<Frame> = None;
        for call in calls.into_iter().flatten() {
            let mut entry = call;
            while entry >= first + 2 {
                entry -= 2;
                if entry % 2 != 0 {
                    continue;
                }
                let Some(frame) = run(code, entry, call) else {
                    continue;
                };
                // What comes before the entry (`code` starts at its mapping's start when
                // it holds fewer than WINDOW + 4 bytes: then there may be nothing before).
                let moved_before = entry >= 2 && moves_sp_down(code, entry - 2, 2)
                    || entry >= 4 && moves_sp_down(code, entry - 4, 4);
                if moved_before {
                    return None;
                }
                match found {
                    Some(f) if f != frame => return None,
                    _ => found = Some(frame),
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_in_any_pieces() {
        let text = b"4000000000-4000001000 r-xp 00000000 fe:00 10010869   /tmp/rv/maps\n\
            4002004000-4002804000 rw-p 00000000 00:00 0     [stack]\n\
            zz-4002900000 rw-p 00000000 00:00 0\n\
            4002823000-4002824000 --xp 00000000 00:00 0\n\
            4002824000-4002825000 r--p 00000000 00:00 0";
        let want = [
            Some(Mapping {
                start: 0x40_0000_0000,
                end: 0x40_0000_1000,
                read: true,
                exec: true,
            }),
            Some(Mapping {
                start: 0x40_0200_4000,
                end: 0x40_0280_4000,
                read: true,
                exec: false,
            }),
            None,
            Some(Mapping {
                start: 0x40_0282_3000,
                end: 0x40_0282_4000,
                read: false,
                exec: true,
            }),
            Some(Mapping {
                start: 0x40_0282_4000,
                end: 0x40_0282_5000,
                read: true,
                exec: false,
            }),
            None,
        ];
        let addrs = [
            0x40_0000_0ffe,
            0x40_0280_3ff8,
            0x40_0280_5000,
            0x40_0282_3000,
            0x40_0282_4fff,
            0x40_0000_1000,
        ];
        for piece in [1, 2, 7, 64, text.len()] {
            let mut scan = MapsScan::new(addrs);
            for chunk in text.chunks(piece) {
                scan.feed(chunk);
            }
            assert_eq!(scan.finish(), want, "pieces of {piece}");
        }
    }

    #[test]
    fn jal_offsets() {
        assert_eq!(jal_offset(0x0080_00ef), 8); // jal ra, .+8
        assert_eq!(jal_offset(0xff9f_f0ef), -8); // jal ra, .-8
        assert_eq!(jal_offset(0x8000_00ef), -(1 << 20)); // jal ra, .-1MiB
    }

    /// Two functions, each returning the return address of its (direct) call.
    #[inline(never)]
    extern "C" fn callee() -> usize {
        let ra: usize;
        // SAFETY: reads ra, which still holds this call's return address (no call yet).
        unsafe { core::arch::asm!("mv {}, ra", out(reg) ra) };
        core::hint::black_box(ra)
    }

    #[inline(never)]
    extern "C" fn other_callee() -> usize {
        let ra: usize;
        // SAFETY: as in callee.
        unsafe { core::arch::asm!("mv {}, ra", out(reg) ra) };
        core::hint::black_box(ra) + core::hint::black_box(0)
    }

    fn map_of(addr: usize) -> Option<Mapping> {
        read_maps([addr]).unwrap()[0]
    }

    #[test]
    fn return_addresses() {
        let ra = callee();
        let f = callee as *const () as usize;
        // A direct call of the function whose counting call is near its start scores 2,
        // of another function 1; data and odd addresses 0. (A function's entry may well
        // score 1: it follows whatever the function before it ends with, which can be a call
        // that does not return.)
        assert_eq!(return_score(ra, map_of(ra), f + 12), 2);
        assert_eq!(return_score(ra, map_of(ra), f + 4096), 1);
        let data = [0u64; 4];
        let d = data.as_ptr() as usize;
        assert_eq!(return_score(d + 8, map_of(d), f + 12), 0);
        assert_eq!(return_score(1, map_of(1), f + 12), 0);
        assert_eq!(return_score(ra + 1, map_of(ra), f + 12), 0);
    }

    /// A frame record: 16-byte aligned, with the caller's pc just below its end.
    #[repr(C, align(16))]
    struct Frame([usize; 2]);

    impl Frame {
        fn s0(&self) -> usize {
            self.0.as_ptr() as usize + 16
        }
    }

    fn sp() -> usize {
        let sp: usize;
        // SAFETY: reads sp.
        unsafe { core::arch::asm!("mv {}, sp", out(reg) sp) };
        sp
    }

    #[test]
    fn decisions() {
        let ra = callee();
        let self_pc = callee as *const () as usize + 12;
        let frame = Frame([0, ra]);
        let sp = sp();
        let garbage = 0x5a0a_0000_0a00_000a;
        // clang: an argument in a0, the caller in the frame record.
        let clang = Site {
            a0: garbage,
            self_pc,
            s0: frame.s0(),
            sp,
        };
        assert_eq!(decide(&clang), (ra, Some(Caller::Frame)));
        // Now this thread's stack is cached: the same with one read of /proc/self/maps (and
        // the gcc cases below with none).
        let (lo, hi) = stack_bounds();
        assert!(lo <= sp && sp < hi, "{lo:#x} {sp:#x} {hi:#x}");
        assert_eq!(decide(&clang), (ra, Some(Caller::Frame)));
        // gcc without a frame pointer: a0 = the caller, s0 anything; -8(s0) is read only
        // inside this stack, above sp.
        for s0 in [
            0,
            8,
            garbage,
            sp,
            sp - 16,
            frame.s0() + 8,
            hi + 16,
            usize::MAX & !15,
        ] {
            let gcc = Site {
                a0: ra,
                self_pc,
                s0,
                sp,
            };
            assert_eq!(decide(&gcc), (ra, Some(Caller::A0)), "s0 {s0:#x}");
        }
        // Both in a0 and the frame (gcc -fno-omit-frame-pointer, rustc).
        let both = Site { a0: ra, ..clang };
        assert_eq!(decide(&both), (ra, Some(Caller::A0)));
        // Two return addresses: a0, unless only the frame's is a direct call of this
        // function (an s0 inherited from an ancestor with a frame pointer holds the
        // ancestor's return address; a clang argument may happen to be a return address).
        let elsewhere = other_callee();
        let ancestor = Frame([0, elsewhere]);
        let gcc = Site {
            a0: ra,
            s0: ancestor.s0(),
            ..clang
        };
        assert_eq!(decide(&gcc), (ra, Some(Caller::A0)));
        let clang_code_pointer = Site {
            a0: elsewhere,
            ..clang
        };
        assert_eq!(decide(&clang_code_pointer), (ra, Some(Caller::Frame)));
        let far = Site {
            a0: elsewhere,
            self_pc: self_pc + 4096,
            ..clang
        };
        assert_eq!(decide(&far), (elsewhere, Some(Caller::A0)));
        // Neither is a return address: a0.
        let frame = Frame([0, garbage ^ 1]);
        let site = Site {
            s0: frame.s0(),
            ..clang
        };
        assert_eq!(decide(&site), (garbage, Some(Caller::A0)));
    }

    #[test]
    fn from_pc_of_a_marked_site() {
        let ra = callee();
        let frame = Frame([0, ra]);
        let site = Site {
            a0: 7,
            self_pc: 0x1000,
            s0: frame.s0(),
            sp: sp(),
        };
        assert_eq!(from_pc_of(Caller::Frame, &site), ra);
        assert_eq!(from_pc_of(Caller::A0, &site), 7);
        // A FRAME marker that does not fit this call: a0.
        let site = Site { s0: 0x18, ..site };
        assert_eq!(from_pc_of(Caller::Frame, &site), 7);
    }

    #[test]
    fn remembered_decisions() {
        // Sites whose home words collide are all kept, and the first decision stays.
        let sites: Vec<usize> = (0..3000).map(|i| 0x4000_0000 + i * 10).collect();
        for (i, &pc) in sites.iter().enumerate() {
            let caller = if i % 3 == 0 {
                Caller::Frame
            } else {
                Caller::A0
            };
            remember(pc, caller);
            remember(pc, Caller::A0);
        }
        for (i, &pc) in sites.iter().enumerate() {
            let caller = if i % 3 == 0 {
                Caller::Frame
            } else {
                Caller::A0
            };
            assert_eq!(remembered(pc), Some(caller), "{pc:#x}");
        }
        assert_eq!(remembered(0x3000_0000), None);
        assert_eq!(remembered(0x4000_0001), None);
    }

    /// Little-endian bytes of instructions given as objdump shows them (16- or 32-bit).
    fn code(insns: &[u32]) -> Vec<u8> {
        let mut v = Vec::new();
        for &i in insns {
            if i & 3 == 3 {
                v.extend_from_slice(&i.to_le_bytes());
            } else {
                v.extend_from_slice(&(i as u16).to_le_bytes());
            }
        }
        v
    }

    /// Decodes `insns` as the bytes before a counting call's return address.
    fn frame(insns: &[u32]) -> Option<prologue::Frame> {
        let bytes = code(insns);
        let base = 0x1_0000;
        prologue::decode(&bytes, base, base + bytes.len())
    }

    const CALL: [u32; 2] = [0x0000_0097, 0x0000_80e7]; // auipc ra, 0; jalr ra
    const RET: u32 = 0x8082;

    fn with_call(prefix: &[u32]) -> Vec<u32> {
        let mut v = prefix.to_vec();
        v.extend_from_slice(&CALL);
        v
    }

    #[test]
    fn prologues_of_the_compilers() {
        let frame_of = |slot, a0_is_ra, s0_is_cfa| {
            Some(prologue::Frame {
                slot,
                a0_is_ra,
                s0_is_cfa,
            })
        };
        // gcc -O2 -pg: addi sp,sp,-16; sd ra,8(sp); sd s0,0(sp); mv s0,a0; mv a0,ra; call
        let gcc = [RET, 0x1141, 0xe406, 0xe022, 0x842a, 0x8506];
        assert_eq!(frame(&with_call(&gcc)), frame_of(8, true, false));
        // ... with the call relaxed to jal ra (a static link)
        let mut jal = gcc.to_vec();
        jal.push(0x8bbe_50ef);
        assert_eq!(frame(&jal), frame_of(8, true, false));
        // gcc -O2 -pg -fno-omit-frame-pointer: sd s0; sd ra; addi s0,sp,32 (c.addi4spn); ...
        let gcc_fp = [RET, 0x1101, 0xe822, 0xec06, 0x1000, 0xe426, 0x84aa, 0x8506];
        assert_eq!(frame(&with_call(&gcc_fp)), frame_of(24, true, true));
        // clang 14 -pg: a frame pointer, a0 an argument
        let clang = [RET, 0x1101, 0xec06, 0xe822, 0xe426, 0x1000, 0x84aa];
        assert_eq!(frame(&with_call(&clang)), frame_of(24, false, true));
        // gcc, a two-step frame whose constant is loaded before the first sp move:
        // lui t0,0xffffe; addi sp,sp,-32; addi t0,t0,208; sd ra,24(sp); sd s0,16(sp);
        // add sp,sp,t0; mv s0,a0; mv a0,ra
        let big = [
            RET,
            0x72f9,
            0x1101,
            0x0d02_8293,
            0xec06,
            0xe822,
            0x9116,
            0x842a,
            0x8506,
        ];
        assert_eq!(frame(&with_call(&big)), frame_of(8008, true, false));
        // clang, a two-step frame: addi sp,sp,-2032; sd ra,2024(sp); sd s0,2016(sp);
        // addi s0,sp,2032; lui a1,0x1; addiw a1,a1,-1088; sub sp,sp,a1; mv s1,a0
        let clang_big = [
            RET,
            0x8101_0113,
            0x7e11_3423,
            0x7e81_3023,
            0x7f01_0413,
            0x6585,
            0xbc05_859b,
            0x40b1_0133,
            0x84aa,
        ];
        assert_eq!(frame(&with_call(&clang_big)), frame_of(5032, false, true));
    }

    #[test]
    fn prologues_without_a_provable_slot() {
        // gcc, variadic: ra at 24(sp) of a 96-byte frame (below the register save area)
        let vari = [RET, 0x711d, 0xec06, 0xe822, 0x842a, 0x8506, 0xe4be, 0xf42e];
        assert_eq!(frame(&with_call(&vari)), None);
        // the slot overwritten after ra was stored: sd s0,8(sp)
        assert_eq!(
            frame(&with_call(&[RET, 0x1141, 0xe406, 0xe422, 0x8506])),
            None
        );
        // a store through an unknown address (it might hit the slot): sd a1,0(a0)
        assert_eq!(
            frame(&with_call(&[RET, 0x1141, 0xe406, 0xe10c, 0x8506])),
            None
        );
        // a branch between entry and call: beqz a0, .+4
        assert_eq!(
            frame(&with_call(&[RET, 0x1141, 0xe406, 0xc111, 0x8506])),
            None
        );
        // ra written before it was stored: mv ra,a1; sd ra,8(sp)
        assert_eq!(
            frame(&with_call(&[RET, 0x1141, 0x80ae, 0xe406, 0x8506])),
            None
        );
        // an sp move down before the entry: addi sp,sp,-48 then the gcc prologue (ra at the
        // top of the second allocation, not at the CFA - 8)
        let twice = [RET, 0x7179, 0x1141, 0xe406, 0xe022, 0x842a, 0x8506];
        assert_eq!(frame(&with_call(&twice)), None);
        // -msave-restore: call t0, __riscv_save_0 (jal t0); addi sp,sp,-16; mv a0,ra
        let save = [RET, 0x0000_02ef, 0x1141, 0x8506];
        assert_eq!(frame(&with_call(&save)), None);
        // no call before self_pc
        assert_eq!(frame(&[RET, 0x1141, 0xe406, 0x8506, 0x0001]), None);
        // sp not 16-byte aligned at the call: addi sp,sp,-8
        assert_eq!(frame(&with_call(&[RET, 0x1161, 0xe006, 0x8506])), None);
    }

    #[test]
    fn rules_remembered_once() {
        let pcs: Vec<usize> = (0..500).map(|i| 0x5000_0000 + i * 22).collect();
        for (i, &pc) in pcs.iter().enumerate() {
            remember_site(pc, (i * 8) << 3 | RULE_A0);
            remember_site(pc, RULE_NONE);
        }
        for (i, &pc) in pcs.iter().enumerate() {
            assert_eq!(remembered_site(pc), Some((i * 8) << 3 | RULE_A0), "{pc:#x}");
        }
        assert_eq!(remembered_site(0x4fff_fff0), None);
    }
}
