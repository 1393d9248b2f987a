//! Names and source lines of a process's functions. Each runtime address is looked up in the
//! module that held it at that time (the executable or a shared library, from the meta file's
//! `module` lines). The load bias is removed, and the address found in that file's ELF symbol
//! tables. The `file:line` of a function's start comes from its DWARF line table (addr2line).
//!
//! A module's file is used only if it is still the file that was loaded. The identity the
//! runtime recorded must match (see identity.rs). The file must also be for the executable's
//! machine: a trace recorded under qemu-user names guest paths such as `/lib/libc.so.6`, which
//! on the host can be the host's own, different, library. Otherwise the module's addresses
//! stay unresolved, and its [`Problem`] says why.
//!
//! Files are read when an address first needs them, not before. Uses identity, meta and
//! process.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use object::{Object, ObjectSection, ObjectSymbol};

use crate::identity;
use crate::meta::Module;
use crate::process::Process;

/// A symbol: start and end offset in its module (load bias removed), name.
type SymbolRange = (u64, u64, String);

/// The DWARF reader of a module (its sections copied, shared).
type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// Why a module's addresses are not resolved.
#[derive(Debug)]
pub struct Problem {
    /// The module's path as recorded.
    pub path: PathBuf,
    /// What is wrong with its file now: `gone (no such file)`, `changed since the trace was
    /// recorded (another build-id)`, …
    pub why: String,
    said: AtomicBool,
}

impl Problem {
    /// True the first time it is asked (per process's [`Symbols`]): whether to say so now.
    pub fn first_time(&self) -> bool {
        !self.said.swap(true, Ordering::Relaxed)
    }
}

/// A source position: the file (as the DWARF names it, directory joined) and line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceLine {
    pub file: String,
    pub line: u32,
}

