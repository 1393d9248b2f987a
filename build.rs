//! Builds the C wrappers of libc's exec, spawn and dlclose entry points (src/runtime/interpose.c) on
//! glibc targets, and tells the user when the target has no trampolines: the crate still
//! builds, but records nothing.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/arch");
    println!("cargo:rerun-if-changed=src/runtime/interpose.c");
    println!("cargo::rustc-check-cfg=cfg(instrfn_wrapped)");
    println!("cargo::rustc-check-cfg=cfg(instrfn_arch)");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let features = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    let static_libc = features.split(',').any(|f| f == "crt-static");
    let supported =
        os == "linux" && matches!(arch.as_str(), "x86_64" | "aarch64" | "riscv64" | "s390x");
    // instrfn_wrapped: libc and the unwinder are shared libraries (glibc, not linked with
    // crt-static), whose entry points the runtime wraps (src/runtime/interpose.rs, src/runtime/interpose.c).
    // Otherwise (musl, static glibc) they are linked into the program: nothing to wrap (the
    // wrappers' names would clash with the static unwinder's).
    let wrapped = supported && env == "gnu" && !static_libc;
    // instrfn_arch: the target has trampolines (src/arch/<arch>/).
    if supported {
        println!("cargo:rustc-cfg=instrfn_arch");
    }
    if wrapped {
        println!("cargo:rustc-cfg=instrfn_wrapped");
    }
    if !supported {
        println!(
            "cargo:warning=instrfn has no trampolines for {arch}-{os}: the crate builds, \
             but nothing is counted"
        );
        return;
    }
    if wrapped {
        // Never instrumented: the wrappers run outside the runtime's guard, so a counting call
        // from one of them would count the runtime itself.
        cc::Build::new()
            .file("src/runtime/interpose.c")
            .flag("-fno-instrument-functions")
            .flag("-fno-stack-protector")
            // Unwind tables: the backtrace and unwinder wrappers are on the stack while the
            // real ones walk it (riscv64's gcc makes none by default: a walk stopped there).
            .flag("-fasynchronous-unwind-tables")
            .cargo_metadata(false)
            .compile("instrfn_interpose");
        let out = std::env::var("OUT_DIR").unwrap();
        println!("cargo:rustc-link-search=native={out}");
        // Whole archive: nothing in the runtime refers to the wrappers, the program does.
        println!("cargo:rustc-link-lib=static:+whole-archive=instrfn_interpose");
        println!("cargo:rustc-link-lib=dl");
    }
}
