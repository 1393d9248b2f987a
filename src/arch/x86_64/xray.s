# instrfn XRay trampolines for x86_64 Linux (System V ABI), AT&T syntax: where patched XRay
# sleds lead (src/xray/ patches them; src/arch/x86_64/ is the annotated reference for the event
# and shadow stack protocol, which these follow exactly), and the C-ABI entries that
# instrfn-xray's compiler-rt handler continues in. Assembled by src/arch/x86_64/mod.rs in one
# global_asm! block after src/arch/x86_64/, whose operands (its header lists them) and trace macros
# this file uses: SCRATCH_SAVE/SCRATCH_RESTORE (the red zone), TIMESTAMP and TRACE_EVENT
# (events), SHADOW_RESERVE, SHADOW_RELEASE and SHADOW_POP (shadow entries). Of the
# gmon layout nothing is used here: XRay sleds are patched in trace mode only.
#
# A sled as LLVM emits it, and as instrfn patches it (11 bytes; w = (id << 8) | 9):
#   entry, tail call:  eb 09 <9 bytes of nop>   ->  a9 <w:4> e8 <rel32> 90
#                      jmp +9                       test $w, %eax ; call <stub> ; nop
#   exit:              c3 <10 bytes of nop>     ->  e8 <rel32> c3 <id:4> 90
#                      ret                          call <stub> ; ret ; (data)
# Patching writes everything but byte 0 first (bytes 2..10 of an entry or tail sled, whose
# `jmp +9` skips them; bytes 1..10 of an exit sled, after its `ret`), then byte 0 alone (eb ->
# a9, c3 -> e8); unpatching writes byte 0 back alone. A one-byte store is atomic whatever copies
# it (the kernel's memcpy behind /proc/self/mem included), so a thread that runs through a sled
# meanwhile executes either the old instruction at byte 0 or the new one, never a mix. (The
# test immediate's low byte is 09, so byte 1 of an entry sled is the same in both forms.) A
# thread preempted after the `test` when the sled is put back resumes at the `call`, which is
# left in place: it reaches a trampoline as always.
#
# The trampolines find the id from their return address: 9 bytes before it, in the test's
# immediate (entry, tail: shifted right by 8), or 1 byte after it, behind the sled's `ret`
# (exit); ids up to 2^24 - 1 (crate::xray refuses objects with more functions). They return
# with a plain `ret` into the sled, so every call is matched by its return (the CPU's
# return-address predictor stays right), and at an exit the sled's own `ret` then leaves the
# function. No form moves %rsp before its call: at every instruction boundary of a patched
# sled the function's own unwind information is still true, so an unwinder started by a
# signal handler that lands there (a sampling profiler's backtrace) reads the real return
# address (tests/fixtures/c/sweep.c checks it).
# <stub>, on a page within rel32 reach of the object's code, is
#   movabs $table, %r11 ; jmp *<trampoline>
# and table is the object's id -> function address array (8 bytes each, index = id; bit 63:
# the function has no entry sled, bit 62: no exit sled).
#
# The stack at a sled: at an entry sled (the function's first instruction) nothing is live
# below %rsp (the caller's red zone does not survive its call); at an exit sled (in place of the
# `ret`) and at a tail sled (before the tail jump) the function's frame is gone and %rsp points
# at its return address. The call writes its return address where compiler-rt's form (`mov
# $id, %r10d; call`) writes its own. So in every sled trampoline (%rsp) = the return address
# into the sled and 8(%rsp) = the function's return slot; they return with `ret`, and the
# function (or its tail callee, or at an exit its caller) goes on with %rsp exactly as the
# sled had it.
#
# Registers: every register is preserved but r11 (the stub sets it; the ABI makes it neither an
# argument nor a result register) and the flags (no sled is at a place where they are live; DF
# is never set). r10 is preserved (compiler-rt's form clobbers it; tests/xray.rs checks it). The
# fast paths use rax, rcx, rdx, rsi and rdi as scratch, saved in the red zone below the
# trampoline's own %rsp (-8 .. -56: see each routine), as FAST_PATH does: at an entry sled the
# function has not used its own red zone yet, at an exit or tail sled it has no more use for
# it, and the kernel never writes signal frames into it. Everything else (vector, x87 and AVX
# state included) is untouched by the fast paths and saved whole by instrfn_x86_64_slow, which
# every slow path goes through: entry: the argument
# registers (rdi, rsi, rdx, rcx, r8, r9, xmm0-7 and their upper halves) and rax (the
# vector-register count of a variadic call); exit: rax, rdx, xmm0, xmm1 and the x87 stack;
# tail call: the argument registers of the call that follows.
#
# The guard is checked first (a runtime that was itself compiled with -Zinstrument-xray runs
# its own code with it held: its sleds return at once), then recording (instrfn_enabled) and
# the mode (0: tracing could not start after all). With recording off (instrfn_stop() with
# INSTRFN_XRAY_STOP=pause, or INSTRFN_START=off: the sleds stay patched) an entry returns at
# once; an exit whose frame has the newest shadow entry (entered while recording) still writes
# its exit and pops it, so a call that straddles a stop ends in the trace as it began; any other
# exit returns at once.
#
# Slow path handover, as in FAST_PATH: -8(%rsp) = instrfn_xray_slow, rcx = the table entry,
# rdx = the return slot | kind (0 entry, 1 exit, 2 tail), the caller's rcx/rdx at -16/-24(%rsp),
# then jmp instrfn_x86_64_slow, which calls instrfn_xray_slow(&Tls, slot | kind, entry) with
# everything saved and returns where the trampoline would have: into the sled.
#
# The C-ABI entries (for instrfn-xray's handler of compiler-rt's trampolines, which pass no
# sled state: `via call` below):
#   void instrfn_xray_handler_entry(uintptr_t entry, uintptr_t frame)
#   void instrfn_xray_handler_exit(uintptr_t entry, uintptr_t frame)
# entry = the function's address (bits 63 and 62 as in a table entry); frame = its return slot
# (its %rsp at its entry sled; at an exit or tail sled, the address of its return address).
# They record exactly as the sled trampolines do (shadow entries, unwinding closed at the catch
# or the next event by instrfn_xray_slow) and preserve every register but the flags; they use 56
# bytes of red zone below the stack pointer they are entered with (called or jumped to).

    .text

