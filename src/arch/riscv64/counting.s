# instrfn trampolines for riscv64, counting calls: the fast path of mcount/_mcount and
# __cyg_profile_func_enter/exit in gmon and trace mode, and the slow path they fall back to.

# instrfn_riscv64_mcount: the fast path of mcount/_mcount, new arcs and marked sites included.
#   Entry: ra = self_pc; from_pc is in a0 (gcc, rustc) or at -8(s0) (clang), as the site's
#   marker says (see the header). Every register is preserved (a0 too); t0, t1, t2 are
#   scratch, saved at 0, 8, 16(sp) below the caller's sp (CFA = sp + 64 while they are); the
#   paths past a missed first probe also use t3 and t4, saved at 24 and 32(sp) on those paths
#   only (and described there), trace mode t3, t4, t5 and t6 (24, 32, 40, 56(sp)). 48(sp) is
#   the handover word of instrfn_riscv64_slow.
#   Hands over to instrfn_riscv64_slow with every register as it came but sp (still 64 bytes
#   down) and 48(sp) = the Rust function to call: instrfn_riscv64_slow_path in gmon mode,
#   instrfn_riscv64_trace_path in trace mode.
#   Executed in gmon mode (qemu -singlestep -d exec, every probe in its home slot; `+1` is the
#   `j` of the exported _mcount stub): a hit of a site that passes from_pc in a0, 42+1
#   instructions, ret included (measured; 39+1 before the mode byte, whose test costs 3 on every
#   path, so the other figures, measured before it, are given plus 3): a new arc of such a
#   site, 97+1; a hit of
#   a site whose caller is in the frame record, where the first probe (of the argument in a0)
#   misses, the marker is found and the frame checked, 95+1; a new arc of it 106+1; a new arc
#   of an A0 site this thread has no marker for but another thread decided, 106+1; a site
#   neither marked nor decided, 89+1, then the slow path. Trace mode: see .Lmcount_trace.
    .p2align 2
    .globl instrfn_riscv64_mcount
    .hidden instrfn_riscv64_mcount
    .type instrfn_riscv64_mcount,@function
instrfn_riscv64_mcount:
    .cfi_startproc
    addi sp, sp, -64
    .cfi_def_cfa_offset 64
    sd t0, 0(sp)
    .cfi_rel_offset t0, 0
    sd t1, 8(sp)
    .cfi_rel_offset t1, 8
    sd t2, 16(sp)
    .cfi_rel_offset t2, 16
    la.tls.ie t0, instrfn_tls              # offset of Tls from the thread pointer
    add t0, t0, tp                         # &Tls
    ld t1, {TLS_GUARD}(t0)                           # guard held: runtime code is running here
    bnez t1, .Lmcount_out
.Lmcount_enabled:
    auipc t1, %pcrel_hi(instrfn_enabled)
    lbu t1, %pcrel_lo(.Lmcount_enabled)(t1)
    beqz t1, .Lmcount_out
.Lmcount_mode:
    auipc t1, %pcrel_hi(instrfn_mode)
    lbu t1, %pcrel_lo(.Lmcount_mode)(t1)
    bnez t1, .Lmcount_trace
    ld t0, {TLS_TABLE}(t0)                           # this thread's ArcTable
    beqz t0, .Lmcount_slow
    HASH a0, ra                            # slot offset = hash(a0, self_pc)
.Lmcount_probe:
    ld t2, {TBL_MASK}(t0)                           # mask (a no-op on the first probe)
    and t1, t1, t2
    add t1, t1, t0                         # t1 = slot address - {SLOT_SELF}
    ld t2, {SLOT_SELF}(t1)                          # slot.self_pc
    bne t2, ra, .Lmcount_miss
    ld t2, {SLOT_FROM}(t1)                          # slot.from_pc
    bne t2, a0, .Lmcount_next
    addi t1, t1, {SLOT_COUNT}                        # &slot.count
    li t2, 1
    amoadd.d zero, t2, (t1)
.Lmcount_out:
    .cfi_remember_state
    ld t0, 0(sp)
    .cfi_restore t0
    ld t1, 8(sp)
    .cfi_restore t1
    ld t2, 16(sp)
    .cfi_restore t2
    addi sp, sp, 64
    .cfi_def_cfa_offset 0
    ret
    .cfi_restore_state
