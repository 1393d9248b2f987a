// instrfn XRay trampolines for aarch64 Linux (AAPCS64): where patched XRay sleds lead
// (src/xray/ patches them). src/arch/x86_64/xray.s is the reference: these follow its protocol
// exactly (what each fast path writes, when it hands over to the slow path), with
// src/arch/aarch64/'s signal-safe reservations. Assembled by src/arch/aarch64/mod.rs in one
// global_asm! block after src/arch/aarch64/, whose operands and macros (TLS_ADDR, TRACE_EVENT,
// SHADOW_RESERVE, SHADOW_RELEASE) this file uses: its header lists the operands.
//
// A patched sled (src/xray/): nop ; mov x16, x30 ; movz w17, #id_lo ; movk w17, #id_hi,
// lsl #16 ; bl <stub> ; bti j ; nop ; nop. The stub saves x0 and x16 (the function's x30)
// below sp (stp x0, x16, [sp, #-16]!), loads the object's id -> address table into x0 and
// branches here. So on entry: x0 = table, w17 = id (x17 zero-extended), x16 = the
// trampoline, x30 = the sled's `bti j` (we go back there), sp = the function's sp minus the
// stub's 16 bytes, which hold its x0 and x30. Every way out (XRAY_RET) puts x0, x30 and sp
// back and branches to the `bti j` with `br x16`: no instruction of the sled itself moves sp
// or loses x30, so the function's unwind information holds at each of them (the sled form
// before pushed the pair in the sled and popped it after the return: an unwinder that started
// there computed the function's frame 16 bytes off). The frame is identified by the function's sp at
// the sled (sp + 16 here): the same at its entry sled and at its exit and tail sleds (after
// the epilogue), lower for every frame it calls. Table entries are the function's address,
// bit 63 set for a function without entry sled (EXITS_ONLY), bit 62 for one without exit sled
// (NO_EXIT).
//
// Register contract. In: as above. Out: every register as the sled had it but x16 and x17
// (IP0/IP1, which the stub's `br x16` and any veneer may clobber too) and NZCV; x0 and x30
// are put back from the stub's pair on every way out. x1-x15, x18-x29, sp, all FP/SIMD/SVE
// state, FPCR and FPSR are preserved — x9-x15 too, although caller-saved: a sled is not a call
// boundary for the function it is in. NZCV is not: no sled is where flags are live (the entry
// sled is the function's first instruction, the exit sled stands where its `ret` was, the tail
// sled right before the branch into its tail callee; AAPCS64 neither passes nor keeps NZCV
// across a call or return), and the slow path clobbers them too. The fast paths use x0, x16
// and x17 as scratch and push x1-x6 (three pairs, 48 bytes: sp stays 16-byte aligned, which
// Linux enforces for sp-based accesses). There is no red zone on AAPCS64 Linux — a signal
// frame may be written anywhere below sp at any time — so nothing is kept below sp. They never
// touch FP/SIMD/SVE state, FPCR or FPSR; everything else (the slow path) goes through
// instrfn_aarch64_slow (src/arch/aarch64/), which saves every register but x16/x17 (x1-x15,
// x18-x30, q0-q31 or the SVE state, FPCR, FPSR) and blocks every signal.
// Frame while pushed: [sp] x1, x2; [sp + 16] x3, x4; [sp + 32] x5, x6; [sp + 48] the sled's x0,
// x30; so the frame is sp + 64.
//
// Protocol (src/arch/x86_64/xray.s): the guard is checked first (runtime code running on this
// thread: its own sleds return at once), then recording (instrfn_enabled, entries only) and
// the mode (0: tracing could not start after all).
// - Entry: with exits off (mode 2) or for a function without exit sled (bit 62), an entry
//   without exit event (EV_NOEXIT), nothing pushed. Otherwise, unless an unwinder ran (Tls
//   unwound set) or the newest shadow entry's frame lies at or below ours (left behind by
//   longjmp or unwinding, or being pushed: slot 0), a shadow entry is reserved (SHADOW_RESERVE:
//   full, or no shadow stack yet, takes the slow path), the timestamp read, the event reserved
//   (TRACE_EVENT: no room or no chunk gives the shadow entry back and takes the slow path) and
//   written (timestamp, then the tagged word), then the shadow entry: function and SH_FP 0
//   (not a -pg frame: instrfn_aarch64_exit never takes it for its own), ret 0 (no return
//   address is replaced), and last its slot, the frame. All other cases: the slow path.
// - Exit and tail call (one routine, the kind apart): if the newest shadow entry is this
//   frame's, its exit event is written (recording on or off: a call that straddles a stop ends
//   as it began), then the entry popped (slot zeroed, then shadow_top lowered: a handler that
//   comes in between takes it for one being pushed, alive). No entry of ours on top: recording
//   off returns at once; a function without entry sled (bit 63) has its exit written alone;
//   anything else (frames to close above ours, no entry for this frame) is the slow path, as
//   are an unwinder that ran and no room for the event.
// - A signal handler on this thread is a second producer: it may run between any two
//   instructions, push and pop shadow entries above ours and write events after ours (or take
//   the next chunk); the reservations are those of src/arch/aarch64/ (see its header).
// - Timestamps: `mrs cntvct_el0` with no isb, as in src/arch/aarch64/ (the read may be taken a few
//   instructions early: far less than what separates two events of a thread), before the
//   event is reserved.
// Slow path handover: x16 = instrfn_xray_slow, x0 = the frame | kind (0 entry, 1 exit, 2 tail),
// x17 = the table entry, everything else as the sled had it (x1-x6 popped again) but x30, the
// return into the sled, kept on the stack across `bl instrfn_aarch64_slow`, which calls
// instrfn_xray_slow(&Tls, frame | kind, entry) and returns here (instrfn_xray_slow returns 0:
// x30 as it came); then out as always (XRAY_RET).
//
// Unwind info: the trampolines describe the sled's caller, the instrumented function, as
// already returned: CFA = the function's sp at the sled (it has no frame there: before its
// prologue or after its epilogue), its x0 and x30 at CFA - 16 and CFA - 8 where the sled saved
// them. An unwinder that starts in a trampoline (backtrace() in a signal handler) goes on in
// the function's caller, with the right sp and registers: x30, the return address column,
// gives the function's return address, so the function itself is left out. (Describing it
// too would need the trampoline's return address, in x30, and the function's, at CFA - 8, in
// two columns. The slow routine's own unwind info leads back into the trampoline, whose rule
// there counts the word it keeps x30 in.)
//
// Executed (qemu-aarch64 -singlestep -d exec,nochain, the register harness
// tests/fixtures/xray/regs_aarch64.S, recording on, before call words): the entry
// trampoline's fast path 57 instructions, `ret` included; the exit and tail trampolines' 47
// (45 for the exit of a function without entry sled); the sled and the stub add 7 (stp,
// movz, movk, bl, ldr, ldr, br) and the ldp after the return. Since (counted from the
// source): MERGE_CALL adds 19 to an exit whose call recorded events inside it, and a call
// word takes its 42 in place of the exit event's reservation and store.

    .text

