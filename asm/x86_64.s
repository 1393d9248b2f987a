# instrfn trampolines for x86_64 Linux (System V ABI), AT&T syntax.
#
# This is the annotated reference: the other architectures follow the same plan and their files
# only document how they differ. The file is assembled as one `global_asm!` block by
# src/arch/x86_64.rs, followed by asm/x86_64-xray.s (the XRay trampolines, which use this
# file's operands and its trace macros: SCRATCH_SAVE, SCRATCH_RESTORE, TIMESTAMP,
# TRACE_EVENT, SHADOW_RESERVE, SHADOW_RELEASE, SHADOW_POP); the exported names (mcount, _mcount,
# __fentry__, the gcrt entry points and the C API) are naked Rust functions there that jump
# into the routines below, because a cdylib exports only symbols that rustc itself defines.
#
# Plan of every counting call
#   fast path  (this file, no stack frame): the guard is clear and the arc (from_pc, self_pc) is
#              already in this thread's table: add one to its count and return. A new arc is
#              inserted here too while the table is less than half full. Touches only the red
#              zone, this thread's TLS and this thread's table.
#   slow path  (instrfn_x86_64_slow): the thread has no table yet, the table must grow, or
#              the runtime is not initialised. Saves every register the instrumented code may still
#              use (GPRs and the whole XSAVE state, so AVX upper halves survive vzeroupper in
#              libc), blocks all signals, sets the guard and calls the Rust
#              `instrfn_slow_path(tls, from_pc, self_pc)`.
#
# Shared layouts: the `{{NAME}}` operands are Rust constants (src/arch/mod.rs, trampoline_asm!),
# defined once with src/thread.rs `Tls` and src/arcs.rs `ArcTable`/`Slot`:
#   Tls, one per thread in .tbss (initial-exec TLS, reached through %fs):
#      {TLS_TABLE}  table   current ArcTable of this thread, 0 until the slow path gives it one
#      {TLS_GUARD}  guard   nonzero while runtime code runs on this thread: counting calls
#                           return at once
#   ArcTable header, then capacity slots of {SLOT_SIZE} bytes (self_pc, from_pc, count, unused):
#      {TBL_MASK}   mask    (capacity - 1) * {SLOT_SIZE}: a byte-offset mask over the slots
#      {TBL_LEN}   len     occupied slots
#      {TBL_LIMIT}   limit   the fast path inserts only while len < limit
#      {TBL_SHIFT}   shift   64 - log2(capacity), one byte
#      {TBL_LAST}   last    one byte, nonzero: the table never grows; a call of an arc that
#                           does not fit is counted in `lost` here, not in the slow path
#      {TBL_LOST}   lost
#   Slot fields are addressed from the table base plus the slot's byte offset: self_pc at
#   {SLOT_SELF}, from_pc at {SLOT_FROM}, count at {SLOT_COUNT}; a slot whose self_pc is 0 is empty.
#   Slot byte offset = (((from_pc ^ (self_pc rotl 32)) * {HASH_MUL}) >> shift) * {SLOT_SIZE},
#   then linear probing in steps of {SLOT_SIZE} bytes (src/arcs.rs `hash`).

    # Shared data (instrfn_tls, instrfn_enabled, instrfn_all_signals) is in asm/data.s.

    .data
    # XSAVE parameters, found on first use by instrfn_x86_64_xsave_detect: the component mask
    # (0 = no XSAVE, use FXSAVE) and the area size (0 = not yet known). The mask is stored
    # before the size, so a thread that sees a size also sees its mask (x86 stores are ordered).
    .p2align 3
    .globl instrfn_x86_64_xsave_mask
    .hidden instrfn_x86_64_xsave_mask
instrfn_x86_64_xsave_mask:
    .quad 0
    .globl instrfn_x86_64_xsave_size
    .hidden instrfn_x86_64_xsave_size
instrfn_x86_64_xsave_size:
    .quad 0

    .text

# BLOCK_SIGNALS: rt_sigprocmask(SIG_BLOCK, all, old = (%rsp), 8).
# RESTORE_SIGNALS: rt_sigprocmask(SIG_SETMASK, (%rsp), NULL, 8).
#   Raw system calls (no libc, errno untouched); clobber rax, rcx, rdx, rsi, rdi, r10, r11.
    .macro BLOCK_SIGNALS
    movl $14, %eax
    xorl %edi, %edi
    leaq instrfn_all_signals(%rip), %rsi
    movq %rsp, %rdx
    movl $8, %r10d
    syscall
    .endm
    .macro RESTORE_SIGNALS
    movl $14, %eax
    movl $2, %edi
    movq %rsp, %rsi
    xorl %edx, %edx
    movl $8, %r10d
    syscall
    .endm

# SAVE_EXTENDED: saves the extended state (x87, SSE, AVX, AVX-512) in a 64-byte aligned area
#   below %rsp, which it moves down (the caller restores %rsp from its frame pointer). Clobbers
#   rax, rcx, rdx (saved by the caller).
# RESTORE_EXTENDED: restores it from (%rsp). Clobbers rax, rdx.
    .macro SAVE_EXTENDED
    movq instrfn_x86_64_xsave_size(%rip), %rax
    testq %rax, %rax
    jnz 1f
    call instrfn_x86_64_xsave_detect
    movq instrfn_x86_64_xsave_size(%rip), %rax
1:  andq $-64, %rsp
    subq %rax, %rsp
    movq instrfn_x86_64_xsave_mask(%rip), %rax
    testq %rax, %rax
    jz 2f
    xorl %ecx, %ecx                  # XSAVE leaves header bits outside the mask as they were,
    movq %rcx, 512(%rsp)             # and XRSTOR faults on stray ones: zero the whole header
    movq %rcx, 520(%rsp)
    movq %rcx, 528(%rsp)
    movq %rcx, 536(%rsp)
    movq %rcx, 544(%rsp)
    movq %rcx, 552(%rsp)
    movq %rcx, 560(%rsp)
    movq %rcx, 568(%rsp)
    movq %rax, %rdx
    shrq $32, %rdx
    xsave64 (%rsp)
    jmp 3f
2:  fxsave64 (%rsp)
3:
    .endm
    .macro RESTORE_EXTENDED
    movq instrfn_x86_64_xsave_mask(%rip), %rax
    testq %rax, %rax
    jz 4f
    movq %rax, %rdx
    shrq $32, %rdx
    xrstor64 (%rsp)
    jmp 5f
4:  fxrstor64 (%rsp)
5:
    .endm

