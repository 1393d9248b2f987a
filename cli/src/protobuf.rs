//! Protocol buffers encoding by hand, for the Perfetto and pprof exports: varints and
//! length-delimited fields appended to a byte buffer (protobuf.dev/programming-guides/encoding).
//! Only what those two formats use: unsigned varints (uint32, uint64, int32 and int64 that
//! are never negative, bool, enum), strings and nested messages. Uses nothing else of the
//! crate.

/// Wire type 0: a varint.
const VARINT: u32 = 0;
/// Wire type 2: a length, then that many bytes (strings, bytes, nested messages).
const LEN: u32 = 2;

/// Appends `v` as a base-128 varint (7 bits a byte, low bits first, top bit: more follow).
pub fn varint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push(v as u8 | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

/// How many bytes [`varint`] writes for `v`.
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn key(b: &mut Vec<u8>, field: u32, wire: u32) {
    varint(b, u64::from(field << 3 | wire));
}

/// A varint field (uint32, uint64, a non-negative int32 or int64, an enum).
pub fn uint(b: &mut Vec<u8>, field: u32, v: u64) {
    key(b, field, VARINT);
    varint(b, v);
}

/// A string or bytes field.
pub fn bytes(b: &mut Vec<u8>, field: u32, v: &[u8]) {
    key(b, field, LEN);
    varint(b, v.len() as u64);
    b.extend_from_slice(v);
}

/// A string field.
pub fn string(b: &mut Vec<u8>, field: u32, v: &str) {
    bytes(b, field, v.as_bytes());
}

/// A nested message field: `f` appends the message's fields. Its length is not known before,
/// so one byte is kept for it and the body moved up when the length needs more.
pub fn message(b: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    key(b, field, LEN);
    let at = b.len();
    b.push(0);
    f(b);
    let len = b.len() - at - 1;
    if len < 0x80 {
        b[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(10);
        varint(&mut prefix, len as u64);
        b.splice(at..at + 1, prefix);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fields() {
        let mut b = Vec::new();
        varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
        for v in [0, 1, 127, 128, 16383, 16384, u64::MAX] {
            let mut b = Vec::new();
            varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v), "{v}");
        }
        // The encoding guide's example: field 1 = 150, field 2 = "testing".
        let mut b = Vec::new();
        uint(&mut b, 1, 150);
        string(&mut b, 2, "testing");
        assert_eq!(b, b"\x08\x96\x01\x12\x07testing");
    }

    #[test]
    fn nested_messages_of_any_length() {
        for n in [0, 5, 127, 128, 300, 20000] {
            let mut b = Vec::new();
            message(&mut b, 3, |m| bytes(m, 1, &vec![7u8; n]));
            let inner = 1 + varint_len(n as u64) + n;
            assert_eq!(b[0], 3 << 3 | 2);
            let mut len = Vec::new();
            varint(&mut len, inner as u64);
            assert_eq!(&b[1..1 + len.len()], &len[..], "{n}");
            assert_eq!(b.len(), 1 + len.len() + inner, "{n}");
        }
    }
}
