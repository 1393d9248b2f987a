# instrfn trampolines for riscv64 Linux (LP64D psABI, RV64GC), GNU as syntax.
#
# Same plan, symbols and layouts as src/arch/x86_64/ (the annotated reference: Tls, ArcTable, slot
# hash, fast path / slow path / guarded routine). Only the differences are described here.
# The layout operands of trampoline_asm! used here: Tls {TLS_TABLE} table, {TLS_GUARD} guard;
# ArcTable {TBL_MASK} mask, {TBL_LEN} len, {TBL_LIMIT} limit, {TBL_SHIFT} shift, {TBL_LAST} last, {TBL_LOST} lost; slots of
# {SLOT_SIZE} (1 << {SLOT_SHIFT}) bytes, self_pc at {SLOT_SELF}, from_pc at {SLOT_FROM}, count at {SLOT_COUNT} from the table
# base plus the slot offset; the hash multiplier {HASH_MUL} is loaded from instrfn_hash_mul
# (src/abi/data.s). riscv64's own operands (src/arch/riscv64/mod.rs): the marker offsets and the
# stack bounds layout, described below.
#
# Entry: an ordinary call after the prologue, ra = self_pc (our return address into the
# instrumented function). Where the caller's pc (from_pc, the instrumented function's own
# return address) is depends on the compiler, and the call itself (`auipc ra; jalr ra`, or
# `jal ra` once relaxed) does not tell:
#       gcc -O2 -pg:          mv a0, ra (possibly scheduled earlier); call _mcount
#                             a0 = from_pc; no frame pointer: s0 is an ordinary register
#       rustc (LLVM 22):      a0 = llvm.returnaddress(0); call _mcount; frame pointers forced
#                             a0 = from_pc = -8(s0)
#       clang 14 -pg:         call _mcount, nothing else; a frame pointer always (clang refuses
#                             -fomit-frame-pointer with -pg): s0 = the sp at entry, ra at -8(s0)
#                             a0 = the function's first argument; from_pc = -8(s0)
# So the slow path decides, once per call site (self_pc) for all threads, which of a0 and
# -8(s0) is the caller, and marks the site in the thread's arc table with a marker: a key of
# count 0 (readers skip count-0 slots), (self_pc + {MARK_FRAME}, self_pc) = FRAME, "from_pc is
# -8(s0)", or (self_pc + {MARK_A0}, self_pc) = A0, "from_pc is a0". These from_pcs are odd, so never
# pcs, and, unlike small constants, never plausible arguments either (clang code would
# otherwise find a marker with its a0 and count it as an arc).
# The fast path probes (a0, self_pc) first, so a hit of gcc's or rustc's code costs what it
# did before the markers; only when that probe reaches an empty slot does it look for the
# FRAME marker (then probes, and inserts, (-8(s0), self_pc)), then for the A0 marker or an
# A0 decision any thread made (instrfn_riscv64_decided; then it inserts (a0, self_pc)); a
# site with neither goes to the slow path, which marks it, deciding only if no thread has.
# The rule of the slow path (instrfn_riscv64_slow_path in src/arch/riscv64/mod.rs, from a0, ra,
# s0 and sp at the call; /proc/self/maps read with raw system calls, which qemu-user emulates
# with the guest's mappings):
#   1. -8(s0) is a candidate only if s0 lies in the stack that holds sp: 16-byte aligned,
#      above sp, at most the end of sp's mapping. It is read only then (gcc's s0 may hold
#      anything). No candidate: A0.
#   2. a0 == -8(s0): A0 (gcc -fno-omit-frame-pointer, rustc: both are right).
#   3. Otherwise the better return address of the two wins, FRAME only when strictly better:
#      0 = none; 1 = a return address: in an executable, readable mapping, after an instruction
#      that calls and links ra (jal ra; jalr ra, ..(..); c.jalr), or at the signal return
#      trampoline (`li a7, 139; ecall`, where a signal handler's ra points); 2 = after a direct
#      call (jal ra, or auipc ra + jalr ra, ..(ra)) whose target lies at most 512 bytes before
#      self_pc: a call of this very function. gcc's a0 is at least 1; clang's a0, an
#      argument, practically never is, and its -8(s0) is (a signal handler's too).
# A marker is only a hint about the code: the fast path loads -8(s0) only after checking s0
# against this thread's stack bounds (instrfn_riscv64_stack), so no marker, right or wrong or
# stale (a library unloaded and another loaded at its address), can make it fault.
# instrfn preserves every register, a0 included, so hand-written or future callers may rely
# on it. There is no __fentry__ on riscv64 (gcc has no -mfentry there).
#
# Trace mode (src/trace/; the layout operands: Tls {TLS_TRACE_POS} trace_pos, {TLS_TRACE_END} trace_end,
# {TLS_SHADOW_TOP} shadow_top, {TLS_SHADOW_END} shadow_end, {TLS_SHADOW_BASE} shadow_base, {TLS_UNWOUND} unwound, {TLS_DROPPED} dropped; shadow entries of {SH_BYTES} bytes,
# the original return address at {SH_RET}, its slot at {SH_SLOT}, the function at {SH_FN}; Tls {TLS_TRACE_TBASE} trace_tbase and
# {TLS_TRACE_CBASE} trace_cbase, the chunk's bases; compact events (TRACE_EVENT below): short ones of {EV_SHORT_BYTES} bytes, tag
# {EV_TAG_ENTRY} entry or {EV_TAG_EXIT} exit, long ones of {EV_BYTES}, (value << {EV_LONG_SHIFT}) | (t << {EV_TS_SHIFT}) | (kind << 2) | {EV_TAG_LONG}
# then the timestamp with its low two bits t 0, kinds {EV_ENTRY} entry and {EV_EXIT} exit). The exit trampoline
# must tell, from sp at a return, which frame returns, and the fast path must know where the
# function saved ra. Neither a0 nor s0 says that in gcc -O2 code (no frame pointer), so the
# slow path decodes, once per call site, the instructions from the function's entry to the
# counting call (src/arch/riscv64/mod.rs, `prologue`), and keeps the result in
# instrfn_riscv64_sites: the slot's offset from sp at the call, and a guard the code proves
# (a0 = the slot's word, or s0 = the CFA) that the fast path checks on every call. Only slots
# at CFA - 8 are replaced (gcc, clang and rustc put ra there in every function without
# variable arguments); sp at the return is then the CFA, and the exit trampoline compares
# sp - 8 with the newest shadow entry's slot. Other sites are traced as entries without exit.
#
# Differences from x86_64:
# - No red zone: the kernel may write a signal frame anywhere below sp, so the fast path moves
#   sp down 64 bytes before it saves its scratch registers, and describes that in its CFI.
# - The count is added with `amoadd.d` (A extension, part of RV64GC): one instruction, so a
#   signal handler counting the same arc on this thread never tears it.
# - Inserting a new arc (x86_64's cmpxchg claim): the slot is claimed with an lr.d/sc.d loop
#   that stores self_pc only while slot.self_pc is still 0, and gives up (probes that slot
#   again) when lr.d finds it taken. A signal handler that runs between lr.d and sc.d makes
#   sc.d fail (the kernel clears the reservation on every trap return) and the loop reloads;
#   amoswap would overwrite the handler's claim. RVWMO is weakly ordered: the first count is
#   added with `amoadd.d.rl`, a release, so another CPU that sees count 1 (the gmon writer
#   loads it with Acquire) also sees the claim and from_pc stored before it. table.len is
#   counted with a plain `amoadd.d`.
# - RV64GC has no rotate instruction (Zbb is not assumed): rotl 32 is slli/srli/or.
# - Thread pointer tp; initial-exec TLS with `la.tls.ie`: a GOT slot holding the offset of
#   instrfn_tls from tp (R_RISCV_TLS_TPREL64 in the .so, which gets DF_STATIC_TLS; filled by
#   the linker in executables), then `add` tp.
# - FP state is f0-f31 (64-bit, D) and fcsr; the slow path saves all of it. The V extension is
#   not saved: the psABI makes every vector register caller-saved (so no instrumented code has
#   one live across its _mcount call), and nothing on the slow path (Rust compiled for
#   rv64gc, glibc 2.36's string functions) executes a vector instruction. Touching V here would
#   also switch the kernel's lazily enabled vector state on for every thread.
# - Calls through a PLT clobber t1 and t3 (the PLT stub: `auipc t3; ld t3; jalr t1, t3`):
#   that happens before the trampoline runs and is allowed for an ordinary call.

