// instrfn XRay trampolines for aarch64 Linux (AAPCS64): where patched XRay sleds lead
// (src/xray.rs patches them; asm/x86_64-xray.s is the reference). Assembled
// as its own global_asm! block by src/arch/aarch64.rs with the operands of trampoline_asm!, of
// which only {TLS_GUARD} is used here ({TLS_TABLE}, {TBL_MASK}, {TBL_LEN}, {TBL_LIMIT},
// {TBL_SHIFT}, {TBL_LAST}, {TBL_LOST}, {SLOT_SELF}, {SLOT_FROM}, {SLOT_COUNT}, {SLOT_SIZE},
// {SLOT_SHIFT}, {HASH_MUL} are gmon mode's).
//
// A patched sled (src/xray.rs): nop ; stp x0, x30, [sp, #-16]! ; movz w17, #id_lo ;
// movk w17, #id_hi, lsl #16 ; bl <stub> ; ldp x0, x30, [sp], #16 ; nop ; nop. The stub loads
// the object's id -> address table into x0 and branches here. So on entry: x0 = table, w17 =
// id (x17 zero-extended), x16 = the trampoline, x30 = the sled's ldp (we return there), sp =
// the function's sp minus the sled's 16 bytes. The frame is identified by the function's sp at
// the sled (sp + 16 here): the same at its entry sled and at its exit and tail sleds (after
// the epilogue), lower for every frame it calls.
//
// These trampolines have no fast path yet: once the guard, the mode and (for entries) the
// recording switch say there is something to record, every event goes through
// instrfn_aarch64_slow (asm/aarch64.s), which saves every register (x1-x15, x18-x30, q0-q31 or
// the SVE state, FPCR, FPSR) and calls instrfn_xray_slow(&Tls, frame | kind, table entry) with
// the guard held and every signal blocked: correct, about a microsecond per event. x0 and
// x30 are the sled's (it saved them), x16/x17 the intra-procedure-call registers any veneer
// may clobber: all other registers are preserved.

    .text

    .macro XRAY_TRAMPOLINE name, kind
    .p2align 4
    .globl instrfn_aarch64_xray_\name
    .hidden instrfn_aarch64_xray_\name
    .type instrfn_aarch64_xray_\name,%function
instrfn_aarch64_xray_\name:
    .cfi_startproc
    ldr     x17, [x0, x17, lsl #3]          // the table entry: the function (| flags)
    mrs     x0, tpidr_el0
    adrp    x16, :gottprel:instrfn_tls
    ldr     x16, [x16, #:gottprel_lo12:instrfn_tls]
    add     x0, x0, x16                     // &Tls
    ldr     x16, [x0, #{TLS_GUARD}]
    cbnz    x16, 9f                         // runtime code is running here
    adrp    x16, instrfn_mode
    ldrb    w16, [x16, #:lo12:instrfn_mode]
    cbz     w16, 9f                         // gmon mode: tracing could not start
    .if \kind == 0
    adrp    x16, instrfn_enabled
    ldrb    w16, [x16, #:lo12:instrfn_enabled]
    cbz     w16, 9f                         // recording off (an exit still pops its entry)
    .endif
    add     x0, sp, #16                     // the frame
    .if \kind != 0
    orr     x0, x0, #\kind
    .endif
    adrp    x16, instrfn_xray_slow
    add     x16, x16, #:lo12:instrfn_xray_slow
    b       instrfn_aarch64_slow            // x16 = fn, x0 / x17 its second and third args
9:  ret
    .cfi_endproc
    .size instrfn_aarch64_xray_\name, .-instrfn_aarch64_xray_\name
    .endm

    XRAY_TRAMPOLINE entry, 0
    XRAY_TRAMPOLINE exit, 1
    XRAY_TRAMPOLINE tail, 2
