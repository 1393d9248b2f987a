//! The runtime `instrfn record` preloads: the one given with `--preload`, else the
//! libinstrfn.so next to this program (a workspace build puts both in target/<profile>/), else
//! the copy built into this program (cli/build.rs), written once to a per-user cache and
//! found there again by its content. Uses nothing else of the command.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The runtime built for this command's target.
static EMBEDDED: &[u8] = include_bytes!(env!("INSTRFN_EMBEDDED_RUNTIME"));

/// The runtime to preload.
pub fn find(given: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return if p.is_file() {
            Ok(std::path::absolute(&p).unwrap_or(p))
        } else {
            Err(format!("--preload {}: no such file", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let beside = exe.with_file_name("libinstrfn.so");
    if beside.is_file() {
        return Ok(beside);
    }
    cached()
}

/// FNV-1a 64 of the embedded runtime: the name of its cache directory.
fn content_hash() -> u64 {
    EMBEDDED.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The embedded runtime as a file of the per-user cache ($XDG_CACHE_HOME/instrfn, else
/// ~/.cache/instrfn, else a directory of this user's in the temporary directory), written if
/// it is not there with exactly this content.
fn cached() -> Result<PathBuf, String> {
    let name = format!("runtime-{:016x}", content_hash());
    let mut tried = Vec::new();
    for base in cache_bases() {
        let dir = base.join(&name);
        match install(&dir) {
            Ok(lib) => return Ok(lib),
            Err(e) => tried.push(format!("{}: {e}", dir.display())),
        }
    }
    Err(format!(
        "cannot write the built-in runtime to a cache directory ({}); pass --preload",
        tried.join("; ")
    ))
}

fn cache_bases() -> Vec<PathBuf> {
    let mut bases = Vec::new();
    let var = |v: &str| {
        std::env::var_os(v)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    };
    if let Some(xdg) = var("XDG_CACHE_HOME").filter(|p| p.is_absolute()) {
        bases.push(xdg.join("instrfn"));
    }
    if let Some(home) = var("HOME").filter(|p| p.is_absolute()) {
        bases.push(home.join(".cache/instrfn"));
    }
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    bases.push(std::env::temp_dir().join(format!("instrfn-{uid}")));
    bases
}

/// `dir/libinstrfn.so` with the embedded content: kept if it is there already, else written
/// under a temporary name and renamed into place (two commands starting at once both end
/// with the whole file).
fn install(dir: &Path) -> Result<PathBuf, String> {
    let lib = dir.join("libinstrfn.so");
    if std::fs::read(&lib).is_ok_and(|bytes| bytes == EMBEDDED) {
        return Ok(lib);
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| e.to_string())?;
    owned_private(dir)?;
    let tmp = dir.join(format!(".libinstrfn.so.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(EMBEDDED)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o755))?;
        f.sync_all()?;
        std::fs::rename(&tmp, &lib)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        e.to_string()
    })?;
    Ok(lib)
}

/// A directory of this user's that no one else may write into (it holds code we preload).
fn owned_private(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err("not a directory of this user's that only it may write".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_runtime_is_a_shared_object() {
        assert_eq!(&EMBEDDED[..4], b"\x7fELF");
        assert!(EMBEDDED.len() > 100_000);
    }

    #[test]
    fn the_cache_keeps_one_copy_and_mends_a_changed_one() {
        let base = std::env::temp_dir().join(format!("instrfn-cache-test-{}", std::process::id()));
        let dir = base.join("runtime-test");
        let lib = install(&dir).unwrap();
        assert_eq!(std::fs::read(&lib).unwrap(), EMBEDDED);
        let inode = std::fs::metadata(&lib).unwrap().ino();
        // Found again as it is.
        assert_eq!(install(&dir).unwrap(), lib);
        assert_eq!(std::fs::metadata(&lib).unwrap().ino(), inode);
        // A file that is not the runtime is replaced.
        std::fs::write(&lib, b"not a library").unwrap();
        install(&dir).unwrap();
        assert_eq!(std::fs::read(&lib).unwrap(), EMBEDDED);
        // A directory others may write into is refused.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(&lib, b"planted").unwrap();
        assert!(install(&dir).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
