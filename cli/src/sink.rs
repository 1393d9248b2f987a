//! Where a command's output goes: standard output, or a file. A file is written under a
//! temporary name and renamed into place when complete, so a failed command leaves no partial
//! file. Also the one message for a failed write. Uses nothing else of the crate.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The message for a failed write of `name`.
pub fn write_error(name: &str, e: std::io::Error) -> String {
    if e.raw_os_error() == Some(libc::EFBIG) {
        format!("cannot write {name}: {e}: the file size limit (`ulimit -f`) is reached")
    } else {
        format!("cannot write {name}: {e}")
    }
}

/// One line of output on `out` (standard output).
pub fn put(out: &mut impl Write, s: String) -> Result<(), String> {
    writeln!(out, "{s}").map_err(|e| write_error("standard output", e))
}

/// Where the output goes: a temporary file renamed into place at the end, or stdout.
pub struct Sink {
    out: Box<dyn Write>,
    tmp: Option<(PathBuf, PathBuf)>,
    /// What is written, for messages: the -o file, or standard output.
    name: String,
}

impl Sink {
    /// Standard output (`path` None), or a temporary file next to `path`.
    pub fn open(path: Option<&Path>) -> Result<Sink, String> {
        let Some(path) = path else {
            return Ok(Sink {
                out: Box::new(std::io::BufWriter::with_capacity(
                    1 << 20,
                    std::io::stdout(),
                )),
                tmp: None,
                name: "standard output".to_string(),
            });
        };
        let name = path
            .file_name()
            .ok_or_else(|| format!("{}: not a file name", path.display()))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{}.tmp", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        let f = std::fs::File::create(&tmp)
            .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        Ok(Sink {
            out: Box::new(std::io::BufWriter::with_capacity(1 << 20, f)),
            tmp: Some((tmp, path.to_path_buf())),
            name: path.display().to_string(),
        })
    }

    pub fn write(&mut self, s: &str) -> Result<(), String> {
        self.write_bytes(s.as_bytes())
    }

    pub fn write_bytes(&mut self, b: &[u8]) -> Result<(), String> {
        self.out
            .write_all(b)
            .map_err(|e| write_error(&self.name, e))
    }

    /// Flushes, and renames the temporary file into place.
    pub fn finish(mut self) -> Result<(), String> {
        self.out.flush().map_err(|e| write_error(&self.name, e))?;
        drop(std::mem::replace(&mut self.out, Box::new(std::io::sink())));
        if let Some((tmp, path)) = self.tmp.take() {
            std::fs::rename(&tmp, &path).map_err(|e| {
                format!("cannot rename {} to {}: {e}", tmp.display(), path.display())
            })?;
        }
        Ok(())
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        // Not finished: the partial file goes.
        if let Some((tmp, _)) = self.tmp.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}
