// instrfn trampolines for aarch64 Linux (AAPCS64), GNU as syntax.
//
// Same plan, symbols, layouts (Tls, ArcTable, Slot) and hash as src/arch/x86_64/, the annotated
// reference; this file documents only how aarch64 differs. It is assembled by LLVM as one
// `global_asm!` block from src/arch/aarch64/mod.rs, followed by src/arch/aarch64/xray.s (which uses the
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
// Shared layouts are the `{{NAME}}` operands of trampoline_asm! (src/arch/x86_64/ lists them all):
// Tls {TLS_TABLE} table, {TLS_GUARD} guard; ArcTable {TBL_MASK} mask, {TBL_LEN} len, {TBL_LIMIT} limit,
// {TBL_SHIFT} shift, {TBL_LAST} last, {TBL_LOST} lost; slots of {SLOT_SIZE} (= 1 << {SLOT_SHIFT}) bytes with self_pc at
// {SLOT_SELF} and from_pc right after it at {SLOT_FROM} (one ldp loads both), count at {SLOT_COUNT}; the hash
// multiplier {HASH_MUL} is loaded from instrfn_hash_mul (src/abi/data.s).
// Trace mode (src/trace/) adds: Tls {TLS_TRACE_POS} trace_pos and {TLS_TRACE_END} trace_end, {TLS_SHADOW_TOP} shadow_top,
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
// Trace mode on aarch64 (src/arch/aarch64/mod.rs has the Rust side):
// - The return slot is the frame record's saved x30, [x29, #8]: the epilogue reloads x30 from
//   there (`ldp x29, x30, [sp], #N; ret`).
// - Pointer authentication: a function built with -mbranch-protection=pac-ret signs x30
//   (paciasp/pacibsp, modifier sp) before it saves it and authenticates what it reloads
//   (autiasp/retaa): an unsigned trampoline address there would fault. Such functions are
//   traced entry-only (EV_NOEXIT). Whether a function signs is not told reliably by the saved
//   value (ret != xpaclri(ret)): Linux user pointers have 7 PAC bits, so 1 signed return
//   address in 128 carries a zero PAC and looks unsigned. It is decided once per call site
//   from the prologue before the `bl` (src/arch/aarch64/mod.rs `classify`, which also requires a
//   frame record no deeper than a signal frame below the CFA), kept in the call-site table
//   instrfn_aarch64_sites; a call site not yet in the table takes the slow path. A
//   signed-looking value is entry-only whatever the table says. (Signing the trampoline's
//   address with the function's key and modifier instead would be possible where the
//   classifier follows the prologue, which tells the CFA: sp at the call plus what the
//   prologue moved it. But src/trace/ compares slots with, and writes into them, the one
//   unsigned trampoline address, when it puts the original addresses back for an unwinder and
//   re-arms the frames after it: that needs a per-entry replacement value first.)
// - The exit trampoline cannot find the slot from sp (the frame record's place in the frame
//   depends on the frame's size), so each shadow entry also keeps the frame pointer the
//   function will return with (the saved x29 of its frame record): the newest entry is the
//   returning frame's if that matches x29 (and its slot lies below sp, the function's CFA).
// - A return slot that already holds the trampoline belongs to a tail call: the slow path
//   ends the tail-calling function there (src/arch/aarch64/mod.rs `tail_call`).

    // Shared data (instrfn_tls, instrfn_enabled, instrfn_all_signals) is in src/abi/data.s.

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
