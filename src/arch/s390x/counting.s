# instrfn trampolines for s390x, counting calls: the fast path of every entry point (mcount,
# _mcount, __fentry__, __cyg_profile_func_enter/exit) in gmon and trace mode, and the slow path
# they fall back to.

# FAST_PATH name, self, fromop, fromsrc, retcol, ret, trace
#   Entry: \self = self_pc, `\fromop %r3,\fromsrc` loads from_pc; \retcol is the register
#   holding the return address (for CFI) and \ret the register returned through: %r1 (a copy
#   of \self) for _mcount/mcount/__fentry__, %r14 for the __cyg_profile_* functions.
#   \trace says what trace mode does (src/arch/x86_64/): `mcount` and `fentry` record an entry and
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
    # Trace mode (src/trace/; the plan is src/arch/x86_64/'s). The frame is known by its slot,
    # %r15 + 112 at entry (r14's slot in its register save area: see "Trace mode" above).
    # Reservations are compare-and-swap loops (csg: z10 has no load-and-add), each of which
    # checks for room before it claims anything, so only the shadow entry ever has to be given
    # back. A signal handler that reserves between our load and our csg makes the csg fail,
    # and we try again from its new top. The shadow-entry protocol is x86_64's: a free entry's
    # slot is 0 (every pop zeroes it), so the entry we claim says "being pushed" (alive, see
    # `in_progress` in src/trace/) until its slot is written, last; a handler that runs
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
    # 8(%r15), which the walk wrappers restore too, src/arch/s390x/mod.rs `second_slot`.)
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
    # src/arch/s390x/mod.rs): right for clang 14's call, and for mode 2 too (nothing is replaced
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
    # Block every signal (see src/arch/x86_64/).
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
