# instrfn trampolines for x86_64 Linux (System V ABI), AT&T syntax.
#
# This is the annotated reference: the other architectures follow the same plan and their files
# only document how they differ. The file is assembled as one `global_asm!` block by
# src/arch/x86_64/mod.rs, followed by src/arch/x86_64/xray.s (the XRay trampolines, which use this
# file's operands and its trace macros: SCRATCH_SAVE, SCRATCH_RESTORE, TIMESTAMP,
# TRACE_EVENT, SHADOW_RESERVE, SHADOW_RELEASE, SHADOW_POP); the exported names (mcount, _mcount,
# __fentry__, the gcrt entry points and the C API) are naked Rust functions there that jump
# into the routines below, because a cdylib exports only symbols that rustc itself defines.
#
# Plan of every counting call
#   fast path  (this file, no stack frame): the guard is clear and the arc (from_pc, self_pc) is
#              already in this thread's table: add one to its count and return. A new arc is
#              inserted here too while the table is less than half full. Touches only the red
#              zone, this thread's TLS and this thread's table.
#   slow path  (instrfn_x86_64_slow): the thread has no table yet, the table must grow, or
#              the runtime is not initialised. Saves every register the instrumented code may still
#              use (GPRs and the whole XSAVE state, so AVX upper halves survive vzeroupper in
#              libc), blocks all signals, sets the guard and calls the Rust
#              `instrfn_slow_path(tls, from_pc, self_pc)`.
#
# Shared layouts: the `{{NAME}}` operands are Rust constants (src/arch/mod.rs, trampoline_asm!),
# defined once with src/thread.rs `Tls` and src/tables/arcs.rs `ArcTable`/`Slot`:
#   Tls, one per thread in .tbss (initial-exec TLS, reached through %fs):
#      {TLS_TABLE}  table   current ArcTable of this thread, 0 until the slow path gives it one
#      {TLS_GUARD}  guard   nonzero while runtime code runs on this thread: counting calls
#                           return at once
#   ArcTable header, then capacity slots of {SLOT_SIZE} bytes (self_pc, from_pc, count, unused):
#      {TBL_MASK}   mask    (capacity - 1) * {SLOT_SIZE}: a byte-offset mask over the slots
#      {TBL_LEN}   len     occupied slots
#      {TBL_LIMIT}   limit   the fast path inserts only while len < limit
#      {TBL_SHIFT}   shift   64 - log2(capacity), one byte
#      {TBL_LAST}   last    one byte, nonzero: the table never grows; a call of an arc that
#                           does not fit is counted in `lost` here, not in the slow path
#      {TBL_LOST}   lost
#   Slot fields are addressed from the table base plus the slot's byte offset: self_pc at
#   {SLOT_SELF}, from_pc at {SLOT_FROM}, count at {SLOT_COUNT}; a slot whose self_pc is 0 is empty.
#   Slot byte offset = (((from_pc ^ (self_pc rotl 32)) * {HASH_MUL}) >> shift) * {SLOT_SIZE},
#   then linear probing in steps of {SLOT_SIZE} bytes (src/tables/arcs.rs `hash`).

    # Shared data (instrfn_tls, instrfn_enabled, instrfn_all_signals) is in src/abi/data.s.

    .data
    # XSAVE parameters, found on first use by instrfn_x86_64_xsave_detect: the component mask
    # (0 = no XSAVE, use FXSAVE) and the area size (0 = not yet known). The mask is stored
    # before the size, so a thread that sees a size also sees its mask (x86 stores are ordered).
    .p2align 3
    .globl instrfn_x86_64_xsave_mask
    .hidden instrfn_x86_64_xsave_mask
instrfn_x86_64_xsave_mask:
    .quad 0
    .globl instrfn_x86_64_xsave_size
    .hidden instrfn_x86_64_xsave_size
instrfn_x86_64_xsave_size:
    .quad 0

    .text

# BLOCK_SIGNALS: rt_sigprocmask(SIG_BLOCK, all, old = (%rsp), 8).
# RESTORE_SIGNALS: rt_sigprocmask(SIG_SETMASK, (%rsp), NULL, 8).
#   Raw system calls (no libc, errno untouched); clobber rax, rcx, rdx, rsi, rdi, r10, r11.
    .macro BLOCK_SIGNALS
    movl $14, %eax
    xorl %edi, %edi
    leaq instrfn_all_signals(%rip), %rsi
    movq %rsp, %rdx
    movl $8, %r10d
    syscall
    .endm
    .macro RESTORE_SIGNALS
    movl $14, %eax
    movl $2, %edi
    movq %rsp, %rsi
    xorl %edx, %edx
    movl $8, %r10d
    syscall
    .endm

# SAVE_EXTENDED: saves the extended state (x87, SSE, AVX, AVX-512) in a 64-byte aligned area
#   below %rsp, which it moves down (the caller restores %rsp from its frame pointer). Clobbers
#   rax, rcx, rdx (saved by the caller).
# RESTORE_EXTENDED: restores it from (%rsp). Clobbers rax, rdx.
    .macro SAVE_EXTENDED
    movq instrfn_x86_64_xsave_size(%rip), %rax
    testq %rax, %rax
    jnz 1f
    call instrfn_x86_64_xsave_detect
    movq instrfn_x86_64_xsave_size(%rip), %rax
1:  andq $-64, %rsp
    subq %rax, %rsp
    movq instrfn_x86_64_xsave_mask(%rip), %rax
    testq %rax, %rax
    jz 2f
    xorl %ecx, %ecx                  # XSAVE leaves header bits outside the mask as they were,
    movq %rcx, 512(%rsp)             # and XRSTOR faults on stray ones: zero the whole header
    movq %rcx, 520(%rsp)
    movq %rcx, 528(%rsp)
    movq %rcx, 536(%rsp)
    movq %rcx, 544(%rsp)
    movq %rcx, 552(%rsp)
    movq %rcx, 560(%rsp)
    movq %rcx, 568(%rsp)
    movq %rax, %rdx
    shrq $32, %rdx
    xsave64 (%rsp)
    jmp 3f
2:  fxsave64 (%rsp)
3:
    .endm
    .macro RESTORE_EXTENDED
    movq instrfn_x86_64_xsave_mask(%rip), %rax
    testq %rax, %rax
    jz 4f
    movq %rax, %rdx
    shrq $32, %rdx
    xrstor64 (%rsp)
    jmp 5f
4:  fxrstor64 (%rsp)
5:
    .endm
