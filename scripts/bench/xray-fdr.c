/* Linked into scripts/compare.py's XRay build of the workload: selects and initialises
 * compiler-rt's FDR mode explicitly before main, and finalises and flushes its log at exit.
 * XRAY_OPTIONS="patch_premain=true xray_mode=xray-fdr" alone never initialises FDR ("Cannot
 * finalize log, implementation not initialized", no log written). The FDR options come from
 * XRAY_FDR_OPTIONS (compare.py sets func_duration_threshold_us=0: every call recorded).
 * The prototypes are those of <xray/xray_log_interface.h>, a C++ header, with the enums as
 * int: XRAY_REGISTRATION_OK 0, XRAY_LOG_INITIALIZED 2, XRAY_LOG_FINALIZED 4,
 * XRAY_LOG_FLUSHED 2, SUCCESS (patching) 1. */
#include <stdio.h>
#include <stdlib.h>

int __xray_log_select_mode(const char *mode);
int __xray_log_init_mode(const char *mode, const char *config);
int __xray_patch(void);
int __xray_log_finalize(void);
int __xray_log_flushLog(void);

static void fail(const char *what, int status) {
    fprintf(stderr, "xray-fdr.c: %s returned %d\n", what, status);
    exit(3);
}

__attribute__((constructor, xray_never_instrument)) static void fdr_start(void) {
    const char *config = getenv("XRAY_FDR_OPTIONS");
    int s = __xray_log_select_mode("xray-fdr");
    if (s != 0) fail("__xray_log_select_mode(xray-fdr)", s);
    s = __xray_log_init_mode("xray-fdr", config ? config : "");
    if (s != 2) fail("__xray_log_init_mode", s);
    s = __xray_patch();
    if (s != 1) fail("__xray_patch", s);
}

__attribute__((destructor, xray_never_instrument)) static void fdr_end(void) {
    int s = __xray_log_finalize();
    if (s != 4) fail("__xray_log_finalize", s);
    s = __xray_log_flushLog();
    if (s != 2) fail("__xray_log_flushLog", s);
}
