# instrfn trampolines for riscv64, ways into the runtime: the guarded routine every Rust entry
# point runs through, this thread's stack bounds and Tls, a call on another stack.

# instrfn_riscv64_guarded: run a runtime entry point with this thread's guard held and all
#   signals blocked (as on x86_64, also when called from a signal handler: qemu-riscv64 7.2
#   does not apply a handler's sa_mask).
#   t0 = the Rust function to call, a0/a1/a2 = its first three arguments. Returns the
#   function's a0/a1; errno, the previous guard value and the signal mask are restored.
#   Clobbers what an ordinary call clobbers.
#   Frame, 96 bytes, s0 = CFA = sp + 96 (a standard frame-pointer frame):
#      CFA-8 ra  -16 s0  -24 s1  -32 s2  -40 s3  -48 s4  -56 s5
#      sp+0 old signal mask   sp+8 errno   sp+16 old guard
    .p2align 2
    .globl instrfn_riscv64_guarded
    .hidden instrfn_riscv64_guarded
    .type instrfn_riscv64_guarded,@function
instrfn_riscv64_guarded:
    .cfi_startproc
    addi sp, sp, -96
    .cfi_def_cfa_offset 96
    sd ra, 88(sp)
    .cfi_rel_offset ra, 88
    sd s0, 80(sp)
    .cfi_rel_offset s0, 80
    addi s0, sp, 96
    .cfi_def_cfa s0, 0
    sd s1, 72(sp)
    .cfi_offset s1, -24
    sd s2, 64(sp)
    .cfi_offset s2, -32
    sd s3, 56(sp)
    .cfi_offset s3, -40
    sd s4, 48(sp)
    .cfi_offset s4, -48
    sd s5, 40(sp)
    .cfi_offset s5, -56
    mv s2, t0
    mv s3, a0
    mv s4, a1
    mv s5, a2
    BLOCK_SIGNALS 0
    call __errno_location
    lw a0, 0(a0)
    sw a0, 8(sp)
    la.tls.ie s1, instrfn_tls
    add s1, s1, tp                         # s1 = &Tls
    ld a0, {TLS_GUARD}(s1)
    sd a0, 16(sp)                          # old guard
    li a0, 1
    sd a0, {TLS_GUARD}(s1)
    mv a0, s3
    mv a1, s4
    mv a2, s5
    jalr s2
    mv s3, a0
    mv s4, a1
    ld a0, 16(sp)
    sd a0, {TLS_GUARD}(s1)
    call __errno_location
    lw a1, 8(sp)
    sw a1, 0(a0)
    RESTORE_SIGNALS 0
    mv a0, s3
    mv a1, s4
    ld s5, 40(sp)
    ld s4, 48(sp)
    ld s3, 56(sp)
    ld s2, 64(sp)
    ld s1, 72(sp)
    ld ra, 88(sp)
    ld s0, 80(sp)
    .cfi_def_cfa sp, 96
    addi sp, sp, 96
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
    .size instrfn_riscv64_guarded, .-instrfn_riscv64_guarded

# instrfn_riscv64_stack_get: a0 = address of this thread's StackBounds. Clobbers nothing else.
    .p2align 2
    .globl instrfn_riscv64_stack_get
    .hidden instrfn_riscv64_stack_get
    .type instrfn_riscv64_stack_get,@function
instrfn_riscv64_stack_get:
    .cfi_startproc
    la.tls.ie a0, instrfn_riscv64_stack
    add a0, a0, tp
    ret
    .cfi_endproc
    .size instrfn_riscv64_stack_get, .-instrfn_riscv64_stack_get

# instrfn_tls_get: a0 = address of this thread's Tls. Clobbers nothing else.
    .p2align 2
    .globl instrfn_tls_get
    .hidden instrfn_tls_get
    .type instrfn_tls_get,@function
instrfn_tls_get:
    .cfi_startproc
    la.tls.ie a0, instrfn_tls
    add a0, a0, tp
    ret
    .cfi_endproc
    .size instrfn_tls_get, .-instrfn_tls_get

# instrfn_call_on_stack(f = a0, arg = a1, top = a2): as on x86_64 (src/arch/x86_64/); s0 holds the
#   caller's stack pointer.
    .p2align 2
    .globl instrfn_call_on_stack
    .hidden instrfn_call_on_stack
    .type instrfn_call_on_stack,@function
instrfn_call_on_stack:
    .cfi_startproc
    addi sp, sp, -16
    .cfi_def_cfa_offset 16
    sd ra, 8(sp)
    .cfi_rel_offset ra, 8
    sd s0, 0(sp)
    .cfi_rel_offset s0, 0
    addi s0, sp, 16
    .cfi_def_cfa s0, 0
    mv t0, a0
    mv a0, a1
    andi a2, a2, -16
    mv sp, a2
    jalr t0
    addi sp, s0, -16
    .cfi_def_cfa sp, 16
    ld ra, 8(sp)
    .cfi_restore ra
    ld s0, 0(sp)
    .cfi_restore s0
    addi sp, sp, 16
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
    .size instrfn_call_on_stack, .-instrfn_call_on_stack

    .option pop
