//! Where the loaded ELF objects lie in memory: the main executable (from the auxiliary vector)
//! and the shared libraries (from the loader), each with its executable segments and load bias.
//!
//! gprof reads the symbols of one ELF file, at link-time addresses, so the gmon writer writes
//! one profile per module, with only pcs inside its segments, the bias subtracted.

use core::ffi::{c_int, c_void};

/// Most executable segments we track per module (linkers emit one; some layouts two or three).
pub const MAX_SEGMENTS: usize = 4;
/// Longest module path kept.
pub const MAX_PATH: usize = 512;

/// One executable segment, runtime addresses, `start` and `end` multiples of 4.
#[derive(Clone, Copy, Default)]
pub struct Segment {
    pub start: usize,
    pub end: usize,
}

/// A loaded ELF object: the main executable or a shared library.
#[derive(Clone, Copy)]
pub struct Module {
    /// Runtime address minus link-time address.
    pub bias: usize,
    pub segments: [Segment; MAX_SEGMENTS],
    pub count: usize,
    /// The path the loader knows it by (empty for the main executable).
    path: [u8; MAX_PATH],
    path_len: usize,
    /// Its program header table in memory (the loader's, or the kernel's AT_PHDR), and the
    /// number of entries: valid only while the object is loaded.
    phdr: usize,
    phnum: usize,
}

impl Module {
    const EMPTY: Module = Module {
        bias: 0,
        segments: [Segment { start: 0, end: 0 }; MAX_SEGMENTS],
        count: 0,
        path: [0; MAX_PATH],
        path_len: 0,
        phdr: 0,
        phnum: 0,
    };

    /// The main executable, from the program headers the kernel names in AT_PHDR / AT_PHNUM
    /// (no loader lock; works in static and dynamic programs alike).
    pub fn executable() -> Module {
        // SAFETY: getauxval has no preconditions.
        let (phdr, phnum) = unsafe {
            (
                libc::getauxval(libc::AT_PHDR),
                libc::getauxval(libc::AT_PHNUM),
            )
        };
        if phdr == 0 || phnum == 0 {
            return Module::EMPTY;
        }
        // SAFETY: the kernel's AT_PHDR/AT_PHNUM describe the mapped program header table.
        let headers = unsafe {
            core::slice::from_raw_parts(phdr as usize as *const libc::Elf64_Phdr, phnum as usize)
        };
        // The bias: from PT_PHDR if present, else from the segment that maps file offset 0
        // (its first bytes are the ELF header, and the program headers follow it).
        let phdr_vaddr = headers
            .iter()
            .find(|h| h.p_type == libc::PT_PHDR)
            .map(|h| h.p_vaddr);
        let bias = match phdr_vaddr {
            Some(v) => (phdr as usize).wrapping_sub(v as usize),
            None => headers
                .iter()
                .find(|h| h.p_type == libc::PT_LOAD && h.p_offset == 0)
                .map_or(0, |h| {
                    let ehdr_size = core::mem::size_of::<libc::Elf64_Ehdr>();
                    (phdr as usize)
                        .wrapping_sub(ehdr_size)
                        .wrapping_sub(h.p_vaddr as usize)
                }),
        };
        Module::from_headers(bias, headers, b"")
    }

    fn from_headers(bias: usize, headers: &[libc::Elf64_Phdr], path: &[u8]) -> Module {
        let mut m = Module::EMPTY;
        m.bias = bias;
        for h in headers {
            if h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_X != 0 && m.count < MAX_SEGMENTS {
                let start = (h.p_vaddr as usize).wrapping_add(bias) & !3;
                let end = ((h.p_vaddr + h.p_memsz) as usize)
                    .wrapping_add(bias)
                    .next_multiple_of(4);
                m.segments[m.count] = Segment { start, end };
                m.count += 1;
            }
        }
        let n = path.len().min(MAX_PATH);
        m.path[..n].copy_from_slice(&path[..n]);
        m.path_len = n;
        m.phdr = headers.as_ptr() as usize;
        m.phnum = headers.len();
        m
    }

