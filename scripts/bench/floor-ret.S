/* The floor of a tracer that gets exits by replacing return addresses, for scripts/compare.py:
 * an x86_64 `mcount` that reads the time stamp counter, keeps the instrumented function's real
 * return address (at 8(%rbp): mcount runs after the prologue) on a thread-local stack, puts
 * the address of a stub in its place, and returns; the function's `ret` then lands in the stub,
 * which reads the counter again, pops the real address and jumps back to it (an indirect jmp,
 * as instrfn's exit trampoline: a `ret` there would unbalance the return predictor). The
 * function's `ret` itself is mispredicted: every return-replacing tracer pays that.
 * Register contract: mcount preserves every register (rax, rcx, rdx kept in the red zone);
 * the stub preserves rax and rdx (the return values) and clobbers rcx and the flags, which
 * are dead after a return. Linked into the executable (local-exec TLS). */
    .section .tbss,"awT",@nobits
    .p2align 4
floor_stack:
    .zero 8 * 65536
floor_depth:
    .zero 8

    .text
    .globl mcount
    .type mcount,@function
mcount:
    movq %rax, -8(%rsp)
    movq %rcx, -16(%rsp)
    movq %rdx, -24(%rsp)
    rdtsc
    movq %fs:floor_depth@tpoff, %rcx
    movq 8(%rbp), %rax
    movq %rax, %fs:floor_stack@tpoff(,%rcx,8)
    incq %rcx
    movq %rcx, %fs:floor_depth@tpoff
    leaq floor_return(%rip), %rax
    movq %rax, 8(%rbp)
    movq -8(%rsp), %rax
    movq -16(%rsp), %rcx
    movq -24(%rsp), %rdx
    ret
    .size mcount, .-mcount

    .type floor_return,@function
floor_return:
    movq %rax, -8(%rsp)
    movq %rdx, -16(%rsp)
    rdtsc
    movq %fs:floor_depth@tpoff, %rcx
    decq %rcx
    movq %rcx, %fs:floor_depth@tpoff
    movq %fs:floor_stack@tpoff(,%rcx,8), %rcx
    movq -8(%rsp), %rax
    movq -16(%rsp), %rdx
    jmp *%rcx
    .size floor_return, .-floor_return
    .section .note.GNU-stack,"",@progbits
