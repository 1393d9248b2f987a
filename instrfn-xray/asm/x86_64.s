# instrfn's XRay handler for x86_64 Linux (System V ABI), AT&T syntax.
#
# Assembled into Rust programs by instrfn-xray (src/lib.rs, global_asm!), and into C programs
# as it is (see c/instrfn_xray.h). Assembly, so nothing on the handler's path has XRay sleds
# whatever the program was compiled with: compiler-rt's trampoline -> this handler -> the
# instrfn runtime's instrfn_xray_handler_entry/_exit (asm/x86_64-xray.s of the runtime, which
# must be linked statically: libinstrfn.a, or the instrfn crate), which check the per-thread
# guard before any Rust code runs.
#
# Path of one event:
#   patched sled  `mov $id, %r10d; call __xray_FunctionEntry` (exit and tail-exit sleds: jmp
#                 __xray_FunctionExit, call __xray_FunctionTailExit)
#   compiler-rt   saves the registers the instrumented code may still use, then calls the
#                 handler set with __xray_set_handler: handler(id, type)
#   this handler  looks the function's address up in instrfn_xray_table, finds the function's
#                 frame (its return slot) at a known offset above its own %rsp, and continues
#                 (a tail jump) at instrfn_xray_handler_entry(fn, frame) for an entry,
#                 instrfn_xray_handler_exit(fn, frame) for an exit or a tail exit: the events
#                 and shadow entries that natively patched sleds make, so that frames a panic or
#                 an exception unwinds through are closed at the catch (or the thread's next
#                 event) as theirs are
#   the runtime   records the event (no lock, no system call on the fast path) and returns to
#                 compiler-rt, which restores the registers and goes back to the function.
# The offsets come from instrfn_xray_probe, which runs compiler-rt's own trampolines once and
# sees where they call the handler from (never assumed: compiler-rt's trampolines differ
# between releases). If it could not tell, the handler continues at the runtime's
# __cyg_profile_func_enter/_exit(fn, 0) instead, as -finstrument-functions code does: the same
# events, but no shadow entries, so frames left by unwinding stay open. Trace mode records only
# the function (entry or exit); gmon mode counts arcs from caller 0, which no module holds (not
# written).

# In a section of its own, named so (no leading dot, so linkers keep it as it is): instrfn's
# runtime, linked in or preloaded, finds it in the program's section headers and leaves the
# sleds of the object that has it to compiler-rt (src/xray.rs), which patches them with this
# handler.
    .pushsection instrfn_xray_route, "aw", @nobits
# instrfn_xray_table: the table that maps XRay function ids to function addresses.
#   +0   ptr    address of an array of len u64s: ptr[id] = address of function id (ptr[0] = 0,
#               and 0 wherever no function is known); bit 63 set: the function has no entry
#               sled, bit 62: no exit sled (as in the runtime's own tables, src/xray.rs)
#   +8   len    entries of the array (0: no table, every call is ignored)
#   +16  frame  4 offsets, by entry type (0 entry, 1 exit, 2 tail exit, 3 entry of a function
#               that logs its argument): the instrumented function's return slot is at the
#               handler's %rsp + offset; all 0: not known (the __cyg_profile route)
# Written once by whoever installs the handler, before it is set: the offsets (by
# instrfn_xray_probe), then ptr, then len (x86 keeps stores in order, and loads too, so a
# handler that reads len before ptr never sees an array shorter than len). Never freed: a
# handler may still be running after removal.
    .p2align 3
    .globl instrfn_xray_table
    .hidden instrfn_xray_table
    .type instrfn_xray_table,@object
instrfn_xray_table:
    .quad 0
    .quad 0
    .quad 0, 0, 0, 0
    .size instrfn_xray_table, 48
# Where the probe handler was called (its %rsp), 0 until it is.
    .p2align 3
instrfn_xray_probe_sp:
    .quad 0
    .popsection

# instrfn_xray_handler(int32_t id, XRayEntryType type): %edi = function id (1-based),
#   %esi = type (0 entry, 1 exit, 2 tail exit, 3 entry of a function that logs its argument;
#   any other type is ignored).
#   An ordinary C function to its caller (compiler-rt's trampoline, which saves the
#   instrumented code's registers around the call): clobbers rax, rdx, rdi, rsi and the flags,
#   all caller-saved; instrfn_xray_handler_entry/_exit and __cyg_profile_func_enter/_exit
#   preserve every register. Touches no stack: the tail jump leaves compiler-rt's return
#   address at (%rsp) for the runtime to return to.
#   An id outside the table, or without an address, returns at once.
    .text
    .p2align 4
    .globl instrfn_xray_handler
    .hidden instrfn_xray_handler
    .type instrfn_xray_handler,@function
instrfn_xray_handler:
    .cfi_startproc
    movl %edi, %edi                             # zero-extended: a negative id fails the bound
    cmpq instrfn_xray_table+8(%rip), %rdi       # id < len?
    jae 1f
    movq instrfn_xray_table(%rip), %rax
    movq (%rax,%rdi,8), %rdi                    # rdi = the function's table entry
    testq %rdi, %rdi
    jz 1f
    cmpl $3, %esi
    ja 1f                                       # custom and typed events: ignored
    movl %esi, %eax
    leaq instrfn_xray_table(%rip), %rdx
    movq 16(%rdx,%rax,8), %rdx                  # the frame's offset above our %rsp
    testq %rdx, %rdx
    jz 2f                                       # not known: the __cyg_profile route
    addq %rsp, %rdx
    testl %esi, %esi
    jz 3f                                       # 0: entry
    cmpl $3, %esi
    je 3f                                       # 3: entry of an xray_log_args function (no
                                                # arg1 handler set: compiler-rt calls this one)
    movq %rdx, %rsi                             # 1 exit, 2 tail exit: (fn, frame)
    jmp instrfn_xray_handler_exit
