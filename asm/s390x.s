# instrfn trampolines for s390x Linux (z/Architecture ELF ABI), GNU as syntax.
#
# Same plan, names and shared layouts (Tls, ArcTable, slot, hash) as asm/x86_64.s, the annotated
# reference; this file documents only how s390x differs. Assembled as one `global_asm!` block by
# src/arch/s390x.rs, whose naked exported stubs (mcount, _mcount, __fentry__,
# __cyg_profile_func_enter/exit, the guarded entry points) branch into the routines below.
#
# What differs from x86_64
# - Calls are `brasl %rN,target`: the return address goes into a register, not onto the stack.
#   gcc -pg and LLVM emit `stg %r14,8(%r15); brasl %r14,_mcount (LLVM: mcount); lg %r14,8(%r15)`
#   before the prologue: self_pc = %r14, from_pc = the word at 8(%r15) (the "reserved" word of
#   the 160-byte register save area). gcc -mfentry emits `brasl %r0,__fentry__` as the first
#   instruction: self_pc = %r0, from_pc = %r14; `br %r0` does not branch (r0 means "no
#   register"), so both trampolines return through %r1, which like %r0 the ABI lets any call
#   clobber.
# - Everything but %r0/%r1 must survive: LLVM declares mcount with the AnyReg register mask
#   (r2-r15, f0-f15, v0-v31), gcc emits the call before any register is saved.
# - No red zone: memory below %r15 belongs to signal handlers. Instead, a function called with
#   %r15 = S may store into its caller's 160-byte register save area at S+16..S+159 (S+0 is the
#   caller's backchain, S+8 holds from_pc for mcount). Both trampolines are entered before the
#   instrumented function's prologue, so that area is the instrumented function's own, still
#   unused, save area. The fast path keeps %r2-%r5 there; the slow path also saves %r6-%r15 there
#   in their ABI slots, then allocates its own frame with a backchain.
# - The DWARF CFA is %r15 + 160 at entry (not %r15 + 8). The return-address column is %r14 for
#   mcount, %r0 for __fentry__ and %r1 in the shared slow path (`.cfi_return_column`), so an
#   unwinder finds the instrumented function's pc in each, and its own %r14 kept apart.
# - The thread pointer is the access-register pair a0:a1 (high:low); initial-exec TLS is
#   `larl` of the GOT slot `instrfn_tls@indntpoff`, whose content is the offset from it.
# - Vector registers: with the vector facility the 32 128-bit registers overlay f0-f15 (f<n> is
#   the left half of v<n>). The slow path tests HWCAP_S390_VX (getauxval(AT_HWCAP), asked once)
#   and saves v0-v31 with it, f0-f15 only without it, so the trampolines run on any z/Arch CPU
#   (the crate's target baseline, z10) and never execute a vector instruction on a machine or
#   kernel without the facility.
# - Big-endian, so gmon.out is written big-endian (native order), as s390x gprof expects.
# - Inserting a new arc in the trampoline (asm/x86_64.s, .Linsert) needs no extra register:
#   the claim is `csg` (compare and swap, one instruction, so a signal handler on this thread
#   sees the slot either empty or claimed), its comparand is r4, and r4 (the slot offset) is
#   recomputed from the slot address only when a handler claimed the slot first.
#
# Trace mode (src/trace.rs; the plan and its rules are asm/x86_64.s's)
# - The return address is replaced where the function takes it from next: the word at 8(%r15)
#   for mcount (the function reloads r14 from it right after the call), r14 itself for
#   __fentry__ (the fast path sets it before returning through r1).
# - A frame is known by its slot, S + 112 for both kinds, S being its entry %r15: r14's slot
#   in its register save area, where its prologue saves r14 (by then the trampoline's address)
#   unless it is a leaf. The function returns with %r15 = S again, so the exit trampoline
#   finds its slot the same way. One definition for both kinds keeps frames of mcount and
#   fentry code comparable (a callee's S lies at least 160 bytes below its caller's).
# - mcount code is only hijacked if the instruction after its call reloads r14 from 8(%r15)
#   (checked at the return address): clang 14 calls mcount after its prologue, with no return
#   address at 8(%r15), and gets entries without exits (EV_NOEXIT), nothing replaced.
# - The slow path hands the Rust side that slot with the original return address in it, so
#   that `*slot = trampoline` takes effect: for __fentry__ it is r14 as the slow path saved it
#   (and restores it from); for mcount the word at 8(%r15) is moved there first and back
#   afterwards (r14 is self_pc = r1 then, restored from r1).
# - Unwinding: before an unwinder walks the stack src/trace.rs puts `*slot = ret` back into
#   every slot that holds the trampoline, and the trampoline again afterwards. Every frame an
#   unwinder walks through, but the innermost one of a signal handler's context, is suspended
#   in a call, so it is past its prologue and not a leaf: it saved r14 at S + 112 (the standard
#   frame layout, gcc's and LLVM's), exactly where its CFI makes the unwinder look, so the
#   unwinder sees the original return address. A leaf, or a frame interrupted before its
#   prologue, keeps the trampoline in r14 (or at 8(%r15)): its slot is a save slot it does not
#   use, the write changes nothing it reads, and an unwinder that starts in it stops at the
#   trampoline (whose CFI has no return address). Code that keeps r14 elsewhere
#   (-mpacked-stack, hand-written frames) gets no such fix-up: unwinding through it stops at
#   the trampoline, and the write only happens where the word holds the trampoline's address.
# - A tail call (`jg` from a traced function to another, r14 or 8(%r15) still holding the
#   trampoline) finds the newest entry on its own slot and goes to the slow path, which ends
#   the caller and gives the callee its return address (src/trace.rs).
# - No red zone: the fast paths keep their scratch registers in the instrumented function's
#   save area as in gmon mode; the exit trampoline keeps r4/r5 in the returning function's save
#   area (S + 32), which nothing uses any more, and its slow part runs in the slow path's frame.
# - Reservations (16 bytes of the chunk, 32 of the shadow stack) are compare-and-swap loops:
#   z10 has no interlocked load-and-add (laag came with z196). Each loop checks for room
#   before it claims, so only the shadow entry may have to be given back (agsi, one
#   instruction). Shadow entries follow x86_64's protocol (src/trace.rs, `in_progress`): a
#   free entry's slot is 0 and every pop zeroes it, the entry fast path writes the slot last
#   (until then the entry is "being pushed", alive), and the exit trampoline writes its event
#   before it pops.
# - INSTRFN_EXITS=off (instrfn_mode 2): mcount and fentry code get entries without exit
#   (EV_NOEXIT) on the fast path, nothing replaced, as clang 14's mcount calls do.
# - The clock is the TOD clock, `stckf` (bit 51 = 1 microsecond: 4096 ticks per microsecond),
#   stored straight into the event.
# - Events and chunk headers are big-endian (native order); the reader tells by the header's
#   version field.

    # Shared data (instrfn_tls, instrfn_enabled, instrfn_all_signals) is in asm/data.s.
    # The layout operands of trampoline_asm! used here: Tls {TLS_TABLE} table, {TLS_GUARD} guard;
    # ArcTable {TBL_MASK} mask, {TBL_LEN} len, {TBL_LIMIT} limit, {TBL_SHIFT} shift, {TBL_LAST} last, {TBL_LOST} lost;
    # slots of {SLOT_SIZE} (1 << {SLOT_SHIFT}) bytes, self_pc at {SLOT_SELF}, from_pc at {SLOT_FROM}, count at {SLOT_COUNT}
    # (from the table base plus the slot offset); the hash multiplier {HASH_MUL} comes from
    # instrfn_hash_mul (asm/data.s).
    # Trace mode's: Tls {TLS_TRACE_POS} trace_pos, {TLS_TRACE_END} trace_end, {TLS_SHADOW_TOP} shadow_top,
    # {TLS_SHADOW_END} shadow_end, {TLS_SHADOW_BASE} shadow_base, {TLS_UNWOUND} unwound, {TLS_DROPPED} dropped; shadow entries of {SH_BYTES}
    # bytes: original return address at {SH_RET}, slot at {SH_SLOT}, function at {SH_FN}, a spare word at {SH_SPARE}; Tls
    # {TLS_TRACE_TBASE} trace_tbase and {TLS_TRACE_CBASE} trace_cbase, the chunk's bases; compact events (S390_EVENT): short
    # ones of {EV_SHORT_BYTES} bytes, tag {EV_TAG_ENTRY} entry or {EV_TAG_EXIT} exit, long ones of {EV_BYTES}, (address << {EV_LONG_SHIFT}) |
    # (t << {EV_TS_SHIFT}) | (kind << 2) | {EV_TAG_LONG} then the timestamp with its low two bits t 0, kinds {EV_ENTRY} entry, {EV_EXIT} exit and {EV_NOEXIT} entry without exit.

    .data
    # Vector facility, found by the first slow path: 0 = not yet known, 1 = absent, 2 = present
    # (v0-v31 are saved). Threads that race to fill it store the same value.
    .p2align 3
    .globl instrfn_s390x_vx
    .hidden instrfn_s390x_vx
    .type instrfn_s390x_vx,@object
    .size instrfn_s390x_vx, 1