# Trace mode's building blocks, shared by the trampolines here and the XRay ones
# (asm/x86_64-xray.s, assembled after this file in the same block). A signal handler on this
# thread may run between any two of their instructions (never inside one) and record events and
# push shadow entries of its own; only this thread (and so its handlers) ever writes its Tls, so
# the reservations need no lock prefix, only single instructions and the order below.
# All of them address the Tls through %fs with its offset from the thread pointer in a register
# (instrfn_tls@gottpoff); all but SCRATCH_SAVE, SCRATCH_RESTORE and SHADOW_POP clobber the
# flags.
#
# SCRATCH_SAVE at / SCRATCH_RESTORE at: the fast paths' scratch registers in the red zone
#   below %rsp, which must not move in between: rax at \at(%rsp) (-8, or -48 where -8 holds
#   something else), rcx at -16, rdx at -24, rsi at -32, rdi at -40. Clobber nothing else.
    .macro SCRATCH_SAVE at
    movq %rax, \at(%rsp)
    movq %rcx, -16(%rsp)
    movq %rdx, -24(%rsp)
    movq %rsi, -32(%rsp)
    movq %rdi, -40(%rsp)
    .endm
    .macro SCRATCH_RESTORE at
    movq \at(%rsp), %rax
    movq -16(%rsp), %rcx
    movq -24(%rsp), %rdx
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    .endm

# TIMESTAMP: rdx = the trace clock, the time-stamp counter (rdtsc's edx:eax as one word; what
#   src/arch/x86_64.rs counter() reads). Clobbers rax.
    .macro TIMESTAMP
    rdtsc
    shlq $32, %rdx
    orq %rax, %rdx                          # rdx = timestamp
    .endm

# MERGE_CALL fn, save, done, label: an exit told together with its entry, in one word (a call word,
#   docs/trace-format.md, chunk version 3), where the entry is the thread's newest event, a
#   short one of fn (the call recorded nothing inside it), and the call word can hold the
#   entry's time (less than 2^{EV_CALL_T0_BITS} ticks after the time base), the call's length
#   (less than 2^{EV_CALL_DUR_BITS} ticks) and fn (within 2^({EV_CALL_FN_BITS} - 1) bytes of
#   the code base + 2^31): the entry's word becomes the call word, and nothing is reserved.
#   In: rcx = the Tls offset, rdx = the exit's timestamp; fn a register or memory operand
#   that does not use rax or r8-r11. r8-r11 are kept at save(%rsp) .. save-24(%rsp), in the
#   red zone, meanwhile (a signal frame never overwrites it). Out: at `done` with the call
#   word written, else falling through with nothing written and rdx as it was (the exit is
#   then an event of its own). Clobbers rax and the flags. `label`, if given, is a hidden
#   global label at the call word's store (tests/fixtures/c/exit_window.c stops there).
#   Why this is safe with signal handlers: one may run between any two instructions and write
#   events after ours, or fill chunks. (1) The word is stored into the chunk the thread has
#   at `pin` below: trace_pin holds its end from there on, and a handler's chunk switches do
#   not retire a pinned chunk (src/trace.rs `retire_chunk`), so it is never committed and
#   reused before the store; the check after the pin proves the position and bases were read
#   in that chunk (a switch in between moves trace_end: no other chunk ends there, as the
#   pinned one cannot be reused). (2) A handler's events land after the entry's word, so the
#   word is still the newest event of ours; they were stamped after rdx, so the call word,
#   which ends at rdx, comes before them in time too. (3) A handler's own exits see the pin
#   taken and write events of their own (one pin per thread: the pin is never overwritten).
#   A handler that leaves by siglongjmp leaves the pin set: that thread makes no more call
#   words, and the chunk goes to the collector when the thread ends (nothing lost).
    .macro MERGE_CALL fn, save, done, label
    movq %r8, \save(%rsp)
    movq %r9, \save-8(%rsp)
    movq %r10, \save-16(%rsp)
    movq %r11, \save-24(%rsp)
    movq %fs:{TLS_TRACE_END}(%rcx), %r10
    testq %r10, %r10
    jz 8f                                   # no chunk
    cmpq $0, %fs:{TLS_TRACE_PIN}(%rcx)
    jne 8f                                  # held by an exit this handler interrupted
    movq %r10, %fs:{TLS_TRACE_PIN}(%rcx)    # pin: the chunk stays ours
    movq %fs:{TLS_TRACE_POS}(%rcx), %rax
    movq \fn, %r8
    subq %fs:{TLS_TRACE_CBASE}(%rcx), %r8   # fn - code base
    movq %rdx, %r9
    subq %fs:{TLS_TRACE_TBASE}(%rcx), %r9   # time - time base
    cmpq %fs:{TLS_TRACE_END}(%rcx), %r10
    jne 7f                                  # a handler gave the thread a new chunk before the pin
    movq -8(%rax), %r11                     # the newest word (at a chunk's start: the
    movq %r11, %r10                         # header's last, which is 0)
    shrq $32, %r10
    cmpq %r8, %r10
    jne 7f                                  # not of fn (or fn out of the code base's reach)
    movl %r11d, %r10d
    andl $3, %r10d
    cmpl ${EV_TAG_ENTRY}, %r10d
    jne 7f                                  # not a short entry
    shrl $2, %r11d                          # the entry's time - time base
    cmpl $((1 << {EV_CALL_T0_BITS}) - 1), %r11d
    ja 7f
    movq %r9, %r10
    subq %r11, %r10                         # the call's length (past 2^63 if negative)
    cmpq $((1 << {EV_CALL_DUR_BITS}) - 1), %r10
    ja 7f
    subq ${EV_CALL_FN_OFFSET}, %r8
    cmpq $((1 << {EV_CALL_FN_BITS}) - 1), %r8
    ja 7f                                   # too far from the code base's middle
    shlq $({EV_CALL_T0_BITS} + {EV_CALL_DUR_BITS}), %r8
    shlq ${EV_CALL_T0_BITS}, %r10
    orq %r10, %r8
    orq %r11, %r8                           # the 61-bit value: f << 38 | d << 26 | t
    movl %r8d, %r10d
    andl $31, %r10d                         # its low 5 bits go to bits 6..2,
    andq $-32, %r8
    shlq $3, %r8                            # the rest to bits 63..8
    leaq {EV_CALL_MARK}+{EV_TAG_LONG}(%r8,%r10,4), %r8
    .ifnb \label
    .globl \label
    .hidden \label
\label:
    .endif
    movq %r8, -8(%rax)                      # the entry's word becomes the call word
    movq $0, %fs:{TLS_TRACE_PIN}(%rcx)
    movq \save(%rsp), %r8
    movq \save-8(%rsp), %r9
    movq \save-16(%rsp), %r10
    movq \save-24(%rsp), %r11
    jmp \done
7:  movq $0, %fs:{TLS_TRACE_PIN}(%rcx)
8:  movq \save(%rsp), %r8
    movq \save-8(%rsp), %r9
    movq \save-16(%rsp), %r10
    movq \save-24(%rsp), %r11
    .endm

