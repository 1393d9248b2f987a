# instrfn trampolines for riscv64, the exit trampoline of trace mode: where an instrumented
# function returns to when its return address was replaced, its return pad and its unwind
# information.

# instrfn_riscv64_exit: where an instrumented function returns to in trace mode (the fast path
#   replaced its return address, and keeps the original in this thread's shadow stack).
#   Entry (by the function's ret): sp = the function's CFA, whose return slot was CFA - 8 (the
#   only slots the trace path replaces); ra = this address; a0, a1, fa0, fa1 may hold its
#   result. Preserved: a0, a1, fa0, fa1, fcsr and every callee-saved register (s0-s11, fs0-fs11,
#   sp, gp, tp). The fast part uses t0-t6 only, dead after a return (caller-saved, and no
#   result), and never the stack; the slow part saves the results and fcsr and calls Rust,
#   which keeps the callee-saved ones. If the newest shadow entry is the returning frame's (its
#   slot = sp - 8), writes the exit event, then pops the entry (slot zeroed first: free), and
#   jumps to the original return address with ra = that address (as a plain return leaves
#   it). Events are reserved as in TRACE_EVENT (against the room just checked).
#   The jump is `jr t1`, not `ret`: the function's own ret, which came here, popped its call's
#   entry off the return-address stack (the RISC-V hints: jalr through ra or t0 pops), and a
#   ret here would pop its caller's too — a second mispredicted return per call, and every
#   later return one entry behind. t1 is no link register, so the jump is predicted from its
#   own history (as on x86_64; qemu does not model the predictor).
#   Slow part (instrfn_trace_exit_slow(&Tls, sp - 8), returning the original return address):
#   the newest entry is another frame's (frames left behind by longjmp), an unwinder ran, or
#   the event does not fit. Frame, 64 bytes, CFA = sp + 64: 0 a0, 8 a1, 16 fa0, 24 fa1, 32
#   fcsr, 40 old signal mask, 48 the return address, 56 the old guard.
#   With INSTRFN_MIN_DURATION (instrfn_min_ticks nonzero) a short call whose entry is still
#   the newest event has that entry taken back instead of an exit written (.Lexit_short), and
#   is counted in the Tls dropped word.
#   Executed (qemu -singlestep -d exec): the fast part, 41 instructions to the original return
#   address (37 before the INSTRFN_MIN_DURATION test); 56 when it takes a short call's entry
#   back (counted from the code: 48 before it reserved its exit first).
#   The CFI (for a walk from a signal handler that interrupted us, e.g. a sampler's or a crash
#   reporter's backtrace()): CFA = sp throughout the fast part (the function's CFA, so the
#   caller's frame unwinds as at a plain return). Once the newest shadow entry is known to be
#   the returning frame's (instrfn_riscv64_exit_ours), the caller's return address is
#   described as saved in it, at [t4 + SH_RET] (RETURN_ADDRESS_IN_ENTRY), then as in t1 once
#   loaded (a handler may reuse the entry after it is popped). Before that, and in the slow
#   part, it is undefined: a walk stops here (the returning frame's slot lies below sp, where
#   the signal frame is, so the runtime's backtrace wrappers cannot put it back there).
#   A return address that points at the label (a replaced one, met by an unwinder linked into
#   the program, which no wrapper reaches: C++ with -static-libgcc) is looked up as address - 1:
#   the 4-byte nop before the label, instrfn_riscv64_return_pad, whose FDE describes a frame
#   between the returning function and its caller, as x86_64's (src/arch/x86_64/): the caller's sp
#   is sp, the frame's own CFA sp + 16, and the caller's return address the `ret` word of the
#   newest shadow entry whose slot is sp - 8, found by a DWARF expression
#   (scripts/return-pad-cfi.py riscv64) that takes its own pc from ra (libgcc restores the
#   return address column as a register) and from the pc-relative word before the pad the
#   registry instrfn_registry.
# RETURN_ADDRESS_IN_ENTRY: CFI, the caller's return address (ra, DWARF register 1) is saved at
#   [t4 + SH_RET]: DW_CFA_expression ra, DW_OP_breg29 (t4 = x29) SH_RET (a one-byte SLEB128:
#   src/trace/ asserts it).
    .macro RETURN_ADDRESS_IN_ENTRY
    .cfi_escape 0x10, 1, 2, 0x8d, {SH_RET}
    .endm

    .p2align 3
