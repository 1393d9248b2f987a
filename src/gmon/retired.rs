//! Libraries unloaded by `dlclose`. Their arcs stay in the threads' tables, keyed by runtime
//! address, where a library loaded later at the same address would count on into them. So
//! when a library goes, its profile is written, and the counts it made are kept here:
//! - subtracted from whatever is counted at those addresses afterwards (another object may be
//!   mapped there), and
//! - added, at link-time addresses, to the profile of a later load of the same library file
//!   (wherever it is mapped), so its profile covers every load.
//!
//! Only the writer touches this state, under its lock (src/gmon/), so it needs no
//! synchronisation of its own; its memory is mapped, never from the heap.

use core::cell::UnsafeCell;

use super::recorded::{Arc, Recorded, Scratch};
use crate::sys;
use crate::sys::objects::Module;

/// One arc counted by an unloaded library: runtime addresses, and the calls it made there.
#[derive(Clone, Copy)]
struct Gone {
    from: usize,
    to: usize,
    count: u64,
    /// Index into the loads.
    load: usize,
}

/// Arcs and loads kept, in two reservations mapped once, before the first library goes (so
/// the address range a library leaves is still free for whatever is loaded next, as it would
/// be without instrfn), and committed by the kernel only as they fill.
const MAX_ARCS: usize = 1 << 21;
const MAX_LOADS: usize = 1 << 12;

struct State {
    /// `arcs[..arcs_len]`, sorted by (from, to).
    arcs: *mut Gone,
    arcs_len: usize,
    loads: *mut Module,
    loads_len: usize,
    /// Set once memory ran out (said once).
    full: bool,
}

struct Cell(UnsafeCell<State>);
// SAFETY: accessed only by the writer, which holds the writer lock (src/gmon/).
unsafe impl Sync for Cell {}

static STATE: Cell = Cell(UnsafeCell::new(State {
    arcs: core::ptr::null_mut(),
    arcs_len: 0,
    loads: core::ptr::null_mut(),
    loads_len: 0,
    full: false,
}));

/// The state. Only with the writer lock held, which serialises every access, so the one
/// reference made here is the only one live.
fn state() -> &'static mut State {
    // SAFETY: see above.
    unsafe { &mut *STATE.0.get() }
}

fn arcs() -> &'static [Gone] {
    let st = state();
    if st.arcs.is_null() {
        return &[];
    }
    // SAFETY: arcs_len entries of the reservation were written by record().
    unsafe { core::slice::from_raw_parts(st.arcs, st.arcs_len) }
}

fn load(i: usize) -> Module {
    // SAFETY: i < loads_len (a retired arc names the load recorded with it).
    unsafe { *state().loads.add(i) }
}

/// Maps the reservations, before the first library is unloaded. Writer lock held.
pub fn prepare() {
    let st = state();
    if !st.arcs.is_null() || st.full {
        return;
    }
    let arcs = sys::map_zeroed(MAX_ARCS * core::mem::size_of::<Gone>());
    let loads = sys::map_zeroed(MAX_LOADS * core::mem::size_of::<Module>());
    match (arcs, loads) {
        (Some(a), Some(l)) => {
            st.arcs = a.cast().as_ptr();
            st.loads = l.cast().as_ptr();
        }
        _ => st.full = true,
    }
}

/// Calls counted at the runtime addresses of `a` by libraries since unloaded. Writer lock held.
pub fn counted_before(a: &Arc) -> u64 {
    let all = arcs();
    let lo = all.partition_point(|g| (g.from, g.to) < (a.from, a.to));
    all[lo..]
        .iter()
        .take_while(|g| g.from == a.from && g.to == a.to)
        .map(|g| g.count)
        .sum()
}

/// How many arcs earlier loads of `m`'s library file left. Writer lock held.
pub fn earlier_loads(m: &Module) -> usize {
    if m.path().is_empty() {
        return 0;
    }
    arcs()
        .iter()
        .filter(|g| load(g.load).path() == m.path())
        .count()
}

/// Calls `f` with each arc of earlier loads of `m`'s library file, at link-time addresses.
/// Writer lock held.
pub fn add_earlier_loads(m: &Module, mut f: impl FnMut(Arc)) {
    if m.path().is_empty() {
        return;
    }
    for g in arcs() {
        let l = load(g.load);
        if l.path() == m.path() {
            f(Arc {
                from: l.link_address(g.from),
                to: l.link_address(g.to),
                count: g.count,
            });
        }
    }
}

/// Keeps the counts of `m`, which has just been unloaded, apart. Writer lock held. If the
/// reservations are full, later profiles of the addresses it used may include its counts:
/// said on stderr, once.
pub fn record(m: &Module, rec: &Recorded) {
    prepare();
    let new: Scratch<Gone>;
    {
        let mut fresh = match Scratch::<Gone>::new(rec.arcs().len()) {
            Some(s) => s,
            None => return say_full(),
        };
        let index = state().loads_len;
        for a in rec.arcs() {
            if m.contains(a.from) && m.contains(a.to) {
                let count = a.count - counted_before(a).min(a.count);
                if count > 0 {
                    fresh.push(Gone {
                        from: a.from,
                        to: a.to,
                        count,
                        load: index,
                    });
                }
            }
        }
        new = fresh;
    }
    let st = state();
    let added = new.as_slice().len();
    if added == 0 {
        return;
    }
    if st.arcs.is_null() || st.loads_len == MAX_LOADS || st.arcs_len + added > MAX_ARCS {
        return say_full();
    }
    // SAFETY: both indexes are within the reservations (checked above); nothing else refers to
    // the slots written.
    unsafe {
        st.loads.add(st.loads_len).write(*m);
        core::ptr::copy_nonoverlapping(new.as_slice().as_ptr(), st.arcs.add(st.arcs_len), added);
    }
    st.loads_len += 1;
    st.arcs_len += added;
    // SAFETY: arcs_len entries are initialised.
    let all = unsafe { core::slice::from_raw_parts_mut(st.arcs, st.arcs_len) };
    all.sort_unstable_by_key(|g| (g.from, g.to));
}

fn say_full() {
    let st = state();
    if !st.full {
        st.full = true;
        message!(
            "cannot keep the counts of unloaded libraries apart any more: a library loaded later \
             at the same address may show some of them"
        );
    }
}