# TRACE_EVENT again, next, full, fn, kind: reserves this thread's next event and writes it,
#   a compact one (docs/trace-format.md, version 2): one word if it can be short, else two.
#   In: rcx = the Tls offset, rdx = the timestamp; fn a register or a memory operand, read
#   more than once, that must not be or use rax, rdx or next; kind entry, exit or noexit.
#   `again` is a numeric label defined here at the loop head (a caller may jump back to
#   `again`b with rdx = a timestamp to reserve anew); the macro's own labels are 7, 8 and 9.
#   The form is chosen against the Tls copies of the chunk's bases: short (8 bytes,
#   `(fn - code base) << 32 | (time - time base) << 2 | tag`) if fn - code base < 2^32 and
#   time - time base < 2^30, else long (16 bytes: `fn << 8 | t << 5 | kind << 2 | 3`, t the
#   timestamp's low two bits, then the timestamp with them 0: no long event's second word has
#   a tag). The event is reserved with a cmpxchg of the chunk position against the room
#   checked just before: rax = trace_pos, next = rax + size, next <= trace_end, then
#   trace_pos = next if it still is rax. A handler that moved it meanwhile (events of its
#   own, or a new chunk, whose bases may differ) makes the cmpxchg fail: again (a short
#   event's with a fresh timestamp, as rdx holds its word by then). So an event is never
#   reserved past a chunk's end, never left unwritten, and its word is made from the bases of
#   the chunk it is in (they are read before the cmpxchg that checks they still hold).
#   No room (past the chunk's end, or no chunk: trace_end 0): jumps to `full` with nothing
#   reserved; rax, next and rdx clobbered (the slow paths read their own time).
#   Else writes the event: a short one with one store; a long one's timestamp, then its
#   first word, which marks it written. Out: rax = the event. Clobbers next and rdx.
    .macro TRACE_EVENT again, next, full, fn, kind
\again:
    movq %fs:{TLS_TRACE_POS}(%rcx), %rax    # our event, if there is room
    .ifc \kind,noexit
    jmp 8f                                  # an entry without exit: always long
    .else
    movq \fn, \next
    subq %fs:{TLS_TRACE_CBASE}(%rcx), \next
    shrq $32, \next
    jnz 8f                                  # out of the code base's reach: long
    movq %rdx, \next
    subq %fs:{TLS_TRACE_TBASE}(%rcx), \next
    cmpq $((1 << {EV_TIME_BITS}) - 1), \next
    ja 8f                                   # out of the time base's (or before it): long
    movq \fn, %rdx
    subq %fs:{TLS_TRACE_CBASE}(%rcx), %rdx
    shlq $32, %rdx
    .ifc \kind,entry
    leaq {EV_TAG_ENTRY}(%rdx,\next,4), %rdx # the short word
    .else
    leaq {EV_TAG_EXIT}(%rdx,\next,4), %rdx
    .endif
    leaq {EV_SHORT_BYTES}(%rax), \next
    cmpq %fs:{TLS_TRACE_END}(%rcx), \next
    ja \full                                # past the chunk's end (or no chunk)
    cmpxchgq \next, %fs:{TLS_TRACE_POS}(%rcx) # claimed, unless a handler moved it
    jne 7f
    movq %rdx, (%rax)
    jmp 9f
7:  TIMESTAMP                               # a handler came in between: a fresh time, again
    jmp \again\()b
    .endif
8:  leaq {EV_BYTES}(%rax), \next
    cmpq %fs:{TLS_TRACE_END}(%rcx), \next
    ja \full                                # past the chunk's end (or no chunk)
    cmpxchgq \next, %fs:{TLS_TRACE_POS}(%rcx) # claimed, unless a handler moved it: again
    jne \again\()b
    movq %rdx, \next                        # the timestamp (its low bits go into the word),
    andq $-4, \next
    movq \next, 8(%rax)                     # then the word that marks it written
    andl $3, %edx
    shll ${EV_TS_SHIFT}, %edx
    movq \fn, \next
    shlq ${EV_LONG_SHIFT}, \next
    orq %rdx, \next
    .ifc \kind,entry
    orq $(({EV_ENTRY} << 2) | {EV_TAG_LONG}), \next
    .endif
    .ifc \kind,exit
    orq $(({EV_EXIT} << 2) | {EV_TAG_LONG}), \next
    .endif
    .ifc \kind,noexit
    orq $(({EV_NOEXIT} << 2) | {EV_TAG_LONG}), \next
    .endif
    movq \next, (%rax)
9:
    .endm

# SHADOW_RESERVE slow, full: reserves a shadow entry for the frame whose return slot is rdi.
#   In: rax = the Tls offset, rdi = the return slot.
#   The newest entry, if any, must belong to a frame above ours: if its slot is at or below
#   rdi, its frame is gone (longjmp, unwinding), or it is being pushed (slot 0): jumps to
#   `slow` with nothing reserved (rcx clobbered), and the slow path sorts it out.
#   The entry is reserved with one xadd of {SH_BYTES} to shadow_top (a handler that interrupts
#   us after it pushes above it). Its slot is 0, as every free entry's: 0 tells a handler's
#   slow path that the entry is still being pushed (alive); the caller fills the entry and
#   writes its slot last.
#   Out: rcx = the Tls offset, rdi = our entry, rax = its end. Full (or no shadow stack yet:
#   shadow_end 0): jumps to `full` with the entry reserved, to be given back (SHADOW_RELEASE).
    .macro SHADOW_RESERVE slow, full
    movq %fs:{TLS_SHADOW_TOP}(%rax), %rcx
    cmpq %fs:{TLS_SHADOW_BASE}(%rax), %rcx
    je .Lshadow_empty\@
    cmpq %rdi, {SH_SLOT}-{SH_BYTES}(%rcx)   # the newest entry's frame at or below ours is
    jbe \slow                               # gone (longjmp), or being pushed (slot 0): the
                                            # slow path sorts it out
.Lshadow_empty\@:
    movq %rax, %rcx                         # rcx = Tls offset from here on
    movq ${SH_BYTES}, %rdi
    xaddq %rdi, %fs:{TLS_SHADOW_TOP}(%rcx)  # rdi = our shadow entry (its slot is 0)
    leaq {SH_BYTES}(%rdi), %rax
    cmpq %fs:{TLS_SHADOW_END}(%rcx), %rax
    ja \full                                # full: nothing recorded yet
    .endm

# SHADOW_RELEASE: gives back the entry SHADOW_RESERVE reserved, its slot still 0 (a handler
#   that pushed above it meanwhile has popped again, so it is the newest): shadow_top -=
#   {SH_BYTES}, one instruction. In: rcx = the Tls offset.
    .macro SHADOW_RELEASE
    subq ${SH_BYTES}, %fs:{TLS_SHADOW_TOP}(%rcx) # give the shadow entry back (slot still 0)
    .endm

# SHADOW_POP entry: pops the newest shadow entry (a register) once its exit is written: its
#   slot zeroed first (free entries have slot 0, which SHADOW_RESERVE relies on), then
#   shadow_top = entry. Until then a handler that interrupts us finds the entry intact (it
#   pushes and pops above it). In: rcx = the Tls offset.
    .macro SHADOW_POP entry
    movq $0, {SH_SLOT}(\entry)                 # free entries have slot 0
    movq \entry, %fs:{TLS_SHADOW_TOP}(%rcx)    # popped
    .endm