instrfn_s390x_vx:
    .byte 0

    .text

# BLOCK_SIGNALS off: rt_sigprocmask(SIG_BLOCK, all, old = off(%r15), 8).
# RESTORE_SIGNALS off: rt_sigprocmask(SIG_SETMASK, off(%r15), NULL, 8).
#   Raw system calls, svc 175 (no libc, errno untouched); clobber r2-r5.
    .macro BLOCK_SIGNALS off
    lghi %r2,0
    larl %r3,instrfn_all_signals
    la %r4,\off(%r15)
    lghi %r5,8
    svc 175
    .endm
    .macro RESTORE_SIGNALS off
    lghi %r2,2
    la %r3,\off(%r15)
    lghi %r4,0
    lghi %r5,8
    svc 175
    .endm
# SAVE_R6_R15: r6-r15 into the caller's register save area (48..127 = CFA-112..-40), with CFI.
    .macro SAVE_R6_R15
    stmg %r6,%r15,48(%r15)
    .cfi_offset %r6, -112
    .cfi_offset %r7, -104
    .cfi_offset %r8, -96
    .cfi_offset %r9, -88
    .cfi_offset %r10, -80
    .cfi_offset %r11, -72
    .cfi_offset %r12, -64
    .cfi_offset %r13, -56
    .cfi_offset %r14, -48
    .cfi_offset %r15, -40
    .endm

