// instrfn trampolines for aarch64 Linux (AAPCS64), GNU as syntax.
//
// Same plan, symbols, layouts (Tls, ArcTable, Slot) and hash as asm/x86_64.s, the annotated
// reference; this file documents only how aarch64 differs. It is assembled by LLVM as one
// `global_asm!` block from src/arch/aarch64.rs (where braces would be format placeholders, so
// none appear here); the exported names are naked functions there that branch into it.
//
// The counting call is an ordinary AAPCS64 call after the prologue, always with the frame
// record set up (`stp x29, x30, [sp, #-N]!; mov x29, sp`: gcc refuses -pg with
// -fomit-frame-pointer, clang forces a frame pointer under -pg, rustc under -Zinstrument-mcount):
//       gcc -pg:                 hint #7 (xpaclri); mov x0, x30; bl _mcount
//       rustc (LLVM 22):         x0 = llvm.returnaddress(0); bl _mcount
//       clang 14 -pg:            bl _mcount            (x0 = whatever it held: an argument)
// So the trampolines take from_pc from the frame record, [x29, #8], which every compiler has
// written, and strip a pointer authentication code from it (code built with
// -mbranch-protection=pac-ret signs x30 before saving it) with `hint #7` (xpaclri: a NOP on
// CPUs without PAC, where nothing is signed). x0 is not read; x30 = self_pc.
// The compilers move whatever they still need (arguments, x8, the static chain x18) into
// callee-saved registers or the frame first.
// The trampolines nevertheless preserve every register except x0 (the from_pc argument of
// gcc's call) and x16/x17
// (IP0/IP1, which any veneer or PLT entry on the way in may clobber too): x1-x15, x18-x29,
// sp, v0-v31 in full, FPCR and FPSR. x30 comes back as self_pc (we return through it).
// NZCV is clobbered, as by any call. The fast path never touches FP/SIMD; the slow path
// saves q0-q31 whole because AAPCS64 keeps only the low halves of v8-v15 across the Rust
// call. Beyond 128 bits (SVE Z upper bits, P registers) a base-PCS call may clobber
// anything, and the slow path's system calls do discard them.
//
// Shared layouts are the `{{NAME}}` operands of trampoline_asm! (asm/x86_64.s lists them all):
// Tls {TLS_TABLE} table, {TLS_GUARD} guard; ArcTable {TBL_MASK} mask, {TBL_LEN} len, {TBL_LIMIT} limit,
// {TBL_SHIFT} shift, {TBL_LAST} last, {TBL_LOST} lost; slots of {SLOT_SIZE} (= 1 << {SLOT_SHIFT}) bytes with self_pc at
// {SLOT_SELF} and from_pc right after it at {SLOT_FROM} (one ldp loads both), count at {SLOT_COUNT}; the hash
// multiplier {HASH_MUL} is loaded from instrfn_hash_mul (asm/data.s).
//
// Differences from x86_64:
// - No red zone: the fast path pushes x1/x2 (one 16-byte pair keeps sp 16-byte aligned, which
//   Linux enforces for sp-based accesses) before it needs more scratch than x16/x17.
// - TLS: the thread pointer is tpidr_el0; the offset of instrfn_tls comes from the GOT
//   (:gottprel:, initial-exec), which the linker relaxes to an immediate in executables.
// - The count is bumped with an ldxr/stxr loop: a signal handler that counts on this thread
//   between the two clears the exclusive monitor (its own stxr, and every exception return,
//   on ARMv8), so our stxr fails and the loop reloads. The hit path needs no barrier.
// - Insert (a new arc while len < limit): the slot is claimed with an ldxr/stxr loop on its
//   self_pc that gives up (clrex, then probes that slot again) as soon as it loads a nonzero
//   value, i.e. a signal handler on this thread claimed it between our probe and our stxr.
//   x86 orders stores by itself; here the first count update is a store-release (stlxr), so
//   the from_pc (and self_pc) stores before it reach other CPUs no later than the count. A
//   later plain stxr on the count is coherence-after that release, which keeps the order too
//   (the architecture orders po;[L];coi, like C++'s release sequence), so the gmon writer's
//   Acquire load of any nonzero count sees from_pc. The release costs nothing on the hit path
//   and no dmb anywhere. len is bumped with one more ldxr/stxr loop.
// - No XSAVE detection: the FP/SIMD file is fixed (32 x 128 bits, FPCR, FPSR).
// - System calls: `svc #0` with the number in x8 (rt_sigprocmask = 135); only x0 changes.

    // Shared data (instrfn_tls, instrfn_enabled, instrfn_all_signals) is in asm/data.s.

    .text

