//! The reader's one error type: a file (or directory) and what is wrong with it. Uses nothing
//! else of the crate.

use std::fmt;
use std::path::{Path, PathBuf};

/// A problem with a trace: the file (or directory) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub path: PathBuf,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for Error {}

pub(crate) const NO_TRACE: &str = "no trace in this directory (no <pid>.<image>.meta file)";
pub(crate) const NOT_A_TRACE: &str =
    "not an instrfn trace (its first line is not `instrfn-trace <version>`)";
pub(crate) const TRUNCATED: &str = "truncated: no `process` or `clock` line";
pub(crate) const EMPTY: &str = "empty: the process wrote none of its trace";

impl Error {
    /// The directory holds no meta file at all.
    pub fn no_trace(&self) -> bool {
        self.message == NO_TRACE
    }

    /// A meta file without its header lines (empty or cut short: its disk was full, say).
    pub fn meta_incomplete(&self) -> bool {
        self.message == NOT_A_TRACE || self.message == TRUNCATED || self.message == EMPTY
    }
}

pub(crate) fn error(path: &Path, message: impl Into<String>) -> Error {
    Error {
        path: path.to_path_buf(),
        message: message.into(),
    }
}