// XRAY_IN kind, out: the common head: x17 = the table entry, x0 = &Tls; the guard, recording
//   (kind 0 only) and the mode checked (`out`: nothing to do, nothing pushed); then x1-x6
//   pushed, x16 = the mode (1, or 2: exits off).
    .macro XRAY_IN kind, out
    .cfi_def_cfa_offset 16                  // the function's sp (the sled pushed 16 bytes)
    .cfi_offset x0, -16
    .cfi_offset x30, -8
    ldr     x17, [x0, x17, lsl #3]          // the table entry: the function (| flags)
    TLS_ADDR x0, x16                        // &Tls
    ldr     x16, [x0, #{TLS_GUARD}]
    cbnz    x16, \out                       // guard held: runtime code is running here
    .if \kind == 0
    adrp    x16, instrfn_enabled
    ldrb    w16, [x16, #:lo12:instrfn_enabled]
    cbz     w16, \out                       // recording off
    .endif
    adrp    x16, instrfn_mode
    ldrb    w16, [x16, #:lo12:instrfn_mode]
    cbz     w16, \out                       // gmon mode: tracing could not start
    stp     x1, x2, [sp, #-48]!
    .cfi_def_cfa_offset 64
    .cfi_offset x1, -64
    .cfi_offset x2, -56
    stp     x3, x4, [sp, #16]
    .cfi_offset x3, -48
    .cfi_offset x4, -40
    stp     x5, x6, [sp, #32]
    .cfi_offset x5, -32
    .cfi_offset x6, -24
    .endm

// XRAY_POP: x1-x6 back, sp as the sled left it.
    .macro XRAY_POP
    ldp     x5, x6, [sp, #32]
    ldp     x3, x4, [sp, #16]
    ldp     x1, x2, [sp], #48
    .cfi_def_cfa_offset 16
    .cfi_restore x1
    .cfi_restore x2
    .cfi_restore x3
    .cfi_restore x4
    .cfi_restore x5
    .cfi_restore x6
    .endm

// XRAY_RET: out of a trampoline, sp as XRAY_IN found it: x0, x30 and sp put back as the sled
//   had them, then to the sled's `bti j` (x30 now, kept in x16). For an unwinder the function
//   has then returned already (x30 is its return address), as everywhere in the trampolines.
    .macro XRAY_RET
    mov     x16, x30
    ldp     x0, x30, [sp], #16
    .cfi_def_cfa_offset 0
    .cfi_restore x0
    .cfi_restore x30
    br      x16
    .endm

// XRAY_SLOW kind, out: pops and calls instrfn_xray_slow through instrfn_aarch64_slow, then
//   leaves through `out` (an XRAY_RET), x30 kept on the stack across the call.
    .macro XRAY_SLOW kind, out
    XRAY_POP
    add     x0, sp, #16                     // the frame
    .if \kind != 0
    orr     x0, x0, #\kind
    .endif
    adrp    x16, instrfn_xray_slow
    add     x16, x16, #:lo12:instrfn_xray_slow
    str     x30, [sp, #-16]!                // the return into the sled
    .cfi_def_cfa_offset 32
    bl      instrfn_aarch64_slow            // x16 = fn, x0 / x17 its second and third args
    ldr     x30, [sp], #16
    .cfi_def_cfa_offset 16
    b       \out
    .endm

// XRAY_EVENT again, kind, value, full: reads the timestamp, reserves an event and writes it
//   (EVENT: compact; no room goes to `full`), of function `value` (a table entry whose flag
//   bits 62/63 are set is out of the code base's reach, so its event is long, and the long
//   form shifts them out). Uses x2-x4, x6, x16; value is not one of them.
    .macro XRAY_EVENT again, kind, value, full
    mrs     x2, cntvct_el0                  // timestamp
    EVENT \again, x0, x4, x6, x3, 16, 2, \value, \kind, \full // x4 = our event
    .endm

// instrfn_aarch64_xray_entry: an entry sled's (the function's first instruction). In the
// body: x5 = the frame, x1 = our shadow entry.
    .p2align 4
    .globl instrfn_aarch64_xray_entry
    .hidden instrfn_aarch64_xray_entry
    .type instrfn_aarch64_xray_entry,%function
instrfn_aarch64_xray_entry:
    .cfi_startproc
    XRAY_IN 0, .Lxe_out
    cmp     w16, #2
    b.eq    .Lxe_noexit                     // exits off (INSTRFN_EXITS): entries only
    tbnz    x17, #62, .Lxe_noexit           // no exit sled: an entry without exit
    ldr     x1, [x0, #{TLS_UNWOUND}]
    cbnz    x1, .Lxe_slow                   // an unwinder ran (or walks): the slow path
    add     x5, sp, #64                     // the frame
    ldr     x3, [x0, #{TLS_SHADOW_TOP}]
    ldr     x2, [x0, #{TLS_SHADOW_BASE}]
    cmp     x3, x2
    b.eq    1f
    ldur    x2, [x3, #{SH_SLOT} - {SH_BYTES}]
    cmp     x2, x5                          // the newest entry's frame at or below ours is
    b.ls    .Lxe_slow                       // gone (longjmp, unwinding), or being pushed (0)
1:  add     x3, x0, #{TLS_SHADOW_TOP}
    ldr     x2, [x0, #{TLS_SHADOW_END}]
    SHADOW_RESERVE 2, x3, x2, x1, x4, w16, .Lxe_full // x1 = our entry (its slot is 0)
    XRAY_EVENT 3, {EV_ENTRY}, x17, .Lxe_unpush
    stp     x17, xzr, [x1, #{SH_FN}]        // function, frame pointer 0 (SH_FP: not -pg's)
    str     xzr, [x1, #{SH_RET}]            // nothing replaced
    str     x5, [x1, #{SH_SLOT}]            // last: the entry is complete
.Lxe_ret:
    .cfi_remember_state
    XRAY_POP
.Lxe_out:
    XRAY_RET
    .cfi_restore_state
.Lxe_noexit:
    XRAY_EVENT 4, {EV_NOEXIT}, x17, .Lxe_slow
    b       .Lxe_ret
.Lxe_full:
    clrex                                   // left between SHADOW_RESERVE's ldxr and stxr
    b       .Lxe_slow
.Lxe_unpush:
    add     x3, x0, #{TLS_SHADOW_TOP}       // give the shadow entry back (slot still 0)
    SHADOW_RELEASE 5, x3, x4, w16
.Lxe_slow:
    XRAY_SLOW 0, .Lxe_out
    .cfi_endproc
    .size instrfn_aarch64_xray_entry, .-instrfn_aarch64_xray_entry

// XRAY_EXIT name, kind: instrfn_aarch64_xray_exit (an exit sled's, kind 1: in place of the
//   function's `ret`, which follows the sled) and instrfn_aarch64_xray_tail (a tail sled's,
//   kind 2: before the function's tail branch). In the body: x5 = the frame, x1 = the newest
//   shadow entry.
    .macro XRAY_EXIT name, kind
    .p2align 4
    .globl instrfn_aarch64_xray_\name
    .hidden instrfn_aarch64_xray_\name
    .type instrfn_aarch64_xray_\name,%function
instrfn_aarch64_xray_\name:
    .cfi_startproc
    XRAY_IN \kind, .Lx_out_\name
    ldr     x1, [x0, #{TLS_UNWOUND}]
    cbnz    x1, .Lx_slow_\name              // an unwinder ran (or walks): the slow path
    add     x5, sp, #64                     // the frame
    ldr     x1, [x0, #{TLS_SHADOW_TOP}]
    ldr     x2, [x0, #{TLS_SHADOW_BASE}]
    cmp     x1, x2
    b.eq    .Lx_none_\name
    sub     x1, x1, #{SH_BYTES}             // the newest entry
    ldr     x2, [x1, #{SH_SLOT}]
    cmp     x2, x5
    b.ne    .Lx_none_\name
    // Ours: its entry was recorded, so its exit is, recording on or off: a call word where
    // the call recorded nothing inside it (MERGE_CALL, as the mcount exit's), else an event.
    ldr     x5, [x1, #{SH_FN}]              // the function that returns
    mrs     x2, cntvct_el0                  // timestamp
    MERGE_CALL x0, x5, x2, 3, 4, 6, 16, .Lx_pop_\name, instrfn_aarch64_xray_\name\()_merge
    EVENT 1, x0, x4, x6, x3, 16, 2, x5, {EV_EXIT}, .Lx_slow_\name // (no room: the slow path)
.Lx_pop_\name:
    str     xzr, [x1, #{SH_SLOT}]           // free entries have slot 0
    str     x1, [x0, #{TLS_SHADOW_TOP}]     // popped
.Lx_ret_\name:
    .cfi_remember_state
    XRAY_POP
.Lx_out_\name:
    XRAY_RET
    .cfi_restore_state
.Lx_none_\name:
    // No entry of this frame on top. Recording off: nothing to do. A function without entry
    // sled: its exit, alone.
    adrp    x2, instrfn_enabled
    ldrb    w2, [x2, #:lo12:instrfn_enabled]
    cbz     w2, .Lx_ret_\name
    tbz     x17, #63, .Lx_slow_\name
    XRAY_EVENT 2, {EV_EXIT}, x17, .Lx_slow_\name
    b       .Lx_ret_\name
.Lx_slow_\name:
    XRAY_SLOW \kind, .Lx_out_\name
    .cfi_endproc
    .size instrfn_aarch64_xray_\name, .-instrfn_aarch64_xray_\name
    .endm

    XRAY_EXIT exit, 1
    XRAY_EXIT tail, 2