// BLOCK_SIGNALS off: rt_sigprocmask(SIG_BLOCK, all, old = sp + off, 8).
// RESTORE_SIGNALS off: rt_sigprocmask(SIG_SETMASK, sp + off, NULL, 8).
//   Raw system calls (no libc, errno untouched); clobber x0-x3, x8.
    .macro BLOCK_SIGNALS off
    mov     x0, #0
    adrp    x1, instrfn_all_signals
    add     x1, x1, #:lo12:instrfn_all_signals
    add     x2, sp, #\off
    mov     x3, #8
    mov     x8, #135
    svc     #0
    .endm
    .macro RESTORE_SIGNALS off
    mov     x0, #2
    add     x1, sp, #\off
    mov     x2, #0
    mov     x3, #8
    mov     x8, #135
    svc     #0
    .endm

// instrfn_aarch64_mcount: the fast path of _mcount and mcount.
//   Entry: x30 = self_pc, x29 = the instrumented function's frame record; sp 16-byte aligned
//   (an ordinary call).
//   Registers: x0, x16, x17 and NZCV clobbered, all others preserved; x1/x2 are used as
//   scratch, saved in a 16-byte push whose CFI rows are below. In the body x0 = from_pc,
//   x16 = table, x17 = slot offset; the insert path needs no more (x2 = slot address,
//   x1/x17 = loaded value/status), so every path keeps the same one push and the same CFA
//   (sp + 16 between the stp and the ldp). The CFA offsets are absolute
//   (.cfi_def_cfa_offset), not .cfi_adjust_cfa_offset: LLVM's assembler adds adjustments to a
//   running offset that .cfi_restore_state does not reset, so the second `-16` after the
//   remembered state came out as CFA = sp - 16.
//   Hands over to instrfn_aarch64_slow with x0 = from_pc and x30 = self_pc.
    .p2align 4
    .globl instrfn_aarch64_mcount
    .hidden instrfn_aarch64_mcount
    .type instrfn_aarch64_mcount,%function
