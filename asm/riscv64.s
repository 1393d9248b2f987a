# instrfn trampolines for riscv64 Linux (LP64D psABI, RV64GC), GNU as syntax.
#
# Same plan, symbols and layouts as asm/x86_64.s (the annotated reference: Tls, ArcTable, slot
# hash, fast path / slow path / guarded routine). Only the differences are described here.
# The layout operands of trampoline_asm! used here: Tls {TLS_TABLE} table, {TLS_GUARD} guard;
# ArcTable {TBL_MASK} mask, {TBL_LEN} len, {TBL_LIMIT} limit, {TBL_SHIFT} shift, {TBL_LAST} last, {TBL_LOST} lost; slots of
# {SLOT_SIZE} (1 << {SLOT_SHIFT}) bytes, self_pc at {SLOT_SELF}, from_pc at {SLOT_FROM}, count at {SLOT_COUNT} from the table
# base plus the slot offset; the hash multiplier {HASH_MUL} is loaded from instrfn_hash_mul
# (asm/data.s). riscv64's own operands (src/arch/riscv64.rs): the marker offsets and the
# stack bounds layout, described below.
#
# Entry: an ordinary call after the prologue, ra = self_pc (our return address into the
# instrumented function). Where the caller's pc (from_pc, the instrumented function's own
# return address) is depends on the compiler, and the call itself (`auipc ra; jalr ra`, or
# `jal ra` once relaxed) does not tell:
#       gcc -O2 -pg:          mv a0, ra (possibly scheduled earlier); call _mcount
#                             a0 = from_pc; no frame pointer: s0 is an ordinary register
#       rustc (LLVM 22):      a0 = llvm.returnaddress(0); call _mcount; frame pointers forced
#                             a0 = from_pc = -8(s0)
#       clang 14 -pg:         call _mcount, nothing else; a frame pointer always (clang refuses
#                             -fomit-frame-pointer with -pg): s0 = the sp at entry, ra at -8(s0)
#                             a0 = the function's first argument; from_pc = -8(s0)
# So the slow path decides, once per call site (self_pc) for all threads, which of a0 and
# -8(s0) is the caller, and marks the site in the thread's arc table with a marker: a key of
# count 0 (readers skip count-0 slots), (self_pc + {MARK_FRAME}, self_pc) = FRAME, "from_pc is
# -8(s0)", or (self_pc + {MARK_A0}, self_pc) = A0, "from_pc is a0". These from_pcs are odd, so never
# pcs, and, unlike small constants, never plausible arguments either (clang code would
# otherwise find a marker with its a0 and count it as an arc).
# The fast path probes (a0, self_pc) first, so a hit of gcc's or rustc's code costs what it
# did before the markers; only when that probe reaches an empty slot does it look for the
# FRAME marker (then probes, and inserts, (-8(s0), self_pc)), then for the A0 marker or an
# A0 decision any thread made (instrfn_riscv64_decided; then it inserts (a0, self_pc)); a
# site with neither goes to the slow path, which marks it, deciding only if no thread has.
# The rule of the slow path (instrfn_riscv64_slow_path in src/arch/riscv64.rs, from a0, ra,
# s0 and sp at the call; /proc/self/maps read with raw system calls, which qemu-user emulates
# with the guest's mappings):
#   1. -8(s0) is a candidate only if s0 lies in the stack that holds sp: 16-byte aligned,
#      above sp, at most the end of sp's mapping. It is read only then (gcc's s0 may hold
#      anything). No candidate: A0.
#   2. a0 == -8(s0): A0 (gcc -fno-omit-frame-pointer, rustc: both are right).
#   3. Otherwise the better return address of the two wins, FRAME only when strictly better:
#      0 = none; 1 = a return address: in an executable, readable mapping, after an instruction
#      that calls and links ra (jal ra; jalr ra, ..(..); c.jalr), or at the signal return
#      trampoline (`li a7, 139; ecall`, where a signal handler's ra points); 2 = after a direct
#      call (jal ra, or auipc ra + jalr ra, ..(ra)) whose target lies at most 512 bytes before
#      self_pc: a call of this very function. gcc's a0 is at least 1; clang's a0, an
#      argument, practically never is, and its -8(s0) is (a signal handler's too).
# A marker is only a hint about the code: the fast path loads -8(s0) only after checking s0
# against this thread's stack bounds (instrfn_riscv64_stack), so no marker, right or wrong or
# stale (a library unloaded and another loaded at its address), can make it fault.
# instrfn preserves every register, a0 included, so hand-written or future callers may rely
# on it. There is no __fentry__ on riscv64 (gcc has no -mfentry there).
#
# Trace mode (src/trace.rs; the layout operands: Tls {TLS_TRACE_POS} trace_pos, {TLS_TRACE_END} trace_end,
# {TLS_SHADOW_TOP} shadow_top, {TLS_SHADOW_END} shadow_end, {TLS_SHADOW_BASE} shadow_base, {TLS_UNWOUND} unwound, {TLS_DROPPED} dropped; shadow entries of {SH_BYTES} bytes,
# the original return address at {SH_RET}, its slot at {SH_SLOT}, the function at {SH_FN}; Tls {TLS_TRACE_TBASE} trace_tbase and
# {TLS_TRACE_CBASE} trace_cbase, the chunk's bases; compact events (TRACE_EVENT below): short ones of {EV_SHORT_BYTES} bytes, tag
# {EV_TAG_ENTRY} entry or {EV_TAG_EXIT} exit, long ones of {EV_BYTES}, (value << {EV_LONG_SHIFT}) | (t << {EV_TS_SHIFT}) | (kind << 2) | {EV_TAG_LONG}
# then the timestamp with its low two bits t 0, kinds {EV_ENTRY} entry and {EV_EXIT} exit). The exit trampoline
# must tell, from sp at a return, which frame returns, and the fast path must know where the
# function saved ra. Neither a0 nor s0 says that in gcc -O2 code (no frame pointer), so the
# slow path decodes, once per call site, the instructions from the function's entry to the
# counting call (src/arch/riscv64.rs, `prologue`), and keeps the result in
# instrfn_riscv64_sites: the slot's offset from sp at the call, and a guard the code proves
# (a0 = the slot's word, or s0 = the CFA) that the fast path checks on every call. Only slots
# at CFA - 8 are replaced (gcc, clang and rustc put ra there in every function without
# variable arguments); sp at the return is then the CFA, and the exit trampoline compares
# sp - 8 with the newest shadow entry's slot. Other sites are traced as entries without exit.
#
# Differences from x86_64:
# - No red zone: the kernel may write a signal frame anywhere below sp, so the fast path moves
#   sp down 64 bytes before it saves its scratch registers, and describes that in its CFI.
# - The count is added with `amoadd.d` (A extension, part of RV64GC): one instruction, so a
#   signal handler counting the same arc on this thread never tears it.
# - Inserting a new arc (x86_64's cmpxchg claim): the slot is claimed with an lr.d/sc.d loop
#   that stores self_pc only while slot.self_pc is still 0, and gives up (probes that slot
#   again) when lr.d finds it taken. A signal handler that runs between lr.d and sc.d makes
#   sc.d fail (the kernel clears the reservation on every trap return) and the loop reloads;
#   amoswap would overwrite the handler's claim. RVWMO is weakly ordered: the first count is
#   added with `amoadd.d.rl`, a release, so another CPU that sees count 1 (the gmon writer
#   loads it with Acquire) also sees the claim and from_pc stored before it. table.len is
#   counted with a plain `amoadd.d`.
# - RV64GC has no rotate instruction (Zbb is not assumed): rotl 32 is slli/srli/or.
# - Thread pointer tp; initial-exec TLS with `la.tls.ie`: a GOT slot holding the offset of
#   instrfn_tls from tp (R_RISCV_TLS_TPREL64 in the .so, which gets DF_STATIC_TLS; filled by
#   the linker in executables), then `add` tp.
# - FP state is f0-f31 (64-bit, D) and fcsr; the slow path saves all of it. The V extension is
#   not saved: the psABI makes every vector register caller-saved (so no instrumented code has
#   one live across its _mcount call), and nothing on the slow path (Rust compiled for
#   rv64gc, glibc 2.36's string functions) executes a vector instruction. Touching V here would
#   also switch the kernel's lazily enabled vector state on for every thread.
# - Calls through a PLT clobber t1 and t3 (the PLT stub: `auipc t3; ld t3; jalr t1, t3`):
#   that happens before the trampoline runs and is allowed for an ordinary call.

