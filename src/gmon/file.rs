//! The gmon.out file, as gprof reads it: a 20-byte header (`"gmon"`, version 1, 12 zero
//! bytes), then records tagged 0 (pc histogram) and 1 (call arc), in the target's byte order,
//! at link-time addresses. Counts never wrap: a histogram bin above 65535 is split over
//! several records with the same range (gprof sums them), an arc count above 2^32-1 over
//! several arc records (gprof sums duplicate arcs too). A profile is written under a temporary
//! name and renamed, so a reader never sees half of one.

use core::ffi::{CStr, c_int};
use core::fmt::Write as _;

use super::recorded::{Arc, Recorded, Sample, Scratch, merge_duplicates};
use super::{retired, sampler};
use crate::base::{Bytes, StackBuf};
use crate::config::Config;
use crate::sys::objects::Module;
use crate::sys::{self, Errno, objects};

/// Room for a profile path: GMON_OUT_PREFIX, the pid and image suffixes, a library name.
pub const PATH_MAX: usize = crate::config::MAX_PREFIX + 64 + objects::MAX_PATH;

/// Two functions that only name things in gmon.out: calls that could not be counted are
/// written as calls of `instrfn_calls_lost` from `instrfn_runtime`, so gprof shows the loss
/// (when the runtime is linked into the executable; a preloaded one is outside it). Never
/// called; their different bodies keep the compiler from merging them.
#[unsafe(no_mangle)]
pub extern "C" fn instrfn_runtime() -> u32 {
    1
}

#[unsafe(no_mangle)]
pub extern "C" fn instrfn_calls_lost() -> u32 {
    2
}

/// (from_pc, self_pc) of the loss arc: inside the two marker functions.
pub fn loss_markers() -> (usize, usize) {
    (
        instrfn_runtime as *const () as usize,
        instrfn_calls_lost as *const () as usize,
    )
}

pub const GMON_MAGIC: &[u8; 4] = b"gmon";

pub const GMON_VERSION: u32 = 1;

pub const TAG_HIST: u8 = 0;

pub const TAG_ARC: u8 = 1;

pub const HIST_MAX: u64 = u16::MAX as u64;

pub const ARC_MAX: u64 = u32::MAX as u64;

/// A buffered writer to a file descriptor over mapped memory.
pub struct Out {
    pub fd: c_int,
    pub buf: Scratch<u8>,
    pub error: c_int,
    /// Bytes written so far (the file's size).
    pub at: u64,
}

impl Out {
    pub fn bytes(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.buf.len == self.buf.cap {
                self.flush();
            }
            let n = b.len().min(self.buf.cap - self.buf.len);
            // SAFETY: len + n <= cap, inside the mapping; the source is a valid slice.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    b.as_ptr(),
                    self.buf.ptr.as_ptr().add(self.buf.len),
                    n,
                )
            };
            self.buf.len += n;
            b = &b[n..];
        }
    }

    /// A few bytes of fixed size: stored directly (no memcpy call per value, which made the
    /// histogram's bins the writer's main cost).
    pub fn put<const N: usize>(&mut self, v: [u8; N]) {
        if self.buf.cap - self.buf.len < N {
            self.flush();
        }
        // SAFETY: at least N bytes are free at len (the buffer is far larger than N).
        unsafe {
            self.buf
                .ptr
                .as_ptr()
                .add(self.buf.len)
                .cast::<[u8; N]>()
                .write_unaligned(v)
        };
        self.buf.len += N;
    }

    pub fn zeros(&mut self, mut n: usize) {
        while n > 0 {
            if self.buf.len == self.buf.cap {
                self.flush();
            }
            let k = n.min(self.buf.cap - self.buf.len);
            // SAFETY: len + k <= cap, inside the mapping.
            unsafe { self.buf.ptr.as_ptr().add(self.buf.len).write_bytes(0, k) };
            self.buf.len += k;
            n -= k;
        }
    }

    pub fn u16(&mut self, v: u16) {
        self.put(v.to_ne_bytes());
    }

    pub fn u32(&mut self, v: u32) {
        self.put(v.to_ne_bytes());
    }

    pub fn addr(&mut self, v: usize) {
        self.put(v.to_ne_bytes());
    }

    pub fn flush(&mut self) {
        let len = self.buf.as_mut_slice().len() as u64;
        if self.error == 0 && !sys::fits_size_limit(self.at + len) {
            // Past the file size limit the write would raise SIGXFSZ and end the program.
            self.error = libc::EFBIG;
        }
        if self.error == 0
            && let Err(e) = sys::write_all(self.fd, self.buf.as_mut_slice())
        {
            self.error = e;
        }
        self.at += len;
        self.buf.truncate(0);
    }
}

