//! Per-thread state: the TLS block the trampolines read, and the registry of thread blocks
//! (each owning an arc-table chain) that the writer walks.
//!
//! A thread gets a block on its first counting call (slow path) and gives it back when it exits
//! (a pthread key destructor). A block given back keeps its counts; the next new thread claims
//! it and counts on into the same tables. Counts are per arc, not per thread, so this is how a
//! thread's arcs fold into the process total, at no cost, and why a program that starts a
//! million short threads uses as many blocks as it ever had threads alive at once.

use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use crate::arcs::{self, ArcTable};
use crate::sys;

/// This thread's state as the trampolines see it (`instrfn_tls` in `asm/<arch>.s`, 64 bytes of
/// initial-exec TLS). Field offsets are hard-coded in the assembly.
#[repr(C)]
pub struct Tls {
    /// The current table of `block`, or null before this thread's first slow path.
    pub table: *mut ArcTable,
    /// Nonzero while runtime code runs on this thread (set by the assembly only).
    pub guard: usize,
    /// The block this thread has claimed, or null.
    pub block: *mut ThreadBlock,
    _reserved: [usize; 5],
}

impl Tls {
    #[allow(dead_code)] // used by architectures without trampolines
    pub const EMPTY: Tls = Tls {
        table: ptr::null_mut(),
        guard: 0,
        block: ptr::null_mut(),
        _reserved: [0; 5],
    };
}

const _: () = assert!(core::mem::size_of::<Tls>() == 64);

const FREE: u32 = 0;
const LIVE: u32 = 1;

/// One thread's recording state, owned by at most one live thread at a time.
#[repr(C)]
pub struct ThreadBlock {
    /// Next block of the registry. Immutable once the block is published.
    next: *mut ThreadBlock,
    /// FREE or LIVE.
    state: AtomicU32,
    /// Current table of the chain (the owner replaces it when it grows; readers Acquire it).
    /// The tables count the calls they could not take themselves.
    pub table: AtomicPtr<ArcTable>,
}

/// Head of the registry: every block ever made, newest first. Blocks are never freed.
static BLOCKS: AtomicPtr<ThreadBlock> = AtomicPtr::new(ptr::null_mut());
/// Number of blocks in the registry.
static BLOCK_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Blocks claimed (for the verbose summary): once per thread, and once more for a thread that
/// counts again after its exit destructor gave its block back (a late destructor or signal
/// handler).
static CLAIMS: AtomicUsize = AtomicUsize::new(0);

/// Gives the calling thread a block: a free one from the registry, or a new one. Lock-free.
/// Returns null if no memory could be mapped.
pub fn claim_block(max_arcs: usize) -> *mut ThreadBlock {
    CLAIMS.fetch_add(1, Ordering::Relaxed);
    let mut b = BLOCKS.load(Ordering::Acquire);
    while !b.is_null() {
        // SAFETY: registry blocks are never freed; `next` is immutable after publication.
        let block = unsafe { &*b };
        if block.state.load(Ordering::Relaxed) == FREE
            && block
                .state
                .compare_exchange(FREE, LIVE, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return b;
        }
        b = block.next;
    }
    let Some(table) = ArcTable::create_first(max_arcs) else {
        return ptr::null_mut();
    };
    let Some(mem) = sys::map_zeroed(core::mem::size_of::<ThreadBlock>()) else {
        return ptr::null_mut();
    };
    let new = mem.cast::<ThreadBlock>().as_ptr();
    let mut head = BLOCKS.load(Ordering::Relaxed);
    loop {
        // SAFETY: `new` is a fresh mapping nobody else sees until the CAS below publishes it.
        unsafe {
            new.write(ThreadBlock {
                next: head,
                state: AtomicU32::new(LIVE),
                table: AtomicPtr::new(table),
            });
        }
        match BLOCKS.compare_exchange_weak(head, new, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => break,
            Err(h) => head = h,
        }
    }
    BLOCK_COUNT.fetch_add(1, Ordering::Relaxed);
    new
}

/// Gives a block back (its thread is exiting). Its counts stay for the writer and the next
/// owner.
pub fn release_block(block: *mut ThreadBlock) {
    // SAFETY: the caller owns this live block.
    unsafe { (*block).state.store(FREE, Ordering::Release) };
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
    for block in blocks() {
        if !ptr::eq(block, current) {
            block.state.store(FREE, Ordering::Relaxed);
        }
        arcs::zero_counts(block.table.load(Ordering::Relaxed));
    }
    CLAIMS.store(if current.is_null() { 0 } else { 1 }, Ordering::Relaxed);
}
