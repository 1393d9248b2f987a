# instrfn XRay trampolines for x86_64 Linux (System V ABI), AT&T syntax: where patched XRay
# sleds lead (src/xray.rs patches them; asm/x86_64.s is the annotated reference for the event
# and shadow stack protocol, which these follow exactly). Assembled as its own global_asm!
# block by src/arch/x86_64.rs with the same operands as asm/x86_64.s; of the gmon layout
# ({TLS_TABLE}, {TBL_MASK}, {TBL_LEN}, {TBL_LIMIT}, {TBL_SHIFT}, {TBL_LAST}, {TBL_LOST},
# {SLOT_SELF}, {SLOT_FROM}, {SLOT_COUNT}, {SLOT_SIZE}, {SLOT_SHIFT}, {HASH_MUL}) nothing is used
# here: XRay sleds are patched in trace mode only.
#
# A patched sled (compiler-rt's form):
#   entry, tail call:  mov $id, %r10d ; call <stub>     exit:  mov $id, %r10d ; jmp <stub>
# where <stub>, on a page within rel32 reach of the object's code, is
#   movabs $table, %r11 ; jmp *<trampoline>
# and table is the object's id -> function address array (8 bytes each, index = id; bit 63:
# the function has no entry sled, bit 62: no exit sled). So every trampoline starts with %r10 = id, %r11 = table.
#
# Registers: every register is preserved but r10 and r11 (the sled and the stub set them; the
# ABI makes neither an argument nor a result register, and compiler-rt's trampolines clobber
# them too) and the flags (no sled is at a place where they are live). The fast paths use rax,
# rcx, rdx, rsi and rdi as scratch, saved in the red zone at -8 .. -40(%rsp) (-48: the shadow
# entry), exactly as FAST_PATH does: at an entry sled the function has not used its own red
# zone yet, at an exit or tail sled it has no more use for it, and the kernel never writes
# signal frames into it. Everything else (vector, x87 and AVX state included) is untouched by
# the fast paths and saved whole by instrfn_x86_64_slow, which every slow path goes through:
# entry: the argument registers (rdi, rsi, rdx, rcx, r8, r9, xmm0-7 and their upper halves)
# and rax (the vector-register count of a variadic call); exit: rax, rdx, xmm0, xmm1 and the
# x87 stack; tail call: the argument registers of the call that follows.
#
# The guard is checked first (a runtime that was itself compiled with -Zinstrument-xray runs
# its own code with it held: its sleds return at once), then recording (instrfn_enabled) and
# the mode (0: tracing could not start after all). With recording off the trampolines return
# at once, except that an exit still pops its frame's shadow entry.
#
# Slow path handover, as in FAST_PATH: -8(%rsp) = instrfn_xray_slow, rcx = the table entry,
# rdx = the return slot | kind (0 entry, 1 exit, 2 tail), the caller's rcx/rdx in the red zone,
# then jmp instrfn_x86_64_slow, which calls instrfn_xray_slow(&Tls, slot | kind, entry) with
# everything saved and returns where the trampoline would have (into the sled, or for an exit
# to the function's caller).

    .text

# instrfn_x86_64_xray_entry: called by a patched entry sled, the function's first instruction.
#   (%rsp) = the return address into the sled; 8(%rsp) = the function's return slot, whose
#   address identifies the frame (the shadow entry's slot; its ret is 0: nothing is replaced).
#   Records an entry event of table[id] and pushes a shadow entry; with exits off (mode 2), or
#   for a function without exit sled (bit 62 of its table entry), an entry without exit
#   instead (the event's value drops the flag bits: value << 4).
    .p2align 4
    .globl instrfn_x86_64_xray_entry
    .hidden instrfn_x86_64_xray_entry
    .type instrfn_x86_64_xray_entry,@function
