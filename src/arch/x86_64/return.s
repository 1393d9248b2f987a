# instrfn trampolines for x86_64, gcc's return route: `gcc -pg -mfentry -minstrument-return=call`
# code calls __fentry__ first in every function and __return__ before each of its `ret`s and
# tail-call `jmp`s. Assembled after xray.s; uses events.s's macros (SCRATCH_SAVE,
# SCRATCH_RESTORE, TIMESTAMP, MERGE_CALL, TRACE_EVENT, SHADOW_RESERVE, SHADOW_RELEASE,
# SHADOW_POP) and this block's operands, with x86_64's own: {TLS_STACK_LO}, {TLS_STACK_HI},
# {TLS_ALT_LO}, {TLS_ALT_HI} (the Tls's stack bounds) and {RETURN_RANGES}.
#
# Such a function's entry replaces nothing: it pushes a shadow entry as an XRay entry does (ret
# 0; the slot, its key, is the function's return slot) and its __return__ writes the exit and
# pops it, as an XRay exit does. The key is the same at both calls: at __fentry__ (the function's
# first instruction) and at __return__ (its frame gone, in place of its `ret` or before its tail
# `jmp`) %rsp points at the function's return address, so in both routines 8(%rsp) = the return
# slot. Frames left by longjmp or unwinding are closed by XRay's slow paths
# (instrfn_return_slow, src/runtime/slow/).
#
# Which code calls __return__ is known per loaded object (src/trace/returns.rs): its code range
# is in instrfn_x86_64_return_ranges, and instrfn_mode is 3 once there is one. __fentry__ of any
# other code (plain -pg -mfentry) replaces its return address as in mode 1.
#
# The stack at __return__: the function's frame is gone, so nothing below its %rsp is live (a
# tail call's stack arguments lie above the return address). The routines use the red zone
# below their own %rsp, as FAST_PATH does.

    .hidden instrfn_return_slow

    .data
# The code ranges [lo, hi) of the objects that call __return__ (src/arch/x86_64/return_route.rs
# writes them): {RETURN_RANGES} pairs, of which the first instrfn_x86_64_return_count are looked
# at; a pair whose hi is 0 is free. A pair's hi is stored after its lo, and the count after both
# (x86 stores are seen in order), so a reader never matches half a pair.
    .p2align 4
    .globl instrfn_x86_64_return_ranges
    .hidden instrfn_x86_64_return_ranges
instrfn_x86_64_return_ranges:
    .zero 16 * {RETURN_RANGES}
    .globl instrfn_x86_64_return_count
    .hidden instrfn_x86_64_return_count
instrfn_x86_64_return_count:
    .quad 0

    .text

# instrfn_x86_64_fentry_return: __fentry__'s trace fast path in mode 3 (FAST_PATH of
#   src/arch/x86_64/counting.s jumps here after its guard, recording and mode checks).
#   Entry: (%rsp) = self_pc, 8(%rsp) = the function's return slot; rax = the Tls offset,
#   rsi = self_pc; rax, rcx, rdx, rsi and rdi of the instrumented code at -8 .. -40(%rsp)
#   (SCRATCH_SAVE -8), -48(%rsp) free. Registers: all preserved but the flags.
#   A function outside every range goes back to __fentry__'s own path
#   (instrfn_x86_64_fentry_hijack), which replaces its return address. One inside: an entry
#   event and a shadow entry (ret 0, slot, self_pc), exactly as XRAY_ENTRY (src/arch/x86_64/
#   xray.s); anything out of the ordinary (no chunk, a full shadow stack, frames to close,
#   an unwinder ran, a tail call from a function whose return address was replaced) goes to
#   instrfn_return_slow(&Tls, slot | 0, self_pc) through instrfn_x86_64_slow.
    .p2align 4
    .globl instrfn_x86_64_fentry_return
    .hidden instrfn_x86_64_fentry_return
    .type instrfn_x86_64_fentry_return,@function
instrfn_x86_64_fentry_return:
    .cfi_startproc
    movq instrfn_x86_64_return_count(%rip), %rcx
    leaq instrfn_x86_64_return_ranges(%rip), %rdi
1:  testq %rcx, %rcx
    jz instrfn_x86_64_fentry_hijack          # in no range: plain -pg -mfentry code
    cmpq (%rdi), %rsi
    jb 2f
    cmpq 8(%rdi), %rsi
    jb 3f
2:  addq $16, %rdi
    decq %rcx
    jmp 1b
3:  cmpq $0, %fs:{TLS_UNWOUND}(%rax)
    jne .Lfr_slow
    leaq 8(%rsp), %rdi                      # the return slot
    # our shadow entry (the newest one's frame at or below ours: the slow path; full, or no
    # shadow stack yet: given back, the slow path)
    SHADOW_RESERVE .Lfr_slow, .Lfr_unpush
    movq %rdi, -48(%rsp)
    TIMESTAMP
    # our event (past the chunk's end, or no chunk: the entry given back, the slow path)
    TRACE_EVENT 2, %rdi, .Lfr_unpush, %rsi, entry
    movq -48(%rsp), %rax                    # the shadow entry: function, ret 0, slot last
    movq %rsi, {SH_FN}(%rax)
    movq $0, {SH_RET}(%rax)
    leaq 8(%rsp), %rdi
    movq %rdi, {SH_SLOT}(%rax)
    SCRATCH_RESTORE -8
    ret
.Lfr_unpush:
    SHADOW_RELEASE
