//! Per-thread pc tables: open addressing over a sampled pc with its count (the gmon
//! histogram's samples). Only the owning thread's SIGPROF handler writes a table, and it never
//! nests (it runs with every signal blocked); other threads read with atomics.

use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use super::arcs::HASH_MUL;
use super::chain::{Linked, chain, map_table};

/// Slots in a thread's first pc table.
const FIRST_CAPACITY: usize = 1024;
/// Distinct pcs one thread's table chain takes; samples of further pcs are counted as lost.
pub const MAX_PCS: usize = 1 << 18;

/// One sampled pc: `pc` 0 means empty.
#[repr(C)]
struct PcSlot {
    pc: AtomicUsize,
    count: AtomicU64,
}

/// A pc table; `capacity` slots follow the header. A full table is replaced by a larger one
/// with the same keys (chain.rs), and keeps the counts it collected.
#[repr(C)]
pub struct PcTable {
    capacity: usize,
    shift: u32,
    len: AtomicUsize,
    prev: *mut PcTable,
    /// Samples (weights) that found no room.
    lost: AtomicU64,
}

const HEADER: usize = core::mem::size_of::<PcTable>().next_multiple_of(16);

impl Linked for PcTable {
    fn prev(&self) -> *mut PcTable {
        self.prev
    }
}

impl PcTable {
    fn create(capacity: usize, prev: *mut PcTable) -> *mut PcTable {
        let Some(t) = map_table::<PcTable>(HEADER, capacity, core::mem::size_of::<PcSlot>()) else {
            return ptr::null_mut();
        };
        let t = t.as_ptr();
        // SAFETY: a fresh, zeroed, page-aligned mapping large enough for the header.
        unsafe {
            t.write(PcTable {
                capacity,
                shift: 64 - capacity.trailing_zeros(),
                len: AtomicUsize::new(0),
                prev,
                lost: AtomicU64::new(0),
            })
        };
        t
    }

    fn slot(&self, i: usize) -> &PcSlot {
        debug_assert!(i < self.capacity);
        // SAFETY: i < capacity keeps the slot inside the mapping made by `create`.
        unsafe {
            &*ptr::from_ref(self)
                .cast::<u8>()
                .add(HEADER)
                .cast::<PcSlot>()
                .add(i)
        }
    }

    /// The slot of `pc`, adding it if there is room (at most half full).
    fn find_or_add(&self, pc: usize) -> Option<&PcSlot> {
        let mask = self.capacity - 1;
        let mut i = ((pc as u64).wrapping_mul(HASH_MUL) >> self.shift) as usize;
        loop {
            let slot = self.slot(i);
            match slot.pc.load(Ordering::Relaxed) {
                0 => break,
                p if p == pc => return Some(slot),
                _ => i = (i + 1) & mask,
            }
        }
        let len = self.len.load(Ordering::Relaxed);
        if (len + 1) * 2 > self.capacity {
            return None;
        }
        let slot = self.slot(i);
        slot.count.store(0, Ordering::Relaxed);
        slot.pc.store(pc, Ordering::Release);
        self.len.store(len + 1, Ordering::Relaxed);
        Some(slot)
    }
}

/// Adds `weight` samples at `pc` to the chain at `head`. Only by the owning thread's handler.
/// Returns false when no table could be mapped (the caller counts the loss).
pub fn add_sample(head: &AtomicPtr<PcTable>, pc: usize, weight: u64) -> bool {
    let mut t = head.load(Ordering::Relaxed);
    if t.is_null() {
        t = PcTable::create(FIRST_CAPACITY, ptr::null_mut());
        if t.is_null() {
            return false;
        }
        head.store(t, Ordering::Release);
    }
    // SAFETY: a table of this chain, never unmapped.
    let tab = unsafe { &*t };
    let slot = match tab.find_or_add(pc) {
        Some(slot) => slot,
        None if tab.capacity * 4 <= 2 * MAX_PCS => {
            let grown = PcTable::create(tab.capacity * 4, t);
            if grown.is_null() {
                tab.lost.fetch_add(weight, Ordering::Relaxed);
                return true;
            }
            // SAFETY: just created, not yet visible to anybody.
            let new = unsafe { &*grown };
            for i in 0..tab.capacity {
                let p = tab.slot(i).pc.load(Ordering::Relaxed);
                if p != 0 {
                    let _ = new.find_or_add(p);
                }
            }
            head.store(grown, Ordering::Release);
            match new.find_or_add(pc) {
                Some(slot) => slot,
                None => return true,
            }
        }
        None => {
            tab.lost.fetch_add(weight, Ordering::Relaxed);
            return true;
        }
    };
    slot.count.store(
        slot.count.load(Ordering::Relaxed) + weight,
        Ordering::Release,
    );
    true
}

/// Calls `f(pc, count)` for every sample of a chain (a pc may come from several tables).
pub fn for_each_sample(head: &AtomicPtr<PcTable>, mut f: impl FnMut(usize, u64)) {
    for tab in chain(head.load(Ordering::Acquire)) {
        for i in 0..tab.capacity {
            let slot = tab.slot(i);
            let pc = slot.pc.load(Ordering::Acquire);
            if pc == 0 {
                continue;
            }
            let n = slot.count.load(Ordering::Acquire);
            if n != 0 {
                f(pc, n);
            }
        }
    }
}

/// Distinct pcs in a chain (an upper bound for [`for_each_sample`] when read before it).
pub fn chain_len(head: &AtomicPtr<PcTable>) -> usize {
    chain(head.load(Ordering::Acquire))
        .map(|t| t.len.load(Ordering::Relaxed))
        .sum()
}

/// Samples that found no room in a chain.
pub fn chain_lost(head: &AtomicPtr<PcTable>) -> u64 {
    chain(head.load(Ordering::Acquire))
        .map(|t| t.lost.load(Ordering::Relaxed))
        .sum()
}

/// Zeroes every count of a chain (the child after fork: no other thread exists).
pub fn zero(head: &AtomicPtr<PcTable>) {
    for tab in chain(head.load(Ordering::Relaxed)) {
        for i in 0..tab.capacity {
            tab.slot(i).count.store(0, Ordering::Relaxed);
        }
        tab.lost.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pc_tables_count_exactly_across_growth() {
        let head = AtomicPtr::new(ptr::null_mut());
        for pc in 1..=20_000usize {
            assert!(add_sample(&head, pc * 4, pc as u64 % 5 + 1));
        }
        let mut got = std::collections::BTreeMap::new();
        for_each_sample(&head, |pc, n| *got.entry(pc).or_insert(0) += n);
        assert_eq!(got.len(), 20_000);
        assert!(got.iter().all(|(pc, n)| *n == (pc / 4) as u64 % 5 + 1));
        assert_eq!(chain_lost(&head), 0);
    }
}
