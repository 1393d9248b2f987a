//! What the libc wrappers of src/runtime/interpose.c call: before and after exec, posix_spawn,
//! dlopen, dlclose, and around unshare/setns, which need the process to be one thread.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, Ordering};

use super::api::api_calls_recorded;
use super::{EARLY_CONFIG, started};
use crate::base::StackBuf;
use crate::sys::objects::{self, Module};
use crate::{abi, arch, output, process};

/// Before this image is replaced by exec: writes the profile (unless this is a fork child
/// that recorded nothing, as in fork + exec), stops the sampling timers and takes any SIGPROF
/// still pending, and fills `marker` with the INSTRFN_TREE entry for the next image. Nothing
/// but the marker in a vfork child or a process that never recorded.
extern "C" fn exec_prepare(marker: *mut u8, len: usize) {
    let mut m = StackBuf::<64>::new();
    if let Some(rt) = started()
        && rt.owned_here()
    {
        let nothing = rt.fork_child.load(Ordering::Relaxed) && api_calls_recorded() == 0;
        let wrote = output::before_exec(&rt.config, &rt.exe, nothing);
        EXEC_RESUME.store(output::pause_sampling(), Ordering::Relaxed);
        drain_sigprof();
        process::exec_marker(wrote, &mut m);
    } else {
        process::spawn_marker(&mut m);
    }
    copy_marker(&mut m, marker, len);
}

/// Whether the sampling timers ran before an exec that may fail.
static EXEC_RESUME: AtomicBool = AtomicBool::new(false);

/// The exec failed: profiling goes on as before.
extern "C" fn exec_failed() {
    if let Some(rt) = started()
        && rt.owned_here()
        && EXEC_RESUME.swap(false, Ordering::Relaxed)
    {
        output::resume_sampling();
    }
}

/// The INSTRFN_TREE entry for a child started by posix_spawn.
extern "C" fn spawn_marker(marker: *mut u8, len: usize) {
    let mut m = StackBuf::<64>::new();
    process::spawn_marker(&mut m);
    copy_marker(&mut m, marker, len);
}

fn copy_marker(m: &mut StackBuf<64>, out: *mut u8, len: usize) {
    let bytes = m.as_cstr().map_or(&b"\0"[..], |c| c.to_bytes_with_nul());
    if len >= bytes.len() {
        // SAFETY: the caller's buffer holds len >= bytes.len() bytes.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), out, bytes.len()) };
    } else if len > 0 {
        // SAFETY: len > 0 bytes are writable.
        unsafe { *out = 0 };
    }
}

/// Takes a SIGPROF that is pending for this thread (the program may block it), so none is
/// left for an image that does not handle it. Raw system calls.
fn drain_sigprof() {
    use crate::sys::raw::syscall;
    let mut pending: u64 = 0;
    // SAFETY: rt_sigpending into a local set of 8 bytes.
    unsafe {
        syscall(
            libc::SYS_rt_sigpending,
            [&mut pending as *mut u64 as usize, 8, 0, 0, 0, 0],
        )
    };
    let bit = 1u64 << (libc::SIGPROF - 1);
    if pending & bit != 0 {
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: rt_sigtimedwait for one signal, no info, a zero timeout.
        unsafe {
            syscall(
                libc::SYS_rt_sigtimedwait,
                [
                    &bit as *const u64 as usize,
                    0,
                    &zero as *const libc::timespec as usize,
                    8,
                    0,
                    0,
                ],
            )
        };
    }
}

guarded_entry! {
    /// Called by the exec wrappers before the real exec.
    #[unsafe(no_mangle)]
    pub fn instrfn_exec_prepare(marker: *mut u8, len: usize) => exec_prepare
}
guarded_entry! {
    /// Called by the exec wrappers when the real exec returned (it failed).
    #[unsafe(no_mangle)]
    pub fn instrfn_exec_failed() => exec_failed
}

/// What the dlclose wrapper keeps between its two calls: the module as it was before the real
/// dlclose. The C side provides [`MODULE_STATE_BYTES`] bytes.
#[repr(C)]
struct Closing {
    valid: bool,
    module: Module,
}

/// Bytes of the state buffer interpose.c passes to the dlclose hooks.
pub const MODULE_STATE_BYTES: usize = 1024;
const _: () = assert!(core::mem::size_of::<Closing>() <= MODULE_STATE_BYTES);

