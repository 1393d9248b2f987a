# instrfn trampolines for riscv64, trace events: the event every trace fast path writes, and call
# words. Assembled after base.s.

# TRACE_EVENT kind, value, nochunk, ts, read=1: the fast paths' event: take the timestamp
#   (rdtime, into \ts; with read=0 the caller just did), then reserve this thread's next event and write it, a compact one
#   (docs/trace-format.md, chunk version 2; src/arch/x86_64/ TRACE_EVENT is the reference): short
#   (8 bytes: (value - code base) << 32 | (ts - time base) << 2 | kind) if value - code base
#   < 2^32 and ts - time base < 2^30, against the Tls copies of the chunk's bases, read after
#   the position and before the lr.d; else long (16 bytes: the timestamp with its low two
#   bits t 0, then value << 8 | t << 5 | kind << 2 | 3, which marks it written). The event is reserved with a compare-and-swap of
#   the position against the room just checked (lr.d/sc.d: the position loaded again must be
#   the one checked, else a signal handler moved it, or gave the thread another chunk with
#   other bases, and all is made again; a handler that runs between lr.d and sc.d makes sc.d
#   fail, as the kernel clears the reservation on every trap return). So an event is never
#   reserved past its chunk's end, and never left unwritten (a hole, which a reader takes for
#   the end of the chunk's data) because a handler took the next chunk while it was being
#   reserved. A short event's word is made before the lr.d, so \ts holds the lr.d's value and
#   sc.d's status there (a failed reservation reads the timestamp again).
#   No chunk, or no room (end = 0 included): jumps to \nochunk with nothing reserved (the
#   slow path takes a new chunk). \kind: {EV_ENTRY} or {EV_EXIT}. t0 = &Tls; clobbers t1, t2,
#   t3, \ts.
    .macro TRACE_EVENT kind, value, nochunk, ts, read=1
    .if \read
    rdtime \ts                             # the timestamp first: as close to the call as can be
    .endif
1:  ld t1, {TLS_TRACE_POS}(t0)             # t1 = our event, if there is room
    ld t2, {TLS_TRACE_CBASE}(t0)
    sub t2, \value, t2                     # function - code base
    srli t3, t2, 32
    bnez t3, 8f                            # out of its reach: long
    ld t3, {TLS_TRACE_TBASE}(t0)
    sub t3, \ts, t3                        # time - time base
    srli t3, t3, {EV_TIME_BITS}
    bnez t3, 8f                            # out of its reach (or before it): long
    ld t3, {TLS_TRACE_TBASE}(t0)           # (a handler that changed it moved the position)
    sub t3, \ts, t3
    slli t2, t2, 32
    slli t3, t3, 2
    or t2, t2, t3
    ori t2, t2, \kind                      # t2 = the short word
    ld t3, {TLS_TRACE_END}(t0)
    addi t1, t1, {EV_SHORT_BYTES}          # t1 = the end of our event
    bltu t3, t1, \nochunk                  # no room (or no chunk)
    addi t3, t0, {TLS_TRACE_POS}
    lr.d \ts, (t3)
    addi \ts, \ts, {EV_SHORT_BYTES}
    bne \ts, t1, 7f                        # moved since the check: again
    sc.d \ts, t1, (t3)
    bnez \ts, 7f                           # reservation lost (a trap came between): again
    sd t2, -{EV_SHORT_BYTES}(t1)           # one store: written
    j 9f
7:  rdtime \ts                             # (a fresh timestamp: \ts is spent)
    j 1b
8:  ld t3, {TLS_TRACE_END}(t0)
    addi t1, t1, {EV_BYTES}                # t1 = the end of our event
    bltu t3, t1, \nochunk                  # no room (or no chunk)
    addi t2, t0, {TLS_TRACE_POS}
    lr.d t3, (t2)
    addi t3, t3, {EV_BYTES}
    bne t3, t1, 1b                         # moved since the check: check again
    sc.d t3, t1, (t2)
    bnez t3, 1b                            # reservation lost (a trap came between): again
    andi t3, \ts, -4
    sd t3, 8-{EV_BYTES}(t1)                # the timestamp (its low bits go into the word),
    andi \ts, \ts, 3                       # then the word that marks it written
    slli \ts, \ts, {EV_TS_SHIFT}
    slli t3, \value, {EV_LONG_SHIFT}
    or t3, t3, \ts
    ori t3, t3, (\kind << 2) | {EV_TAG_LONG}
    sd t3, -{EV_BYTES}(t1)
