/* instrfn: wrappers of the glibc entry points that replace or start program images, and of
 * dlopen and dlclose. Built by build.rs for glibc targets only and linked into every artifact
 * of the runtime (whole archive), so the wrappers interpose libc's functions whether the
 * runtime is preloaded or linked into the program.
 *
 * Plain C, compiled without instrumentation: it holds no logic of its own (but for the dlopen
 * route's look at the caller, which needs the loader's own answers). Each wrapper calls
 * the runtime (guarded entry points in src/runtime/, which hold the re-entry guard and block
 * signals while they run) before and after the real function, found with dlsym(RTLD_NEXT) by
 * this file's constructor, at load, where that is safe. The wrappers themselves run with the
 * caller's signal mask, so an exec'd image inherits exactly the mask the program had.
 *
 *   exec*        before: the runtime writes this image's profile, stops its sampling timers,
 *                takes a pending SIGPROF and gives the INSTRFN_TREE entry for the next image
 *                (src/process.rs); the environment passed on carries it. After a failed exec:
 *                profiling goes on.
 *   posix_spawn* the child's environment carries the INSTRFN_TREE entry (for exec* too), and
 *                the INSTRFN_* settings of this process it does not set itself.
 *   dlclose      a library that is really unloaded gets its profile written, and its counts
 *                are kept apart from whatever is loaded at its address later.
 *   dlopen, dlmopen (LM_ID_BASE)  in trace mode, after a real call that succeeded: the objects
 *                it loaded are noted before it returns (their XRay sleds patched, their
 *                `module` lines written). The loader takes the calling object from the return
 *                address (its RPATH/RUNPATH for a name without a slash, its directory for
 *                $ORIGIN, its namespace, the new object's loader chain), so the exported
 *                names are routed jumps (src/runtime/interpose.rs): a route function below looks at
 *                the arguments and the caller first, and the call goes on either to the
 *                wrapper, which calls the real function from this object, or — when that could
 *                change what the loader does (see same_for_caller), in gmon mode (nothing to
 *                do: a library's counts are found by address when the profile is written),
 *                for RTLD_NOLOAD and dlopen(NULL) (nothing loaded) and for another namespace
 *                (the runtime sees the base namespace only) — straight to libc's function
 *                with the caller's return address, exactly as if unwrapped; such objects are
 *                noted at the next exit, exec, dlclose or instrfn_flush(), as before.
 *   _Unwind_RaiseException, _Unwind_Resume, _Unwind_Resume_or_Rethrow, _Unwind_ForcedUnwind
 *                (C++ throw, Rust panic and resume_unwind, pthread_exit/cancel): in trace mode the
 *                original return addresses go back into the frames first (src/trace/), so the
 *                unwinder walks the real stack; the next event closes the frames it removed.
 *   __cxa_begin_catch  a C++ catch handler starts: the frames the unwinder removed are closed
 *                now, the ones still alive get the exit trampoline again (so they are traced
 *                returning even if they return before any other instrumented call).
 *   _Unwind_Backtrace, backtrace  the same around a walk that only looks (Rust's Backtrace,
 *                glibc's backtrace()), and the exit trampoline goes back afterwards.
 *   unshare, setns  a user namespace can be entered by a process of one thread only: when the
 *                real call fails with EINVAL and asked for one (unshare(CLONE_NEWUSER), setns
 *                of type 0 or CLONE_NEWUSER), instrfn's collector thread (trace mode) is
 *                ended, the call made again, and the collector started again: the program
 *                gets the answer it would get without instrfn (tests/host.rs).
 *   sigaction    instrfn's crash handlers (src/runtime/crash.rs) are invisible to the program: asking
 *                for SIGSEGV's action while instrfn's handler is installed shows the action
 *                before it (SIG_DFL), and setting one replaces instrfn's handler for good.
 *                Rust's std installs its stack-overflow handler only if it finds SIG_DFL.
 *
 * Variadic execl* gather their arguments on the stack, as glibc does. No allocation anywhere:
 * the environment with the marker is a stack array, so the wrappers are as safe as the
 * functions they wrap (exec* may be called from a signal handler or a vfork child).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <sched.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <signal.h>
#include <unistd.h>

extern char **environ;

/* The runtime (src/runtime/). */
void instrfn_exec_prepare(char *marker, size_t len);
void instrfn_exec_failed(void);
void instrfn_spawn_marker(char *marker, size_t len);
void instrfn_module_closing(uintptr_t bias, const char *path, void *state);
void instrfn_module_closed(void *state);
int instrfn_crash_hidden(int sig, struct sigaction *shown);
void instrfn_crash_yield(int sig);
void instrfn_unwind_begin(void);
void instrfn_unwind_looked(void);
void instrfn_unwind_walk_begin(void);
void instrfn_unwind_caught(void *boundary);
int instrfn_dlopen_wanted(void);
void instrfn_module_opened(void);
int instrfn_collector_pause(void);
int instrfn_output_entry(char *out, size_t len);
void instrfn_collector_resume(void);

