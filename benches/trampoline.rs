//! Trampoline overhead, in ns per instrumented call (x86_64).
//!
//! Each benchmark calls a tiny assembly function shaped like compiler output: `bench_mcount`
//! is what `gcc -pg` / rustc `-Zinstrument-mcount` make of an empty function (frame, `call
//! mcount`), `bench_fentry` what `gcc -pg -mfentry` makes (`call __fentry__` first). The
//! `empty` variant calls a trampoline that only returns: the floor any mcount runtime pays.
//! The `first_arc` variants pass a new caller pc on every call, so every call takes the slow
//! path (insert, table growth included); each sample starts from an empty table.
//!
//! `glibc_mcount` is glibc's own `_mcount` (from libc.so.6, started with its `__monstartup`
//! over this executable's code), measured in the same process for the ratio.
//!
//! Before timing, each variant checks that its calls are really counted.
//! Run: `cargo bench --bench trampoline`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};

#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    r#"
    .text
    .p2align 4
bench_empty_trampoline:
    ret

    .p2align 4
    .globl bench_empty
bench_empty:
    pushq %rbp
    movq %rsp, %rbp
    call bench_empty_trampoline
    popq %rbp
    ret

    .p2align 4
    .globl bench_mcount
bench_mcount:
    pushq %rbp
    movq %rsp, %rbp
    call mcount
    popq %rbp
    ret

    .p2align 4
    .globl bench_fentry
bench_fentry:
    call __fentry__
    ret

    # the same through a pointer to glibc's _mcount (set up by glibc_mcount_setup)
    .p2align 4
    .globl bench_glibc
bench_glibc:
    pushq %rbp
    movq %rsp, %rbp
    call *bench_glibc_mcount(%rip)
    popq %rbp
    ret

    .data
    .p2align 3
    .globl bench_glibc_mcount
bench_glibc_mcount:
    .quad 0
    .text

    # bench_mcount_from(from_pc): as bench_mcount, with from_pc as the caller pc mcount reads
    .p2align 4
    .globl bench_mcount_from
bench_mcount_from:
    pushq %rdi
    pushq %rbp
    movq %rsp, %rbp
    call mcount
    popq %rbp
    popq %rdi
    ret

    # bench_fentry_from(from_pc): as bench_fentry, with from_pc as the caller pc
    .p2align 4
    .globl bench_fentry_from
bench_fentry_from:
    pushq %rdi
    call __fentry__
    popq %rdi
    ret
"#,
    options(att_syntax)
);

unsafe extern "C" {
    static mut bench_glibc_mcount: usize;
    fn bench_glibc();
    fn bench_empty();
    fn bench_mcount();
    fn bench_fentry();
    fn bench_mcount_from(from_pc: usize);
    fn bench_fentry_from(from_pc: usize);
}

/// Asserts that `calls` more calls of `f` are recorded as `expect` more calls.
fn assert_counted(name: &str, expect_per_call: u64, f: impl Fn(usize)) {
    let before = instrfn::calls_recorded();
    for i in 0..1000 {
        f(i);
    }
    let got = instrfn::calls_recorded() - before;
    assert_eq!(
        got,
        1000 * expect_per_call,
        "{name}: calls not counted as expected"
    );
}

/// Points `bench_glibc_mcount` at glibc's `_mcount` and starts glibc's profiler over this
/// executable (its own `__monstartup`, found in libc.so.6 itself, not the one instrfn defines).
fn glibc_mcount_setup() {
    // SAFETY: dlopen/dlsym with valid C strings; the symbols have the documented C signatures.
    unsafe {
        let libc_so = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!libc_so.is_null(), "libc.so.6 not loaded");
        let mcount = libc::dlsym(libc_so, c"_mcount".as_ptr());
        let monstartup = libc::dlsym(libc_so, c"__monstartup".as_ptr());
        assert!(!mcount.is_null() && !monstartup.is_null());
        let monstartup: extern "C" fn(usize, usize) = std::mem::transmute(monstartup);
        let here = bench_glibc as *const () as usize;
        monstartup(here & !0xfff_ffff, (here | 0xfff_ffff) + 1);
        bench_glibc_mcount = mcount as usize;
    }
}

fn fast_paths(c: &mut Criterion) {
    glibc_mcount_setup();
    // SAFETY (all calls below): the assembly functions follow the C ABI and the trampolines'
    // contracts; they take no pointers.
    assert_counted("empty", 0, |_| unsafe { bench_empty() });
    assert_counted("mcount", 1, |_| unsafe { bench_mcount() });
    assert_counted("fentry", 1, |_| unsafe { bench_fentry() });
    let mut g = c.benchmark_group("fast_path");
    g.bench_function("empty_trampoline", |b| b.iter(|| unsafe { bench_empty() }));
    g.bench_function("glibc_mcount", |b| b.iter(|| unsafe { bench_glibc() }));
    g.bench_function("mcount", |b| b.iter(|| unsafe { bench_mcount() }));
    g.bench_function("fentry", |b| b.iter(|| unsafe { bench_fentry() }));
    g.finish();
}

/// Times `iters` calls, each with a caller pc never seen before in this thread's table.
/// Callers are 4 bytes apart (as aarch64 and riscv64 call sites can be: the hash must spread
/// them), and the table is emptied every `BATCH` calls, outside the timing, so that a long
/// sample measures inserts, not a table at its INSTRFN_MAX_ARCS limit.
fn first_arcs(iters: u64, f: unsafe extern "C" fn(usize)) -> Duration {
    const BATCH: u64 = 100_000;
    let base = 0x7000_0000_0000usize;
    let mut t = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let n = (iters - done).min(BATCH);
        instrfn::instrfn_debug_clear_thread();
        let start = Instant::now();
        for i in 0..n as usize {
            // SAFETY: see fast_paths.
            unsafe { f(black_box(base + i * 4)) };
        }
        t += start.elapsed();
        done += n;
    }
    instrfn::instrfn_debug_clear_thread();
    t
}

fn first_arc_paths(c: &mut Criterion) {
    instrfn::instrfn_debug_clear_thread();
    // SAFETY: see fast_paths.
    assert_counted("mcount first arc", 1, |i| unsafe {
        bench_mcount_from(0x6000_0000_0000 + i * 4)
    });
    assert_counted("fentry first arc", 1, |i| unsafe {
        bench_fentry_from(0x6100_0000_0000 + i * 4)
    });
    let mut g = c.benchmark_group("first_arc");
    g.bench_function("mcount", |b| {
        b.iter_custom(|n| first_arcs(n, bench_mcount_from))
    });
    g.bench_function("fentry", |b| {
        b.iter_custom(|n| first_arcs(n, bench_fentry_from))
    });
    g.finish();
}

criterion_group!(benches, fast_paths, first_arc_paths);
criterion_main!(benches);