# rustc assembles module-level asm for the base ISA only (the target's features reach the
# functions, not this block), so the extensions used below are enabled here, and only here.
    .option push
    .option arch, +m, +a, +f, +d, +c, +zicsr, +zicntr

    # Shared data (instrfn_tls, instrfn_enabled, instrfn_all_signals) is in asm/data.s.

    # This thread's stack, as the slow path last found it in /proc/self/maps: the mapping
    # [lo, hi) that held sp (src/arch/riscv64.rs StackBounds: lo at {STK_LO}, hi at {STK_HI}, {STK_SIZE} bytes of
    # initial-exec TLS); zero until then. Read by the fast path before it loads -8(s0).
    .section .tbss,"awT",@nobits
    .p2align 4
    .globl instrfn_riscv64_stack
    .hidden instrfn_riscv64_stack
    .type instrfn_riscv64_stack,@object
    .size instrfn_riscv64_stack, {STK_SIZE}
instrfn_riscv64_stack:
    .zero {STK_SIZE}

    # The sites decided so far, by any thread (src/arch/riscv64.rs, `remember`): 1 << {DEC_BITS}
    # words, open addressing from the top bits of self_pc * {HASH_MUL}, linear probing; a word is
    # self_pc for A0, self_pc + 1 for FRAME, 0 when empty. Words are claimed with a CAS by the
    # slow path and never change again; at most half of them are used, so every probe ends.
    # Read by the fast path of a thread that meets a site it has no marker for: an A0 site's
    # arcs are then inserted at once.
    .bss
    .p2align 6
    .globl instrfn_riscv64_decided
    .hidden instrfn_riscv64_decided
    .type instrfn_riscv64_decided,@object
    .size instrfn_riscv64_decided, 8 << {DEC_BITS}