# XFN via: %rsi = the function's table entry (clobbers nothing else).
#   sled: the test immediate 9 bytes before the return address, its 09 shifted out; exit: the
#   id 1 byte after it; call: the first argument, saved at -40(%rsp).
    .macro XFN via
    .ifc \via,call
    movq -40(%rsp), %rsi
    .else
    movq (%rsp), %rsi
    .ifc \via,exit
    movl 1(%rsi), %esi
    .else
    movl -9(%rsi), %esi
    shrl $8, %esi
    .endif
    movq (%r11,%rsi,8), %rsi
    .endif
    .endm

# XSLOT via, reg: reg = the function's return slot (the frame's identity).
    .macro XSLOT via, reg
    .ifc \via,call
    movq -56(%rsp), \reg
    .else
    leaq 8(%rsp), \reg
    .endif
    .endm

# XRET via: back where the trampoline was called from (a sled, or the C caller).
    .macro XRET via
    ret
    .endm

# XPROLOGUE via, at: a trampoline's first step: the scratch registers into the red zone
#   (SCRATCH_SAVE at); via call, the frame (%rsi) at -56(%rsp). Clobbers nothing. (The unwind
#   rule is the default one of a called routine: its return address, into the sled, at the CFA
#   - 8, where the function's own rule holds.)
    .macro XPROLOGUE via, at
    SCRATCH_SAVE \at
    .ifc \via,call
    movq %rsi, -56(%rsp)
    .endif
    .endm

# XSLOW via: the slow routine, which returns as XRET does.
    .macro XSLOW via
    jmp instrfn_x86_64_slow
    .endm

