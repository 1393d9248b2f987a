// instrfn trampolines for aarch64, the exit trampoline of trace mode: where an instrumented
// function returns to when its return address was replaced, its return pad and its unwind
// information.

// instrfn_aarch64_exit: where an instrumented function returns to in trace mode.
//   Entry (by the function's ret): sp = the function's CFA, x29 = the frame pointer it
//   restored (its caller's), x0-x8 and v0-v7 (z0-z7, p0-p3 with SVE) may hold its result, x8
//   the indirect result address. Preserved: x0-x8, x18-x29, sp, all FP/SIMD/SVE state
//   (the fast part touches none of it; the slow part saves it all). Clobbered: x9-x17 and
//   NZCV (the caller may not expect them after a return); x30 comes back as the original
//   return address, where we return (`ret`, so a BTI-guarded caller needs no landing pad).
//   The newest shadow entry is the returning frame's if its frame pointer is x29 and its slot
//   lies below sp (and is a frame's: not 0, an entry being pushed, nor 1, a tombstone). Then,
//   as on x86_64, the exit event is written first (reserved as in FAST_PATH, against the room
//   just checked), and the entry popped after it: read the original return address, zero
//   the slot (free; a handler that comes between the two stores takes the entry for one
//   being pushed: alive), lower shadow_top. Until then a signal handler that interrupts us
//   finds the entry intact (it pushes and pops above it). With INSTRFN_MIN_DURATION
//   (instrfn_min_ticks nonzero) a short call whose entry is still the newest event has that
//   entry taken back instead of an exit written (.Lexit_short), and is counted in the Tls
//   dropped word. Anything else (frames left behind by longjmp, an unwinder that ran, no
//   room for the event) goes to instrfn_aarch64_exit_slow with the entry still pushed.
//   Executed (qemu -singlestep -d exec): the fast part, 45 instructions to the original
//   return address, ret included (42 before the INSTRFN_MIN_DURATION test; 38 when it popped
//   before writing its event, and reserved it against an end loaded once); 64 when it takes
//   a short call's entry back (counted from the code: 56 before it reserved its exit first).
//   Unwinding (a handler that interrupts us and walks the stack, a sampling profiler): once the
//   newest entry is known to be the returning frame's (`instrfn_aarch64_exit_ours`), the CFI
//   says where the caller's return address is, in the entry (x30 saved at [x9 + SH_RET]),
//   and after it is loaded, in x30 itself (CFA = sp throughout), so an unwinder goes on into
//   the real caller (tests/fixtures/c/bpsweep.c checks it at every instruction of the fast
//   path). Before that, and in the slow part, the return address is marked undefined: an
//   unwinder that gets here stops (the unwinder entry points are wrapped to put the real return
//   addresses back first, src/runtime/interpose.c, but the returning frame's is not on the stack).
//   A return address that points at the label (a replaced one, met by an unwinder linked into
//   the program, which no wrapper reaches: C++ with -static-libgcc) is looked up as address - 1:
//   the nop before the label, instrfn_aarch64_return_pad, whose FDE describes a frame between
//   the returning function and its caller, as x86_64's (src/arch/x86_64/): the caller's sp is sp,
//   the frame's own CFA sp + 16, and the caller's return address the `ret` word of the newest
//   shadow entry whose frame pointer (SH_FP) is x29, found by a DWARF expression
//   (scripts/return-pad-cfi.py aarch64) that takes its own pc from x30 (libgcc restores the
//   return address column as a register; LLVM's libunwind does not, so the pad is for libgcc,
//   where aarch64 exits are traced by default), and from the pc-relative word before the pad
//   the registry instrfn_registry.
// RETURN_ADDRESS_IN_ENTRY: CFI, the caller's return address (x30) is saved at [x9 + SH_RET]:
//   DW_CFA_expression x30, DW_OP_breg9 SH_RET (a one-byte SLEB128: src/trace/ asserts it).
    .macro RETURN_ADDRESS_IN_ENTRY
    .cfi_escape 0x10, 30, 2, 0x79, {SH_RET}
    .endm

    .p2align 4
