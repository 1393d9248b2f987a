/* The floor of a tracer for scripts/compare.py: an x86_64 `mcount` that does nothing but read
 * the time stamp counter twice (an entry and an exit timestamp, the least any tracer that times
 * calls must do). Register contract: preserves every register the instrumented function may
 * still need (rax and rdx, which rdtsc writes, are kept in the red zone); clobbers nothing
 * else, not even flags. */
    .text
    .globl mcount
    .type mcount,@function
mcount:
    movq %rax, -8(%rsp)
    movq %rdx, -16(%rsp)
    rdtsc
    rdtsc
    movq -8(%rsp), %rax
    movq -16(%rsp), %rdx
    ret
    .size mcount, .-mcount
    .section .note.GNU-stack,"",@progbits
