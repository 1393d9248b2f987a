// instrfn trampolines for aarch64, trace events: the signal-safe reservations and event writes
// every trace fast path uses, call words, shadow-stack reservation. Assembled after base.s.

// Trace mode's signal-safe reservations, shared by the trampolines here and the XRay ones
// (src/arch/aarch64/xray.s, assembled after this file in the same block). `again` is a numeric
// label each macro defines at its loop head; `status` is a W register; every operand a
// distinct register unless said otherwise.
//
// TLS_ADDR dst, tmp: dst = &Tls of this thread (tpidr_el0 + instrfn_tls's offset from the
//   GOT, initial-exec; the linker relaxes it to an immediate in executables). tmp clobbered.
    .macro TLS_ADDR dst, tmp
    mrs     \dst, tpidr_el0
    adrp    \tmp, :gottprel:instrfn_tls
    ldr     \tmp, [\tmp, #:gottprel_lo12:instrfn_tls]
    add     \dst, \dst, \tmp
    .endm

// TRACE_EVENT again, tls, posp, pos, next, end, status, full: reserves this thread's next
//   event with a compare-and-swap of trace_pos against the room just checked (see the
//   header): tls = &Tls, posp = &tls.trace_pos (set by the caller). Out: pos = the event
//   (16 bytes, to be written timestamp first, tagged word last), next = pos + {EV_BYTES}.
//   No room (or no chunk: trace_end 0): branches to `full` with nothing reserved and no
//   exclusive access open. end is clobbered and may be status's X register. A caller may
//   branch back to `again` to reserve anew.
    .macro TRACE_EVENT again, tls, posp, pos, next, end, status, full
\again:
    ldr     \pos, [\posp]                   // our event, if there is room
    ldr     \end, [\tls, #{TLS_TRACE_END}]
    add     \next, \pos, #{EV_BYTES}
    cmp     \next, \end
    b.hi    \full                           // past the chunk's end (or no chunk)
    ldxr    \end, [\posp]                   // claimed, unless a handler moved it: again
    cmp     \end, \pos
    b.ne    \again\()b
    stxr    \status, \next, [\posp]
    cbnz    \status, \again\()b             // a handler ran between ldxr and stxr: again
    .endm

// EVENT again, tls, pos, next, end, word, ts, fn, kind, full and EVENT_K (kind in a
//   register): reserves this thread's next event and writes it, a compact one
//   (docs/trace-format.md, chunk version 2; src/arch/x86_64/ TRACE_EVENT is the reference): short
//   (8 bytes: (fn - code base) << 32 | (ts - time base) << 2 | kind) for an entry or an exit
//   (kind {EV_ENTRY} or {EV_EXIT}) with fn - code base < 2^32 and ts - time base < 2^30,
//   against the Tls copies of the chunk's bases, read after trace_pos and before the
//   exclusive load (a handler that gives the thread a new chunk meanwhile moves trace_pos:
//   again); else long (16 bytes: the timestamp with its low two bits t 0, then fn << 8 |
//   t << 5 | kind << 2 | 3, stored last).
//   Reserved as TRACE_EVENT does (a compare-and-swap of trace_pos against the room just
//   checked). word and ts are register numbers (x<word>, x<ts>): a short event's exclusive
//   load and status go in x<ts> / w<ts>, its word being made (a failed reservation reads the
//   timestamp again), a long one's in x<word>, made after. kind: EVENT an immediate (a number,
//   without #), EVENT_K a register holding it. Every operand a distinct register; fn and kind
//   are only read. Out: pos = the event. Clobbers next, end, x<word>, x<ts>. No room (or no
//   chunk): branches to `full` with nothing reserved. A caller may branch back to `again`
//   (x<ts> = a timestamp) to reserve anew.
    .macro EVENT again, tls, pos, next, end, word, ts, fn, kind, full
    EVENT_BODY \again, \tls, \pos, \next, \end, \word, \ts, \fn, \kind, 0, \full
    .endm
    .macro EVENT_K again, tls, pos, next, end, word, ts, fn, kind, full
    EVENT_BODY \again, \tls, \pos, \next, \end, \word, \ts, \fn, \kind, 1, \full
    .endm
    .macro EVENT_BODY again, tls, pos, next, end, word, ts, fn, kind, isreg, full
\again:
    ldr     \pos, [\tls, #{TLS_TRACE_POS}]  // our event, if there is room
    ldr     \end, [\tls, #{TLS_TRACE_END}]
    .if \isreg
    cmp     \kind, #{EV_EXIT}
    b.hi    8f                              // no short form for this kind
    .elseif \kind > {EV_EXIT}
    b       8f
    .endif
    ldr     x\word, [\tls, #{TLS_TRACE_CBASE}]
    sub     x\word, \fn, x\word             // function - code base
    tst     x\word, #0xffffffff00000000
    b.ne    8f                              // out of its reach: long
    ldr     \next, [\tls, #{TLS_TRACE_TBASE}]
    sub     \next, x\ts, \next              // time - time base
    tst     \next, #(-1 << {EV_TIME_BITS})
    b.ne    8f                              // out of its reach (or before it): long
    lsl     x\word, x\word, #32
    add     x\word, x\word, \next, lsl #2
    .if \isreg
    add     x\word, x\word, \kind           // the short word
    .else
    add     x\word, x\word, #\kind
    .endif
    add     \next, \pos, #{EV_SHORT_BYTES}
    cmp     \next, \end
    b.hi    \full                           // past the chunk's end (or no chunk)
    add     \end, \tls, #{TLS_TRACE_POS}
    ldxr    x\ts, [\end]                    // claimed, unless a handler moved it: again
    cmp     x\ts, \pos
    b.ne    7f
    stxr    w\ts, \next, [\end]
    cbnz    w\ts, 7f                        // a handler ran between ldxr and stxr: again
    str     x\word, [\pos]                  // one store: written
    b       9f
7:  mrs     x\ts, cntvct_el0                 // (a fresh timestamp, as x<ts> is spent)
    b       \again\()b
8:  add     \next, \pos, #{EV_BYTES}
    cmp     \next, \end
    b.hi    \full                           // past the chunk's end (or no chunk)
    add     \end, \tls, #{TLS_TRACE_POS}
    ldxr    x\word, [\end]                  // claimed, unless a handler moved it: again
    cmp     x\word, \pos
    b.ne    \again\()b
    stxr    w\word, \next, [\end]
    cbnz    w\word, \again\()b
    and     x\word, x\ts, #-4
    str     x\word, [\pos, #8]              // the timestamp (its low bits go into the word),
    lsl     x\word, \fn, #{EV_LONG_SHIFT}    // then the word that marks it written
    bfi     x\word, x\ts, #{EV_TS_SHIFT}, #2
    .if \isreg
    add     x\word, x\word, \kind, lsl #2
    add     x\word, x\word, #{EV_TAG_LONG}
    .else
    add     x\word, x\word, #((\kind << 2) | {EV_TAG_LONG})
    .endif
    str     x\word, [\pos]
9:
    .endm

// MERGE_CALL tls, fn, ts, a, b, c, d, done, label: an exit told together with its entry in
//   one word, a call word (docs/trace-format.md, chunk version 3), where the entry is the
//   thread's newest event, a short one of fn (the call recorded nothing inside it), and the
//   word can hold the entry's time, the call's length and fn (src/arch/x86_64/ MERGE_CALL is the
//   reference: the same checks, and why the pin makes it safe with signal handlers; here, too,
//   a handler runs on this thread, so it sees this code's stores in program order, and the
//   collector sees the chunk only after its retirement, a release, which the pin keeps from
//   happening before the store). tls = &Tls, fn the function, ts the exit's timestamp (both
//   only read); a, b, c, d the numbers of scratch registers (x<a> ...), all distinct. Branches to `done` with the call
//   word written; else falls through with nothing written. `label`, if given, is a hidden
//   global label at the word's store (tests/fixtures/c/exit_window.c stops there).
    .macro MERGE_CALL tls, fn, ts, a, b, c, d, done, label
    ldr     x\a, [\tls, #{TLS_TRACE_END}]
    cbz     x\a, 8f                          // no chunk
    ldr     x\b, [\tls, #{TLS_TRACE_PIN}]
    cbnz    x\b, 8f                          // held by an exit this handler interrupted
    str     x\a, [\tls, #{TLS_TRACE_PIN}]    // pin: the chunk stays ours
    ldr     x\b, [\tls, #{TLS_TRACE_POS}]
    ldr     x\c, [\tls, #{TLS_TRACE_CBASE}]
    sub     x\c, \fn, x\c                     // fn - code base
    ldr     x\d, [\tls, #{TLS_TRACE_END}]
    cmp     x\d, x\a
    b.ne    7f                              // a handler gave the thread a new chunk before the pin
    tst     x\c, #0xffffffff00000000
    b.ne    7f                              // fn out of the code base's reach
    ldur    x\a, [x\b, #-8]                   // the newest word (at a chunk's start: the
    eor     x\d, x\a, x\c, lsl #32              // header's last, which is 0)
    eor     x\d, x\d, #{EV_TAG_ENTRY}
    tst     x\d, #0xffffffff00000003
    b.ne    7f                              // not a short entry of fn
    ubfx    x\a, x\a, #2, #30                 // the entry's time - time base
    tst     x\a, #(-1 << {EV_CALL_T0_BITS})
    b.ne    7f
    ldr     x\d, [\tls, #{TLS_TRACE_TBASE}]
    sub     x\d, \ts, x\d
    sub     x\d, x\d, x\a                      // the call's length (past 2^63 if negative)
    tst     x\d, #(-1 << {EV_CALL_DUR_BITS})
    b.ne    7f
    mov     w\c, w\c                         // (fn - code base < 2^32: 32-bit arithmetic)
    eor     w\c, w\c, #0x80000000            // - 2^31
    add     w\c, w\c, #0x400, lsl #12        // + 2^22: fn - code base - EV_CALL_FN_OFFSET
    tst     x\c, #(-1 << {EV_CALL_FN_BITS})
    b.ne    7f                              // too far from the code base's middle
    lsl     x\c, x\c, #({EV_CALL_T0_BITS} + {EV_CALL_DUR_BITS})
    orr     x\c, x\c, x\d, lsl #{EV_CALL_T0_BITS}
    orr     x\c, x\c, x\a                      // the 61-bit value: f << 38 | d << 26 | t
    lsr     x\a, x\c, #5
    lsl     x\a, x\a, #8                      // its high bits to 63..8,
    ubfx    x\d, x\c, #0, #5
    orr     x\a, x\a, x\d, lsl #2              // its low 5 to 6..2
    add     x\a, x\a, #({EV_CALL_MARK} | {EV_TAG_LONG})
    .ifnb \label
    .globl  \label
    .hidden \label
\label:
    .endif
    stur    x\a, [x\b, #-8]                   // the entry's word becomes the call word
    str     xzr, [\tls, #{TLS_TRACE_PIN}]
    b       \done
7:  str     xzr, [\tls, #{TLS_TRACE_PIN}]
8:
    .endm

// SHADOW_RESERVE again, topp, end, entry, next, status, full: reserves a shadow entry above
//   shadow_top (topp = &tls.shadow_top, end = tls.shadow_end, which never changes, both set
//   by the caller) with an ldxr/stxr loop that checks the bound before it stores. Out: entry
//   = our entry (its slot is 0, as every free entry's: a handler takes it for one being
//   pushed), next = entry + {SH_BYTES}. Full (or no shadow stack yet: end 0): branches to
//   `full` with nothing reserved but the exclusive access open (the target runs clrex).
    .macro SHADOW_RESERVE again, topp, end, entry, next, status, full
\again:
    ldxr    \entry, [\topp]                 // reserve our shadow entry (its slot is 0)
    add     \next, \entry, #{SH_BYTES}
    cmp     \next, \end
    b.hi    \full
    stxr    \status, \next, [\topp]
    cbnz    \status, \again\()b
    .endm

// SHADOW_RELEASE again, topp, tmp, status: gives back the entry SHADOW_RESERVE reserved (its
//   slot still 0; a handler that pushed above it meanwhile has popped again): shadow_top -=
//   {SH_BYTES}, an ldxr/stxr loop. tmp clobbered.
    .macro SHADOW_RELEASE again, topp, tmp, status
\again:
    ldxr    \tmp, [\topp]
    sub     \tmp, \tmp, #{SH_BYTES}
    stxr    \status, \tmp, [\topp]
    cbnz    \status, \again\()b
    .endm

// STRIP dst, src: dst = src without a pointer authentication code (xpaclri works on x30
//   only, and is a NOP without PAC). Uses x17; x30 comes back as it was. In between, the CFI
//   says the return address is in x17 (for the callers, where x30 has the default rule, the
//   return address itself): a handler's walk from those instructions took x30's stand-in for
//   it and went astray (tests/fixtures/c/bpsweep.c found it).
    .macro STRIP dst, src
    mov     x17, x30
    .cfi_remember_state
    .cfi_register x30, x17
    mov     x30, \src
    hint    #7                              // xpaclri
    mov     \dst, x30
    mov     x30, x17
    .cfi_restore_state
    .endm
