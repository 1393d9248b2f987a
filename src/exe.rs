//! Where the main executable lies in memory: its executable segments and its load bias, found
//! from the auxiliary vector (no loader lock, works in static and dynamic programs alike).
//!
//! gprof reads the symbols of one executable, at link-time addresses, so the gmon writer keeps
//! only pcs inside these segments and subtracts the bias (non-zero for PIE).

/// Most executable segments we track (linkers emit one; some layouts two or three).
pub const MAX_SEGMENTS: usize = 4;

/// One executable segment, runtime addresses, `start` and `end` multiples of 4.
#[derive(Clone, Copy, Default)]
pub struct Segment {
    pub start: usize,
    pub end: usize,
}

#[derive(Clone, Copy, Default)]
pub struct Executable {
    /// Runtime address minus link-time address.
    pub bias: usize,
    pub segments: [Segment; MAX_SEGMENTS],
    pub count: usize,
}

impl Executable {
    /// Reads the program headers of the main executable through AT_PHDR / AT_PHNUM.
    pub fn find() -> Executable {
        let mut exe = Executable::default();
        // SAFETY: getauxval has no preconditions.
        let (phdr, phnum) = unsafe {
            (
                libc::getauxval(libc::AT_PHDR),
                libc::getauxval(libc::AT_PHNUM),
            )
        };
        if phdr == 0 || phnum == 0 {
            return exe;
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
        exe.bias = bias;
        for h in headers {
            if h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_X != 0 && exe.count < MAX_SEGMENTS
            {
                let start = (h.p_vaddr as usize).wrapping_add(bias) & !3;
                let end = ((h.p_vaddr + h.p_memsz) as usize)
                    .wrapping_add(bias)
                    .next_multiple_of(4);
                exe.segments[exe.count] = Segment { start, end };
                exe.count += 1;
            }
        }
        exe
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments[..self.count]
    }

    /// Whether `pc` lies in one of the executable's segments.
    pub fn contains(&self, pc: usize) -> bool {
        self.segments()
            .iter()
            .any(|s| (s.start..s.end).contains(&pc))
    }

    /// The link-time address of a runtime pc of the executable.
    pub fn link_address(&self, pc: usize) -> usize {
        pc.wrapping_sub(self.bias)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_this_test_binary() {
        let exe = Executable::find();
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
