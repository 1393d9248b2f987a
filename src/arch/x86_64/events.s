# instrfn trampolines for x86_64, trace events: the building blocks every trace fast path uses
# (timestamps, event reservation, call words, shadow-stack reservation). Assembled after base.s.

# Trace mode's building blocks, shared by the trampolines here and the XRay ones
# (src/arch/x86_64/xray.s, assembled after this file in the same block). A signal handler on this
# thread may run between any two of their instructions (never inside one) and record events and
# push shadow entries of its own; only this thread (and so its handlers) ever writes its Tls, so
# the reservations need no lock prefix, only single instructions and the order below.
# All of them address the Tls through %fs with its offset from the thread pointer in a register
# (instrfn_tls@gottpoff); all but SCRATCH_SAVE, SCRATCH_RESTORE and SHADOW_POP clobber the
# flags.
#
# SCRATCH_SAVE at / SCRATCH_RESTORE at: the fast paths' scratch registers in the red zone
#   below %rsp, which must not move in between: rax at \at(%rsp) (-8, or -48 where -8 holds
#   something else), rcx at -16, rdx at -24, rsi at -32, rdi at -40. Clobber nothing else.
    .macro SCRATCH_SAVE at
    movq %rax, \at(%rsp)
    movq %rcx, -16(%rsp)
    movq %rdx, -24(%rsp)
    movq %rsi, -32(%rsp)
    movq %rdi, -40(%rsp)
    .endm
    .macro SCRATCH_RESTORE at
    movq \at(%rsp), %rax
    movq -16(%rsp), %rcx
    movq -24(%rsp), %rdx
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    .endm

# TIMESTAMP: rdx = the trace clock, the time-stamp counter (rdtsc's edx:eax as one word; what
#   src/arch/x86_64/mod.rs counter() reads). Clobbers rax.
    .macro TIMESTAMP
    rdtsc
    shlq $32, %rdx
    orq %rax, %rdx                          # rdx = timestamp
    .endm

# MERGE_CALL fn, save, done, label: an exit told together with its entry, in one word (a call word,
#   docs/trace-format.md, chunk version 3), where the entry is the thread's newest event, a
#   short one of fn (the call recorded nothing inside it), and the call word can hold the
#   entry's time (less than 2^{EV_CALL_T0_BITS} ticks after the time base), the call's length
#   (less than 2^{EV_CALL_DUR_BITS} ticks) and fn (within 2^({EV_CALL_FN_BITS} - 1) bytes of
#   the code base + 2^31): the entry's word becomes the call word, and nothing is reserved.
#   In: rcx = the Tls offset, rdx = the exit's timestamp; fn a register or memory operand
#   that does not use rax or r8-r11. r8-r11 are kept at save(%rsp) .. save-24(%rsp), in the
#   red zone, meanwhile (a signal frame never overwrites it). Out: at `done` with the call
#   word written, else falling through with nothing written and rdx as it was (the exit is
#   then an event of its own). Clobbers rax and the flags. `label`, if given, is a hidden
#   global label at the call word's store (tests/fixtures/c/exit_window.c stops there).
#   Why this is safe with signal handlers: one may run between any two instructions and write
#   events after ours, or fill chunks. (1) The word is stored into the chunk the thread has
#   at `pin` below: trace_pin holds its end from there on, and a handler's chunk switches do
#   not retire a pinned chunk (src/trace/ `retire_chunk`), so it is never committed and
#   reused before the store; the check after the pin proves the position and bases were read
#   in that chunk (a switch in between moves trace_end: no other chunk ends there, as the
#   pinned one cannot be reused). (2) A handler's events land after the entry's word, so the
#   word is still the newest event of ours; they were stamped after rdx, so the call word,
#   which ends at rdx, comes before them in time too. (3) A handler's own exits see the pin
#   taken and write events of their own (one pin per thread: the pin is never overwritten).
#   A handler that leaves by siglongjmp leaves the pin set: that thread makes no more call
#   words, and the chunk goes to the collector when the thread ends (nothing lost).
    .macro MERGE_CALL fn, save, done, label
    movq %r8, \save(%rsp)
    movq %r9, \save-8(%rsp)
    movq %r10, \save-16(%rsp)
    movq %r11, \save-24(%rsp)
    movq %fs:{TLS_TRACE_END}(%rcx), %r10
    testq %r10, %r10
    jz 8f                                   # no chunk
    cmpq $0, %fs:{TLS_TRACE_PIN}(%rcx)
    jne 8f                                  # held by an exit this handler interrupted
    movq %r10, %fs:{TLS_TRACE_PIN}(%rcx)    # pin: the chunk stays ours
    movq %fs:{TLS_TRACE_POS}(%rcx), %rax
    movq \fn, %r8
    subq %fs:{TLS_TRACE_CBASE}(%rcx), %r8   # fn - code base
    movq %rdx, %r9
    subq %fs:{TLS_TRACE_TBASE}(%rcx), %r9   # time - time base
    cmpq %fs:{TLS_TRACE_END}(%rcx), %r10
    jne 7f                                  # a handler gave the thread a new chunk before the pin
    movq -8(%rax), %r11                     # the newest word (at a chunk's start: the
    movq %r11, %r10                         # header's last, which is 0)
    shrq $32, %r10
    cmpq %r8, %r10
    jne 7f                                  # not of fn (or fn out of the code base's reach)
    movl %r11d, %r10d
    andl $3, %r10d
    cmpl ${EV_TAG_ENTRY}, %r10d
    jne 7f                                  # not a short entry
    shrl $2, %r11d                          # the entry's time - time base
    cmpl $((1 << {EV_CALL_T0_BITS}) - 1), %r11d
    ja 7f
    movq %r9, %r10
    subq %r11, %r10                         # the call's length (past 2^63 if negative)
    cmpq $((1 << {EV_CALL_DUR_BITS}) - 1), %r10
    ja 7f
    subq ${EV_CALL_FN_OFFSET}, %r8
    cmpq $((1 << {EV_CALL_FN_BITS}) - 1), %r8
    ja 7f                                   # too far from the code base's middle
    shlq $({EV_CALL_T0_BITS} + {EV_CALL_DUR_BITS}), %r8
    shlq ${EV_CALL_T0_BITS}, %r10
    orq %r10, %r8
    orq %r11, %r8                           # the 61-bit value: f << 38 | d << 26 | t
    movl %r8d, %r10d
    andl $31, %r10d                         # its low 5 bits go to bits 6..2,
    andq $-32, %r8
    shlq $3, %r8                            # the rest to bits 63..8
    leaq {EV_CALL_MARK}+{EV_TAG_LONG}(%r8,%r10,4), %r8
    .ifnb \label
    .globl \label
    .hidden \label
