//! Per-thread call-arc tables: open addressing over `(from_pc, self_pc)` with exact 64-bit
//! counts.
//!
//! The trampolines search and count in a table without any Rust code (the fast path); this
//! module inserts new arcs and grows tables on the slow path, and lets the gmon writer read
//! every table while its owner keeps counting.
//!
//! Ownership and concurrency:
//! - Only the owning thread writes a table (its trampolines and its slow path). The slow path
//!   runs with all signals blocked, so insertions and growth never interleave with each other.
//! - A signal handler on the owning thread may count while the interrupted code is anywhere in
//!   a fast path. Counting is a single read-modify-write instruction on a slot that never
//!   moves, and growth never frees or clears the old table: counts that land in a table after
//!   it was replaced are still summed by readers. So no count is ever lost or torn.
//! - Other threads (the writer) read with atomic loads. A slot inserted here publishes its
//!   `self_pc` last (Release); one inserted by the x86_64 trampolines claims `self_pc` first
//!   and stores `from_pc` before the count. So readers load `self_pc`, then the count
//!   (Acquire), then `from_pc`, and skip slots whose count is 0: a slot they use is complete.
//!   A signal handler nested in a trampoline's insert may see a claimed slot whose `from_pc`
//!   is not written yet; it takes it for another arc and inserts its own elsewhere, which at
//!   worst leaves one arc in two slots, summed by readers.

use core::mem::size_of;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::sys;

/// Bytes from the table header to the first slot. The trampolines hard-code it.
pub const SLOTS_OFFSET: usize = 64;
/// Size of one slot. The trampolines hard-code it (the mask is a byte-offset mask).
pub const SLOT_BYTES: usize = 32;
/// Slots in a thread's first table.
pub const INITIAL_CAPACITY: usize = 256;
/// The multiplier of the slot hash. The trampolines hard-code it.
const HASH_MUL: u64 = 0x5bd1_e995;

/// One arc. Field offsets are hard-coded in every `asm/<arch>.s`.
#[repr(C)]
pub struct Slot {
    /// The callee's pc (the return address of its counting call); 0 = empty slot.
    pub self_pc: AtomicUsize,
    /// The caller's pc (the callee's return address).
    pub from_pc: AtomicUsize,
    /// Calls counted. The owner adds with a plain read-modify-write; readers load atomically.
    pub count: AtomicU64,
    _unused: u64,
}

/// Header of a table; `capacity` slots follow at [`SLOTS_OFFSET`].
#[repr(C)]
pub struct ArcTable {
    /// `(capacity - 1) * SLOT_BYTES`, read by the trampolines. Immutable.
    mask: usize,
    /// Number of slots, a power of two. Immutable.
    capacity: usize,
    /// Occupied slots; in range `0 ..= capacity / 2 + (signal handlers nested in an insert)`.
    /// Written by the owner only (trampoline inserts add one with a single instruction).
    len: AtomicUsize,
    /// The table this one replaced, which keeps the counts it collected; null for the first.
    /// Immutable.
    prev: *mut ArcTable,
    /// `capacity / 2`: the trampolines insert new arcs themselves while `len` is below it,
    /// and leave growth to the slow path. Immutable.
    limit: usize,
    _pad: [usize; 3],
}

const _: () = assert!(size_of::<ArcTable>() == SLOTS_OFFSET);
const _: () = assert!(size_of::<Slot>() == SLOT_BYTES);
const _: () = assert!(
    size_of::<usize>() == 8,
    "instrfn supports 64-bit targets only"
);

/// The slot byte offset at which probing for `(from_pc, self_pc)` starts, before masking.
/// Must stay identical to the hash in every `asm/<arch>.s`.
#[inline]
pub fn hash(from_pc: usize, self_pc: usize) -> usize {
    let k = (from_pc as u64).rotate_left(32) ^ self_pc as u64;
    (k.wrapping_mul(HASH_MUL) >> 27) as usize
}

/// What [`insert`] did.
pub enum Insert {
    /// The arc was counted (new or found).
    Counted,
    /// The arc was counted in a new, larger table, which the caller must publish.
    Grew(*mut ArcTable),
    /// The table is at its size limit or memory ran out: the call was not counted.
    Full,
}