instrfn_x86_64_xray_entry:
    .cfi_startproc
    movq %rax, -8(%rsp)
    movq %rcx, -16(%rsp)
    movq %rdx, -24(%rsp)
    movq %rsi, -32(%rsp)
    movq %rdi, -40(%rsp)
    movq instrfn_tls@gottpoff(%rip), %rax   # offset of Tls from the thread pointer
    cmpq $0, %fs:{TLS_GUARD}(%rax)          # guard held: runtime code is running here
    jne .Lxe_out
    cmpb $0, instrfn_enabled(%rip)
    je .Lxe_out
    movzbl instrfn_mode(%rip), %ecx
    testl %ecx, %ecx
    jz .Lxe_out
    movq (%r11,%r10,8), %rsi                # the function's address (| bit 62)
    cmpl $2, %ecx
    je .Lxe_noexit
    btq $62, %rsi                           # no exit sled: an entry without exit
    jc .Lxe_noexit
    cmpq $0, %fs:{TLS_UNWOUND}(%rax)
    jne .Lxe_slow
    leaq 8(%rsp), %rdi                      # the return slot
    movq %fs:{TLS_SHADOW_TOP}(%rax), %rcx
    cmpq %fs:{TLS_SHADOW_BASE}(%rax), %rcx
    je 1f
    cmpq %rdi, {SH_SLOT}-{SH_BYTES}(%rcx)   # the newest entry's frame at or below ours is gone
    jbe .Lxe_slow                           # (longjmp), or being pushed (slot 0)
1:  movq %rax, %rcx                         # rcx = Tls offset from here on
    movq ${SH_BYTES}, %rdi
    xaddq %rdi, %fs:{TLS_SHADOW_TOP}(%rcx)  # rdi = our shadow entry (its slot is 0)
    leaq {SH_BYTES}(%rdi), %rax
    cmpq %fs:{TLS_SHADOW_END}(%rcx), %rax
    ja .Lxe_unpush                          # full (or no shadow stack yet): the slow path
    movq %rdi, -48(%rsp)
    rdtsc
    shlq $32, %rdx
    orq %rax, %rdx                          # rdx = timestamp
2:  movq %fs:{TLS_TRACE_POS}(%rcx), %rax    # our event, if there is room
    leaq 16(%rax), %rdi
    cmpq %fs:{TLS_TRACE_END}(%rcx), %rdi
    ja .Lxe_unpush                          # past the chunk's end (or no chunk): slow path
    cmpxchgq %rdi, %fs:{TLS_TRACE_POS}(%rcx) # claimed, unless a handler moved it: again
    jne 2b
    movq %rdx, (%rax)                       # timestamp, then the word that marks it written
    movq %rsi, %rdx
    shlq ${EV_SHIFT}, %rdx
    orq ${EV_ENTRY}, %rdx
    movq %rdx, 8(%rax)
    movq -48(%rsp), %rax                    # the shadow entry: function, ret 0, slot last
    movq %rsi, {SH_FN}(%rax)
    movq $0, {SH_RET}(%rax)
    leaq 8(%rsp), %rdi
    movq %rdi, {SH_SLOT}(%rax)
.Lxe_out:
    movq -8(%rsp), %rax
    movq -16(%rsp), %rcx
    movq -24(%rsp), %rdx
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    ret
.Lxe_noexit:
    # INSTRFN_EXITS=off (exit sleds are not patched then), or no exit sled: an entry without
    # exit.
    movq %rax, %rcx
    rdtsc
    shlq $32, %rdx
    orq %rax, %rdx
3:  movq %fs:{TLS_TRACE_POS}(%rcx), %rax
    leaq 16(%rax), %rdi
    cmpq %fs:{TLS_TRACE_END}(%rcx), %rdi
    ja .Lxe_slow
    cmpxchgq %rdi, %fs:{TLS_TRACE_POS}(%rcx)
    jne 3b
    movq %rdx, (%rax)
    movq %rsi, %rdx
    shlq ${EV_SHIFT}, %rdx
    orq ${EV_NOEXIT}, %rdx
    movq %rdx, 8(%rax)
    jmp .Lxe_out
.Lxe_unpush:
    subq ${SH_BYTES}, %fs:{TLS_SHADOW_TOP}(%rcx) # give the shadow entry back (slot still 0)
.Lxe_slow:
    leaq instrfn_xray_slow(%rip), %rcx
    movq -8(%rsp), %rax
    movq %rcx, -8(%rsp)
    movq %rsi, %rcx                         # the table entry
    leaq 8(%rsp), %rdx                      # the return slot | 0 (entry)
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    jmp instrfn_x86_64_slow
    .cfi_endproc
    .size instrfn_x86_64_xray_entry, .-instrfn_x86_64_xray_entry

