//! What every thread recorded, gathered for a write: all arcs, merged and sorted, and all pc
//! samples, in scratch memory mapped for the purpose (the writers run at exit, in signal
//! handlers and in fork children: no heap).

use core::ptr::NonNull;

use crate::sys;
use crate::tables::{arcs, pcs};
use crate::thread;

#[derive(Clone, Copy)]
#[repr(C)]
pub struct Arc {
    pub from: usize,
    pub to: usize,
    pub count: u64,
}

/// One sampled pc and its samples.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Sample {
    pub pc: usize,
    pub count: u64,
}

/// Memory mapped for one write and unmapped when dropped.
pub struct Scratch<T> {
    pub ptr: NonNull<T>,
    pub cap: usize,
    pub len: usize,
}

impl<T: Copy> Scratch<T> {
    pub fn new(cap: usize) -> Option<Self> {
        let bytes = cap.max(1) * core::mem::size_of::<T>();
        Some(Scratch {
            ptr: sys::map_zeroed(bytes)?.cast(),
            cap: cap.max(1),
            len: 0,
        })
    }

    pub fn push(&mut self, v: T) -> bool {
        if self.len == self.cap {
            return false;
        }
        // SAFETY: len < cap, inside the mapping.
        unsafe { self.ptr.as_ptr().add(self.len).write(v) };
        self.len += 1;
        true
    }

    pub fn as_slice(&self) -> &[T] {
        // SAFETY: the first len elements were written by push.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: the first len elements were written by push.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl<T> Drop for Scratch<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping came from map_zeroed with this size and is no longer used.
        unsafe { sys::unmap(self.ptr.cast(), self.cap.max(1) * core::mem::size_of::<T>()) };
    }
}

/// Everything recorded, gathered from every thread: arcs sorted by (from, to) and samples by
/// pc, duplicates (across tables and threads) summed.
pub struct Recorded {
    pub arcs: Scratch<Arc>,
    pub arcs_len: usize,
    pub samples: Scratch<Sample>,
    pub samples_len: usize,
    pub lost: u64,
}

impl Recorded {
    pub fn gather() -> Option<Recorded> {
        let (mut arcs, lost) = collect_arcs()?;
        let arcs_len = merge_duplicates(arcs.as_mut_slice()).len();
        let mut samples = collect_samples()?;
        let samples_len = merge_samples(samples.as_mut_slice()).len();
        Some(Recorded {
            arcs,
            arcs_len,
            samples,
            samples_len,
            lost,
        })
    }

    pub fn arcs(&self) -> &[Arc] {
        &self.arcs.as_slice()[..self.arcs_len]
    }

    pub fn samples(&self) -> &[Sample] {
        &self.samples.as_slice()[..self.samples_len]
    }

    /// The samples with a pc in `[start, end)`.
    pub fn samples_in(&self, start: usize, end: usize) -> &[Sample] {
        let s = self.samples();
        let lo = s.partition_point(|x| x.pc < start);
        let hi = s.partition_point(|x| x.pc < end);
        &s[lo..hi]
    }
}

/// Every arc of every thread block (duplicates across tables and blocks included), and the
/// number of calls lost. Other threads keep counting meanwhile; if their tables grow between
/// sizing and copying, the copy starts over with more room.
pub fn collect_arcs() -> Option<(Scratch<Arc>, u64)> {
    let mut room: usize = thread::blocks().map(|b| arcs::chain_len(&b.table)).sum();
    loop {
        let mut all = Scratch::new(room + 64)?;
        let mut lost = 0;
        let mut complete = true;
        for block in thread::blocks() {
            lost += arcs::chain_lost(&block.table);
            arcs::for_each_arc(&block.table, |from, to, count| {
                complete &= all.push(Arc { from, to, count });
            });
        }
        if complete {
            return Some((all, lost + thread::lost_without_block()));
        }
        room = room.saturating_mul(2);
    }
}

/// Every sample of every thread block, as [`collect_arcs`] does for arcs.
pub fn collect_samples() -> Option<Scratch<Sample>> {
    let mut room: usize = thread::blocks().map(|b| pcs::chain_len(&b.samples)).sum();
    loop {
        let mut all = Scratch::new(room + 64)?;
        let mut complete = true;
        for block in thread::blocks() {
            pcs::for_each_sample(&block.samples, |pc, count| {
                complete &= all.push(Sample { pc, count });
            });
        }
        if complete {
            return Some(all);
        }
        room = room.saturating_mul(2);
    }
}

/// Sorts arcs by (from, to) and sums runs of equal keys, in place; returns the merged prefix.
pub fn merge_duplicates(arcs: &mut [Arc]) -> &mut [Arc] {
    arcs.sort_unstable_by_key(|a| (a.from, a.to));
    let mut w = 0;
    for r in 0..arcs.len() {
        if w > 0 && arcs[w - 1].from == arcs[r].from && arcs[w - 1].to == arcs[r].to {
            arcs[w - 1].count += arcs[r].count;
        } else {
            arcs[w] = arcs[r];
            w += 1;
        }
    }
    &mut arcs[..w]
}

/// Sorts samples by pc and sums runs of the same pc; returns the merged prefix.
pub fn merge_samples(s: &mut [Sample]) -> &mut [Sample] {
    s.sort_unstable_by_key(|x| x.pc);
    let mut w = 0;
    for r in 0..s.len() {
        if w > 0 && s[w - 1].pc == s[r].pc {
            s[w - 1].count += s[r].count;
        } else {
            s[w] = s[r];
            w += 1;
        }
    }
    &mut s[..w]
}