#define HIDDEN __attribute__((visibility("hidden")))
#define MARKER_BYTES 64
#define OUTPUT "INSTRFN_OUTPUT="
#define OUTPUT_BYTES 1100 /* "INSTRFN_OUTPUT=" + config::MAX_PREFIX */
#define MODULE_STATE_BYTES 1024 /* runtime::MODULE_STATE_BYTES */
#define TREE "INSTRFN_TREE="

typedef int execve_fn(const char *, char *const[], char *const[]);
typedef int execveat_fn(int, const char *, char *const[], char *const[], int);
typedef int fexecve_fn(int, char *const[], char *const[]);
typedef int spawn_fn(pid_t *, const char *, const posix_spawn_file_actions_t *,
                     const posix_spawnattr_t *, char *const[], char *const[]);
typedef int dlclose_fn(void *);
typedef void *dlopen_fn(const char *, int);
typedef void *dlmopen_fn(Lmid_t, const char *, int);

static execve_fn *real_execve, *real_execvpe;
static execveat_fn *real_execveat;
static fexecve_fn *real_fexecve;
static spawn_fn *real_posix_spawn, *real_posix_spawnp;
static dlclose_fn *real_dlclose;
/* dlopen_fn and dlmopen_fn, read and written atomically: a dlopen may come before the
 * constructor, from any thread. */
static void *real_dlopen, *real_dlmopen;
typedef int sigaction_fn(int, const struct sigaction *, struct sigaction *);
/* Also used by the runtime for its own handlers (src/sys/). */
HIDDEN sigaction_fn *instrfn_real_sigaction;

__attribute__((constructor)) static void resolve(void) {
    real_execve = (execve_fn *)dlsym(RTLD_NEXT, "execve");
    real_execvpe = (execve_fn *)dlsym(RTLD_NEXT, "execvpe");
    real_execveat = (execveat_fn *)dlsym(RTLD_NEXT, "execveat");
    real_fexecve = (fexecve_fn *)dlsym(RTLD_NEXT, "fexecve");
    real_posix_spawn = (spawn_fn *)dlsym(RTLD_NEXT, "posix_spawn");
    real_posix_spawnp = (spawn_fn *)dlsym(RTLD_NEXT, "posix_spawnp");
    real_dlclose = (dlclose_fn *)dlsym(RTLD_NEXT, "dlclose");
    __atomic_store_n(&real_dlopen, dlsym(RTLD_NEXT, "dlopen"), __ATOMIC_RELAXED);
    __atomic_store_n(&real_dlmopen, dlsym(RTLD_NEXT, "dlmopen"), __ATOMIC_RELAXED);
    if (!instrfn_real_sigaction)
        instrfn_real_sigaction = (sigaction_fn *)dlsym(RTLD_NEXT, "sigaction");
}

static size_t count(char *const v[]) {
    size_t n = 0;
    if (v)
        while (v[n]) n++;
    return n;
}