    /// The GNU build-id note's descriptor (the build-id bytes), read from the object's PT_NOTE
    /// segments in memory. Only while the object is loaded (the program headers and the notes
    /// are the loader's mappings); no system call, no allocation.
    pub fn build_id(&self) -> Option<&[u8]> {
        if self.phdr == 0 || self.phnum == 0 {
            return None;
        }
        // SAFETY: the program header table this module was made from, still mapped while the
        // object is loaded (the caller's contract).
        let headers = unsafe {
            core::slice::from_raw_parts(self.phdr as *const libc::Elf64_Phdr, self.phnum)
        };
        for h in headers.iter().filter(|h| h.p_type == libc::PT_NOTE) {
            // Only notes that a PT_LOAD segment maps from the file are readable memory.
            let (lo, hi) = (h.p_vaddr, h.p_vaddr.saturating_add(h.p_memsz));
            let mapped = headers.iter().any(|l| {
                l.p_type == libc::PT_LOAD
                    && l.p_vaddr <= lo
                    && hi <= l.p_vaddr.saturating_add(l.p_filesz)
            });
            if !mapped || h.p_memsz == 0 {
                continue;
            }
            let start = (h.p_vaddr as usize).wrapping_add(self.bias);
            // SAFETY: the note segment lies inside a loaded segment's file-backed part.
            let notes: &[u8] =
                unsafe { core::slice::from_raw_parts(start as *const u8, h.p_memsz as usize) };
            // Entries are padded to the segment's alignment (4, or 8 for 8-aligned notes).
            let align = if h.p_align == 8 { 8 } else { 4 };
            let mut at = 0;
            while at + 12 <= notes.len() {
                let word =
                    |i: usize| u32::from_ne_bytes(notes[i..i + 4].try_into().unwrap()) as usize;
                let (namesz, descsz, kind) = (word(at), word(at + 4), word(at + 8));
                let name_at = at + 12;
                let desc_at = name_at.saturating_add(namesz.next_multiple_of(align));
                let end = desc_at.saturating_add(descsz.next_multiple_of(align));
                if end > notes.len() {
                    break;
                }
                if kind == 3 && namesz == 4 && &notes[name_at..name_at + 4] == b"GNU\0" {
                    return Some(&notes[desc_at..desc_at + descsz]);
                }
                at = end;
            }
        }
        None
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments[..self.count]
    }

    /// The lowest address of the module's code: what identifies a loaded object while it is
    /// loaded (None without code).
    pub fn code_start(&self) -> Option<usize> {
        self.segments().iter().map(|s| s.start).min()
    }

    /// `[lowest, highest)` address of the module's code (0, 0 without code).
    pub fn code_range(&self) -> (usize, usize) {
        let hi = self.segments().iter().map(|s| s.end).max().unwrap_or(0);
        (self.code_start().unwrap_or(0), hi)
    }

    /// The object's program headers in memory (the loader's, or the kernel's AT_PHDR): only
    /// while the object is loaded; empty if unknown.
    pub fn headers(&self) -> &[libc::Elf64_Phdr] {
        if self.phdr == 0 || self.phnum == 0 {
            return &[];
        }
        // SAFETY: the program header table this module was made from, mapped while the object
        // is loaded (the caller's contract, as for build_id).
        unsafe { core::slice::from_raw_parts(self.phdr as *const libc::Elf64_Phdr, self.phnum) }
    }

    /// Whether the object's dynamic symbol table lists `name` as undefined: a symbol the object
    /// takes from another one. Read from its dynamic section in memory (only while the object
    /// is loaded); false without one (a static program).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // gcc's return route only
    pub fn imports(&self, name: &[u8]) -> bool {
        let headers = self.headers();
        let Some(dynamic) = headers.iter().find(|h| h.p_type == libc::PT_DYNAMIC) else {
            return false;
        };
        // The loaded extent, [lo, hi) at run time: the loader may have relocated the dynamic
        // section's addresses in place (glibc, where it is writable) or not (musl, the vDSO).
        let loads = headers.iter().filter(|h| h.p_type == libc::PT_LOAD);
        let lo = loads.clone().map(|h| h.p_vaddr).min().unwrap_or(0) as usize;
        let hi = loads.map(|h| h.p_vaddr + h.p_memsz).max().unwrap_or(0) as usize;
        let (lo, hi) = (lo.wrapping_add(self.bias), hi.wrapping_add(self.bias));
        let at = |v: u64| {
            let v = v as usize;
            if (lo..hi).contains(&v) {
                v
            } else {
                v.wrapping_add(self.bias)
            }
        };
        let (mut symtab, mut strtab, mut strsz, mut hash, mut gnu_hash) = (0, 0, 0, 0, 0);
        let mut d = (dynamic.p_vaddr as usize).wrapping_add(self.bias) as *const u64;
        loop {
            // SAFETY: the object's dynamic section, mapped while it is loaded: (tag, value)
            // pairs up to DT_NULL.
            let (tag, value) = unsafe { (*d, *d.add(1)) };
            match tag as u32 {
                0 => break,
                4 => hash = at(value),
                5 => strtab = at(value),
                6 => symtab = at(value),
                10 => strsz = value as usize,
                0x6fff_fef5 => gnu_hash = at(value),
                _ => {}
            }
            d = d.wrapping_add(2);
        }
        if symtab == 0 || strtab == 0 {
            return false;
        }
        // Undefined symbols are never hashed: with a GNU hash table they are among the first
        // `symoffset` entries; with the SysV one, any of its `nchain`.
        // SAFETY: the loader's hash tables of the object, mapped while it is loaded.
        let count = unsafe {
            if gnu_hash != 0 {
                *(gnu_hash as *const u32).add(1) as usize
            } else if hash != 0 {
                *(hash as *const u32).add(1) as usize
            } else {
                return false;
            }
        };
        (1..count).any(|i| {
            // SAFETY: entry i < count of the object's dynamic symbol table (24-byte Elf64_Sym:
            // st_name at 0, st_shndx at 6), and its name in the string table.
            unsafe {
                let sym = (symtab + i * 24) as *const u8;
                let (st_name, shndx) = (*(sym as *const u32) as usize, *(sym.add(6) as *const u16));
                if shndx != 0 || st_name + name.len() >= strsz {
                    return false;
                }
                let s =
                    core::slice::from_raw_parts((strtab + st_name) as *const u8, name.len() + 1);
                &s[..name.len()] == name && s[name.len()] == 0
            }
        })
    }

