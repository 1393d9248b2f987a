//! The executable's sled map (`xray_instr_map`): its entries read in place, addresses
//! resolved, and its functions numbered as compiler-rt numbers them. Uses sections.

use crate::sections::symbols;

/// The kind of a sled (`xray_instr_map` entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SledKind {
    Entry,
    Exit,
    Tail,
    LogArgsEntry,
    CustomEvent,
    TypedEvent,
    Other(u8),
}

/// One entry of the sled map, addresses resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sled {
    /// Where the sled is.
    pub address: usize,
    /// The function it belongs to (its entry address).
    pub function: usize,
    pub kind: SledKind,
    /// Set for functions marked `xray_always_instrument`.
    pub always_instrument: bool,
    /// Entry version: 2 means both addresses are relative to their own fields.
    pub version: u8,
}

/// A function of the sled map: its address and which sleds it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Function {
    /// Its entry address.
    pub address: usize,
    /// It has an entry sled (plain or argument-logging).
    pub has_entry: bool,
    /// It has an exit or tail exit sled.
    pub has_exit: bool,
}

/// The executable's sled map, `xray_instr_map`: 32-byte entries (address, function, kind,
/// always-instrument, version, padding).
#[derive(Clone, Copy, Debug)]
pub struct SledMap {
    start: usize,
    entries: usize,
}

/// Bytes of one sled map entry.
pub const SLED_ENTRY_SIZE: usize = 32;

impl SledMap {
    /// Number of sleds.
    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Address of the first entry.
    pub fn start(&self) -> usize {
        self.start
    }

    /// Sled `i` (`i < len()`).
    pub fn get(&self, i: usize) -> Option<Sled> {
        if i >= self.entries {
            return None;
        }
        let e = self.start + i * SLED_ENTRY_SIZE;
        // SAFETY: entry i lies within the linker-delimited section (checked above), which is
        // mapped read-only for the life of the program.
        let (address, function, kind, always, version) = unsafe {
            (
                (e as *const u64).read_unaligned(),
                ((e + 8) as *const u64).read_unaligned(),
                ((e + 16) as *const u8).read(),
                ((e + 17) as *const u8).read(),
                ((e + 18) as *const u8).read(),
            )
        };
        let (address, function) = if version >= 2 {
            (
                e.wrapping_add(address as usize),
                (e + 8).wrapping_add(function as usize),
            )
        } else {
            (address as usize, function as usize)
        };
        let kind = match kind {
            0 => SledKind::Entry,
            1 => SledKind::Exit,
            2 => SledKind::Tail,
            3 => SledKind::LogArgsEntry,
            4 => SledKind::CustomEvent,
            5 => SledKind::TypedEvent,
            k => SledKind::Other(k),
        };
        Some(Sled {
            address,
            function,
            kind,
            always_instrument: always != 0,
            version,
        })
    }

    /// Every sled, in map order.
    pub fn iter(&self) -> impl Iterator<Item = Sled> + '_ {
        (0..self.entries).filter_map(|i| self.get(i))
    }

    /// Every function, indexed by function id - 1, numbered as compiler-rt numbers them when
    /// it patches: a new id each time a sled's function differs from the previous sled's (LLVM
    /// emits each function's sleds together, so this is the order in which functions first
    /// appear in the map).
    pub fn functions(&self) -> Vec<Function> {
        let mut v: Vec<Function> = Vec::new();
        let mut last = 0;
        for s in self.iter() {
            if s.function != last {
                v.push(Function {
                    address: s.function,
                    has_entry: false,
                    has_exit: false,
                });
                last = s.function;
            }
            let Some(f) = v.last_mut() else { continue };
            match s.kind {
                SledKind::Entry | SledKind::LogArgsEntry => f.has_entry = true,
                SledKind::Exit | SledKind::Tail => f.has_exit = true,
                _ => {}
            }
        }
        v
    }

    /// The address of every function, indexed by function id - 1 (see [`SledMap::functions`]).
    pub fn function_addresses(&self) -> Vec<usize> {
        self.functions().iter().map(|f| f.address).collect()
    }
}

/// The executable's sled map, `None` if it has none.
pub fn sled_map() -> Option<SledMap> {
    let s = symbols();
    if s.instr_map_start == 0 || s.instr_map_stop <= s.instr_map_start {
        return None;
    }
    Some(SledMap {
        start: s.instr_map_start,
        entries: (s.instr_map_stop - s.instr_map_start) / SLED_ENTRY_SIZE,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A sled map of version-2 entries in `buf` (8-byte aligned): `sleds` as (function index,
    /// kind), function i at address 0x1000 * (i + 1) + base of nothing (any distinct values).
    pub(crate) fn sled_map_in(buf: &mut [u64], sleds: &[(usize, u8)]) -> (SledMap, Vec<usize>) {
        let start = buf.as_ptr() as usize;
        let fns: Vec<usize> = (0..8).map(|i| 0x7000_0000 + 0x1000 * i).collect();
        for (i, &(f, kind)) in sleds.iter().enumerate() {
            let e = start + i * SLED_ENTRY_SIZE;
            let w = &mut buf[i * 4..i * 4 + 4];
            // address and function relative to their own fields
            w[0] = (fns[f] + 16).wrapping_sub(e) as u64;
            w[1] = fns[f].wrapping_sub(e + 8) as u64;
            w[2] = u64::from(kind) | 1 << 8 | 2 << 16; // kind, always, version 2
            w[3] = 0;
        }
        (
            SledMap {
                start,
                entries: sleds.len(),
            },
            fns,
        )
    }

    pub(crate) const SLEDS: [(usize, u8); 6] = [(0, 0), (0, 1), (3, 0), (3, 2), (3, 1), (1, 0)];

    #[test]
    fn walk_numbers_functions_as_compiler_rt() {
        let mut buf = vec![0u64; 4 * SLEDS.len()];
        let (map, fns) = sled_map_in(&mut buf, &SLEDS);
        assert_eq!(map.function_addresses(), vec![fns[0], fns[3], fns[1]]);
        let s = map.get(3).unwrap();
        assert_eq!(
            (
                s.function,
                s.address,
                s.kind,
                s.always_instrument,
                s.version
            ),
            (fns[3], fns[3] + 16, SledKind::Tail, true, 2)
        );
        assert_eq!(map.get(6), None);
    }

    #[test]
    fn each_function_has_the_sleds_of_its_kinds() {
        let sleds = [(0, 0), (0, 1), (3, 2), (1, 0), (2, 3), (2, 4)];
        let mut buf = vec![0u64; 4 * sleds.len()];
        let (map, fns) = sled_map_in(&mut buf, &sleds);
        let f = |i: usize, has_entry, has_exit| Function {
            address: fns[i],
            has_entry,
            has_exit,
        };
        assert_eq!(
            map.functions(),
            vec![
                f(0, true, true),
                f(3, false, true),
                f(1, true, false),
                f(2, true, false)
            ]
        );
    }
}
