# instrfn trampolines for s390x, the exit trampoline of trace mode: where an instrumented function
# returns to when its return address was replaced, its return pad and its unwind information.

# instrfn_s390x_exit: where an instrumented function returns to in trace mode (its return
#   address was replaced by the fast path, or by instrfn_trace_slow, which keep the original
#   in this thread's shadow stack).
#   Entry (by the function's `br %r14`): %r15 = the function's entry %r15 = S, so its slot is
#   S + 112; every register as the function left it: r2 (and r3), f0/f2/f4/f6 and v24 may
#   hold its result. Preserved: r2-r13, r15, a0/a1, f0-f15, v0-v31 (the fast part touches no
#   FP or vector register; the slow part saves them all). Clobbered: r0, r1 (free at any
#   return: the ABI lets a call clobber them), r14 (= this trampoline's address on entry) and
#   the condition code. r4 and r5 are kept at 32-47(S), the returning function's own register
#   save area, which nothing uses any more (there is no red zone below S, and S itself is
#   not moved by the fast part). If the newest shadow entry is this frame's, writes its exit
#   event (reserved as in FAST_PATH: compare-and-swap against the room just checked), then
#   pops it (slot zeroed: free), and continues at the original return address (through r1).
#   Registers: r14 = &Tls, r4 = the entry, r1 = the event, then the original return address;
#   r0 = the event's tagged word, r5 scratch; 48(S) (r6's save slot) holds the clock in
#   .Lexit_short. With INSTRFN_MIN_DURATION (instrfn_min_ticks nonzero) a short call whose
#   entry is still the newest event has that entry taken back instead of an exit written
#   (.Lexit_short), and is counted in the Tls dropped word.
#   Everything out of the ordinary (the entry is not ours: frames left behind by longjmp; an
#   unwinder ran; no room for the event) goes to instrfn_trace_exit_slow(tls, slot) through
#   instrfn_s390x_slow (flag 2), with everything saved, in a frame of its own with a
#   backchain; it returns the original return address of this frame.
#   The CFI marks the return address (r14's column) undefined until the entry is known (see
#   "Trace mode" above). A return address that points at the label (a replaced one, met by an
#   unwinder linked into the program, which no wrapper reaches: C++ with -static-libgcc) is
#   looked up as address - 1: the 4-byte no-op before the label, instrfn_s390x_return_pad,
#   whose FDE describes a frame between the returning function and its caller, as x86_64's
#   (src/arch/x86_64/): the caller's r15 is r15, the frame's own CFA r15 + 168 (the function's is
#   r15 + 160), and the caller's return address the `ret` word of the newest shadow entry whose
#   slot is r15 + 112, found by a DWARF expression (scripts/return-pad-cfi.py s390x) that takes
#   its own pc from r14 (libgcc restores the return address column as a register) and from
#   the pc-relative word before the pad the registry instrfn_registry.
    .p2align 4
# RETURN_ADDRESS_IN_ENTRY: CFI, the caller's return address (r14) is saved at [r4 + SH_RET]:
#   DW_CFA_expression r14, DW_OP_breg4 SH_RET (a one-byte SLEB128: src/trace/ asserts it).
    .macro RETURN_ADDRESS_IN_ENTRY
    .cfi_escape 0x10, 14, 2, 0x74, {SH_RET}
    .endm

instrfn_s390x_registry_rel:
    .quad instrfn_registry - instrfn_s390x_registry_rel
    .globl instrfn_s390x_return_pad
    .hidden instrfn_s390x_return_pad
