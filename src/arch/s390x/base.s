# instrfn trampolines for s390x Linux (z/Architecture ELF ABI), GNU as syntax.
#
# Same plan, names and shared layouts (Tls, ArcTable, slot, hash) as src/arch/x86_64/, the annotated
# reference; this file documents only how s390x differs. Assembled as one `global_asm!` block by
# src/arch/s390x/mod.rs, whose naked exported stubs (mcount, _mcount, __fentry__,
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
# - Inserting a new arc in the trampoline (src/arch/x86_64/, .Linsert) needs no extra register:
#   the claim is `csg` (compare and swap, one instruction, so a signal handler on this thread
#   sees the slot either empty or claimed), its comparand is r4, and r4 (the slot offset) is
#   recomputed from the slot address only when a handler claimed the slot first.
#
# Trace mode (src/trace/; the plan and its rules are src/arch/x86_64/'s)
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
# - Unwinding: before an unwinder walks the stack src/trace/ puts `*slot = ret` back into
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
#   the caller and gives the callee its return address (src/trace/).
# - No red zone: the fast paths keep their scratch registers in the instrumented function's
#   save area as in gmon mode; the exit trampoline keeps r4/r5 in the returning function's save
#   area (S + 32), which nothing uses any more, and its slow part runs in the slow path's frame.
# - Reservations (16 bytes of the chunk, 32 of the shadow stack) are compare-and-swap loops:
#   z10 has no interlocked load-and-add (laag came with z196). Each loop checks for room
#   before it claims, so only the shadow entry may have to be given back (agsi, one
#   instruction). Shadow entries follow x86_64's protocol (src/trace/, `in_progress`): a
#   free entry's slot is 0 and every pop zeroes it, the entry fast path writes the slot last
#   (until then the entry is "being pushed", alive), and the exit trampoline writes its event
#   before it pops.
# - INSTRFN_EXITS=off (instrfn_mode 2): mcount and fentry code get entries without exit
#   (EV_NOEXIT) on the fast path, nothing replaced, as clang 14's mcount calls do.
# - The clock is the TOD clock, `stckf` (bit 51 = 1 microsecond: 4096 ticks per microsecond),
#   stored straight into the event.
# - Events and chunk headers are big-endian (native order); the reader tells by the header's
#   version field.

    # Shared data (instrfn_tls, instrfn_enabled, instrfn_all_signals) is in src/abi/data.s.
    # The layout operands of trampoline_asm! used here: Tls {TLS_TABLE} table, {TLS_GUARD} guard;
    # ArcTable {TBL_MASK} mask, {TBL_LEN} len, {TBL_LIMIT} limit, {TBL_SHIFT} shift, {TBL_LAST} last, {TBL_LOST} lost;
    # slots of {SLOT_SIZE} (1 << {SLOT_SHIFT}) bytes, self_pc at {SLOT_SELF}, from_pc at {SLOT_FROM}, count at {SLOT_COUNT}
    # (from the table base plus the slot offset); the hash multiplier {HASH_MUL} comes from
    # instrfn_hash_mul (src/abi/data.s).
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