# FAST_PATH name, self, from, trace
#   Entry: \self is the operand holding self_pc (the callee), \from the one holding from_pc
#   (the caller). mcount and __fentry__: (%rsp) = self_pc, the return address into the
#   instrumented function, and from_pc is that function's own return address, in its return
#   slot \from. __cyg_profile_func_enter/exit(this_fn, call_site): %rdi, %rsi.
#   \trace says what trace mode records: `hijack` (an entry event, and the return slot \from
#   replaced by instrfn_x86_64_exit so that the return is seen too), `enter` / `exit` (an entry
#   or exit event of self_pc, nothing replaced); `exit` counts nothing in gmon mode.
#   Registers: every register is preserved. rax, rcx, rdx, rsi and rdi are used as scratch and
#   saved in the red zone at -8 .. -40(%rsp) (SCRATCH_SAVE -8); flags are clobbered (a call
#   may clobber them).
#   In the gmon body: rax = table, rsi = self_pc, rdx = from_pc, rdi = slot byte offset.
#   The stack is never adjusted, so the CFA is %rsp+8 throughout and no CFI rows are needed
#   beyond the default.
    .macro FAST_PATH name, self, from, trace
    .p2align 4
    .globl instrfn_x86_64_\name
    .hidden instrfn_x86_64_\name
    .type instrfn_x86_64_\name,@function
instrfn_x86_64_\name:
    .cfi_startproc
    SCRATCH_SAVE -8
    movq instrfn_tls@gottpoff(%rip), %rax   # offset of Tls from the thread pointer
    movq \from, %rdx                        # from_pc
    movq \self, %rsi                        # self_pc
    cmpq $0, %fs:{TLS_GUARD}(%rax)             # guard held: runtime code is running here
    jne .Lout_\name
    cmpb $0, instrfn_enabled(%rip)
    je .Lout_\name
    cmpb $0, instrfn_mode(%rip)
    jne .Ltrace_\name
    .ifc \trace,exit
    jmp .Lout_\name
    .endif
    movq %fs:{TLS_TABLE}(%rax), %rax             # this thread's ArcTable
    testq %rax, %rax
    jz .Lslow_\name
    movq %rsi, %rdi                         # slot offset = hash(from_pc, self_pc)
    rolq $32, %rdi
    xorq %rdx, %rdi
    movabsq ${HASH_MUL}, %rcx
    imulq %rcx, %rdi
    movzbl {TBL_SHIFT}(%rax), %ecx
    shrq %cl, %rdi
    shlq ${SLOT_SHIFT}, %rdi                           # * {SLOT_SIZE}
.Lprobe_\name:
    cmpq %rsi, {SLOT_SELF}(%rax,%rdi)            # slot.self_pc
    jne .Lmiss_\name
    cmpq %rdx, {SLOT_FROM}(%rax,%rdi)            # slot.from_pc
    jne .Lnext_\name
    incq {SLOT_COUNT}(%rax,%rdi)                 # slot.count: one instruction, so a signal handler
                                            # that counts on this thread never tears it
.Lout_\name:
    SCRATCH_RESTORE -8
    ret
.Lmiss_\name:
    cmpq $0, {SLOT_SELF}(%rax,%rdi)              # empty slot: the arc is not in the table
    je .Linsert_\name
.Lnext_\name:
    addq ${SLOT_SIZE}, %rdi
    andq {TBL_MASK}(%rax), %rdi
    jmp .Lprobe_\name
.Linsert_\name:
    # A new arc, inserted here while the table holds fewer than `limit` arcs. The slot is
    # claimed with one cmpxchg of its self_pc (a signal handler on this thread may have claimed
    # it meanwhile: then probe it again), then from_pc and the count are stored, in that
    # order, so a reader on another thread that sees a count sees from_pc. cmpxchg compares
    # with rax, so the table moves to rcx here.
    movq {TBL_LEN}(%rax), %rcx
    cmpq {TBL_LIMIT}(%rax), %rcx                # len < limit?
    jae .Lfull_\name
    movq %rax, %rcx                         # rcx = table
    xorl %eax, %eax
    cmpxchgq %rsi, {SLOT_SELF}(%rcx,%rdi)        # claim: self_pc into a slot still 0
    movq %rcx, %rax
    jne .Lprobe_\name                       # raced: probe the same slot again
    movq %rdx, {SLOT_FROM}(%rax,%rdi)            # from_pc
    incq {SLOT_COUNT}(%rax,%rdi)                 # count: 0 -> 1
    incq {TBL_LEN}(%rax)                        # len
    jmp .Lout_\name
.Lfull_\name:
    # The table holds `limit` arcs. The last table of a chain (INSTRFN_MAX_ARCS reached)
    # counts the call as lost right here; any other grows in the slow path.
    cmpb $0, {TBL_LAST}(%rax)
    je .Lslow_\name
    incq {TBL_LOST}(%rax)
    jmp .Lout_\name
.Lslow_\name:
    # hand over to instrfn_x86_64_slow: rcx = self_pc, rdx = from_pc, the caller's rcx/rdx stay
    # in the red zone, -8(%rsp) = the Rust function to call
    leaq instrfn_slow_path(%rip), %rcx
    movq -8(%rsp), %rax
    movq %rcx, -8(%rsp)
    movq %rsi, %rcx
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    jmp instrfn_x86_64_slow

.Ltrace_\name:
    # Trace mode (src/trace.rs). rax = Tls offset, rsi = self_pc; rcx, rdx, rdi are free.
    # Everything out of the ordinary goes to the slow path, which records the call itself:
    # no chunk yet or a full one, a full shadow stack, frames left behind by longjmp or put
    # back by an unwinder. A signal handler on this thread may run between any two
    # instructions and record events and push shadow entries of its own:
    # - the shadow entry is reserved with one xadd (a handler pushes above it), and its slot
    #   is written last: a free entry's slot is 0, and 0 tells a handler's slow path that the
    #   entry is still being pushed (alive) (SHADOW_RESERVE);
    # - the event is reserved with a cmpxchg of the chunk position against the room checked
    #   just before, retried if a handler moved it (or gave the thread a new chunk) meanwhile:
    #   so an event is never reserved past a chunk's end and never left unwritten
    #   (TRACE_EVENT).
    # The return slot is replaced last.
    .ifc \trace,hijack
    cmpb $2, instrfn_mode(%rip)             # exits off (INSTRFN_EXITS): entries only
    je .Ltnoexit_\name
    cmpq $0, %fs:{TLS_UNWOUND}(%rax)
    jne .Ltslow_\name
    leaq \from, %rdi                        # the return slot
    SHADOW_RESERVE .Ltslow_\name, .Ltunpush_\name # full: the slow path records an entry only
    movq %rdi, -48(%rsp)                    # (the shadow entry, while rdi holds the end)
    .else
    movq %rax, %rcx                         # rcx = Tls offset from here on
    .endif
    TIMESTAMP
    # the event (past the chunk's end, or no chunk: the slow path); an exit whose call
    # recorded nothing inside it, a call word (r8-r11 kept below the red zone's words above)
    .ifc \trace,exit
    MERGE_CALL %rsi, -56, .Lout_\name
    TRACE_EVENT 2, %rdi, .Ltnochunk_\name, %rsi, exit
    .else
    TRACE_EVENT 2, %rdi, .Ltnochunk_\name, %rsi, entry
    .endif
    .ifc \trace,hijack
    movq -48(%rsp), %rax                    # the shadow entry
    leaq \from, %rdi
    movq %rsi, {SH_FN}(%rax)
    movq (%rdi), %rdx                       # the original return address (= from_pc)
    movq %rdx, {SH_RET}(%rax)
    movq %rdi, {SH_SLOT}(%rax)                   # last: the entry is complete
    leaq instrfn_x86_64_exit(%rip), %rdx
    movq %rdx, (%rdi)                       # the function now returns to the exit trampoline
    .endif
    jmp .Lout_\name