.Lmcount_miss:
    beqz t2, .Lmcount_marked               # empty slot: (a0, self_pc) is not in the table
.Lmcount_next:
    sub t1, t1, t0                         # back to an offset, next slot
    addi t1, t1, {SLOT_SIZE}
    j .Lmcount_probe
.Lmcount_slow:
    .cfi_remember_state
    lla t0, instrfn_riscv64_slow_path
.Lmcount_handover:
    # t0 = the Rust function: into the handover word, then every register back as it came.
    sd t0, 48(sp)
    ld t0, 0(sp)
    .cfi_restore t0
    ld t1, 8(sp)
    .cfi_restore t1
    ld t2, 16(sp)
    .cfi_restore t2
    j instrfn_riscv64_slow
    .cfi_restore_state
.Lmcount_marked:
    # (a0, self_pc) is no arc of this table: a new arc, or a site whose a0 is not its caller.
    # The site's marker says which; t3 = the key's from_pc from here on, t4 more scratch.
    # (CFA-relative offsets: LLVM's .cfi_rel_offset would use the CFA offset of the
    # preceding ret (0), as .cfi_restore_state does not reset what it tracks.)
    sd t3, 24(sp)
    .cfi_offset t3, -40
    sd t4, 32(sp)
    .cfi_offset t4, -32
    mv t4, t1                              # the empty slot (a0, self_pc) would go in
    addi t3, ra, {MARK_FRAME}                        # the FRAME marker: (self_pc + {MARK_FRAME}, self_pc)
    HASH t3, ra
    PROBE t3, .Lmcount_not_frame, ra
    # from_pc = -8(s0), once s0 is proven to lie in this thread's stack: the mapping that held
    # sp when the slow path last checked (instrfn_riscv64_stack: [lo, hi)) holds sp now, s0 is
    # above sp, at most hi, and 16-byte aligned; so -8(s0) is mapped even if the marker were
    # wrong for this call. Anything else is left to the slow path, which checks afresh.
    la.tls.ie t2, instrfn_riscv64_stack
    add t2, t2, tp
    ld t4, {STK_HI}(t2)                           # hi
    ld t2, {STK_LO}(t2)                           # lo
    addi t3, sp, 64                        # sp at the call
    bltu t3, t2, .Lmcount_marked_slow       # sp below lo: another stack
    bgeu t3, s0, .Lmcount_marked_slow       # s0 <= sp
    bltu t4, s0, .Lmcount_marked_slow       # s0 > hi
    andi t2, s0, 15
    bnez t2, .Lmcount_marked_slow
    ld t3, -8(s0)                          # from_pc
    j .Lmcount_from
.Lmcount_not_frame:
    addi t3, ra, {MARK_A0}                        # the A0 marker: (self_pc + {MARK_A0}, self_pc)
    HASH t3, ra
    PROBE t3, .Lmcount_unmarked, ra
.Lmcount_a0:
    mv t3, a0                              # from_pc = a0: a new arc, for the slot the first
    mv t1, t4                              # probe reached (a signal handler that took it
    j .Lmcount_insert                      # meanwhile makes the claim fail: probed again)
.Lmcount_unmarked:
    # No marker: a site this thread has not met. Decided A0 by some thread already: insert the
    # arc now. Anything else (FRAME, which the slow path marks, or not decided) is left to
    # the slow path. t1 = byte offset into instrfn_riscv64_decided, t2 = its address.
.Lmcount_decided_mul:
    auipc t2, %pcrel_hi(instrfn_hash_mul)
    ld t2, %pcrel_lo(.Lmcount_decided_mul)(t2)
    mul t1, ra, t2
    srli t1, t1, 64 - {DEC_BITS}
    slli t1, t1, 3
    lla t2, instrfn_riscv64_decided
.Lmcount_decided_probe:
    add t3, t2, t1
    ld t3, 0(t3)                           # a decision: self_pc (A0), self_pc + 1 (FRAME)
    beq t3, ra, .Lmcount_a0
    beqz t3, .Lmcount_marked_slow          # empty: not decided (as A0)
    addi t1, t1, 8                         # next word, wrapping around
    slli t1, t1, 64 - 3 - {DEC_BITS}
    srli t1, t1, 64 - 3 - {DEC_BITS}
    j .Lmcount_decided_probe