# XRAY_EXIT name, off, kind: the exit trampoline (jumped to by a patched exit sled in place of
#   the function's `ret`: (%rsp) = the function's return address, so its return slot is
#   0(%rsp) and our `ret` is the function's) and the tail-call trampoline (called by a patched
#   tail sled before the function's tail jump: its return slot is 8(%rsp), our `ret` goes
#   back into the sled, then the jump). Writes the exit event of the newest shadow entry if it
#   is this frame's, then pops it (slot zeroed: free), as instrfn_x86_64_exit does. Anything
#   else goes to the slow path: frames above this one to close, no entry for this frame (a
#   function without entry sled records its exit alone there), an unwinder ran, no room. A
#   function without entry sled (bit 63 of its table entry) that finds no entry of its own on
#   top writes its exit here, without popping.
    .macro XRAY_EXIT name, off, kind
    .p2align 4
    .globl instrfn_x86_64_xray_\name
    .hidden instrfn_x86_64_xray_\name
    .type instrfn_x86_64_xray_\name,@function
instrfn_x86_64_xray_\name:
    .cfi_startproc
    movq %rax, -8(%rsp)
    movq %rcx, -16(%rsp)
    movq %rdx, -24(%rsp)
    movq %rsi, -32(%rsp)
    movq %rdi, -40(%rsp)
    movq instrfn_tls@gottpoff(%rip), %rcx
    cmpq $0, %fs:{TLS_GUARD}(%rcx)
    jne .Lx_out_\name
    cmpb $0, instrfn_mode(%rip)
    je .Lx_out_\name
    movq (%r11,%r10,8), %rsi                # the function's address (| bit 63)
    cmpq $0, %fs:{TLS_UNWOUND}(%rcx)
    jne .Lx_slow_\name
    leaq \off(%rsp), %rdx                   # the return slot
    movq %fs:{TLS_SHADOW_TOP}(%rcx), %rdi
    cmpq %fs:{TLS_SHADOW_BASE}(%rcx), %rdi
    je .Lx_none_\name
    subq ${SH_BYTES}, %rdi                  # the newest entry
    cmpq %rdx, {SH_SLOT}(%rdi)
    jne .Lx_none_\name
    cmpb $0, instrfn_enabled(%rip)
    je .Lx_pop_\name
    rdtsc
    shlq $32, %rdx
    orq %rax, %rdx                          # timestamp
1:  movq %fs:{TLS_TRACE_POS}(%rcx), %rax
    leaq 16(%rax), %rsi
    cmpq %fs:{TLS_TRACE_END}(%rcx), %rsi
    ja .Lx_reload_\name                   # no room: the slow path does it all
    cmpxchgq %rsi, %fs:{TLS_TRACE_POS}(%rcx)
    jne 1b
    movq %rdx, (%rax)
    movq {SH_FN}(%rdi), %rsi                # the function that returns
    shlq ${EV_SHIFT}, %rsi
    orq ${EV_EXIT}, %rsi
    movq %rsi, 8(%rax)
.Lx_pop_\name:
    movq $0, {SH_SLOT}(%rdi)                # free entries have slot 0
    movq %rdi, %fs:{TLS_SHADOW_TOP}(%rcx)   # popped
.Lx_out_\name:
    movq -8(%rsp), %rax
    movq -16(%rsp), %rcx
    movq -24(%rsp), %rdx
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    ret
.Lx_none_\name:
    # No entry of this frame on top. A function without entry sled: its exit, alone.
    btq $63, %rsi
    jnc .Lx_slow_\name
    cmpb $0, instrfn_enabled(%rip)
    je .Lx_out_\name
    rdtsc
    shlq $32, %rdx
    orq %rax, %rdx
2:  movq %fs:{TLS_TRACE_POS}(%rcx), %rax
    leaq 16(%rax), %rdi
    cmpq %fs:{TLS_TRACE_END}(%rcx), %rdi
    ja .Lx_slow_\name
    cmpxchgq %rdi, %fs:{TLS_TRACE_POS}(%rcx)
    jne 2b
    movq %rdx, (%rax)
    shlq ${EV_SHIFT}, %rsi                  # (bit 63 shifted out)
    orq ${EV_EXIT}, %rsi
    movq %rsi, 8(%rax)
    jmp .Lx_out_\name
.Lx_reload_\name:
    movq (%r11,%r10,8), %rsi
.Lx_slow_\name:
    leaq instrfn_xray_slow(%rip), %rcx
    movq -8(%rsp), %rax
    movq %rcx, -8(%rsp)
    movq %rsi, %rcx                         # the table entry
    leaq \off(%rsp), %rdx
    orq $\kind, %rdx                        # the return slot | kind
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    jmp instrfn_x86_64_slow
    .cfi_endproc
    .size instrfn_x86_64_xray_\name, .-instrfn_x86_64_xray_\name
    .endm

    XRAY_EXIT exit, 0, 1
    XRAY_EXIT tail, 8, 2