instrfn_s390x_return_pad:
    .cfi_startproc
    .cfi_def_cfa %r15, 168
    .cfi_escape 0x16, 15, 2, 0x7f, 0x00     # DW_CFA_val_expression r15: DW_OP_breg15 0
    .cfi_escape 0x10, 14, 99, 0x7e, 0x74, 0x12, 0x06, 0x22, 0x12, 0x23, 0x08, 0x06, 0x16, 0x06, 0x06
    .cfi_escape 0x7f, 0xf0, 0x00, 0x16, 0x7e, 0x74, 0x12, 0x06, 0x22, 0x23, 0x10, 0x15
    .cfi_escape 0x01, 0x30, 0x29, 0x28, 0x00, 0x45, 0x15, 0x01, 0x23, {BLK_SHADOW}, 0x06, 0x12
    .cfi_escape 0x30, 0x29, 0x28, 0x00, 0x33, 0x12, 0x15, 0x05, 0x22, 0x17, 0x12, 0x15
    .cfi_escape 0x03, 0x2a, 0x28, 0x00, 0x21, 0x12, 0x23, {SH_SLOT}, 0x06, 0x12, 0x30, 0x29
    .cfi_escape 0x28, 0x00, 0x16, 0x15, 0x05, 0x29, 0x28, 0x00, 0x05, 0x23, {SH_BYTES}, 0x2f
    .cfi_escape 0xff, 0xe4, 0x16, 0x13, 0x12, 0x23, {SH_RET}, 0x16, 0x23, {SH_BYTES}, 0x2f, 0xff
    .cfi_escape 0xd9, 0x13, 0x13, 0x16, 0x13, 0x2f, 0x00, 0x01, 0x13, 0x16, 0x06, 0x16
    .cfi_escape 0x2f, 0xff, 0xb4
    .long 0x47000000                        # nop (bc 0,0: 4 bytes)
    .cfi_endproc
    .globl instrfn_s390x_exit
    .hidden instrfn_s390x_exit
    .type instrfn_s390x_exit,@function
instrfn_s390x_exit:
    .cfi_startproc
    .cfi_undefined %r14
    stmg %r4,%r5,32(%r15)
    ear %r14,%a0
    sllg %r14,%r14,32
    ear %r14,%a1
    larl %r1,instrfn_tls@indntpoff
    ag %r14,0(%r1)                          # r14 = &Tls
    cghsi {TLS_UNWOUND}(%r14),0
    jne .Lexit_slow
    lg %r4,{TLS_SHADOW_TOP}(%r14)
    clg %r4,{TLS_SHADOW_BASE}(%r14)
    je .Lexit_slow                          # no entry at all: the slow path says so
    lay %r4,-{SH_BYTES}(%r4)                        # the newest entry
    la %r5,112(%r15)                        # our slot
    clg %r5,{SH_SLOT}(%r4)
    jne .Lexit_slow                         # frames left behind by longjmp: the slow path
    .globl instrfn_s390x_exit_ours          # (tests/fixtures/c/bpsweep.c: from here on a walk
    .hidden instrfn_s390x_exit_ours         # reaches the real caller)
instrfn_s390x_exit_ours:
    RETURN_ADDRESS_IN_ENTRY
    cghsi {TLS_GUARD}(%r14),0
    jne .Lexit_pop
    larl %r5,instrfn_enabled
    cli 0(%r5),0
    je .Lexit_pop
    larl %r5,instrfn_min_ticks
    cghsi 0(%r5),0
    jne .Lexit_short                        # INSTRFN_MIN_DURATION: maybe no events at all
    # Our exit event, compact as S390_EVENT's (r0, r1 for its r5, r3): its timestamp and word
    # made in r6's and r7's slots of the returning function's save area (it restored both from
    # there; nothing reads them any more). No room: the entry is still ours, all goes slow.
    stckf 48(%r15)
    lg %r0,{SH_FN}(%r4)                     # a call that recorded nothing inside it:
    S390_MERGE %r14, 48(%r15), 64(%r15), %r0, %r1, %r5, .Lexit_pop, instrfn_s390x_exit_merge