/// What one profile holds, for messages.
#[derive(Default)]
pub struct Written {
    pub arcs: usize,
    pub calls: u64,
    pub samples: u64,
}

/// Writes the profile of one module at `path`: samples and arcs inside the module (the arcs
/// and samples of an unloaded object that was mapped at the same place removed, those of
/// earlier loads of the same library file added). `exe` adds the loss arc.
pub fn write_profile(
    config: &Config,
    path: &CStr,
    m: &Module,
    rec: &Recorded,
    exe: bool,
) -> Result<Written, c_int> {
    let mut written = Written::default();
    // The module's arcs, at link-time addresses.
    let mine = rec
        .arcs()
        .iter()
        .filter(|a| m.contains(a.from) && m.contains(a.to))
        .count();
    let extra = retired::earlier_loads(m);
    let Some(mut arcs) = Scratch::<Arc>::new(mine + extra) else {
        message!(
            "cannot map memory for {}; not written",
            Bytes(path.to_bytes())
        );
        return Err(libc::ENOMEM);
    };
    for a in rec.arcs() {
        if m.contains(a.from) && m.contains(a.to) {
            let count = a.count - retired::counted_before(a).min(a.count);
            if count > 0 {
                arcs.push(Arc {
                    from: m.link_address(a.from),
                    to: m.link_address(a.to),
                    count,
                });
            }
        }
    }
    retired::add_earlier_loads(m, |a| {
        arcs.push(a);
    });
    let arcs = merge_duplicates(arcs.as_mut_slice());

    let (fd, tmp) = create_temporary(path)?;
    let Some(buf) = Scratch::new(64 * 1024) else {
        // SAFETY: fd was opened above; tmp is the NUL-terminated name we created.
        unsafe {
            libc::close(fd);
            libc::unlink(tmp.as_c_ptr());
        }
        return Err(libc::ENOMEM);
    };
    let mut out = Out {
        fd,
        buf,
        error: 0,
        at: 0,
    };
    out.bytes(GMON_MAGIC);
    out.u32(GMON_VERSION);
    out.bytes(&[0; 12]);

    match sampler::hz() {
        Some(hz) => {
            for seg in m.segments() {
                let samples = rec.samples_in(seg.start, seg.end);
                written.samples += samples.iter().map(|s| s.count).sum::<u64>();
                write_histogram(&mut out, m, seg.start, seg.end, samples, hz);
            }
        }
        None => {
            // gprof refuses a file without a histogram ("gmon.out file is missing
            // histogram"): without sampling, write one empty bin, so the call counts can still
            // be read.
            if let Some(seg) = m.segments().first() {
                write_histogram(&mut out, m, seg.start, seg.start + 4, &[], config.hz.max(1));
            }
        }
    }
    for a in arcs.iter() {
        written.arcs += 1;
        written.calls += a.count;
        write_arc(&mut out, a);
    }
    // Calls that could not be counted show up in gprof too, as calls of instrfn_calls_lost
    // from instrfn_runtime, when the runtime is part of the executable (linked, not preloaded).
    let (marker_from, marker_to) = loss_markers();
    if exe && rec.lost > 0 && m.contains(marker_from) && m.contains(marker_to) {
        write_arc(
            &mut out,
            &Arc {
                from: m.link_address(marker_from),
                to: m.link_address(marker_to),
                count: rec.lost,
            },
        );
    }
    out.flush();
    let error = out.error;
    // SAFETY: fd is ours; close once.
    let closed = unsafe { libc::close(fd) } == 0;
    let error = if error == 0 && !closed {
        sys::errno()
    } else {
        error
    };
    // SAFETY: both are valid C strings; rename replaces the old profile atomically.
    if error == 0 && unsafe { libc::rename(tmp.as_c_ptr(), path.as_ptr()) } == 0 {
        return Ok(written);
    }
    let error = if error == 0 { sys::errno() } else { error };
    // SAFETY: tmp is a valid C string naming our temporary file.
    unsafe { libc::unlink(tmp.as_c_ptr()) };
    let limit = sys::file_size_limit();
    if error == libc::EFBIG && limit != u64::MAX {
        message!(
            "cannot write {}: it would be larger than the file size limit ({})",
            Bytes(path.to_bytes()),
            sys::SizeLimit(limit)
        );
    } else {
        message!("cannot write {}: {}", Bytes(path.to_bytes()), Errno(error));
    }
    Err(error)
}