# S390_EVENT tsat, hiat, kind, nochunk: the trace fast paths' event: reserves this thread's
#   next event and writes it, a compact one (docs/trace-format.md, chunk version 2;
#   asm/x86_64.s TRACE_EVENT is the reference): short (8 bytes: (r1 - code base) << 32 |
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
#   and the word can hold the entry's time, the call's length and the function. asm/x86_64.s
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

# FAST_PATH name, self, fromop, fromsrc, retcol, ret, trace
#   Entry: \self = self_pc, `\fromop %r3,\fromsrc` loads from_pc; \retcol is the register
#   holding the return address (for CFI) and \ret the register returned through: %r1 (a copy
#   of \self) for _mcount/mcount/__fentry__, %r14 for the __cyg_profile_* functions.
#   \trace says what trace mode does (asm/x86_64.s): `mcount` and `fentry` record an entry and
#   replace the return address, which is at 8(%r15) (mcount) or in %r14 (fentry); `enter` and
#   `exit` record an entry or exit event of self_pc only (`exit` counts nothing in gmon mode).
#   Registers: every register but r0 and r1 is preserved (r1 = self_pc on return, r0 is not
#   touched); trace mode sets the replaced return address (8(%r15) or r14) to
#   instrfn_s390x_exit. r2-r5 are scratch, kept at 16-47(%r15) = CFA-144..CFA-120 in the save
#   area, on every path (the insert path too: it needs no other register); the condition code
#   is clobbered (any call may clobber it). %r15 never moves, so the CFI rows set at entry
#   hold throughout.
#   In the trace part: r2 = &Tls, r1 = self_pc, r3 = the frame's slot (%r15 + 112), then the
#   event; r4 = the shadow entry; r5 scratch.
    .macro FAST_PATH name, self, fromop, fromsrc, retcol, ret, trace
    .p2align 4
    .globl instrfn_s390x_\name
    .hidden instrfn_s390x_\name
    .type instrfn_s390x_\name,@function
instrfn_s390x_\name:
    .cfi_startproc
    .cfi_return_column \retcol
    stmg %r2,%r5,16(%r15)
    .cfi_offset %r2, -144
    .cfi_offset %r3, -136
    .cfi_offset %r4, -128
    .cfi_offset %r5, -120
    lgr %r1,\self                           # self_pc; mcount/fentry return through r1
    \fromop %r3,\fromsrc                    # from_pc
    ear %r2,%a0                             # thread pointer = a0:a1
    sllg %r2,%r2,32
    ear %r2,%a1
    larl %r4,instrfn_tls@indntpoff          # GOT slot: offset of Tls from the thread pointer
    ag %r2,0(%r4)                           # r2 = &Tls
    cghsi {TLS_GUARD}(%r2),0                          # guard held: runtime code is running here
    jne .Lout_\name
    larl %r4,instrfn_enabled
    cli 0(%r4),0
    je .Lout_\name
    larl %r4,instrfn_mode
    cli 0(%r4),0
    jne .Ltrace_\name
    .ifc \trace,exit
    j .Lout_\name
    .endif
    lg %r2,{TLS_TABLE}(%r2)                           # this thread's ArcTable
    ltgr %r2,%r2
    jz .Lslow_\name
    rllg %r4,%r1,32                         # slot offset = hash(from_pc, self_pc)
    xgr %r4,%r3
    larl %r5,instrfn_hash_mul
    msg %r4,0(%r5)
    llgc %r5,{TBL_SHIFT}(%r2)
    srlg %r4,%r4,0(%r5)
    sllg %r4,%r4,{SLOT_SHIFT}
.Lprobe_\name:
    ng %r4,{TBL_MASK}(%r2)                           # mask (a no-op on the first probe)
    la %r5,{SLOT_SELF}(%r4,%r2)                      # the slot
    cg %r1,0(%r5)                           # slot.self_pc
    jne .Lmiss_\name
    cg %r3,{SLOT_FROM}-{SLOT_SELF}(%r5)                           # slot.from_pc
    jne .Lnext_\name
    agsi {SLOT_COUNT}-{SLOT_SELF}(%r5),1                          # slot.count: one instruction, so a signal handler
                                            # that counts on this thread never tears it
.Lout_\name:
    lmg %r2,%r5,16(%r15)
    br \ret
.Lmiss_\name:
    cghsi 0(%r5),0                          # empty slot: the arc is not in the table
    je .Linsert_\name
.Lnext_\name:
    aghi %r4,{SLOT_SIZE}
    j .Lprobe_\name
