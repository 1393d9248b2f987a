//! An object's ELF file, read with raw system calls into mapped memory: its section headers,
//! section names and function symbols (to name the functions INSTRFN_FILTER chooses).

use crate::base::StackBuf;
use crate::sys::file::File;
use crate::sys::mem::{map_addr as map, unmap_addr as unmap};
use crate::sys::objects::Module;

/// `len` bytes of `file` at `off` in fresh mapped memory (unmapped by the caller).
pub fn read_mapped(file: &File, off: u64, len: usize) -> Option<usize> {
    let p = map(len.max(1));
    if p == 0 {
        return None;
    }
    // SAFETY: the fresh mapping of len bytes.
    let buf = unsafe { core::slice::from_raw_parts_mut(p as *mut u8, len) };
    if file.read_at(buf, off) {
        Some(p)
    } else {
        unmap(p, len.max(1));
        None
    }
}

/// The parts of a section header used here.
#[derive(Clone, Copy, Default)]
pub struct Section {
    pub kind: u32,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
    pub entsize: u64,
}

/// An object's ELF file: its section headers and section name table (mapped).
pub struct Elf {
    pub file: File,
    pub shdrs: usize,
    pub shnum: usize,
    pub names: usize,
    pub names_len: usize,
}

pub const SHDR_BYTES: usize = 64;

impl Elf {
    pub fn open(path: &core::ffi::CStr) -> Option<Elf> {
        let file = File::open(path)?;
        let mut ehdr = [0u8; 64];
        if !file.read_at(&mut ehdr, 0) || &ehdr[..4] != b"\x7fELF" || ehdr[4] != 2 {
            return None;
        }
        let little = ehdr[5] == 1;
        if little != cfg!(target_endian = "little") {
            return None;
        }
        let u16_at = |i: usize| u16::from_ne_bytes([ehdr[i], ehdr[i + 1]]) as usize;
        let shoff = u64::from_ne_bytes(ehdr[40..48].try_into().unwrap());
        let (shentsize, shnum, shstrndx) = (u16_at(58), u16_at(60), u16_at(62));
        if shoff == 0 || shnum == 0 || shentsize != SHDR_BYTES || shstrndx >= shnum {
            return None;
        }
        let shdrs = read_mapped(&file, shoff, shnum * SHDR_BYTES)?;
        let mut elf = Elf {
            file,
            shdrs,
            shnum,
            names: 0,
            names_len: 0,
        };
        let n = elf.section(shstrndx);
        elf.names_len = n.size as usize;
        elf.names = read_mapped(&elf.file, n.offset, elf.names_len)?;
        Some(elf)
    }

