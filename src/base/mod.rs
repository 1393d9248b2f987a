//! Pure helpers: fixed-capacity buffers, text for messages, name patterns, signal names, a
//! hash. No system call, no global state, no allocation. Uses nothing else of the crate.

pub mod buf;
pub mod glob;
pub mod signals;
pub mod text;

pub use buf::StackBuf;
pub use text::Bytes;