.Linsert_\name:
    # A new arc, inserted here while the table holds fewer than `limit` arcs (else the slow
    # path grows it; r4 need not survive that way: the slow path reloads r2-r5 from the save
    # area).
    lg %r4,{TBL_LEN}(%r2)                          # len < limit?
    clg %r4,{TBL_LIMIT}(%r2)
    jnl .Lfull_\name
    lghi %r4,0
    csg %r4,%r1,0(%r5)                      # claim: self_pc into a slot still 0
    jne .Lraced_\name
    # z/Architecture stores become visible to other CPUs in program order (no store-store
    # reordering), so a reader that sees the count also sees from_pc.
    stg %r3,{SLOT_FROM}-{SLOT_SELF}(%r5)                          # from_pc
    agsi {SLOT_COUNT}-{SLOT_SELF}(%r5),1                          # count: 0 -> 1, one instruction
    agsi {TBL_LEN}(%r2),1                          # len, one instruction
    lmg %r2,%r5,16(%r15)
    br \ret
.Lraced_\name:
    # A signal handler claimed the slot first: probe it again (it may hold our own arc now).
    lay %r4,-{SLOT_SELF}(%r5)                        # slot offset = slot - table - {SLOT_SELF}
    sgr %r4,%r2
    j .Lprobe_\name
.Lfull_\name:
    # The table holds `limit` arcs: the last table of a chain (INSTRFN_MAX_ARCS reached)
    # counts the call as lost right here; any other grows in the slow path.
    cli {TBL_LAST}(%r2),0
    je .Lslow_\name
    agsi {TBL_LOST}(%r2),1
    lmg %r2,%r5,16(%r15)
    br \ret
.Lslow_\name:
    # instrfn_slow_path(tls, from_pc = r3, self_pc = r2), see instrfn_s390x_slow
    larl %r4,instrfn_slow_path
    lghi %r5,0
    lgr %r2,%r1
    .ifc \ret,%r14
    lgr %r1,%r14
    .endif
    j instrfn_s390x_slow

.Ltrace_\name:
    # Trace mode (src/trace.rs; the plan is asm/x86_64.s's). The frame is known by its slot,
    # %r15 + 112 at entry (r14's slot in its register save area: see "Trace mode" above).
    # Reservations are compare-and-swap loops (csg: z10 has no load-and-add), each of which
    # checks for room before it claims anything, so only the shadow entry ever has to be given
    # back. A signal handler that reserves between our load and our csg makes the csg fail,
    # and we try again from its new top. The shadow-entry protocol is x86_64's: a free entry's
    # slot is 0 (every pop zeroes it), so the entry we claim says "being pushed" (alive, see
    # `in_progress` in src/trace.rs) until its slot is written, last; a handler that runs
    # meanwhile pushes above it and pops back down to it.
    .ifc \trace,mcount
    .set .Lhijack_\name, 1
    .else
    .ifc \trace,fentry
    .set .Lhijack_\name, 1
    .else
    .set .Lhijack_\name, 0
    .endif
    .endif
    .ifc \trace,mcount
    # The return address is at 8(%r15) only if the function reloads r14 from there right
    # after the call (gcc, LLVM); clang 14 calls mcount after its prologue, with 8(%r15) a
    # word of its own frame: then an entry without exit, nothing replaced.
    larl %r3,instrfn_s390x_mcount_reload
    clc 0(6,%r1),0(%r3)
    jne .Lnoexit_\name
    .endif
    .if .Lhijack_\name
    larl %r4,instrfn_mode
    cli 0(%r4),2
    je .Lnoexit_\name                       # exits off (INSTRFN_EXITS): an entry without exit
    cghsi {TLS_UNWOUND}(%r2),0
    jne .Ltslow_\name
    la %r3,112(%r15)                        # our slot
    lg %r4,{TLS_SHADOW_TOP}(%r2)
1:  clg %r4,{TLS_SHADOW_BASE}(%r2)
    je 2f
    clg %r3,{SH_SLOT}-{SH_BYTES}(%r4)               # the newest entry's frame at or below ours is
    jnl .Ltslow_\name                       # gone (longjmp), or being pushed (slot 0): the
                                            # slow path sorts it out
