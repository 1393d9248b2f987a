# instrfn's XRay handler for x86_64 Linux (System V ABI), AT&T syntax.
#
# Assembled into Rust programs by instrfn-xray (src/lib.rs, global_asm!), and into C programs
# as it is (see c/instrfn_xray.h). Assembly, so nothing on the handler's path has XRay sleds
# whatever the program was compiled with: compiler-rt's trampoline -> this handler ->
# __cyg_profile_func_enter/_exit (naked entry points of the instrfn runtime) -> the runtime's
# fast paths in asm/x86_64.s, which check the per-thread guard before any Rust code runs.
#
# Path of one event:
#   patched sled  `mov $id, %r10d; call __xray_FunctionEntry` (exit and tail-exit sleds: jmp)
#   compiler-rt   saves the registers the instrumented code may still use, then calls the
#                 handler set with __xray_set_handler: handler(id, type)
#   this handler  looks the function's address up in instrfn_xray_table and continues (a
#                 tail jump) at __cyg_profile_func_enter(fn, 0) for an entry,
#                 __cyg_profile_func_exit(fn, 0) for an exit or a tail exit: the events that
#                 -finstrument-functions code makes, in the same per-thread trace rings
#   the runtime   records the event (no lock, no system call on the fast path) and returns to
#                 compiler-rt, which restores the registers and goes back to the function.
# The call site argument is 0: XRay does not pass one. Trace mode records only the function
# (entry or exit); gmon mode counts arcs from caller 0, which no module holds (not written).

    .pushsection .bss
# instrfn_xray_table: the table that maps XRay function ids to function addresses.
#   +0  ptr  address of an array of len u64s: ptr[id] = address of function id (ptr[0] = 0,
#            and 0 wherever no function is known)
#   +8  len  entries of the array (0: no table, every call is ignored)
# Written once by whoever installs the handler, before it is set: ptr first, then len (x86
# keeps stores in order, and loads too, so a handler that reads len before ptr never sees an
# array shorter than len). Never freed: a handler may still be running after removal.
    .p2align 3
    .globl instrfn_xray_table
    .hidden instrfn_xray_table
    .type instrfn_xray_table,@object
instrfn_xray_table:
    .quad 0
    .quad 0
    .size instrfn_xray_table, 16
    .popsection

# instrfn_xray_handler(int32_t id, XRayEntryType type): %edi = function id (1-based),
#   %esi = type (0 entry, 1 exit, 2 tail exit, 3 entry of a function that logs its argument;
#   any other type is ignored).
#   An ordinary C function to its caller (compiler-rt's trampoline, which saves the
#   instrumented code's registers around the call): clobbers rax, rdi, rsi and the flags, all
#   caller-saved; __cyg_profile_func_enter/_exit preserve every register. Touches no stack:
#   the tail jump leaves compiler-rt's return address at (%rsp) for the runtime to return to.
#   An id outside the table, or without an address, returns at once.
# The mark of an object whose sleds compiler-rt patches for this handler: instrfn's own sled
# patcher (src/xray.rs) leaves objects with a section of this name alone, so that no sled has
# two patchers. Kept by the linker (--gc-sections) through the handler's R_X86_64_NONE
# reference below, in stripped binaries too (an allocated section).
    .pushsection instrfn_xray_crt,"a",@progbits
instrfn_xray_crt_mark:
    .byte 1
    .popsection

    .text
    .p2align 4
    .globl instrfn_xray_handler
    .hidden instrfn_xray_handler
    .type instrfn_xray_handler,@function
instrfn_xray_handler:
    .cfi_startproc
    .reloc ., R_X86_64_NONE, instrfn_xray_crt_mark
    movl %edi, %edi                             # zero-extended: a negative id fails the bound
    cmpq instrfn_xray_table+8(%rip), %rdi       # id < len?
    jae 1f
    movq instrfn_xray_table(%rip), %rax
    movq (%rax,%rdi,8), %rdi                    # rdi = the function's address
    testq %rdi, %rdi
    jz 1f
    testl %esi, %esi
    jz 2f                                       # 0: entry
    cmpl $3, %esi
    je 2f                                       # 3: entry of an xray_log_args function (no
                                                # arg1 handler set: compiler-rt calls this one)
    ja 1f                                       # custom and typed events: ignored
    xorl %esi, %esi                             # 1 exit, 2 tail exit; call_site = 0
    jmp __cyg_profile_func_exit@PLT
2:  xorl %esi, %esi
    jmp __cyg_profile_func_enter@PLT
1:  ret
    .cfi_endproc
    .size instrfn_xray_handler, .-instrfn_xray_handler

    # No executable stack for programs that assemble this file themselves.
    .section .note.GNU-stack,"",@progbits
    .text
