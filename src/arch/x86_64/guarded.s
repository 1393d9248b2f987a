# instrfn trampolines for x86_64, ways into the runtime: the guarded routine every Rust entry point
# runs through, the XSAVE probe, this thread's Tls and a call on another stack.

# instrfn_x86_64_xsave_detect: fill instrfn_x86_64_xsave_mask/size.
#   Called only from instrfn_x86_64_slow, which has saved everything: clobbers rax, rcx, rdx,
#   rsi, rdi, r8; preserves rbx (cpuid writes it).
#   Mask = XCR0 & (x87 | SSE | AVX | opmask | ZMM_Hi256 | Hi16_ZMM); size = the end of the last
#   of those components in the standard (non-compacted) layout, as CPUID leaf 0xD reports it,
#   rounded up to 64. Without OSXSAVE: mask 0 and FXSAVE's 512 bytes.
    .p2align 4
    .type instrfn_x86_64_xsave_detect,@function
instrfn_x86_64_xsave_detect:
    .cfi_startproc
    pushq %rbx
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbx, 0
    movl $1, %eax
    cpuid
    btl $27, %ecx                    # OSXSAVE
    jnc 3f
    xorl %ecx, %ecx
    xgetbv
    andl $0xe7, %eax
    movl %eax, %esi                  # mask (components 0-7 fit in the low word)
    movl $576, %r8d                  # legacy area + XSAVE header
    movl $2, %edi                    # component number
1:  btl %edi, %esi
    jnc 2f
    movl $0xd, %eax
    movl %edi, %ecx
    cpuid                            # eax = size, ebx = offset of component edi
    addl %ebx, %eax
    cmpl %r8d, %eax
    cmova %eax, %r8d
2:  incl %edi
    cmpl $8, %edi
    jb 1b
    addl $63, %r8d
    andl $-64, %r8d
    movq %rsi, instrfn_x86_64_xsave_mask(%rip)
    movq %r8, instrfn_x86_64_xsave_size(%rip)
    popq %rbx
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbx
    ret
3:  movq $0, instrfn_x86_64_xsave_mask(%rip)
    movq $512, instrfn_x86_64_xsave_size(%rip)
    popq %rbx
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbx
    ret
    .cfi_endproc
    .size instrfn_x86_64_xsave_detect, .-instrfn_x86_64_xsave_detect

# instrfn_x86_64_guarded: run a runtime entry point with this thread's guard held and all
#   signals blocked (also when the caller is a signal handler: then this only repeats its
#   sa_mask, where the kernel applies it; emulators such as qemu-riscv64 do not).
#   %rax = the Rust function to call, %rdi/%rsi/%rdx = its first three arguments.
#   Returns the function's %rax; errno is preserved; the previous guard value and signal mask
#   are restored (so a handler that interrupts a fast path leaves both as they were).
#   Clobbers what an ordinary call clobbers.
#   Frame: (%rsp) old signal mask, 8 errno, 16 old guard.
    .p2align 4
    .globl instrfn_x86_64_guarded
    .hidden instrfn_x86_64_guarded
    .type instrfn_x86_64_guarded,@function
instrfn_x86_64_guarded:
    .cfi_startproc
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbp, 0
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    pushq %rbx
    .cfi_offset %rbx, -24
    pushq %r12
    .cfi_offset %r12, -32
    pushq %r13
    .cfi_offset %r13, -40
    pushq %r14
    .cfi_offset %r14, -48
    pushq %r15
    .cfi_offset %r15, -56
    subq $40, %rsp
    movq %rax, %r12
    movq %rdi, %r13
    movq %rsi, %r14
    movq %rdx, %r15
    BLOCK_SIGNALS
    call __errno_location@PLT
    movl (%rax), %eax
    movl %eax, 8(%rsp)
    movq instrfn_tls@gottpoff(%rip), %rbx
    movq %fs:{TLS_GUARD}(%rbx), %rax
    movq %rax, 16(%rsp)
    movq $1, %fs:{TLS_GUARD}(%rbx)
    movq %r13, %rdi
    movq %r14, %rsi
    movq %r15, %rdx
    call *%r12
    movq %rax, %r12
    movq 16(%rsp), %rax
    movq %rax, %fs:{TLS_GUARD}(%rbx)
    call __errno_location@PLT
    movl 8(%rsp), %ecx
    movl %ecx, (%rax)
    RESTORE_SIGNALS
    movq %r12, %rax
    leaq -40(%rbp), %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size instrfn_x86_64_guarded, .-instrfn_x86_64_guarded

# instrfn_tls_get: %rax = address of this thread's Tls. Clobbers nothing else.
    .p2align 4
    .globl instrfn_tls_get
    .hidden instrfn_tls_get
    .type instrfn_tls_get,@function
instrfn_tls_get:
    .cfi_startproc
    movq %fs:0, %rax
    addq instrfn_tls@gottpoff(%rip), %rax
    ret
    .cfi_endproc
    .size instrfn_tls_get, .-instrfn_tls_get

# instrfn_call_on_stack(f = %rdi, arg = %rsi, top = %rdx): calls f(arg) with the stack pointer at
#   top (rounded down to 16), and returns f's %rax on the caller's stack. For the crash handler,
#   which may run on a small alternate signal stack (src/runtime/crash.rs). An ordinary call otherwise:
#   clobbers what a call clobbers. Frame: %rbp holds the caller's stack pointer.
    .p2align 4
    .globl instrfn_call_on_stack
    .hidden instrfn_call_on_stack
    .type instrfn_call_on_stack,@function
instrfn_call_on_stack:
    .cfi_startproc
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbp, 0
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    movq %rdx, %rsp
    andq $-16, %rsp
    movq %rdi, %rax
    movq %rsi, %rdi
    call *%rax
    movq %rbp, %rsp
    popq %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size instrfn_call_on_stack, .-instrfn_call_on_stack