2:  la %r5,{SH_BYTES}(%r4)
    clg %r5,{TLS_SHADOW_END}(%r2)
    jh .Ltslow_\name                        # full (or no shadow stack yet): entry only
    csg %r4,%r5,{TLS_SHADOW_TOP}(%r2)
    jne 1b                                  # r4 = our shadow entry (its slot is 0)
    .endif
    # The event. Its timestamp and word are made in memory no handler touches: our shadow
    # entry's return address and spare words (it is ours, its slot still 0, until written
    # below), or for the __cyg_profile_* functions, called as any function, r6's and r7's
    # slots of the save area their caller gave them.
    .if .Lhijack_\name
    stckf {SH_RET}(%r4)
    S390_EVENT {SH_RET}(%r4), {SH_SPARE}(%r4), {EV_ENTRY}, .Ltnochunk_\name
    .else
    stckf 48(%r15)
    .ifc \trace,exit
    lgr %r3,%r1                             # a call that recorded nothing inside it:
    S390_MERGE %r2, 48(%r15), 64(%r15), %r3, %r4, %r5, .Ltret_\name, instrfn_s390x_cyg_exit_merge
    S390_EVENT 48(%r15), 56(%r15), {EV_EXIT}, .Ltnochunk_\name
    .else
    S390_EVENT 48(%r15), 56(%r15), {EV_ENTRY}, .Ltnochunk_\name
    .endif
    .endif
    .if .Lhijack_\name
    .ifc \trace,fentry
    stg %r14,{SH_RET}(%r4)                        # the original return address
    .else
    mvc {SH_RET}(8,%r4),8(%r15)
    .endif
    stg %r1,{SH_FN}(%r4)
    la %r3,112(%r15)
    stg %r3,{SH_SLOT}(%r4)                        # last: the entry is complete
    .ifc \trace,fentry
    larl %r14,instrfn_s390x_exit            # the function now returns to the exit trampoline
    .else
    larl %r5,instrfn_s390x_exit
    stg %r5,8(%r15)                         # (it reloads r14 from here next)
    .endif
    # fentry: from here until the function has saved r14 in its own frame, the replaced return
    # address is in a register, where no unwinder's walk can have the real one put back
    # (README, "backtrace()"): bpsweep.c leaves these two out of its check. (mcount: in
    # 8(%r15), which the walk wrappers restore too, src/arch/s390x.rs `second_slot`.)
    .globl instrfn_s390x_\name\()_hijacked
    .hidden instrfn_s390x_\name\()_hijacked
instrfn_s390x_\name\()_hijacked:
    .endif
.Ltret_\name:
    lmg %r2,%r5,16(%r15)
    br \ret
.Ltnochunk_\name:
    .if .Lhijack_\name
    agsi {TLS_SHADOW_TOP}(%r2),-{SH_BYTES}            # give the shadow entry back (slot still 0)
    .endif
.Ltslow_\name:
    # instrfn_trace_slow(tls, slot = r3, self_pc = r2): slot %r15 + 112 (mcount: with flag 1,
    # the return address moved there), 0 for __cyg_profile_func_enter, 1 for _exit
    larl %r4,instrfn_trace_slow
    lghi %r5,0
    .if .Lhijack_\name
    la %r3,112(%r15)
    .ifc \trace,mcount
    lghi %r5,1
    .endif
    .else
    .ifc \trace,exit
    lghi %r3,1
    .else
    lghi %r3,0
    .endif
    .endif
    lgr %r2,%r1
    .ifc \ret,%r14
    lgr %r1,%r14
    .endif
    j instrfn_s390x_slow
    .if .Lhijack_\name
.Lnoexit_\name:
    # An entry without exit ({EV_NOEXIT}), nothing replaced: the event only. For clang 14's
    # mcount (no return address at 8(%r15)) and for INSTRFN_EXITS=off (mode 2).
    # (Always a long event: no scratch memory needed. The timestamp goes straight into it.)
    lg %r3,{TLS_TRACE_POS}(%r2)
4:  la %r5,{EV_BYTES}(%r3)
    clg %r5,{TLS_TRACE_END}(%r2)
    jh 5f
    csg %r3,%r5,{TLS_TRACE_POS}(%r2)
    jne 4b
    stckf 8(%r3)                            # the timestamp, its low bits moved into the word,
    llgc %r4,15(%r3)                        # then the word that marks it written
    nill %r4,3
    sllg %r4,%r4,{EV_TS_SHIFT}
    ni 15(%r3),0xfc
    sllg %r5,%r1,{EV_LONG_SHIFT}
    ogr %r5,%r4
    oill %r5,({EV_NOEXIT} << 2) | {EV_TAG_LONG}
    stg %r5,0(%r3)
    lmg %r2,%r5,16(%r15)
    br %r1
5:  # No room (or no chunk yet): the slow path records the entry without exit. mcount code
    # goes with flag 4, which shows the Rust side a return slot holding 0 (not replaceable,
    # src/arch/s390x.rs): right for clang 14's call, and for mode 2 too (nothing is replaced
    # then anyway); fentry code only comes here in mode 2, where the Rust side replaces
    # nothing either.
    larl %r4,instrfn_trace_slow
    la %r3,112(%r15)
    .ifc \trace,mcount
    lghi %r5,4
    .else
    lghi %r5,0
    .endif
    lgr %r2,%r1
    j instrfn_s390x_slow
    .endif
    .cfi_endproc
    .size instrfn_s390x_\name, .-instrfn_s390x_\name
    .endm

# The instruction gcc and LLVM put right after `brasl %r14,_mcount`/`mcount` (FAST_PATH compares
# the 6 bytes at the return address with it).
    .section .rodata
    .p2align 1
    .type instrfn_s390x_mcount_reload,@object
    .size instrfn_s390x_mcount_reload, 6
instrfn_s390x_mcount_reload:
    lg %r14,8(%r15)
    .text