1:  lg %r1,{TLS_TRACE_POS}(%r14)
    lg %r0,{SH_FN}(%r4)                     # the function that returned
    sg %r0,{TLS_TRACE_CBASE}(%r14)
    clgfi %r0,4294967295
    jh 8f                                   # out of the code base's reach: long
    sllg %r0,%r0,32
    stg %r0,56(%r15)
    lg %r0,48(%r15)
    sg %r0,{TLS_TRACE_TBASE}(%r14)
    clgfi %r0,(1 << {EV_TIME_BITS}) - 1
    jh 8f                                   # out of the time base's (or before it): long
    sllg %r0,%r0,2
    og %r0,56(%r15)
    oill %r0,{EV_TAG_EXIT}
    stg %r0,56(%r15)                        # the short word
    la %r0,{EV_SHORT_BYTES}(%r1)
    clg %r0,{TLS_TRACE_END}(%r14)
    jh .Lexit_slow
    csg %r1,%r0,{TLS_TRACE_POS}(%r14)
    jne 1b                                  # a handler moved it: again
    lg %r0,56(%r15)
    stg %r0,0(%r1)                          # one store: written
    j .Lexit_pop
8:  la %r0,{EV_BYTES}(%r1)
    clg %r0,{TLS_TRACE_END}(%r14)
    jh .Lexit_slow
    csg %r1,%r0,{TLS_TRACE_POS}(%r14)
    jne 1b                                  # r1 = our event
    LONG_EXIT
.Lexit_pop:
    # Popped after the event: until here a handler that interrupts us finds the entry intact
    # (it pushes and pops above it).
    lg %r1,{SH_RET}(%r4)                          # return there
    .cfi_register %r14, %r1
    mvghi {SH_SLOT}(%r4),0                       # free entries have slot 0
    stg %r4,{TLS_SHADOW_TOP}(%r14)                   # popped
    lmg %r4,%r5,32(%r15)
    br %r1
    RETURN_ADDRESS_IN_ENTRY                 # (below: r4 = the entry, as above)
.Lexit_short:
    # INSTRFN_MIN_DURATION (src/arch/x86_64/ .Lexit_short): a call shorter than instrfn_min_ticks
    # whose entry is still the thread's newest event (its callees, if any, were short too and
    # taken back already) leaves no events: its entry is taken back. The exit event is
    # reserved first, as always: while its tag is 0 the chunk is not all written, so it is
    # never committed and reused however many chunks a signal handler fills meanwhile, and
    # every access below stays inside it. Then, if the event before ours is our entry and the
    # call was short, the entry's tag is zeroed and the position moved back over both with a
    # csg that fails if a handler reserved an event after ours: then the tag goes back and our
    # exit is written where we reserved it. The count is added with one agsi.
    # stckf only stores: the clock goes through 48(S), r6's slot in the returning function's
    # save area (it restored r6 from there; nothing reads it any more).
    # r5 = &instrfn_min_ticks, r14 = &Tls, r4 = the entry; r0 and r1 free.
    stckf 48(%r15)                          # the timestamp
    lg %r1,{TLS_TRACE_POS}(%r14)
3:  la %r0,{EV_BYTES}(%r1)
    clg %r0,{TLS_TRACE_END}(%r14)
    jh .Lexit_slow                          # no room (or no chunk): all goes slow
    csg %r1,%r0,{TLS_TRACE_POS}(%r14)
    jne 3b                                  # r1 = our place (a long exit's)
    # Our entry before our place: a long one at -16, or a short one at -8 (a word at -16 with
    # tag 3 is a long event's first word: no long event's second word has a tag); the first
    # event of a chunk finds the header's zero words there.
    lg %r0,{SH_FN}(%r4)
    sllg %r0,%r0,{EV_LONG_SHIFT}
    oill %r0,({EV_ENTRY} << 2) | {EV_TAG_LONG} # our entry's first word, if long
    xg %r0,-{EV_BYTES}(%r1)
    nill %r0,0xffff - (3 << {EV_TS_SHIFT})  # (its timestamp's low bits aside)
    ltgr %r0,%r0
    jnz 6f
    llgc %r0,-{EV_BYTES}+7(%r1)             # (the first word's low byte: big-endian)
    srlg %r0,%r0,{EV_TS_SHIFT}
    nill %r0,3
    og %r0,8-{EV_BYTES}(%r1)                # the entry's timestamp
    sg %r0,48(%r15)
    lcgr %r0,%r0                            # the call's length in ticks
    clg %r0,0(%r5)
    jnl 4f                                  # long enough: recorded
    lay %r5,-{EV_BYTES}(%r1)                # r5 = where the entry begins
    j instrfn_s390x_exit_take_back