.Lfr_slow:
    # rsi = self_pc
    leaq instrfn_return_slow(%rip), %rcx
    movq -8(%rsp), %rax
    movq %rcx, -8(%rsp)
    movq %rsi, %rcx                         # the function
    leaq 8(%rsp), %rdx                      # the return slot | 0 (entry)
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    jmp instrfn_x86_64_slow
    .cfi_endproc
    .size instrfn_x86_64_fentry_return, .-instrfn_x86_64_fentry_return

# instrfn_x86_64_return: __return__ in modes 1 and 3 (the exported __return__, src/arch/x86_64/
#   mod.rs, returns at once in modes 0 and 2 and jumps here otherwise).
#   Entry (by that jump, from the instrumented function's `call __return__`): (%rsp) = the
#   return address into the function, 8(%rsp) = the function's return slot. Every register is
#   as the function left it: rax, rdx, xmm0, xmm1 and the x87 stack may hold its result (rax an
#   sret pointer); before a tail `jmp` the callee's arguments (rdi, rsi, rdx, rcx, r8, r9, rax
#   for a variadic call, xmm0-7 whole, r10 a static chain) and an indirect jump's target.
#   Registers: all preserved but the flags (no flag is live before a `ret` or a `jmp`). The
#   fast path touches rax, rcx, rdx, rsi, rdi (and r8-r11 while it makes a call word), saved
#   in the red zone, and no x87/MMX, SSE or AVX state; the slow path saves the whole extended
#   state (instrfn_x86_64_slow).
#   The newest shadow entry is this frame's (its slot is 8(%rsp)) and replaced nothing: its
#   exit (a call word where the call recorded nothing inside it), then it is popped, recording
#   on or off, as XRAY_EXIT does. Else:
#   - no shadow entry at all (code built with -mnop-mcount, or entered before tracing began),
#     or the guard is held, or recording is off: nothing to do;
#   - the newest entry's frame lies above this one on the thread's own stack, and neither is
#     on the alternate signal stack: this frame has no entry (entered while recording was
#     off, or deeper than INSTRFN_DEPTH) and no frame below it is open: nothing to do. (On one
#     stack a frame pushed after a live one lies below it: an entry of this frame would be
#     the newest, or under newer entries of frames on other stacks, which fail this test.)
#   - otherwise (frames below this one to close: longjmp, an exception, code that does not
#     call __return__; an entry whose return address was replaced, which goes back; another
#     stack; the stack's bounds not known yet; an unwinder ran; no room for the event):
#     instrfn_return_slow(&Tls, slot | 1, 0) through instrfn_x86_64_slow.
#   Red zone: -8 the Rust function at the slow handover, -16 rcx, -24 rdx, -32 rsi, -40 rdi,
#   -48 rax, -64 .. -88 r8-r11 while a call word is made (MERGE_CALL).
    .p2align 4
    .globl instrfn_x86_64_return
    .hidden instrfn_x86_64_return
    .type instrfn_x86_64_return,@function
instrfn_x86_64_return:
    .cfi_startproc
    SCRATCH_SAVE -48
    movq instrfn_tls@gottpoff(%rip), %rcx
    cmpq $0, %fs:{TLS_GUARD}(%rcx)          # guard held: runtime code is running here
    jne .Lr_out
    cmpq $0, %fs:{TLS_UNWOUND}(%rcx)
    jne .Lr_slow
    leaq 8(%rsp), %rdx                      # the return slot
    movq %fs:{TLS_SHADOW_TOP}(%rcx), %rdi
    cmpq %fs:{TLS_SHADOW_BASE}(%rcx), %rdi
    je .Lr_out                              # no shadow entry (also: no shadow stack yet)
    subq ${SH_BYTES}, %rdi                  # the newest entry
    cmpq %rdx, {SH_SLOT}(%rdi)
    jne .Lr_none
    cmpq $0, {SH_RET}(%rdi)
    jne .Lr_slow                            # its return address was replaced: put back there
    TIMESTAMP
    MERGE_CALL {SH_FN}(%rdi), -64, .Lr_pop
    TRACE_EVENT 1, %rsi, .Lr_slow, {SH_FN}(%rdi), exit
.Lr_pop:
    SHADOW_POP %rdi
.Lr_out:
    SCRATCH_RESTORE -48
    ret
.Lr_none:
    # rdx = our slot, rdi = the newest entry (not ours)
    cmpb $0, instrfn_enabled(%rip)
    je .Lr_out
    movq {SH_SLOT}(%rdi), %rsi              # its slot (0: being pushed; 1: a tombstone)
    cmpq %rdx, %rsi
    jbe .Lr_slow                            # at or below ours: frames to close
    cmpq %fs:{TLS_STACK_LO}(%rcx), %rdx
    jb .Lr_slow                             # ours is not on the thread's own stack
    cmpq %fs:{TLS_STACK_HI}(%rcx), %rsi
    jae .Lr_slow                            # the newest is not (or the bounds are not known)
    cmpq %fs:{TLS_ALT_HI}(%rcx), %rdx
    jae .Lr_out                             # the alternate signal stack lies below both
    cmpq %fs:{TLS_ALT_LO}(%rcx), %rsi
    jb .Lr_out                              # or above both
.Lr_slow:
    leaq instrfn_return_slow(%rip), %rcx
    movq -48(%rsp), %rax
    movq %rcx, -8(%rsp)
    xorl %ecx, %ecx                         # (no function)
    leaq 9(%rsp), %rdx                      # the return slot | 1 (exit)
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    jmp instrfn_x86_64_slow
    .cfi_endproc
    .size instrfn_x86_64_return, .-instrfn_x86_64_return
