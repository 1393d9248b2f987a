//! Where each program image of a process tree writes its profile, so that a tree of
//! instrumented programs (LD_PRELOAD inherited, or each linked with the runtime) leaves one
//! profile per image and none overwrites another:
//!
//! - the first process of the tree to load the runtime (its root) writes `gmon.out`;
//! - every other process writes `gmon.out.<pid>` (a forked child, a spawned or exec'd child,
//!   a grandchild under an uninstrumented shell);
//! - a later image of the same pid (the program exec'd another one after writing its profile)
//!   writes `gmon.out.<pid>.<k>`, k = 2, 3, …;
//! - with GMON_OUT_PREFIX, every image writes `<prefix>.<pid>` (as glibc), and `.<k>` after it
//!   for later images.
//!
//! The tree is marked in the environment: the root's runtime, while it loads (an
//! `.init_array` constructor, before `main`), sets `INSTRFN_TREE=<root pid>`, which its
//! children inherit. The exec wrappers (src/runtime/interpose.c) pass `INSTRFN_TREE=<root
//! pid>:<pid>.<k>` to the image they start when this image has written a profile, so the next
//! image of the pid numbers itself k. A child spawned with an environment of its own
//! (posix_spawn, execve with an envp) gets the marker added by the wrappers. Uses `base` and
//! `sys`.

use core::ffi::c_char;
use core::fmt::Write as _;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

use crate::base::StackBuf;
use crate::sys;

/// The name of the environment variable, with its `=`.
pub const TREE_VAR: &[u8] = b"INSTRFN_TREE=";

/// The tree's root pid (0 until known).
static ROOT: AtomicI32 = AtomicI32::new(0);
/// The pid and number (>= 2) of the image the environment said this one is; 0 if none.
static IMAGE_PID: AtomicI32 = AtomicI32::new(0);
static IMAGE_K: AtomicU32 = AtomicU32::new(0);
/// Set once the environment has been read.
static READ: AtomicBool = AtomicBool::new(false);

/// Reads INSTRFN_TREE once: `<root>` or `<root>:<pid>.<k>`. Without it (or unreadable), this
/// process is the root. Async-signal-safe.
pub fn init() {
    if READ.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let Some(v) = sys::getenv(c"INSTRFN_TREE") else {
        ROOT.store(me, Ordering::Relaxed);
        return;
    };
    let (root, image) = match v.iter().position(|&b| b == b':') {
        Some(i) => (&v[..i], Some(&v[i + 1..])),
        None => (v, None),
    };
    // An unreadable root is some other tree's: this process is not its root.
    ROOT.store(parse(root).unwrap_or(-1), Ordering::Relaxed);
    if let Some(image) = image
        && let Some(dot) = image.iter().position(|&b| b == b'.')
        && let (Some(pid), Some(k)) = (parse(&image[..dot]), parse(&image[dot + 1..]))
        && k >= 2
    {
        IMAGE_PID.store(pid, Ordering::Relaxed);
        IMAGE_K.store(k as u32, Ordering::Relaxed);
    }
}

fn parse(v: &[u8]) -> Option<i32> {
    let s = core::str::from_utf8(v).ok()?;
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Marks the tree in this process's environment if no ancestor did (the constructor only:
/// setenv allocates).
pub fn mark_tree() {
    init();
    if sys::getenv(c"INSTRFN_TREE").is_some() {
        return;
    }
    let mut v = StackBuf::<16>::new();
    let _ = write!(v, "{}", ROOT.load(Ordering::Relaxed));
    if let Some(v) = v.as_cstr() {
        // SAFETY: valid C strings; called before main, on the only thread.
        unsafe { libc::setenv(c"INSTRFN_TREE".as_ptr(), v.as_ptr(), 0) };
    }
}

/// The number of this image among the images of its pid (1 for the first).
fn image_number(pid: i32) -> u32 {
    if IMAGE_PID.load(Ordering::Relaxed) == pid {
        IMAGE_K.load(Ordering::Relaxed).max(1)
    } else {
        1
    }
}

/// The profile file of this image (see the module documentation), for `prefix` =
/// GMON_OUT_PREFIX.
pub fn profile_path<const N: usize>(prefix: Option<&[u8]>, path: &mut StackBuf<N>) {
    init();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let k = image_number(pid);
    match prefix {
        Some(prefix) => {
            path.push(prefix);
            let _ = write!(path, ".{pid}");
        }
        None if k == 1 && ROOT.load(Ordering::Relaxed) == pid => path.push(b"gmon.out"),
        None => {
            let _ = write!(path, "gmon.out.{pid}");
        }
    }
    if k >= 2 {
        let _ = write!(path, ".{k}");
    }
}

/// The INSTRFN_TREE entry (`INSTRFN_TREE=...`, NUL-terminated) to give the image that replaces
/// this one by exec: it numbers itself after this image if this one `wrote` a profile.
pub fn exec_marker(wrote: bool, out: &mut StackBuf<64>) -> *const c_char {
    init();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let k = image_number(pid) + wrote as u32;
    out.push(TREE_VAR);
    let _ = write!(out, "{}", ROOT.load(Ordering::Relaxed));
    if k >= 2 {
        let _ = write!(out, ":{pid}.{k}");
    }
    out.as_cstr().map_or(core::ptr::null(), |c| c.as_ptr())
}

/// The INSTRFN_TREE entry for a spawned child (a new pid: only the root matters).
pub fn spawn_marker(out: &mut StackBuf<64>) -> *const c_char {
    init();
    out.push(TREE_VAR);
    let _ = write!(out, "{}", ROOT.load(Ordering::Relaxed));
    out.as_cstr().map_or(core::ptr::null(), |c| c.as_ptr())
}

/// This image's name in a trace directory: `<pid>.<k>` (src/trace/).
pub fn image_name<const N: usize>(out: &mut StackBuf<N>) {
    init();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let _ = write!(out, "{pid}.{}", image_number(pid));
}

/// The image number of this process now (1 for the first image of its pid).
pub fn image_number_now() -> u32 {
    init();
    // SAFETY: getpid has no preconditions.
    image_number(unsafe { libc::getpid() })
}
