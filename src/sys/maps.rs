//! /proc/self/maps, read with raw system calls into a small stack buffer (async-signal-safe,
//! no allocation): which mapping holds an address, and where the main thread's stack is.

use super::file::File;

/// One line of /proc/self/maps: `[start, end)`, two of its permissions, and whether it is the
/// main thread's `[stack]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    pub read: bool,
    pub exec: bool,
    pub stack: bool,
}

impl Mapping {
    /// `(start, end)` if readable, else an empty range.
    #[cfg_attr(not(target_arch = "riscv64"), allow(dead_code))] // (riscv64's call sites)
    pub fn readable(&self) -> (usize, usize) {
        if self.read {
            (self.start, self.end)
        } else {
            (0, 0)
        }
    }

    /// Whether `[addr, addr + len)` lies inside.
    pub fn holds(&self, addr: usize, len: usize) -> bool {
        self.start <= addr && addr.checked_add(len).is_some_and(|e| e <= self.end)
    }
}

/// What one read of /proc/self/maps found.
pub struct Found<const N: usize> {
    /// The mapping that holds each address asked for.
    pub at: [Option<Mapping>; N],
    /// The main thread's stack (`[stack]`).
    pub stack: Option<Mapping>,
}

/// The mappings that hold each of `addrs`, and the `[stack]` mapping, from one read of
/// /proc/self/maps. None if it cannot be read (out of descriptors, say).
pub fn find<const N: usize>(addrs: [usize; N]) -> Option<Found<N>> {
    let file = File::open(c"/proc/self/maps")?;
    let mut scan = Scan::new(addrs);
    let mut buf = [0u8; 512];
    loop {
        match file.read(&mut buf) {
            0 => return Some(scan.finish()),
            n if n > 0 => scan.feed(&buf[..n as usize]),
            _ => return None,
        }
    }
}

/// The mapping that holds each of `addrs` ([`find`]).
#[cfg_attr(not(target_arch = "riscv64"), allow(dead_code))] // (riscv64's call sites)
pub fn read_maps<const N: usize>(addrs: [usize; N]) -> Option<[Option<Mapping>; N]> {
    find(addrs).map(|f| f.at)
}

/// A parser of /proc/self/maps lines (`start-end perms offset dev inode path`) fed in pieces
/// of any size.
struct Scan<const N: usize> {
    addrs: [usize; N],
    found: Found<N>,
    /// 0 start, 1 end, 2 permissions, 3 the rest of the line (or a malformed line).
    field: u8,
    digits: u8,
    start: usize,
    end: usize,
    perm: u8,
    read: bool,
    exec: bool,
    /// The line's last bytes (its path's end), to tell `[stack]`.
    tail: [u8; 7],
}

impl<const N: usize> Scan<N> {
    fn new(addrs: [usize; N]) -> Self {
        Scan {
            addrs,
            found: Found {
                at: [None; N],
                stack: None,
            },
            field: 0,
            digits: 0,
            start: 0,
            end: 0,
            perm: 0,
            read: false,
            exec: false,
            tail: [0; 7],
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                self.end_line();
                continue;
            }
            self.tail.copy_within(1.., 0);
            self.tail[6] = b;
            match self.field {
                0 | 1 => {
                    let digit = (b as char).to_digit(16);
                    match (digit, b) {
                        (Some(d), _) if self.digits < 16 => {
                            let v = if self.field == 0 {
                                &mut self.start
                            } else {
                                &mut self.end
                            };
                            *v = *v << 4 | d as usize;
                            self.digits += 1;
                        }
                        (None, b'-') if self.field == 0 && self.digits > 0 => {
                            self.field = 1;
                            self.digits = 0;
                        }
                        (None, b' ') if self.field == 1 && self.digits > 0 => self.field = 2,
                        _ => {
                            // Malformed: never matches (start is not below end).
                            (self.start, self.end) = (1, 0);
                            self.field = 3;
                        }
                    }
                }
                2 => {
                    match self.perm {
                        0 => self.read = b == b'r',
                        2 => self.exec = b == b'x',
                        _ => {}
                    }
                    self.perm += 1;
                    if self.perm == 4 {
                        self.field = 3;
                    }
                }
                _ => {}
            }
        }
    }

    fn end_line(&mut self) {
        if self.field == 3 && self.start < self.end {
            let m = Mapping {
                start: self.start,
                end: self.end,
                read: self.read,
                exec: self.exec,
                stack: &self.tail == b"[stack]",
            };
            for (addr, found) in self.addrs.iter().zip(self.found.at.iter_mut()) {
                if found.is_none() && m.holds(*addr, 1) {
                    *found = Some(m);
                }
            }
            if m.stack {
                self.found.stack = Some(m);
            }
        }
        let found = core::mem::replace(
            &mut self.found,
            Found {
                at: [None; N],
                stack: None,
            },
        );
        *self = Scan::new(self.addrs);
        self.found = found;
    }

    fn finish(mut self) -> Found<N> {
        self.end_line();
        self.found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_fed_in_pieces() {
        let text = b"00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/dbus\n\
            7ffe1000-7ffe3000 rw-p 00000000 00:00 0 [stack]\nzz-1 r\n";
        for piece in [1, 3, 7, 64] {
            let mut scan = Scan::new([0x400100, 0x7ffe2000, 0x500000]);
            for c in text.chunks(piece) {
                scan.feed(c);
            }
            let found = scan.finish();
            let code = found.at[0].unwrap();
            assert_eq!(
                (code.start, code.end, code.read, code.exec),
                (0x400000, 0x452000, true, true)
            );
            assert!(!code.stack);
            assert_eq!(found.at[1], found.stack);
            assert_eq!(found.stack.unwrap().start, 0x7ffe1000);
            assert_eq!(found.at[2], None);
        }
    }

    #[test]
    fn finds_this_threads_stack() {
        let local = 0u8;
        let here = &local as *const u8 as usize;
        let f = find([here]).unwrap();
        assert!(f.at[0].unwrap().holds(here, 1));
    }
}