.Lmcount_from:
    HASH t3, ra                            # t3 = from_pc: probe for (from_pc, self_pc)
.Lmcount_from_probe:
    PROBE t3, .Lmcount_insert, ra
    addi t1, t1, {SLOT_COUNT}                        # &slot.count
    li t2, 1
    amoadd.d zero, t2, (t1)
.Lmcount_marked_out:
    ld t3, 24(sp)
    ld t4, 32(sp)
    .cfi_remember_state
    .cfi_restore t3
    .cfi_restore t4
    j .Lmcount_out
    .cfi_restore_state
.Lmcount_insert:
    # A new arc (t3, self_pc), inserted here while the table holds fewer than `limit` keys
    # (markers count as keys).
    # Claim the slot (self_pc: 0 -> self_pc), store from_pc, then add the count (release) and
    # the table's len. t0 = table, t1 = slot address - {SLOT_SELF}.
    ld t2, {TBL_LEN}(t0)                          # len
    ld t4, {TBL_LIMIT}(t0)                          # limit
    bgeu t2, t4, .Lmcount_full
    addi t1, t1, {SLOT_SELF}                        # t1 = &slot.self_pc
.Lmcount_claim:
    lr.d t2, (t1)
    bnez t2, .Lmcount_raced                # claimed meanwhile by a signal handler
    sc.d t2, ra, (t1)
    bnez t2, .Lmcount_claim                # reservation lost (a trap came between): retry
    sd t3, {SLOT_FROM} - {SLOT_SELF}(t1)                           # slot.from_pc
    li t2, 1
    addi t4, t1, {SLOT_COUNT} - {SLOT_SELF}                        # &slot.count: 0 -> 1, after from_pc for other CPUs
    amoadd.d.rl zero, t2, (t4)
    addi t4, t0, {TBL_LEN}                        # &table.len
    amoadd.d zero, t2, (t4)
    j .Lmcount_marked_out
.Lmcount_raced:
    sub t1, t1, t0                         # back to the offset of that slot: probe it again
    addi t1, t1, -{SLOT_SELF}
    j .Lmcount_from_probe
.Lmcount_full:
    # The table holds `limit` keys: the last table of a chain (INSTRFN_MAX_ARCS reached)
    # counts the call as lost right here; any other grows in the slow path.
    lbu t2, {TBL_LAST}(t0)
    beqz t2, .Lmcount_marked_slow
    li t2, 1
    addi t4, t0, {TBL_LOST}                        # &table.lost
    amoadd.d zero, t2, (t4)
    j .Lmcount_marked_out
.Lmcount_marked_slow:
    ld t3, 24(sp)
    .cfi_restore t3
    ld t4, 32(sp)
    .cfi_restore t4
    j .Lmcount_slow

.Lmcount_trace:
    # Trace mode (src/trace/): an entry event of self_pc, and the function's return slot
    # replaced by instrfn_riscv64_exit, so that its return is seen too. t0 = &Tls; t3, t4, t5
    # are scratch from here on. Anything out of the ordinary goes to the slow path
    # (instrfn_riscv64_trace_path), which records the call itself: a site not decided yet or
    # without a return slot it can prove, a guard that fails, no chunk yet or a full one, a
    # full shadow stack, frames left behind by longjmp or put back by an unwinder.
    # Where the slot is: the site's rule in instrfn_riscv64_sites (1 << {SITE_BITS} entries of 16
    # bytes, (self_pc, rule), open addressing from the top bits of self_pc * {HASH_MUL}, linear
    # probing; filled by the slow path only, which decoded the instructions from the function's
    # entry to this call: src/arch/riscv64/mod.rs, `prologue`). rule = (D << 3) | guard: the slot
    # is sp at the call + D (that is, the CFA - 8), and the guard is what the code proves about
    # this slot on every call, checked here so that a rule left by code that has since been
    # unloaded never makes this write a wrong word: {RULE_A0} "a0 = the slot's word" (gcc's
    # `mv a0, ra`), {RULE_FRAME} "s0 = slot + 8" (a frame pointer: clang, gcc
    # -fno-omit-frame-pointer). Rule 0 is an entry whose rule is not written yet, {RULE_NONE} a
    # site without a provable slot (entry only): both to the slow path.
    # Executed (qemu -singlestep -d exec, the site in its home entry): 99+1 instructions, ret
    # included, from the call to the return into the function.
    sd t3, 24(sp)
    .cfi_offset t3, -40
    sd t4, 32(sp)
    .cfi_offset t4, -32
    sd t5, 40(sp)
    .cfi_offset t5, -24
    sd t6, 56(sp)
    .cfi_offset t6, -8