# mcount / _mcount: self_pc = r14 (also the return-address column), from_pc at 8(%r15).
    FAST_PATH mcount, %r14, lg, 8(%r15), %r14, %r1, mcount
# __fentry__: self_pc = r0 (the return-address column), from_pc = r14, which must survive.
    FAST_PATH fentry, %r0, lgr, %r14, %r0, %r1, fentry
# __cyg_profile_func_enter(this_fn = r2, call_site = r3) / _exit: ordinary calls (gcc and
# clang -finstrument-functions), returning through r14; they preserve more than they must.
    FAST_PATH cyg_enter, %r2, lgr, %r3, %r14, %r14, enter
    FAST_PATH cyg_exit, %r2, lgr, %r3, %r14, %r14, exit

# instrfn_s390x_slow: the slow path of every trampoline.
#   Entry (by j): r1 = the return address, r2 = self_pc, r3 = from_pc or the slot, r4 = the
#   Rust function to call as fn(&Tls, r3, r2), r5 = flags; the instrumented code's r2-r5 at
#   16-47(%r15); r0 and r14 as the trampoline got them (__fentry__: r0 = self_pc and r14 is
#   the instrumented function's own return address). Flags:
#     1  mcount in trace mode: the return address is at 8(%r15), where the function reloads
#        r14 from; it is moved into r14's slot (112(%r15), r14 = r1 is restored from r1) for
#        the Rust function, and back afterwards;
#     2  the Rust function returns the address to return to (the exit trampoline's slow part);
#     4  mcount in trace mode without the reload after the call (clang 14): the Rust function
#        sees 0 in r14's slot (an entry without exit), and r14 = r1 is restored.
#   Returns through r1 with r2-r15, a0/a1, f0-f15 and v0-v31 as they were (r0 restored too),
#   and the guard as it was; errno is kept by the Rust side. The function is
#   instrfn_slow_path(tls, from_pc, self_pc) in gmon mode, instrfn_trace_slow(tls, slot,
#   self_pc) or instrfn_trace_exit_slow(tls, slot) in trace mode.
#   Stack (CFA = entry %r15 + 160, held in %r11 while the frame exists):
#      CFA-160 .. CFA-1  the instrumented function's register save area: CFA-152 from_pc (mcount,
#                        untouched), CFA-144..-120 r2-r5, CFA-112..-40 r6-r15 (ABI slots)
#      our frame, %r15 = CFA-992:
#        0   backchain (= CFA-160) and the 160-byte save area of the Rust code we call
#      160   old signal mask      168 r0      176 r1 (return address)      184 old guard
#      192   f0-f15, 8 bytes each (always; fixed CFI rules)
#      320   v0-v31, 16 bytes each (only with the vector facility)
#   r7 = the function, r8 = flags, r9 = &instrfn_s390x_vx, r10 = self_pc, r12 = arg 1,
#   r13 = &Tls while the frame exists.
    .p2align 4
    .globl instrfn_s390x_slow
    .hidden instrfn_s390x_slow
    .type instrfn_s390x_slow,@function
instrfn_s390x_slow:
    .cfi_startproc
    .cfi_return_column %r1
    .cfi_offset %r2, -144
    .cfi_offset %r3, -136
    .cfi_offset %r4, -128
    .cfi_offset %r5, -120
    SAVE_R6_R15
    lgr %r11,%r15
    .cfi_def_cfa_register %r11
    lay %r15,-832(%r15)
    stg %r11,0(%r15)                 # backchain
    stg %r0,168(%r15)
    .cfi_offset %r0, -824
    stg %r1,176(%r15)
    .cfi_offset %r1, -816
    std %f0,192(%r15)
    std %f1,200(%r15)
    std %f2,208(%r15)
    std %f3,216(%r15)
    std %f4,224(%r15)
    std %f5,232(%r15)
    std %f6,240(%r15)
    std %f7,248(%r15)
    std %f8,256(%r15)
    std %f9,264(%r15)
    std %f10,272(%r15)
    std %f11,280(%r15)
    std %f12,288(%r15)
    std %f13,296(%r15)
    std %f14,304(%r15)
    std %f15,312(%r15)
    .cfi_offset %f0, -800
    .cfi_offset %f1, -792
    .cfi_offset %f2, -784
    .cfi_offset %f3, -776
    .cfi_offset %f4, -768
    .cfi_offset %f5, -760
    .cfi_offset %f6, -752
    .cfi_offset %f7, -744
    .cfi_offset %f8, -736
    .cfi_offset %f9, -728
    .cfi_offset %f10, -720
    .cfi_offset %f11, -712
    .cfi_offset %f12, -704
    .cfi_offset %f13, -696
    .cfi_offset %f14, -688
    .cfi_offset %f15, -680
    lgr %r10,%r2                     # self_pc
    lgr %r12,%r3                     # from_pc, or the slot
    lgr %r7,%r4                      # the Rust function
    lgr %r8,%r5                      # flags
    tmll %r8,1
    jz 0f
    mvc 112(8,%r11),8(%r11)          # mcount, trace mode: the return address into r14's slot
0:  tmll %r8,4
    jz 0f
    mvghi 112(%r11),0                # mcount called after the prologue: nothing to replace
