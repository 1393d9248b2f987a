//! A fixed-capacity byte buffer on the stack, for messages and paths.

use core::ffi::{CStr, c_char};
use core::fmt;

/// A fixed-capacity byte buffer that implements `fmt::Write`; output past the capacity is cut
/// off (messages and paths only, never data).
pub struct StackBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
    truncated: bool,
}

impl<const N: usize> StackBuf<N> {
    pub const fn new() -> Self {
        StackBuf {
            buf: [0; N],
            len: 0,
            truncated: false,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        let room = N - self.len;
        let n = bytes.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
        self.truncated |= n < bytes.len();
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The contents followed by a NUL, if they fit and contain no NUL.
    pub fn as_cstr(&mut self) -> Option<&CStr> {
        if self.len >= N || self.truncated || self.as_bytes().contains(&0) {
            return None;
        }
        self.buf[self.len] = 0;
        CStr::from_bytes_with_nul(&self.buf[..=self.len]).ok()
    }

    /// The contents as a C string pointer; only after [`as_cstr`](Self::as_cstr) succeeded.
    pub fn as_c_ptr(&self) -> *const c_char {
        assert!(self.len < N && self.buf[self.len] == 0);
        self.buf.as_ptr().cast()
    }

    pub fn clear(&mut self) {
        self.len = 0;
        self.truncated = false;
    }
}

impl<const N: usize> fmt::Write for StackBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}
