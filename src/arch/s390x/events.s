# instrfn trampolines for s390x, trace events: the event every trace fast path writes, call words,
# the exit trampoline's long exit. Assembled after base.s.

# S390_EVENT tsat, hiat, kind, nochunk: the trace fast paths' event: reserves this thread's
#   next event and writes it, a compact one (docs/trace-format.md, chunk version 2;
#   src/arch/x86_64/ TRACE_EVENT is the reference): short (8 bytes: (r1 - code base) << 32 |
#   (time - time base) << 2 | kind) if r1 - code base < 2^32 and time - time base < 2^30,
#   against the Tls copies of the chunk's bases, read after the position and before the csg
#   that claims the event (a handler that gives the thread a new chunk moves the position:
#   the csg fails, and all is made again); else long (16 bytes: the timestamp with its low two
#   bits t 0, then r1 << 8 | t << 5 | kind << 2 | 3, stored last). The event is reserved with a csg of the position against
#   the room just checked, as before. In: r1 = the function, r2 = &Tls, the timestamp at
#   \tsat (stckf stores to memory only), \hiat 8 bytes of scratch memory that no handler
#   touches (what the two fast paths have is said where they call this); \kind {EV_ENTRY} or
#   {EV_EXIT}. The short word is stored with one stg (an mvc may be seen a byte at a time).
#   No room (or no chunk): jumps to \nochunk with nothing reserved. Clobbers r3, r5.
    .macro S390_EVENT tsat, hiat, kind, nochunk
3:  lg %r3,{TLS_TRACE_POS}(%r2)            # our event, if there is room
    lgr %r5,%r1
    sg %r5,{TLS_TRACE_CBASE}(%r2)          # function - code base
    clgfi %r5,4294967295
    jh 8f                                   # out of its reach: long
    sllg %r5,%r5,32
    stg %r5,\hiat                          # (the word's high half)
    lg %r5,\tsat
    sg %r5,{TLS_TRACE_TBASE}(%r2)          # time - time base
    clgfi %r5,(1 << {EV_TIME_BITS}) - 1
    jh 8f                                   # out of its reach (or before it): long
    sllg %r5,%r5,2
    og %r5,\hiat
    oill %r5,\kind                         # the short word
    stg %r5,\hiat
    la %r5,{EV_SHORT_BYTES}(%r3)
    clg %r5,{TLS_TRACE_END}(%r2)
    jh \nochunk                            # past the chunk's end (or no chunk): slow path
    csg %r3,%r5,{TLS_TRACE_POS}(%r2)
    jne 3b                                  # a handler moved it: again
    lg %r5,\hiat
    stg %r5,0(%r3)                          # one store: written
    j 9f
8:  la %r5,{EV_BYTES}(%r3)
    clg %r5,{TLS_TRACE_END}(%r2)
    jh \nochunk                            # past the chunk's end (or no chunk): slow path
    csg %r3,%r5,{TLS_TRACE_POS}(%r2)
    jne 3b                                  # r3 = our event
    lg %r5,\tsat
    nill %r5,0xfffc
    stg %r5,8(%r3)                          # the timestamp (its low bits go into the word),
    lg %r5,\tsat                           # then the word that marks it written (stores
    risbg %r5,%r5,63-{EV_TS_SHIFT}-1,128+63-{EV_TS_SHIFT},{EV_TS_SHIFT} # are seen in program order)
    stg %r5,\hiat
    sllg %r5,%r1,{EV_LONG_SHIFT}
    og %r5,\hiat
    oill %r5,(\kind << 2) | {EV_TAG_LONG}
    stg %r5,0(%r3)
9:
    .endm

