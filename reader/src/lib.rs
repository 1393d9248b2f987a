//! Reads the trace directories that instrfn's trace mode writes (docs/trace-format.md). It is
//! the format's one reader; the format's numbers come from `instrfn-format`. Each program
//! image has a meta file (text), and an events file and a staging file (chunks of events,
//! memory-mapped). The commands (`instrfn dump`, `report`, `export`) build on this crate.
//!
//! Bad input never panics: a missing, truncated, corrupt or future-version trace is an
//! [`Error`] naming the file and the problem.
//!
//! Modules, bottom up: `error` and `endian`; `meta` (the meta file); `chunk` (the chunks of
//! the events and staging files); `event` (events decoded); `process` (one image's model);
//! `trace` (a directory). Above them: `calls` (events matched into calls), `stats`
//! (per-function statistics), `identity` (whether a module's file is still the one traced),
//! `symbols` (names and lines), `xray` (XRay function ids), `ring` (ring mode's ring files,
//! copied from outside the program, and its snapshots).

mod chunk;
mod endian;
mod error;
mod event;
mod identity;
mod meta;
mod process;
mod trace;

pub mod calls;
pub mod ring;
pub mod stats;
pub mod symbols;
pub mod xray;

pub use error::Error;
pub use event::{Event, Events, Kind};
pub use meta::{Clock, Collector, Exe, Identity, Module, ThreadInfo, decode_word};
pub use process::Process;
pub use symbols::{Found, Problem, SourceLine, Symbols, demangle};
pub use trace::Trace;

/// The format version this reader knows.
pub const VERSION: u32 = instrfn_format::META_VERSION;