/// One arc (link-time addresses), as as many records as its count needs (gprof sums them).
pub fn write_arc(out: &mut Out, a: &Arc) {
    let mut left = a.count;
    while left > 0 {
        let n = left.min(ARC_MAX);
        out.put([TAG_ARC]);
        out.addr(a.from);
        out.addr(a.to);
        out.u32(n as u32);
        left -= n;
    }
}

/// Histogram records for one segment `[start, end)` (runtime addresses, multiples of 4), one
/// bin per 4 bytes, from its samples sorted by pc: as many same-range records as the fullest
/// bin needs.
pub fn write_histogram(
    out: &mut Out,
    m: &Module,
    start: usize,
    end: usize,
    samples: &[Sample],
    rate: u32,
) {
    let bins = (end - start) / 4;
    // Samples of one bin are adjacent (sorted by pc): the fullest bin sets the record count.
    let mut max = 0u64;
    let mut i = 0;
    while i < samples.len() {
        let bin = (samples[i].pc - start) / 4;
        let mut n = 0;
        while i < samples.len() && (samples[i].pc - start) / 4 == bin {
            n += samples[i].count;
            i += 1;
        }
        max = max.max(n);
    }
    let records = max.div_ceil(HIST_MAX).max(1);
    let low = m.link_address(start);
    let high = low + bins * 4;
    let mut dimension = [0u8; 15];
    dimension[..7].copy_from_slice(b"seconds");
    for r in 0..records {
        out.put([TAG_HIST]);
        out.addr(low);
        out.addr(high);
        out.u32(bins as u32);
        out.u32(rate);
        out.bytes(&dimension);
        out.bytes(b"s");
        let floor = r * HIST_MAX;
        // Runs of empty bins in bulk, then each bin that has samples.
        let (mut written, mut next) = (0, 0);
        while next < samples.len() {
            let bin = (samples[next].pc - start) / 4;
            let mut n = 0;
            while next < samples.len() && (samples[next].pc - start) / 4 == bin {
                n += samples[next].count;
                next += 1;
            }
            out.zeros((bin - written) * 2);
            out.u16(n.saturating_sub(floor).min(HIST_MAX) as u16);
            written = bin + 1;
        }
        out.zeros((bins - written) * 2);
    }
}

