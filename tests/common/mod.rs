//! Shared helpers of the integration tests, one file per concern: toolchains and targets
//! (`toolchain`), running programs natively or under qemu-user (`run`), gprof's output
//! (`gprof`), traces read through the `instrfn` command (`dump`), traces read byte by byte
//! without the reader crate (`raw_trace`), the C fixtures' builders (`fixtures`) and the
//! tracesig.c runs several features share (`tracesig`); and [`feature_tests!`], which lists a
//! feature file's tests. The runtime artifacts are built by the test command
//! (`scripts/test.sh`) before `cargo test`: a missing artifact or tool fails a test with a
//! message that says what to run, never skips it.
#![allow(dead_code)]

pub mod dump;
pub mod fixtures;
pub mod gprof;
pub mod raw_trace;
pub mod run;
pub mod toolchain;
pub mod tracesig;

// Each test file uses a part of these.
#[allow(unused_imports)]
pub use dump::*;
#[allow(unused_imports)]
pub use fixtures::*;
#[allow(unused_imports)]
pub use gprof::*;
#[allow(unused_imports)]
pub use raw_trace::*;
#[allow(unused_imports)]
pub use run::*;
#[allow(unused_imports)]
pub use toolchain::*;
#[allow(unused_imports)]
pub use tracesig::*;

/// The tests of one feature file: one #[test] per architecture a scenario applies to, named
/// `<feature>::<scenario>::<arch>`, so that `cargo test <feature>` and `cargo test <arch>`
/// both select by name (cargo's filter matches the test's path inside its binary):
///
/// ```text
/// feature_tests! {
///     trace_unwinding:
///     cpp_exceptions(x86_64, aarch64, riscv64, s390x),
///     lua_errors_and_coroutines(x86_64),
/// }
/// ```
///
/// makes `mod trace_unwinding { mod cpp_exceptions { #[test] fn x86_64() .. } .. }`, each
/// test calling the file's function of the scenario's name with that [`Arch`]
/// (`cpp_exceptions(AARCH64)`).
macro_rules! feature_tests {
    ($feature:ident: $($scenario:ident($($arch:ident),+ $(,)?)),+ $(,)?) => {
        mod $feature {
            $(
                mod $scenario {
                    $(
                        #[test]
                        fn $arch() {
                            crate::$scenario(crate::common::arch(stringify!($arch)));
                        }
                    )+
                }
            )+
        }
    };
}