\label:
    .endif
    movq %r8, -8(%rax)                      # the entry's word becomes the call word
    movq $0, %fs:{TLS_TRACE_PIN}(%rcx)
    movq \save(%rsp), %r8
    movq \save-8(%rsp), %r9
    movq \save-16(%rsp), %r10
    movq \save-24(%rsp), %r11
    jmp \done
7:  movq $0, %fs:{TLS_TRACE_PIN}(%rcx)
8:  movq \save(%rsp), %r8
    movq \save-8(%rsp), %r9
    movq \save-16(%rsp), %r10
    movq \save-24(%rsp), %r11
    .endm

# TRACE_EVENT again, next, full, fn, kind: reserves this thread's next event and writes it,
#   a compact one (docs/trace-format.md, version 2): one word if it can be short, else two.
#   In: rcx = the Tls offset, rdx = the timestamp; fn a register or a memory operand, read
#   more than once, that must not be or use rax, rdx or next; kind entry, exit or noexit.
#   `again` is a numeric label defined here at the loop head (a caller may jump back to
#   `again`b with rdx = a timestamp to reserve anew); the macro's own labels are 7, 8 and 9.
#   The form is chosen against the Tls copies of the chunk's bases: short (8 bytes,
#   `(fn - code base) << 32 | (time - time base) << 2 | tag`) if fn - code base < 2^32 and
#   time - time base < 2^30, else long (16 bytes: `fn << 8 | t << 5 | kind << 2 | 3`, t the
#   timestamp's low two bits, then the timestamp with them 0: no long event's second word has
#   a tag). The event is reserved with a cmpxchg of the chunk position against the room
#   checked just before: rax = trace_pos, next = rax + size, next <= trace_end, then
#   trace_pos = next if it still is rax. A handler that moved it meanwhile (events of its
#   own, or a new chunk, whose bases may differ) makes the cmpxchg fail: again (a short
#   event's with a fresh timestamp, as rdx holds its word by then). So an event is never
#   reserved past a chunk's end, never left unwritten, and its word is made from the bases of
#   the chunk it is in (they are read before the cmpxchg that checks they still hold).
#   No room (past the chunk's end, or no chunk: trace_end 0): jumps to `full` with nothing
#   reserved; rax, next and rdx clobbered (the slow paths read their own time).
#   Else writes the event: a short one with one store; a long one's timestamp, then its
#   first word, which marks it written. Out: rax = the event. Clobbers next and rdx.
    .macro TRACE_EVENT again, next, full, fn, kind
