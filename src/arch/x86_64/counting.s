# instrfn trampolines for x86_64, counting calls: the fast path of every entry point (mcount,
# _mcount, __fentry__, __cyg_profile_func_enter/exit) in gmon and trace mode, and the slow path
# they fall back to.

# FAST_PATH name, self, from, trace
#   Entry: \self is the operand holding self_pc (the callee), \from the one holding from_pc
#   (the caller). mcount and __fentry__: (%rsp) = self_pc, the return address into the
#   instrumented function, and from_pc is that function's own return address, in its return
#   slot \from. __cyg_profile_func_enter/exit(this_fn, call_site): %rdi, %rsi.
#   \trace says what trace mode records: `hijack` (an entry event, and the return slot \from
#   replaced by instrfn_x86_64_exit so that the return is seen too), `enter` / `exit` (an entry
#   or exit event of self_pc, nothing replaced); `exit` counts nothing in gmon mode.
#   Registers: every register is preserved. rax, rcx, rdx, rsi and rdi are used as scratch and
#   saved in the red zone at -8 .. -40(%rsp) (SCRATCH_SAVE -8); flags are clobbered (a call
#   may clobber them).
#   In the gmon body: rax = table, rsi = self_pc, rdx = from_pc, rdi = slot byte offset.
#   The stack is never adjusted, so the CFA is %rsp+8 throughout and no CFI rows are needed
#   beyond the default.
    .macro FAST_PATH name, self, from, trace
    .p2align 4
    .globl instrfn_x86_64_\name
    .hidden instrfn_x86_64_\name
    .type instrfn_x86_64_\name,@function
instrfn_x86_64_\name:
    .cfi_startproc
    SCRATCH_SAVE -8
    movq instrfn_tls@gottpoff(%rip), %rax   # offset of Tls from the thread pointer
    movq \from, %rdx                        # from_pc
    movq \self, %rsi                        # self_pc
    cmpq $0, %fs:{TLS_GUARD}(%rax)             # guard held: runtime code is running here
    jne .Lout_\name
    cmpb $0, instrfn_enabled(%rip)
    je .Lout_\name
    cmpb $0, instrfn_mode(%rip)
    jne .Ltrace_\name
    .ifc \trace,exit
    jmp .Lout_\name
    .endif
    movq %fs:{TLS_TABLE}(%rax), %rax             # this thread's ArcTable
    testq %rax, %rax
    jz .Lslow_\name
    movq %rsi, %rdi                         # slot offset = hash(from_pc, self_pc)
    rolq $32, %rdi
    xorq %rdx, %rdi
    movabsq ${HASH_MUL}, %rcx
    imulq %rcx, %rdi
    movzbl {TBL_SHIFT}(%rax), %ecx
    shrq %cl, %rdi
    shlq ${SLOT_SHIFT}, %rdi                           # * {SLOT_SIZE}
.Lprobe_\name:
    cmpq %rsi, {SLOT_SELF}(%rax,%rdi)            # slot.self_pc
    jne .Lmiss_\name
    cmpq %rdx, {SLOT_FROM}(%rax,%rdi)            # slot.from_pc
    jne .Lnext_\name
    incq {SLOT_COUNT}(%rax,%rdi)                 # slot.count: one instruction, so a signal handler
                                            # that counts on this thread never tears it
.Lout_\name:
    SCRATCH_RESTORE -8
    ret
.Lmiss_\name:
    cmpq $0, {SLOT_SELF}(%rax,%rdi)              # empty slot: the arc is not in the table
    je .Linsert_\name
.Lnext_\name:
    addq ${SLOT_SIZE}, %rdi
    andq {TBL_MASK}(%rax), %rdi
    jmp .Lprobe_\name
.Linsert_\name:
    # A new arc, inserted here while the table holds fewer than `limit` arcs. The slot is
    # claimed with one cmpxchg of its self_pc (a signal handler on this thread may have claimed
    # it meanwhile: then probe it again), then from_pc and the count are stored, in that
    # order, so a reader on another thread that sees a count sees from_pc. cmpxchg compares
    # with rax, so the table moves to rcx here.
    movq {TBL_LEN}(%rax), %rcx
    cmpq {TBL_LIMIT}(%rax), %rcx                # len < limit?
    jae .Lfull_\name
    movq %rax, %rcx                         # rcx = table
    xorl %eax, %eax
    cmpxchgq %rsi, {SLOT_SELF}(%rcx,%rdi)        # claim: self_pc into a slot still 0
    movq %rcx, %rax
    jne .Lprobe_\name                       # raced: probe the same slot again
    movq %rdx, {SLOT_FROM}(%rax,%rdi)            # from_pc
    incq {SLOT_COUNT}(%rax,%rdi)                 # count: 0 -> 1
    incq {TBL_LEN}(%rax)                        # len
    jmp .Lout_\name