# XRAY_ENTRY name, via: records an entry event of the function and pushes a shadow entry (its
#   slot: the frame's return slot; its ret 0: nothing is replaced); with exits off (mode 2), or
#   for a function without exit sled (bit 62 of its table entry), an entry without exit
#   instead (the event's value drops the flag bits: value << 4).
#   via sled: instrfn_x86_64_xray_entry, called by a patched entry sled (the function's first
#     instruction) through its stub: (%rsp) = the return address into the sled, 8(%rsp) = the
#     function's return slot; %r11 = the table.
#   via call: instrfn_xray_handler_entry(entry = %rdi, frame = %rsi).
#   Red zone: -8 rax, -16 rcx, -24 rdx, -32 rsi, -40 rdi, -48 the shadow entry being pushed,
#   -56 the frame (via call).
    .macro XRAY_ENTRY name, via
    .p2align 4
    .globl \name
    .hidden \name
    .type \name,@function
\name:
    .cfi_startproc
    XPROLOGUE \via, -8
    movq instrfn_tls@gottpoff(%rip), %rax   # offset of Tls from the thread pointer
    cmpq $0, %fs:{TLS_GUARD}(%rax)          # guard held: runtime code is running here
    jne .Lxe_out_\name
    cmpb $0, instrfn_enabled(%rip)
    je .Lxe_out_\name
    movzbl instrfn_mode(%rip), %ecx
    testl %ecx, %ecx
    jz .Lxe_out_\name
    XFN \via                                # rsi = the function's address (| bit 62)
    cmpl $2, %ecx
    je .Lxe_noexit_\name
    btq $62, %rsi                           # no exit sled: an entry without exit
    jc .Lxe_noexit_\name
    cmpq $0, %fs:{TLS_UNWOUND}(%rax)
    jne .Lxe_slow_\name
    XSLOT \via, %rdi                        # the return slot
    # our shadow entry (the newest one's frame at or below ours: slow path; full, or no shadow
    # stack yet: given back, slow path)
    SHADOW_RESERVE .Lxe_slow_\name, .Lxe_unpush_\name
    movq %rdi, -48(%rsp)
    TIMESTAMP
    # our event (past the chunk's end, or no chunk: the entry given back, slow path)
    TRACE_EVENT 2, %rdi, .Lxe_unpush_\name, %rsi, entry
    movq -48(%rsp), %rax                    # the shadow entry: function, ret 0, slot last
    movq %rsi, {SH_FN}(%rax)
    movq $0, {SH_RET}(%rax)
    XSLOT \via, %rdi
    movq %rdi, {SH_SLOT}(%rax)
.Lxe_out_\name:
    SCRATCH_RESTORE -8
    XRET \via
.Lxe_noexit_\name:
    # INSTRFN_EXITS=off (exit sleds are not patched then), or no exit sled: an entry without
    # exit.
    movq %rax, %rcx                         # rcx = Tls offset from here on
    TIMESTAMP
    TRACE_EVENT 3, %rdi, .Lxe_slow_\name, %rsi, noexit
    jmp .Lxe_out_\name
.Lxe_unpush_\name:
    SHADOW_RELEASE
.Lxe_slow_\name:
    # rsi = the table entry
    leaq instrfn_xray_slow(%rip), %rcx
    movq -8(%rsp), %rax
    movq %rcx, -8(%rsp)
    movq %rsi, %rcx                         # the table entry
    XSLOT \via, %rdx                        # the return slot | 0 (entry)
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    XSLOW \via
    .cfi_endproc
    .size \name, .-\name
    .endm

