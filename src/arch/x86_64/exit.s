# instrfn trampolines for x86_64, the exit trampoline of trace mode: where an instrumented function
# returns to when its return address was replaced, its return pad and its unwind information.

# instrfn_x86_64_exit: where an instrumented function returns to in trace mode (the fast path
#   replaced its return address, and keeps the original in this thread's shadow stack).
#   Entry (by the function's ret): %rsp = the function's CFA; every register as the function
#   left it: rax, rdx, xmm0, xmm1 and the x87 stack may hold its result. All are preserved (the
#   fast part touches GPRs only, and never x87/MMX state; the slow part saves the whole
#   extended state). Writes the exit event of the newest shadow entry (if it is the returning
#   frame's), then pops it (slot zeroed: free), and goes on at the original return address,
#   with %rsp = CFA_f as the function's own ret would leave it. Events are reserved as in
#   FAST_PATH (TRACE_EVENT: cmpxchg against the room just checked).
#   It goes there with an indirect jmp, not a ret: the function's ret, which came here, used
#   the return-stack predictor's entry of its call (a mispredict, which nothing can avoid); a
#   ret here would use its caller's entry (a second mispredict), and leave the predictor one
#   entry behind for every return after it. The jmp is predicted from its own history.
#   Frame: CFA_f-8 the original return address (the jmp reads it below %rsp, inside the red
#   zone, which a signal frame never overwrites), CFA_f-16 .. -48 rax, rcx, rdx, rsi, rdi.
#   Unwinding (a handler that interrupts us and walks the stack, a sampling profiler): the CFI
#   describes this code as a frame with CFA = CFA_f and its return address at CFA_f - 8, and the
#   original return address is stored there as soon as the newest entry is known to be the
#   returning frame's (`.Lexit_ours`), so that from there on an unwinder goes on into the real
#   caller (tests/fixtures/c/sweep.c checks it at every instruction). Before that the word holds
#   what the function's ret consumed, this trampoline's own address: an unwinder takes it for
#   the caller. A handler's walk in between may put the trampoline back into the frame
#   (src/trace/ `after_unwinding`, the entry still being alive): `.Lexit_pop` stores the
#   original again, before and after it frees the entry.
#   A return address that points at the label (a replaced one, which an unwinder walking up
#   from a deeper frame meets where nothing put the original back: an unwinder linked into the
#   program, which no wrapper reaches) is looked up as address - 1: the nop before the label,
#   `instrfn_x86_64_return_pad`, whose FDE below describes a frame between the returning
#   function and its caller: the caller's rsp is rsp (the function's CFA), the frame's own
#   CFA rsp + 8 (a CFA of its own: libgcc identifies the catching frame by the CFA of the
#   frame below it, and took this frame for it when it had the function's), and the caller's
#   return address the `ret` word of the newest shadow entry whose slot is rsp - 8, which a
#   DWARF expression finds: from its own pc (DW_OP_breg16: the label) it reads the
#   pc-relative word before the nop, which leads to instrfn_registry (the thread
#   registry's head address, the bytes of a shadow stack mapping, a zero word: src/trace/
#   sets the first two at start), and walks every block's shadow stack from its base to its
#   first free entry; not found: the zero word, a return address of 0, where unwinders stop.
#   The expression's bytes are scripts/return-pad-cfi.py's output (branch offsets computed
#   there, for 1-byte operands: src/arch/x86_64/mod.rs asserts them < 128; tests/host.rs checks
#   the two agree).
    .p2align 4
instrfn_x86_64_registry_rel:
    .quad instrfn_registry - instrfn_x86_64_registry_rel
    .globl instrfn_x86_64_return_pad
    .hidden instrfn_x86_64_return_pad