.Lfull_\name:
    # The table holds `limit` arcs. The last table of a chain (INSTRFN_MAX_ARCS reached)
    # counts the call as lost right here; any other grows in the slow path.
    cmpb $0, {TBL_LAST}(%rax)
    je .Lslow_\name
    incq {TBL_LOST}(%rax)
    jmp .Lout_\name
.Lslow_\name:
    # hand over to instrfn_x86_64_slow: rcx = self_pc, rdx = from_pc, the caller's rcx/rdx stay
    # in the red zone, -8(%rsp) = the Rust function to call
    leaq instrfn_slow_path(%rip), %rcx
    movq -8(%rsp), %rax
    movq %rcx, -8(%rsp)
    movq %rsi, %rcx
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    jmp instrfn_x86_64_slow

.Ltrace_\name:
    # Trace mode (src/trace/). rax = Tls offset, rsi = self_pc; rcx, rdx, rdi are free.
    # Everything out of the ordinary goes to the slow path, which records the call itself:
    # no chunk yet or a full one, a full shadow stack, frames left behind by longjmp or put
    # back by an unwinder. A signal handler on this thread may run between any two
    # instructions and record events and push shadow entries of its own:
    # - the shadow entry is reserved with one xadd (a handler pushes above it), and its slot
    #   is written last: a free entry's slot is 0, and 0 tells a handler's slow path that the
    #   entry is still being pushed (alive) (SHADOW_RESERVE);
    # - the event is reserved with a cmpxchg of the chunk position against the room checked
    #   just before, retried if a handler moved it (or gave the thread a new chunk) meanwhile:
    #   so an event is never reserved past a chunk's end and never left unwritten
    #   (TRACE_EVENT).
    # The return slot is replaced last.
    .ifc \trace,hijack
    cmpb $2, instrfn_mode(%rip)             # exits off (INSTRFN_EXITS): entries only
    je .Ltnoexit_\name
    .ifc \name,fentry
    ja instrfn_x86_64_fentry_return         # mode 3: code that calls __return__ is loaded
    .globl instrfn_x86_64_fentry_hijack     # (src/arch/x86_64/return.s; it comes back here
    .hidden instrfn_x86_64_fentry_hijack    # for any other code)
instrfn_x86_64_fentry_hijack:
    .endif
    cmpq $0, %fs:{TLS_UNWOUND}(%rax)
    jne .Ltslow_\name
    leaq \from, %rdi                        # the return slot
    SHADOW_RESERVE .Ltslow_\name, .Ltunpush_\name # full: the slow path records an entry only
    movq %rdi, -48(%rsp)                    # (the shadow entry, while rdi holds the end)
    .else
    movq %rax, %rcx                         # rcx = Tls offset from here on
    .endif
    TIMESTAMP
    # the event (past the chunk's end, or no chunk: the slow path); an exit whose call
    # recorded nothing inside it, a call word (r8-r11 kept below the red zone's words above)
    .ifc \trace,exit
    MERGE_CALL %rsi, -56, .Lout_\name
    TRACE_EVENT 2, %rdi, .Ltnochunk_\name, %rsi, exit
    .else
    TRACE_EVENT 2, %rdi, .Ltnochunk_\name, %rsi, entry
    .endif
    .ifc \trace,hijack
    movq -48(%rsp), %rax                    # the shadow entry
    leaq \from, %rdi
    movq %rsi, {SH_FN}(%rax)
    movq (%rdi), %rdx                       # the original return address (= from_pc)
    movq %rdx, {SH_RET}(%rax)
    movq %rdi, {SH_SLOT}(%rax)                   # last: the entry is complete
    leaq instrfn_x86_64_exit(%rip), %rdx
    movq %rdx, (%rdi)                       # the function now returns to the exit trampoline
    .endif
    jmp .Lout_\name
.Ltnochunk_\name:
    .ifc \trace,hijack
    SHADOW_RELEASE
    .endif
    jmp .Ltslow_\name
    .ifc \trace,hijack
.Ltnoexit_\name:
    # An entry without exit: the event alone (kind EV_NOEXIT), nothing replaced.
    movq %rax, %rcx
    TIMESTAMP
    TRACE_EVENT 3, %rdi, .Ltslow_\name, %rsi, noexit
    jmp .Lout_\name
    .endif
.Ltunpush_\name:
    .ifc \trace,hijack
    SHADOW_RELEASE
    .endif
.Ltslow_\name:
    # hand over to instrfn_x86_64_slow as above, calling instrfn_trace_slow(tls, slot, self_pc)
    # (slot 0 for the __cyg_profile entries; 1 marks an exit)
    leaq instrfn_trace_slow(%rip), %rcx
    movq -8(%rsp), %rax
    movq %rcx, -8(%rsp)
    movq %rsi, %rcx
    .ifc \trace,hijack
    leaq \from, %rdx
    .else
    .ifc \trace,exit
    movl $1, %edx
    .else
    xorl %edx, %edx
    .endif
    .endif
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    jmp instrfn_x86_64_slow
    .cfi_endproc
    .size instrfn_x86_64_\name, .-instrfn_x86_64_\name
    .endm