/// Creates `<path>.<pid>-<n>.tmp` exclusively, next to the final file.
pub fn create_temporary(path: &CStr) -> Result<(c_int, StackBuf<{ PATH_MAX + 32 }>), c_int> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    for n in 0..16 {
        let mut tmp = StackBuf::new();
        tmp.push(path.to_bytes());
        let _ = write!(tmp, ".{pid}-{n}.tmp");
        let Some(name) = tmp.as_cstr() else {
            message!("the gmon.out path is too long; nothing written");
            return Err(libc::ENAMETOOLONG);
        };
        // SAFETY: name is a valid C string; flags and mode are plain integers.
        let fd = unsafe {
            libc::open(
                name.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o666 as libc::c_uint,
            )
        };
        if fd >= 0 {
            return Ok((fd, tmp));
        }
        let e = sys::errno();
        if e != libc::EEXIST {
            let dir = match path.to_bytes().iter().rposition(|&b| b == b'/') {
                Some(0) => &b"/"[..],
                Some(i) => &path.to_bytes()[..i],
                None => b".",
            };
            message!(
                "cannot write {} (directory {}): {}",
                Bytes(path.to_bytes()),
                Bytes(dir),
                Errno(e)
            );
            return Err(e);
        }
    }
    message!(
        "cannot create a temporary file for {}",
        Bytes(path.to_bytes())
    );
    Err(libc::EEXIST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    #[unsafe(no_mangle)]
    extern "C" fn instrfn_test_caller() -> u32 {
        std::hint::black_box(11)
    }

    #[inline(never)]
    #[unsafe(no_mangle)]
    extern "C" fn instrfn_test_callee() -> u32 {
        std::hint::black_box(22)
    }

    /// Counts past the record widths (u32 arcs, u16 bins) reach gprof whole: written as several
    /// records, summed by the real gprof reading this test binary's own symbols.
    #[test]
    pub fn large_counts_survive_gprof() {
        let exe = Module::executable();
        let (caller, callee) = (
            instrfn_test_caller as *const () as usize,
            instrfn_test_callee as *const () as usize,
        );
        assert!(exe.contains(caller) && exe.contains(callee));
        let path = std::env::temp_dir().join(format!("instrfn-large-{}.gmon", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let mut out = Out {
            fd: std::os::fd::IntoRawFd::into_raw_fd(file),
            buf: Scratch::new(4096).unwrap(),
            error: 0,
            at: 0,
        };
        out.bytes(GMON_MAGIC);
        out.u32(GMON_VERSION);
        out.bytes(&[0; 12]);
        // 200000 samples at 1000 Hz in the callee's first whole bin (two pcs of it): 200 s,
        // four same-range records. (riscv64's functions may start at 2 mod 4: the bin then
        // starts 2 bytes in.)
        let start = (callee + 3) & !3;
        let samples = [
            Sample {
                pc: start,
                count: 150_000,
            },
            Sample {
                pc: start + 2,
                count: 50_000,
            },
        ];
        write_histogram(&mut out, &exe, start, start + 64, &samples, 1000);
        let calls = 5_000_000_000u64;
        write_arc(
            &mut out,
            &Arc {
                from: exe.link_address(caller + 1),
                to: exe.link_address(callee + 1),
                count: calls,
            },
        );
        out.flush();
        assert_eq!(out.error, 0);
        // SAFETY: the fd is ours.
        unsafe { libc::close(out.fd) };

        let me = std::env::current_exe().unwrap();
        // The gprof of this target (the tests of the other architectures run under qemu).
        let gprof = match std::env::consts::ARCH {
            "x86_64" => "gprof",
            "aarch64" => "aarch64-linux-gnu-gprof",
            "riscv64" => "riscv64-linux-gnu-gprof",
            "s390x" => "s390x-linux-gnu-gprof",
            other => panic!("no gprof known for {other}"),
        };
        let gprof = std::process::Command::new(gprof)
            .args(["-b", "-p"])
            .arg(&me)
            .arg(&path)
            .output();
        let _ = std::fs::remove_file(&path);
        let gprof = gprof.expect("gprof is required (scripts/test.sh installs binutils)");
        let text = String::from_utf8_lossy(&gprof.stdout);
        assert!(
            gprof.status.success(),
            "{}",
            String::from_utf8_lossy(&gprof.stderr)
        );
        let line = text
            .lines()
            .find(|l| l.ends_with(" instrfn_test_callee"))
            .unwrap_or_else(|| panic!("{text}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[2], "200.00", "self seconds: {line}");
        assert_eq!(cols[3], calls.to_string(), "calls: {line}");
    }

    #[test]
    pub fn merges_sorted_duplicates() {
        let arc = |from, to, count| Arc { from, to, count };
        let mut v = [
            arc(2, 2, 5),
            arc(1, 2, 3),
            arc(1, 3, 1),
            arc(1, 2, 4),
            arc(2, 2, 5),
        ];
        let m = merge_duplicates(&mut v);
        let got: Vec<_> = m.iter().map(|a| (a.from, a.to, a.count)).collect();
        assert_eq!(got, vec![(1, 2, 7), (1, 3, 1), (2, 2, 10)]);
    }
}