instrfn_x86_64_return_pad:
    .cfi_startproc
    .cfi_def_cfa %rsp, 8
    .cfi_escape 0x16, 7, 2, 0x77, 0x00      # DW_CFA_val_expression rsp: DW_OP_breg7 0
    .cfi_escape 0x10, 16, 98, 0x80, 0x77, 0x12, 0x06, 0x22, 0x12, 0x23, 0x08, 0x06, 0x16, 0x06, 0x06
    .cfi_escape 0x77, 0x78, 0x16, 0x80, 0x77, 0x12, 0x06, 0x22, 0x23, 0x10, 0x15, 0x01
    .cfi_escape 0x30, 0x29, 0x28, 0x45, 0x00, 0x15, 0x01, 0x23, {BLK_SHADOW}, 0x06, 0x12, 0x30
    .cfi_escape 0x29, 0x28, 0x33, 0x00, 0x12, 0x15, 0x05, 0x22, 0x17, 0x12, 0x15, 0x03
    .cfi_escape 0x2a, 0x28, 0x21, 0x00, 0x12, 0x23, {SH_SLOT}, 0x06, 0x12, 0x30, 0x29, 0x28
    .cfi_escape 0x16, 0x00, 0x15, 0x05, 0x29, 0x28, 0x05, 0x00, 0x23, {SH_BYTES}, 0x2f, 0xe4
    .cfi_escape 0xff, 0x16, 0x13, 0x12, 0x23, {SH_RET}, 0x16, 0x23, {SH_BYTES}, 0x2f, 0xd9, 0xff
    .cfi_escape 0x13, 0x13, 0x16, 0x13, 0x2f, 0x01, 0x00, 0x13, 0x16, 0x06, 0x16, 0x2f
    .cfi_escape 0xb4, 0xff
    nop
    .cfi_endproc
    .globl instrfn_x86_64_exit
    .hidden instrfn_x86_64_exit
    .type instrfn_x86_64_exit,@function
instrfn_x86_64_exit:
    .cfi_startproc
    .cfi_def_cfa %rsp, 0                    # CFA_f, the return address below it (see above)
    .cfi_offset %rip, -8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    pushq %rax
    .cfi_adjust_cfa_offset 8
    pushq %rcx
    .cfi_adjust_cfa_offset 8
    pushq %rdx
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    movq instrfn_tls@gottpoff(%rip), %rcx
    cmpq $0, %fs:{TLS_UNWOUND}(%rcx)
    jne .Lexit_slow
    movq %fs:{TLS_SHADOW_TOP}(%rcx), %rsi
    subq ${SH_BYTES}, %rsi                   # the newest entry
    leaq 40(%rsp), %rdi                     # CFA_f - 8: the return slot it recorded
    cmpq %rdi, {SH_SLOT}(%rsi)
    jne .Lexit_slow                         # frames left behind by longjmp: the slow path
    movq {SH_RET}(%rsi), %rdi
    movq %rdi, 40(%rsp)                     # the original return address, for unwinders
    .globl instrfn_x86_64_exit_ours         # (tests/fixtures/c/sweep.c: from here on a walk
    .hidden instrfn_x86_64_exit_ours        # reaches the real caller)
instrfn_x86_64_exit_ours:
    cmpq $0, %fs:{TLS_GUARD}(%rcx)
    jne .Lexit_pop
    cmpb $0, instrfn_enabled(%rip)
    je .Lexit_pop
    TIMESTAMP
    cmpq $0, instrfn_min_ticks(%rip)
    jne .Lexit_short
    # A call word where the call recorded nothing inside it; else our event, reserved as in
    # the entry's fast path, of the function that returned. No room: the slow path does it
    # all (the entry is still pushed).
    MERGE_CALL {SH_FN}(%rsi), -8, .Lexit_pop, instrfn_x86_64_exit_merge
    TRACE_EVENT 1, %rdi, .Lexit_slow, {SH_FN}(%rsi), exit
.Lexit_pop:
    # Popped after the event: until here a handler that interrupts us finds the entry intact
    # (it pushes and pops above it).
    # The entry's slot is zeroed before the original return address goes into the frame: a
    # handler that comes between the two then takes the entry for one being pushed (alive,
    # left alone), where before it found a live entry whose return slot held its original
    # address and, after a backtrace() (src/trace/ `after_unwinding`), put the trampoline
    # back there, so that the jmp below came back here and the program aborted ("lost track of
    # a return address"). The other architectures return through a register and have no such
    # window.
    # The original return address goes into the frame before the slot is zeroed too: a
    # handler's walk may have put the trampoline back there, and one that comes between the
    # two stores must not find it (it leaves a freed entry's frame alone).
    movq {SH_RET}(%rsi), %rdi
    movq %rdi, 40(%rsp)
    movq $0, {SH_SLOT}(%rsi)                # free entries have slot 0
    .globl instrfn_x86_64_exit_pop          # (tests/fixtures/c/exit_window.c stops here)
    .hidden instrfn_x86_64_exit_pop
