/* instrfn's XRay handler for C and C++ programs built with clang -fxray-instrument.
 *
 * clang links compiler-rt's XRay runtime itself (-fxray-instrument at link time); add the
 * handler (instrfn-xray/asm/x86_64.s, assembled with the program) and the instrfn runtime
 * (libinstrfn.a, static: the handler continues in its instrfn_xray_handler_entry/_exit):
 *
 *   clang -O2 -fxray-instrument -fxray-instruction-threshold=1 -I instrfn-xray/c \
 *       app.c instrfn-xray/asm/x86_64.s target/release/libinstrfn.a -lpthread -ldl -o app
 *   INSTRFN_MODE=trace ./app          # or: instrfn record -- ./app
 *
 * and call instrfn_xray_install() once, before the code to trace runs: from a constructor it
 * sees main's entry too. It numbers functions with compiler-rt's __xray_function_address, which
 * reads clang's function index: right when clang and compiler-rt are of one release (tested:
 * clang 14); for a rustc binary use the instrfn-xray crate, which reads the sled map itself. */
#ifndef INSTRFN_XRAY_H
#define INSTRFN_XRAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* The id -> address table the handler reads (asm/x86_64.s): fn[id] for id < len; frame[type]:
 * where the instrumented function's frame is above the handler's stack pointer (found by
 * instrfn_xray_probe; 0: not known). */
struct instrfn_xray_table {
    const uintptr_t *fn;
    size_t len;
    uintptr_t frame[4];
};
extern struct instrfn_xray_table instrfn_xray_table;
/* The handler: (function id, XRayEntryType). Assembly: it has no sleds. */
void instrfn_xray_handler(int32_t id, int type);
/* Runs compiler-rt's trampolines once with a probe handler: fills instrfn_xray_table.frame
 * (1: all known; 0: the handler records through __cyg_profile_func_enter/_exit, and frames a
 * C++ exception unwinds through stay open). */
int instrfn_xray_probe(void);

/* compiler-rt's interface (<xray/xray_interface.h> is C++; its enums are ints). */
int __xray_set_handler(void (*entry)(int32_t, int));
int __xray_remove_handler(void);
int __xray_patch(void);
int __xray_unpatch(void);
uintptr_t __xray_function_address(int32_t id);
size_t __xray_max_function_id(void);

/* Builds the table, sets instrfn's handler and patches every sled. 0 on success, -1 if XRay
 * is not initialised (no sleds), the table cannot be allocated, or patching failed. */
__attribute__((xray_never_instrument, unused)) static int instrfn_xray_install(void) {
    size_t n = __xray_max_function_id();
    if (n == 0) return -1;
    uintptr_t *t = (uintptr_t *)calloc(n + 1, sizeof *t);
    if (t == NULL) return -1;
    for (size_t id = 1; id <= n; id++) t[id] = __xray_function_address((int32_t)id);
    /* Before any sled is patched, and before the handler is set (it sets its own meanwhile). */
    instrfn_xray_probe();
    /* The array before its length: the handler reads len first. Never freed. */
    __atomic_store_n(&instrfn_xray_table.fn, t, __ATOMIC_RELAXED);
    __atomic_store_n(&instrfn_xray_table.len, n + 1, __ATOMIC_RELEASE);
    if (__xray_set_handler(instrfn_xray_handler) != 1) return -1;
    return __xray_patch() == 1 ? 0 : -1; /* SUCCESS */
}

/* Unpatches every sled and removes the handler (which stays valid: a call on its way may
 * still arrive). 0 on success. */
__attribute__((xray_never_instrument, unused)) static int instrfn_xray_uninstall(void) {
    int r = __xray_unpatch() == 1 ? 0 : -1;
    __xray_remove_handler();
    return r;
}

#endif