instrfn_aarch64_registry_rel:
    .quad instrfn_registry - instrfn_aarch64_registry_rel
    .globl instrfn_aarch64_return_pad
    .hidden instrfn_aarch64_return_pad
instrfn_aarch64_return_pad:
    .cfi_startproc
    .cfi_def_cfa sp, 16
    .cfi_escape 0x16, 31, 2, 0x8f, 0x00     // DW_CFA_val_expression sp: DW_OP_breg31 0
    .cfi_escape 0x10, 30, 103, 0x8e, 0x74, 0x12, 0x06, 0x22, 0x12, 0x23, 0x08, 0x06, 0x16, 0x06, 0x06
    .cfi_escape 0x8d, 0x00, 0x16, 0x8e, 0x74, 0x12, 0x06, 0x22, 0x23, 0x10, 0x15, 0x01
    .cfi_escape 0x30, 0x29, 0x28, 0x4a, 0x00, 0x15, 0x01, 0x23, {BLK_SHADOW}, 0x06, 0x12, 0x30
    .cfi_escape 0x29, 0x28, 0x38, 0x00, 0x12, 0x15, 0x05, 0x22, 0x17, 0x12, 0x15, 0x03
    .cfi_escape 0x2a, 0x28, 0x26, 0x00, 0x12, 0x23, {SH_SLOT}, 0x06, 0x12, 0x30, 0x29, 0x28
    .cfi_escape 0x1b, 0x00, 0x13, 0x12, 0x23, {SH_FP}, 0x06, 0x15, 0x05, 0x29, 0x28, 0x05
    .cfi_escape 0x00, 0x23, {SH_BYTES}, 0x2f, 0xdf, 0xff, 0x16, 0x13, 0x12, 0x23, {SH_RET}, 0x16
    .cfi_escape 0x23, {SH_BYTES}, 0x2f, 0xd4, 0xff, 0x13, 0x13, 0x16, 0x13, 0x2f, 0x01, 0x00
    .cfi_escape 0x13, 0x16, 0x06, 0x16, 0x2f, 0xaf, 0xff
    nop
    .cfi_endproc
    .globl instrfn_aarch64_exit
    .hidden instrfn_aarch64_exit
    .type instrfn_aarch64_exit,%function
