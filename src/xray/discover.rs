//! An object's sleds: found in its `xray_instr_map` section (in memory at the section's address
//! plus the load bias), given compiler-rt's function ids, and chosen by INSTRFN_FILTER and
//! INSTRFN_EXCLUDE.

use super::elf::{Elf, Symbols, object_path};
use super::*;
use crate::arch::{KIND_ENTRY, KIND_EXIT, KIND_LOG_ARGS, KIND_TAIL};
use crate::base::glob::matches;
use crate::sys::mem::{map_addr as map, unmap_addr as unmap};

/// Reads an object's sled map and builds its tables (no patching). An object without sleds
/// gives an entry with `nsleds` 0 (remembered, never read again).
pub fn discover(m: &Module, lo: usize) -> Object {
    let mut o = Object::EMPTY;
    o.lo = lo;
    for h in m
        .headers()
        .iter()
        .filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_X != 0)
    {
        if o.nsegs == o.segs.len() {
            break;
        }
        let start = (h.p_vaddr as usize).wrapping_add(m.bias) & !4095;
        let end = ((h.p_vaddr + h.p_memsz) as usize)
            .wrapping_add(m.bias)
            .next_multiple_of(4096);
        let mut prot = libc::PROT_EXEC;
        if h.p_flags & libc::PF_R != 0 {
            prot |= libc::PROT_READ;
        }
        if h.p_flags & libc::PF_W != 0 {
            prot |= libc::PROT_WRITE;
        }
        o.segs[o.nsegs] = (start, end, prot);
        o.nsegs += 1;
    }
    let mut pbuf = StackBuf::new();
    let Some(path) = object_path(m, &mut pbuf) else {
        return o;
    };
    let Some(elf) = Elf::open(path) else {
        return o;
    };
    // An object that links instrfn-xray's handler (instrfn-xray/src/arch/x86_64/ keeps its table in
    // a section of this name) has compiler-rt patch its sleds with that handler: two patchers
    // would fight over them (whether this runtime is the one linked there or a preloaded one).
    if elf.find(CRT_ROUTE_SECTION).is_some() {
        return o;
    }
    let Some(map_section) = elf.find(b"xray_instr_map") else {
        return o;
    };
    let n = map_section.size as usize / ENTRY_BYTES;
    let base = (map_section.addr as usize).wrapping_add(m.bias);
    // The map must lie in a loaded segment (it is SHF_ALLOC).
    let inside = m.headers().iter().any(|h| {
        let s = (h.p_vaddr as usize).wrapping_add(m.bias);
        h.p_type == libc::PT_LOAD && s <= base && base + n * ENTRY_BYTES <= s + h.p_filesz as usize
    });
    if n == 0 || !inside {
        return o;
    }
    // SAFETY: the map in memory, inside a loaded segment (checked).
    let entries = unsafe { core::slice::from_raw_parts(base as *const [u8; ENTRY_BYTES], n) };
    let code = |a: usize| m.contains(a);
    let decode = |i: usize| -> (usize, usize, u8) {
        let e = &entries[i];
        let a = usize::from_ne_bytes(e[0..8].try_into().unwrap());
        let f = usize::from_ne_bytes(e[8..16].try_into().unwrap());
        let (kind, version) = (e[16], e[18]);
        if version >= 2 {
            let at = base + i * ENTRY_BYTES;
            (at.wrapping_add(a), (at + 8).wrapping_add(f), kind)
        } else {
            // Absolute: relocated by the loader in a position-independent object; else the
            // link-time address (plus the bias, for an object that is loaded elsewhere).
            let fix = |x: usize| if code(x) { x } else { x.wrapping_add(m.bias) };
            (fix(a), fix(f), kind)
        }
    };
    // Function count (compiler-rt's numbering: a new id whenever the function changes).
    let mut nfuncs = 0usize;
    let mut last = 0usize;
    for i in 0..n {
        let (_, f, _) = decode(i);
        if i == 0 || f != last {
            nfuncs += 1;
            last = f;
        }
    }
    let sleds_bytes = (n * core::mem::size_of::<Sled>()).next_multiple_of(4096);
    let table_bytes = ((nfuncs + 1) * 8).next_multiple_of(4096);
    let (sleds, table) = (map(sleds_bytes), map(table_bytes));
    if sleds == 0 || table == 0 {
        unmap(sleds, sleds_bytes);
        unmap(table, table_bytes);
        return o;
    }
    // SAFETY: the fresh mappings, sized above.
    let (sl, tb) = unsafe {
        (
            core::slice::from_raw_parts_mut(sleds as *mut Sled, n),
            core::slice::from_raw_parts_mut(table as *mut usize, nfuncs + 1),
        )
    };
    let mut id = 0u32;
    let mut count = 0;
    for i in 0..n {
        let (a, f, kind) = decode(i);
        if i == 0 || f != last {
            id += 1;
            last = f;
            tb[id as usize] = f | EXITS_ONLY | NO_EXIT;
        }
        if matches!(kind, KIND_ENTRY | KIND_LOG_ARGS) {
            tb[id as usize] &= !EXITS_ONLY;
        }
        if matches!(kind, KIND_EXIT | KIND_TAIL) {
            tb[id as usize] &= !NO_EXIT;
        }
        if !matches!(kind, KIND_ENTRY | KIND_EXIT | KIND_TAIL | KIND_LOG_ARGS)
            || !code(a)
            || !code(a + sled::BYTES - 1)
        {
            continue;
        }
        sl[count] = Sled {
            addr: a,
            id,
            kind: if kind == KIND_LOG_ARGS {
                KIND_ENTRY
            } else {
                kind
            },
            chosen: 1,
            state: 0,
            orig: [0; sled::HEAD],
        };
        count += 1;
    }
    tb[0] = nfuncs;
    choose(&elf, m, tb, &mut sl[..count]);
    o.sleds = sleds;
    o.nsleds = count;
    o.sleds_bytes = sleds_bytes;
    o.table = table;
    o.nfuncs = nfuncs;
    o.table_bytes = table_bytes;
    // The table is read-only from now on.
    // SAFETY: our own mapping.
    unsafe {
        syscall(
            libc::SYS_mprotect,
            [table, table_bytes, libc::PROT_READ as usize, 0, 0, 0],
        )
    };
    o
}

