//! No sled patching on this architecture (yet).

use crate::arch::UNWIND_BYTES;

pub const SUPPORTED: bool = false;
pub const BYTES: usize = 11;
pub const HEAD: usize = 1;
pub const REACH: usize = 0;
pub const MAX_ID: u32 = 0;
pub fn original(_kind: u8, _code: &[u8; BYTES]) -> bool {
    false
}
pub fn rest(_kind: u8) -> usize {
    HEAD
}
pub fn patched(_kind: u8, _id: u32, _at: usize, _stub: usize) -> Option<[u8; BYTES]> {
    None
}
pub fn store_head(_at: usize, _head: [u8; HEAD]) {}
pub const STUB_BYTES: usize = 32;
pub fn stub(_table: usize, _target: usize) -> [u8; STUB_BYTES] {
    [0; STUB_BYTES]
}
pub fn trampolines() -> [usize; 3] {
    [0; 3]
}
pub fn flush(_at: usize, _len: usize) {}
pub fn unwind_info(_code: usize, _len: usize) -> [u8; UNWIND_BYTES] {
    [0; UNWIND_BYTES]
}