    /// Whether `pc` lies in one of the module's executable segments.
    pub fn contains(&self, pc: usize) -> bool {
        self.segments()
            .iter()
            .any(|s| (s.start..s.end).contains(&pc))
    }

    /// The link-time address of a runtime pc of the module.
    pub fn link_address(&self, pc: usize) -> usize {
        pc.wrapping_sub(self.bias)
    }

    /// The loader's path of the module.
    pub fn path(&self) -> &[u8] {
        &self.path[..self.path_len]
    }

    /// The file name of the module (the path's last component).
    pub fn file_name(&self) -> &[u8] {
        let p = self.path();
        p.rsplit(|&b| b == b'/').next().unwrap_or(p)
    }
}

/// Calls `f` for every shared object loaded now that has code: not the main executable, not
/// the vDSO, not the object holding the runtime itself. Uses dl_iterate_phdr (its lock is
/// recursive, so a dump signal that interrupts the loader on this thread does not deadlock).
pub fn for_each_shared_object(mut f: impl FnMut(&Module)) {
    struct Ctx<'a> {
        f: &'a mut dyn FnMut(&Module),
        own: usize,
        first: bool,
    }
    extern "C" fn callback(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: data is the Ctx passed below; info is the loader's description of one object.
        let (ctx, info) = unsafe { (&mut *data.cast::<Ctx<'_>>(), &*info) };
        let first = core::mem::replace(&mut ctx.first, false);
        if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
            return 0;
        }
        // SAFETY: the loader's program headers for this object.
        let headers =
            unsafe { core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let name = if info.dlpi_name.is_null() {
            &b""[..]
        } else {
            // SAFETY: a NUL-terminated name owned by the loader.
            unsafe { core::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes()
        };
        // The first object is the main executable (its name is empty); the vDSO has no file.
        if first
            || name.is_empty()
            || name.starts_with(b"linux-vdso")
            || name.starts_with(b"linux-gate")
        {
            return 0;
        }
        let m = Module::from_headers(info.dlpi_addr as usize, headers, name);
        if m.count > 0 && !m.contains(ctx.own) {
            (ctx.f)(&m);
        }
        0
    }
    let mut ctx = Ctx {
        f: &mut f,
        own: find_shared_object as *const () as usize,
        first: true,
    };
    // SAFETY: the callback matches dl_iterate_phdr's contract and only reads what it is given.
    unsafe { libc::dl_iterate_phdr(Some(callback), (&raw mut ctx).cast()) };
}

/// The shared object loaded now whose load bias is `bias` and whose path is `path`, if any.
pub fn find_shared_object(bias: usize, path: &[u8]) -> Option<Module> {
    let mut found = None;
    for_each_shared_object(|m| {
        if m.bias == bias && m.path() == path {
            found = Some(*m);
        }
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_this_test_binary() {
        let exe = Module::executable();
        assert!(exe.count >= 1);
        let here = finds_this_test_binary as *const () as usize;
        assert!(
            exe.contains(here),
            "own code {here:#x} not in the executable segments"
        );
        // The link-time address of this function is what the symbol table says: check against
        // the ELF file itself through the relation bias = runtime - link.
        assert!(exe.link_address(here) < here || exe.bias == 0);
    }
}