3:  movq %rdx, %rsi
    jmp instrfn_xray_handler_entry
2:  btrq $63, %rdi                              # the address alone
    btrq $62, %rdi
    testl %esi, %esi
    jz 4f
    cmpl $3, %esi
    je 4f
    xorl %esi, %esi                             # 1 exit, 2 tail exit; call_site = 0
    jmp __cyg_profile_func_exit@PLT
4:  xorl %esi, %esi
    jmp __cyg_profile_func_enter@PLT
1:  ret
    .cfi_endproc
    .size instrfn_xray_handler, .-instrfn_xray_handler

# instrfn_xray_probe_handler(id, type): the handler while instrfn_xray_probe runs: notes its
#   %rsp when called with the probe's id. Clobbers nothing but the flags.
    .p2align 4
    .type instrfn_xray_probe_handler,@function
instrfn_xray_probe_handler:
    .cfi_startproc
    cmpl $0x7ffffff0, %edi
    jne 1f
    movq %rsp, instrfn_xray_probe_sp(%rip)
1:  ret
    .cfi_endproc
    .size instrfn_xray_probe_handler, .-instrfn_xray_probe_handler

# PROBE tramp, type, exit, misalign: calls compiler-rt's trampoline \tramp as a patched sled
#   would reach it, with %rsp misaligned by \misalign (0 or 8) at the call, and the probe's id;
#   offset = where the instrumented function's return slot would be, minus the %rsp the probe
#   handler was called with. For an entry or tail sled (`call tramp`, at the function's first
#   instruction or before its tail jump) the slot is %rsp before the call; for an exit sled
#   (`jmp tramp` with the function's return address on top) it is %rsp at the trampoline's
#   first instruction, 8 below %rsp before our call. The first probe of a type stores the
#   offset at frame[type]; the second one must find the same (compiler-rt does not realign the
#   stack before calling the handler), else the probe fails. rbx, r12 are the probe's.
    .macro PROBE tramp, type, exit, misalign
    leaq -16(%rbp), %rsp
    andq $-16, %rsp
    subq $\misalign, %rsp
    movq %rsp, %rbx                             # %rsp before the call
    movq $0, instrfn_xray_probe_sp(%rip)
    movl $0x7ffffff0, %r10d                     # the id (compiler-rt passes %r10d)
    call \tramp
    movq instrfn_xray_probe_sp(%rip), %rax
    testq %rax, %rax
    jz .Lprobe_failed                           # not called: another handler (arg1) took it
    .if \exit
    subq $8, %rbx
    .endif
    subq %rax, %rbx                             # the offset (positive: the slot is above)
    jbe .Lprobe_failed
    .if \misalign
    cmpq %rbx, 16+8*\type(%r12)
    jne .Lprobe_failed                          # it depends on the alignment
    .else
    movq %rbx, 16+8*\type(%r12)
    .endif
    .endm

# int instrfn_xray_probe(void): finds the frame offsets of instrfn_xray_table by running
#   compiler-rt's __xray_FunctionEntry, __xray_FunctionExit, __xray_FunctionTailExit and
#   __xray_ArgLoggerEntry with a probe handler set (compiler-rt's handler is the probe's when it
#   returns: set the real one next). Returns 1 when all four are known (stored), else 0 (all
#   left 0). Call it once, before any sled is patched (an event of another thread that arrives
#   meanwhile goes to the probe handler: dropped). An ordinary C function: clobbers the
#   caller-saved registers.
    .p2align 4
    .globl instrfn_xray_probe
    .hidden instrfn_xray_probe
    .type instrfn_xray_probe,@function
instrfn_xray_probe:
    .cfi_startproc
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbp, 0
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    pushq %rbx
    .cfi_offset %rbx, -24
    pushq %r12
    .cfi_offset %r12, -32
    leaq instrfn_xray_table(%rip), %r12
    leaq instrfn_xray_probe_handler(%rip), %rdi
    call __xray_set_handler@PLT
    cmpl $1, %eax
    jne .Lprobe_failed                          # XRay not initialised
    PROBE __xray_FunctionEntry, 0, 0, 0
    PROBE __xray_FunctionEntry, 0, 0, 8
    PROBE __xray_FunctionExit, 1, 1, 0
    PROBE __xray_FunctionExit, 1, 1, 8
    PROBE __xray_FunctionTailExit, 2, 0, 0
    PROBE __xray_FunctionTailExit, 2, 0, 8
    PROBE __xray_ArgLoggerEntry, 3, 0, 0
    PROBE __xray_ArgLoggerEntry, 3, 0, 8
    movl $1, %eax
    jmp 1f
.Lprobe_failed:
    xorl %eax, %eax
    movq %rax, 16(%r12)
    movq %rax, 24(%r12)
    movq %rax, 32(%r12)
    movq %rax, 40(%r12)
1:  leaq -16(%rbp), %rsp
    popq %r12
    popq %rbx
    popq %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size instrfn_xray_probe, .-instrfn_xray_probe

    # No executable stack for programs that assemble this file themselves.
    .section .note.GNU-stack,"",@progbits
    .text
