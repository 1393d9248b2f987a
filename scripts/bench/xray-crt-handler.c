/* Cost per call of compiler-rt's XRay trampolines with instrfn's handler against the same
 * trampolines with an empty handler, on threads.c's hot loop (2 instrumented calls per
 * iteration, one thread); with -DMCOUNT the same loop for gcc -pg, traced by instrfn's own
 * mcount trampolines, for comparison. Prints ns per instrumented call of the loop alone
 * (start-up and exit excluded: main and the timing code are not instrumented).
 *
 *   clang -O2 -fxray-instrument -fxray-instruction-threshold=1 -I instrfn-xray/c \
 *       scripts/bench/xray-crt-handler.c instrfn-xray/src/arch/x86_64/ \
 *       target/release/libinstrfn.a -lpthread -ldl -o /tmp/xch
 *   /tmp/xch nops N                            sleds left unpatched (nops)
 *   /tmp/xch empty N                           patched, an empty handler
 *   INSTRFN_MODE=trace INSTRFN_START=off /tmp/xch instrfn N
 *                                              instrfn's handler, recording off
 *   INSTRFN_MODE=trace INSTRFN_OUTPUT=/tmp/t /tmp/xch instrfn N
 *                                              instrfn's handler, recording every call
 *
 *   gcc -O2 -pg -DMCOUNT -c scripts/bench/xray-crt-handler.c -o /tmp/xch-pg.o
 *   gcc /tmp/xch-pg.o -o /tmp/xch-pg
 *   LD_PRELOAD=target/release/libinstrfn.so INSTRFN_MODE=trace INSTRFN_OUTPUT=/tmp/t \
 *       /tmp/xch-pg mcount N                   instrfn's mcount trampolines, recording */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef MCOUNT
#define UNTRACED __attribute__((no_instrument_function))
#else
#include "instrfn_xray.h"
#define UNTRACED __attribute__((xray_never_instrument))
#endif

__attribute__((noinline)) unsigned long work_a(unsigned long x) {
    __asm__ volatile("" : "+r"(x));
    return x * 3 + 1;
}

__attribute__((noinline)) unsigned long work_b(unsigned long x) {
    __asm__ volatile("" : "+r"(x));
    return x ^ 0x5555;
}

#ifndef MCOUNT
UNTRACED static void empty(int32_t id, int type) {
    (void)id;
    (void)type;
}
#endif

UNTRACED static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

UNTRACED int main(int argc, char **argv) {
    if (argc != 3) return 2;
    long n = atol(argv[2]);
#ifdef MCOUNT
    if (strcmp(argv[1], "mcount") != 0) return 2;
#else
    if (strcmp(argv[1], "empty") == 0) {
        if (__xray_set_handler(empty) != 1 || __xray_patch() != 1) return 3;
    } else if (strcmp(argv[1], "instrfn") == 0) {
        if (instrfn_xray_install() != 0) return 3;
    } else if (strcmp(argv[1], "nops") != 0) {
        return 2;
    }
#endif
    unsigned long acc = 0;
    double t0 = now();
    for (long i = 0; i < n; i++) {
        acc += work_a((unsigned long)i);
        acc ^= work_b(acc);
    }
    double t1 = now();
    printf("%s: %.2f ns per call (%ld calls, checksum %lu)\n", argv[1], (t1 - t0) / (2.0 * n),
           2 * n, acc);
    return 0;
}
