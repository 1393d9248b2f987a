//! Packages the `instrfn` runtime as `libinstrfn.so` (for `LD_PRELOAD`) and `libinstrfn.a` (for
//! static linking into C programs). Every exported symbol (`mcount`, `_mcount`, `__fentry__`, the
//! gcrt entry points `__monstartup`/`_mcleanup`/`moncontrol` and the `instrfn_*` C API) comes
//! from the runtime crate; this crate only links it into those two artifact kinds.

pub use runtime::*;
