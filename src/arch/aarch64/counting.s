// instrfn trampolines for aarch64, counting calls: the fast path of every entry point (_mcount,
// mcount, __cyg_profile_func_enter/exit) in gmon and trace mode, and the slow routines.

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
    //   pushed (alive, nothing replaced yet: src/trace/ `in_progress`);
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