impl std::fmt::Display for SourceLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// What an address is.
#[derive(Debug)]
pub enum Found<'a> {
    /// A function: its raw symbol name.
    Symbol(&'a str),
    /// In a module whose file can no longer be used (see [`Problem`]).
    Untrusted(&'a Problem),
    /// In a module without a symbol table (stripped, and no separate debug file has one),
    /// and no exported symbol covers it.
    Stripped(&'a Problem),
    /// No module holds it, or no symbol of its module covers it.
    Unknown,
}

/// A module's file, read.
struct Loaded {
    syms: Vec<SymbolRange>,
    problem: Option<Problem>,
    /// Why the module has only its dynamic symbols, if it has no others.
    stripped: Option<Problem>,
    /// The file's contents, for its line table (or the separate debug file's).
    data: Option<Arc<Vec<u8>>>,
    lines: Mutex<Option<Option<addr2line::Context<Reader>>>>,
}

struct ModuleSymbols {
    module: Module,
    loaded: OnceLock<Loaded>,
}

/// Symbols of the modules of a process.
pub struct Symbols {
    modules: Vec<ModuleSymbols>,
    /// The executable's file, for its ELF machine.
    exe: Option<PathBuf>,
    exe_machine: OnceLock<Option<object::Architecture>>,
}

impl Symbols {
    /// The symbols of every module of `p`; each file is read (and checked) when an address
    /// first needs it.
    pub fn of(p: &Process) -> Symbols {
        Symbols {
            modules: p
                .modules
                .iter()
                .map(|m| ModuleSymbols {
                    module: m.clone(),
                    loaded: OnceLock::new(),
                })
                .collect(),
            exe: p.exe.as_ref().map(|e| e.path.clone()),
            exe_machine: OnceLock::new(),
        }
    }

    fn exe_machine(&self) -> Option<object::Architecture> {
        *self.exe_machine.get_or_init(|| {
            let data = std::fs::read(self.exe.as_ref()?).ok()?;
            Some(object::File::parse(&*data).ok()?.architecture())
        })
    }

    fn loaded<'a>(&self, m: &'a ModuleSymbols) -> &'a Loaded {
        m.loaded.get_or_init(|| self.load(&m.module))
    }

    fn load(&self, m: &Module) -> Loaded {
        let failed = |why: String| Loaded {
            syms: Vec::new(),
            problem: Some(Problem {
                path: m.path.clone(),
                why,
                said: AtomicBool::new(false),
            }),
            stripped: None,
            data: None,
            lines: Mutex::new(Some(None)),
        };
        let data = match identity::read(&m.path) {
            Ok(d) => d,
            Err(why) => return failed(why),
        };
        let file = match object::File::parse(&*data) {
            Ok(f) => f,
            Err(_) => return failed("is no longer an ELF file".into()),
        };
        if let Some(exe) = self.exe_machine()
            && file.architecture() != exe
        {
            return failed(format!(
                "is a file for {:?}, the traced program is {exe:?} (not the file it loaded: a \
                 qemu-user guest's path?)",
                file.architecture()
            ));
        }
        if let Some(id) = &m.identity
            && let Some(why) = identity::differs(id, &m.path, &data, &file)
        {
            return failed(why);
        }
        let mut syms = text_symbols(file.symbols().chain(file.dynamic_symbols()));
        let mut stripped = None;
        if file.section_by_name(".symtab").is_none() {
            // Stripped: the symbols of its separate debug file, if it has one (a -dbgsym
            // package's, `objcopy --only-keep-debug`'s).
            match debug_symbols(&m.path, &file) {
                Some(more) => syms.extend(more),
                None => {
                    stripped = Some(Problem {
                        path: m.path.clone(),
                        why: "has no symbol table (stripped), nor a separate debug file \
                              (build-id or .gnu_debuglink, under /usr/lib/debug or beside it)"
                            .into(),
                        said: AtomicBool::new(false),
                    })
                }
            }
        }
        syms.sort_by_key(|s| (s.0, std::cmp::Reverse(s.1)));
        syms.dedup_by_key(|s| s.0);
        drop(file);
        Loaded {
            syms,
            problem: None,
            stripped,
            data: Some(Arc::new(data)),
            lines: Mutex::new(None),
        }
    }

    /// The module holding `addr` at counter time `ts`, read.
    fn module_at(&self, addr: u64, ts: u64) -> Option<(&Module, &Loaded)> {
        let m = self.modules.iter().find(|m| m.module.holds(addr, ts))?;
        Some((&m.module, self.loaded(m)))
    }

    /// Which module (an index into the process's [`Process::modules`]) holds `addr` at
    /// counter time `ts`.
    pub fn module_index(&self, addr: u64, ts: u64) -> Option<usize> {
        self.modules.iter().position(|m| m.module.holds(addr, ts))
    }

    /// What `addr` is at counter time `ts` (an object unloaded by dlclose before then no
    /// longer holds it).
    pub fn find(&self, addr: u64, ts: u64) -> Found<'_> {
        let Some((m, l)) = self.module_at(addr, ts) else {
            return Found::Unknown;
        };
        if let Some(p) = &l.problem {
            return Found::Untrusted(p);
        }
        match (symbol(&l.syms, addr.wrapping_sub(m.bias)), &l.stripped) {
            (Some((_, name)), _) => Found::Symbol(name),
            (None, Some(p)) => Found::Stripped(p),
            (None, None) => Found::Unknown,
        }
    }

    /// The function holding runtime address `addr` at the end of the trace, as its (raw)
    /// symbol name.
    pub fn name(&self, addr: u64) -> Option<&str> {
        self.name_at(addr, u64::MAX)
    }

    /// The function holding runtime address `addr` at counter time `ts` (an object unloaded
    /// by dlclose before then no longer holds it), as its (raw) symbol name.
    pub fn name_at(&self, addr: u64, ts: u64) -> Option<&str> {
        match self.find(addr, ts) {
            Found::Symbol(name) => Some(name),
            _ => None,
        }
    }

    /// File and line of the start of the function holding `addr` at counter time `ts`, from
    /// its module's DWARF line table (or from the separate debug file its build-id or
    /// `.gnu_debuglink` names, under /usr/lib/debug). None without debug information.
    pub fn line_at(&self, addr: u64, ts: u64) -> Option<SourceLine> {
        let (m, l) = self.module_at(addr, ts)?;
        let data = l.data.as_ref()?;
        let link = addr.wrapping_sub(m.bias);
        let start = symbol(&l.syms, link).map_or(link, |(s, _)| s);
        let mut lines = l.lines.lock().unwrap_or_else(|e| e.into_inner());
        let ctx = lines.get_or_insert_with(|| dwarf_context(&m.path, data));
        let loc = ctx.as_ref()?.find_location(start).ok()??;
        Some(SourceLine {
            file: loc.file?.to_string(),
            line: loc.line?,
        })
    }

    /// The problems of the modules read so far (files that cannot be used, and stripped
    /// ones).
    pub fn problems(&self) -> impl Iterator<Item = &Problem> {
        self.modules.iter().filter_map(|m| {
            let l = m.loaded.get()?;
            l.problem.as_ref().or(l.stripped.as_ref())
        })
    }
}

/// The symbol covering link-time address `link`: its start and name.
fn symbol(syms: &[SymbolRange], link: u64) -> Option<(u64, &str)> {
    let i = syms.partition_point(|s| s.0 <= link).checked_sub(1)?;
    let (start, size, name) = &syms[i];
    (*size == 0 || link < start.saturating_add(*size)).then_some((*start, name.as_str()))
}