/* Whether envp has a variable of the name `entry` (NAME=...) carries. */
static int has_name(char *const envp[], const char *entry) {
    size_t n = strcspn(entry, "=");
    for (size_t i = 0; envp && envp[i]; i++)
        if (strncmp(envp[i], entry, n) == 0 && envp[i][n] == '=') return 1;
    return 0;
}

/* The INSTRFN_* settings of this process, which a child started with an environment of its
 * own also gets (it records into the same trace, in the same mode), unless it sets them. */
static size_t settings(void) {
    size_t n = 0;
    for (size_t i = 0; environ && environ[i]; i++)
        if (strncmp(environ[i], "INSTRFN_", 8) == 0) n++;
    return n;
}

/* Whether `entry` is the INSTRFN_OUTPUT of this process's own environment (inherited as it
 * is, or the process's own), not one the program chose for its child. */
static int own_output(const char *entry) {
    if (strncmp(entry, OUTPUT, sizeof OUTPUT - 1) != 0) return 0;
    for (size_t i = 0; environ && environ[i]; i++)
        if (strncmp(environ[i], OUTPUT, sizeof OUTPUT - 1) == 0) return strcmp(environ[i], entry) == 0;
    return 0;
}

/* out = envp without any INSTRFN_TREE entry, plus `marker` (if not empty), plus this
 * process's INSTRFN_* settings envp lacks, NULL-terminated; out has room for count(envp) +
 * settings() + 3 pointers. In trace mode `output` is this process's trace directory as an
 * absolute INSTRFN_OUTPUT entry: it replaces the relative one of this process's environment,
 * so that a child started after a chdir records into the same directory (an INSTRFN_OUTPUT
 * the program gives the child itself stays). */
static void with_marker(char **out, char *const envp[], char *marker, char *output) {
    size_t j = 0;
    int chosen = 0; /* envp names a trace directory of its own */
    for (size_t i = 0; envp && envp[i]; i++) {
        if (strncmp(envp[i], TREE, sizeof TREE - 1) == 0) continue;
        if (output[0] && strncmp(envp[i], OUTPUT, sizeof OUTPUT - 1) == 0) {
            if (own_output(envp[i])) continue;
            chosen = 1;
        }
        out[j++] = envp[i];
    }
    if (marker[0]) out[j++] = marker;
    if (output[0] && !chosen) out[j++] = output;
    if ((char *const *)environ != envp)
        for (size_t i = 0; environ && environ[i]; i++)
            if (strncmp(environ[i], "INSTRFN_", 8) == 0 &&
                strncmp(environ[i], TREE, sizeof TREE - 1) != 0 &&
                !(output[0] && strncmp(environ[i], OUTPUT, sizeof OUTPUT - 1) == 0) &&
                !has_name(envp, environ[i]))
                out[j++] = environ[i];
    out[j] = NULL;
}

/* This process's trace directory as an INSTRFN_OUTPUT entry, into output (empty if none). */
static void output_of(char output[OUTPUT_BYTES]) {
    if (!instrfn_output_entry(output, OUTPUT_BYTES)) output[0] = 0;
}

enum kind { K_EXECVE, K_EXECVPE, K_EXECVEAT, K_FEXECVE };

static int run_exec(enum kind k, int fd, const char *path, char *const argv[],
                    char *const envp[], int flags) {
    char marker[MARKER_BYTES];
    instrfn_exec_prepare(marker, sizeof marker);
    char output[OUTPUT_BYTES];
    output_of(output);
    char *env[count(envp) + settings() + 3];
    with_marker(env, envp, marker, output);
    int r;
    switch (k) {
    case K_EXECVE:
        r = real_execve ? real_execve(path, argv, env)
                        : (int)syscall(SYS_execve, path, argv, env);
        break;
    case K_EXECVPE:
        if (real_execvpe) {
            r = real_execvpe(path, argv, env);
        } else {
            errno = ENOSYS;
            r = -1;
        }
        break;
    case K_EXECVEAT:
        r = real_execveat ? real_execveat(fd, path, argv, env, flags)
                          : (int)syscall(SYS_execveat, fd, path, argv, env, flags);
        break;
    default:
        if (real_fexecve) {
            r = real_fexecve(fd, argv, env);
        } else {
            errno = ENOSYS;
            r = -1;
        }
        break;
    }
    int e = errno;
    instrfn_exec_failed();
    errno = e;
    return r;
}

