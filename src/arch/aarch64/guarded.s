// instrfn trampolines for aarch64, ways into the runtime: the guarded routine every Rust entry
// point runs through, this thread's Tls and call-site class, a call on another stack, the call-
// site table.

// instrfn_aarch64_guarded: run a runtime entry point with this thread's guard held and all
//   signals blocked (as on x86_64, also when called from a signal handler).
//   x9 = the Rust function to call, x0/x1/x2 = its first three arguments. Returns the
//   function's x0; errno, the previous guard value and the signal mask are restored.
//   Clobbers what an ordinary call clobbers. x9, not x16/x17: the stubs reach this routine
//   by a `b` that the linker may route through a veneer, and veneers clobber x16/x17.
//   Frame, 96 bytes, x29 = sp = CFA - 96: +0 x29, x30; +16 x19 (function), x20; +32 x21, x22
//   (arguments); +48 x23 (unused), x24 (&Tls); +64 old signal mask; +72 errno (4 bytes);
//   +80 old guard.
    .p2align 4
    .globl instrfn_aarch64_guarded
    .hidden instrfn_aarch64_guarded
    .type instrfn_aarch64_guarded,%function
instrfn_aarch64_guarded:
    .cfi_startproc
    stp     x29, x30, [sp, #-96]!
    .cfi_def_cfa_offset 96
    .cfi_offset x29, -96
    .cfi_offset x30, -88
    mov     x29, sp
    .cfi_def_cfa_register x29
    stp     x19, x20, [sp, #16]
    .cfi_offset x19, -80
    .cfi_offset x20, -72
    stp     x21, x22, [sp, #32]
    .cfi_offset x21, -64
    .cfi_offset x22, -56
    stp     x23, x24, [sp, #48]
    .cfi_offset x23, -48
    .cfi_offset x24, -40
    mov     x19, x9
    mov     x20, x0
    mov     x21, x1
    mov     x22, x2
    BLOCK_SIGNALS 64, sp
    bl      __errno_location
    ldr     w0, [x0]
    str     w0, [sp, #72]
    TLS_ADDR x24, x0                        // &Tls
    ldr     x0, [x24, #{TLS_GUARD}]
    str     x0, [sp, #80]
    mov     x0, #1
    str     x0, [x24, #{TLS_GUARD}]
    mov     x0, x20
    mov     x1, x21
    mov     x2, x22
    blr     x19
    mov     x19, x0
    ldr     x0, [sp, #80]
    str     x0, [x24, #{TLS_GUARD}]
    bl      __errno_location
    ldr     w1, [sp, #72]
    str     w1, [x0]
    RESTORE_SIGNALS 64, sp
    mov     x0, x19
    ldp     x23, x24, [sp, #48]
    ldp     x21, x22, [sp, #32]
    ldp     x19, x20, [sp, #16]
    ldp     x29, x30, [sp], #96
    .cfi_def_cfa sp, 0
    .cfi_restore x19
    .cfi_restore x20
    .cfi_restore x21
    .cfi_restore x22
    .cfi_restore x23
    .cfi_restore x24
    .cfi_restore x29
    .cfi_restore x30
    ret
    .cfi_endproc
    .size instrfn_aarch64_guarded, .-instrfn_aarch64_guarded

// instrfn_tls_get: x0 = address of this thread's Tls. Clobbers x16 only.
    .p2align 4
    .globl instrfn_tls_get
    .hidden instrfn_tls_get
    .type instrfn_tls_get,%function
instrfn_tls_get:
    .cfi_startproc
    TLS_ADDR x0, x16                        // &Tls
    ret
    .cfi_endproc
    .size instrfn_tls_get, .-instrfn_tls_get

// instrfn_call_on_stack(f = x0, arg = x1, top = x2): as on x86_64 (src/arch/x86_64/); x29 holds
//   the caller's stack pointer.
    .p2align 4
    .globl instrfn_call_on_stack
    .hidden instrfn_call_on_stack
    .type instrfn_call_on_stack,%function
instrfn_call_on_stack:
    .cfi_startproc
    stp     x29, x30, [sp, #-16]!
    .cfi_def_cfa_offset 16
    .cfi_offset x29, -16
    .cfi_offset x30, -8
    mov     x29, sp
    .cfi_def_cfa_register x29
    mov     x9, x0
    mov     x0, x1
    and     x2, x2, #-16
    mov     sp, x2
    blr     x9
    mov     sp, x29
    .cfi_def_cfa_register sp
    ldp     x29, x30, [sp], #16
    .cfi_def_cfa_offset 0
    .cfi_restore x29
    .cfi_restore x30
    ret
    .cfi_endproc
    .size instrfn_call_on_stack, .-instrfn_call_on_stack

// instrfn_aarch64_class_get: x0 = address of this thread's call-site class word, which the
//   trace slow path sets for `replaceable` (src/arch/aarch64/mod.rs) while it records one call.
//   Clobbers x16 only.
    .p2align 4
    .globl instrfn_aarch64_class_get
    .hidden instrfn_aarch64_class_get
    .type instrfn_aarch64_class_get,%function
instrfn_aarch64_class_get:
    .cfi_startproc
    mrs     x0, tpidr_el0
    adrp    x16, :gottprel:instrfn_aarch64_class
    ldr     x16, [x16, #:gottprel_lo12:instrfn_aarch64_class]
    add     x0, x0, x16
    ret
    .cfi_endproc
    .size instrfn_aarch64_class_get, .-instrfn_aarch64_class_get

    .section .tbss,"awT",%nobits
    .p2align 3
    .type instrfn_aarch64_class,%object
    .size instrfn_aarch64_class, 8
instrfn_aarch64_class:
    .zero 8

// The call-site table of trace mode (see the header): written by the slow path, read by the
// fast path; every entry names its site, so a collision only costs a slow path.
    .bss
    .p2align 4
    .globl instrfn_aarch64_sites
    .hidden instrfn_aarch64_sites
    .type instrfn_aarch64_sites,%object
    .size instrfn_aarch64_sites, 8 << {SITE_BITS}
instrfn_aarch64_sites:
    .zero 8 << {SITE_BITS}

// Nonzero where the CPU has SVE (AT_HWCAP), set by instrfn_aarch64_init at load time. Read by
// the slow paths (SAVE_VECTORS).
    .data
    .p2align 3
    .globl instrfn_aarch64_sve
    .hidden instrfn_aarch64_sve
    .type instrfn_aarch64_sve,%object
    .size instrfn_aarch64_sve, 1
instrfn_aarch64_sve:
    .byte 0

// Rust functions the assembly calls: internal (libinstrfn.so exports none of them).
    .hidden instrfn_aarch64_init
    .hidden instrfn_aarch64_gmon_slow
    .hidden instrfn_aarch64_trace_slow
    .hidden instrfn_aarch64_trace_exit

    .section .init_array,"aw",%init_array
    .p2align 3
    .quad instrfn_aarch64_init

    .text
