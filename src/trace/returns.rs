//! gcc's return route (`-pg -mfentry -minstrument-return=call`, x86_64): which loaded objects
//! call `__return__`, so that their `__fentry__` calls replace no return address
//! ([`Mode::TraceReturn`] and the code ranges of the architecture, src/arch/x86_64/).
//!
//! An object calls it when its dynamic symbol table imports `__return__` (linked against a stub
//! library or libinstrfn.so), or, for the executable the runtime is linked into
//! (libinstrfn.a), when its code calls the runtime's `__return__`. Objects are looked at when
//! trace mode is chosen (at load, or at start-up) and after each dlopen the wrapper sees; one
//! whose function returned through `__return__` with its return address replaced (an object
//! loaded where no wrapper saw it, or constructors that ran before their dlopen returned) is
//! added then. Its range goes at dlclose. Everything else keeps the hijacking route.

use crate::sys::objects::Module;

/// Looks at every loaded object (trace mode chosen or started, and after a dlopen): those that
/// call `__return__` get their `__fentry__` calls on the route. Nothing in gmon mode, or with
/// exits off (mode 2: `__return__` returns at once there).
pub fn note_objects() {
    #[cfg(all(instrfn_arch, target_arch = "x86_64"))]
    route::note_objects();
}

/// After dlclose unloaded `m`: its range goes.
pub fn forget(m: &Module) {
    #[cfg(all(instrfn_arch, target_arch = "x86_64"))]
    if let Some(lo) = m.code_start() {
        crate::arch::return_route::remove(lo);
    }
    let _ = m;
}

#[cfg(all(instrfn_arch, target_arch = "x86_64"))]
pub use route::learned;

#[cfg(all(instrfn_arch, target_arch = "x86_64"))]
mod route {
    use core::sync::atomic::{AtomicBool, Ordering};

    use crate::abi::{self, Mode};
    use crate::arch::return_route::{RANGES, add as add_range, calls_to, entry};
    use crate::sys::objects::{self, Module};

    /// Said once: the table of code ranges is full.
    static FULL_SAID: AtomicBool = AtomicBool::new(false);

    pub fn note_objects() {
        if !route_wanted() {
            return;
        }
        let mut found = false;
        let mut note = |m: &Module| {
            if calls_return(m) {
                found |= add(m);
            }
        };
        objects::for_each_shared_object(&mut note);
        note(&Module::executable());
        if found {
            enter_route();
        }
    }

    /// A function returned through `__return__` with its return address replaced: its object
    /// is on the route from now on.
    pub fn learned(func: usize) {
        if !route_wanted() {
            return;
        }
        let exe = Module::executable();
        let mut object = exe.contains(func).then_some(exe);
        if object.is_none() {
            objects::for_each_shared_object(|m| {
                if m.contains(func) {
                    object = Some(*m);
                }
            });
        }
        if let Some(m) = object
            && add(&m)
        {
            enter_route();
        }
    }

    fn route_wanted() -> bool {
        matches!(abi::mode(), Mode::Trace | Mode::TraceReturn)
    }

    fn enter_route() {
        if abi::mode() == Mode::Trace {
            abi::set_mode(Mode::TraceReturn);
        }
    }

    /// Whether `m`'s code calls `__return__`: it imports it, or it holds the runtime and calls
    /// the runtime's.
    fn calls_return(m: &Module) -> bool {
        if m.imports(b"__return__") {
            return true;
        }
        let target = entry();
        // SAFETY: the executable segments of a loaded object (this one holds our code).
        m.contains(target)
            && m.segments()
                .iter()
                .any(|s| unsafe { calls_to(s.start, s.end, target) })
    }

    /// `m`'s code range into the route's table; false if it is full (said once).
    fn add(m: &Module) -> bool {
        let (lo, hi) = m.code_range();
        if add_range(lo, hi) {
            return true;
        }
        if !FULL_SAID.swap(true, Ordering::Relaxed) {
            message!(
                "more than {RANGES} objects call __return__: the functions of the others have \
                 their return addresses replaced"
            );
        }
        false
    }
}