instrfn_riscv64_decided:
    .zero 8 << {DEC_BITS}

    # Trace mode's rule per call site, by any thread (src/arch/riscv64.rs, `remember_site`):
    # 1 << {SITE_BITS} entries (self_pc, rule) of 16 bytes, open addressing from the top bits of
    # self_pc * {HASH_MUL}, linear probing; self_pc 0 when empty. An entry's self_pc is claimed with
    # a CAS by the slow path, its rule written once after it (0 until then: the fast path sends
    # the call to the slow path); neither changes again. At most half of them are used.
    .bss
    .p2align 6
    .globl instrfn_riscv64_sites
    .hidden instrfn_riscv64_sites
    .type instrfn_riscv64_sites,@object
    .size instrfn_riscv64_sites, 16 << {SITE_BITS}
instrfn_riscv64_sites:
    .zero 16 << {SITE_BITS}

    # The Rust slow paths of riscv64, like instrfn_slow_path (asm/data.s): never exported.
    .hidden instrfn_riscv64_slow_path
    .hidden instrfn_riscv64_trace_path
    .hidden instrfn_riscv64_cyg_gmon
    .hidden instrfn_riscv64_cyg_trace_enter
    .hidden instrfn_riscv64_cyg_trace_exit

    .text

# BLOCK_SIGNALS off: rt_sigprocmask(SIG_BLOCK, all, old = sp + off, 8).
# RESTORE_SIGNALS off: rt_sigprocmask(SIG_SETMASK, sp + off, NULL, 8).
#   Raw system calls (no libc, errno untouched); clobber a0-a3, a7.
    .macro BLOCK_SIGNALS off
    li a7, 135
    li a0, 0
    lla a1, instrfn_all_signals
    addi a2, sp, \off
    li a3, 8
    ecall
    .endm
    .macro RESTORE_SIGNALS off
    li a7, 135
    li a0, 2
    addi a1, sp, \off
    li a2, 0
    li a3, 8
    ecall
    .endm

# HASH from, self: t1 = the byte offset, before masking, of the home slot of (\from, \self):
#   the hash of asm/x86_64.s (rotl 32 as slli/srli/or). t0 = table; clobbers t2.
    .macro HASH from, self
    slli t1, \self, 32
    srli t2, \self, 32
    or t1, t1, t2
    xor t1, t1, \from
1:  auipc t2, %pcrel_hi(instrfn_hash_mul)
    ld t2, %pcrel_lo(1b)(t2)
    mul t1, t1, t2
    lbu t2, {TBL_SHIFT}(t0)
    srl t1, t1, t2
    slli t1, t1, {SLOT_SHIFT}
    .endm