.Ltnochunk_\name:
    .ifc \trace,hijack
    SHADOW_RELEASE
    .endif
    jmp .Ltslow_\name
    .ifc \trace,hijack
.Ltnoexit_\name:
    # An entry without exit: the event alone (kind EV_NOEXIT), nothing replaced.
    movq %rax, %rcx
    TIMESTAMP
    TRACE_EVENT 3, %rdi, .Ltslow_\name, %rsi, noexit
    jmp .Lout_\name
    .endif
.Ltunpush_\name:
    .ifc \trace,hijack
    SHADOW_RELEASE
    .endif
.Ltslow_\name:
    # hand over to instrfn_x86_64_slow as above, calling instrfn_trace_slow(tls, slot, self_pc)
    # (slot 0 for the __cyg_profile entries; 1 marks an exit)
    leaq instrfn_trace_slow(%rip), %rcx
    movq -8(%rsp), %rax
    movq %rcx, -8(%rsp)
    movq %rsi, %rcx
    .ifc \trace,hijack
    leaq \from, %rdx
    .else
    .ifc \trace,exit
    movl $1, %edx
    .else
    xorl %edx, %edx
    .endif
    .endif
    movq -32(%rsp), %rsi
    movq -40(%rsp), %rdi
    jmp instrfn_x86_64_slow
    .cfi_endproc
    .size instrfn_x86_64_\name, .-instrfn_x86_64_\name
    .endm

# mcount / _mcount: `call mcount` after the prologue (gcc -pg, rustc -Zinstrument-mcount). The
# frame pointer is set up, so the instrumented function's return address is at 8(%rbp).
    FAST_PATH mcount, (%rsp), 8(%rbp), hijack
# __fentry__: `call __fentry__` is the first instruction (gcc -pg -mfentry), before any prologue,
# so the instrumented function's return address is just above ours.
    FAST_PATH fentry, (%rsp), 8(%rsp), hijack
# __cyg_profile_func_enter(this_fn, call_site) / __cyg_profile_func_exit: gcc and clang
# -finstrument-functions call them as ordinary functions at entry and before each return.
    FAST_PATH cyg_enter, %rdi, %rsi, enter
    FAST_PATH cyg_exit, %rdi, %rsi, exit

# instrfn_x86_64_slow: the slow path of every fast path.
#   Entry (by jmp): (%rsp) = the return address; %rcx and %rdx = the second and third
#   argument of the Rust function at -8(%rsp); the instrumented code's rcx and rdx are at
#   -16(%rsp) and -24(%rsp) (red zone); every other register is the instrumented code's own.
#   Calls fn(&Tls, rdx, rcx): instrfn_slow_path(tls, from_pc, self_pc) in gmon mode,
#   instrfn_trace_slow(tls, slot, self_pc) in trace mode. Returns straight to the instrumented
#   function with all of them restored, errno included (the Rust side saves and restores it).
#   Stack after the saves (CFA = %rbp + 40):
#      CFA-8   return address into the instrumented function
#      CFA-16  the Rust function
#      CFA-24  rcx          CFA-32  rdx          CFA-40  rbp (frame pointer of this routine)
#      CFA-48  rax   -56 rbx   -64 rsi   -72 rdi   -80 r8   -88 r9   -96 r10   -104 r11
#      CFA-112 r12 (self_pc)   -120 r13 (from_pc)
#      below:  XSAVE/FXSAVE area (64-byte aligned), then the old signal mask at (%rsp)
# instrfn_x86_64_slow_pop8: the same, for the XRay entry and tail-call trampolines
#   (asm/x86_64-xray.s), whose patched sled pushed one word just above the return address:
#   returns with `ret $8`, dropping that word, as the trampoline's own return would. (Its CFI
#   says so: the caller's stack pointer is CFA + 8.)
    .macro SLOW name, pop
    .p2align 4
    .globl instrfn_x86_64_\name
    .hidden instrfn_x86_64_\name
    .type instrfn_x86_64_\name,@function
instrfn_x86_64_\name:
    .cfi_startproc
    .if \pop
    .cfi_val_offset %rsp, 8
    .endif
    leaq -24(%rsp), %rsp
    .cfi_adjust_cfa_offset 24
    .cfi_rel_offset %rdx, 0
    .cfi_rel_offset %rcx, 8
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbp, 0
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    pushq %rax
    .cfi_offset %rax, -48
    pushq %rbx
    .cfi_offset %rbx, -56
    pushq %rsi
    .cfi_offset %rsi, -64
    pushq %rdi
    .cfi_offset %rdi, -72
    pushq %r8
    .cfi_offset %r8, -80
    pushq %r9
    .cfi_offset %r9, -88
    pushq %r10
    .cfi_offset %r10, -96
    pushq %r11
    .cfi_offset %r11, -104
    pushq %r12
    .cfi_offset %r12, -112
    pushq %r13
    .cfi_offset %r13, -120
    movq %rcx, %r12
    movq %rdx, %r13

    SAVE_EXTENDED
    # Block every signal, so a handler never sees this thread's guard held: a counting call
    # from a signal handler is then always recorded, never dropped.
    subq $16, %rsp
    BLOCK_SIGNALS

    movq instrfn_tls@gottpoff(%rip), %rbx
    movq $1, %fs:{TLS_GUARD}(%rbx)             # guard: counting calls made by the runtime return
    movq %fs:0, %rdi
    addq %rbx, %rdi                  # arg 0: &Tls
    movq %r13, %rsi                  # arg 1: from_pc, or the slot
    movq %r12, %rdx                  # arg 2: self_pc
    call *24(%rbp)                   # CFA-16
    movq $0, %fs:{TLS_GUARD}(%rbx)

    RESTORE_SIGNALS
    addq $16, %rsp
    RESTORE_EXTENDED
    leaq -80(%rbp), %rsp
    popq %r13
    popq %r12
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rbx
    popq %rax
    popq %rbp
    .cfi_def_cfa %rsp, 32
    movq (%rsp), %rdx
    movq 8(%rsp), %rcx
    leaq 24(%rsp), %rsp
    .cfi_def_cfa_offset 8
    .if \pop
    ret $8
    .else
    ret
    .endif
    .cfi_endproc
    .size instrfn_x86_64_\name, .-instrfn_x86_64_\name
    .endm

    SLOW slow, 0
    SLOW slow_pop8, 1