# mcount / _mcount: `call mcount` after the prologue (gcc -pg, rustc -Zinstrument-mcount). The
# frame pointer is set up, so the instrumented function's return address is at 8(%rbp).
    FAST_PATH mcount, (%rsp), 8(%rbp), hijack
# __fentry__: `call __fentry__` is the first instruction (gcc -pg -mfentry), before any prologue,
# so the instrumented function's return address is just above ours.
    FAST_PATH fentry, (%rsp), 8(%rsp), hijack
# __cyg_profile_func_enter(this_fn, call_site) / __cyg_profile_func_exit: gcc and clang
# -finstrument-functions call them as ordinary functions at entry and before each return.
    FAST_PATH cyg_enter, %rdi, %rsi, enter
    FAST_PATH cyg_exit, %rdi, %rsi, exit

# instrfn_x86_64_slow: the slow path of every fast path.
#   Entry (by jmp): (%rsp) = the return address; %rcx and %rdx = the second and third
#   argument of the Rust function at -8(%rsp); the instrumented code's rcx and rdx are at
#   -16(%rsp) and -24(%rsp) (red zone); every other register is the instrumented code's own.
#   Calls fn(&Tls, rdx, rcx): instrfn_slow_path(tls, from_pc, self_pc) in gmon mode,
#   instrfn_trace_slow(tls, slot, self_pc) in trace mode. Returns straight to the instrumented
#   function with all of them restored, errno included (the Rust side saves and restores it).
#   Stack after the saves (CFA = %rbp + 40):
#      CFA-8   return address into the instrumented function
#      CFA-16  the Rust function
#      CFA-24  rcx          CFA-32  rdx          CFA-40  rbp (frame pointer of this routine)
#      CFA-48  rax   -56 rbx   -64 rsi   -72 rdi   -80 r8   -88 r9   -96 r10   -104 r11
#      CFA-112 r12 (self_pc)   -120 r13 (from_pc)
#      below:  XSAVE/FXSAVE area (64-byte aligned), then the old signal mask at (%rsp)
# instrfn_x86_64_slow_pop8: the same, for the XRay entry and tail-call trampolines
#   (src/arch/x86_64/xray.s), whose patched sled pushed one word just above the return address:
#   returns with `ret $8`, dropping that word, as the trampoline's own return would. (Its CFI
#   says so: the caller's stack pointer is CFA + 8.)
    .macro SLOW name, pop
    .p2align 4
    .globl instrfn_x86_64_\name
    .hidden instrfn_x86_64_\name
    .type instrfn_x86_64_\name,@function
instrfn_x86_64_\name:
    .cfi_startproc
    .if \pop
    .cfi_val_offset %rsp, 8
    .endif
    leaq -24(%rsp), %rsp
    .cfi_adjust_cfa_offset 24
    .cfi_rel_offset %rdx, 0
    .cfi_rel_offset %rcx, 8
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbp, 0
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    pushq %rax
    .cfi_offset %rax, -48
    pushq %rbx
    .cfi_offset %rbx, -56
    pushq %rsi
    .cfi_offset %rsi, -64
    pushq %rdi
    .cfi_offset %rdi, -72
    pushq %r8
    .cfi_offset %r8, -80
    pushq %r9
    .cfi_offset %r9, -88
    pushq %r10
    .cfi_offset %r10, -96
    pushq %r11
    .cfi_offset %r11, -104
    pushq %r12
    .cfi_offset %r12, -112
    pushq %r13
    .cfi_offset %r13, -120
    movq %rcx, %r12
    movq %rdx, %r13

    SAVE_EXTENDED
    # Block every signal, so a handler never sees this thread's guard held: a counting call
    # from a signal handler is then always recorded, never dropped.
    subq $16, %rsp
    BLOCK_SIGNALS

    movq instrfn_tls@gottpoff(%rip), %rbx
    movq $1, %fs:{TLS_GUARD}(%rbx)             # guard: counting calls made by the runtime return
    movq %fs:0, %rdi
    addq %rbx, %rdi                  # arg 0: &Tls
    movq %r13, %rsi                  # arg 1: from_pc, or the slot
    movq %r12, %rdx                  # arg 2: self_pc
    call *24(%rbp)                   # CFA-16
    movq $0, %fs:{TLS_GUARD}(%rbx)

    RESTORE_SIGNALS
    addq $16, %rsp
    RESTORE_EXTENDED
    leaq -80(%rbp), %rsp
    popq %r13
    popq %r12
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rbx
    popq %rax
    popq %rbp
    .cfi_def_cfa %rsp, 32
    movq (%rsp), %rdx
    movq 8(%rsp), %rcx
    leaq 24(%rsp), %rsp
    .cfi_def_cfa_offset 8
    .if \pop
    ret $8
    .else
    ret
    .endif
    .cfi_endproc
    .size instrfn_x86_64_\name, .-instrfn_x86_64_\name
    .endm

    SLOW slow, 0
    SLOW slow_pop8, 1
