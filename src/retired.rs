//! Libraries unloaded by `dlclose`. Their arcs stay in the threads' tables, keyed by runtime
//! address, where a library loaded later at the same address would count on into them. So
//! when a library goes, its profile is written, and the counts it made are kept here:
//! - subtracted from whatever is counted at those addresses afterwards (another object may be
//!   mapped there), and
//! - added, at link-time addresses, to the profile of a later load of the same library file
//!   (wherever it is mapped), so its profile covers every load.
//!
//! Only the writer touches this state, under its lock (src/gmon.rs), so it needs no
//! synchronisation of its own; its memory is mapped, never from the heap.

use core::cell::UnsafeCell;

use crate::gmon::{Arc, Recorded, Scratch};
use crate::modules::Module;

/// One arc counted by an unloaded library: runtime addresses, and the calls it made there.
#[derive(Clone, Copy)]
struct Gone {
    from: usize,
    to: usize,
    count: u64,
    /// Index into `State::loads`.
    load: usize,
}

struct State {
    /// Sorted by (from, to).
    arcs: Option<Scratch<Gone>>,
    loads: Option<Scratch<Module>>,
}

struct Cell(UnsafeCell<State>);
// SAFETY: accessed only by the writer, which holds the writer lock (src/gmon.rs).
unsafe impl Sync for Cell {}

static STATE: Cell = Cell(UnsafeCell::new(State {
    arcs: None,
    loads: None,
}));

/// The state, to read. Only with the writer lock held; [`record`] replaces its parts only
/// after it has finished reading them, so no reference handed out here is live across a write.
fn state() -> &'static State {
    // SAFETY: see above: the writer lock serialises every access.
    unsafe { &*STATE.0.get() }
}

fn arcs() -> &'static [Gone] {
    state().arcs.as_ref().map_or(&[], |a| a.as_slice())
}

fn load(i: usize) -> &'static Module {
    let loads = state().loads.as_ref().map_or(&[][..], |l| l.as_slice());
    &loads[i]
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
    arcs()
        .iter()
        .filter(|g| load(g.load).path() == m.path() && !m.path().is_empty())
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

/// Keeps the counts of `m`, which has just been unloaded, apart. Writer lock held. If memory
/// runs out, later profiles of the addresses it used may include its counts: said on stderr.
pub fn record(m: &Module, rec: &Recorded) {
    let new_arcs: usize = rec
        .arcs()
        .iter()
        .filter(|a| m.contains(a.from) && m.contains(a.to))
        .count();
    if new_arcs == 0 {
        return;
    }
    let old_loads = state().loads.as_ref().map_or(&[][..], |l| l.as_slice());
    let Some(mut loads) = Scratch::<Module>::new(old_loads.len() + 1) else {
        message!("cannot map memory to keep the counts of an unloaded library apart");
        return;
    };
    for l in old_loads {
        loads.push(*l);
    }
    let index = old_loads.len();
    loads.push(*m);
    let old = arcs();
    let Some(mut all) = Scratch::<Gone>::new(old.len() + new_arcs) else {
        message!("cannot map memory to keep the counts of an unloaded library apart");
        return;
    };
    for g in old {
        all.push(*g);
    }
    for a in rec.arcs() {
        if m.contains(a.from) && m.contains(a.to) {
            let count = a.count - counted_before(a).min(a.count);
            if count > 0 {
                all.push(Gone {
                    from: a.from,
                    to: a.to,
                    count,
                    load: index,
                });
            }
        }
    }
    all.as_mut_slice().sort_unstable_by_key(|g| (g.from, g.to));
    // SAFETY: the writer lock is held and every reference from state() above is dead: the old
    // arrays are dropped (unmapped) here, after their contents were copied.
    unsafe {
        let st = &mut *STATE.0.get();
        st.arcs = Some(all);
        st.loads = Some(loads);
    }
}