HIDDEN int instrfn_c_execve(const char *path, char *const argv[], char *const envp[]) {
    return run_exec(K_EXECVE, -1, path, argv, envp, 0);
}

HIDDEN int instrfn_c_execv(const char *path, char *const argv[]) {
    return run_exec(K_EXECVE, -1, path, argv, environ, 0);
}

HIDDEN int instrfn_c_execvpe(const char *file, char *const argv[], char *const envp[]) {
    return run_exec(K_EXECVPE, -1, file, argv, envp, 0);
}

HIDDEN int instrfn_c_execvp(const char *file, char *const argv[]) {
    return run_exec(K_EXECVPE, -1, file, argv, environ, 0);
}

HIDDEN int instrfn_c_fexecve(int fd, char *const argv[], char *const envp[]) {
    return run_exec(K_FEXECVE, fd, NULL, argv, envp, 0);
}

HIDDEN int instrfn_c_execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags) {
    return run_exec(K_EXECVEAT, dirfd, path, argv, envp, flags);
}

/* The variadic forms: count the arguments up to the NULL, then copy them into a stack array,
 * as glibc's own execl does. */
#define GATHER(first, ap, argv, n)                                                         \
    size_t n = 1;                                                                          \
    va_start(ap, first);                                                                   \
    while (va_arg(ap, char *)) n++;                                                        \
    va_end(ap);                                                                            \
    char *argv[n + 1];                                                                     \
    argv[0] = (char *)first;                                                               \
    va_start(ap, first);                                                                   \
    for (size_t i = 1; i <= n; i++) argv[i] = va_arg(ap, char *);

HIDDEN int instrfn_c_execl(const char *path, const char *arg, ...) {
    va_list ap;
    GATHER(arg, ap, argv, n)
    va_end(ap);
    return run_exec(K_EXECVE, -1, path, argv, environ, 0);
}

HIDDEN int instrfn_c_execlp(const char *file, const char *arg, ...) {
    va_list ap;
    GATHER(arg, ap, argv, n)
    va_end(ap);
    return run_exec(K_EXECVPE, -1, file, argv, environ, 0);
}

HIDDEN int instrfn_c_execle(const char *path, const char *arg, ...) {
    va_list ap;
    GATHER(arg, ap, argv, n)
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return run_exec(K_EXECVE, -1, path, argv, envp, 0);
}

static int run_spawn(spawn_fn *real, pid_t *pid, const char *path,
                     const posix_spawn_file_actions_t *actions,
                     const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    if (!real) return ENOSYS;
    char marker[MARKER_BYTES];
    instrfn_spawn_marker(marker, sizeof marker);
    char output[OUTPUT_BYTES];
    output_of(output);
    char *env[count(envp) + settings() + 3];
    with_marker(env, envp, marker, output);
    return real(pid, path, actions, attr, argv, env);
}

HIDDEN int instrfn_c_posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
                const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    return run_spawn(real_posix_spawn, pid, path, actions, attr, argv, envp);
}

HIDDEN int instrfn_c_posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions,
                 const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    return run_spawn(real_posix_spawnp, pid, file, actions, attr, argv, envp);
}

HIDDEN int instrfn_c_dlclose(void *handle) {
    if (!real_dlclose) {
        errno = ENOSYS;
        return -1;
    }
    _Alignas(16) char state[MODULE_STATE_BYTES];
    struct link_map *lm = NULL;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm) {
        instrfn_module_closing((uintptr_t)lm->l_addr, lm->l_name, state);
    } else {
        memset(state, 0, sizeof state);
    }
    int r = real_dlclose(handle);
    int e = errno;
    instrfn_module_closed(state);
    errno = e;
    return r;
}