9:
    .endm

# MERGE_CALL fn, ts, done, label: an exit told together with its entry in one word, a call
#   word (docs/trace-format.md, chunk version 3), where the entry is the thread's newest
#   event, a short one of fn (the call recorded nothing inside it), and the word can hold the
#   entry's time, the call's length and fn. src/arch/x86_64/ MERGE_CALL is the reference: the same
#   checks, and why the pin makes it safe with signal handlers (a handler runs on this thread,
#   so it sees this code's stores in program order; the collector sees the chunk only after
#   its retirement, a release, which the pin keeps from happening before the store). t0 =
#   &Tls, fn the function, ts the exit's timestamp (both only read); clobbers t1, t2, t3, x,
#   y (a2, a3 unless given). Branches to `done` with the call word written; else falls
#   through with nothing written. `label` is a hidden global label at the word's store
#   (tests/fixtures/c/exit_window.c stops there).
    .macro MERGE_CALL fn, ts, done, label, x=a2, y=a3
    ld t1, {TLS_TRACE_END}(t0)
    beqz t1, 8f                            # no chunk
    ld t2, {TLS_TRACE_PIN}(t0)
    bnez t2, 8f                            # held by an exit this handler interrupted (or off)
    sd t1, {TLS_TRACE_PIN}(t0)             # pin: the chunk stays ours
    ld t2, {TLS_TRACE_POS}(t0)
    ld t3, {TLS_TRACE_CBASE}(t0)
    sub t3, \fn, t3                        # t3 = fn - code base
    ld \x, {TLS_TRACE_END}(t0)
    bne \x, t1, 7f                         # a handler gave the thread a new chunk before the pin
    srli \x, t3, 32
    bnez \x, 7f                            # fn out of the code base's reach
    ld t1, -8(t2)                          # the newest word (at a chunk's start: the header's
    slli \x, t3, 32                        # last, which is 0)
    xor \x, \x, t1
    xori \x, \x, {EV_TAG_ENTRY}
    srli \y, \x, 32
    bnez \y, 7f
    andi \y, \x, 3
    bnez \y, 7f                            # not a short entry of fn
    slli t1, t1, 32
    srli t1, t1, 34                        # t1 = the entry's time - time base
    srli \y, t1, {EV_CALL_T0_BITS}
    bnez \y, 7f
    ld \x, {TLS_TRACE_TBASE}(t0)
    sub \x, \ts, \x
    sub \x, \x, t1                         # the call's length (past 2^63 if negative)
    srli \y, \x, {EV_CALL_DUR_BITS}
    bnez \y, 7f
    li \y, {EV_CALL_FN_OFFSET}
    sub t3, t3, \y                         # fn - code base - EV_CALL_FN_OFFSET (past 2^63 if
    srli \y, t3, {EV_CALL_FN_BITS}         # below it)
    bnez \y, 7f                            # too far from the code base's middle
    slli t3, t3, {EV_CALL_T0_BITS} + {EV_CALL_DUR_BITS}
    slli \x, \x, {EV_CALL_T0_BITS}
    or t3, t3, \x
    or t3, t3, t1                          # the 61-bit value: f << 38 | d << 26 | t
    srli \x, t3, 5
    slli \x, \x, 8                         # its high bits to 63..8,
    andi t3, t3, 31
    slli t3, t3, 2
    or \x, \x, t3                          # its low 5 to 6..2
    ori \x, \x, {EV_CALL_MARK} | {EV_TAG_LONG}
    .globl \label
    .hidden \label
\label:
    sd \x, -8(t2)                          # the entry's word becomes the call word
    sd zero, {TLS_TRACE_PIN}(t0)
    j \done
7:  sd zero, {TLS_TRACE_PIN}(t0)
8:
    .endm