6:  llgc %r0,-{EV_BYTES}+7(%r1)             # tag 3 at -16: a long event there, not ours, and
    nill %r0,3                              # no short one at -8
    cghi %r0,{EV_TAG_LONG}
    je 4f
    lg %r0,{SH_FN}(%r4)
    sg %r0,{TLS_TRACE_CBASE}(%r14)
    sllg %r0,%r0,32
    oill %r0,{EV_TAG_ENTRY}                 # our entry's word if short, its time aside
    xg %r0,-{EV_SHORT_BYTES}(%r1)
    tmll %r0,3
    jnz 4f                                  # not a short entry
    clgfi %r0,4294967295
    jh 4f                                   # not ours (or not from these bases)
    llgf %r0,-4(%r1)                        # the word's low half (big-endian)
    srlg %r0,%r0,2                          # its time - the time base
    ag %r0,{TLS_TRACE_TBASE}(%r14)
    sg %r0,48(%r15)
    lcgr %r0,%r0                            # the call's length in ticks
    clg %r0,0(%r5)
    jnl 4f                                  # long enough: recorded
    lay %r5,-{EV_SHORT_BYTES}(%r1)          # r5 = where the entry begins
    .globl instrfn_s390x_exit_take_back
    .hidden instrfn_s390x_exit_take_back
instrfn_s390x_exit_take_back:
    # r5 = the entry, r1 = our place; r8's, r7's and r9's slots of the save area (dead, as
    # r6's) keep our place and the two words before it. (A handler that gave the thread a new chunk since
    # our reservation made the Tls bases read above another chunk's: the csg below fails then,
    # as the position moved, and all goes back as it was.)
    stg %r1,64(%r15)
    lg %r0,-8(%r1)                          # a short entry's word, or a long one's timestamp
    stg %r0,56(%r15)
    lg %r0,-{EV_BYTES}(%r1)                 # (and r9's slot the word before it)
    stg %r0,72(%r15)
    mvghi 0(%r5),0                          # the entry is unwritten again, its first word
    lghi %r0,0                              # first (and a long one's timestamp: an event
    stg %r0,-8(%r1)                         # written there next may be short)
    la %r1,{EV_BYTES}(%r1)                  # the position just past our place
    csg %r1,%r5,{TLS_TRACE_POS}(%r14)       # back over both, if nothing came after them
    jne 2f
    agsi {TLS_DROPPED}(%r14),1              # counted
    j .Lexit_pop
2:  lg %r1,64(%r15)                         # a handler came in between: the entry stays (its
    lg %r0,56(%r15)                         # words back, the one that marks it last)
    stg %r0,-8(%r1)
    lgr %r0,%r1
    sgr %r0,%r5
    cghi %r0,{EV_BYTES}
    jne 4f
    lg %r0,72(%r15)                         # (a long one's first word, as it was)
    stg %r0,-{EV_BYTES}(%r1)
4:  LONG_EXIT                               # our exit
    j .Lexit_pop
.Lexit_slow:
    .cfi_undefined %r14                     # (paths with and without the entry known come
    .globl instrfn_s390x_exit_slow_entry    # here: bpsweep.c leaves these 7 instructions out
    .hidden instrfn_s390x_exit_slow_entry   # of its walk check)
instrfn_s390x_exit_slow_entry:
    stmg %r2,%r3,16(%r15)                   # r2-r5 in the save area, as the slow path expects
    lghi %r1,0                              # no return address until the Rust side gives it
    lghi %r2,0
    la %r3,112(%r15)                        # arg 1: our slot
    larl %r4,instrfn_trace_exit_slow
    lghi %r5,2
    j instrfn_s390x_slow
    .cfi_endproc
    .size instrfn_s390x_exit, .-instrfn_s390x_exit