instrfn_riscv64_registry_rel:
    .quad instrfn_registry - instrfn_riscv64_registry_rel
    .globl instrfn_riscv64_return_pad
    .hidden instrfn_riscv64_return_pad
instrfn_riscv64_return_pad:
    .cfi_startproc
    .cfi_def_cfa sp, 16
    .cfi_escape 0x16, 2, 2, 0x72, 0x00      # DW_CFA_val_expression sp: DW_OP_breg2 0
    .cfi_escape 0x10, 1, 98, 0x71, 0x74, 0x12, 0x06, 0x22, 0x12, 0x23, 0x08, 0x06, 0x16, 0x06, 0x06
    .cfi_escape 0x72, 0x78, 0x16, 0x71, 0x74, 0x12, 0x06, 0x22, 0x23, 0x10, 0x15, 0x01
    .cfi_escape 0x30, 0x29, 0x28, 0x45, 0x00, 0x15, 0x01, 0x23, {BLK_SHADOW}, 0x06, 0x12, 0x30
    .cfi_escape 0x29, 0x28, 0x33, 0x00, 0x12, 0x15, 0x05, 0x22, 0x17, 0x12, 0x15, 0x03
    .cfi_escape 0x2a, 0x28, 0x21, 0x00, 0x12, 0x23, {SH_SLOT}, 0x06, 0x12, 0x30, 0x29, 0x28
    .cfi_escape 0x16, 0x00, 0x15, 0x05, 0x29, 0x28, 0x05, 0x00, 0x23, {SH_BYTES}, 0x2f, 0xe4
    .cfi_escape 0xff, 0x16, 0x13, 0x12, 0x23, {SH_RET}, 0x16, 0x23, {SH_BYTES}, 0x2f, 0xd9, 0xff
    .cfi_escape 0x13, 0x13, 0x16, 0x13, 0x2f, 0x01, 0x00, 0x13, 0x16, 0x06, 0x16, 0x2f
    .cfi_escape 0xb4, 0xff
    .4byte 0x00000013                      # nop (addi x0, x0, 0: 4 bytes, never compressed)
    .cfi_endproc
    .globl instrfn_riscv64_exit
    .hidden instrfn_riscv64_exit
    .type instrfn_riscv64_exit,@function
instrfn_riscv64_exit:
    .cfi_startproc
    .cfi_undefined ra
    la.tls.ie t0, instrfn_tls
    add t0, t0, tp                         # &Tls
    ld t1, {TLS_UNWOUND}(t0)
    bnez t1, .Lexit_slow
    ld t4, {TLS_SHADOW_TOP}(t0)
    ld t1, {TLS_SHADOW_BASE}(t0)
    beq t4, t1, .Lexit_slow                # empty (the slow path says so)
    addi t4, t4, -{SH_BYTES}               # the newest entry
    ld t1, {SH_SLOT}(t4)
    addi t2, sp, -8                        # our return slot
    bne t1, t2, .Lexit_slow                # frames left behind by longjmp: the slow path
    .globl instrfn_riscv64_exit_ours       # (tests/fixtures/c/bpsweep.c: from here on a walk
    .hidden instrfn_riscv64_exit_ours      # reaches the real caller)
instrfn_riscv64_exit_ours:
    RETURN_ADDRESS_IN_ENTRY
    ld t5, {SH_FN}(t4)                     # the function that returned
    ld t1, {TLS_GUARD}(t0)
    bnez t1, .Lexit_pop                    # runtime code running: no event
.Lexit_enabled:
    auipc t1, %pcrel_hi(instrfn_enabled)
    lbu t1, %pcrel_lo(.Lexit_enabled)(t1)
    beqz t1, .Lexit_pop
.Lexit_min:
    auipc t1, %pcrel_hi(instrfn_min_ticks)
    ld t1, %pcrel_lo(.Lexit_min)(t1)
    bnez t1, .Lexit_short                  # INSTRFN_MIN_DURATION: maybe no events at all
    rdtime t6                              # a call that recorded nothing inside it: a call
    MERGE_CALL t5, t6, .Lexit_pop, instrfn_riscv64_exit_merge # word (a2, a3 are dead here)
    TRACE_EVENT {EV_EXIT}, t5, .Lexit_slow, t6, 0 # (no room: nothing popped yet, the slow path
                                           # does all)
