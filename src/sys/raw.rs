//! Raw system calls, for code that must not touch errno or thread-local storage: the collector
//! thread (libc does not know it), the slow paths, signal handlers. The result is the kernel's:
//! a value, or `-errno`.
//!
//! Register contract of each arm: the number and up to six arguments in the registers the
//! kernel's syscall ABI names for the architecture, the result in the first argument register
//! (x86_64: rax), and the registers the kernel clobbers declared (x86_64: rcx, r11).

/// A raw system call.
///
/// # Safety
/// A system call with these arguments must be sound.
#[inline(always)]
pub unsafe fn syscall(nr: libc::c_long, a: [usize; 6]) -> isize {
    let r: isize;
    // SAFETY: the caller vouches for the call; each arm follows the kernel's syscall ABI for
    // its architecture.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        core::arch::asm!("syscall", inlateout("rax") nr as isize => r,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2], in("r10") a[3], in("r8") a[4],
            in("r9") a[5], lateout("rcx") _, lateout("r11") _, options(nostack));
        #[cfg(target_arch = "aarch64")]
        core::arch::asm!("svc 0", in("x8") nr, inlateout("x0") a[0] as isize => r,
            in("x1") a[1], in("x2") a[2], in("x3") a[3], in("x4") a[4], in("x5") a[5],
            options(nostack));
        #[cfg(target_arch = "riscv64")]
        core::arch::asm!("ecall", in("a7") nr, inlateout("a0") a[0] as isize => r,
            in("a1") a[1], in("a2") a[2], in("a3") a[3], in("a4") a[4], in("a5") a[5],
            options(nostack));
        #[cfg(target_arch = "s390x")]
        core::arch::asm!("svc 0", in("r1") nr, inlateout("r2") a[0] as isize => r,
            in("r3") a[1], in("r4") a[2], in("r5") a[3], in("r6") a[4], in("r7") a[5],
            options(nostack));
        #[cfg(not(instrfn_arch))]
        {
            let _ = (nr, a);
            r = -(libc::ENOSYS as isize);
        }
    }
    r
}

/// clone(flags, stack) whose child runs `entry(arg)` on `stack_top` and never returns.
/// Returns the child's tid, or -errno.
///
/// # Safety
/// `stack_top` is the 16-byte aligned top of a mapping the child may own; `entry` must never
/// return and must touch no thread-local storage.
#[allow(unused_variables)]
pub unsafe fn spawn(
    flags: usize,
    stack_top: usize,
    tls: usize,
    entry: extern "C" fn(usize) -> !,
    arg: usize,
) -> isize {
    let r: isize;
    let entry = entry as usize;
    // SAFETY: clone(2) with the caller's stack; the child (result 0) leaves the asm by calling
    // `entry` on its new stack, so it never runs the code after the asm with the parent's
    // frame. Arguments per arch: x86_64 (flags, stack, ptid, ctid, tls), aarch64 and riscv64
    // (flags, stack, ptid, tls, ctid), s390x (stack, flags, ...).
    unsafe {
        #[cfg(target_arch = "x86_64")]
        core::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone as isize => r,
            in("rdi") flags, in("rsi") stack_top, in("rdx") 0usize, in("r10") 0usize,
            in("r8") tls, in("r12") entry, in("r13") arg,
            lateout("rcx") _, lateout("r11") _, options(nostack));
        #[cfg(target_arch = "aarch64")]
        core::arch::asm!(
            "svc 0",
            "cbnz x0, 2f",
            "mov x29, xzr",
            "mov x30, xzr",
            "mov x0, x21",
            "blr x20",
            "brk #0",
            "2:",
            in("x8") libc::SYS_clone, inlateout("x0") flags as isize => r,
            in("x1") stack_top, in("x2") 0usize, in("x3") tls, in("x4") 0usize,
            in("x20") entry, in("x21") arg, options(nostack));
        #[cfg(target_arch = "riscv64")]
        core::arch::asm!(
            "ecall",
            "bnez a0, 2f",
            "mv a0, t1",
            "jalr t0",
            "unimp",
            "2:",
            in("a7") libc::SYS_clone, inlateout("a0") flags as isize => r,
            in("a1") stack_top, in("a2") 0usize, in("a3") tls, in("a4") 0usize,
            in("t0") entry, in("t1") arg, options(nostack));
        #[cfg(target_arch = "s390x")]
        core::arch::asm!(
            "svc 0",
            "ltgr %r2, %r2",
            "jnz 2f",
            "lgr %r2, %r9",
            "basr %r14, %r8",
            "j .",
            "2:",
            in("r1") libc::SYS_clone, inlateout("r2") (stack_top - 160) as isize => r,
            in("r3") flags, in("r4") 0usize, in("r5") 0usize, in("r6") tls,
            in("r8") entry, in("r9") arg, options(nostack));
        #[cfg(not(instrfn_arch))]
        {
            r = -(libc::ENOSYS as isize);
        }
    }
    r
}

/// The calling thread's thread pointer (what CLONE_SETTLS sets).
pub fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: reads of the thread pointer register (x86_64: the TCB's self pointer at %fs:0,
    // which glibc and musl keep).
    unsafe {
        #[cfg(target_arch = "x86_64")]
        core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
        #[cfg(target_arch = "aarch64")]
        core::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nomem, nostack));
        #[cfg(target_arch = "riscv64")]
        core::arch::asm!("mv {}, tp", out(reg) tp, options(nomem, nostack));
        #[cfg(target_arch = "s390x")]
        core::arch::asm!("ear {0}, %a0", "sllg {0}, {0}, 32", "ear {0}, %a1", out(reg) tp,
            options(nomem, nostack));
        #[cfg(not(instrfn_arch))]
        {
            tp = 0;
        }
    }
    tp
}

/// mmap(2) (s390x passes the six arguments in memory). Returns the address or -errno.
///
/// # Safety
/// As mmap(2).
pub unsafe fn mmap(addr: usize, len: usize, prot: i32, flags: i32, fd: i32, off: u64) -> isize {
    let a = [
        addr,
        len,
        prot as usize,
        flags as usize,
        fd as isize as usize,
        off as usize,
    ];
    // SAFETY: mmap(2) with the caller's arguments; on s390x the old_mmap call reads them from
    // the array.
    unsafe {
        if cfg!(target_arch = "s390x") {
            syscall(libc::SYS_mmap, [a.as_ptr() as usize, 0, 0, 0, 0, 0])
        } else {
            syscall(libc::SYS_mmap, a)
        }
    }
}

/// A private futex operation on `word`, with FUTEX_WAIT's `timeout`.
pub fn futex(
    word: &core::sync::atomic::AtomicU32,
    op: i32,
    val: u32,
    timeout: Option<&libc::timespec>,
) {
    let timeout = timeout.map_or(0, |t| t as *const libc::timespec as usize);
    // SAFETY: a private futex on a word we borrow and a timespec we borrow (or none).
    unsafe {
        syscall(
            libc::SYS_futex,
            [
                word.as_ptr() as usize,
                (op | libc::FUTEX_PRIVATE_FLAG) as usize,
                val as usize,
                timeout,
                0,
                0,
            ],
        )
    };
}