instrfn_aarch64_exit:
    .cfi_startproc
    .cfi_undefined x30
    TLS_ADDR x16, x17                       // &Tls
    ldr     x17, [x16, #{TLS_UNWOUND}]
    cbnz    x17, .Lexit_slow
    ldr     x9, [x16, #{TLS_SHADOW_TOP}]
    ldr     x10, [x16, #{TLS_SHADOW_BASE}]
    cmp     x9, x10
    b.ls    .Lexit_slow                     // no entry (cannot be): the slow path says so
    sub     x9, x9, #{SH_BYTES}             // the newest entry
    ldr     x11, [x9, #{SH_SLOT}]
    ldp     x12, x13, [x9, #{SH_FN}]               // function, frame pointer
    cmp     sp, x11                         // the slot lies below sp,
    ccmp    x11, #1, #0, hi                 // is above 1 (0: being pushed, 1: a tombstone),
    ccmp    x13, x29, #0, hi                // and the frame pointer is x29:
    b.ne    .Lexit_slow                     // else not the returning frame's
    .globl  instrfn_aarch64_exit_ours       // (tests/fixtures/c/bpsweep.c: from here on a walk
    .hidden instrfn_aarch64_exit_ours       // reaches the real caller)
instrfn_aarch64_exit_ours:
    RETURN_ADDRESS_IN_ENTRY
    ldr     x17, [x16, #{TLS_GUARD}]
    cbnz    x17, .Lexit_pop                 // runtime code running: no event
    adrp    x17, instrfn_enabled
    ldrb    w17, [x17, #:lo12:instrfn_enabled]
    cbz     w17, .Lexit_pop
    mrs     x15, cntvct_el0                 // timestamp
    add     x14, x16, #{TLS_TRACE_POS}
    adrp    x17, instrfn_min_ticks
    ldr     x17, [x17, #:lo12:instrfn_min_ticks]
    cbnz    x17, .Lexit_short               // INSTRFN_MIN_DURATION: maybe no events at all
    // A call word where the call recorded nothing inside it; else x10 = our event (no
    // room, or no chunk: nothing popped yet, the slow path does all)
    MERGE_CALL x16, x12, x15, 10, 11, 13, 14, .Lexit_pop, instrfn_aarch64_exit_merge
    EVENT 1, x16, x10, x11, x13, 14, 15, x12, {EV_EXIT}, .Lexit_slow
.Lexit_pop:
    ldr     x30, [x9, #{SH_RET}]                   // we return there
    .cfi_same_value x30
    str     xzr, [x9, #{SH_SLOT}]                  // free entries have slot 0
    str     x9, [x16, #{TLS_SHADOW_TOP}]           // popped
    ret
    RETURN_ADDRESS_IN_ENTRY                 // (below: x9 = the entry, as above)
.Lexit_short:
    // INSTRFN_MIN_DURATION (src/arch/x86_64/ .Lexit_short): a call shorter than instrfn_min_ticks
    // whose entry is still the thread's newest event (its callees, if any, were short too and
    // taken back already) leaves no events: its entry is taken back. The exit event (here
    // always a long one) is reserved first, as always: while its first word is 0 the chunk is
    // not all written, so it is never committed and reused however many chunks a signal
    // handler fills meanwhile, and every access below stays inside it. Then, if the event
    // before ours is our entry (a long one at -16, or a short one at -8: the first event of a
    // chunk finds the header's zero words there) and the call was short, the entry's words
    // are zeroed and the position moved back over both with a compare-and-swap (ldxr/stxr, as
    // the reservation) that fails if a handler reserved an event after ours: then the entry's
    // words go back and our exit is written where we reserved it. (A word at -16 with tag 3
    // and bit 7 clear is a long event's first word: no long event's second word has a tag.)
    // x17 = instrfn_min_ticks, x15 = timestamp, x14 = &trace_pos, x12 = the function, x9 =
    // the entry; x10, x11, x13 free.
    TRACE_EVENT 3, x16, x14, x10, x11, x13, w13, .Lexit_slow // x10 = our place
    lsl     x13, x12, #{EV_LONG_SHIFT}
    add     x13, x13, #(({EV_ENTRY} << 2) | {EV_TAG_LONG}) // our entry's first word, if long
    ldur    x11, [x10, #-{EV_BYTES}]
    bfi     x11, xzr, #{EV_TS_SHIFT}, #2    // (its timestamp's low bits aside)
    cmp     x11, x13
    b.ne    6f
    ldur    x11, [x10, #-{EV_BYTES}]
    ubfx    x11, x11, #{EV_TS_SHIFT}, #2
    ldur    x13, [x10, #-8]
    orr     x11, x11, x13                   // the entry's timestamp
    sub     x11, x15, x11                   // the call's length in ticks
    cmp     x11, x17
    b.hs    7f                              // long enough: recorded
    sub     x11, x10, #{EV_BYTES}           // where the entry starts
    b       instrfn_aarch64_exit_take_back
6:  ldur    x13, [x10, #-{EV_BYTES}]
    tbnz    x13, #7, .Lexit_short_at8       // a call word there (bit 7): the event before ours
    and     x13, x13, #3                    // is at -8
    cmp     x13, #{EV_TAG_LONG}
    b.eq    7f                              // a long event there, not ours: no short one at -8
.Lexit_short_at8:
    ldr     x13, [x16, #{TLS_TRACE_CBASE}]
    sub     x13, x12, x13
    lsl     x13, x13, #32
    add     x13, x13, #{EV_TAG_ENTRY}       // our entry's word if short, its time aside
    ldur    x11, [x10, #-8]
    eor     x13, x13, x11
    tst     x13, #0xffffffff00000003
    b.ne    7f                              // not a short entry of ours
    ubfx    x13, x11, #2, #30               // its time - the time base
    ldr     x11, [x16, #{TLS_TRACE_TBASE}]
    add     x13, x13, x11
    sub     x13, x15, x13                   // the call's length in ticks
    cmp     x13, x17
    b.hs    7f                              // long enough: recorded
    sub     x11, x10, #{EV_SHORT_BYTES}     // where the entry starts
    .globl  instrfn_aarch64_exit_take_back
    .hidden instrfn_aarch64_exit_take_back
instrfn_aarch64_exit_take_back:
    // x11 = the entry, x10 = our place. (A handler that gave the thread a new chunk since our
    // reservation made the Tls bases read above another chunk's: the compare-and-swap below
    // fails then, as the position moved, and everything goes back as it was.)
    ldur    x13, [x10, #-8]                 // a short entry's word, or a long one's timestamp:
    sub     x17, x10, x11                   // then with its low bits from the first word
    cmp     x17, #{EV_BYTES}
    b.ne    1f
    ldur    x17, [x11]
    ubfx    x17, x17, #{EV_TS_SHIFT}, #2
    orr     x13, x13, x17
1:  str     xzr, [x11]                      // the entry is unwritten again, its first word
    stur    xzr, [x10, #-8]                 // first (and a long one's timestamp: an event
                                            // written there next may be short)
    add     x10, x10, #{EV_BYTES}           // the position just past our place
2:  ldxr    x17, [x14]                      // back over both, if nothing came after them
    cmp     x17, x10
    b.ne    5f
    stxr    w17, x11, [x14]
    cbnz    w17, 2b                         // a handler ran between ldxr and stxr: again
    add     x13, x16, #{TLS_DROPPED}        // counted (a handler may count too)
4:  ldxr    x10, [x13]
    add     x10, x10, #1
    stxr    w17, x10, [x13]
    cbnz    w17, 4b
    b       .Lexit_pop
5:  clrex                                   // a handler came in between: the entry stays
    sub     x10, x10, #{EV_BYTES}           // our place again
    sub     x17, x10, x11                   // its words back, the one that marks it last
    cmp     x17, #{EV_BYTES}
    b.eq    3f
    stur    x13, [x10, #-8]                 // a short one's
    b       7f
3:  and     x17, x13, #-4                   // a long one's: timestamp, then first word
    stur    x17, [x10, #-8]
    lsl     x17, x12, #{EV_LONG_SHIFT}
    bfi     x17, x13, #{EV_TS_SHIFT}, #2
    add     x17, x17, #(({EV_ENTRY} << 2) | {EV_TAG_LONG})
    stur    x17, [x10, #-{EV_BYTES}]
7:  and     x17, x15, #-4                   // our exit: timestamp, then the word that marks it
    str     x17, [x10, #8]
    lsl     x17, x12, #{EV_LONG_SHIFT}
    bfi     x17, x15, #{EV_TS_SHIFT}, #2
    add     x17, x17, #(({EV_EXIT} << 2) | {EV_TAG_LONG})
    str     x17, [x10]
    b       .Lexit_pop
.Lexit_slow:
    .cfi_undefined x30                      // (paths with and without the entry known come
    .globl  instrfn_aarch64_exit_slow_entry // here: bpsweep.c leaves these 5 instructions out
    .hidden instrfn_aarch64_exit_slow_entry // of its walk check)
instrfn_aarch64_exit_slow_entry:
    // instrfn_aarch64_trace_exit(tls, sp = the function's CFA, x29): finds the returning
    // frame's entry, closes the ones above it, pops it, writes its exit, returns its original
    // return address
    mov     x15, sp
    mov     x17, x29
    adrp    x16, instrfn_aarch64_trace_exit
    add     x16, x16, #:lo12:instrfn_aarch64_trace_exit
    b       instrfn_aarch64_exit_slow
    .cfi_endproc
    .size instrfn_aarch64_exit, .-instrfn_aarch64_exit
