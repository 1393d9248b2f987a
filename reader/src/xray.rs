//! XRay function ids of a traced executable, from its instrumentation map (section
//! `xray_instr_map`, written by clang `-fxray-instrument` and rustc `-Zinstrument-xray`).
//! Functions are numbered as compiler-rt's runtime and `llvm-xray` number them. So a log
//! written with these ids reads back in `llvm-xray account|convert|stack -instr_map BINARY`.
//!
//! The map: entries of 32 bytes on 64-bit targets, in the file's byte order —
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | sled address |
//! | 8 | 8 | function address |
//! | 16 | 1 | kind: 0 entry, 1 exit, 2 tail exit, 3 entry with argument, 4 custom event, 5 typed event |
//! | 17 | 1 | always-instrument |
//! | 18 | 1 | version |
//! | 19 | 13 | padding |
//!
//! Version 2 (LLVM 12 and later) stores both addresses relative to the place of their own
//! field (sled: the entry's offset 0; function: its offset 8). Versions 0 and 1 store them
//! absolute. In a position-independent executable that means zero in the file, and an
//! `R_*_RELATIVE` dynamic relocation gives the value.
//!
//! Function ids count from 1 in map order. The id goes up by one at every entry whose function
//! differs from the entry before: the sleds of one function are contiguous. A function whose
//! sleds were not would get two ids; an address maps to the later one, as in `llvm-xray`.
//!
//! Uses endian, error, identity, meta and process.

use std::collections::HashMap;
use std::path::PathBuf;

use object::{Object, ObjectSection, ObjectSymbol};

use crate::endian::u64_at;
use crate::error::{Error, error};
use crate::identity;
use crate::meta::Module;
use crate::process::Process;

/// Bytes per map entry on 64-bit targets.
const ENTRY: usize = 32;

/// The XRay function ids of one executable file.
#[derive(Debug)]
pub struct InstrMap {
    /// The file read.
    pub path: PathBuf,
    /// Function (link-time address) -> id.
    ids: HashMap<u64, i32>,
    /// The highest id (the number of functions in the map).
    pub functions: i32,
    /// The file's function symbols, (start, end) sorted by start: an address inside a
    /// function (an `mcount` call site) maps to the id of the function that holds it.
    ranges: Vec<(u64, u64)>,
}

impl InstrMap {
    /// The map of `p`'s executable: the file its `module` line names, which must still be the
    /// file that was traced (its recorded identity). Returns it with that module (its load
    /// bias and code range).
    pub fn of_executable(p: &Process) -> Result<(InstrMap, Module), Error> {
        let exe = p.exe.as_ref().ok_or_else(|| {
            error(
                &p.meta_path,
                "the trace names no executable (no `exe` line)",
            )
        })?;
        let module = p
            .modules
            .iter()
            .find(|m| m.path == exe.path)
            .ok_or_else(|| {
                error(
                    &p.meta_path,
                    format!("no `module` line for the executable {}", exe.path.display()),
                )
            })?
            .clone();
        let map = InstrMap::read(&module)?;
        Ok((map, module))
    }

    /// The map of the file of module `m` (checked against the identity recorded for it).
    pub fn read(m: &Module) -> Result<InstrMap, Error> {
        let path = &m.path;
        let data = identity::read(path).map_err(|why| error(path, why))?;
        let file = object::File::parse(&*data).map_err(|_| error(path, "not an ELF file"))?;
        if let Some(id) = &m.identity
            && let Some(why) = identity::differs(id, path, &data, &file)
        {
            return Err(error(path, why));
        }
        let section = file.section_by_name("xray_instr_map").ok_or_else(|| {
            error(
                path,
                "has no XRay instrumentation map (section xray_instr_map): build it with clang \
                 -fxray-instrument or rustc -Zinstrument-xray",
            )
        })?;
        if !file.is_64() {
            return Err(error(
                path,
                "is a 32-bit executable: only 64-bit XRay instrumentation maps are read",
            ));
        }
        let bytes = section
            .data()
            .map_err(|e| error(path, format!("cannot read its xray_instr_map ({e})")))?;
        let relative = relative_relocations(&file);
        let functions = parse(bytes, section.address(), file.is_little_endian(), |at| {
            relative.get(&at).copied()
        })
        .map_err(|why| error(path, format!("its xray_instr_map {why}")))?;
        let mut ids = HashMap::with_capacity(functions.len());
        let mut highest = 0;
        for &(func, id) in &functions {
            ids.insert(func, id);
            highest = highest.max(id);
        }
        let mut ranges: Vec<(u64, u64)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0 && s.size() > 0)
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
            .collect();
        ranges.sort_unstable();
        ranges.dedup_by_key(|r| r.0);
        Ok(InstrMap {
            path: path.clone(),
            ids,
            functions: highest,
            ranges,
        })
    }

    /// The id of the function at link-time address `link` (its start, or for an address
    /// inside a function whose symbol has a size, that function's), if it is in the map.
    pub fn id(&self, link: u64) -> Option<i32> {
        if let Some(&id) = self.ids.get(&link) {
            return Some(id);
        }
        let i = self
            .ranges
            .partition_point(|r| r.0 <= link)
            .checked_sub(1)?;
        let (start, end) = self.ranges[i];
        if link < end {
            self.ids.get(&start).copied()
        } else {
            None
        }
    }
}