0:
    # Block every signal (see asm/x86_64.s).
    BLOCK_SIGNALS 160

    ear %r13,%a0
    sllg %r13,%r13,32
    ear %r13,%a1
    larl %r1,instrfn_tls@indntpoff
    ag %r13,0(%r1)                   # r13 = &Tls
    lg %r0,{TLS_GUARD}(%r13)
    stg %r0,184(%r15)                # the guard as it was (the exit trampoline's slow part
                                     # may run with it held)
    mvghi {TLS_GUARD}(%r13),1                  # guard: counting calls made by the runtime return

    # Vector facility: known after the first slow path of the process. That first one asks
    # getauxval(AT_HWCAP) with f0-f15 saved and v0-v31 not yet: getauxval is plain C in glibc
    # and musl, built for the distribution's base CPU, and touches no vector register (the
    # register test's first call goes through here and checks all of them).
    larl %r9,instrfn_s390x_vx
    cli 0(%r9),0
    jne 1f
    lghi %r2,16                      # AT_HWCAP
    brasl %r14,getauxval@PLT
    lghi %r0,1
    tmll %r2,2048                    # HWCAP_S390_VX
    jz 2f
    lghi %r0,2
2:  stc %r0,0(%r9)
    ld %f0,192(%r15)                 # the call-clobbered FPRs getauxval may have used
    ld %f1,200(%r15)
    ld %f2,208(%r15)
    ld %f3,216(%r15)
    ld %f4,224(%r15)
    ld %f5,232(%r15)
    ld %f6,240(%r15)
    ld %f7,248(%r15)
1:  cli 0(%r9),2
    jne 3f
    .machine push
    .machine z13
    vstm %v0,%v15,320(%r15)
    vstm %v16,%v31,576(%r15)
    .machine pop
3:
    lgr %r2,%r13                     # arg 0: &Tls
    lgr %r3,%r12                     # arg 1: from_pc, or the slot
    lgr %r4,%r10                     # arg 2: self_pc
    basr %r14,%r7
    tmll %r8,2
    jz 6f
    stg %r2,176(%r15)                # the exit trampoline's slow part: return there
6:  lg %r0,184(%r15)
    stg %r0,{TLS_GUARD}(%r13)

    RESTORE_SIGNALS 160

    cli 0(%r9),2
    jne 4f
    .machine push
    .machine z13
    vlm %v0,%v15,320(%r15)           # also restores f0-f15 (their left halves)
    vlm %v16,%v31,576(%r15)
    .machine pop
    j 5f
4:  ld %f0,192(%r15)
    ld %f1,200(%r15)
    ld %f2,208(%r15)
    ld %f3,216(%r15)
    ld %f4,224(%r15)
    ld %f5,232(%r15)
    ld %f6,240(%r15)
    ld %f7,248(%r15)
    ld %f8,256(%r15)
    ld %f9,264(%r15)
    ld %f10,272(%r15)
    ld %f11,280(%r15)
    ld %f12,288(%r15)
    ld %f13,296(%r15)
    ld %f14,304(%r15)
    ld %f15,312(%r15)
5:  tmll %r8,1
    jz 7f
    mvc 8(8,%r11),112(%r11)          # the return address (replaced or not) back to 8(%r15),
7:  tmll %r8,5
    jz 7f
    stg %r10,112(%r11)               # and r14 = self_pc again
7:  lg %r0,168(%r15)
    lg %r1,176(%r15)
    lmg %r6,%r15,832+48(%r15)        # r15 back to its entry value last
    .cfi_def_cfa %r15, 160
    .cfi_restore %r6
    .cfi_restore %r7
    .cfi_restore %r8
    .cfi_restore %r9
    .cfi_restore %r10
    .cfi_restore %r11
    .cfi_restore %r12
    .cfi_restore %r13
    .cfi_restore %r14
    .cfi_restore %r15
    .cfi_restore %f0
    .cfi_restore %f1
    .cfi_restore %f2
    .cfi_restore %f3
    .cfi_restore %f4
    .cfi_restore %f5
    .cfi_restore %f6
    .cfi_restore %f7
    .cfi_restore %f8
    .cfi_restore %f9
    .cfi_restore %f10
    .cfi_restore %f11
    .cfi_restore %f12
    .cfi_restore %f13
    .cfi_restore %f14
    .cfi_restore %f15
    .cfi_restore %r0
    .cfi_restore %r1
    lmg %r2,%r5,16(%r15)
    .cfi_restore %r2
    .cfi_restore %r3
    .cfi_restore %r4
    .cfi_restore %r5
    br %r1
    .cfi_endproc
    .size instrfn_s390x_slow, .-instrfn_s390x_slow

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
#   (asm/x86_64.s): the caller's r15 is r15, the frame's own CFA r15 + 168 (the function's is
#   r15 + 160), and the caller's return address the `ret` word of the newest shadow entry whose
#   slot is r15 + 112, found by a DWARF expression (scripts/return-pad-cfi.py s390x) that takes
#   its own pc from r14 (libgcc restores the return address column as a register) and from
#   the pc-relative word before the pad the registry instrfn_registry.
    .p2align 4