/* dlopen and dlmopen (see the header). */

/* Where a routed call goes when libc's function cannot be found: fails as dlclose's does. */
static void *dl_missing(void) {
    errno = ENOSYS;
    return NULL;
}

/* The real function, looked up here if the constructor has not run yet (another object's
 * constructor may dlopen before it). */
static void *real_fn(void **slot, const char *name) {
    void *f = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (!f) {
        f = dlsym(RTLD_NEXT, name);
        __atomic_store_n(slot, f, __ATOMIC_RELAXED);
    }
    return f;
}

/* After a real call that succeeded: the runtime notes the objects loaded (errno kept; no dl*
 * function that touches dlerror()'s state runs in there). */
static void opened(void) {
    int e = errno;
    instrfn_module_opened();
    errno = e;
}

static void *dlopen_noted(const char *file, int mode) {
    void *h = ((dlopen_fn *)__atomic_load_n(&real_dlopen, __ATOMIC_RELAXED))(file, mode);
    if (h) opened();
    return h;
}

static void *dlmopen_noted(Lmid_t lmid, const char *file, int mode) {
    void *h = ((dlmopen_fn *)__atomic_load_n(&real_dlmopen, __ATOMIC_RELAXED))(lmid, file, mode);
    if (h) opened();
    return h;
}

/* The object holding `addr`, found as the loader finds a dlopen caller, or NULL. */
static struct link_map *object_at(const void *addr) {
    Dl_info info;
    struct link_map *lm = NULL;
    if (!dladdr1(addr, &info, (void **)&lm, RTLD_DL_LINKMAP)) return NULL;
    return lm;
}

/* lm's dynamic entry with this tag, or NULL. */
static const ElfW(Dyn) *dyn_entry(const struct link_map *lm, ElfW(Sxword) tag) {
    for (const ElfW(Dyn) *d = lm->l_ld; d && d->d_tag != DT_NULL; d++)
        if (d->d_tag == tag) return d;
    return NULL;
}

static int nodeflib(const struct link_map *lm) {
    const ElfW(Dyn) *d = dyn_entry(lm, DT_FLAGS_1);
    return d && (d->d_un.d_val & DF_1_NODEFLIB);
}

#define SEARCH_BYTES 4096

/* The directories the loader searches, in order, for a name without a slash that lm loads
 * (dlinfo RTLD_DI_SERINFO: its RPATH and those of the objects that loaded it, the program's
 * RPATH, LD_LIBRARY_PATH, its RUNPATH, the default directories; ld.so.cache is tried before
 * the last), into buf; 0 if that fails or needs more than SEARCH_BYTES. */
static int search_path(struct link_map *lm, Dl_serinfo *buf) {
    Dl_serinfo size;
    if (dlinfo(lm, RTLD_DI_SERINFOSIZE, &size) != 0 || size.dls_size > SEARCH_BYTES) return 0;
    buf->dls_size = size.dls_size;
    buf->dls_cnt = size.dls_cnt;
    return dlinfo(lm, RTLD_DI_SERINFO, buf) == 0;
}

/* The first index from i on whose directory does not come earlier in s (or dls_cnt). */
static unsigned first_new(const Dl_serinfo *s, unsigned i) {
    for (; i < s->dls_cnt; i++) {
        unsigned j = 0;
        while (j < i && strcmp(s->dls_serpath[j].dls_name, s->dls_serpath[i].dls_name) != 0) j++;
        if (j == i) break;
    }
    return i;
}

/* Whether a and b search the same directories in the same order, each taken where it first
 * comes (a directory tried again finds what it found the first time: nothing). */
static int same_dirs(const Dl_serinfo *a, const Dl_serinfo *b) {
    unsigned i = 0, j = 0;
    for (;;) {
        i = first_new(a, i);
        j = first_new(b, j);
        if (i == a->dls_cnt || j == b->dls_cnt) return i == a->dls_cnt && j == b->dls_cnt;
        if (strcmp(a->dls_serpath[i].dls_name, b->dls_serpath[j].dls_name) != 0) return 0;
        i++;
        j++;
    }
}