\again:
    movq %fs:{TLS_TRACE_POS}(%rcx), %rax    # our event, if there is room
    .ifc \kind,noexit
    jmp 8f                                  # an entry without exit: always long
    .else
    movq \fn, \next
    subq %fs:{TLS_TRACE_CBASE}(%rcx), \next
    shrq $32, \next
    jnz 8f                                  # out of the code base's reach: long
    movq %rdx, \next
    subq %fs:{TLS_TRACE_TBASE}(%rcx), \next
    cmpq $((1 << {EV_TIME_BITS}) - 1), \next
    ja 8f                                   # out of the time base's (or before it): long
    movq \fn, %rdx
    subq %fs:{TLS_TRACE_CBASE}(%rcx), %rdx
    shlq $32, %rdx
    .ifc \kind,entry
    leaq {EV_TAG_ENTRY}(%rdx,\next,4), %rdx # the short word
    .else
    leaq {EV_TAG_EXIT}(%rdx,\next,4), %rdx
    .endif
    leaq {EV_SHORT_BYTES}(%rax), \next
    cmpq %fs:{TLS_TRACE_END}(%rcx), \next
    ja \full                                # past the chunk's end (or no chunk)
    cmpxchgq \next, %fs:{TLS_TRACE_POS}(%rcx) # claimed, unless a handler moved it
    jne 7f
    movq %rdx, (%rax)
    jmp 9f
7:  TIMESTAMP                               # a handler came in between: a fresh time, again
    jmp \again\()b
    .endif
8:  leaq {EV_BYTES}(%rax), \next
    cmpq %fs:{TLS_TRACE_END}(%rcx), \next
    ja \full                                # past the chunk's end (or no chunk)
    cmpxchgq \next, %fs:{TLS_TRACE_POS}(%rcx) # claimed, unless a handler moved it: again
    jne \again\()b
    movq %rdx, \next                        # the timestamp (its low bits go into the word),
    andq $-4, \next
    movq \next, 8(%rax)                     # then the word that marks it written
    andl $3, %edx
    shll ${EV_TS_SHIFT}, %edx
    movq \fn, \next
    shlq ${EV_LONG_SHIFT}, \next
    orq %rdx, \next
    .ifc \kind,entry
    orq $(({EV_ENTRY} << 2) | {EV_TAG_LONG}), \next
    .endif
    .ifc \kind,exit
    orq $(({EV_EXIT} << 2) | {EV_TAG_LONG}), \next
    .endif
    .ifc \kind,noexit
    orq $(({EV_NOEXIT} << 2) | {EV_TAG_LONG}), \next
    .endif
    movq \next, (%rax)
9:
    .endm

# SHADOW_RESERVE slow, full: reserves a shadow entry for the frame whose return slot is rdi.
#   In: rax = the Tls offset, rdi = the return slot.
#   The newest entry, if any, must belong to a frame above ours: if its slot is at or below
#   rdi, its frame is gone (longjmp, unwinding), or it is being pushed (slot 0): jumps to
#   `slow` with nothing reserved (rcx clobbered), and the slow path sorts it out.
#   The entry is reserved with one xadd of {SH_BYTES} to shadow_top (a handler that interrupts
#   us after it pushes above it). Its slot is 0, as every free entry's: 0 tells a handler's
#   slow path that the entry is still being pushed (alive); the caller fills the entry and
#   writes its slot last.
#   Out: rcx = the Tls offset, rdi = our entry, rax = its end. Full (or no shadow stack yet:
#   shadow_end 0): jumps to `full` with the entry reserved, to be given back (SHADOW_RELEASE).
    .macro SHADOW_RESERVE slow, full
    movq %fs:{TLS_SHADOW_TOP}(%rax), %rcx
    cmpq %fs:{TLS_SHADOW_BASE}(%rax), %rcx
    je .Lshadow_empty\@
    cmpq %rdi, {SH_SLOT}-{SH_BYTES}(%rcx)   # the newest entry's frame at or below ours is
    jbe \slow                               # gone (longjmp), or being pushed (slot 0): the
                                            # slow path sorts it out
.Lshadow_empty\@:
    movq %rax, %rcx                         # rcx = Tls offset from here on
    movq ${SH_BYTES}, %rdi
    xaddq %rdi, %fs:{TLS_SHADOW_TOP}(%rcx)  # rdi = our shadow entry (its slot is 0)
    leaq {SH_BYTES}(%rdi), %rax
    cmpq %fs:{TLS_SHADOW_END}(%rcx), %rax
    ja \full                                # full: nothing recorded yet
    .endm

# SHADOW_RELEASE: gives back the entry SHADOW_RESERVE reserved, its slot still 0 (a handler
#   that pushed above it meanwhile has popped again, so it is the newest): shadow_top -=
#   {SH_BYTES}, one instruction. In: rcx = the Tls offset.
    .macro SHADOW_RELEASE
    subq ${SH_BYTES}, %fs:{TLS_SHADOW_TOP}(%rcx) # give the shadow entry back (slot still 0)
    .endm

# SHADOW_POP entry: pops the newest shadow entry (a register) once its exit is written: its
#   slot zeroed first (free entries have slot 0, which SHADOW_RESERVE relies on), then
#   shadow_top = entry. Until then a handler that interrupts us finds the entry intact (it
#   pushes and pops above it). In: rcx = the Tls offset.
    .macro SHADOW_POP entry
    movq $0, {SH_SLOT}(\entry)                 # free entries have slot 0
    movq \entry, %fs:{TLS_SHADOW_TOP}(%rcx)    # popped
    .endm
