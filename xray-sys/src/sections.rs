//! Where the linker put the executable's XRay sections, and compiler-rt's own copy of the sled
//! map and its lock, as the C shim (src/shim.c) finds them. Uses nothing else of the crate.

/// Must match `struct xray_sys_symbols` in src/shim.c.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Symbols {
    pub(crate) instr_map_start: usize,
    pub(crate) instr_map_stop: usize,
    pub(crate) fn_idx_start: usize,
    pub(crate) fn_idx_stop: usize,
    pub(crate) crt_sled_map: usize,
    pub(crate) crt_sled_map_lock: usize,
}

unsafe extern "C" {
    fn xray_sys_symbols(out: *mut Symbols);
}

pub(crate) fn symbols() -> Symbols {
    let mut s = Symbols::default();
    // SAFETY: the shim fills the struct it is given (same layout) and nothing else.
    unsafe { xray_sys_symbols(&mut s) };
    s
}
