// instrfn trampolines for aarch64 Linux (AAPCS64), GNU as syntax.
//
// Same plan, symbols, layouts (Tls, ArcTable, Slot) and hash as asm/x86_64.s, the annotated
// reference; this file documents only how aarch64 differs. It is assembled by LLVM as one
// `global_asm!` block from src/arch/aarch64.rs, followed by asm/aarch64-xray.s (which uses the
// macros TLS_ADDR, TRACE_EVENT, SHADOW_RESERVE and SHADOW_RELEASE defined here); braces would
// be format placeholders, so none appear here; the exported names are naked functions there
// that branch into it.
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
// NZCV is clobbered, as by any call. The fast paths never touch FP/SIMD/SVE state. The slow
// path saves q0-q31 whole (AAPCS64 keeps only the low halves of v8-v15 across the Rust call),
// or, where the CPU has SVE, z0-z31 and p0-p15 whole (see SAVE_VECTORS).
//
// Shared layouts are the `{{NAME}}` operands of trampoline_asm! (asm/x86_64.s lists them all):
// Tls {TLS_TABLE} table, {TLS_GUARD} guard; ArcTable {TBL_MASK} mask, {TBL_LEN} len, {TBL_LIMIT} limit,
// {TBL_SHIFT} shift, {TBL_LAST} last, {TBL_LOST} lost; slots of {SLOT_SIZE} (= 1 << {SLOT_SHIFT}) bytes with self_pc at
// {SLOT_SELF} and from_pc right after it at {SLOT_FROM} (one ldp loads both), count at {SLOT_COUNT}; the hash
// multiplier {HASH_MUL} is loaded from instrfn_hash_mul (asm/data.s).
// Trace mode (src/trace.rs) adds: Tls {TLS_TRACE_POS} trace_pos and {TLS_TRACE_END} trace_end, {TLS_SHADOW_TOP} shadow_top,
// {TLS_SHADOW_END} shadow_end, {TLS_SHADOW_BASE} shadow_base, {TLS_UNWOUND} unwound, {TLS_ENTRY_ONLY} entry_only, {TLS_DROPPED} dropped; shadow entries of
// {SH_BYTES} bytes: {SH_RET} the original return address, {SH_SLOT} the return slot, {SH_FN} the function
// and, aarch64's own use of the spare word, {SH_FP} the frame pointer the function will return
// with (see instrfn_aarch64_exit); Tls {TLS_TRACE_TBASE} trace_tbase and {TLS_TRACE_CBASE} trace_cbase, the chunk's
// bases; compact events (EVENT below): short ones of {EV_SHORT_BYTES} bytes with tag {EV_TAG_ENTRY} (entry) or
// {EV_TAG_EXIT} (exit), long ones of {EV_BYTES} bytes, (value << {EV_LONG_SHIFT}) | (t << {EV_TS_SHIFT}) | (kind << 2) | {EV_TAG_LONG}
// then the timestamp with its low two bits t 0, kinds {EV_ENTRY} entry, {EV_EXIT} exit, {EV_NOEXIT} entry without exit; the call-site table of 1 << {SITE_BITS} words
// (index from bits {SITE_SHIFT} and up as well as 2 and up), entries self_pc | {SITE_PLAIN} (return address may
// be replaced) or self_pc | {SITE_ENTRY_ONLY} (entries only).
//
// Differences from x86_64:
// - No red zone: the fast path pushes x1/x2 (one 16-byte pair keeps sp 16-byte aligned, which
//   Linux enforces for sp-based accesses) before it needs more scratch than x16/x17.
// - TLS: the thread pointer is tpidr_el0; the offset of instrfn_tls comes from the GOT
//   (:gottprel:, initial-exec), which the linker relaxes to an immediate in executables.
// - The count is bumped with an ldxr/stxr loop: a signal handler that counts on this thread
//   between the two clears the exclusive monitor (its own stxr, and every exception return,
//   on ARMv8), so our stxr fails and the loop reloads. The hit path needs no barrier.
//   Trace mode reserves its shadow entry the same way: an ldxr/stxr loop on shadow_top that
//   checks the bound (shadow_end, which never changes) before it stores, so there is nothing
//   to give back when the stack is full. Its event is reserved with a compare-and-swap of
//   trace_pos against the room just checked (TRACE_EVENT): a handler may also move trace_end
//   (it takes the next chunk), so position and end are loaded and checked first, and the
//   ldxr/stxr then claims the event only if the position is still the one checked. (Loading
//   trace_end between the ldxr and the stxr would serve too, the monitor being cleared by
//   every exception return, but the architecture promises LL/SC loops forward progress only
//   without other memory accesses between the two.)
// - Insert (a new arc while len < limit): the slot is claimed with an ldxr/stxr loop on its
//   self_pc that gives up (clrex, then probes that slot again) as soon as it loads a nonzero
//   value, i.e. a signal handler on this thread claimed it between our probe and our stxr.
//   x86 orders stores by itself; here the first count update is a store-release (stlxr), so
//   the from_pc (and self_pc) stores before it reach other CPUs no later than the count. A
//   later plain stxr on the count is coherence-after that release, which keeps the order too
//   (the architecture orders po;[L];coi, like C++'s release sequence), so the gmon writer's
//   Acquire load of any nonzero count sees from_pc. The release costs nothing on the hit path
//   and no dmb anywhere. len is bumped with one more ldxr/stxr loop.
// - No XSAVE detection: the FP/SIMD file is fixed (32 x 128 bits, FPCR, FPSR); SVE is known
//   from AT_HWCAP (instrfn_aarch64_sve, set by the load-time constructor).
// - System calls: `svc #0` with the number in x8 (rt_sigprocmask = 135); only x0 changes.
//
// Trace mode on aarch64 (src/arch/aarch64.rs has the Rust side):
// - The return slot is the frame record's saved x30, [x29, #8]: the epilogue reloads x30 from
//   there (`ldp x29, x30, [sp], #N; ret`).
// - Pointer authentication: a function built with -mbranch-protection=pac-ret signs x30
//   (paciasp/pacibsp, modifier sp) before it saves it and authenticates what it reloads
//   (autiasp/retaa): an unsigned trampoline address there would fault. Such functions are
//   traced entry-only (EV_NOEXIT). Whether a function signs is not told reliably by the saved
//   value (ret != xpaclri(ret)): Linux user pointers have 7 PAC bits, so 1 signed return
//   address in 128 carries a zero PAC and looks unsigned. It is decided once per call site
//   from the prologue before the `bl` (src/arch/aarch64.rs `classify`, which also requires a
//   frame record no deeper than a signal frame below the CFA), kept in the call-site table
//   instrfn_aarch64_sites; a call site not yet in the table takes the slow path. A
//   signed-looking value is entry-only whatever the table says. (Signing the trampoline's
//   address with the function's key and modifier instead would be possible where the
//   classifier follows the prologue, which tells the CFA: sp at the call plus what the
//   prologue moved it. But src/trace.rs compares slots with, and writes into them, the one
//   unsigned trampoline address, when it puts the original addresses back for an unwinder and
//   re-arms the frames after it: that needs a per-entry replacement value first.)
// - The exit trampoline cannot find the slot from sp (the frame record's place in the frame
//   depends on the frame's size), so each shadow entry also keeps the frame pointer the
//   function will return with (the saved x29 of its frame record): the newest entry is the
//   returning frame's if that matches x29 (and its slot lies below sp, the function's CFA).
// - A return slot that already holds the trampoline belongs to a tail call: the slow path
//   ends the tail-calling function there (src/arch/aarch64.rs `tail_call`).

    // Shared data (instrfn_tls, instrfn_enabled, instrfn_all_signals) is in asm/data.s.

    .arch_extension sve

    .text

