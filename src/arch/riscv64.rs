//! riscv64 (LP64D psABI): `call _mcount` after the prologue, so self_pc = ra; from_pc is in a0
//! (gcc's `mv a0, ra`, rustc) or only at -8(s0) (clang 14, which leaves an argument in a0).
//! Which one is decided once per call site by [`instrfn_riscv64_slow_path`] and kept in the
//! thread's arc table as a marker the fast path looks up. There is no `__fentry__` on riscv64.
//! The routines, their register contracts and the decision rule are in `asm/riscv64.s`.
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
    "../../asm/riscv64.s";
    MARK_FRAME = const MARK_FRAME,
    MARK_A0 = const MARK_A0,
    STK_LO = const offset_of!(StackBounds, lo),
    STK_HI = const offset_of!(StackBounds, hi),
    STK_SIZE = const size_of::<StackBounds>(),
    DEC_BITS = const DECIDED_BITS,
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

/// The body of a naked function that continues at `$f` with every register but t1 (the
/// `tail` pseudo-instruction's scratch, caller-saved) as it came.
#[allow(unused_macros)] // only glibc targets have wrappers (src/interpose.rs)
macro_rules! tail_call {
    ($f:path) => {
        naked!(".cfi_startproc", "tail {f}", ".cfi_endproc", f = sym $f)
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
}

/// Trace mode is not yet available on this architecture: INSTRFN_MODE=trace writes gmon.out.
pub const TRACE_SUPPORTED: bool = false;
/// The trace clock (docs/trace-format.md).
pub const CLOCK_NAME: &str = "time";

/// The trace clock now.
#[inline]
pub fn counter() -> u64 {
    let v: u64;
    // SAFETY: reads the system counter; no memory is touched.
    unsafe { core::arch::asm!("rdtime {v}", v = out(reg) v, options(nomem, nostack)) };
    v
}

/// Where instrumented functions return to in trace mode (none yet here).
pub fn exit_trampoline() -> usize {
    0
}

/// Whether trace mode may replace the return address `ret` with the exit trampoline (else the
/// call is recorded as an entry without exit).
pub fn replaceable(_ret: usize) -> bool {
    true
}