# rustc assembles module-level asm for the base ISA only (the target's features reach the
# functions, not this block), so the extensions used below are enabled here, and only here.
    .option push
    .option arch, +m, +a, +f, +d, +c, +zicsr, +zicntr

    # Shared data (instrfn_tls, instrfn_enabled, instrfn_all_signals) is in src/abi/data.s.

    # This thread's stack, as the slow path last found it in /proc/self/maps: the mapping
    # [lo, hi) that held sp (src/arch/riscv64/mod.rs StackBounds: lo at {STK_LO}, hi at {STK_HI}, {STK_SIZE} bytes of
    # initial-exec TLS); zero until then. Read by the fast path before it loads -8(s0).
    .section .tbss,"awT",@nobits
    .p2align 4
    .globl instrfn_riscv64_stack
    .hidden instrfn_riscv64_stack
    .type instrfn_riscv64_stack,@object
    .size instrfn_riscv64_stack, {STK_SIZE}
instrfn_riscv64_stack:
    .zero {STK_SIZE}

    # The sites decided so far, by any thread (src/arch/riscv64/mod.rs, `remember`): 1 << {DEC_BITS}
    # words, open addressing from the top bits of self_pc * {HASH_MUL}, linear probing; a word is
    # self_pc for A0, self_pc + 1 for FRAME, 0 when empty. Words are claimed with a CAS by the
    # slow path and never change again; at most half of them are used, so every probe ends.
    # Read by the fast path of a thread that meets a site it has no marker for: an A0 site's
    # arcs are then inserted at once.
    .bss
    .p2align 6
    .globl instrfn_riscv64_decided
    .hidden instrfn_riscv64_decided
    .type instrfn_riscv64_decided,@object
    .size instrfn_riscv64_decided, 8 << {DEC_BITS}