instrfn_x86_64_exit_pop:
    movq %rdi, 40(%rsp)                     # return there
    movq %rsi, %fs:{TLS_SHADOW_TOP}(%rcx)   # popped
.Lexit_out:
    popq %rdi
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdx
    .cfi_adjust_cfa_offset -8
    popq %rcx
    .cfi_adjust_cfa_offset -8
    popq %rax
    .cfi_adjust_cfa_offset -8
    leaq 8(%rsp), %rsp                      # the function's CFA, as its own ret would leave it
    .cfi_adjust_cfa_offset -8
    jmp *-8(%rsp)                           # an indirect jump, not a ret (see above)
    .cfi_adjust_cfa_offset 48               # (the code below runs with the registers pushed)
.Lexit_short:
    # INSTRFN_MIN_DURATION: a call shorter than instrfn_min_ticks whose entry is still the
    # thread's newest event (its callees, if any, were short too and taken back already) leaves
    # no events: its entry is taken back. The exit event (here always a long one) is reserved
    # first, as always: while its first word is 0 the chunk is not all written, so it is never
    # committed and reused, however many chunks a signal handler fills meanwhile
    # (src/trace/collector.rs `retire`) — every load and store below stays inside it. Then, if the
    # event before ours is our entry (a long one at -16, or a short one at -8: the first event
    # of a chunk finds the header's zero words there) and the call was short, the entry's
    # words are zeroed and the position moved back over both with a cmpxchg that fails if a
    # handler reserved an event after ours; then the entry's words go back and our exit is
    # written in the place we reserved (before the handler's events, and stamped before them).
    # (No long event's second word has a tag, so a word at -16 with tag 3 and bit 7 clear is
    # a long event's first word: then the event before ours is that one, else the short one
    # (or call word) at -8.)
    # rdx = timestamp; rax, rdi free;
    # the red zone below the registers pushed holds r8 and the two words before our event
    # while the entry is taken back.
3:  movq %fs:{TLS_TRACE_POS}(%rcx), %rax
    leaq {EV_BYTES}(%rax), %rdi
    cmpq %fs:{TLS_TRACE_END}(%rcx), %rdi
    ja .Lexit_slow                          # no room (or no chunk): the slow path does it all
    cmpxchgq %rdi, %fs:{TLS_TRACE_POS}(%rcx) # claimed, unless a handler moved it: again
    jne 3b
    movq {SH_FN}(%rsi), %rdi
    shlq ${EV_LONG_SHIFT}, %rdi
    orq $(({EV_ENTRY} << 2) | {EV_TAG_LONG}), %rdi # our entry's first word, if long
    xorq -16(%rax), %rdi
    andq $~(3 << {EV_TS_SHIFT}), %rdi       # (its timestamp's low bits aside)
    jnz 6f
    movq -16(%rax), %rdi
    shrq ${EV_TS_SHIFT}, %rdi
    andl $3, %edi
    orq -8(%rax), %rdi                      # the entry's timestamp
    negq %rdi
    addq %rdx, %rdi                         # the call's length in ticks
    cmpq instrfn_min_ticks(%rip), %rdi
    jae 4f                                  # long enough: recorded
    leaq -{EV_BYTES}(%rax), %rdi            # where the entry starts
    jmp instrfn_x86_64_exit_take_back