# PROBE from, empty, self: linear probing for the key (\from, \self) from the slot offset in t1.
#   Found: falls through with t1 = the slot's address - {SLOT_SELF} (table + offset). An empty
#   slot reached first: jumps to \empty with t1 likewise, t2 = 0. t0 = table; clobbers t2.
#   Jumping to the instruction where a PROBE starts, with t1 = an offset, probes from there.
    .macro PROBE from, empty, self
2:  ld t2, {TBL_MASK}(t0)                           # mask (a no-op on the first probe)
    and t1, t1, t2
    add t1, t1, t0
    ld t2, {SLOT_SELF}(t1)                          # slot.self_pc
    bne t2, \self, 3f
    ld t2, {SLOT_FROM}(t1)                          # slot.from_pc
    beq t2, \from, 4f
    j 5f
3:  beqz t2, \empty
5:  sub t1, t1, t0                         # back to an offset, next slot
    addi t1, t1, {SLOT_SIZE}
    j 2b
4:
    .endm

# TRACE_EVENT kind, value, nochunk, ts, read=1: the fast paths' event: take the timestamp
#   (rdtime, into \ts; with read=0 the caller just did), then reserve this thread's next event and write it, a compact one
#   (docs/trace-format.md, chunk version 2; asm/x86_64.s TRACE_EVENT is the reference): short
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
#   entry's time, the call's length and fn. asm/x86_64.s MERGE_CALL is the reference: the same
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
    # Trace mode (src/trace.rs): an entry event of self_pc, and the function's return slot
    # replaced by instrfn_riscv64_exit, so that its return is seen too. t0 = &Tls; t3, t4, t5
    # are scratch from here on. Anything out of the ordinary goes to the slow path
    # (instrfn_riscv64_trace_path), which records the call itself: a site not decided yet or
    # without a return slot it can prove, a guard that fails, no chunk yet or a full one, a
    # full shadow stack, frames left behind by longjmp or put back by an unwinder.
    # Where the slot is: the site's rule in instrfn_riscv64_sites (1 << {SITE_BITS} entries of 16
    # bytes, (self_pc, rule), open addressing from the top bits of self_pc * {HASH_MUL}, linear
    # probing; filled by the slow path only, which decoded the instructions from the function's
    # entry to this call: src/arch/riscv64.rs, `prologue`). rule = (D << 3) | guard: the slot
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
    # is never closed, nor is its return slot touched by the unwinder wrappers, src/trace.rs
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
#   nothing replaced. The slow paths (src/arch/riscv64.rs): instrfn_riscv64_cyg_gmon,
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
#   a word of this frame the callee may use (trace mode's "no slot", src/arch/riscv64.rs):
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
#   own history (asm/x86_64.s's exit: 29.4 -> 23.0 ns per call at one thread for the same
#   change; not measured here, qemu does not model it).
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
#   between the returning function and its caller, as x86_64's (asm/x86_64.s): the caller's sp
#   is sp, the frame's own CFA sp + 16, and the caller's return address the `ret` word of the
#   newest shadow entry whose slot is sp - 8, found by a DWARF expression
#   (scripts/return-pad-cfi.py riscv64) that takes its own pc from ra (libgcc restores the
#   return address column as a register) and from the pc-relative word before the pad the
#   registry instrfn_registry.
# RETURN_ADDRESS_IN_ENTRY: CFI, the caller's return address (ra, DWARF register 1) is saved at
#   [t4 + SH_RET]: DW_CFA_expression ra, DW_OP_breg29 (t4 = x29) SH_RET (a one-byte SLEB128:
#   src/trace.rs asserts it).
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
    # INSTRFN_MIN_DURATION (asm/x86_64.s .Lexit_short): a call shorter than instrfn_min_ticks
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

# instrfn_riscv64_guarded: run a runtime entry point with this thread's guard held and all
#   signals blocked (as on x86_64, also when called from a signal handler: qemu-riscv64 7.2
#   does not apply a handler's sa_mask).
#   t0 = the Rust function to call, a0/a1/a2 = its first three arguments. Returns the
#   function's a0/a1; errno, the previous guard value and the signal mask are restored.
#   Clobbers what an ordinary call clobbers.
#   Frame, 96 bytes, s0 = CFA = sp + 96 (a standard frame-pointer frame):
#      CFA-8 ra  -16 s0  -24 s1  -32 s2  -40 s3  -48 s4  -56 s5
#      sp+0 old signal mask   sp+8 errno   sp+16 old guard
    .p2align 2
    .globl instrfn_riscv64_guarded
    .hidden instrfn_riscv64_guarded
    .type instrfn_riscv64_guarded,@function