// BLOCK_SIGNALS off, base: rt_sigprocmask(SIG_BLOCK, all, old = base + off, 8).
// RESTORE_SIGNALS off, base: rt_sigprocmask(SIG_SETMASK, base + off, NULL, 8).
//   Raw system calls (no libc, errno untouched); clobber x0-x3, x8 (and, per the kernel's
//   SVE ABI, the SVE state beyond the low 128 bits of each vector: save it first).
    .macro BLOCK_SIGNALS off, base
    mov     x0, #0
    adrp    x1, instrfn_all_signals
    add     x1, x1, #:lo12:instrfn_all_signals
    add     x2, \base, #\off
    mov     x3, #8
    mov     x8, #135
    svc     #0
    .endm
    .macro RESTORE_SIGNALS off, base
    mov     x0, #2
    add     x1, \base, #\off
    mov     x2, #0
    mov     x3, #8
    mov     x8, #135
    svc     #0
    .endm

// Trace mode's signal-safe reservations, shared by the trampolines here and the XRay ones
// (asm/aarch64-xray.s, assembled after this file in the same block). `again` is a numeric
// label each macro defines at its loop head; `status` is a W register; every operand a
// distinct register unless said otherwise.
//
// TLS_ADDR dst, tmp: dst = &Tls of this thread (tpidr_el0 + instrfn_tls's offset from the
//   GOT, initial-exec; the linker relaxes it to an immediate in executables). tmp clobbered.
    .macro TLS_ADDR dst, tmp
    mrs     \dst, tpidr_el0
    adrp    \tmp, :gottprel:instrfn_tls
    ldr     \tmp, [\tmp, #:gottprel_lo12:instrfn_tls]
    add     \dst, \dst, \tmp
    .endm

// TRACE_EVENT again, tls, posp, pos, next, end, status, full: reserves this thread's next
//   event with a compare-and-swap of trace_pos against the room just checked (see the
//   header): tls = &Tls, posp = &tls.trace_pos (set by the caller). Out: pos = the event
//   (16 bytes, to be written timestamp first, tagged word last), next = pos + {EV_BYTES}.
//   No room (or no chunk: trace_end 0): branches to `full` with nothing reserved and no
//   exclusive access open. end is clobbered and may be status's X register. A caller may
//   branch back to `again` to reserve anew.
    .macro TRACE_EVENT again, tls, posp, pos, next, end, status, full
\again:
    ldr     \pos, [\posp]                   // our event, if there is room
    ldr     \end, [\tls, #{TLS_TRACE_END}]
    add     \next, \pos, #{EV_BYTES}
    cmp     \next, \end
    b.hi    \full                           // past the chunk's end (or no chunk)
    ldxr    \end, [\posp]                   // claimed, unless a handler moved it: again
    cmp     \end, \pos
    b.ne    \again\()b
    stxr    \status, \next, [\posp]
    cbnz    \status, \again\()b             // a handler ran between ldxr and stxr: again
    .endm

// EVENT again, tls, pos, next, end, word, ts, fn, kind, full and EVENT_K (kind in a
//   register): reserves this thread's next event and writes it, a compact one
//   (docs/trace-format.md, chunk version 2; asm/x86_64.s TRACE_EVENT is the reference): short
//   (8 bytes: (fn - code base) << 32 | (ts - time base) << 2 | kind) for an entry or an exit
//   (kind {EV_ENTRY} or {EV_EXIT}) with fn - code base < 2^32 and ts - time base < 2^30,
//   against the Tls copies of the chunk's bases, read after trace_pos and before the
//   exclusive load (a handler that gives the thread a new chunk meanwhile moves trace_pos:
//   again); else long (16 bytes: the timestamp with its low two bits t 0, then fn << 8 |
//   t << 5 | kind << 2 | 3, stored last).
//   Reserved as TRACE_EVENT does (a compare-and-swap of trace_pos against the room just
//   checked). word and ts are register numbers (x<word>, x<ts>): a short event's exclusive
//   load and status go in x<ts> / w<ts>, its word being made (a failed reservation reads the
//   timestamp again), a long one's in x<word>, made after. kind: EVENT an immediate (a number,
//   without #), EVENT_K a register holding it. Every operand a distinct register; fn and kind
//   are only read. Out: pos = the event. Clobbers next, end, x<word>, x<ts>. No room (or no
//   chunk): branches to `full` with nothing reserved. A caller may branch back to `again`
//   (x<ts> = a timestamp) to reserve anew.
    .macro EVENT again, tls, pos, next, end, word, ts, fn, kind, full
    EVENT_BODY \again, \tls, \pos, \next, \end, \word, \ts, \fn, \kind, 0, \full
    .endm
    .macro EVENT_K again, tls, pos, next, end, word, ts, fn, kind, full
    EVENT_BODY \again, \tls, \pos, \next, \end, \word, \ts, \fn, \kind, 1, \full
    .endm
    .macro EVENT_BODY again, tls, pos, next, end, word, ts, fn, kind, isreg, full
\again:
    ldr     \pos, [\tls, #{TLS_TRACE_POS}]  // our event, if there is room
    ldr     \end, [\tls, #{TLS_TRACE_END}]
    .if \isreg
    cmp     \kind, #{EV_EXIT}
    b.hi    8f                              // no short form for this kind
    .elseif \kind > {EV_EXIT}
    b       8f
    .endif
    ldr     x\word, [\tls, #{TLS_TRACE_CBASE}]
    sub     x\word, \fn, x\word             // function - code base
    tst     x\word, #0xffffffff00000000
    b.ne    8f                              // out of its reach: long
    ldr     \next, [\tls, #{TLS_TRACE_TBASE}]
    sub     \next, x\ts, \next              // time - time base
    tst     \next, #(-1 << {EV_TIME_BITS})
    b.ne    8f                              // out of its reach (or before it): long
    lsl     x\word, x\word, #32
    add     x\word, x\word, \next, lsl #2
    .if \isreg
    add     x\word, x\word, \kind           // the short word
    .else
    add     x\word, x\word, #\kind
    .endif
    add     \next, \pos, #{EV_SHORT_BYTES}
    cmp     \next, \end
    b.hi    \full                           // past the chunk's end (or no chunk)
    add     \end, \tls, #{TLS_TRACE_POS}
    ldxr    x\ts, [\end]                    // claimed, unless a handler moved it: again
    cmp     x\ts, \pos
    b.ne    7f
    stxr    w\ts, \next, [\end]
    cbnz    w\ts, 7f                        // a handler ran between ldxr and stxr: again
    str     x\word, [\pos]                  // one store: written
    b       9f
7:  mrs     x\ts, cntvct_el0                 // (a fresh timestamp, as x<ts> is spent)
    b       \again\()b
8:  add     \next, \pos, #{EV_BYTES}
    cmp     \next, \end
    b.hi    \full                           // past the chunk's end (or no chunk)
    add     \end, \tls, #{TLS_TRACE_POS}
    ldxr    x\word, [\end]                  // claimed, unless a handler moved it: again
    cmp     x\word, \pos
    b.ne    \again\()b
    stxr    w\word, \next, [\end]
    cbnz    w\word, \again\()b
    and     x\word, x\ts, #-4
    str     x\word, [\pos, #8]              // the timestamp (its low bits go into the word),
    lsl     x\word, \fn, #{EV_LONG_SHIFT}    // then the word that marks it written
    bfi     x\word, x\ts, #{EV_TS_SHIFT}, #2
    .if \isreg
    add     x\word, x\word, \kind, lsl #2
    add     x\word, x\word, #{EV_TAG_LONG}
    .else
    add     x\word, x\word, #((\kind << 2) | {EV_TAG_LONG})
    .endif
    str     x\word, [\pos]
9:
    .endm

// MERGE_CALL tls, fn, ts, a, b, c, d, done, label: an exit told together with its entry in
//   one word, a call word (docs/trace-format.md, chunk version 3), where the entry is the
//   thread's newest event, a short one of fn (the call recorded nothing inside it), and the
//   word can hold the entry's time, the call's length and fn (asm/x86_64.s MERGE_CALL is the
//   reference: the same checks, and why the pin makes it safe with signal handlers; here, too,
//   a handler runs on this thread, so it sees this code's stores in program order, and the
//   collector sees the chunk only after its retirement, a release, which the pin keeps from
//   happening before the store). tls = &Tls, fn the function, ts the exit's timestamp (both
//   only read); a, b, c, d the numbers of scratch registers (x<a> ...), all distinct. Branches to `done` with the call
//   word written; else falls through with nothing written. `label`, if given, is a hidden
//   global label at the word's store (tests/fixtures/c/exit_window.c stops there).
    .macro MERGE_CALL tls, fn, ts, a, b, c, d, done, label
    ldr     x\a, [\tls, #{TLS_TRACE_END}]
    cbz     x\a, 8f                          // no chunk
    ldr     x\b, [\tls, #{TLS_TRACE_PIN}]
    cbnz    x\b, 8f                          // held by an exit this handler interrupted
    str     x\a, [\tls, #{TLS_TRACE_PIN}]    // pin: the chunk stays ours
    ldr     x\b, [\tls, #{TLS_TRACE_POS}]
    ldr     x\c, [\tls, #{TLS_TRACE_CBASE}]
    sub     x\c, \fn, x\c                     // fn - code base
    ldr     x\d, [\tls, #{TLS_TRACE_END}]
    cmp     x\d, x\a
    b.ne    7f                              // a handler gave the thread a new chunk before the pin
    tst     x\c, #0xffffffff00000000
    b.ne    7f                              // fn out of the code base's reach
    ldur    x\a, [x\b, #-8]                   // the newest word (at a chunk's start: the
    eor     x\d, x\a, x\c, lsl #32              // header's last, which is 0)
    eor     x\d, x\d, #{EV_TAG_ENTRY}
    tst     x\d, #0xffffffff00000003
    b.ne    7f                              // not a short entry of fn
    ubfx    x\a, x\a, #2, #30                 // the entry's time - time base
    tst     x\a, #(-1 << {EV_CALL_T0_BITS})
    b.ne    7f
    ldr     x\d, [\tls, #{TLS_TRACE_TBASE}]
    sub     x\d, \ts, x\d
    sub     x\d, x\d, x\a                      // the call's length (past 2^63 if negative)
    tst     x\d, #(-1 << {EV_CALL_DUR_BITS})
    b.ne    7f
    mov     w\c, w\c                         // (fn - code base < 2^32: 32-bit arithmetic)
    eor     w\c, w\c, #0x80000000            // - 2^31
    add     w\c, w\c, #0x400, lsl #12        // + 2^22: fn - code base - EV_CALL_FN_OFFSET
    tst     x\c, #(-1 << {EV_CALL_FN_BITS})
    b.ne    7f                              // too far from the code base's middle
    lsl     x\c, x\c, #({EV_CALL_T0_BITS} + {EV_CALL_DUR_BITS})
    orr     x\c, x\c, x\d, lsl #{EV_CALL_T0_BITS}
    orr     x\c, x\c, x\a                      // the 61-bit value: f << 38 | d << 26 | t
    lsr     x\a, x\c, #5
    lsl     x\a, x\a, #8                      // its high bits to 63..8,
    ubfx    x\d, x\c, #0, #5
    orr     x\a, x\a, x\d, lsl #2              // its low 5 to 6..2
    add     x\a, x\a, #({EV_CALL_MARK} | {EV_TAG_LONG})
    .ifnb \label
    .globl  \label
    .hidden \label
\label:
    .endif
    stur    x\a, [x\b, #-8]                   // the entry's word becomes the call word
    str     xzr, [\tls, #{TLS_TRACE_PIN}]
    b       \done
7:  str     xzr, [\tls, #{TLS_TRACE_PIN}]
8:
    .endm

// SHADOW_RESERVE again, topp, end, entry, next, status, full: reserves a shadow entry above
//   shadow_top (topp = &tls.shadow_top, end = tls.shadow_end, which never changes, both set
//   by the caller) with an ldxr/stxr loop that checks the bound before it stores. Out: entry
//   = our entry (its slot is 0, as every free entry's: a handler takes it for one being
//   pushed), next = entry + {SH_BYTES}. Full (or no shadow stack yet: end 0): branches to
//   `full` with nothing reserved but the exclusive access open (the target runs clrex).
    .macro SHADOW_RESERVE again, topp, end, entry, next, status, full
\again:
    ldxr    \entry, [\topp]                 // reserve our shadow entry (its slot is 0)
    add     \next, \entry, #{SH_BYTES}
    cmp     \next, \end
    b.hi    \full
    stxr    \status, \next, [\topp]
    cbnz    \status, \again\()b
    .endm

// SHADOW_RELEASE again, topp, tmp, status: gives back the entry SHADOW_RESERVE reserved (its
//   slot still 0; a handler that pushed above it meanwhile has popped again): shadow_top -=
//   {SH_BYTES}, an ldxr/stxr loop. tmp clobbered.
    .macro SHADOW_RELEASE again, topp, tmp, status
\again:
    ldxr    \tmp, [\topp]
    sub     \tmp, \tmp, #{SH_BYTES}
    stxr    \status, \tmp, [\topp]
    cbnz    \status, \again\()b
    .endm

// STRIP dst, src: dst = src without a pointer authentication code (xpaclri works on x30
//   only, and is a NOP without PAC). Uses x17; x30 comes back as it was. In between, the CFI
//   says the return address is in x17 (for the callers, where x30 has the default rule, the
//   return address itself): a handler's walk from those instructions took x30's stand-in for
//   it and went astray (tests/fixtures/c/bpsweep.c found it).
    .macro STRIP dst, src
    mov     x17, x30
    .cfi_remember_state
    .cfi_register x30, x17
    mov     x30, \src
    hint    #7                              // xpaclri
    mov     \dst, x30
    mov     x30, x17
    .cfi_restore_state
    .endm

// FAST_PATH name, kind, self
//   kind hijack (_mcount, mcount): \self = x30 = self_pc, the return address into the
//     instrumented function; from_pc is its own return address, in its frame record's return
//     slot [x29, #8]. Returns through x30.
//   kind enter / exit (__cyg_profile_func_enter/exit(this_fn = x0, call_site = x1), ordinary
//     AAPCS64 calls from -finstrument-functions code): this_fn is copied to \self = x9 (free in
//     an ordinary call), from_pc = call_site. x30 is the caller's return address throughout.
//     `exit` counts nothing in gmon mode.
//   Registers: x0, x16, x17 and NZCV clobbered (and x9 for enter/exit); all others preserved.
//   The gmon body pushes x1/x2 (x0 = from_pc, x16 = table, x17 = slot offset; the insert
//   path needs no more: x2 = slot address, x1/x17 = loaded value/status), so every gmon path
//   keeps the same one push and the same CFA (sp + 16 between the stp and the ldp). The trace
//   body pushes x1-x8 (CFA sp + 64). The CFA offsets are absolute (.cfi_def_cfa_offset), not
//   .cfi_adjust_cfa_offset: LLVM's assembler adds adjustments to a running offset that
//   .cfi_restore_state does not reset, so the second `-16` after the remembered state came
//   out as CFA = sp - 16.
//   Hands over to instrfn_aarch64_slow with x16 = the Rust function, x0 and x17 its second
//   and third arguments.
    .macro FAST_PATH name, kind, self
    .p2align 4
    .globl instrfn_aarch64_\name
    .hidden instrfn_aarch64_\name
    .type instrfn_aarch64_\name,%function
instrfn_aarch64_\name:
    .cfi_startproc
    .ifnc \kind,hijack
    mov     x9, x0                          // this_fn
    .endif
    TLS_ADDR x16, x17                       // &Tls
    ldr     x17, [x16, #{TLS_GUARD}]                  // guard held: runtime code is running here
    cbnz    x17, .Lout_\name
    adrp    x17, instrfn_enabled
    ldrb    w17, [x17, #:lo12:instrfn_enabled]
    cbz     w17, .Lout_\name
    adrp    x17, instrfn_mode
    ldrb    w17, [x17, #:lo12:instrfn_mode]
    cbnz    w17, .Ltrace_\name
    .ifc \kind,exit
    b       .Lout_\name
    .else
    .ifc \kind,hijack
    ldr     x0, [x29, #8]                   // from_pc: the frame record's saved x30,
    STRIP   x0, x0                          // without its pointer authentication code
    .else
    STRIP   x0, x1                          // from_pc: call_site
    .endif
    ldr     x16, [x16, #{TLS_TABLE}]                      // this thread's ArcTable
    cbz     x16, .Lslow_\name
    stp     x1, x2, [sp, #-16]!
    .cfi_def_cfa_offset 16
    .cfi_rel_offset x1, 0
    .cfi_rel_offset x2, 8
    ror     x17, \self, #32                   // slot offset = hash(from_pc, self_pc)
    eor     x17, x17, x0
    adrp    x1, instrfn_hash_mul
    ldr     x1, [x1, #:lo12:instrfn_hash_mul]
    mul     x17, x17, x1
    ldrb    w1, [x16, #{TBL_SHIFT}]
    lsr     x17, x17, x1
    lsl     x17, x17, #{SLOT_SHIFT}
.Lprobe_\name:
    add     x2, x16, x17                    // slot - {SLOT_SELF}
    ldp     x1, x17, [x2, #{SLOT_SELF}]              // slot.self_pc, slot.from_pc
    cmp     x1, \self
    ccmp    x17, x0, #0, eq
    b.ne    .Lmiss_\name
    add     x2, x2, #{SLOT_COUNT}                    // &slot.count
.Lcount_\name:
    ldxr    x1, [x2]
    add     x1, x1, #1
    stxr    w17, x1, [x2]
    cbnz    w17, .Lcount_\name              // a signal handler counted in between: again
.Lret_\name:
    .cfi_remember_state
    ldp     x1, x2, [sp], #16
    .cfi_def_cfa_offset 0
    .cfi_restore x1
    .cfi_restore x2
    .endif
.Lout_\name:
    ret
    .ifnc \kind,exit
    .cfi_restore_state
.Lmiss_\name:
    cbz     x1, .Linsert_\name              // empty slot: the arc is not in the table
    sub     x17, x2, x16                    // next slot
    add     x17, x17, #{SLOT_SIZE}
    ldr     x1, [x16, #{TBL_MASK}]
    and     x17, x17, x1
    b       .Lprobe_\name
.Linsert_\name:
    // A new arc, inserted here while the table holds fewer than `limit` arcs.
    // x2 = table + slot offset; x1 and x17 are free.
    ldr     x1, [x16, #{TBL_LEN}]                  // len
    ldr     x17, [x16, #{TBL_LIMIT}]                 // limit
    cmp     x1, x17
    b.hs    .Lfull_\name
    add     x2, x2, #{SLOT_SELF}                     // &slot.self_pc
.Lclaim_\name:
    ldxr    x1, [x2]
    cbnz    x1, .Lraced_\name               // a signal handler claimed the slot meanwhile
    stxr    w17, \self, [x2]                  // claim: self_pc into a slot still 0
    cbnz    w17, .Lclaim_\name              // interrupted between ldxr and stxr: again
    str     x0, [x2, #{SLOT_FROM} - {SLOT_SELF}]                  // slot.from_pc
    add     x2, x2, #{SLOT_COUNT} - {SLOT_SELF}                   // &slot.count
.Lfirst_\name:
    ldxr    x1, [x2]                        // 0, or more if a handler counted our arc meanwhile
    add     x1, x1, #1
    stlxr   w17, x1, [x2]                   // release: self_pc and from_pc before the count
    cbnz    w17, .Lfirst_\name
    add     x2, x16, #{TBL_LEN}                    // &table.len
.Lbump_\name:
    ldxr    x1, [x2]
    add     x1, x1, #1
    stxr    w17, x1, [x2]
    cbnz    w17, .Lbump_\name
    b       .Lret_\name
.Lraced_\name:
    clrex                                   // left between ldxr and stxr
    sub     x17, x2, x16                    // probe this very slot again (x17 = offset)
    sub     x17, x17, #{SLOT_SELF}
    b       .Lprobe_\name
.Lfull_\name:
    // The table holds `limit` arcs: the last table of a chain (INSTRFN_MAX_ARCS reached)
    // counts the call as lost right here; any other grows in the slow path.
    ldrb    w1, [x16, #{TBL_LAST}]
    add     x2, x16, #{TBL_LOST}                   // &table.lost
    cbnz    w1, .Lbump_\name
    ldp     x1, x2, [sp], #16
    .cfi_def_cfa_offset 0
    .cfi_restore x1
    .cfi_restore x2
.Lslow_\name:
    // x0 = from_pc: instrfn_slow_path(tls, from_pc, self_pc) through its wrapper
    adrp    x16, instrfn_aarch64_gmon_slow
    add     x16, x16, #:lo12:instrfn_aarch64_gmon_slow
    mov     x17, \self
    b       instrfn_aarch64_slow
    .endif

.Ltrace_\name:
    // Trace mode. x16 = &Tls, w17 = the mode (1, or 2: exits off); x0 is free.
    // In the body: x6 = the event's kind, x4 = our shadow entry (0: none), x5 = the return
    // slot and x1 its value (hijack only).
    // A signal handler on this thread may run between any two instructions and record events
    // and push shadow entries of its own (and take the next chunk). As on x86_64:
    // - the shadow entry is reserved first (an ldxr/stxr loop on shadow_top: a handler pushes
    //   above it), and its slot is written last, after the original return address, the
    //   function and the frame pointer: a free entry's slot is 0 (every pop zeroes it), and 0
    //   tells a handler's slow path, and the unwinder wrappers, that the entry is still being
    //   pushed (alive, nothing replaced yet: src/trace.rs `in_progress`);
    // - the event is reserved with a compare-and-swap of trace_pos against the room checked
    //   just before (see the header), retried if a handler moved it: so it is never reserved
    //   past its chunk's end, and never left unwritten (a hole, where a reader stops reading
    //   the chunk) because a handler took the next chunk meanwhile;
    // - the return slot is replaced last.
    // Executed (qemu -singlestep -d exec, a site already classified; +1 is the `b` of the
    // exported stub): _mcount 87+1 instructions from the call to the return into the
    // function, ret included; __cyg_profile_func_enter and _exit 40+1 each. (84+1 and 37+1
    // before events were reserved against the room just checked and the slot written last.)
    stp     x1, x2, [sp, #-64]!
    .cfi_def_cfa_offset 64
    .cfi_rel_offset x1, 0
    .cfi_rel_offset x2, 8
    stp     x3, x4, [sp, #16]
    .cfi_rel_offset x3, 16
    .cfi_rel_offset x4, 24
    stp     x5, x6, [sp, #32]
    .cfi_rel_offset x5, 32
    .cfi_rel_offset x6, 40
    stp     x7, x8, [sp, #48]
    .cfi_rel_offset x7, 48
    .cfi_rel_offset x8, 56
    .ifc \kind,hijack
    cmp     w17, #2
    b.eq    .Ltnoexit_\name                 // exits off (INSTRFN_EXITS): entries only
    add     x5, x29, #8                     // the return slot
    ldr     x1, [x5]                        // the return address in it
    STRIP   x2, x1
    cmp     x1, x2
    b.ne    .Ltnoexit_\name                 // signed: the function authenticates it
    adrp    x3, instrfn_aarch64_sites       // how this call site was classified
    add     x3, x3, #:lo12:instrfn_aarch64_sites
    eor     x2, x30, x30, lsr #{SITE_SHIFT}
    ubfx    x2, x2, #2, #{SITE_BITS}
    ldr     x2, [x3, x2, lsl #3]
    eor     x2, x2, x30                     // the class if the entry is this site's
    cmp     x2, #{SITE_ENTRY_ONLY}
    b.eq    .Ltnoexit_\name
    cmp     x2, #{SITE_PLAIN}
    b.ne    .Ltslow_\name                   // not classified yet
    ldr     x2, [x16, #{TLS_UNWOUND}]
    cbnz    x2, .Ltslow_\name               // an unwinder ran (or walks): the slow path
    adr     x3, instrfn_aarch64_exit
    cmp     x1, x3
    b.eq    .Ltslow_\name                   // a tail call: the slow path ends the caller
    ldr     x3, [x16, #{TLS_SHADOW_TOP}]
    ldr     x2, [x16, #{TLS_SHADOW_BASE}]
    cmp     x3, x2
    b.eq    1f
    ldur    x2, [x3, #{SH_SLOT} - {SH_BYTES}]
    cmp     x2, x5                          // the newest entry's frame at or below ours is
    b.ls    .Ltslow_\name                   // gone (longjmp): the slow path closes it
1:  add     x3, x16, #{TLS_SHADOW_TOP}
    ldr     x7, [x16, #{TLS_SHADOW_END}]
    // x4 = our shadow entry (full: an entry without exit)
    SHADOW_RESERVE 2, x3, x7, x4, x2, w17, .Ltfull_\name
    mov     x6, #{EV_ENTRY}
    .else
    .ifc \kind,exit
    mov     x6, #{EV_EXIT}
    .else
    mov     x6, #{EV_ENTRY}
    .endif
    .endif
.Ltevent_\name:
    mrs     x2, cntvct_el0                  // timestamp
    .ifc \kind,exit
    // an exit whose call recorded nothing inside it: a call word (x0, x3, x4, x7 scratch
    // here: saved above, or written by the event below anyway)
    MERGE_CALL x16, \self, x2, 0, 3, 4, 7, .Ltret_\name, instrfn_aarch64_cyg_exit_merge
    .endif
    // our event (x8; no room: the slow path)
    EVENT_K 4, x16, x8, x0, x7, 3, 2, \self, x6, .Ltnochunk_\name
    .ifc \kind,hijack
    cbz     x4, 5f
    ldr     x0, [x29]                       // the frame pointer it returns with
    stp     x30, x0, [x4, #{SH_FN}]                // function, frame pointer
    str     x1, [x4, #{SH_RET}]                    // original return address
    str     x5, [x4, #{SH_SLOT}]                   // last: the entry is complete
    adr     x0, instrfn_aarch64_exit
    str     x0, [x5]                        // the function now returns to the exit trampoline
    b       .Ltret_\name
5:  add     x3, x16, #{TLS_ENTRY_ONLY}              // an entry without exit: counted
6:  ldxr    x0, [x3]
    add     x0, x0, #1
    stxr    w17, x0, [x3]
    cbnz    w17, 6b
    .endif
    b       .Ltret_\name
    .ifc \kind,hijack
.Ltfull_\name:
    clrex
.Ltnoexit_\name:
    mov     x4, #0                          // no shadow entry: an entry without exit
    mov     x6, #{EV_NOEXIT}
    b       .Ltevent_\name
    .endif
.Ltnochunk_\name:
    // (No exclusive access to leave: every stxr here follows its own ldxr.)
    .ifc \kind,hijack
    cbz     x4, .Ltslow_\name
    add     x3, x16, #{TLS_SHADOW_TOP}              // give the shadow entry back (slot still 0)
    SHADOW_RELEASE 7, x3, x0, w17
    .endif
    b       .Ltslow_\name
.Ltret_\name:
    .cfi_remember_state
    ldp     x7, x8, [sp, #48]
    ldp     x5, x6, [sp, #32]
    ldp     x3, x4, [sp, #16]
    ldp     x1, x2, [sp], #64
    .cfi_def_cfa_offset 0
    .cfi_restore x1
    .cfi_restore x2
    .cfi_restore x3
    .cfi_restore x4
    .cfi_restore x5
    .cfi_restore x6
    .cfi_restore x7
    .cfi_restore x8
    ret
    .cfi_restore_state
.Ltslow_\name:
    // instrfn_trace_slow(tls, slot, self_pc) through its wrapper: slot = the return slot,
    // 0 for __cyg_profile_func_enter, 1 for ..._exit
    ldp     x7, x8, [sp, #48]
    ldp     x5, x6, [sp, #32]
    ldp     x3, x4, [sp, #16]
    ldp     x1, x2, [sp], #64
    .cfi_def_cfa_offset 0
    .cfi_restore x1
    .cfi_restore x2
    .cfi_restore x3
    .cfi_restore x4
    .cfi_restore x5
    .cfi_restore x6
    .cfi_restore x7
    .cfi_restore x8
    .ifc \kind,hijack
    add     x0, x29, #8
    .else
    .ifc \kind,exit
    mov     x0, #1
    .else
    mov     x0, #0
    .endif
    .endif
    adrp    x16, instrfn_aarch64_trace_slow
    add     x16, x16, #:lo12:instrfn_aarch64_trace_slow
    mov     x17, \self
    b       instrfn_aarch64_slow
    .cfi_endproc
    .size instrfn_aarch64_\name, .-instrfn_aarch64_\name
    .endm

// _mcount / mcount: after the prologue (gcc -pg, clang -pg, rustc -Zinstrument-mcount).
    FAST_PATH mcount, hijack, x30
// __cyg_profile_func_enter/exit(this_fn, call_site): -finstrument-functions (gcc, clang).
    FAST_PATH cyg_enter, enter, x9
    FAST_PATH cyg_exit, exit, x9

// SAVE_VECTORS / RESTORE_VECTORS (in the slow routines, x29 = the frame base, x1 free):
//   without SVE (or before the constructor has looked), q0-q31 at x29 + 272; with SVE, z0-z31
//   and p0-p15 whole in an area of 34 vector lengths below the frame (sp moves down, x29
//   stays). Why the whole SVE state: the slow path's system calls discard everything beyond
//   the low 128 bits of each Z register and all P registers (the kernel's SVE ABI), and any
//   NEON write in the Rust code or in libc (memcpy) zeroes a Z register's upper bits; where
//   SVE is live at these points (SVE arguments at a `bl _mcount`, SVE results at the exit
//   trampoline, the callee-saved z8-z23/p4-p15 of the SVE procedure call standard) it must
//   survive. FFR is not saved (no calling convention keeps it).
    .macro SAVE_VECTORS
    adrp    x1, instrfn_aarch64_sve
    ldrb    w1, [x1, #:lo12:instrfn_aarch64_sve]
    cbnz    w1, 8f
    stp     q0, q1, [x29, #272]
    stp     q2, q3, [x29, #304]
    stp     q4, q5, [x29, #336]
    stp     q6, q7, [x29, #368]
    stp     q8, q9, [x29, #400]
    stp     q10, q11, [x29, #432]
    stp     q12, q13, [x29, #464]
    stp     q14, q15, [x29, #496]
    stp     q16, q17, [x29, #528]
    stp     q18, q19, [x29, #560]
    stp     q20, q21, [x29, #592]
    stp     q22, q23, [x29, #624]
    stp     q24, q25, [x29, #656]
    stp     q26, q27, [x29, #688]
    stp     q28, q29, [x29, #720]
    stp     q30, q31, [x29, #752]
    b       9f
8:  addvl   sp, sp, #-32
    addvl   sp, sp, #-2
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    str     z\n, [sp, #\n, mul vl]
    .endr
    addvl   x1, sp, #31
    addvl   x1, x1, #1
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    str     p\n, [x1, #\n, mul vl]
    .endr
9:
    .endm
    .macro RESTORE_VECTORS
    adrp    x1, instrfn_aarch64_sve
    ldrb    w1, [x1, #:lo12:instrfn_aarch64_sve]
    cbnz    w1, 8f
    ldp     q0, q1, [x29, #272]
    ldp     q2, q3, [x29, #304]
    ldp     q4, q5, [x29, #336]
    ldp     q6, q7, [x29, #368]
    ldp     q8, q9, [x29, #400]
    ldp     q10, q11, [x29, #432]
    ldp     q12, q13, [x29, #464]
    ldp     q14, q15, [x29, #496]
    ldp     q16, q17, [x29, #528]
    ldp     q18, q19, [x29, #560]
    ldp     q20, q21, [x29, #592]
    ldp     q22, q23, [x29, #624]
    ldp     q24, q25, [x29, #656]
    ldp     q26, q27, [x29, #688]
    ldp     q28, q29, [x29, #720]
    ldp     q30, q31, [x29, #752]
    b       9f
8:  addvl   x1, sp, #31
    addvl   x1, x1, #1
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    ldr     p\n, [x1, #\n, mul vl]
    .endr
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    ldr     z\n, [sp, #\n, mul vl]
    .endr
9:
    .endm

// SLOW_ROUTINE name, arg, argoff: the slow paths.
//   instrfn_aarch64_slow (arg x0), from the fast paths: x16 = the Rust function, x0 and x17
//   its second and third arguments, x30 = the return address; every other register the
//   instrumented code's own (x0 and x16/x17 are free), sp as at the counting call.
//   instrfn_aarch64_exit_slow (arg x15), from the exit trampoline: the same with the second
//   argument in x15 (x0 is a return value there).
//   Calls fn(&Tls, arg, x17) with the guard held and every signal blocked; fn returns the
//   address to return to, or 0 for x30 as it came. Returns there with every register
//   restored (but x16, x17 and, as the routine came, x30), FPCR/FPSR and the vector state
//   included; errno is kept by the Rust side.
//   Frame, 784 bytes, x29 = sp = CFA - 784 (a frame record at the bottom, as gcc lays it out):
//      +0    x29, x30                  +16   x0, x1               +32 .. +128  x2 .. x15
//      +144  x18, x19                  +160 .. +208  x20 .. x27
//      +224  x28, FPSR                 +240  FPCR, old signal mask
//      +256  the Rust function, x17    +272  q0 .. q31 (16 bytes each, up to the CFA)
//      below, with SVE: z0-z31, p0-p15 (see SAVE_VECTORS)
//   x19 holds &Tls across the call (callee-saved, and saved above for the caller).
    .set .Lslow_frame, 784

    .macro SAVE_PAIR a, b, off
    stp     \a, \b, [sp, #\off]
    .cfi_offset \a, \off - .Lslow_frame
    .cfi_offset \b, \off + 8 - .Lslow_frame
    .endm

    .macro SLOW_ROUTINE name, arg, argoff
    .p2align 4
    .globl \name
    .hidden \name
    .type \name,%function
\name:
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
    stp     x16, x17, [sp, #256]
    mrs     x1, fpsr
    mrs     x2, fpcr
    str     x1, [sp, #232]
    str     x2, [sp, #240]
    SAVE_VECTORS

    // Block every signal (see the reference for why).
    BLOCK_SIGNALS 248, x29

    TLS_ADDR x19, x16                       // &Tls
    mov     x16, #1
    str     x16, [x19, #{TLS_GUARD}]                  // guard: counting calls made by the runtime return
    mov     x0, x19                         // arg 0: &Tls
    ldr     x1, [x29, #\argoff]             // arg 1
    ldp     x16, x2, [x29, #256]            // arg 2 (x17), and the function
    blr     x16
    str     xzr, [x19, #{TLS_GUARD}]
    cbz     x0, 1f
    str     x0, [x29, #8]                   // return there
1:
    RESTORE_SIGNALS 248, x29
    RESTORE_VECTORS

    ldr     x1, [x29, #232]
    ldr     x2, [x29, #240]
    msr     fpsr, x1
    msr     fpcr, x2
    mov     sp, x29
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
    .size \name, .-\name
    .endm

    SLOW_ROUTINE instrfn_aarch64_slow, x0, 16
    SLOW_ROUTINE instrfn_aarch64_exit_slow, x15, 136

// instrfn_aarch64_exit: where an instrumented function returns to in trace mode.
//   Entry (by the function's ret): sp = the function's CFA, x29 = the frame pointer it
//   restored (its caller's), x0-x8 and v0-v7 (z0-z7, p0-p3 with SVE) may hold its result, x8
//   the indirect result address. Preserved: x0-x8, x18-x29, sp, all FP/SIMD/SVE state
//   (the fast part touches none of it; the slow part saves it all). Clobbered: x9-x17 and
//   NZCV (the caller may not expect them after a return); x30 comes back as the original
//   return address, where we return (`ret`, so a BTI-guarded caller needs no landing pad).
//   The newest shadow entry is the returning frame's if its frame pointer is x29 and its slot
//   lies below sp (and is a frame's: not 0, an entry being pushed, nor 1, a tombstone). Then,
//   as on x86_64, the exit event is written first (reserved as in FAST_PATH, against the room
//   just checked), and the entry popped after it: read the original return address, zero
//   the slot (free; a handler that comes between the two stores takes the entry for one
//   being pushed: alive), lower shadow_top. Until then a signal handler that interrupts us
//   finds the entry intact (it pushes and pops above it). With INSTRFN_MIN_DURATION
//   (instrfn_min_ticks nonzero) a short call whose entry is still the newest event has that
//   entry taken back instead of an exit written (.Lexit_short), and is counted in the Tls
//   dropped word. Anything else (frames left behind by longjmp, an unwinder that ran, no
//   room for the event) goes to instrfn_aarch64_exit_slow with the entry still pushed.
//   Executed (qemu -singlestep -d exec): the fast part, 45 instructions to the original
//   return address, ret included (42 before the INSTRFN_MIN_DURATION test; 38 when it popped
//   before writing its event, and reserved it against an end loaded once); 64 when it takes
//   a short call's entry back (counted from the code: 56 before it reserved its exit first).
//   Unwinding (a handler that interrupts us and walks the stack, a sampling profiler): once the
//   newest entry is known to be the returning frame's (`instrfn_aarch64_exit_ours`), the CFI
//   says where the caller's return address is, in the entry (x30 saved at [x9 + SH_RET]),
//   and after it is loaded, in x30 itself (CFA = sp throughout), so an unwinder goes on into
//   the real caller (tests/fixtures/c/bpsweep.c checks it at every instruction of the fast
//   path). Before that, and in the slow part, the return address is marked undefined: an
//   unwinder that gets here stops (the unwinder entry points are wrapped to put the real return
//   addresses back first, src/interpose.c, but the returning frame's is not on the stack).
//   A return address that points at the label (a replaced one, met by an unwinder linked into
//   the program, which no wrapper reaches: C++ with -static-libgcc) is looked up as address - 1:
//   the nop before the label, instrfn_aarch64_return_pad, whose FDE describes a frame between
//   the returning function and its caller, as x86_64's (asm/x86_64.s): the caller's sp is sp,
//   the frame's own CFA sp + 16, and the caller's return address the `ret` word of the newest
//   shadow entry whose frame pointer (SH_FP) is x29, found by a DWARF expression
//   (scripts/return-pad-cfi.py aarch64) that takes its own pc from x30 (libgcc restores the
//   return address column as a register; LLVM's libunwind does not, so the pad is for libgcc,
//   where aarch64 exits are traced by default), and from the pc-relative word before the pad
//   the registry instrfn_registry.
// RETURN_ADDRESS_IN_ENTRY: CFI, the caller's return address (x30) is saved at [x9 + SH_RET]:
//   DW_CFA_expression x30, DW_OP_breg9 SH_RET (a one-byte SLEB128: src/trace.rs asserts it).
    .macro RETURN_ADDRESS_IN_ENTRY
    .cfi_escape 0x10, 30, 2, 0x79, {SH_RET}
    .endm

    .p2align 4
instrfn_aarch64_registry_rel:
    .quad instrfn_registry - instrfn_aarch64_registry_rel
    .globl instrfn_aarch64_return_pad
    .hidden instrfn_aarch64_return_pad
instrfn_aarch64_return_pad:
    .cfi_startproc
    .cfi_def_cfa sp, 16
    .cfi_escape 0x16, 31, 2, 0x8f, 0x00     // DW_CFA_val_expression sp: DW_OP_breg31 0
    .cfi_escape 0x10, 30, 103, 0x8e, 0x74, 0x12, 0x06, 0x22, 0x12, 0x23, 0x08, 0x06, 0x16, 0x06, 0x06
    .cfi_escape 0x8d, 0x00, 0x16, 0x8e, 0x74, 0x12, 0x06, 0x22, 0x23, 0x10, 0x15, 0x01
    .cfi_escape 0x30, 0x29, 0x28, 0x4a, 0x00, 0x15, 0x01, 0x23, {BLK_SHADOW}, 0x06, 0x12, 0x30
    .cfi_escape 0x29, 0x28, 0x38, 0x00, 0x12, 0x15, 0x05, 0x22, 0x17, 0x12, 0x15, 0x03
    .cfi_escape 0x2a, 0x28, 0x26, 0x00, 0x12, 0x23, {SH_SLOT}, 0x06, 0x12, 0x30, 0x29, 0x28
    .cfi_escape 0x1b, 0x00, 0x13, 0x12, 0x23, {SH_FP}, 0x06, 0x15, 0x05, 0x29, 0x28, 0x05
    .cfi_escape 0x00, 0x23, {SH_BYTES}, 0x2f, 0xdf, 0xff, 0x16, 0x13, 0x12, 0x23, {SH_RET}, 0x16
    .cfi_escape 0x23, {SH_BYTES}, 0x2f, 0xd4, 0xff, 0x13, 0x13, 0x16, 0x13, 0x2f, 0x01, 0x00
    .cfi_escape 0x13, 0x16, 0x06, 0x16, 0x2f, 0xaf, 0xff
    nop
    .cfi_endproc
    .globl instrfn_aarch64_exit
    .hidden instrfn_aarch64_exit
    .type instrfn_aarch64_exit,%function
instrfn_aarch64_exit:
    .cfi_startproc
    .cfi_undefined x30
    TLS_ADDR x16, x17                       // &Tls
    ldr     x17, [x16, #{TLS_UNWOUND}]
    cbnz    x17, .Lexit_slow
    ldr     x9, [x16, #{TLS_SHADOW_TOP}]
    ldr     x10, [x16, #{TLS_SHADOW_BASE}]
    cmp     x9, x10
    b.ls    .Lexit_slow                     // no entry (cannot be): the slow path says so
    sub     x9, x9, #{SH_BYTES}             // the newest entry
    ldr     x11, [x9, #{SH_SLOT}]
    ldp     x12, x13, [x9, #{SH_FN}]               // function, frame pointer
    cmp     sp, x11                         // the slot lies below sp,
    ccmp    x11, #1, #0, hi                 // is above 1 (0: being pushed, 1: a tombstone),
    ccmp    x13, x29, #0, hi                // and the frame pointer is x29:
    b.ne    .Lexit_slow                     // else not the returning frame's
    .globl  instrfn_aarch64_exit_ours       // (tests/fixtures/c/bpsweep.c: from here on a walk
    .hidden instrfn_aarch64_exit_ours       // reaches the real caller)
instrfn_aarch64_exit_ours:
    RETURN_ADDRESS_IN_ENTRY
    ldr     x17, [x16, #{TLS_GUARD}]
    cbnz    x17, .Lexit_pop                 // runtime code running: no event
    adrp    x17, instrfn_enabled
    ldrb    w17, [x17, #:lo12:instrfn_enabled]
    cbz     w17, .Lexit_pop
    mrs     x15, cntvct_el0                 // timestamp
    add     x14, x16, #{TLS_TRACE_POS}
    adrp    x17, instrfn_min_ticks
    ldr     x17, [x17, #:lo12:instrfn_min_ticks]
    cbnz    x17, .Lexit_short               // INSTRFN_MIN_DURATION: maybe no events at all
    // A call word where the call recorded nothing inside it; else x10 = our event (no
    // room, or no chunk: nothing popped yet, the slow path does all)
    MERGE_CALL x16, x12, x15, 10, 11, 13, 14, .Lexit_pop, instrfn_aarch64_exit_merge
    EVENT 1, x16, x10, x11, x13, 14, 15, x12, {EV_EXIT}, .Lexit_slow
.Lexit_pop:
    ldr     x30, [x9, #{SH_RET}]                   // we return there
    .cfi_same_value x30
    str     xzr, [x9, #{SH_SLOT}]                  // free entries have slot 0
    str     x9, [x16, #{TLS_SHADOW_TOP}]           // popped
    ret
    RETURN_ADDRESS_IN_ENTRY                 // (below: x9 = the entry, as above)
.Lexit_short:
    // INSTRFN_MIN_DURATION (asm/x86_64.s .Lexit_short): a call shorter than instrfn_min_ticks
    // whose entry is still the thread's newest event (its callees, if any, were short too and
    // taken back already) leaves no events: its entry is taken back. The exit event (here
    // always a long one) is reserved first, as always: while its first word is 0 the chunk is
    // not all written, so it is never committed and reused however many chunks a signal
    // handler fills meanwhile, and every access below stays inside it. Then, if the event
    // before ours is our entry (a long one at -16, or a short one at -8: the first event of a
    // chunk finds the header's zero words there) and the call was short, the entry's words
    // are zeroed and the position moved back over both with a compare-and-swap (ldxr/stxr, as
    // the reservation) that fails if a handler reserved an event after ours: then the entry's
    // words go back and our exit is written where we reserved it. (A word at -16 with tag 3
    // and bit 7 clear is a long event's first word: no long event's second word has a tag.)
    // x17 = instrfn_min_ticks, x15 = timestamp, x14 = &trace_pos, x12 = the function, x9 =
    // the entry; x10, x11, x13 free.
    TRACE_EVENT 3, x16, x14, x10, x11, x13, w13, .Lexit_slow // x10 = our place
    lsl     x13, x12, #{EV_LONG_SHIFT}
    add     x13, x13, #(({EV_ENTRY} << 2) | {EV_TAG_LONG}) // our entry's first word, if long
    ldur    x11, [x10, #-{EV_BYTES}]
    bfi     x11, xzr, #{EV_TS_SHIFT}, #2    // (its timestamp's low bits aside)
    cmp     x11, x13
    b.ne    6f
    ldur    x11, [x10, #-{EV_BYTES}]
    ubfx    x11, x11, #{EV_TS_SHIFT}, #2
    ldur    x13, [x10, #-8]
    orr     x11, x11, x13                   // the entry's timestamp
    sub     x11, x15, x11                   // the call's length in ticks
    cmp     x11, x17
    b.hs    7f                              // long enough: recorded
    sub     x11, x10, #{EV_BYTES}           // where the entry starts
    b       instrfn_aarch64_exit_take_back
6:  ldur    x13, [x10, #-{EV_BYTES}]
    tbnz    x13, #7, .Lexit_short_at8       // a call word there (bit 7): the event before ours
    and     x13, x13, #3                    // is at -8
    cmp     x13, #{EV_TAG_LONG}
    b.eq    7f                              // a long event there, not ours: no short one at -8
.Lexit_short_at8:
    ldr     x13, [x16, #{TLS_TRACE_CBASE}]
    sub     x13, x12, x13
    lsl     x13, x13, #32
    add     x13, x13, #{EV_TAG_ENTRY}       // our entry's word if short, its time aside
    ldur    x11, [x10, #-8]
    eor     x13, x13, x11
    tst     x13, #0xffffffff00000003
    b.ne    7f                              // not a short entry of ours
    ubfx    x13, x11, #2, #30               // its time - the time base
    ldr     x11, [x16, #{TLS_TRACE_TBASE}]
    add     x13, x13, x11
    sub     x13, x15, x13                   // the call's length in ticks
    cmp     x13, x17
    b.hs    7f                              // long enough: recorded
    sub     x11, x10, #{EV_SHORT_BYTES}     // where the entry starts
    .globl  instrfn_aarch64_exit_take_back
    .hidden instrfn_aarch64_exit_take_back
instrfn_aarch64_exit_take_back:
    // x11 = the entry, x10 = our place. (A handler that gave the thread a new chunk since our
    // reservation made the Tls bases read above another chunk's: the compare-and-swap below
    // fails then, as the position moved, and everything goes back as it was.)
    ldur    x13, [x10, #-8]                 // a short entry's word, or a long one's timestamp:
    sub     x17, x10, x11                   // then with its low bits from the first word
    cmp     x17, #{EV_BYTES}
    b.ne    1f
    ldur    x17, [x11]
    ubfx    x17, x17, #{EV_TS_SHIFT}, #2
    orr     x13, x13, x17
1:  str     xzr, [x11]                      // the entry is unwritten again, its first word
    stur    xzr, [x10, #-8]                 // first (and a long one's timestamp: an event
                                            // written there next may be short)
    add     x10, x10, #{EV_BYTES}           // the position just past our place
2:  ldxr    x17, [x14]                      // back over both, if nothing came after them
    cmp     x17, x10
    b.ne    5f
    stxr    w17, x11, [x14]
    cbnz    w17, 2b                         // a handler ran between ldxr and stxr: again
    add     x13, x16, #{TLS_DROPPED}        // counted (a handler may count too)
4:  ldxr    x10, [x13]
    add     x10, x10, #1
    stxr    w17, x10, [x13]
    cbnz    w17, 4b
    b       .Lexit_pop
5:  clrex                                   // a handler came in between: the entry stays
    sub     x10, x10, #{EV_BYTES}           // our place again
    sub     x17, x10, x11                   // its words back, the one that marks it last
    cmp     x17, #{EV_BYTES}
    b.eq    3f
    stur    x13, [x10, #-8]                 // a short one's
    b       7f
3:  and     x17, x13, #-4                   // a long one's: timestamp, then first word
    stur    x17, [x10, #-8]
    lsl     x17, x12, #{EV_LONG_SHIFT}
    bfi     x17, x13, #{EV_TS_SHIFT}, #2
    add     x17, x17, #(({EV_ENTRY} << 2) | {EV_TAG_LONG})
    stur    x17, [x10, #-{EV_BYTES}]
7:  and     x17, x15, #-4                   // our exit: timestamp, then the word that marks it
    str     x17, [x10, #8]
    lsl     x17, x12, #{EV_LONG_SHIFT}
    bfi     x17, x15, #{EV_TS_SHIFT}, #2
    add     x17, x17, #(({EV_EXIT} << 2) | {EV_TAG_LONG})
    str     x17, [x10]
    b       .Lexit_pop
.Lexit_slow:
    .cfi_undefined x30                      // (paths with and without the entry known come
    .globl  instrfn_aarch64_exit_slow_entry // here: bpsweep.c leaves these 5 instructions out
    .hidden instrfn_aarch64_exit_slow_entry // of its walk check)
instrfn_aarch64_exit_slow_entry:
    // instrfn_aarch64_trace_exit(tls, sp = the function's CFA, x29): finds the returning
    // frame's entry, closes the ones above it, pops it, writes its exit, returns its original
    // return address
    mov     x15, sp
    mov     x17, x29
    adrp    x16, instrfn_aarch64_trace_exit
    add     x16, x16, #:lo12:instrfn_aarch64_trace_exit
    b       instrfn_aarch64_exit_slow
    .cfi_endproc
    .size instrfn_aarch64_exit, .-instrfn_aarch64_exit

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
    BLOCK_SIGNALS 64, sp
    bl      __errno_location
    ldr     w0, [x0]
    str     w0, [sp, #72]
    TLS_ADDR x24, x0                        // &Tls
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
    RESTORE_SIGNALS 64, sp
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
    TLS_ADDR x0, x16                        // &Tls
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

// instrfn_aarch64_class_get: x0 = address of this thread's call-site class word, which the
//   trace slow path sets for `replaceable` (src/arch/aarch64.rs) while it records one call.
//   Clobbers x16 only.
    .p2align 4
    .globl instrfn_aarch64_class_get
    .hidden instrfn_aarch64_class_get
    .type instrfn_aarch64_class_get,%function
instrfn_aarch64_class_get:
    .cfi_startproc
    mrs     x0, tpidr_el0
    adrp    x16, :gottprel:instrfn_aarch64_class
    ldr     x16, [x16, #:gottprel_lo12:instrfn_aarch64_class]
    add     x0, x0, x16
    ret
    .cfi_endproc
    .size instrfn_aarch64_class_get, .-instrfn_aarch64_class_get

    .section .tbss,"awT",%nobits
    .p2align 3
    .type instrfn_aarch64_class,%object
    .size instrfn_aarch64_class, 8
instrfn_aarch64_class:
    .zero 8

// The call-site table of trace mode (see the header): written by the slow path, read by the
// fast path; every entry names its site, so a collision only costs a slow path.
    .bss
    .p2align 4
    .globl instrfn_aarch64_sites
    .hidden instrfn_aarch64_sites
    .type instrfn_aarch64_sites,%object
    .size instrfn_aarch64_sites, 8 << {SITE_BITS}
instrfn_aarch64_sites:
    .zero 8 << {SITE_BITS}

// Nonzero where the CPU has SVE (AT_HWCAP), set by instrfn_aarch64_init at load time. Read by
// the slow paths (SAVE_VECTORS).
    .data
    .p2align 3
    .globl instrfn_aarch64_sve
    .hidden instrfn_aarch64_sve
    .type instrfn_aarch64_sve,%object
    .size instrfn_aarch64_sve, 1
instrfn_aarch64_sve:
    .byte 0

// Rust functions the assembly calls: internal (libinstrfn.so exports none of them).
    .hidden instrfn_aarch64_init
    .hidden instrfn_aarch64_gmon_slow
    .hidden instrfn_aarch64_trace_slow
    .hidden instrfn_aarch64_trace_exit

    .section .init_array,"aw",%init_array
    .p2align 3
    .quad instrfn_aarch64_init

    .text