# XRAY_EXIT name, via, kind: the exit trampoline (via exit: called by a patched exit sled in
#   place of the function's `ret`; our `ret` goes back into the sled, whose `ret` is the
#   function's), the tail-call trampoline (via sled, kind 2: called by a patched tail sled
#   before the function's tail jump; our `ret` goes back into the sled, then the jump) and instrfn_xray_handler_exit(entry = %rdi, frame = %rsi) (via call).
#   Writes the exit event of the newest shadow entry if it is this frame's, then pops it (slot
#   zeroed: free), as instrfn_x86_64_exit does. Anything else goes to the slow path: frames
#   above this one to close, no entry for this frame (a function without entry sled records
#   its exit alone there), an unwinder ran, no room. A function without entry sled (bit 63 of
#   its table entry) that finds no entry of its own on top writes its exit here, without
#   popping; with recording off, such exits (and any exit without its entry on top) return at
#   once.
#   Red zone: -8 the Rust function at the slow handover, -16 rcx,
#   -24 rdx, -32 rsi, -40 rdi, -48 rax, -56 the frame (via call), -64 .. -88 r8-r11 while a
#   call word is made (MERGE_CALL).
    .macro XRAY_EXIT name, via, kind
    .p2align 4
    .globl \name
    .hidden \name
    .type \name,@function
\name:
    .cfi_startproc
    XPROLOGUE \via, -48
    movq instrfn_tls@gottpoff(%rip), %rcx
    cmpq $0, %fs:{TLS_GUARD}(%rcx)
    jne .Lx_out_\name
    cmpb $0, instrfn_mode(%rip)
    je .Lx_out_\name
    XFN \via                                # rsi = the function's address (| bit 63)
    cmpq $0, %fs:{TLS_UNWOUND}(%rcx)
    jne .Lx_slow_\name
    XSLOT \via, %rdx                        # the return slot
    movq %fs:{TLS_SHADOW_TOP}(%rcx), %rdi
    cmpq %fs:{TLS_SHADOW_BASE}(%rcx), %rdi
    je .Lx_none_\name
    subq ${SH_BYTES}, %rdi                  # the newest entry
    cmpq %rdx, {SH_SLOT}(%rdi)
    jne .Lx_none_\name
    # Ours: its entry was recorded, so its exit is, recording on or off: the event of the
    # function that returns (no room: the slow path does it all), then the entry popped.
    # (A call word where the call recorded nothing inside it: r8-r11 kept below the red
    # zone's words above meanwhile.)
    TIMESTAMP
    MERGE_CALL {SH_FN}(%rdi), -64, .Lx_pop_\name
    TRACE_EVENT 1, %rsi, .Lx_reload_\name, {SH_FN}(%rdi), exit
.Lx_pop_\name:
    SHADOW_POP %rdi
.Lx_out_\name:
    SCRATCH_RESTORE -48
    XRET \via
.Lx_none_\name:
    # No entry of this frame on top. Recording off: nothing to do. A function without entry
    # sled: its exit, alone.
    cmpb $0, instrfn_enabled(%rip)
    je .Lx_out_\name
    btrq $63, %rsi                          # (cleared for the event's word)
    jnc .Lx_slow_\name
    TIMESTAMP
    TRACE_EVENT 2, %rdi, .Lx_full_\name, %rsi, exit
    jmp .Lx_out_\name
.Lx_full_\name:
    btsq $63, %rsi                          # the table entry again, for the slow path
    jmp .Lx_slow_\name
.Lx_reload_\name:
    XFN \via
.Lx_slow_\name:
    # rsi = the table entry
    leaq instrfn_xray_slow(%rip), %rcx
    movq -48(%rsp), %rax
    movq %rcx, -8(%rsp)
    movq %rsi, %rcx                         # the table entry
    XSLOT \via, %rdx
    orq $\kind, %rdx                        # the return slot | kind
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    XSLOW \via
    .cfi_endproc
    .size \name, .-\name
    .endm

    XRAY_ENTRY instrfn_x86_64_xray_entry, sled
    XRAY_EXIT instrfn_x86_64_xray_exit, exit, 1
    XRAY_EXIT instrfn_x86_64_xray_tail, sled, 2
    XRAY_ENTRY instrfn_xray_handler_entry, call
    XRAY_EXIT instrfn_xray_handler_exit, call, 1

