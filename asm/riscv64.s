# instrfn trampolines for riscv64 Linux (LP64D psABI, RV64GC), GNU as syntax.
#
# Same plan, symbols and layouts as asm/x86_64.s (the annotated reference: Tls, ArcTable, slot
# hash, fast path / slow path / guarded routine). Only the differences are described here.
# The layout operands of trampoline_asm! used here: Tls {TLS_TABLE} table, {TLS_GUARD} guard;
# ArcTable {TBL_MASK} mask, {TBL_LEN} len, {TBL_LIMIT} limit, {TBL_SHIFT} shift, {TBL_LAST} last, {TBL_LOST} lost; slots of
# {SLOT_SIZE} (1 << {SLOT_SHIFT}) bytes, self_pc at {SLOT_SELF}, from_pc at {SLOT_FROM}, count at {SLOT_COUNT} from the table
# base plus the slot offset; the hash multiplier {HASH_MUL} is loaded from instrfn_hash_mul
# (asm/data.s).
#
# Entry: the compilers emit an ordinary call, `mv a0, ra; call _mcount` (gcc -pg; LLVM passes
# llvm.returnaddress(0) the same way), so a0 = from_pc (the instrumented function's own return
# address) and ra = self_pc (our return address into the instrumented function). gcc keeps
# nothing in a caller-saved register across that call (it moves the arguments to s-registers
# first, and reloads ra from its frame afterwards); instrfn nevertheless preserves every
# register, a0 included, so hand-written or future callers may rely on it. There is no
# __fentry__ on riscv64 (gcc has no -mfentry there).
#
# Differences from x86_64:
# - No red zone: the kernel may write a signal frame anywhere below sp, so the fast path moves
#   sp down 32 bytes before it saves its scratch registers, and describes that in its CFI.
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
    .option arch, +m, +a, +f, +d, +c

    # Shared data (instrfn_tls, instrfn_enabled, instrfn_all_signals) is in asm/data.s.

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

# instrfn_riscv64_mcount: the fast path of mcount/_mcount, new arcs included.
#   Entry: a0 = from_pc, ra = self_pc. Every register is preserved (a0 too); t0, t1, t2 are
#   scratch, saved at 0, 8, 16(sp) below the caller's sp (CFA = sp + 32 while they are); the
#   insert path also uses t3, saved at 24(sp) on that path only (and described there).
#   Hands over to instrfn_riscv64_slow with the entry state exactly as it was.
#   Executed on a hit in the first probed slot: 37 instructions, ret included (38 with the
#   `j` of the exported _mcount stub). A new arc whose first probed slot is empty: 50 (51).
    .p2align 2
    .globl instrfn_riscv64_mcount
    .hidden instrfn_riscv64_mcount
    .type instrfn_riscv64_mcount,@function
instrfn_riscv64_mcount:
    .cfi_startproc
    addi sp, sp, -32
    .cfi_def_cfa_offset 32
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
    ld t0, {TLS_TABLE}(t0)                           # this thread's ArcTable
    beqz t0, .Lmcount_slow
    slli t1, ra, 32                        # slot offset = hash(from_pc, self_pc)
    srli t2, ra, 32
    or t1, t1, t2
    xor t1, t1, a0
.Lmcount_mul:
    auipc t2, %pcrel_hi(instrfn_hash_mul)
    ld t2, %pcrel_lo(.Lmcount_mul)(t2)
    mul t1, t1, t2
    lbu t2, {TBL_SHIFT}(t0)
    srl t1, t1, t2
    slli t1, t1, {SLOT_SHIFT}
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
    addi sp, sp, 32
    .cfi_def_cfa_offset 0
    ret
    .cfi_restore_state
.Lmcount_miss:
    beqz t2, .Lmcount_insert               # empty slot: the arc is not in the table
.Lmcount_next:
    sub t1, t1, t0                         # back to an offset, next slot
    addi t1, t1, {SLOT_SIZE}
    j .Lmcount_probe
