//! The kernel and memory: raw system calls, mappings, files, /proc/self/maps, signals and
//! timers, clocks and limits, the loaded ELF objects, and one-line messages. Everything here
//! is async-signal-safe and allocates nothing, so slow paths, signal handlers and the
//! collector thread may use it. Uses only `base`.

#[macro_use]
pub mod message;
pub mod env;
pub mod file;
pub mod maps;
pub mod mem;
pub mod objects;
pub mod raw;
pub mod signal;

pub use env::{
    SizeLimit, cwd, errno, file_size_limit, fits_size_limit, getenv, getpid, gettid, monotonic_ns,
    realtime_ns, secure_mode, set_errno, thread_alive,
};
pub use file::write_all;
pub use mem::{map_zeroed, unmap};
pub use message::Errno;
pub use signal::{handler_of, install_handler, sigaction};