impl ArcTable {
    /// Maps a new, empty table with `capacity` slots (a power of two).
    pub fn create(capacity: usize, prev: *mut ArcTable) -> Option<*mut ArcTable> {
        debug_assert!(capacity.is_power_of_two());
        let map_len = SLOTS_OFFSET + capacity * SLOT_BYTES;
        let table = sys::map_zeroed(map_len)?.cast::<ArcTable>().as_ptr();
        // SAFETY: the mapping is fresh, zeroed, large enough and page-aligned.
        unsafe {
            table.write(ArcTable {
                mask: (capacity - 1) * SLOT_BYTES,
                capacity,
                len: AtomicUsize::new(0),
                prev,
                limit: capacity / 2,
                _pad: [0; 3],
            });
        }
        Some(table)
    }

    fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    fn slot(&self, offset: usize) -> &Slot {
        debug_assert!(offset <= self.mask && offset.is_multiple_of(SLOT_BYTES));
        // SAFETY: offset <= mask keeps the slot inside the mapping made by `create`.
        unsafe {
            &*ptr::from_ref(self)
                .cast::<u8>()
                .add(SLOTS_OFFSET + offset)
                .cast::<Slot>()
        }
    }

    /// All slots, occupied or not.
    pub fn slots(&self) -> impl Iterator<Item = &Slot> {
        (0..self.capacity).map(move |i| self.slot(i * SLOT_BYTES))
    }

    /// The slot of `(from_pc, self_pc)`, or `Err(offset of the empty slot where it belongs)`.
    fn find(&self, from_pc: usize, self_pc: usize) -> Result<&Slot, usize> {
        let mut offset = hash(from_pc, self_pc);
        loop {
            offset &= self.mask;
            let slot = self.slot(offset);
            let s = slot.self_pc.load(Ordering::Relaxed);
            if s == 0 {
                return Err(offset);
            }
            if s == self_pc && slot.from_pc.load(Ordering::Relaxed) == from_pc {
                return Ok(slot);
            }
            offset += SLOT_BYTES;
        }
    }

    /// Adds the key without counting, into a table that has room (used when growing).
    fn put_key(&self, from_pc: usize, self_pc: usize) -> Option<&Slot> {
        match self.find(from_pc, self_pc) {
            Ok(slot) => Some(slot),
            Err(_) if (self.len() + 1) * 2 > self.capacity => None,
            Err(offset) => {
                let slot = self.slot(offset);
                slot.from_pc.store(from_pc, Ordering::Relaxed);
                slot.count.store(0, Ordering::Relaxed);
                // Publishes the slot to readers on other threads (and to the fast path).
                slot.self_pc.store(self_pc, Ordering::Release);
                self.len.store(self.len() + 1, Ordering::Relaxed);
                Some(slot)
            }
        }
    }
}

/// Counts one call of `(from_pc, self_pc)` in `table`, the owner's current table. Called by
/// the owner only, with signals blocked. When `table` is half full it is replaced by one
/// `GROWTH` times larger holding the same keys (the old one keeps its counts), up to
/// `max_capacity` slots.
pub fn insert(table: &ArcTable, from_pc: usize, self_pc: usize, max_capacity: usize) -> Insert {
    const GROWTH: usize = 4;
    if let Some(slot) = table.put_key(from_pc, self_pc) {
        bump(slot);
        return Insert::Counted;
    }
    let capacity = table.capacity * GROWTH;
    if capacity > max_capacity {
        return Insert::Full;
    }
    let Some(grown) = ArcTable::create(capacity, ptr::from_ref(table).cast_mut()) else {
        return Insert::Full;
    };
    // SAFETY: create returned a valid table that nobody else references yet.
    let new = unsafe { &*grown };
    for slot in table.slots() {
        let s = slot.self_pc.load(Ordering::Relaxed);
        if s != 0 {
            // Cannot fail: the new table is GROWTH times larger than a half-full one.
            let _ = new.put_key(slot.from_pc.load(Ordering::Relaxed), s);
        }
    }
    match new.put_key(from_pc, self_pc) {
        Some(slot) => bump(slot),
        None => return Insert::Full,
    }
    Insert::Grew(grown)
}