6:  movq -16(%rax), %rdi
    andl $({EV_CALL_MARK} | 3), %edi
    cmpl ${EV_TAG_LONG}, %edi
    je 4f                                   # a long event there, not ours: no short one at -8
    movq {SH_FN}(%rsi), %rdi
    subq %fs:{TLS_TRACE_CBASE}(%rcx), %rdi
    shlq $32, %rdi
    orq ${EV_TAG_ENTRY}, %rdi               # our entry's word if short, its time aside
    xorq -8(%rax), %rdi
    testb $3, %dil
    jnz 4f                                  # not a short entry
    shrq $32, %rdi
    jnz 4f                                  # not ours (or not from this chunk's bases)
    movl -8(%rax), %edi
    shrl $2, %edi                           # its time - the time base
    addq %fs:{TLS_TRACE_TBASE}(%rcx), %rdi
    negq %rdi
    addq %rdx, %rdi                         # the call's length in ticks
    cmpq instrfn_min_ticks(%rip), %rdi
    jae 4f                                  # long enough: recorded
    leaq -{EV_SHORT_BYTES}(%rax), %rdi      # where the entry starts
    .globl instrfn_x86_64_exit_take_back    # (tests/fixtures/c/exit_window.c stops here)
    .hidden instrfn_x86_64_exit_take_back
instrfn_x86_64_exit_take_back:
    # rdi = the entry, rax = our exit's place. (A handler that gave the thread a new chunk
    # since our reservation made the Tls bases read above another chunk's: the cmpxchg below
    # fails then, as the position moved, and everything goes back as it was.)
    movq %r8, -24(%rsp)
    movq -16(%rax), %r8
    movq %r8, -16(%rsp)
    movq -8(%rax), %r8
    movq %r8, -8(%rsp)
    movq $0, (%rdi)                         # the entry is unwritten again, its first word
    movq $0, -8(%rax)                       # first (and a long one's timestamp: an event
                                            # written there next may be short)
    movq %rax, %r8                          # our exit's place
    addq ${EV_BYTES}, %rax                  # the position just past it
    cmpxchgq %rdi, %fs:{TLS_TRACE_POS}(%rcx) # back over both, if nothing came after them
    jne 5f
    movq -24(%rsp), %r8
    incq %fs:{TLS_DROPPED}(%rcx)
    jmp .Lexit_pop
5:  movq -8(%rsp), %rax                     # a handler came in between: the entry stays (its
    movq %rax, -8(%r8)                      # words back, the one that marks it written last)
    movq -16(%rsp), %rax
    movq %rax, -16(%r8)
    movq %r8, %rax
    movq -24(%rsp), %r8
4:  movq %rdx, %rdi                        # our exit: timestamp, then the word that marks it
    andq $-4, %rdi
    movq %rdi, 8(%rax)
    andl $3, %edx
    shll ${EV_TS_SHIFT}, %edx
    movq {SH_FN}(%rsi), %rdi
    shlq ${EV_LONG_SHIFT}, %rdi
    orq %rdx, %rdi
    orq $(({EV_EXIT} << 2) | {EV_TAG_LONG}), %rdi
    movq %rdi, (%rax)
    jmp .Lexit_pop
.Lexit_slow:
    # instrfn_trace_exit_slow(&Tls, slot) with everything saved; it returns the original
    # return address of the frame whose slot that was (it closes the frames above it).
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_offset %rbp, -56
    movq %rsp, %rbp                         # rbp = CFA_f - 56
    .cfi_def_cfa_register %rbp
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    SAVE_EXTENDED
    subq $16, %rsp
    BLOCK_SIGNALS
    movq instrfn_tls@gottpoff(%rip), %rax
    movq $1, %fs:{TLS_GUARD}(%rax)
    movq %fs:0, %rdi
    addq %rax, %rdi                         # arg 0: &Tls
    leaq 48(%rbp), %rsi                     # arg 1: the return slot, CFA_f - 8
    call instrfn_trace_exit_slow
    movq %rax, 48(%rbp)                     # return there
    movq instrfn_tls@gottpoff(%rip), %rax
    movq $0, %fs:{TLS_GUARD}(%rax)
    RESTORE_SIGNALS
    addq $16, %rsp
    RESTORE_EXTENDED
    leaq -32(%rbp), %rsp
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    .cfi_def_cfa %rsp, 56
    popq %rbp
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbp
    jmp .Lexit_out
    .cfi_endproc
    .size instrfn_x86_64_exit, .-instrfn_x86_64_exit
