//! Per-architecture trampolines, one module per architecture behind this dispatcher.
//!
//! Each architecture module provides, with the same names and meanings:
//! - the exported counting entry points its compilers call (`mcount`, `_mcount`, `__fentry__`),
//!   as naked functions that jump into the assembly in `asm/<arch>.s`;
//! - `guarded_entry!`, which defines a naked exported function that runs a Rust function with
//!   this thread's re-entry guard held (and, for ordinary callers, all signals blocked), so a
//!   runtime that is itself compiled with `-Zinstrument-mcount` never counts or recurses into
//!   itself;
//! - `tls()`, the address of this thread's [`Tls`](crate::thread::Tls) block;
//! - `enabled()`, the recording switch the fast paths test;
//! - `interrupted_pc(ucontext)`, the pc a signal interrupted;
//! - `SUPPORTED`.
//!
//! `x86_64` is the fully annotated reference; the others document only how they differ.

#[cfg(target_arch = "x86_64")]
#[macro_use]
mod x86_64;
#[cfg(target_arch = "x86_64")]
pub use x86_64::*;

#[cfg(target_arch = "aarch64")]
#[macro_use]
mod aarch64;
#[cfg(target_arch = "aarch64")]
pub use aarch64::*;

#[cfg(target_arch = "riscv64")]
#[macro_use]
mod riscv64;
#[cfg(target_arch = "riscv64")]
pub use riscv64::*;

#[cfg(target_arch = "s390x")]
#[macro_use]
mod s390x;
#[cfg(target_arch = "s390x")]
pub use s390x::*;

#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "s390x"
)))]
#[macro_use]
mod unsupported;
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "s390x"
)))]
pub use unsupported::*;