.Ltrace_mode:
    auipc t1, %pcrel_hi(instrfn_mode)
    lbu t1, %pcrel_lo(.Ltrace_mode)(t1)
    li t2, 2
    beq t1, t2, .Ltrace_slow               # exits off (INSTRFN_EXITS): the slow path records
                                           # an entry without exit
    ld t1, {TLS_UNWOUND}(t0)
    bnez t1, .Ltrace_slow                  # an unwinder walked the stack: the slow path fixes up
.Ltrace_mul:
    auipc t2, %pcrel_hi(instrfn_hash_mul)
    ld t2, %pcrel_lo(.Ltrace_mul)(t2)
    mul t1, ra, t2
    srli t1, t1, 64 - {SITE_BITS}
    slli t1, t1, 4                         # byte offset of the home entry
    lla t2, instrfn_riscv64_sites
.Ltrace_site:
    add t3, t2, t1
    ld t4, 0(t3)                           # the entry's self_pc
    beq t4, ra, .Ltrace_rule
    beqz t4, .Ltrace_slow                  # empty: not decided
    addi t1, t1, 16                        # next entry, wrapping around
    slli t1, t1, 64 - 4 - {SITE_BITS}
    srli t1, t1, 64 - 4 - {SITE_BITS}
    j .Ltrace_site
.Ltrace_rule:
    ld t4, 8(t3)                           # rule
    andi t1, t4, 7                         # guard
    srli t4, t4, 3                         # D
    addi t3, sp, 64                        # sp at the call
    add t4, t4, t3                         # t4 = the return slot
    # The slot lies in this thread's stack as the slow path last found it (instrfn_riscv64_stack,
    # [lo, hi)): sp at the call at least lo, slot + 8 at most hi.
    la.tls.ie t2, instrfn_riscv64_stack
    add t2, t2, tp
    ld t5, {STK_LO}(t2)
    bltu t3, t5, .Ltrace_slow
    ld t5, {STK_HI}(t2)
    addi t3, t4, 8                         # t3 = slot + 8
    bltu t5, t3, .Ltrace_slow
    li t2, {RULE_A0}
    bne t1, t2, .Ltrace_frame
    ld t2, 0(t4)
    bne t2, a0, .Ltrace_slow               # an a0 site whose slot does not hold a0
    j .Ltrace_guarded
.Ltrace_frame:
    li t2, {RULE_FRAME}
    bne t1, t2, .Ltrace_slow               # 0 (being written) or {RULE_NONE}
    bne t3, s0, .Ltrace_slow               # a frame site whose s0 is not slot + 8
.Ltrace_guarded:
    ld t1, {TLS_SHADOW_TOP}(t0)
    ld t2, {TLS_SHADOW_BASE}(t0)
    beq t1, t2, 1f
    ld t2, {SH_SLOT} - {SH_BYTES}(t1)
    bgeu t4, t2, .Ltrace_slow              # the newest entry's frame at or below ours is gone
                                           # (longjmp), or it is being pushed (slot 0): the
                                           # slow path sorts it out
