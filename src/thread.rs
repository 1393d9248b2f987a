//! Per-thread state: the TLS block the trampolines read, and the registry of thread blocks
//! (each owning an arc-table chain) that the writer walks.
//!
//! A thread gets a block on its first counting call (slow path) and gives it back when it exits
//! (a pthread key destructor). A block given back keeps its counts; the next new thread claims
//! it and counts on into the same tables. Counts are per arc, not per thread, so this is how a
//! thread's arcs fold into the process total, at no cost, and why a program that starts a
//! million short threads uses as many blocks as it ever had threads alive at once.
//!
//! A thread whose exit the destructor cannot report (glibc may allocate to store a pthread key
//! value of index 32 or more, which a signal handler must not risk: then the key is not set)
//! keeps its block until a new thread finds no free block: the new thread then takes over the
//! block of a thread that no longer exists (`tgkill(pid, tid, 0)` fails with ESRCH).

use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use crate::arcs::{self, ArcTable};
use crate::sampler::{self, PcTable};
use crate::sys;

/// This thread's state as the trampolines see it (`instrfn_tls` in `asm/data.s`, 160 bytes of
/// initial-exec TLS). The assembly addresses the fields through the `TLS_*` operands of
/// `trampoline_asm!` (src/arch/mod.rs).
#[repr(C)]
pub struct Tls {
    /// The current table of `block`, or null before this thread's first slow path.
    pub table: *mut ArcTable,
    /// Nonzero while runtime code runs on this thread (set by the assembly only).
    pub guard: usize,
    /// The block this thread has claimed, or null.
    pub block: *mut ThreadBlock,
    /// Trace mode (src/trace.rs): where this thread's next event goes, in its current chunk;
    /// the trampolines reserve 16 bytes with one read-modify-write instruction.
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
    /// put back (src/trace.rs): 1, the next event puts the exit trampoline back into the frames
    /// that are still alive; 2, a backtrace is walking right now.
    pub unwound: usize,
    /// This thread's alternate signal stack, [lo, hi) (0, 0 if none known): frames there are
    /// not compared with frames on the thread's own stack.
    pub alt_lo: usize,
    pub alt_hi: usize,
    /// While a backtrace walks (`unwound` 2): the shadow stack top when it began; the entries
    /// below are the walked frames, left alone until it is done.
    pub walk_base: usize,
    /// This thread's own stack, [lo, hi) (src/trace.rs `own_stack`; 0, 0 until needed):
    /// frames elsewhere (coroutine stacks of swapcontext and the like) are never compared
    /// with frames on it.
    pub stack_lo: usize,
    pub stack_hi: usize,
    /// Calls trace mode left out at record time (INSTRFN_MIN_DURATION), not yet reported.
    pub dropped: usize,
    /// Compact events (src/trace.rs `layout`): the current chunk's time base and code base,
    /// copies of its header's (docs/trace-format.md). A short event stores its time and its
    /// function relative to them; the trampolines read them before they reserve the event
    /// (a handler that gives the thread a new chunk meanwhile moves `trace_pos`, and the
    /// reservation is tried again).
    pub trace_tbase: u64,
    pub trace_cbase: usize,
    /// The end of the chunk an exit trampoline is making a call word in (MERGE_CALL in
    /// asm/x86_64.s, asm/aarch64.s and asm/riscv64.s, S390_MERGE in asm/s390x.s; 0: none; 1
    /// with INSTRFN_CALL_WORDS=off): while it is set, a signal handler that interrupted it and
    /// fills chunks does not retire that one (src/trace.rs `retire_chunk`), so the word's store
    /// can never land in a chunk already committed and reused.
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

/// Bytes of the Tls block (asm/data.s reserves as many).
pub const TLS_BYTES: usize = 160;
const _: () = assert!(core::mem::size_of::<Tls>() == TLS_BYTES);

const FREE: u32 = 0;
const LIVE: u32 = 1;

/// One thread's recording state, owned by at most one live thread at a time.
#[repr(C)]
pub struct ThreadBlock {
    /// Next block of the registry. Immutable once the block is published.
    next: *mut ThreadBlock,
    /// Its number, 0, 1, 2, … in the order blocks were made (trace mode's event slot).
    /// Immutable.
    pub index: u32,
    /// Trace mode's state of the owner (src/trace.rs).
    pub trace: crate::trace::BlockTrace,
    /// FREE or LIVE.
    state: AtomicU32,
    /// Kernel thread id of the owner while LIVE.
    tid: AtomicU32,
    /// The owner's sampling timer (kernel timer id), or -1.
    pub timer: AtomicI32,
    /// The owner's pc samples (src/sampler.rs).
    pub samples: AtomicPtr<PcTable>,
    /// An alternate signal stack for the crash handler (src/crash.rs), mapped when first
    /// needed and handed on with the block.
    altstack: AtomicPtr<u8>,
    /// Current table of the chain (the owner replaces it when it grows; readers Acquire it).
    /// The tables count the calls they could not take themselves.
    pub table: AtomicPtr<ArcTable>,
}

/// Head of the registry: every block ever made, newest first. Blocks are never freed.
static BLOCKS: AtomicPtr<ThreadBlock> = AtomicPtr::new(ptr::null_mut());

/// Where a block's shadow stack mapping is, for code that walks the registry without Rust
/// (the return pads' unwind info, asm/<arch>.s). A block's `next`
/// is its first word.
pub const BLOCK_SHADOW: usize =
    core::mem::offset_of!(ThreadBlock, trace) + crate::trace::BlockTrace::SHADOW_OFFSET;
const _: () = assert!(core::mem::offset_of!(ThreadBlock, next) == 0);

/// The registry's layout, for code that walks it without Rust: the address of its head, and
/// the offsets of a block's `next` and of its shadow stack mapping.
pub fn registry_layout() -> (usize, usize, usize) {
    (ptr::addr_of!(BLOCKS) as usize, 0, BLOCK_SHADOW)
}
/// Number of blocks in the registry.
static BLOCK_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Set once a thread could not register for the exit destructor: from then on a new thread
/// that finds no free block looks for blocks of dead threads.
static ORPHANS_POSSIBLE: AtomicBool = AtomicBool::new(false);
/// Blocks claimed (for the verbose summary): once per thread, and once more for a thread that
/// counts again after its exit destructor gave its block back (a late destructor or signal
/// handler).
static CLAIMS: AtomicUsize = AtomicUsize::new(0);

/// Gives the calling thread a block: a free one from the registry, else one whose owner has
/// died without giving it back, else a new one. Lock-free, raw system calls only. Returns null
/// if no memory could be mapped.
pub fn claim_block(max_arcs: usize) -> *mut ThreadBlock {
    CLAIMS.fetch_add(1, Ordering::Relaxed);
    let me = sys::gettid();
    let claimed = claim_free(me).or_else(|| {
        ORPHANS_POSSIBLE
            .load(Ordering::Relaxed)
            .then(|| claim_orphan(me))
            .flatten()
    });
    let block = claimed.or_else(|| new_block(me, max_arcs));
    if let Some(block) = block {
        thread_started(block);
    }
    block.map_or(ptr::null_mut(), |b| ptr::from_ref(b).cast_mut())
}

/// What a thread needs once it owns `block`: its sampling timer, and an alternate signal stack
/// for the crash handler.
fn thread_started(block: &ThreadBlock) {
    sampler::thread_started(&block.timer);
    if crate::crash::wants_alt_stack() {
        let mut stack = block.altstack.load(Ordering::Relaxed);
        if stack.is_null()
            && let Some(mem) = sys::map_zeroed(crate::crash::ALT_STACK_BYTES)
        {
            stack = mem.as_ptr();
            block.altstack.store(stack, Ordering::Relaxed);
        }
        if !stack.is_null() {
            crate::crash::use_alt_stack(stack);
        }
    }
}

fn claim_free(me: u32) -> Option<&'static ThreadBlock> {
    blocks().find(|block| {
        block.state.load(Ordering::Relaxed) == FREE
            && block
                .state
                .compare_exchange(FREE, LIVE, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            && {
                block.tid.store(me, Ordering::Relaxed);
                true
            }
    })
}

/// A LIVE block whose owner thread is gone. Its tid is replaced by ours with a compare and
/// swap, so two new threads never take the same one. A block carrying our own tid belongs to
/// a dead thread too (tids are unique among live threads).
fn claim_orphan(me: u32) -> Option<&'static ThreadBlock> {
    blocks().find(|block| {
        let tid = block.tid.load(Ordering::Relaxed);
        block.state.load(Ordering::Relaxed) == LIVE
            && tid != 0
            && (tid == me || !sys::thread_alive(tid))
            && block
                .tid
                .compare_exchange(tid, me, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            && {
                sampler::thread_ended(&block.timer);
                true
            }
    })
}

fn new_block(me: u32, max_arcs: usize) -> Option<&'static ThreadBlock> {
    let table = ArcTable::create_first(max_arcs)?;
    let mem = sys::map_zeroed(core::mem::size_of::<ThreadBlock>())?;
    let index = BLOCK_COUNT.fetch_add(1, Ordering::Relaxed) as u32;
    let new = mem.cast::<ThreadBlock>().as_ptr();
    let mut head = BLOCKS.load(Ordering::Relaxed);
    loop {
        // SAFETY: `new` is a fresh mapping nobody else sees until the CAS below publishes it.
        unsafe {
            new.write(ThreadBlock {
                next: head,
                index,
                trace: crate::trace::BlockTrace::new(),
                state: AtomicU32::new(LIVE),
                tid: AtomicU32::new(me),
                timer: AtomicI32::new(-1),
                samples: AtomicPtr::new(ptr::null_mut()),
                altstack: AtomicPtr::new(ptr::null_mut()),
                table: AtomicPtr::new(table),
            });
        }
        match BLOCKS.compare_exchange_weak(head, new, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => break,
            Err(h) => head = h,
        }
    }
    // SAFETY: published and never freed.
    Some(unsafe { &*new })
}