# instrfn_x86_64_exit: where an instrumented function returns to in trace mode (the fast path
#   replaced its return address, and keeps the original in this thread's shadow stack).
#   Entry (by the function's ret): %rsp = the function's CFA; every register as the function
#   left it: rax, rdx, xmm0, xmm1 and the x87 stack may hold its result. All are preserved (the
#   fast part touches GPRs only, and never x87/MMX state; the slow part saves the whole
#   extended state). Writes the exit event of the newest shadow entry (if it is the returning
#   frame's), then pops it (slot zeroed: free), and goes on at the original return address,
#   with %rsp = CFA_f as the function's own ret would leave it. Events are reserved as in
#   FAST_PATH (TRACE_EVENT: cmpxchg against the room just checked).
#   It goes there with an indirect jmp, not a ret: the function's ret, which came here, used
#   the return-stack predictor's entry of its call (a mispredict, which nothing can avoid); a
#   ret here would use its caller's entry (a second mispredict), and leave the predictor one
#   entry behind for every return after it. The jmp is predicted from its own history (scripts/
#   compare.py --trace: 29.4 -> 23.0 ns per call at 1 thread, same run conditions).
#   Frame: CFA_f-8 the original return address (the jmp reads it below %rsp, inside the red
#   zone, which a signal frame never overwrites), CFA_f-16 .. -48 rax, rcx, rdx, rsi, rdi.
#   Unwinding (a handler that interrupts us and walks the stack, a sampling profiler): the CFI
#   describes this code as a frame with CFA = CFA_f and its return address at CFA_f - 8, and the
#   original return address is stored there as soon as the newest entry is known to be the
#   returning frame's (`.Lexit_ours`), so that from there on an unwinder goes on into the real
#   caller (tests/fixtures/c/sweep.c checks it at every instruction). Before that the word holds
#   what the function's ret consumed, this trampoline's own address: an unwinder takes it for
#   the caller. A handler's walk in between may put the trampoline back into the frame
#   (src/trace.rs `after_unwinding`, the entry still being alive): `.Lexit_pop` stores the
#   original again, before and after it frees the entry.
#   A return address that points at the label (a replaced one, which an unwinder walking up
#   from a deeper frame meets where nothing put the original back: an unwinder linked into the
#   program, which no wrapper reaches) is looked up as address - 1: the nop before the label,
#   `instrfn_x86_64_return_pad`, whose FDE below describes a frame between the returning
#   function and its caller: the caller's rsp is rsp (the function's CFA), the frame's own
#   CFA rsp + 8 (a CFA of its own: libgcc identifies the catching frame by the CFA of the
#   frame below it, and took this frame for it when it had the function's), and the caller's
#   return address the `ret` word of the newest shadow entry whose slot is rsp - 8, which a
#   DWARF expression finds: from its own pc (DW_OP_breg16: the label) it reads the
#   pc-relative word before the nop, which leads to instrfn_registry (the thread
#   registry's head address, the bytes of a shadow stack mapping, a zero word: src/trace.rs
#   sets the first two at start), and walks every block's shadow stack from its base to its
#   first free entry; not found: the zero word, a return address of 0, where unwinders stop.
#   The expression's bytes are scripts/return-pad-cfi.py's output (branch offsets computed
#   there, for 1-byte operands: src/arch/x86_64.rs asserts them < 128; tests/host.rs checks
#   the two agree).
    .p2align 4
instrfn_x86_64_registry_rel:
    .quad instrfn_registry - instrfn_x86_64_registry_rel
    .globl instrfn_x86_64_return_pad
    .hidden instrfn_x86_64_return_pad
instrfn_x86_64_return_pad:
    .cfi_startproc
    .cfi_def_cfa %rsp, 8
    .cfi_escape 0x16, 7, 2, 0x77, 0x00      # DW_CFA_val_expression rsp: DW_OP_breg7 0
    .cfi_escape 0x10, 16, 98, 0x80, 0x77, 0x12, 0x06, 0x22, 0x12, 0x23, 0x08, 0x06, 0x16, 0x06, 0x06
    .cfi_escape 0x77, 0x78, 0x16, 0x80, 0x77, 0x12, 0x06, 0x22, 0x23, 0x10, 0x15, 0x01
    .cfi_escape 0x30, 0x29, 0x28, 0x45, 0x00, 0x15, 0x01, 0x23, {BLK_SHADOW}, 0x06, 0x12, 0x30
    .cfi_escape 0x29, 0x28, 0x33, 0x00, 0x12, 0x15, 0x05, 0x22, 0x17, 0x12, 0x15, 0x03
    .cfi_escape 0x2a, 0x28, 0x21, 0x00, 0x12, 0x23, {SH_SLOT}, 0x06, 0x12, 0x30, 0x29, 0x28
    .cfi_escape 0x16, 0x00, 0x15, 0x05, 0x29, 0x28, 0x05, 0x00, 0x23, {SH_BYTES}, 0x2f, 0xe4
    .cfi_escape 0xff, 0x16, 0x13, 0x12, 0x23, {SH_RET}, 0x16, 0x23, {SH_BYTES}, 0x2f, 0xd9, 0xff
    .cfi_escape 0x13, 0x13, 0x16, 0x13, 0x2f, 0x01, 0x00, 0x13, 0x16, 0x06, 0x16, 0x2f
    .cfi_escape 0xb4, 0xff
    nop
    .cfi_endproc
    .globl instrfn_x86_64_exit
    .hidden instrfn_x86_64_exit
    .type instrfn_x86_64_exit,@function
instrfn_x86_64_exit:
    .cfi_startproc
    .cfi_def_cfa %rsp, 0                    # CFA_f, the return address below it (see above)
    .cfi_offset %rip, -8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    pushq %rax
    .cfi_adjust_cfa_offset 8
    pushq %rcx
    .cfi_adjust_cfa_offset 8
    pushq %rdx
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    movq instrfn_tls@gottpoff(%rip), %rcx
    cmpq $0, %fs:{TLS_UNWOUND}(%rcx)
    jne .Lexit_slow
    movq %fs:{TLS_SHADOW_TOP}(%rcx), %rsi
    subq ${SH_BYTES}, %rsi                   # the newest entry
    leaq 40(%rsp), %rdi                     # CFA_f - 8: the return slot it recorded
    cmpq %rdi, {SH_SLOT}(%rsi)
    jne .Lexit_slow                         # frames left behind by longjmp: the slow path
    movq {SH_RET}(%rsi), %rdi
    movq %rdi, 40(%rsp)                     # the original return address, for unwinders
    .globl instrfn_x86_64_exit_ours         # (tests/fixtures/c/sweep.c: from here on a walk
    .hidden instrfn_x86_64_exit_ours        # reaches the real caller)
instrfn_x86_64_exit_ours:
    cmpq $0, %fs:{TLS_GUARD}(%rcx)
    jne .Lexit_pop
    cmpb $0, instrfn_enabled(%rip)
    je .Lexit_pop
    TIMESTAMP
    cmpq $0, instrfn_min_ticks(%rip)
    jne .Lexit_short
    # A call word where the call recorded nothing inside it; else our event, reserved as in
    # the entry's fast path, of the function that returned. No room: the slow path does it
    # all (the entry is still pushed).
    MERGE_CALL {SH_FN}(%rsi), -8, .Lexit_pop, instrfn_x86_64_exit_merge
    TRACE_EVENT 1, %rdi, .Lexit_slow, {SH_FN}(%rsi), exit
