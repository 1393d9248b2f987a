//! Call-site caches the assembly probes too: an open-addressing table of sites keyed by the
//! call's return address (`self_pc`), with a small decision per site that one thread makes
//! and every thread then reads. The probe sequence is the fast path's: the home entry is the
//! top `bits` of `self_pc * HASH_MUL`, then linear. An entry's key word is claimed with a CAS
//! and never changes (removing it would break other sites' probe chains); at most half of the
//! entries are claimed, so every probe ends at an empty entry.
//!
//! Two shapes: one word per entry, the decision in the key's low `TAG` bits (`W` = 1), or two
//! words, the key then the decision, which may be replaced (`W` = 2, `TAG` = 0).

use core::sync::atomic::{AtomicUsize, Ordering};

use super::arcs::HASH_MUL;

#[cfg_attr(not(target_arch = "riscv64"), allow(dead_code))] // (riscv64's call sites)
pub struct Sites<const W: usize, const TAG: usize> {
    entries: &'static [[AtomicUsize; W]],
    bits: u32,
    /// Entries claimed.
    claimed: &'static AtomicUsize,
}

#[cfg_attr(not(target_arch = "riscv64"), allow(dead_code))] // (riscv64's call sites)
impl<const W: usize, const TAG: usize> Sites<W, TAG> {
    /// The table over `entries` (2^`bits` of them, defined in the assembly).
    pub fn new(
        entries: &'static [[AtomicUsize; W]],
        bits: u32,
        claimed: &'static AtomicUsize,
    ) -> Self {
        debug_assert!(entries.len() == 1 << bits && (W == 2 || TAG != 0));
        Sites {
            entries,
            bits,
            claimed,
        }
    }

    /// The entries to probe for `self_pc`, in order.
    fn probe(&self, self_pc: usize) -> impl Iterator<Item = &'static [AtomicUsize; W]> {
        let home = ((self_pc as u64).wrapping_mul(HASH_MUL) >> (64 - self.bits)) as usize;
        let entries = self.entries;
        (0..entries.len()).map(move |i| &entries[(home + i) % entries.len()])
    }

    /// The decision for `self_pc`, if some thread made it (and has written it).
    pub fn get(&self, self_pc: usize) -> Option<usize> {
        for e in self.probe(self_pc) {
            match e[0].load(Ordering::Acquire) {
                0 => return None,
                k if k & !TAG == self_pc => {
                    if W == 1 {
                        return Some(k & TAG);
                    }
                    let v = e[W - 1].load(Ordering::Acquire);
                    return (v != 0).then_some(v);
                }
                _ => {}
            }
        }
        None
    }

    /// Keeps `decision` for `self_pc`. One word per entry: the first decision stays (threads
    /// that race decide alike). Two words: the decision is replaced.
    pub fn put(&self, self_pc: usize, decision: usize) {
        if self_pc == 0
            || self_pc & TAG != 0
            || self.claimed.load(Ordering::Relaxed) >= self.entries.len() / 2
        {
            return;
        }
        let key = if W == 1 { self_pc | decision } else { self_pc };
        for e in self.probe(self_pc) {
            match e[0].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.claimed.fetch_add(1, Ordering::Relaxed);
                    if W == 2 {
                        e[1].store(decision, Ordering::Release);
                    }
                    return;
                }
                Err(k) if k & !TAG == self_pc => {
                    if W == 2 {
                        e[1].store(decision, Ordering::Release);
                    }
                    return;
                }
                Err(_) => {}
            }
        }
    }

    /// Drops the decisions of the sites in `[lo, hi)` (code unloaded by dlclose), so that code
    /// loaded there later is decided afresh. Two-word entries only: their keys stay.
    pub fn forget(&self, lo: usize, hi: usize) {
        if W != 2 {
            return;
        }
        for e in self.entries {
            if (lo..hi).contains(&e[0].load(Ordering::Acquire)) {
                e[1].store(0, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leak<const W: usize>(n: usize) -> &'static [[AtomicUsize; W]] {
        Vec::leak(
            (0..n)
                .map(|_| core::array::from_fn(|_| AtomicUsize::new(0)))
                .collect(),
        )
    }

    #[test]
    fn one_word_sites_keep_their_first_decision() {
        let s: Sites<1, 1> = Sites::new(leak(16), 4, Box::leak(Box::new(AtomicUsize::new(0))));
        assert_eq!(s.get(0x1000), None);
        s.put(0x1000, 1);
        s.put(0x1000, 0);
        assert_eq!(s.get(0x1000), Some(1));
        s.put(0x1002, 0);
        assert_eq!(s.get(0x1002), Some(0));
        s.put(0x1001, 1); // odd: no key
        assert_eq!(s.get(0x1001), None);
        // At most half the entries are claimed.
        for pc in (0x2000..0x2100).step_by(2) {
            s.put(pc, 0);
        }
        assert_eq!(s.claimed.load(Ordering::Relaxed), 8);
    }

    #[test]
    fn two_word_sites_are_replaced_and_forgotten() {
        let s: Sites<2, 0> = Sites::new(leak(16), 4, Box::leak(Box::new(AtomicUsize::new(0))));
        s.put(0x1000, 9);
        s.put(0x1000, 10);
        s.put(0x3000, 5);
        assert_eq!((s.get(0x1000), s.get(0x3000)), (Some(10), Some(5)));
        s.forget(0x1000, 0x2000);
        assert_eq!((s.get(0x1000), s.get(0x3000)), (None, Some(5)));
        s.put(0x1000, 11);
        assert_eq!(s.get(0x1000), Some(11));
        assert_eq!(s.claimed.load(Ordering::Relaxed), 2);
    }
}