.Lexit_pop:
    # Popped after the event: until here a handler that interrupts us finds the entry intact
    # (it pushes and pops above it).
    ld t1, {SH_RET}(t4)                    # return there
    .cfi_register ra, t1                   # (from here on a handler may reuse the entry)
    sd zero, {SH_SLOT}(t4)                 # free entries have slot 0 (a handler that comes now
                                           # takes it for one being pushed: alive)
    sd t4, {TLS_SHADOW_TOP}(t0)            # popped
    mv ra, t1                              # as a plain return leaves it
    jr t1                                  # not `ret` (see above)
    RETURN_ADDRESS_IN_ENTRY                # (below: t4 = the entry, as above)
.Lexit_short:
    # INSTRFN_MIN_DURATION (src/arch/x86_64/ .Lexit_short): a call shorter than instrfn_min_ticks
    # whose entry is still the thread's newest event (its callees, if any, were short too and
    # taken back already) leaves no events: its entry is taken back. The exit event is
    # reserved first, as always (as TRACE_EVENT does): while its tag is 0 the chunk is not all
    # written, so it is never committed and reused however many chunks a signal handler fills
    # meanwhile, and every access below stays inside it. Then, if the event before ours is
    # our entry and the call was short, the entry's tag is zeroed and the position moved back
    # over both with a compare-and-swap (lr.d/sc.d) that fails if a handler reserved an event
    # after ours: then the tag goes back and our exit is written where we reserved it. The
    # count is added with one amoadd.d.
    # t1 = instrfn_min_ticks, t0 = &Tls, t4 = the entry, t5 = the function; t2, t3, t6 free,
    # and a2-a5, as dead after a return as the t registers.
    mv a2, t1                              # a2 = instrfn_min_ticks
    rdtime t6                              # the timestamp
    addi t2, t0, {TLS_TRACE_POS}           # t2 = &trace_pos
3:  ld t1, {TLS_TRACE_POS}(t0)
    ld t3, {TLS_TRACE_END}(t0)
    addi t1, t1, {EV_BYTES}                # t1 = just past our place (a long exit's)
    bltu t3, t1, .Lexit_slow               # no room (or no chunk): the slow path does all
    lr.d t3, (t2)
    addi t3, t3, {EV_BYTES}
    bne t3, t1, 3b                         # moved since the check: check again
    sc.d t3, t1, (t2)
    bnez t3, 3b                            # reservation lost (a trap came between): again
    # Our entry before our place: a long one at -16, or a short one at -8 (a word at -16 with
    # tag 3 is a long event's first word: no long event's second word has a tag); the first
    # event of a chunk finds the header's zero words there.
    slli t3, t5, {EV_LONG_SHIFT}
    ori t3, t3, ({EV_ENTRY} << 2) | {EV_TAG_LONG} # our entry's first word, if long
    ld a5, -2*{EV_BYTES}(t1)               # (a5: kept for a restore)
    andi t2, a5, ~(3 << {EV_TS_SHIFT})     # (its timestamp's low bits aside)
    bne t2, t3, 6f
    srli t2, a5, {EV_TS_SHIFT}
    andi t2, t2, 3
    ld t3, 8-2*{EV_BYTES}(t1)
    or t2, t2, t3                          # its timestamp
    sub t2, t6, t2                         # the call's length in ticks
    bgeu t2, a2, 4f                        # long enough: recorded
    addi a3, t1, -2*{EV_BYTES}             # a3 = where the entry begins
    j instrfn_riscv64_exit_take_back