.Lexit_pop:
    # Popped after the event: until here a handler that interrupts us finds the entry intact
    # (it pushes and pops above it).
    # The entry's slot is zeroed before the original return address goes into the frame: a
    # handler that comes between the two then takes the entry for one being pushed (alive,
    # left alone), where before it found a live entry whose return slot held its original
    # address and, after a backtrace() (src/trace.rs `after_unwinding`), put the trampoline
    # back there, so that the jmp below came back here and the program aborted ("lost track of
    # a return address"). The other architectures return through a register and have no such
    # window.
    # The original return address goes into the frame before the slot is zeroed too: a
    # handler's walk may have put the trampoline back there, and one that comes between the
    # two stores must not find it (it leaves a freed entry's frame alone).
    movq {SH_RET}(%rsi), %rdi
    movq %rdi, 40(%rsp)
    movq $0, {SH_SLOT}(%rsi)                # free entries have slot 0
    .globl instrfn_x86_64_exit_pop          # (tests/fixtures/c/exit_window.c stops here)
    .hidden instrfn_x86_64_exit_pop
instrfn_x86_64_exit_pop:
    movq %rdi, 40(%rsp)                     # return there
    movq %rsi, %fs:{TLS_SHADOW_TOP}(%rcx)   # popped
.Lexit_out:
    popq %rdi
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdx
    .cfi_adjust_cfa_offset -8
    popq %rcx
    .cfi_adjust_cfa_offset -8
    popq %rax
    .cfi_adjust_cfa_offset -8
    leaq 8(%rsp), %rsp                      # the function's CFA, as its own ret would leave it
    .cfi_adjust_cfa_offset -8
    jmp *-8(%rsp)                           # an indirect jump, not a ret (see above)
    .cfi_adjust_cfa_offset 48               # (the code below runs with the registers pushed)
.Lexit_short:
    # INSTRFN_MIN_DURATION: a call shorter than instrfn_min_ticks whose entry is still the
    # thread's newest event (its callees, if any, were short too and taken back already) leaves
    # no events: its entry is taken back. The exit event (here always a long one) is reserved
    # first, as always: while its first word is 0 the chunk is not all written, so it is never
    # committed and reused, however many chunks a signal handler fills meanwhile
    # (src/collector.rs `retire`) — every load and store below stays inside it. Then, if the
    # event before ours is our entry (a long one at -16, or a short one at -8: the first event
    # of a chunk finds the header's zero words there) and the call was short, the entry's
    # words are zeroed and the position moved back over both with a cmpxchg that fails if a
    # handler reserved an event after ours; then the entry's words go back and our exit is
    # written in the place we reserved (before the handler's events, and stamped before them).
    # (No long event's second word has a tag, so a word at -16 with tag 3 and bit 7 clear is
    # a long event's first word: then the event before ours is that one, else the short one
    # (or call word) at -8.)
    # rdx = timestamp; rax, rdi free;
    # the red zone below the registers pushed holds r8 and the two words before our event
    # while the entry is taken back.
3:  movq %fs:{TLS_TRACE_POS}(%rcx), %rax
    leaq {EV_BYTES}(%rax), %rdi
    cmpq %fs:{TLS_TRACE_END}(%rcx), %rdi
    ja .Lexit_slow                          # no room (or no chunk): the slow path does it all
    cmpxchgq %rdi, %fs:{TLS_TRACE_POS}(%rcx) # claimed, unless a handler moved it: again
    jne 3b
    movq {SH_FN}(%rsi), %rdi
    shlq ${EV_LONG_SHIFT}, %rdi
    orq $(({EV_ENTRY} << 2) | {EV_TAG_LONG}), %rdi # our entry's first word, if long
    xorq -16(%rax), %rdi
    andq $~(3 << {EV_TS_SHIFT}), %rdi       # (its timestamp's low bits aside)
    jnz 6f
    movq -16(%rax), %rdi
    shrq ${EV_TS_SHIFT}, %rdi
    andl $3, %edi
    orq -8(%rax), %rdi                      # the entry's timestamp
    negq %rdi
    addq %rdx, %rdi                         # the call's length in ticks
    cmpq instrfn_min_ticks(%rip), %rdi
    jae 4f                                  # long enough: recorded
    leaq -{EV_BYTES}(%rax), %rdi            # where the entry starts
    jmp instrfn_x86_64_exit_take_back
6:  movq -16(%rax), %rdi
    andl $({EV_CALL_MARK} | 3), %edi
    cmpl ${EV_TAG_LONG}, %edi
    je 4f                                   # a long event there, not ours: no short one at -8
    movq {SH_FN}(%rsi), %rdi
    subq %fs:{TLS_TRACE_CBASE}(%rcx), %rdi
    shlq $32, %rdi
    orq ${EV_TAG_ENTRY}, %rdi               # our entry's word if short, its time aside
    xorq -8(%rax), %rdi
    testb $3, %dil
    jnz 4f                                  # not a short entry
    shrq $32, %rdi
    jnz 4f                                  # not ours (or not from this chunk's bases)
    movl -8(%rax), %edi
    shrl $2, %edi                           # its time - the time base
    addq %fs:{TLS_TRACE_TBASE}(%rcx), %rdi
    negq %rdi
    addq %rdx, %rdi                         # the call's length in ticks
    cmpq instrfn_min_ticks(%rip), %rdi
    jae 4f                                  # long enough: recorded
    leaq -{EV_SHORT_BYTES}(%rax), %rdi      # where the entry starts
    .globl instrfn_x86_64_exit_take_back    # (tests/fixtures/c/exit_window.c stops here)
    .hidden instrfn_x86_64_exit_take_back
instrfn_x86_64_exit_take_back:
    # rdi = the entry, rax = our exit's place. (A handler that gave the thread a new chunk
    # since our reservation made the Tls bases read above another chunk's: the cmpxchg below
    # fails then, as the position moved, and everything goes back as it was.)
    movq %r8, -24(%rsp)
    movq -16(%rax), %r8
    movq %r8, -16(%rsp)
    movq -8(%rax), %r8
    movq %r8, -8(%rsp)
    movq $0, (%rdi)                         # the entry is unwritten again, its first word
    movq $0, -8(%rax)                       # first (and a long one's timestamp: an event
                                            # written there next may be short)
    movq %rax, %r8                          # our exit's place
    addq ${EV_BYTES}, %rax                  # the position just past it
    cmpxchgq %rdi, %fs:{TLS_TRACE_POS}(%rcx) # back over both, if nothing came after them
    jne 5f
    movq -24(%rsp), %r8
    incq %fs:{TLS_DROPPED}(%rcx)
    jmp .Lexit_pop
5:  movq -8(%rsp), %rax                     # a handler came in between: the entry stays (its
    movq %rax, -8(%r8)                      # words back, the one that marks it written last)
    movq -16(%rsp), %rax
    movq %rax, -16(%r8)
    movq %r8, %rax
    movq -24(%rsp), %r8
