/* Linked into scripts/compare.py --xray's build of the workload with clang -fxray-instrument
 * (and so with compiler-rt's XRay runtime): installs a handler that does nothing and patches
 * every sled before main, so that each call pays compiler-rt's entry and exit trampolines and
 * nothing else. With XRAY_EMPTY_COUNT set, the handler counts entries instead and the count is
 * printed on stderr at exit ("xray-empty: N entries"): compare.py checks that every call
 * reached the handler (in a run it does not time). The prototypes are those of
 * <xray/xray_interface.h>, a C++ header, with XRayEntryType (0 entry, 1 exit, 2 tail exit) as
 * int; __xray_set_handler returns 1 on success, __xray_patch SUCCESS (1). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int __xray_set_handler(void (*handler)(int32_t, int));
int __xray_patch(void);

static unsigned long entries;
static int counting;

__attribute__((xray_never_instrument)) static void empty(int32_t id, int type) {
    (void)id;
    (void)type;
}

__attribute__((xray_never_instrument)) static void count(int32_t id, int type) {
    (void)id;
    if (type == 0) __atomic_fetch_add(&entries, 1, __ATOMIC_RELAXED);
}

__attribute__((constructor, xray_never_instrument)) static void empty_start(void) {
    counting = getenv("XRAY_EMPTY_COUNT") != NULL;
    if (__xray_set_handler(counting ? count : empty) != 1) {
        fprintf(stderr, "xray-empty.c: __xray_set_handler failed\n");
        exit(3);
    }
    int s = __xray_patch();
    if (s != 1) {
        fprintf(stderr, "xray-empty.c: __xray_patch returned %d\n", s);
        exit(3);
    }
}

__attribute__((destructor, xray_never_instrument)) static void empty_end(void) {
    if (counting) fprintf(stderr, "xray-empty: %lu entries\n", entries);
}
