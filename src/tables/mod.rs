//! Tables that count without locks: the per-thread arc tables (their layout is the
//! assembly's), the per-thread pc tables of the histogram, the chain both grow as, and the
//! call-site caches the assembly probes. Uses `base` and `sys` (memory).

pub mod arcs;
pub mod chain;
pub mod pcs;
pub mod sites;