4:  movq %rdx, %rdi                        # our exit: timestamp, then the word that marks it
    andq $-4, %rdi
    movq %rdi, 8(%rax)
    andl $3, %edx
    shll ${EV_TS_SHIFT}, %edx
    movq {SH_FN}(%rsi), %rdi
    shlq ${EV_LONG_SHIFT}, %rdi
    orq %rdx, %rdi
    orq $(({EV_EXIT} << 2) | {EV_TAG_LONG}), %rdi
    movq %rdi, (%rax)
    jmp .Lexit_pop
.Lexit_slow:
    # instrfn_trace_exit_slow(&Tls, slot) with everything saved; it returns the original
    # return address of the frame whose slot that was (it closes the frames above it).
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_offset %rbp, -56
    movq %rsp, %rbp                         # rbp = CFA_f - 56
    .cfi_def_cfa_register %rbp
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    SAVE_EXTENDED
    subq $16, %rsp
    BLOCK_SIGNALS
    movq instrfn_tls@gottpoff(%rip), %rax
    movq $1, %fs:{TLS_GUARD}(%rax)
    movq %fs:0, %rdi
    addq %rax, %rdi                         # arg 0: &Tls
    leaq 48(%rbp), %rsi                     # arg 1: the return slot, CFA_f - 8
    call instrfn_trace_exit_slow
    movq %rax, 48(%rbp)                     # return there
    movq instrfn_tls@gottpoff(%rip), %rax
    movq $0, %fs:{TLS_GUARD}(%rax)
    RESTORE_SIGNALS
    addq $16, %rsp
    RESTORE_EXTENDED
    leaq -32(%rbp), %rsp
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    .cfi_def_cfa %rsp, 56
    popq %rbp
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbp
    jmp .Lexit_out
    .cfi_endproc
    .size instrfn_x86_64_exit, .-instrfn_x86_64_exit

# instrfn_x86_64_xsave_detect: fill instrfn_x86_64_xsave_mask/size.
#   Called only from instrfn_x86_64_slow, which has saved everything: clobbers rax, rcx, rdx,
#   rsi, rdi, r8; preserves rbx (cpuid writes it).
#   Mask = XCR0 & (x87 | SSE | AVX | opmask | ZMM_Hi256 | Hi16_ZMM); size = the end of the last
#   of those components in the standard (non-compacted) layout, as CPUID leaf 0xD reports it,
#   rounded up to 64. Without OSXSAVE: mask 0 and FXSAVE's 512 bytes.
    .p2align 4
    .type instrfn_x86_64_xsave_detect,@function
instrfn_x86_64_xsave_detect:
    .cfi_startproc
    pushq %rbx
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbx, 0
    movl $1, %eax
    cpuid
    btl $27, %ecx                    # OSXSAVE
    jnc 3f
    xorl %ecx, %ecx
    xgetbv
    andl $0xe7, %eax
    movl %eax, %esi                  # mask (components 0-7 fit in the low word)
    movl $576, %r8d                  # legacy area + XSAVE header
    movl $2, %edi                    # component number
1:  btl %edi, %esi
    jnc 2f
    movl $0xd, %eax
    movl %edi, %ecx
    cpuid                            # eax = size, ebx = offset of component edi
    addl %ebx, %eax
    cmpl %r8d, %eax
    cmova %eax, %r8d
2:  incl %edi
    cmpl $8, %edi
    jb 1b
    addl $63, %r8d
    andl $-64, %r8d
    movq %rsi, instrfn_x86_64_xsave_mask(%rip)
    movq %r8, instrfn_x86_64_xsave_size(%rip)
    popq %rbx
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbx
    ret
3:  movq $0, instrfn_x86_64_xsave_mask(%rip)
    movq $512, instrfn_x86_64_xsave_size(%rip)
    popq %rbx
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbx
    ret
    .cfi_endproc
    .size instrfn_x86_64_xsave_detect, .-instrfn_x86_64_xsave_detect

# instrfn_x86_64_guarded: run a runtime entry point with this thread's guard held and all
#   signals blocked (also when the caller is a signal handler: then this only repeats its
#   sa_mask, where the kernel applies it; emulators such as qemu-riscv64 do not).
#   %rax = the Rust function to call, %rdi/%rsi/%rdx = its first three arguments.
#   Returns the function's %rax; errno is preserved; the previous guard value and signal mask
#   are restored (so a handler that interrupts a fast path leaves both as they were).
#   Clobbers what an ordinary call clobbers.
#   Frame: (%rsp) old signal mask, 8 errno, 16 old guard.
    .p2align 4
    .globl instrfn_x86_64_guarded
    .hidden instrfn_x86_64_guarded
    .type instrfn_x86_64_guarded,@function
instrfn_x86_64_guarded:
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
    pushq %r13
    .cfi_offset %r13, -40
    pushq %r14
    .cfi_offset %r14, -48
    pushq %r15
    .cfi_offset %r15, -56
    subq $40, %rsp
    movq %rax, %r12
    movq %rdi, %r13
    movq %rsi, %r14
    movq %rdx, %r15
    BLOCK_SIGNALS
    call __errno_location@PLT
    movl (%rax), %eax
    movl %eax, 8(%rsp)
    movq instrfn_tls@gottpoff(%rip), %rbx
    movq %fs:{TLS_GUARD}(%rbx), %rax
    movq %rax, 16(%rsp)
    movq $1, %fs:{TLS_GUARD}(%rbx)
    movq %r13, %rdi
    movq %r14, %rsi
    movq %r15, %rdx
    call *%r12
    movq %rax, %r12
    movq 16(%rsp), %rax
    movq %rax, %fs:{TLS_GUARD}(%rbx)
    call __errno_location@PLT
    movl 8(%rsp), %ecx
    movl %ecx, (%rax)
    RESTORE_SIGNALS
    movq %r12, %rax
    leaq -40(%rbp), %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size instrfn_x86_64_guarded, .-instrfn_x86_64_guarded

# instrfn_tls_get: %rax = address of this thread's Tls. Clobbers nothing else.
    .p2align 4
    .globl instrfn_tls_get
    .hidden instrfn_tls_get
    .type instrfn_tls_get,@function
instrfn_tls_get:
    .cfi_startproc
    movq %fs:0, %rax
    addq instrfn_tls@gottpoff(%rip), %rax
    ret
    .cfi_endproc
    .size instrfn_tls_get, .-instrfn_tls_get

# instrfn_call_on_stack(f = %rdi, arg = %rsi, top = %rdx): calls f(arg) with the stack pointer at
#   top (rounded down to 16), and returns f's %rax on the caller's stack. For the crash handler,
#   which may run on a small alternate signal stack (src/crash.rs). An ordinary call otherwise:
#   clobbers what a call clobbers. Frame: %rbp holds the caller's stack pointer.
    .p2align 4
    .globl instrfn_call_on_stack
    .hidden instrfn_call_on_stack
    .type instrfn_call_on_stack,@function
instrfn_call_on_stack:
    .cfi_startproc
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbp, 0
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    movq %rdx, %rsp
    andq $-16, %rsp
    movq %rdi, %rax
    movq %rsi, %rdi
    call *%rax
    movq %rbp, %rsp
    popq %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size instrfn_call_on_stack, .-instrfn_call_on_stack