# S390_MERGE tls, tsat, posat, f, w, t, done, label: an exit told together with its entry in
#   one word, a call word (docs/trace-format.md, chunk version 3), where the entry is the
#   thread's newest event, a short one of the function (the call recorded nothing inside it),
#   and the word can hold the entry's time, the call's length and the function. src/arch/x86_64/
#   MERGE_CALL is the reference: the same checks, and why the pin makes it safe with signal
#   handlers (a handler runs on this thread, so it sees these stores in program order; the
#   collector sees the chunk only after its retirement, which the pin keeps from happening
#   before the store). In: \tls = &Tls, \f = the function, the exit's timestamp at \tsat;
#   \posat 8 bytes of scratch memory no handler touches. Clobbers \f, \w, \t (three distinct
#   registers, r0 allowed for \f only). Branches to \done with the call word written; else
#   falls through with nothing written. \label is a hidden global label at the word's store
#   (tests/fixtures/c/exit_window.c stops there).
    .macro S390_MERGE tls, tsat, posat, f, w, t, done, label
    lg \w,{TLS_TRACE_END}(\tls)
    ltgr \w,\w
    jz 8f                                   # no chunk
    cghsi {TLS_TRACE_PIN}(\tls),0
    jne 8f                                  # held by an exit this handler interrupted (or off)
    stg \w,{TLS_TRACE_PIN}(\tls)           # pin: the chunk stays ours
    lg \t,{TLS_TRACE_POS}(\tls)
    stg \t,\posat
    clg \w,{TLS_TRACE_END}(\tls)
    jne 7f                                  # a handler gave the thread a new chunk before the pin
    sg \f,{TLS_TRACE_CBASE}(\tls)          # the function - code base
    clgfi \f,4294967295
    jh 7f                                   # out of the code base's reach
    lg \w,-8(\t)                           # the newest word (at a chunk's start: the
    srlg \t,\w,32                          # header's last, which is 0)
    clgr \t,\f
    jne 7f                                  # not the function's
    lghi \t,3
    ngr \t,\w
    cghi \t,{EV_TAG_ENTRY}
    jne 7f                                  # not a short entry
    risbg \w,\w,34,128+63,62                # the entry's time - time base
    clgfi \w,(1 << {EV_CALL_T0_BITS}) - 1
    jh 7f
    lg \t,\tsat
    sg \t,{TLS_TRACE_TBASE}(\tls)
    sgr \t,\w                               # the call's length (past 2^63 if negative)
    clgfi \t,(1 << {EV_CALL_DUR_BITS}) - 1
    jh 7f
    slgfi \f,{EV_CALL_FN_OFFSET}            # the function - code base - EV_CALL_FN_OFFSET
    clgfi \f,(1 << {EV_CALL_FN_BITS}) - 1   # (past 2^63 if below it)
    jh 7f                                   # too far from the code base's middle
    sllg \f,\f,{EV_CALL_T0_BITS} + {EV_CALL_DUR_BITS}
    sllg \t,\t,{EV_CALL_T0_BITS}
    ogr \f,\t
    ogr \f,\w                               # the 61-bit value: f << 38 | d << 26 | t
    srlg \w,\f,5
    sllg \w,\w,8                            # its high bits to 63..8,
    risbg \w,\f,57,61,2                     # its low 5 to 6..2
    oill \w,{EV_CALL_MARK} | {EV_TAG_LONG}
    lg \t,\posat
    .globl \label
    .hidden \label
\label:
    stg \w,-8(\t)                          # the entry's word becomes the call word
    mvghi {TLS_TRACE_PIN}(\tls),0
    j \done
7:  mvghi {TLS_TRACE_PIN}(\tls),0
8:
    .endm

# LONG_EXIT: writes the exit trampoline's long exit event at r1 (reserved): the timestamp at
#   48(%r15) with its low bits 0, then the word that marks it written, of the function of the
#   shadow entry at r4, made with 56(%r15) (r6's and r7's slots of the returning function's
#   save area: dead after its return). Clobbers r0.
    .macro LONG_EXIT
    lg %r0,48(%r15)
    nill %r0,0xfffc
    stg %r0,8(%r1)
    lg %r0,48(%r15)
    risbg %r0,%r0,63-{EV_TS_SHIFT}-1,128+63-{EV_TS_SHIFT},{EV_TS_SHIFT} # (its low bits, in place)
    stg %r0,56(%r15)
    lg %r0,{SH_FN}(%r4)
    sllg %r0,%r0,{EV_LONG_SHIFT}
    og %r0,56(%r15)
    oill %r0,({EV_EXIT} << 2) | {EV_TAG_LONG}
    stg %r0,0(%r1)
    .endm