/* Whether objects c and w (neither with a RUNPATH: the RPATHs of c's loaders are not visible
 * then) search the same path, the RPATHs of their loaders included, and both use the
 * default directories and ld.so.cache or neither does. Its own frame (8 KiB of buffers). */
__attribute__((noinline)) static int same_search(struct link_map *c, struct link_map *w) {
    if (dyn_entry(c, DT_RUNPATH) || dyn_entry(w, DT_RUNPATH) || nodeflib(c) != nodeflib(w))
        return 0;
    union {
        Dl_serinfo info;
        char bytes[SEARCH_BYTES];
    } a, b;
    return search_path(c, &a.info) && search_path(w, &b.info) && same_dirs(&a.info, &b.info);
}

/* Whether the loader, asked from this object, does for `file` exactly what it does when asked
 * from the object at `caller` (glibc's dl_open_worker and _dl_map_object): the same object
 * (the program, when the runtime is linked into it); else the caller in the base namespace,
 * no dynamic string token in the name ($ORIGIN is the caller's directory), and either a path
 * (no search) from the program itself — the new object's loader then is the program either
 * way for the RPATH inheritance of its own dependencies, this object having no RPATH — or a
 * search path equal to this object's. */
static int same_for_caller(const char *file, const void *caller) {
    struct link_map *c = object_at(caller), *w = object_at((const void *)same_for_caller);
    if (!c || !w) return 0;
    if (c == w) return 1;
    if (strchr(file, '$')) return 0;
    Lmid_t ns = -1;
    if (dlinfo(c, RTLD_DI_LMID, &ns) != 0 || ns != LM_ID_BASE) return 0;
    if (strchr(file, '/') && c->l_prev == NULL && !dyn_entry(w, DT_RPATH)) return 1;
    return same_search(c, w);
}

/* Whether a call with these arguments from `caller` goes to the wrapper; errno is kept (the
 * checks' dl* calls may change dlerror()'s state: the real call sets it afresh in any case). */
static int noted_call(Lmid_t lmid, const char *file, int mode, const void *caller) {
    if (lmid != LM_ID_BASE || !file || (mode & RTLD_NOLOAD)) return 0;
    int e = errno;
    int r = instrfn_dlopen_wanted() && same_for_caller(file, caller);
    errno = e;
    return r;
}

/* The route functions of the exported dlopen and dlmopen (src/runtime/interpose.rs): called with the
 * caller's arguments and return address, they return the function the call goes on to. */
HIDDEN void *instrfn_c_dlopen_route(const char *file, int mode, uintptr_t unused, const void *caller) {
    (void)unused;
    void *real = real_fn(&real_dlopen, "dlopen");
    if (!real) return (void *)dl_missing;
    return noted_call(LM_ID_BASE, file, mode, caller) ? (void *)dlopen_noted : real;
}

HIDDEN void *instrfn_c_dlmopen_route(Lmid_t lmid, const char *file, int mode, const void *caller) {
    void *real = real_fn(&real_dlmopen, "dlmopen");
    if (!real) return (void *)dl_missing;
    return noted_call(lmid, file, mode, caller) ? (void *)dlmopen_noted : real;
}

HIDDEN int instrfn_c_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (!instrfn_real_sigaction) /* called before the constructor (another one's) */
        instrfn_real_sigaction = (sigaction_fn *)dlsym(RTLD_NEXT, "sigaction");
    struct sigaction shown;
    if (instrfn_crash_hidden(sig, &shown)) {
        if (act) {
            int r = instrfn_real_sigaction(sig, act, NULL);
            if (r != 0) return r;
            instrfn_crash_yield(sig);
        }
        if (old) *old = shown;
        return 0;
    }
    return instrfn_real_sigaction(sig, act, old);
}

