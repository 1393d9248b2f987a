//! Per-thread state: the registry of thread blocks that every output walks. A block holds
//! what one thread records: its arc-table chain, its pc samples, its sampling timer, its
//! alternate signal stack, and trace mode's chunks and shadow stack. Uses `sys`, `tables`
//! and `abi`.
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
use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

use crate::abi::Tls;
use crate::sys;
use crate::tables::arcs::{self, ArcTable};
use crate::tables::pcs::PcTable;

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
    /// Trace mode's state of the owner (crate::trace).
    pub trace: BlockTrace,
    /// FREE or LIVE.
    state: AtomicU32,
    /// Kernel thread id of the owner while LIVE.
    tid: AtomicU32,
    /// The owner's sampling timer (kernel timer id), or -1.
    pub timer: AtomicI32,
    /// The owner's pc samples (crate::gmon::sampler).
    pub samples: AtomicPtr<PcTable>,
    /// An alternate signal stack for the crash handler (crate::runtime::crash), mapped when
    /// first needed and handed on with the block.
    pub altstack: AtomicPtr<u8>,
    /// Current table of the chain (the owner replaces it when it grows; readers Acquire it).
    /// The tables count the calls they could not take themselves.
    pub table: AtomicPtr<ArcTable>,
}

/// Head of the registry: every block ever made, newest first. Blocks are never freed.
static BLOCKS: AtomicPtr<ThreadBlock> = AtomicPtr::new(ptr::null_mut());

/// Where a block's shadow stack mapping is, for code that walks the registry without Rust
/// (the return pads' unwind info, src/arch/<arch>/exit.s). A block's `next` is its first word.
pub const BLOCK_SHADOW: usize =
    core::mem::offset_of!(ThreadBlock, trace) + core::mem::offset_of!(BlockTrace, shadow);
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
    block.map_or(ptr::null_mut(), |b| ptr::from_ref(b).cast_mut())
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
                stop_timer(block);
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
                trace: BlockTrace::new(),
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
    stop_timer(block);
    block.tid.store(0, Ordering::Relaxed);
    block.state.store(FREE, Ordering::Release);
}

/// Deletes the sampling timer of a block's owner (it exited, or is gone).
fn stop_timer(block: &ThreadBlock) {
    let id = block.timer.swap(-1, Ordering::Relaxed);
    if id >= 0 {
        sys::signal::delete_timer(id);
    }
}

/// The block the thread of `tls` has claimed, if any.
pub fn block_of(tls: &Tls) -> Option<&'static ThreadBlock> {
    // SAFETY: `block` is null or a registry block, never freed.
    unsafe { tls.block.cast::<ThreadBlock>().as_ref() }
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

/// Calls lost because a new thread could not get a block (no memory).
static LOST_WITHOUT_BLOCK: AtomicU64 = AtomicU64::new(0);

/// Counts a call lost for want of a block.
pub fn count_lost_without_block() {
    LOST_WITHOUT_BLOCK.fetch_add(1, Ordering::Relaxed);
}

/// Calls lost because a new thread could not get a block.
pub fn lost_without_block() -> u64 {
    LOST_WITHOUT_BLOCK.load(Ordering::Relaxed)
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
    LOST_WITHOUT_BLOCK.store(0, Ordering::Relaxed);
}

/// What one thread's block holds for trace mode (crate::trace). Written by the owner (its slow
/// path), read by the exit writer.
#[repr(C)]
pub struct BlockTrace {
    /// The chunk being filled (mapped).
    pub chunk: AtomicUsize,
    /// The chunk filled before it, still mapped: a fast path that a signal handler
    /// interrupted between reserving its event and writing it may still write there (the
    /// handler's events then took the next chunk). At the next switch it goes to the collector,
    /// which unmaps it once all its events are written; `prev_end` is where they end.
    pub prev: AtomicUsize,
    pub prev_end: AtomicUsize,
    /// A chunk due to go to the collector while the owner's `trace_pin` held it, and where
    /// its events end.
    pub pinned: AtomicUsize,
    pub pinned_end: AtomicUsize,
    /// The next sequence number of this slot's chunks.
    pub seq: AtomicU64,
    /// Events lost on this slot in total (for the meta file).
    pub lost: AtomicU64,
    /// The shadow stack mapping (reused by the next owner).
    pub shadow: AtomicUsize,
    /// Where the previous owner stopped writing in `chunk`, and its end (0: start afresh).
    pub pos: AtomicUsize,
    pub end: AtomicUsize,
    /// The owner's sink once the trace is full (mapped when first needed and kept with the
    /// block).
    pub sink: AtomicUsize,
    /// Ring mode: the block's ring mapping (0: not made yet; 1: it could not be made).
    pub ring: AtomicUsize,
}

impl BlockTrace {
    pub const fn new() -> BlockTrace {
        BlockTrace {
            chunk: AtomicUsize::new(0),
            prev: AtomicUsize::new(0),
            prev_end: AtomicUsize::new(0),
            pinned: AtomicUsize::new(0),
            pinned_end: AtomicUsize::new(0),
            seq: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            shadow: AtomicUsize::new(0),
            pos: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            sink: AtomicUsize::new(0),
            ring: AtomicUsize::new(0),
        }
    }
}