.Lmcount_insert:
    # A new arc, inserted here while the table holds fewer than `limit` arcs.
    # Claim the slot (self_pc: 0 -> self_pc), store from_pc, then add the count (release) and
    # the table's len. t0 = table, t1 = slot address - {SLOT_SELF}.
    sd t3, 24(sp)
    .cfi_offset t3, -8                     # CFA-relative: LLVM's .cfi_rel_offset would use
                                           # the CFA offset of the preceding ret (0), as
                                           # .cfi_restore_state does not reset what it tracks
    ld t2, {TBL_LEN}(t0)                          # len
    ld t3, {TBL_LIMIT}(t0)                          # limit
    bgeu t2, t3, .Lmcount_full
    addi t1, t1, {SLOT_SELF}                        # t1 = &slot.self_pc
.Lmcount_claim:
    lr.d t2, (t1)
    bnez t2, .Lmcount_raced                # claimed meanwhile by a signal handler
    sc.d t2, ra, (t1)
    bnez t2, .Lmcount_claim                # reservation lost (a trap came between): retry
    sd a0, {SLOT_FROM} - {SLOT_SELF}(t1)                           # slot.from_pc
    li t2, 1
    addi t3, t1, {SLOT_COUNT} - {SLOT_SELF}                        # &slot.count: 0 -> 1, after from_pc for other CPUs
    amoadd.d.rl zero, t2, (t3)
    addi t3, t0, {TBL_LEN}                        # &table.len
    amoadd.d zero, t2, (t3)
    ld t3, 24(sp)
    .cfi_remember_state
    .cfi_restore t3
    j .Lmcount_out
    .cfi_restore_state
.Lmcount_raced:
    sub t1, t1, t0                         # back to the offset of that slot: probe it again
    addi t1, t1, -{SLOT_SELF}
    ld t3, 24(sp)
    .cfi_remember_state
    .cfi_restore t3
    j .Lmcount_probe
    .cfi_restore_state
.Lmcount_full:
    # The table holds `limit` arcs: the last table of a chain (INSTRFN_MAX_ARCS reached)
    # counts the call as lost right here; any other grows in the slow path.
    lbu t2, {TBL_LAST}(t0)
    beqz t2, .Lmcount_grow
    li t2, 1
    addi t3, t0, {TBL_LOST}                        # &table.lost
    amoadd.d zero, t2, (t3)
    ld t3, 24(sp)
    .cfi_remember_state
    .cfi_restore t3
    j .Lmcount_out
    .cfi_restore_state
.Lmcount_grow:
    ld t3, 24(sp)
    .cfi_restore t3
.Lmcount_slow:
    ld t0, 0(sp)
    .cfi_restore t0
    ld t1, 8(sp)
    .cfi_restore t1
    ld t2, 16(sp)
    .cfi_restore t2
    addi sp, sp, 32
    .cfi_def_cfa_offset 0
    j instrfn_riscv64_slow
    .cfi_endproc
    .size instrfn_riscv64_mcount, .-instrfn_riscv64_mcount

# instrfn_riscv64_slow: the slow path.
#   Entry (by jump): a0 = from_pc, ra = self_pc, every other register the instrumented code's.
#   Returns through ra with every register restored (a0 included), fcsr too; errno is kept by
#   the Rust side.
#   Frame, 528 bytes, CFA = sp + 528 throughout (sp stays 16-byte aligned):
#        8*n(sp)  xn for n = 1 (ra), 3 (gp), 5..31 (t0-t2, s0-s1, a0-a7, s2-s11, t3-t6);
#                 slots 0, 2, 4 unused (zero, sp, tp: sp is the CFA, tp never changes)
#      256+8*n    fn, n = 0..31
#      512        fcsr
#      520        old signal mask
    .p2align 2
    .globl instrfn_riscv64_slow
    .hidden instrfn_riscv64_slow
    .type instrfn_riscv64_slow,@function
instrfn_riscv64_slow:
    .cfi_startproc
    addi sp, sp, -528
    .cfi_def_cfa_offset 528
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
    mv a0, s1                              # arg 0: &Tls
    ld a1, 80(sp)                          # arg 1: from_pc (the saved a0)
    mv a2, ra                              # arg 2: self_pc
    call instrfn_slow_path
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
    addi sp, sp, 528
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
    .size instrfn_riscv64_slow, .-instrfn_riscv64_slow

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