/// Marks the sleds of the functions the filters leave out (`chosen` 0). Names come from the
/// object's .symtab (else .dynsym); Rust names are demangled (without the hash), C++ names are
/// matched as they are (mangled).
pub fn choose(elf: &Elf, m: &Module, table: &[usize], sleds: &mut [Sled]) {
    let f = FILTER.lock();
    let (inc, exc) = (&f.0[..f.1], &f.2[..f.3]);
    if inc.is_empty() && exc.is_empty() {
        return;
    }
    let syms = Symbols::load(elf);
    let nfuncs = table.len() - 1;
    // Decided per function: 0 unknown, 1 chosen, 2 left out.
    let decided_bytes = (nfuncs + 1).next_multiple_of(4096);
    let decided = map(decided_bytes);
    if decided == 0 {
        return;
    }
    // SAFETY: the fresh mapping.
    let decided_s = unsafe { core::slice::from_raw_parts_mut(decided as *mut u8, nfuncs + 1) };
    for s in sleds.iter_mut() {
        let id = s.id as usize;
        if decided_s[id] == 0 {
            let addr = (table[id] & !(EXITS_ONLY | NO_EXIT)).wrapping_sub(m.bias);
            let mut name = StackBuf::<1024>::new();
            let known = syms
                .as_ref()
                .is_some_and(|syms| syms.name(addr as u64, &mut name));
            let n = name.as_bytes();
            let included = inc.is_empty() || (known && any_matches(inc, n));
            let excluded = known && any_matches(exc, n);
            decided_s[id] = if included && !excluded { 1 } else { 2 };
        }
        s.chosen = (decided_s[id] == 1) as u8;
    }
    unmap(decided, decided_bytes);
}

pub fn any_matches(patterns: &[u8], name: &[u8]) -> bool {
    patterns
        .split(|&b| b == b',')
        .map(|p| p.trim_ascii())
        .filter(|p| !p.is_empty())
        .any(|p| matches(p, name))
}
