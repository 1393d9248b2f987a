# Data every architecture's trampolines share, assembled once for all of them (src/abi/mod.rs).
# Architecture-neutral directives only: `%` type prefixes (`@` starts a comment on aarch64).

# This thread's Tls block (src/abi/tls.rs): {TLS_BYTES} bytes of initial-exec TLS.
    .section .tbss,"awT",%nobits
    .p2align 6
    .globl instrfn_tls
    .hidden instrfn_tls
    .type instrfn_tls,%object
    .size instrfn_tls, {TLS_BYTES}
instrfn_tls:
    .zero {TLS_BYTES}

# Nonzero while recording is on (instrfn::start/stop, moncontrol). Read by every fast path.
# 8-byte aligned: s390x addresses it with larl, which needs an even address.
    .data
    .p2align 3
    .globl instrfn_enabled
    .hidden instrfn_enabled
    .type instrfn_enabled,%object
    .size instrfn_enabled, 1
instrfn_enabled:
    .byte 1

# The mode the fast paths take: 0 counts call arcs (gmon), 1 traces entries and exits, 2 traces
# entries only (INSTRFN_EXITS=off), 3 as 1 with code that calls gcc's __return__ loaded (x86_64).
# Set by the constructor and start-up, before recording (3 also after a dlopen).
    .p2align 3
    .globl instrfn_mode
    .hidden instrfn_mode
    .type instrfn_mode,%object
    .size instrfn_mode, 1
instrfn_mode:
    .byte 0

# Trace mode: calls shorter than this many counter ticks leave no events (INSTRFN_MIN_DURATION;
# 0: every call is recorded). Read by the exit trampolines that support it.
    .p2align 3
    .globl instrfn_min_ticks
    .hidden instrfn_min_ticks
    .type instrfn_min_ticks,%object
    .size instrfn_min_ticks, 8
instrfn_min_ticks:
    .quad 0

# The slot hash multiplier (src/tables/arcs.rs HASH_MUL), for the architectures that load it from memory
# rather than building a 64-bit immediate.
    .section .rodata
    .p2align 3
    .globl instrfn_hash_mul
    .hidden instrfn_hash_mul
    .type instrfn_hash_mul,%object
    .size instrfn_hash_mul, 8
instrfn_hash_mul:
    .quad {HASH_MUL}

# The signal set the slow path and the guarded routine block: every signal (rt_sigprocmask).
    .section .rodata
    .p2align 3
    .globl instrfn_all_signals
    .hidden instrfn_all_signals
    .type instrfn_all_signals,%object
    .size instrfn_all_signals, 8
instrfn_all_signals:
    .quad -1

# The Rust slow path is an internal symbol of whatever links the runtime: never exported from
# libinstrfn.so, so a program cannot replace it and calls to it bind locally.
    .hidden instrfn_slow_path
    .hidden instrfn_trace_slow
    .hidden instrfn_trace_exit_slow
    .hidden instrfn_xray_slow

# The runtime's load-time constructor and exit destructor (src/runtime/). Listed here, in
# the object that also holds instrfn_tls (which every trampoline references), so no link
# of the runtime (static archive, rlib, shared library) leaves them out.
    .section .init_array,"aw",%init_array
    .p2align 3
    .quad instrfn_on_load
    .section .fini_array,"aw",%fini_array
    .p2align 3
    .quad instrfn_on_exit

# Runtime-internal entry points that Rust must define with #[no_mangle]: hidden, so a shared
# libinstrfn.so exports only the ABI's names and the documented C API (the strictest visibility
# of a symbol in any object of a link wins).
    .hidden instrfn_on_load
    .hidden instrfn_on_exit
    .hidden instrfn_exec_prepare
    .hidden instrfn_exec_failed
    .hidden instrfn_spawn_marker
    .hidden instrfn_module_closing
    .hidden instrfn_module_closed
    .hidden instrfn_dlopen_wanted
    .hidden instrfn_collector_pause
    .hidden instrfn_output_entry
    .hidden instrfn_collector_resume
    .hidden instrfn_module_opened
    .hidden instrfn_crash_hidden
    .hidden instrfn_crash_yield
    .hidden instrfn_unwind_begin
    .hidden instrfn_unwind_looked
    .hidden instrfn_unwind_walk_begin
    .hidden instrfn_unwind_caught
    .hidden instrfn_runtime
    .hidden instrfn_calls_lost
    .hidden instrfn_debug_call_guarded
    .hidden instrfn_debug_clear_thread

# What the exit trampolines' return pads' unwind info reads (src/arch/<arch>/, through a pc-relative
# word before each pad): the address of the thread registry's head (until trace mode starts: of
# the zero word, so an early walk finds no block), the bytes of one shadow stack mapping, and a
# zero word (the return address of 0 where nothing is found). Set by src/abi/mod.rs
# set_shadow_registry.
    .data
    .p2align 3
    .globl instrfn_registry
    .hidden instrfn_registry
    .type instrfn_registry,%object
    .size instrfn_registry, 24
instrfn_registry:
    .quad instrfn_registry + 16, 0, 0
