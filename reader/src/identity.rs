//! A module's file as it is now: read, and compared with the identity the runtime recorded
//! for it (build-id, else size, modification time and a hash of the first 4 KiB). Uses meta.

use std::path::Path;

use object::Object;

use crate::meta::Identity;

/// The contents of the file at `path`, or why it cannot be had.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "gone (no such file)".to_string(),
        _ => format!("cannot be read ({e})"),
    })
}

/// Bytes as lowercase hex digits, two per byte (how build-ids are written).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// FNV-1a of the first 4 KiB, as the runtime hashes them (src/trace.rs).
fn head_hash(data: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in &data[..data.len().min(4096)] {
        hash = (hash ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Why the file `data` (at `path`) is not the one recorded as `id`, or None when it is (or
/// the record cannot tell: the runtime could not read the file).
pub(crate) fn differs(
    id: &Identity,
    path: &Path,
    data: &[u8],
    file: &object::File,
) -> Option<String> {
    let now = file.build_id().ok().flatten().map(hex);
    if let (Some(then), Some(now)) = (&id.build_id, &now) {
        return (then != now)
            .then(|| "changed since the trace was recorded (another build-id)".to_string());
    }
    if id.size == 0 && id.mtime_ns == 0 {
        return None;
    }
    let meta = std::fs::metadata(path).ok();
    let mtime = meta.as_ref().map_or(0, |m| {
        use std::os::unix::fs::MetadataExt;
        (m.mtime() as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(m.mtime_nsec() as u64)
    });
    let mut what = Vec::new();
    if data.len() as u64 != id.size {
        what.push("size");
    }
    if mtime != id.mtime_ns {
        what.push("modification time");
    }
    if !id.head_hash.eq_ignore_ascii_case(&head_hash(data)) {
        what.push("first 4 KiB");
    }
    (!what.is_empty()).then(|| {
        format!(
            "changed since the trace was recorded (another {})",
            what.join(", ")
        )
    })
}