/// Adds one to a slot's count. The owner is the only writer, so load + store is exact; it is
/// not torn by a signal handler because the slow path runs with signals blocked.
fn bump(slot: &Slot) {
    slot.count
        .store(slot.count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// Empties `table` (keys and counts). Only by its owner, for benchmarks: a reader running
/// meanwhile may miss arcs.
pub fn clear(table: &ArcTable) {
    for slot in table.slots() {
        slot.self_pc.store(0, Ordering::Relaxed);
        slot.from_pc.store(0, Ordering::Relaxed);
        slot.count.store(0, Ordering::Relaxed);
    }
    table.len.store(0, Ordering::Relaxed);
}

/// Zeroes every count of `table` and of the tables it replaced (keys stay). Only for a state
/// no other thread can touch (the child after fork).
pub fn zero_counts(table: *mut ArcTable) {
    let mut t = table;
    while !t.is_null() {
        // SAFETY: tables are never unmapped; t came from a table chain.
        let tab = unsafe { &*t };
        for slot in tab.slots() {
            slot.count.store(0, Ordering::Relaxed);
        }
        t = tab.prev;
    }
}

/// Calls `f(from_pc, self_pc, count)` for every arc with a nonzero count in `table` and the
/// tables it replaced. Safe to run while the owner keeps counting: every value read is one the
/// owner wrote.
pub fn for_each_arc(head: &AtomicPtr<ArcTable>, mut f: impl FnMut(usize, usize, u64)) {
    let mut t = head.load(Ordering::Acquire);
    while !t.is_null() {
        // SAFETY: tables are never unmapped; the Acquire load (or the immutable prev link of a
        // table so loaded) makes its header visible.
        let tab = unsafe { &*t };
        for slot in tab.slots() {
            let s = slot.self_pc.load(Ordering::Acquire);
            if s == 0 {
                continue;
            }
            let count = slot.count.load(Ordering::Acquire);
            if count != 0 {
                f(slot.from_pc.load(Ordering::Relaxed), s, count);
            }
        }
        t = tab.prev;
    }
}

/// Counts arcs (keys) in a chain, an upper bound for [`for_each_arc`] callbacks.
pub fn chain_len(head: &AtomicPtr<ArcTable>) -> usize {
    let mut n = 0;
    let mut t = head.load(Ordering::Acquire);
    while !t.is_null() {
        // SAFETY: as in for_each_arc.
        let tab = unsafe { &*t };
        n += tab.capacity / 2;
        t = tab.prev;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(head: &AtomicPtr<ArcTable>) -> Vec<(usize, usize, u64)> {
        let mut v = Vec::new();
        for_each_arc(head, |f, s, c| v.push((f, s, c)));
        v.sort();
        // Sum the same key across tables, as the writer does.
        let mut out: Vec<(usize, usize, u64)> = Vec::new();
        for (f, s, c) in v {
            match out.last_mut() {
                Some(last) if last.0 == f && last.1 == s => last.2 += c,
                _ => out.push((f, s, c)),
            }
        }
        out
    }

    #[test]
    fn counts_exactly_across_growth() {
        let first = ArcTable::create(INITIAL_CAPACITY, ptr::null_mut()).unwrap();
        let head = AtomicPtr::new(first);
        let mut expected = Vec::new();
        for k in 1..=5000usize {
            let from = 0x40_0000 + k * 16;
            let self_pc = 0x50_0000 + (k % 97) * 8;
            let calls = (k % 7) as u64 + 1;
            for _ in 0..calls {
                // SAFETY: head holds a valid table.
                let cur = unsafe { &*head.load(Ordering::Relaxed) };
                match insert(cur, from, self_pc, 1 << 20) {
                    Insert::Counted => {}
                    Insert::Grew(t) => head.store(t, Ordering::Release),
                    Insert::Full => panic!("table full"),
                }
            }
            expected.push((from, self_pc, calls));
        }
        expected.sort();
        assert_eq!(collect(&head), expected);
    }

    #[test]
    fn full_table_reports_loss() {
        let first = ArcTable::create(4, ptr::null_mut()).unwrap();
        // SAFETY: valid table.
        let t = unsafe { &*first };
        assert!(matches!(insert(t, 1, 2, 4), Insert::Counted));
        assert!(matches!(insert(t, 3, 4, 4), Insert::Counted));
        assert!(matches!(insert(t, 5, 6, 4), Insert::Full));
        // An arc already present is still counted.
        assert!(matches!(insert(t, 1, 2, 4), Insert::Counted));
    }
}