instrfn_riscv64_decided:
    .zero 8 << {DEC_BITS}

    # Trace mode's rule per call site, by any thread (src/arch/riscv64/mod.rs, `remember_site`):
    # 1 << {SITE_BITS} entries (self_pc, rule) of 16 bytes, open addressing from the top bits of
    # self_pc * {HASH_MUL}, linear probing; self_pc 0 when empty. An entry's self_pc is claimed with
    # a CAS by the slow path, its rule written once after it (0 until then: the fast path sends
    # the call to the slow path); neither changes again. At most half of them are used.
    .bss
    .p2align 6
    .globl instrfn_riscv64_sites
    .hidden instrfn_riscv64_sites
    .type instrfn_riscv64_sites,@object
    .size instrfn_riscv64_sites, 16 << {SITE_BITS}
instrfn_riscv64_sites:
    .zero 16 << {SITE_BITS}

    # The Rust slow paths of riscv64, like instrfn_slow_path (src/abi/data.s): never exported.
    .hidden instrfn_riscv64_slow_path
    .hidden instrfn_riscv64_trace_path
    .hidden instrfn_riscv64_cyg_gmon
    .hidden instrfn_riscv64_cyg_trace_enter
    .hidden instrfn_riscv64_cyg_trace_exit

    .text

# BLOCK_SIGNALS off: rt_sigprocmask(SIG_BLOCK, all, old = sp + off, 8).
# RESTORE_SIGNALS off: rt_sigprocmask(SIG_SETMASK, sp + off, NULL, 8).
#   Raw system calls (no libc, errno untouched); clobber a0-a3, a7.
    .macro BLOCK_SIGNALS off
    li a7, 135
    li a0, 0
    lla a1, instrfn_all_signals
    addi a2, sp, \off
    li a3, 8
    ecall
    .endm
    .macro RESTORE_SIGNALS off
    li a7, 135
    li a0, 2
    addi a1, sp, \off
    li a2, 0
    li a3, 8
    ecall
    .endm

# HASH from, self: t1 = the byte offset, before masking, of the home slot of (\from, \self):
#   the hash of src/arch/x86_64/ (rotl 32 as slli/srli/or). t0 = table; clobbers t2.
    .macro HASH from, self
    slli t1, \self, 32
    srli t2, \self, 32
    or t1, t1, t2
    xor t1, t1, \from
1:  auipc t2, %pcrel_hi(instrfn_hash_mul)
    ld t2, %pcrel_lo(1b)(t2)
    mul t1, t1, t2
    lbu t2, {TBL_SHIFT}(t0)
    srl t1, t1, t2
    slli t1, t1, {SLOT_SHIFT}
    .endm

# PROBE from, empty, self: linear probing for the key (\from, \self) from the slot offset in t1.
#   Found: falls through with t1 = the slot's address - {SLOT_SELF} (table + offset). An empty
#   slot reached first: jumps to \empty with t1 likewise, t2 = 0. t0 = table; clobbers t2.
#   Jumping to the instruction where a PROBE starts, with t1 = an offset, probes from there.
    .macro PROBE from, empty, self
2:  ld t2, {TBL_MASK}(t0)                           # mask (a no-op on the first probe)
    and t1, t1, t2
    add t1, t1, t0
    ld t2, {SLOT_SELF}(t1)                          # slot.self_pc
    bne t2, \self, 3f
    ld t2, {SLOT_FROM}(t1)                          # slot.from_pc
    beq t2, \from, 4f
    j 5f
3:  beqz t2, \empty
5:  sub t1, t1, t0                         # back to an offset, next slot
    addi t1, t1, {SLOT_SIZE}
    j 2b
4:
    .endm