instrfn_riscv64_guarded:
    .cfi_startproc
    addi sp, sp, -96
    .cfi_def_cfa_offset 96
    sd ra, 88(sp)
    .cfi_rel_offset ra, 88
    sd s0, 80(sp)
    .cfi_rel_offset s0, 80
    addi s0, sp, 96
    .cfi_def_cfa s0, 0
    sd s1, 72(sp)
    .cfi_offset s1, -24
    sd s2, 64(sp)
    .cfi_offset s2, -32
    sd s3, 56(sp)
    .cfi_offset s3, -40
    sd s4, 48(sp)
    .cfi_offset s4, -48
    sd s5, 40(sp)
    .cfi_offset s5, -56
    mv s2, t0
    mv s3, a0
    mv s4, a1
    mv s5, a2
    BLOCK_SIGNALS 0
    call __errno_location
    lw a0, 0(a0)
    sw a0, 8(sp)
    la.tls.ie s1, instrfn_tls
    add s1, s1, tp                         # s1 = &Tls
    ld a0, {TLS_GUARD}(s1)
    sd a0, 16(sp)                          # old guard
    li a0, 1
    sd a0, {TLS_GUARD}(s1)
    mv a0, s3
    mv a1, s4
    mv a2, s5
    jalr s2
    mv s3, a0
    mv s4, a1
    ld a0, 16(sp)
    sd a0, {TLS_GUARD}(s1)
    call __errno_location
    lw a1, 8(sp)
    sw a1, 0(a0)
    RESTORE_SIGNALS 0
    mv a0, s3
    mv a1, s4
    ld s5, 40(sp)
    ld s4, 48(sp)
    ld s3, 56(sp)
    ld s2, 64(sp)
    ld s1, 72(sp)
    ld ra, 88(sp)
    ld s0, 80(sp)
    .cfi_def_cfa sp, 96
    addi sp, sp, 96
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
    .size instrfn_riscv64_guarded, .-instrfn_riscv64_guarded

# instrfn_riscv64_stack_get: a0 = address of this thread's StackBounds. Clobbers nothing else.
    .p2align 2
    .globl instrfn_riscv64_stack_get
    .hidden instrfn_riscv64_stack_get
    .type instrfn_riscv64_stack_get,@function
instrfn_riscv64_stack_get:
    .cfi_startproc
    la.tls.ie a0, instrfn_riscv64_stack
    add a0, a0, tp
    ret
    .cfi_endproc
    .size instrfn_riscv64_stack_get, .-instrfn_riscv64_stack_get

# instrfn_tls_get: a0 = address of this thread's Tls. Clobbers nothing else.
    .p2align 2
    .globl instrfn_tls_get
    .hidden instrfn_tls_get
    .type instrfn_tls_get,@function
instrfn_tls_get:
    .cfi_startproc
    la.tls.ie a0, instrfn_tls
    add a0, a0, tp
    ret
    .cfi_endproc
    .size instrfn_tls_get, .-instrfn_tls_get

# instrfn_call_on_stack(f = a0, arg = a1, top = a2): as on x86_64 (asm/x86_64.s); s0 holds the
#   caller's stack pointer.
    .p2align 2
    .globl instrfn_call_on_stack
    .hidden instrfn_call_on_stack
    .type instrfn_call_on_stack,@function
instrfn_call_on_stack:
    .cfi_startproc
    addi sp, sp, -16
    .cfi_def_cfa_offset 16
    sd ra, 8(sp)
    .cfi_rel_offset ra, 8
    sd s0, 0(sp)
    .cfi_rel_offset s0, 0
    addi s0, sp, 16
    .cfi_def_cfa s0, 0
    mv t0, a0
    mv a0, a1
    andi a2, a2, -16
    mv sp, a2
    jalr t0
    addi sp, s0, -16
    .cfi_def_cfa sp, 16
    ld ra, 8(sp)
    .cfi_restore ra
    ld s0, 0(sp)
    .cfi_restore s0
    addi sp, sp, 16
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
    .size instrfn_call_on_stack, .-instrfn_call_on_stack

    .option pop