/// The DWARF of a module: its own sections, else those of its separate debug file.
fn dwarf_context(path: &Path, data: &[u8]) -> Option<addr2line::Context<Reader>> {
    let file = object::File::parse(data).ok()?;
    if file.section_by_name(".debug_info").is_some() {
        return context_of(&file);
    }
    let debug = debug_file(path, &file)?;
    let debug = std::fs::read(debug).ok()?;
    let file = object::File::parse(&*debug).ok()?;
    context_of(&file)
}

/// The function symbols among `symbols`: (start, size, name).
fn text_symbols<'d: 'f, 'f>(
    symbols: impl Iterator<Item = object::Symbol<'d, 'f>>,
) -> Vec<SymbolRange> {
    symbols
        .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
        .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
        .collect()
}

/// The function symbols of the separate debug file of the stripped `file` (at `path`), if it
/// has one that is its own: the same build-id, or (where `file` has none) the CRC-32 its
/// `.gnu_debuglink` names, and the same machine. Its addresses are the file's link-time
/// addresses.
fn debug_symbols(path: &Path, file: &object::File) -> Option<Vec<SymbolRange>> {
    let debug_path = debug_file(path, file)?;
    let data = std::fs::read(&debug_path).ok()?;
    let debug = object::File::parse(&*data).ok()?;
    if debug.architecture() != file.architecture() {
        return None;
    }
    match (file.build_id().ok()?, debug.build_id().ok()?) {
        (Some(a), Some(b)) if a != b => return None,
        (Some(_), Some(_)) => {}
        _ => {
            let (_, crc) = file.gnu_debuglink().ok()??;
            if crc32(&data) != crc {
                return None;
            }
        }
    }
    debug.section_by_name(".symtab")?;
    Some(text_symbols(debug.symbols()))
}

/// CRC-32 (IEEE 802.3, reflected: zlib's), which `.gnu_debuglink` records of the debug file.
fn crc32(data: &[u8]) -> u32 {
    let mut table = [0u32; 256];
    for (i, t) in table.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *t = c;
    }
    !data.iter().fold(!0u32, |c, &b| {
        table[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8)
    })
}

/// Where a separate debug file of `file` would be: /usr/lib/debug/.build-id/xx/yyyy.debug,
/// or the `.gnu_debuglink` name next to the file, in its .debug/, or under /usr/lib/debug.
fn debug_file(path: &Path, file: &object::File) -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(Some(id)) = file.build_id()
        && id.len() > 1
    {
        let hex = identity::hex(id);
        candidates.push(PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &hex[..2],
            &hex[2..]
        )));
    }
    if let Ok(Some((name, _crc))) = file.gnu_debuglink() {
        let name = Path::new(std::str::from_utf8(name).ok()?);
        let dir = path.parent().unwrap_or(Path::new("/"));
        candidates.push(dir.join(name));
        candidates.push(dir.join(".debug").join(name));
        candidates.push(
            Path::new("/usr/lib/debug")
                .join(dir.strip_prefix("/").unwrap_or(dir))
                .join(name),
        );
    }
    candidates.into_iter().find(|c| c.is_file() && c != path)
}

fn context_of(file: &object::File) -> Option<addr2line::Context<Reader>> {
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        let bytes = file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or_default();
        Ok(gimli::EndianArcSlice::new(Arc::from(&*bytes), endian))
    };
    let dwarf = gimli::Dwarf::load(load).ok()?;
    addr2line::Context::from_dwarf(dwarf).ok()
}

/// A symbol name as a person reads it: Rust (legacy and v0 mangling, without the hash) and
/// C++ (Itanium ABI) names demangled, anything else as it is.
pub fn demangle(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        return format!("{d:#}");
    }
    if raw.starts_with("_Z")
        && let Ok(sym) = cpp_demangle::Symbol::new(raw)
        && let Ok(d) = sym.demangle(&cpp_demangle::DemangleOptions::default())
    {
        return d;
    }
    raw.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(
            demangle("_ZN8rust_app4dive17h0123456789abcdefE"),
            "rust_app::dive"
        );
        assert_eq!(demangle("_RNvCs1234abcd_8rust_app4dive"), "rust_app::dive");
        assert_eq!(
            demangle("_ZN2ns3sumIiEET_S1_S1_"),
            "int ns::sum<int>(int, int)"
        );
        assert_eq!(demangle("main"), "main");
        assert_eq!(demangle("_Zbogus"), "_Zbogus");
    }

    #[test]
    fn crc32_is_zlib_s() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn symbol_ranges() {
        let syms = vec![(0x10, 0x10, "a".to_string()), (0x30, 0, "b".to_string())];
        assert_eq!(symbol(&syms, 0x10), Some((0x10, "a")));
        assert_eq!(symbol(&syms, 0x1f), Some((0x10, "a")));
        assert_eq!(symbol(&syms, 0x20), None);
        assert_eq!(symbol(&syms, 0x40), Some((0x30, "b")));
        assert_eq!(symbol(&syms, 0x8), None);
    }
}