6:  andi t3, a5, 3
    li t2, {EV_TAG_LONG}
    beq t3, t2, 4f                         # a long event there, not ours: no short one at -8
    ld t3, {TLS_TRACE_CBASE}(t0)
    sub t3, t5, t3
    slli t3, t3, 32
    ori t3, t3, {EV_TAG_ENTRY}             # our entry's word if short, its time aside
    ld t2, 8-2*{EV_BYTES}(t1)
    xor t3, t3, t2
    andi a3, t3, 3
    bnez a3, 4f                            # not a short entry
    srli t3, t3, 32
    bnez t3, 4f                            # not ours (or not from these bases)
    slli t3, t2, 32
    srli t3, t3, 34                        # its time - the time base
    ld a3, {TLS_TRACE_TBASE}(t0)
    add t3, t3, a3
    sub t3, t6, t3                         # the call's length in ticks
    bgeu t3, a2, 4f                        # long enough: recorded
    addi a3, t1, 8-2*{EV_BYTES}            # a3 = where the entry begins
    .globl instrfn_riscv64_exit_take_back
    .hidden instrfn_riscv64_exit_take_back
instrfn_riscv64_exit_take_back:
    # a3 = the entry, t1 = just past our place. (A handler that gave the thread a new chunk
    # since our reservation made the Tls bases read above another chunk's: the
    # compare-and-swap below fails then, as the position moved, and all goes back as it was.)
    ld a4, 8-2*{EV_BYTES}(t1)              # a short entry's word, or a long one's timestamp
    sd zero, 0(a3)                         # the entry is unwritten again, its first word
    sd zero, 8-2*{EV_BYTES}(t1)            # first (and a long one's timestamp: an event
                                           # written there next may be short)
    addi t2, t0, {TLS_TRACE_POS}
1:  lr.d t3, (t2)                          # back over both, if nothing came after them
    bne t3, t1, 2f
    sc.d t3, a3, (t2)
    bnez t3, 1b                            # reservation lost (a trap came between): again
    li t2, 1
    addi t1, t0, {TLS_DROPPED}
    amoadd.d zero, t2, (t1)                # counted
    j .Lexit_pop
2:  sd a4, 8-2*{EV_BYTES}(t1)              # a handler came in between: the entry stays (its
    addi t3, t1, -2*{EV_BYTES}             # words back, the one that marks it last)
    bne t3, a3, 4f
    sd a5, -2*{EV_BYTES}(t1)               # (a long one's first word, as it was)
4:  andi t3, t6, -4                        # our exit: timestamp, then the word that marks it
    sd t3, 8-{EV_BYTES}(t1)
    andi t6, t6, 3
    slli t6, t6, {EV_TS_SHIFT}
    slli t3, t5, {EV_LONG_SHIFT}
    or t3, t3, t6
    ori t3, t3, ({EV_EXIT} << 2) | {EV_TAG_LONG}
    sd t3, -{EV_BYTES}(t1)
    j .Lexit_pop
.Lexit_slow:
    .cfi_undefined ra                      # (reached before the entry is known, and after)
    .globl instrfn_riscv64_exit_slow_part   # (a symbol of its own: tests/fixtures/c/bpsweep.c
    .hidden instrfn_riscv64_exit_slow_part  # puts breakpoints only where signals are not
instrfn_riscv64_exit_slow_part:             # blocked)
    addi sp, sp, -64
    .cfi_def_cfa_offset 64
    sd a0, 0(sp)
    sd a1, 8(sp)
    fsd fa0, 16(sp)
    fsd fa1, 24(sp)
    frcsr t0
    sd t0, 32(sp)
    BLOCK_SIGNALS 40
    la.tls.ie t0, instrfn_tls
    add t0, t0, tp
    ld t1, {TLS_GUARD}(t0)
    sd t1, 56(sp)
    li t1, 1
    sd t1, {TLS_GUARD}(t0)
    mv a0, t0                              # arg 0: &Tls
    addi a1, sp, 64 - 8                    # arg 1: the return slot, CFA - 8
    call instrfn_trace_exit_slow
    sd a0, 48(sp)                          # return there
    la.tls.ie t0, instrfn_tls
    add t0, t0, tp
    ld t1, 56(sp)
    sd t1, {TLS_GUARD}(t0)                 # the guard as it was
    RESTORE_SIGNALS 40
    ld t0, 32(sp)
    fscsr t0
    ld a0, 0(sp)
    ld a1, 8(sp)
    fld fa0, 16(sp)
    fld fa1, 24(sp)
    ld ra, 48(sp)
    addi sp, sp, 64
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
    .size instrfn_riscv64_exit, .-instrfn_riscv64_exit