1:  ld t2, {TLS_SHADOW_END}(t0)
    addi t3, t1, {SH_BYTES}
    bltu t2, t3, .Ltrace_slow              # full: the slow path records an entry only
    # The shadow entry is reserved with one amoadd.d (a signal handler that pushes its own
    # never takes ours) and its slot written last: a free entry's slot is 0 (every pop zeroes
    # it), and 0 tells a handler's slow path that the entry is still being pushed (alive: it
    # is never closed, nor is its return slot touched by the unwinder wrappers, src/trace/
    # `in_progress`).
    li t2, {SH_BYTES}
    addi t3, t0, {TLS_SHADOW_TOP}
    amoadd.d t5, t2, (t3)                  # t5 = our shadow entry (its slot is 0)
    ld t2, {TLS_SHADOW_END}(t0)
    addi t3, t5, {SH_BYTES}
    bltu t2, t3, .Ltrace_unpush            # full after all (a handler left entries meanwhile)
    TRACE_EVENT {EV_ENTRY}, ra, .Ltrace_unpush, t6
    sd ra, {SH_FN}(t5)
    ld t2, 0(t4)                           # the original return address
    sd t2, {SH_RET}(t5)
    sd t4, {SH_SLOT}(t5)                   # last: the entry is complete
    lla t2, instrfn_riscv64_exit
    sd t2, 0(t4)                           # the function now returns to the exit trampoline
    ld t6, 56(sp)
    ld t5, 40(sp)
    ld t4, 32(sp)
    ld t3, 24(sp)
    .cfi_remember_state
    .cfi_restore t3
    .cfi_restore t4
    .cfi_restore t5
    .cfi_restore t6
    j .Lmcount_out
    .cfi_restore_state
.Ltrace_unpush:
    li t2, -{SH_BYTES}                     # give the shadow entry back (its slot still 0)
    addi t3, t0, {TLS_SHADOW_TOP}
    amoadd.d zero, t2, (t3)
.Ltrace_slow:
    ld t6, 56(sp)
    .cfi_restore t6
    ld t5, 40(sp)
    .cfi_restore t5
    ld t4, 32(sp)
    .cfi_restore t4
    ld t3, 24(sp)
    .cfi_restore t3
    lla t0, instrfn_riscv64_trace_path
    j .Lmcount_handover
    .cfi_endproc
    .size instrfn_riscv64_mcount, .-instrfn_riscv64_mcount

# CYG name, kind: instrfn_riscv64_cyg_\name, __cyg_profile_func_enter(this_fn, call_site) /
#   __cyg_profile_func_exit (\kind {EV_ENTRY} / {EV_EXIT}): gcc and clang -finstrument-functions
#   call them as ordinary functions (psABI), at every function's entry and before each return,
#   a0 = this_fn, a1 = call_site. Every register is preserved all the same (more than an
#   ordinary call allows); frame and handover as in instrfn_riscv64_mcount (t0-t4 at 0-32(sp)).
#   gmon mode: the entry counts the arc (call_site, this_fn) like mcount (no markers: the caller
#   is always a1); the exit counts nothing. Trace mode: an entry or exit event of this_fn,
#   nothing replaced. The slow paths (src/arch/riscv64/mod.rs): instrfn_riscv64_cyg_gmon,
#   instrfn_riscv64_cyg_trace_\name.
#   Executed (qemu -singlestep -d exec; +1 the exported stub's `j`): gmon mode, an arc in its
#   home slot 47+1 (enter), 25+1 (exit); trace mode 40+1 each.
    .macro CYG name, kind
    .p2align 2
    .globl instrfn_riscv64_cyg_\name
    .hidden instrfn_riscv64_cyg_\name
    .type instrfn_riscv64_cyg_\name,@function
instrfn_riscv64_cyg_\name:
    .cfi_startproc
    addi sp, sp, -64
    .cfi_def_cfa_offset 64
    sd t0, 0(sp)
    .cfi_rel_offset t0, 0
    sd t1, 8(sp)
    .cfi_rel_offset t1, 8
    sd t2, 16(sp)
    .cfi_rel_offset t2, 16
    sd t3, 24(sp)
    .cfi_rel_offset t3, 24
    sd t4, 32(sp)
    .cfi_rel_offset t4, 32
    la.tls.ie t0, instrfn_tls
    add t0, t0, tp                         # &Tls
    ld t1, {TLS_GUARD}(t0)
    bnez t1, .Lcyg_\name\()_out
.Lcyg_\name\()_enabled:
    auipc t1, %pcrel_hi(instrfn_enabled)
    lbu t1, %pcrel_lo(.Lcyg_\name\()_enabled)(t1)
    beqz t1, .Lcyg_\name\()_out