/// Notes that a thread's exit will not be reported (see the module documentation).
pub fn exit_unreported() {
    ORPHANS_POSSIBLE.store(true, Ordering::Relaxed);
}

/// Gives a block back (its thread is exiting). Its counts stay for the writer and the next
/// owner.
pub fn release_block(block: *mut ThreadBlock) {
    // SAFETY: the caller owns this live block.
    let block = unsafe { &*block };
    sampler::thread_ended(&block.timer);
    block.tid.store(0, Ordering::Relaxed);
    block.state.store(FREE, Ordering::Release);
}

/// Every block in the registry, live or free.
pub fn blocks() -> impl Iterator<Item = &'static ThreadBlock> {
    let mut b = BLOCKS.load(Ordering::Acquire);
    core::iter::from_fn(move || {
        if b.is_null() {
            return None;
        }
        // SAFETY: registry blocks are never freed.
        let block = unsafe { &*b };
        b = block.next;
        Some(block)
    })
}

/// (blocks made, claims).
pub fn block_stats() -> (usize, usize) {
    (
        BLOCK_COUNT.load(Ordering::Relaxed),
        CLAIMS.load(Ordering::Relaxed),
    )
}

/// In the child after fork: only the forking thread exists. Every other block is freed, and
/// every count and loss is set to zero.
pub fn reset_after_fork(current: *mut ThreadBlock) {
    let me = sys::gettid();
    for block in blocks() {
        if ptr::eq(block, current) {
            block.tid.store(me, Ordering::Relaxed);
        } else {
            block.state.store(FREE, Ordering::Relaxed);
            block.tid.store(0, Ordering::Relaxed);
        }
        arcs::zero_counts(block.table.load(Ordering::Relaxed));
    }
    CLAIMS.store(if current.is_null() { 0 } else { 1 }, Ordering::Relaxed);
}
