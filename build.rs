//! Tells the user when the target has no trampolines: the crate still builds, but records
//! nothing.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=asm");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let supported =
        os == "linux" && matches!(arch.as_str(), "x86_64" | "aarch64" | "riscv64" | "s390x");
    if !supported {
        println!(
            "cargo:warning=instrfn has no trampolines for {arch}-{os}: the crate builds, \
             but nothing is counted"
        );
    }
}
