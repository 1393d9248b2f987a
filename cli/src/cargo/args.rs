//! The command line of `cargo instrfn`: the options (clap), the leading `instrfn` argument that
//! cargo passes to a subcommand, and usage errors cut to one line. Uses clap only.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;
use clap::error::ErrorKind;

const AFTER_HELP: &str = "\
What is instrumented: the package's crates, their dependencies, and the generics of the \
standard library instantiated there. The standard library itself comes precompiled without \
instrumentation (--build-std rebuilds it with instrumentation).

Examples:
  cargo instrfn                          trace the package's binary, print the report
  cargo instrfn --bin app -- ARGS        one binary of several, with its arguments
  cargo instrfn --svg flame.svg --chrome trace.json
  cargo instrfn --gmon                   exact call-arc counts: gprof's flat profile and call graph
  cargo instrfn --mcount                 mcount instead of fentry; --xray for XRay sleds
  cargo instrfn --print-flags            the rustc flags, for building by hand

The program's exit status is passed through. See docs/rust.md in the instrfn repository.";

/// Build the package with function instrumentation (nightly rustc), run it under the instrfn
/// runtime, and print what it recorded.
///
/// Trace mode (the default) prints `instrfn report`: exact calls, total and self time per
/// function. --gmon prints gprof's flat profile and call graph of exact call-arc counts. The
/// build goes into its own target directory (<target-dir>/instrfn), for the host only, so
/// that build scripts and proc macros stay uninstrumented.
#[derive(Parser, Debug)]
#[command(
    name = "cargo-instrfn",
    bin_name = "cargo instrfn",
    version,
    after_help = AFTER_HELP
)]
pub struct Args {
    /// gmon mode: print gprof's flat profile and call graph (exact call-arc counts).
    #[arg(long, help_heading = "Mode", conflicts_with_all = ["svg", "chrome"])]
    pub gmon: bool,
    /// Keep the trace (or the gmon.out files) in DIR [default: <target-dir>/instrfn/trace,
    /// or .../gmon].
    #[arg(short = 'o', long, value_name = "DIR", help_heading = "Mode")]
    pub output: Option<PathBuf>,
    /// Also write a flame graph SVG (trace mode).
    #[arg(long, value_name = "FILE", help_heading = "Mode")]
    pub svg: Option<PathBuf>,
    /// Also write a Chrome/Perfetto timeline JSON (trace mode).
    #[arg(long, value_name = "FILE", help_heading = "Mode")]
    pub chrome: Option<PathBuf>,
    /// Show where each function starts (file:line; needs debug info).
    #[arg(long, help_heading = "Mode")]
    pub lines: bool,
    /// At most N rows in the report [default: all].
    #[arg(long, value_name = "N", help_heading = "Mode")]
    pub limit: Option<usize>,

    /// __fentry__ before each prologue (the default where the nightly and target have it:
    /// x86_64 and s390x, nightlies from 2026-07-01 on).
    #[arg(long, group = "framework", help_heading = "Instrumentation")]
    pub fentry: bool,
    /// mcount after each prologue (-Zinstrument-mcount; every nightly, every target).
    #[arg(long, group = "framework", help_heading = "Instrumentation")]
    pub mcount: bool,
    /// XRay sleds, patched by the runtime (trace mode). OPTIONS are rustc's
    /// -Zinstrument-xray options, comma-separated.
    #[arg(
        long,
        group = "framework",
        value_name = "OPTIONS",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "always",
        help_heading = "Instrumentation"
    )]
    pub xray: Option<String>,
    /// Rebuild the standard library with instrumentation too (-Zbuild-std; needs the rust-src
    /// component).
    #[arg(long, help_heading = "Instrumentation")]
    pub build_std: bool,
    /// The nightly toolchain [default: `cargo +TOOLCHAIN instrfn`, else $INSTRFN_NIGHTLY,
    /// else nightly].
    #[arg(long, value_name = "TOOLCHAIN", help_heading = "Instrumentation")]
    pub toolchain: Option<String>,
    /// Print the rustc flags of the chosen instrumentation and exit.
    #[arg(long, help_heading = "Instrumentation")]
    pub print_flags: bool,

    /// Package to run.
    #[arg(
        short = 'p',
        long,
        value_name = "SPEC",
        help_heading = "Target Selection"
    )]
    pub package: Option<String>,
    /// Run this binary.
    #[arg(
        long,
        value_name = "NAME",
        group = "which",
        help_heading = "Target Selection"
    )]
    pub bin: Option<String>,
    /// Run this example.
    #[arg(
        long,
        value_name = "NAME",
        group = "which",
        help_heading = "Target Selection"
    )]
    pub example: Option<String>,
    /// Run this integration test.
    #[arg(
        long,
        value_name = "NAME",
        group = "which",
        help_heading = "Target Selection"
    )]
    pub test: Option<String>,
    /// Run this benchmark.
    #[arg(
        long,
        value_name = "NAME",
        group = "which",
        help_heading = "Target Selection"
    )]
    pub bench: Option<String>,
    /// Features to activate (space or comma separated).
    #[arg(
        short = 'F',
        long,
        value_name = "FEATURES",
        help_heading = "Feature Selection"
    )]
    pub features: Vec<String>,
    /// Activate all available features.
    #[arg(long, help_heading = "Feature Selection")]
    pub all_features: bool,
    /// Do not activate the `default` feature.
    #[arg(long, help_heading = "Feature Selection")]
    pub no_default_features: bool,
    /// Build with this profile [default: release].
    #[arg(long, value_name = "NAME", help_heading = "Compilation Options")]
    pub profile: Option<String>,
    /// The release profile (the default).
    #[arg(
        short = 'r',
        long,
        conflicts_with = "profile",
        help_heading = "Compilation Options"
    )]
    pub release: bool,
    /// The host target (the only one: the runtime instrfn carries is the host's).
    #[arg(long, value_name = "TRIPLE", help_heading = "Compilation Options")]
    pub target: Option<String>,
    /// Path to Cargo.toml.
    #[arg(long, value_name = "PATH", help_heading = "Manifest Options")]
    pub manifest_path: Option<PathBuf>,

    /// The program's arguments.
    #[arg(last = true, value_name = "ARGS")]
    pub args: Vec<OsString>,
}

impl Args {
    /// The cargo profile to build with.
    pub fn profile(&self) -> &str {
        self.profile.as_deref().unwrap_or("release")
    }
}

/// Parses the command line, as `cargo-instrfn instrfn ARGS` (run by cargo) or
/// `cargo-instrfn ARGS`. Help and version are printed here, and exit; a usage error is one
/// line.
pub fn parse(argv: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
    let mut argv: Vec<OsString> = argv.into_iter().collect();
    if argv.get(1).is_some_and(|a| a == "instrfn") {
        argv.remove(1);
    }
    Args::try_parse_from(argv).map_err(|e| match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => e.exit(),
        _ => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments").trim();
            format!("{first} (see `cargo instrfn --help`)")
        }
    })
}