instrfn_aarch64_mcount:
    .cfi_startproc
    mrs     x16, tpidr_el0
    adrp    x17, :gottprel:instrfn_tls
    ldr     x17, [x17, #:gottprel_lo12:instrfn_tls]
    add     x16, x16, x17                   // &Tls
    ldr     x17, [x16, #{TLS_GUARD}]                  // guard held: runtime code is running here
    cbnz    x17, .Lout
    adrp    x17, instrfn_enabled
    ldrb    w17, [x17, #:lo12:instrfn_enabled]
    cbz     w17, .Lout
    ldr     x16, [x16, #{TLS_TABLE}]                      // this thread's ArcTable
    ldr     x0, [x29, #8]                   // from_pc: the frame record's saved x30,
    mov     x17, x30                        // without its pointer authentication code
    mov     x30, x0
    hint    #7                              // xpaclri
    mov     x0, x30
    mov     x30, x17
    cbz     x16, instrfn_aarch64_slow
    stp     x1, x2, [sp, #-16]!
    .cfi_def_cfa_offset 16
    .cfi_rel_offset x1, 0
    .cfi_rel_offset x2, 8
    ror     x17, x30, #32                   // slot offset = hash(from_pc, self_pc)
    eor     x17, x17, x0
    adrp    x1, instrfn_hash_mul
    ldr     x1, [x1, #:lo12:instrfn_hash_mul]
    mul     x17, x17, x1
    ldrb    w1, [x16, #{TBL_SHIFT}]
    lsr     x17, x17, x1
    lsl     x17, x17, #{SLOT_SHIFT}
.Lprobe:
    add     x2, x16, x17                    // slot - {SLOT_SELF}
    ldp     x1, x17, [x2, #{SLOT_SELF}]              // slot.self_pc, slot.from_pc
    cmp     x1, x30
    ccmp    x17, x0, #0, eq
    b.ne    .Lmiss
    add     x2, x2, #{SLOT_COUNT}                    // &slot.count
.Lcount:
    ldxr    x1, [x2]
    add     x1, x1, #1
    stxr    w17, x1, [x2]
    cbnz    w17, .Lcount                    // a signal handler counted in between: again
.Lret:
    .cfi_remember_state
    ldp     x1, x2, [sp], #16
    .cfi_def_cfa_offset 0
    .cfi_restore x1
    .cfi_restore x2
.Lout:
    ret
    .cfi_restore_state
.Lmiss:
    cbz     x1, .Linsert                    // empty slot: the arc is not in the table
    sub     x17, x2, x16                    // next slot
    add     x17, x17, #{SLOT_SIZE}
    ldr     x1, [x16, #{TBL_MASK}]
    and     x17, x17, x1
    b       .Lprobe
.Linsert:
    // A new arc, inserted here while the table holds fewer than `limit` arcs.
    // x2 = table + slot offset; x1 and x17 are free.
    ldr     x1, [x16, #{TBL_LEN}]                  // len
    ldr     x17, [x16, #{TBL_LIMIT}]                 // limit
    cmp     x1, x17
    b.hs    .Lfull
    add     x2, x2, #{SLOT_SELF}                     // &slot.self_pc
.Lclaim:
    ldxr    x1, [x2]
    cbnz    x1, .Lraced                     // a signal handler claimed the slot meanwhile
    stxr    w17, x30, [x2]                  // claim: self_pc into a slot still 0
    cbnz    w17, .Lclaim                    // interrupted between ldxr and stxr: again
    str     x0, [x2, #{SLOT_FROM} - {SLOT_SELF}]                  // slot.from_pc
    add     x2, x2, #{SLOT_COUNT} - {SLOT_SELF}                   // &slot.count
.Lfirst:
    ldxr    x1, [x2]                        // 0, or more if a handler counted our arc meanwhile
    add     x1, x1, #1
    stlxr   w17, x1, [x2]                   // release: self_pc and from_pc before the count
    cbnz    w17, .Lfirst
    add     x2, x16, #{TBL_LEN}                    // &table.len
.Lbump:
    ldxr    x1, [x2]
    add     x1, x1, #1
    stxr    w17, x1, [x2]
    cbnz    w17, .Lbump
    b       .Lret
.Lraced:
    clrex                                   // left between ldxr and stxr
    sub     x17, x2, x16                    // probe this very slot again (x17 = offset)
    sub     x17, x17, #{SLOT_SELF}
    b       .Lprobe
.Lfull:
    // The table holds `limit` arcs: the last table of a chain (INSTRFN_MAX_ARCS reached)
    // counts the call as lost right here; any other grows in the slow path.
    ldrb    w1, [x16, #{TBL_LAST}]
    add     x2, x16, #{TBL_LOST}                   // &table.lost
    cbnz    w1, .Lbump
    ldp     x1, x2, [sp], #16
    .cfi_def_cfa_offset 0
    .cfi_restore x1
    .cfi_restore x2
    b       instrfn_aarch64_slow
    .cfi_endproc
    .size instrfn_aarch64_mcount, .-instrfn_aarch64_mcount

// instrfn_aarch64_slow: the slow path.
//   Entry (by b): x0 = from_pc, x30 = self_pc, x16/x17 free, every other register the
//   instrumented code's own, sp as at the counting call. Returns through x30 with all of them
//   restored (x0 too), FPCR/FPSR included; errno is kept by the Rust side.
//   Frame, 768 bytes, x29 = sp = CFA - 768 (a frame record at the bottom, as gcc lays it out):
//      +0    x29, x30 (self_pc)        +16   x0 (from_pc), x1     +32 .. +128  x2 .. x15
//      +144  x18, x19                  +160 .. +208  x20 .. x27
//      +224  x28, FPSR                 +240  FPCR, old signal mask
//      +256  q0 .. q31 (16 bytes each, up to the CFA)
//   x19 holds &Tls across the call (callee-saved, and saved above for the caller).
    .set .Lslow_frame, 768

    .macro SAVE_PAIR a, b, off
    stp     \a, \b, [sp, #\off]
    .cfi_offset \a, \off - .Lslow_frame
    .cfi_offset \b, \off + 8 - .Lslow_frame
    .endm
    .macro SAVE_Q a, b, off
    stp     \a, \b, [sp, #\off]
    .cfi_offset \a, \off - .Lslow_frame
    .cfi_offset \b, \off + 16 - .Lslow_frame
    .endm

    .p2align 4
    .globl instrfn_aarch64_slow
    .hidden instrfn_aarch64_slow
    .type instrfn_aarch64_slow,%function
instrfn_aarch64_slow:
    .cfi_startproc
    sub     sp, sp, #.Lslow_frame
    .cfi_def_cfa_offset .Lslow_frame
    SAVE_PAIR x29, x30, 0
    mov     x29, sp
    .cfi_def_cfa_register x29
    SAVE_PAIR x0, x1, 16
    SAVE_PAIR x2, x3, 32
    SAVE_PAIR x4, x5, 48
    SAVE_PAIR x6, x7, 64
    SAVE_PAIR x8, x9, 80
    SAVE_PAIR x10, x11, 96
    SAVE_PAIR x12, x13, 112
    SAVE_PAIR x14, x15, 128
    SAVE_PAIR x18, x19, 144
    SAVE_PAIR x20, x21, 160
    SAVE_PAIR x22, x23, 176
    SAVE_PAIR x24, x25, 192
    SAVE_PAIR x26, x27, 208
    str     x28, [sp, #224]
    .cfi_offset x28, 224 - .Lslow_frame
    SAVE_Q  q0, q1, 256
    SAVE_Q  q2, q3, 288
    SAVE_Q  q4, q5, 320
    SAVE_Q  q6, q7, 352
    SAVE_Q  q8, q9, 384
    SAVE_Q  q10, q11, 416
    SAVE_Q  q12, q13, 448
    SAVE_Q  q14, q15, 480
    SAVE_Q  q16, q17, 512
    SAVE_Q  q18, q19, 544
    SAVE_Q  q20, q21, 576
    SAVE_Q  q22, q23, 608
    SAVE_Q  q24, q25, 640
    SAVE_Q  q26, q27, 672
    SAVE_Q  q28, q29, 704
    SAVE_Q  q30, q31, 736
    mrs     x1, fpsr
    mrs     x2, fpcr
    str     x1, [sp, #232]
    str     x2, [sp, #240]

    // Block every signal (see the reference for why).
    BLOCK_SIGNALS 248

    mrs     x19, tpidr_el0
    adrp    x16, :gottprel:instrfn_tls
    ldr     x16, [x16, #:gottprel_lo12:instrfn_tls]
    add     x19, x19, x16                   // &Tls
    mov     x16, #1
    str     x16, [x19, #{TLS_GUARD}]                  // guard: counting calls made by the runtime return
    mov     x0, x19                         // arg 0: &Tls
    ldr     x1, [sp, #16]                   // arg 1: from_pc
    ldr     x2, [sp, #8]                    // arg 2: self_pc
    bl      instrfn_slow_path
    str     xzr, [x19, #{TLS_GUARD}]

    RESTORE_SIGNALS 248

    ldr     x1, [sp, #232]
    ldr     x2, [sp, #240]
    msr     fpsr, x1
    msr     fpcr, x2
    ldp     q0, q1, [sp, #256]
    ldp     q2, q3, [sp, #288]
    ldp     q4, q5, [sp, #320]
    ldp     q6, q7, [sp, #352]
    ldp     q8, q9, [sp, #384]
    ldp     q10, q11, [sp, #416]
    ldp     q12, q13, [sp, #448]
    ldp     q14, q15, [sp, #480]
    ldp     q16, q17, [sp, #512]
    ldp     q18, q19, [sp, #544]
    ldp     q20, q21, [sp, #576]
    ldp     q22, q23, [sp, #608]
    ldp     q24, q25, [sp, #640]
    ldp     q26, q27, [sp, #672]
    ldp     q28, q29, [sp, #704]
    ldp     q30, q31, [sp, #736]
    ldp     x0, x1, [sp, #16]
    ldp     x2, x3, [sp, #32]
    ldp     x4, x5, [sp, #48]
    ldp     x6, x7, [sp, #64]
    ldp     x8, x9, [sp, #80]
    ldp     x10, x11, [sp, #96]
    ldp     x12, x13, [sp, #112]
    ldp     x14, x15, [sp, #128]
    ldp     x18, x19, [sp, #144]
    ldp     x20, x21, [sp, #160]
    ldp     x22, x23, [sp, #176]
    ldp     x24, x25, [sp, #192]
    ldp     x26, x27, [sp, #208]
    ldr     x28, [sp, #224]
    ldp     x29, x30, [sp]
    .cfi_def_cfa sp, .Lslow_frame
    add     sp, sp, #.Lslow_frame
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
    .size instrfn_aarch64_slow, .-instrfn_aarch64_slow

// instrfn_aarch64_guarded: run a runtime entry point with this thread's guard held and all
//   signals blocked (as on x86_64, also when called from a signal handler).
//   x9 = the Rust function to call, x0/x1/x2 = its first three arguments. Returns the
//   function's x0; errno, the previous guard value and the signal mask are restored.
//   Clobbers what an ordinary call clobbers. x9, not x16/x17: the stubs reach this routine
//   by a `b` that the linker may route through a veneer, and veneers clobber x16/x17.
//   Frame, 96 bytes, x29 = sp = CFA - 96: +0 x29, x30; +16 x19 (function), x20; +32 x21, x22
//   (arguments); +48 x23 (unused), x24 (&Tls); +64 old signal mask; +72 errno (4 bytes);
//   +80 old guard.
    .p2align 4
    .globl instrfn_aarch64_guarded
    .hidden instrfn_aarch64_guarded
    .type instrfn_aarch64_guarded,%function
instrfn_aarch64_guarded:
    .cfi_startproc
    stp     x29, x30, [sp, #-96]!
    .cfi_def_cfa_offset 96
    .cfi_offset x29, -96
    .cfi_offset x30, -88
    mov     x29, sp
    .cfi_def_cfa_register x29
    stp     x19, x20, [sp, #16]
    .cfi_offset x19, -80
    .cfi_offset x20, -72
    stp     x21, x22, [sp, #32]
    .cfi_offset x21, -64
    .cfi_offset x22, -56
    stp     x23, x24, [sp, #48]
    .cfi_offset x23, -48
    .cfi_offset x24, -40
    mov     x19, x9
    mov     x20, x0
    mov     x21, x1
    mov     x22, x2
    BLOCK_SIGNALS 64
    bl      __errno_location
    ldr     w0, [x0]
    str     w0, [sp, #72]
    mrs     x24, tpidr_el0
    adrp    x0, :gottprel:instrfn_tls
    ldr     x0, [x0, #:gottprel_lo12:instrfn_tls]
    add     x24, x24, x0                    // &Tls
    ldr     x0, [x24, #{TLS_GUARD}]
    str     x0, [sp, #80]
    mov     x0, #1
    str     x0, [x24, #{TLS_GUARD}]
    mov     x0, x20
    mov     x1, x21
    mov     x2, x22
    blr     x19
    mov     x19, x0
    ldr     x0, [sp, #80]
    str     x0, [x24, #{TLS_GUARD}]
    bl      __errno_location
    ldr     w1, [sp, #72]
    str     w1, [x0]
    RESTORE_SIGNALS 64
    mov     x0, x19
    ldp     x23, x24, [sp, #48]
    ldp     x21, x22, [sp, #32]
    ldp     x19, x20, [sp, #16]
    ldp     x29, x30, [sp], #96
    .cfi_def_cfa sp, 0
    .cfi_restore x19
    .cfi_restore x20
    .cfi_restore x21
    .cfi_restore x22
    .cfi_restore x23
    .cfi_restore x24
    .cfi_restore x29
    .cfi_restore x30
    ret
    .cfi_endproc
    .size instrfn_aarch64_guarded, .-instrfn_aarch64_guarded

// instrfn_tls_get: x0 = address of this thread's Tls. Clobbers x16 only.
    .p2align 4
    .globl instrfn_tls_get
    .hidden instrfn_tls_get
    .type instrfn_tls_get,%function
instrfn_tls_get:
    .cfi_startproc
    mrs     x0, tpidr_el0
    adrp    x16, :gottprel:instrfn_tls
    ldr     x16, [x16, #:gottprel_lo12:instrfn_tls]
    add     x0, x0, x16
    ret
    .cfi_endproc
    .size instrfn_tls_get, .-instrfn_tls_get

// instrfn_call_on_stack(f = x0, arg = x1, top = x2): as on x86_64 (asm/x86_64.s); x29 holds
//   the caller's stack pointer.
    .p2align 4
    .globl instrfn_call_on_stack
    .hidden instrfn_call_on_stack
    .type instrfn_call_on_stack,%function
instrfn_call_on_stack:
    .cfi_startproc
    stp     x29, x30, [sp, #-16]!
    .cfi_def_cfa_offset 16
    .cfi_offset x29, -16
    .cfi_offset x30, -8
    mov     x29, sp
    .cfi_def_cfa_register x29
    mov     x9, x0
    mov     x0, x1
    and     x2, x2, #-16
    mov     sp, x2
    blr     x9
    mov     sp, x29
    .cfi_def_cfa_register sp
    ldp     x29, x30, [sp], #16
    .cfi_def_cfa_offset 0
    .cfi_restore x29
    .cfi_restore x30
    ret
    .cfi_endproc
    .size instrfn_call_on_stack, .-instrfn_call_on_stack
