//! A chain of growing tables: when a table is full it is replaced by a larger one holding the
//! same keys, and the old one stays, with the counts it collected, linked from the new one.
//! Tables are never unmapped, so readers on other threads walk a chain while its owner grows
//! it, and counts that land in a replaced table are still summed.

use core::ptr::NonNull;

/// A table of a chain: it links to the table it replaced.
pub trait Linked: Sized + 'static {
    /// The table this one replaced (null for the first). Immutable.
    fn prev(&self) -> *mut Self;
}

/// `head` and the tables it replaced, newest first.
pub fn chain<T: Linked>(head: *mut T) -> impl Iterator<Item = &'static T> {
    let mut t = head;
    core::iter::from_fn(move || {
        // SAFETY: tables are never unmapped; `t` is the head of a chain (loaded with Acquire by
        // the caller, or owned by it) or an immutable prev link of one.
        let tab = unsafe { t.as_ref()? };
        t = tab.prev();
        Some(tab)
    })
}

/// Maps a zeroed table of `header` bytes followed by `slots` slots of `slot` bytes.
pub fn map_table<T>(header: usize, slots: usize, slot: usize) -> Option<NonNull<T>> {
    crate::sys::map_zeroed(header + slots * slot).map(NonNull::cast)
}
