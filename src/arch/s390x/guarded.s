# instrfn trampolines for s390x, ways into the runtime: the guarded routine every Rust entry point
# runs through, this thread's Tls and a call on another stack.

# instrfn_s390x_guarded: run a runtime entry point with this thread's guard held and all
#   signals blocked (as on x86_64, also when called from a signal handler).
#   r1 = the Rust function to call, r2/r3/r4 = its first three arguments. An ordinary ABI call otherwise
#   (entered by `jg` from a guarded_entry! stub, so r14 is the stub's caller's return address):
#   returns the function's r2, keeps errno and restores the previous guard value; clobbers
#   what a call may clobber.
#   Frame (%r15 = CFA-344; r6-r15 in the caller's save area, CFA-112..-40):
#      0 backchain and save area, 160 old signal mask, 168 errno, 176 old guard
    .p2align 4
    .globl instrfn_s390x_guarded
    .hidden instrfn_s390x_guarded
    .type instrfn_s390x_guarded,@function
instrfn_s390x_guarded:
    .cfi_startproc
    SAVE_R6_R15
    lgr %r11,%r15
    .cfi_def_cfa_register %r11
    lay %r15,-184(%r15)
    stg %r11,0(%r15)                 # backchain
    lgr %r12,%r1                     # the function
    lgr %r6,%r2                      # its arguments
    lgr %r7,%r3
    lgr %r8,%r4
    BLOCK_SIGNALS 160
    brasl %r14,__errno_location@PLT
    l %r0,0(%r2)
    st %r0,168(%r15)
    ear %r13,%a0
    sllg %r13,%r13,32
    ear %r13,%a1
    larl %r1,instrfn_tls@indntpoff
    ag %r13,0(%r1)                   # r13 = &Tls
    lg %r0,{TLS_GUARD}(%r13)
    stg %r0,176(%r15)                # old guard
    mvghi {TLS_GUARD}(%r13),1
    lgr %r2,%r6
    lgr %r3,%r7
    lgr %r4,%r8
    basr %r14,%r12
    lgr %r9,%r2                      # the result
    lg %r0,176(%r15)
    stg %r0,{TLS_GUARD}(%r13)
    brasl %r14,__errno_location@PLT
    l %r0,168(%r15)
    st %r0,0(%r2)
    RESTORE_SIGNALS 160
    lgr %r2,%r9
    lmg %r6,%r15,184+48(%r15)
    .cfi_def_cfa %r15, 160
    .cfi_restore %r6
    .cfi_restore %r7
    .cfi_restore %r8
    .cfi_restore %r9
    .cfi_restore %r10
    .cfi_restore %r11
    .cfi_restore %r12
    .cfi_restore %r13
    .cfi_restore %r14
    .cfi_restore %r15
    br %r14
    .cfi_endproc
    .size instrfn_s390x_guarded, .-instrfn_s390x_guarded

# instrfn_tls_get: r2 = address of this thread's Tls. Clobbers r1 only.
    .p2align 4
    .globl instrfn_tls_get
    .hidden instrfn_tls_get
    .type instrfn_tls_get,@function
instrfn_tls_get:
    .cfi_startproc
    ear %r2,%a0
    sllg %r2,%r2,32
    ear %r2,%a1
    larl %r1,instrfn_tls@indntpoff
    ag %r2,0(%r1)
    br %r14
    .cfi_endproc
    .size instrfn_tls_get, .-instrfn_tls_get

# instrfn_call_on_stack(f = r2, arg = r3, top = r4): as on x86_64 (src/arch/x86_64/); r11 holds the
#   caller's stack pointer; a 160-byte save area with a backchain is made below top.
    .p2align 4
    .globl instrfn_call_on_stack
    .hidden instrfn_call_on_stack
    .type instrfn_call_on_stack,@function
instrfn_call_on_stack:
    .cfi_startproc
    stmg %r11,%r15,88(%r15)
    .cfi_offset %r11, -72
    .cfi_offset %r12, -64
    .cfi_offset %r13, -56
    .cfi_offset %r14, -48
    .cfi_offset %r15, -40
    lgr %r11,%r15
    .cfi_def_cfa_register %r11
    nill %r4,65528                   # top & -8
    lay %r15,-160(%r4)
    stg %r11,0(%r15)                 # backchain
    lgr %r1,%r2
    lgr %r2,%r3
    basr %r14,%r1
    lgr %r15,%r11
    .cfi_def_cfa_register %r15
    lmg %r11,%r15,88(%r15)
    .cfi_restore %r11
    .cfi_restore %r12
    .cfi_restore %r13
    .cfi_restore %r14
    .cfi_restore %r15
    br %r14
    .cfi_endproc
    .size instrfn_call_on_stack, .-instrfn_call_on_stack