/// Before dlclose of the object loaded at `bias` from `path`: remembers where its code is.
extern "C" fn module_closing(bias: usize, path: *const core::ffi::c_char, state: *mut c_void) {
    let state = state.cast::<Closing>();
    let found = match started() {
        Some(rt) if rt.owned_here() && !path.is_null() => {
            // SAFETY: path is the loader's NUL-terminated name of the object (dlinfo).
            let path = unsafe { core::ffi::CStr::from_ptr(path) };
            objects::find_shared_object(bias, path.to_bytes())
        }
        _ => None,
    };
    if found.is_some() {
        output::before_unload();
    }
    // SAFETY: the caller's buffer holds MODULE_STATE_BYTES bytes, 8-aligned.
    unsafe {
        core::ptr::addr_of_mut!((*state).valid).write(found.is_some());
        if let Some(m) = found {
            core::ptr::addr_of_mut!((*state).module).write(m);
        }
    }
}

/// After the real dlclose: if the object is gone, writes its profile and keeps its counts
/// apart (crate::gmon::retired), or notes it in the trace.
extern "C" fn module_closed(state: *mut c_void) {
    // SAFETY: filled by module_closing on this thread.
    let state = unsafe { &*state.cast::<Closing>() };
    if !state.valid {
        return;
    }
    let m = &state.module;
    if let Some(rt) = started()
        && objects::find_shared_object(m.bias, m.path()).is_none()
    {
        let (lo, hi) = m.code_range();
        arch::forget_sites(lo, hi);
        output::after_unload(&rt.config, m);
    }
}

guarded_entry! {
    /// Called by the dlclose wrapper before the real dlclose.
    #[unsafe(no_mangle)]
    pub fn instrfn_module_closing(bias: usize, path: *const core::ffi::c_char, state: *mut c_void)
        => module_closing
}
guarded_entry! {
    /// Called by the dlclose wrapper after the real dlclose.
    #[unsafe(no_mangle)]
    pub fn instrfn_module_closed(state: *mut c_void) => module_closed
}

/// Asked by the dlopen route before the real call: whether the objects a dlopen loads are to
/// be noted at once. In trace mode (chosen at load, or started since): their XRay sleds must
/// be patched before the caller can call them, and their `module` lines are best written
/// while the process is sure to be alive. Gmon mode needs nothing: a library's arcs are kept
/// by address and its profile is found when it is written (or at dlclose).
extern "C" fn dlopen_wanted() -> c_int {
    abi::mode().traces() as c_int
}

/// After a real dlopen (or dlmopen into the base namespace) that succeeded: the objects it
/// loaded are noted. Their constructors have already run.
extern "C" fn module_opened() {
    if !abi::mode().traces() || started().is_some_and(|rt| !rt.owned_here()) {
        return;
    }
    output::opened();
}

guarded_entry! {
    /// Called by the dlopen route before the real dlopen: 1 if the wrapper is to note what it
    /// loads.
    #[unsafe(no_mangle)]
    pub fn instrfn_dlopen_wanted() -> c_int => dlopen_wanted
}
guarded_entry! {
    /// Called by the dlopen wrapper after a real dlopen that succeeded.
    #[unsafe(no_mangle)]
    pub fn instrfn_module_opened() => module_opened
}

guarded_entry! {
    /// Called by the unshare and setns wrappers when the real call failed for a process of
    /// more than one thread: ends the collector thread, if there is one; 1 if it is gone (the
    /// call is then made again).
    #[unsafe(no_mangle)]
    pub fn instrfn_collector_pause() -> c_int => collector_pause
}
guarded_entry! {
    /// After the call that [`instrfn_collector_pause`] made way for: the collector again.
    #[unsafe(no_mangle)]
    pub fn instrfn_collector_resume() => collector_resume
}

extern "C" fn collector_pause() -> c_int {
    output::collector_pause() as c_int
}

extern "C" fn collector_resume() {
    output::collector_resume();
}

guarded_entry! {
    /// Called by the exec and posix_spawn wrappers: in trace mode, writes
    /// `INSTRFN_OUTPUT=<the trace directory, absolute>` and a NUL into `out` (`len` bytes) and
    /// returns 1, so that a child started after a `chdir` records into the same directory;
    /// else 0.
    #[unsafe(no_mangle)]
    pub fn instrfn_output_entry(out: *mut u8, len: usize) -> c_int => output_entry
}

extern "C" fn output_entry(out: *mut u8, len: usize) -> c_int {
    let Some(config) = EARLY_CONFIG.get().filter(|c| c.trace) else {
        return 0;
    };
    // SAFETY: the C side passes a buffer of `len` bytes.
    let out = unsafe { core::slice::from_raw_parts_mut(out, len) };
    config.output_entry(out) as c_int
}

guarded_entry! {
    /// Called by the posix_spawn wrappers for the INSTRFN_TREE entry of the child.
    #[unsafe(no_mangle)]
    pub fn instrfn_spawn_marker(marker: *mut u8, len: usize) => spawn_marker
}