.Lcyg_\name\()_mode:
    auipc t1, %pcrel_hi(instrfn_mode)
    lbu t1, %pcrel_lo(.Lcyg_\name\()_mode)(t1)
    bnez t1, .Lcyg_\name\()_trace
    .ifc \name,exit
    j .Lcyg_\name\()_out
    .else
    ld t0, {TLS_TABLE}(t0)                 # this thread's ArcTable
    beqz t0, .Lcyg_\name\()_slow
    HASH a1, a0
.Lcyg_\name\()_probe:
    PROBE a1, .Lcyg_\name\()_insert, a0
    addi t1, t1, {SLOT_COUNT}
    li t2, 1
    amoadd.d zero, t2, (t1)
    j .Lcyg_\name\()_out
.Lcyg_\name\()_insert:
    # A new arc, as in instrfn_riscv64_mcount (.Lmcount_insert): t1 = slot address - {SLOT_SELF}.
    ld t2, {TBL_LEN}(t0)
    ld t4, {TBL_LIMIT}(t0)
    bgeu t2, t4, .Lcyg_\name\()_full
    addi t1, t1, {SLOT_SELF}
.Lcyg_\name\()_claim:
    lr.d t2, (t1)
    bnez t2, .Lcyg_\name\()_raced
    sc.d t2, a0, (t1)
    bnez t2, .Lcyg_\name\()_claim
    sd a1, {SLOT_FROM} - {SLOT_SELF}(t1)
    li t2, 1
    addi t4, t1, {SLOT_COUNT} - {SLOT_SELF}
    amoadd.d.rl zero, t2, (t4)
    addi t4, t0, {TBL_LEN}
    amoadd.d zero, t2, (t4)
    j .Lcyg_\name\()_out
.Lcyg_\name\()_raced:
    sub t1, t1, t0
    addi t1, t1, -{SLOT_SELF}
    j .Lcyg_\name\()_probe
.Lcyg_\name\()_full:
    lbu t2, {TBL_LAST}(t0)
    beqz t2, .Lcyg_\name\()_slow
    li t2, 1
    addi t4, t0, {TBL_LOST}
    amoadd.d zero, t2, (t4)
    .endif
.Lcyg_\name\()_out:
    .cfi_remember_state
    ld t0, 0(sp)
    .cfi_restore t0
    ld t1, 8(sp)
    .cfi_restore t1
    ld t2, 16(sp)
    .cfi_restore t2
    ld t3, 24(sp)
    .cfi_restore t3
    ld t4, 32(sp)
    .cfi_restore t4
    addi sp, sp, 64
    .cfi_def_cfa_offset 0
    ret
    .cfi_restore_state
.Lcyg_\name\()_trace:
    .ifc \name,exit
    # A call that recorded nothing inside it: a call word (t5 and t6 kept at 40 and 56(sp) for
    # it: every register is preserved here).
    sd t5, 40(sp)
    .cfi_rel_offset t5, 40
    sd t6, 56(sp)
    .cfi_rel_offset t6, 56
    rdtime t4
    MERGE_CALL a0, t4, .Lcyg_exit_merged, instrfn_riscv64_cyg_exit_merge, t5, t6
    ld t5, 40(sp)
    .cfi_restore t5
    ld t6, 56(sp)
    .cfi_restore t6
    .endif
    .ifc \name,exit
    TRACE_EVENT \kind, a0, .Lcyg_\name\()_tslow, t4, 0 # (the timestamp read above)
    .else
    TRACE_EVENT \kind, a0, .Lcyg_\name\()_tslow, t4
    .endif
    j .Lcyg_\name\()_out
    .ifc \name,exit
.Lcyg_exit_merged:
    .cfi_rel_offset t5, 40
    .cfi_rel_offset t6, 56
    ld t5, 40(sp)
    .cfi_restore t5
    ld t6, 56(sp)
    .cfi_restore t6
    j .Lcyg_exit_out
    .endif
.Lcyg_\name\()_tslow:
    lla t0, instrfn_riscv64_cyg_trace_\name
    j .Lcyg_\name\()_handover
.Lcyg_\name\()_slow:
    lla t0, instrfn_riscv64_cyg_gmon