/* The unwinder (libgcc_s, or whatever provides it). Opaque types: only pointers pass through. */
typedef int unwind_reason;
typedef unwind_reason raise_fn(void *exc);
typedef void resume_fn(void *exc);
typedef unwind_reason forced_fn(void *exc, void *stop, void *arg);
typedef unwind_reason trace_fn(void *fn, void *arg);
typedef int backtrace_fn(void **buffer, int size);

static raise_fn *real_raise, *real_resume_or_rethrow;
static resume_fn *real_resume;
static forced_fn *real_forced;
static trace_fn *real_trace;
static backtrace_fn *real_backtrace;

/* Looked up when first needed: libgcc_s may be loaded after this library (it is, by glibc
 * itself, for pthread_cancel), and these are only called where dlsym is safe. */
static void *next(const char *name) {
    return dlsym(RTLD_NEXT, name);
}

HIDDEN unwind_reason instrfn_c__Unwind_RaiseException(void *exc) {
    if (!real_raise) real_raise = (raise_fn *)next("_Unwind_RaiseException");
    instrfn_unwind_begin();
    return real_raise(exc);
}

HIDDEN unwind_reason instrfn_c__Unwind_Resume_or_Rethrow(void *exc) {
    if (!real_resume_or_rethrow)
        real_resume_or_rethrow = (raise_fn *)next("_Unwind_Resume_or_Rethrow");
    instrfn_unwind_begin();
    return real_resume_or_rethrow(exc);
}

HIDDEN void instrfn_c__Unwind_Resume(void *exc) {
    if (!real_resume) real_resume = (resume_fn *)next("_Unwind_Resume");
    instrfn_unwind_begin();
    real_resume(exc);
}

HIDDEN unwind_reason instrfn_c__Unwind_ForcedUnwind(void *exc, void *stop, void *arg) {
    if (!real_forced) real_forced = (forced_fn *)next("_Unwind_ForcedUnwind");
    instrfn_unwind_begin();
    return real_forced(exc, stop, arg);
}

HIDDEN unwind_reason instrfn_c__Unwind_Backtrace(void *fn, void *arg) {
    if (!real_trace) real_trace = (trace_fn *)next("_Unwind_Backtrace");
    instrfn_unwind_walk_begin();
    unwind_reason r = real_trace(fn, arg);
    instrfn_unwind_looked();
    return r;
}

HIDDEN int instrfn_c_backtrace(void **buffer, int size) {
    if (!real_backtrace) real_backtrace = (backtrace_fn *)next("backtrace");
    instrfn_unwind_walk_begin();
    int n = real_backtrace(buffer, size);
    instrfn_unwind_looked();
    return n;
}

typedef void *begin_catch_fn(void *exc);
static begin_catch_fn *real_begin_catch;

HIDDEN void *instrfn_c___cxa_begin_catch(void *exc) {
    if (!real_begin_catch) real_begin_catch = (begin_catch_fn *)next("__cxa_begin_catch");
    /* The catching function's stack pointer at its call: every frame the unwinder removed lay
     * below it, every frame still alive above. */
    instrfn_unwind_caught(__builtin_dwarf_cfa());
    return real_begin_catch(exc);
}

/* A call that needs a process of one thread (the kernel answers EINVAL otherwise), made again
 * with instrfn's collector thread out of the way. glibc's unshare and setns are the system
 * calls themselves. */
static int one_thread_call(long nr, long a, long b) {
    int r = (int)syscall(nr, a, b);
    if (r == 0 || errno != EINVAL || !instrfn_collector_pause())
        return r;
    r = (int)syscall(nr, a, b);
    int e = errno;
    instrfn_collector_resume();
    errno = e;
    return r;
}

HIDDEN int instrfn_c_unshare(int flags) {
    if (!(flags & CLONE_NEWUSER))
        return (int)syscall(SYS_unshare, flags);
    return one_thread_call(SYS_unshare, flags, 0);
}

HIDDEN int instrfn_c_setns(int fd, int nstype) {
    if (nstype != 0 && !(nstype & CLONE_NEWUSER))
        return (int)syscall(SYS_setns, fd, nstype);
    return one_thread_call(SYS_setns, fd, nstype);
}