# RETURN_ADDRESS_IN_ENTRY: CFI, the caller's return address (r14) is saved at [r4 + SH_RET]:
#   DW_CFA_expression r14, DW_OP_breg4 SH_RET (a one-byte SLEB128: src/trace.rs asserts it).
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
    # INSTRFN_MIN_DURATION (asm/x86_64.s .Lexit_short): a call shorter than instrfn_min_ticks
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

# instrfn_s390x_guarded: run a runtime entry point with this thread's guard held and all
#   signals blocked (as on x86_64, also when called from a signal handler).
#   r1 = the Rust function to call, r2/r3/r4 = its first three arguments. An ordinary ABI call otherwise
#   (entered by `jg` from a guarded_entry! stub, so r14 is the stub's caller's return address):
#   returns the function's r2, keeps errno and restores the previous guard value; clobbers
#   what a call may clobber.
#   Frame (%r15 = CFA-344; r6-r15 in the caller's save area, CFA-112..-40):
#      0 backchain and save area, 160 old signal mask, 168 errno, 176 old guard
    .p2align 4
    .globl instrfn_s390x_guarded
    .hidden instrfn_s390x_guarded
    .type instrfn_s390x_guarded,@function
instrfn_s390x_guarded:
    .cfi_startproc
    SAVE_R6_R15
    lgr %r11,%r15
    .cfi_def_cfa_register %r11
    lay %r15,-184(%r15)
    stg %r11,0(%r15)                 # backchain
    lgr %r12,%r1                     # the function
    lgr %r6,%r2                      # its arguments
    lgr %r7,%r3
    lgr %r8,%r4
    BLOCK_SIGNALS 160
    brasl %r14,__errno_location@PLT
    l %r0,0(%r2)
    st %r0,168(%r15)
    ear %r13,%a0
    sllg %r13,%r13,32
    ear %r13,%a1
    larl %r1,instrfn_tls@indntpoff
    ag %r13,0(%r1)                   # r13 = &Tls
    lg %r0,{TLS_GUARD}(%r13)
    stg %r0,176(%r15)                # old guard
    mvghi {TLS_GUARD}(%r13),1
    lgr %r2,%r6
    lgr %r3,%r7
    lgr %r4,%r8
    basr %r14,%r12
    lgr %r9,%r2                      # the result
    lg %r0,176(%r15)
    stg %r0,{TLS_GUARD}(%r13)
    brasl %r14,__errno_location@PLT
    l %r0,168(%r15)
    st %r0,0(%r2)
    RESTORE_SIGNALS 160
    lgr %r2,%r9
    lmg %r6,%r15,184+48(%r15)
    .cfi_def_cfa %r15, 160
    .cfi_restore %r6
    .cfi_restore %r7
    .cfi_restore %r8
    .cfi_restore %r9
    .cfi_restore %r10
    .cfi_restore %r11
    .cfi_restore %r12
    .cfi_restore %r13
    .cfi_restore %r14
    .cfi_restore %r15
    br %r14
    .cfi_endproc
    .size instrfn_s390x_guarded, .-instrfn_s390x_guarded

# instrfn_tls_get: r2 = address of this thread's Tls. Clobbers r1 only.
    .p2align 4
    .globl instrfn_tls_get
    .hidden instrfn_tls_get
    .type instrfn_tls_get,@function
instrfn_tls_get:
    .cfi_startproc
    ear %r2,%a0
    sllg %r2,%r2,32
    ear %r2,%a1
    larl %r1,instrfn_tls@indntpoff
    ag %r2,0(%r1)
    br %r14
    .cfi_endproc
    .size instrfn_tls_get, .-instrfn_tls_get

# instrfn_call_on_stack(f = r2, arg = r3, top = r4): as on x86_64 (asm/x86_64.s); r11 holds the
#   caller's stack pointer; a 160-byte save area with a backchain is made below top.
    .p2align 4
    .globl instrfn_call_on_stack
    .hidden instrfn_call_on_stack
    .type instrfn_call_on_stack,@function
instrfn_call_on_stack:
    .cfi_startproc
    stmg %r11,%r15,88(%r15)
    .cfi_offset %r11, -72
    .cfi_offset %r12, -64
    .cfi_offset %r13, -56
    .cfi_offset %r14, -48
    .cfi_offset %r15, -40
    lgr %r11,%r15
    .cfi_def_cfa_register %r11
    nill %r4,65528                   # top & -8
    lay %r15,-160(%r4)
    stg %r11,0(%r15)                 # backchain
    lgr %r1,%r2
    lgr %r2,%r3
    basr %r14,%r1
    lgr %r15,%r11
    .cfi_def_cfa_register %r15
    lmg %r11,%r15,88(%r15)
    .cfi_restore %r11
    .cfi_restore %r12
    .cfi_restore %r13
    .cfi_restore %r14
    .cfi_restore %r15
    br %r14
    .cfi_endproc
    .size instrfn_call_on_stack, .-instrfn_call_on_stack