    pub fn section(&self, i: usize) -> Section {
        // SAFETY: inside the mapped section header table (i < shnum).
        let h = unsafe {
            core::slice::from_raw_parts((self.shdrs + i * SHDR_BYTES) as *const u8, SHDR_BYTES)
        };
        let u32_at = |o: usize| u32::from_ne_bytes(h[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_ne_bytes(h[o..o + 8].try_into().unwrap());
        Section {
            kind: u32_at(4),
            addr: u64_at(16),
            offset: u64_at(24),
            size: u64_at(32),
            link: u32_at(40),
            entsize: u64_at(56),
        }
    }

    pub fn name_of(&self, i: usize) -> &[u8] {
        // SAFETY: as in section(); the name table is mapped, names_len bytes.
        let h = unsafe {
            core::slice::from_raw_parts((self.shdrs + i * SHDR_BYTES) as *const u8, SHDR_BYTES)
        };
        let at = u32::from_ne_bytes(h[0..4].try_into().unwrap()) as usize;
        // SAFETY: the mapped section name table.
        let names = unsafe { core::slice::from_raw_parts(self.names as *const u8, self.names_len) };
        let s = names.get(at..).unwrap_or(&[]);
        &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]
    }

    pub fn find(&self, name: &[u8]) -> Option<Section> {
        (0..self.shnum)
            .find(|&i| self.name_of(i) == name)
            .map(|i| self.section(i))
    }
}

/// An object's function symbols, sorted by address (mapped memory).
pub struct Symbols {
    /// (address, name offset) pairs.
    pub index: usize,
    pub count: usize,
    pub index_bytes: usize,
    pub strings: usize,
    pub strings_len: usize,
}

impl Symbols {
    pub fn load(elf: &Elf) -> Option<Symbols> {
        let sym = (0..elf.shnum)
            .map(|i| elf.section(i))
            .find(|s| s.kind == 2) // SHT_SYMTAB
            .or_else(|| {
                (0..elf.shnum)
                    .map(|i| elf.section(i))
                    .find(|s| s.kind == 11)
            })?; // SHT_DYNSYM
        if sym.entsize != 24 || sym.link as usize >= elf.shnum {
            return None;
        }
        let strtab = elf.section(sym.link as usize);
        let n = sym.size as usize / 24;
        let raw = read_mapped(&elf.file, sym.offset, n * 24)?;
        let index_bytes = (n * 16).max(1);
        let index = map(index_bytes);
        let strings = read_mapped(&elf.file, strtab.offset, strtab.size as usize);
        let result = (|| {
            let strings = strings?;
            if index == 0 {
                return None;
            }
            // SAFETY: the mappings made above.
            let (raw_s, idx) = unsafe {
                (
                    core::slice::from_raw_parts(raw as *const [u8; 24], n),
                    core::slice::from_raw_parts_mut(index as *mut (u64, u64), n),
                )
            };
            let mut count = 0;
            for e in raw_s {
                let name = u32::from_ne_bytes(e[0..4].try_into().unwrap()) as u64;
                let info = e[4];
                let shndx = u16::from_ne_bytes([e[6], e[7]]);
                let value = u64::from_ne_bytes(e[8..16].try_into().unwrap());
                if info & 0xf == 2 && shndx != 0 && value != 0 {
                    idx[count] = (value, name);
                    count += 1;
                }
            }
            idx[..count].sort_unstable();
            Some(Symbols {
                index,
                count,
                index_bytes,
                strings,
                strings_len: strtab.size as usize,
            })
        })();
        unmap(raw, (n * 24).max(1));
        if result.is_none() {
            unmap(index, index_bytes);
            if let Some(s) = strings {
                unmap(s, (strtab.size as usize).max(1));
            }
        }
        result
    }

    /// The (demangled) name of the function at link-time address `addr`, into `out`.
    pub fn name(&self, addr: u64, out: &mut StackBuf<1024>) -> bool {
        self.name_of(addr, false, out)
    }

    /// The (demangled) name of the function that holds link-time address `addr` (the nearest
    /// function symbol at or below it), into `out`.
    pub fn name_containing(&self, addr: u64, out: &mut StackBuf<1024>) -> bool {
        self.name_of(addr, true, out)
    }

    fn name_of(&self, addr: u64, containing: bool, out: &mut StackBuf<1024>) -> bool {
        // SAFETY: the mapped index of `count` pairs and string table.
        let (idx, strings) = unsafe {
            (
                core::slice::from_raw_parts(self.index as *const (u64, u64), self.count),
                core::slice::from_raw_parts(self.strings as *const u8, self.strings_len),
            )
        };
        let mut i = match idx.binary_search_by_key(&addr, |e| e.0) {
            Ok(i) => i,
            Err(i) if containing && i > 0 => i - 1,
            Err(_) => return false,
        };
        let at = idx[i].0;
        while i > 0 && idx[i - 1].0 == at {
            i -= 1;
        }
        let s = strings.get(idx[i].1 as usize..).unwrap_or(&[]);
        let raw = &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())];
        match core::str::from_utf8(raw)
            .ok()
            .and_then(|r| rustc_demangle::try_demangle(r).ok())
        {
            Some(d) => {
                use core::fmt::Write as _;
                let _ = write!(out, "{d:#}");
            }
            None => out.push(raw),
        }
        true
    }
}

impl Drop for Elf {
    fn drop(&mut self) {
        unmap(self.shdrs, self.shnum * SHDR_BYTES);
        unmap(self.names, self.names_len.max(1));
    }
}

impl Drop for Symbols {
    fn drop(&mut self) {
        unmap(self.index, self.index_bytes);
        unmap(self.strings, self.strings_len.max(1));
    }
}

/// The object's ELF file path as a C string: the loader's, or /proc/self/exe.
pub fn object_path<'a>(
    m: &Module,
    buf: &'a mut StackBuf<{ crate::sys::objects::MAX_PATH + 1 }>,
) -> Option<&'a core::ffi::CStr> {
    if m.path().is_empty() {
        return Some(c"/proc/self/exe");
    }
    buf.push(m.path());
    buf.as_cstr()
}
