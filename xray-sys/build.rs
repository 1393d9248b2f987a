//! Finds compiler-rt's XRay runtime through clang and links it whole-archive into whatever
//! executable depends on this crate; builds the C shim (src/shim.c) with `cc`.
//!
//! The archive is `libclang_rt.xray-<arch>.a`, which only clang knows where to find
//! (`clang -print-file-name=...`; the `cc` crate's compiler here is gcc, which has no
//! compiler-rt). `CLANG` names another clang. Whole archive: nothing in the program refers to
//! compiler-rt's initialiser (a `.preinit_array` entry) or to its modes' registration, so an
//! ordinary link would leave them out and no mode would ever initialise. A missing archive
//! fails the build with one line naming the Debian package that has it.
use std::path::{Path, PathBuf};
use std::process::{Command, exit};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-env-changed=CLANG");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let endian = std::env::var("CARGO_CFG_TARGET_ENDIAN").unwrap_or_default();
    // compiler-rt's spelling of the architecture in its archive names.
    let crt_arch = match (arch.as_str(), endian.as_str()) {
        ("powerpc64", "little") => "powerpc64le".to_string(),
        _ => arch.clone(),
    };
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let major = clang_major(&clang);
    let package = format!("libclang-rt-{}-dev", major.as_deref().unwrap_or("14"));
    let mut archives = vec![format!("clang_rt.xray-{crt_arch}")];
    if std::env::var_os("CARGO_FEATURE_BASIC").is_some() {
        archives.push(format!("clang_rt.xray-basic-{crt_arch}"));
    }
    if std::env::var_os("CARGO_FEATURE_FDR").is_some() {
        archives.push(format!("clang_rt.xray-fdr-{crt_arch}"));
    }
    let mut dir: Option<PathBuf> = None;
    for name in &archives {
        let file = format!("lib{name}.a");
        let path = find(&clang, &file).unwrap_or_else(|why| {
            let found = match &major {
                Some(m) => format!("clang {m}"),
                None => format!("no working clang at `{clang}`"),
            };
            eprintln!(
                "xray-sys: compiler-rt's XRay runtime {file} not found ({why}; {found}): install \
                 the Debian package {package} (and clang), or set CLANG to a clang whose \
                 compiler-rt has it"
            );
            exit(1);
        });
        println!("cargo:rerun-if-changed={}", path.display());
        let parent = path.parent().unwrap().to_path_buf();
        if dir.as_ref() != Some(&parent) {
            println!("cargo:rustc-link-search=native={}", parent.display());
            dir = Some(parent);
        }
        // A dependency's `rustc-link-arg` never reaches the executable's link: a library with
        // the whole-archive modifier does (rustc bundles it into this crate's rlib and passes
        // it between --whole-archive and --no-whole-archive at the final link).
        println!("cargo:rustc-link-lib=static:+whole-archive={name}");
    }
    println!(
        "cargo:rustc-env=XRAY_SYS_COMPILER_RT={}",
        dir.as_deref()
            .map_or(String::new(), |d| d.display().to_string())
    );
    println!(
        "cargo:rustc-env=XRAY_SYS_CLANG_MAJOR={}",
        major.as_deref().unwrap_or("")
    );
    // compiler-rt's C++ (no exceptions, no RTTI here, but a C++ runtime is what it is built
    // against), and the libraries clang's driver links with -fxray-instrument (glibc 2.34 and
    // later have them in libc: rustc links with --as-needed, so they cost nothing there).
    for lib in ["stdc++", "pthread", "rt", "m", "dl"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }

    // The shim only reads linker-defined symbols and compiler-rt's sled map; never
    // instrumented (it is not on the handler path, but it runs while patching).
    cc::Build::new()
        .file("src/shim.c")
        .flag_if_supported("-fno-instrument-functions")
        .flag_if_supported("-fno-stack-protector")
        .warnings(true)
        .compile("xray_sys_shim");
}

/// `clang -print-file-name=<file>` as an existing absolute path, or why not.
fn find(clang: &str, file: &str) -> Result<PathBuf, String> {
    let arg = format!("-print-file-name={file}");
    let out = Command::new(clang)
        .arg(&arg)
        .output()
        .map_err(|e| format!("cannot run `{clang} {arg}`: {e}"))?;
    if !out.status.success() {
        return Err(format!("`{clang} {arg}` failed ({})", out.status));
    }
    let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let path = PathBuf::from(&printed);
    // clang prints the bare name back when it finds no such file.
    if !Path::new(&printed).is_absolute() || !path.is_file() {
        return Err(format!("`{clang} {arg}` printed `{printed}`, no such file"));
    }
    Ok(path)
}

/// The major version of `clang -dumpversion` ("14.0.6" -> "14"), if clang runs.
fn clang_major(clang: &str) -> Option<String> {
    let out = Command::new(clang).arg("-dumpversion").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let major = v.split('.').next()?.to_string();
    (!major.is_empty() && major.bytes().all(|b| b.is_ascii_digit())).then_some(major)
}