/// Dynamic relocations that store "load base + addend" at a place (what an absolute address
/// in a position-independent file becomes): place -> addend.
fn relative_relocations(file: &object::File) -> HashMap<u64, u64> {
    let relative = match file.architecture() {
        object::Architecture::X86_64 => object::elf::R_X86_64_RELATIVE,
        object::Architecture::Aarch64 => object::elf::R_AARCH64_RELATIVE,
        object::Architecture::Riscv64 => object::elf::R_RISCV_RELATIVE,
        object::Architecture::PowerPc64 => object::elf::R_PPC64_RELATIVE,
        object::Architecture::S390x => object::elf::R_390_RELATIVE,
        object::Architecture::LoongArch64 => object::elf::R_LARCH_RELATIVE,
        _ => return HashMap::new(),
    };
    let Some(relocs) = file.dynamic_relocations() else {
        return HashMap::new();
    };
    relocs
        .filter(|(_, r)| {
            matches!(r.flags(), object::RelocationFlags::Elf { r_type } if r_type == relative)
        })
        .map(|(at, r)| (at, r.addend() as u64))
        .collect()
}

/// The functions of a map (section contents `bytes` at link-time address `section`), each
/// with its id, in map order. `relocated(place)` gives the value a dynamic relocation stores
/// at `place`, for version 0/1 entries whose field is zero in the file.
pub fn parse(
    bytes: &[u8],
    section: u64,
    little_endian: bool,
    relocated: impl Fn(u64) -> Option<u64>,
) -> Result<Vec<(u64, i32)>, String> {
    if !bytes.len().is_multiple_of(ENTRY) {
        return Err(format!(
            "is {} bytes long, not a whole number of {ENTRY}-byte entries",
            bytes.len()
        ));
    }
    let mut out: Vec<(u64, i32)> = Vec::new();
    let mut current: Option<u64> = None;
    let mut id = 0i32;
    for (i, e) in bytes.chunks_exact(ENTRY).enumerate() {
        let at = section.wrapping_add((i * ENTRY) as u64);
        let kind = e[16];
        if kind > 5 {
            return Err(format!("entry {i} has an unknown kind {kind}"));
        }
        let version = e[18];
        let mut function = u64_at(e, 8, little_endian);
        if version >= 2 {
            function = function.wrapping_add(at + 8);
        } else if function == 0 {
            function = relocated(at + 8).unwrap_or(0);
        }
        if current != Some(function) {
            id = id
                .checked_add(1)
                .ok_or_else(|| "has more functions than XRay ids".to_string())?;
            current = Some(function);
            out.push((function, id));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(sled: u64, function: u64, kind: u8, version: u8) -> Vec<u8> {
        let mut e = vec![0u8; ENTRY];
        e[0..8].copy_from_slice(&sled.to_le_bytes());
        e[8..16].copy_from_slice(&function.to_le_bytes());
        e[16] = kind;
        e[18] = version;
        e
    }

    #[test]
    fn version_2_is_relative_to_each_field() {
        // Section at 0x1000; functions at 0x400 and 0x500.
        let mut m = Vec::new();
        m.extend(entry(
            0x400u64.wrapping_sub(0x1000),
            0x400u64.wrapping_sub(0x1008),
            0,
            2,
        ));
        m.extend(entry(
            0x440u64.wrapping_sub(0x1020),
            0x400u64.wrapping_sub(0x1028),
            1,
            2,
        ));
        m.extend(entry(
            0x500u64.wrapping_sub(0x1040),
            0x500u64.wrapping_sub(0x1048),
            0,
            2,
        ));
        m.extend(entry(
            0x520u64.wrapping_sub(0x1060),
            0x500u64.wrapping_sub(0x1068),
            2,
            2,
        ));
        assert_eq!(
            parse(&m, 0x1000, true, |_| None).unwrap(),
            vec![(0x400, 1), (0x500, 2)]
        );
    }

    #[test]
    fn versions_0_and_1_are_absolute_or_relocated() {
        let mut m = Vec::new();
        m.extend(entry(0x400, 0x400, 0, 1));
        m.extend(entry(0x440, 0x400, 1, 1));
        // Zero in the file: the dynamic relocation at the field's place gives it.
        m.extend(entry(0, 0, 0, 0));
        m.extend(entry(0x700, 0x600, 0, 0));
        let relocs = |at: u64| (at == 0x2000 + 2 * 32 + 8).then_some(0x500);
        assert_eq!(
            parse(&m, 0x2000, true, relocs).unwrap(),
            vec![(0x400, 1), (0x500, 2), (0x600, 3)]
        );
    }

    #[test]
    fn ids_follow_changes_of_function_and_bad_maps_fail() {
        // A function whose sleds are not contiguous gets a second id.
        let mut m = Vec::new();
        for f in [0x10u64, 0x20, 0x10] {
            m.extend(entry(f, f, 0, 1));
        }
        assert_eq!(
            parse(&m, 0, true, |_| None).unwrap(),
            vec![(0x10, 1), (0x20, 2), (0x10, 3)]
        );
        assert!(parse(&m[..40], 0, true, |_| None).is_err());
        let mut bad = entry(0x10, 0x10, 9, 2);
        bad.truncate(ENTRY);
        assert!(parse(&bad, 0, true, |_| None).is_err());
    }
}