.Lcyg_\name\()_handover:
    sd t0, 48(sp)
    ld t0, 0(sp)
    .cfi_restore t0
    ld t1, 8(sp)
    .cfi_restore t1
    ld t2, 16(sp)
    .cfi_restore t2
    ld t3, 24(sp)
    .cfi_restore t3
    ld t4, 32(sp)
    .cfi_restore t4
    j instrfn_riscv64_slow
    .cfi_endproc
    .size instrfn_riscv64_cyg_\name, .-instrfn_riscv64_cyg_\name
    .endm

    CYG enter, {EV_ENTRY}
    CYG exit, {EV_EXIT}

# instrfn_riscv64_slow: the slow path of every fast path above.
#   Entry (by jump): sp = the caller's sp - 64 (the fast path's frame), 48(sp) = the Rust
#   function to call; every other register is the instrumented code's as at its call: ra =
#   self_pc (mcount) or the return address (the __cyg_profile entries), a0/a1 and s0 as the
#   compiler left them. Calls fn(&Tls, a0, ra, s0, sp at the call, a1, &spare), where spare is
#   a word of this frame the callee may use (trace mode's "no slot", src/arch/riscv64/mod.rs):
#   instrfn_riscv64_slow_path (the caller of mcount: from a0 or the frame record, marked per
#   site) in gmon mode, instrfn_riscv64_trace_path in trace mode, instrfn_riscv64_cyg_gmon and
#   instrfn_riscv64_cyg_trace_enter/exit for the __cyg_profile entries.
#   Returns through ra with every register restored (a0 included), fcsr too; errno is kept by
#   the Rust side.
#   Frame, 528 bytes below the fast path's 64, CFA = sp + 592 throughout (sp stays 16-byte
#   aligned):
#        8*n(sp)  xn for n = 1 (ra), 3 (gp), 5..31 (t0-t2, s0-s1, a0-a7, s2-s11, t3-t6);
#                 slots 2, 4 unused (sp, tp: sp is the CFA, tp never changes); slot 0 (zero)
#                 is the spare word
#      256+8*n    fn, n = 0..31
#      512        fcsr
#      520        old signal mask
#      576        the Rust function (the fast path's handover word)
    .p2align 2
    .globl instrfn_riscv64_slow
    .hidden instrfn_riscv64_slow
    .type instrfn_riscv64_slow,@function
instrfn_riscv64_slow:
    .cfi_startproc
    .cfi_def_cfa_offset 64
    addi sp, sp, -528
    .cfi_def_cfa_offset 592
    sd x1, 8(sp)
    .cfi_rel_offset x1, 8
    sd x3, 24(sp)
    .cfi_rel_offset x3, 24
    .irp n, 5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    sd x\n, 8*\n(sp)
    .cfi_rel_offset x\n, 8*\n
    .endr
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    fsd f\n, 256+8*\n(sp)
    .cfi_rel_offset f\n, 256+8*\n
    .endr
    frcsr t0
    sd t0, 512(sp)

    BLOCK_SIGNALS 520

    la.tls.ie s1, instrfn_tls
    add s1, s1, tp                         # s1 = &Tls (callee-saved: survives the call)
    li t0, 1
    sd t0, {TLS_GUARD}(s1)                           # guard
    ld t0, 576(sp)                         # the Rust function
    mv a0, s1                              # arg 0: &Tls
    ld a1, 80(sp)                          # arg 1: the instrumented code's a0
    mv a2, ra                              # arg 2: self_pc (or the return address)
    ld a3, 64(sp)                          # arg 3: its s0
    addi a4, sp, 592                       # arg 4: its sp (at the call)
    ld a5, 88(sp)                          # arg 5: its a1
    mv a6, sp                              # arg 6: the spare word
    jalr t0
    sd zero, {TLS_GUARD}(s1)

    RESTORE_SIGNALS 520

    ld t0, 512(sp)
    fscsr t0
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    fld f\n, 256+8*\n(sp)
    .endr
    ld x1, 8(sp)
    ld x3, 24(sp)
    .irp n, 5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    ld x\n, 8*\n(sp)
    .endr
    addi sp, sp, 592
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
    .size instrfn_riscv64_slow, .-instrfn_riscv64_slow
