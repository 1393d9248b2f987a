/* xray-sys's C side: what stable Rust cannot declare, weak references.
 *
 * - The linker-defined bounds of the executable's XRay sections: __start_/__stop_xray_instr_map
 *   (the sled map, 32-byte entries) and __start_/__stop_xray_fn_idx (the function index, 16-byte
 *   entries). Weak: a program without XRay instrumentation has neither (they read as 0).
 * - compiler-rt's own copy of the sled map, `XRayInstrMap` (a C symbol of compiler-rt 14,
 *   xray_init.cpp: { sleds, entries, index, functions }), and the spin lock that guards it,
 *   `XRayInstrMapMutex` (one byte: 0 free, 1 held). Weak: other compiler-rt versions may name or
 *   lay them out otherwise; src/lib.rs checks the layout against the sections before it uses
 *   them, and reads nothing it did not check.
 *
 * Never on a handler's path; compiled without instrumentation. */
#include <stddef.h>
#include <stdint.h>

extern const char __start_xray_instr_map[] __attribute__((weak));
extern const char __stop_xray_instr_map[] __attribute__((weak));
extern const char __start_xray_fn_idx[] __attribute__((weak));
extern const char __stop_xray_fn_idx[] __attribute__((weak));
extern char XRayInstrMap[] __attribute__((weak));
extern char XRayInstrMapMutex[] __attribute__((weak));

/* Must match `Symbols` in src/lib.rs. */
struct xray_sys_symbols {
    uintptr_t instr_map_start, instr_map_stop;
    uintptr_t fn_idx_start, fn_idx_stop;
    uintptr_t crt_sled_map; /* &XRayInstrMap, or 0 */
    uintptr_t crt_sled_map_lock; /* &XRayInstrMapMutex, or 0 */
};

void xray_sys_symbols(struct xray_sys_symbols *out) {
    out->instr_map_start = (uintptr_t)__start_xray_instr_map;
    out->instr_map_stop = (uintptr_t)__stop_xray_instr_map;
    out->fn_idx_start = (uintptr_t)__start_xray_fn_idx;
    out->fn_idx_stop = (uintptr_t)__stop_xray_fn_idx;
    out->crt_sled_map = (uintptr_t)XRayInstrMap;
    out->crt_sled_map_lock = (uintptr_t)XRayInstrMapMutex;
}
