/* Ring mode on a disk file system (docs/flight-recorder.md): what a store into a page of a
 * shared file mapping costs once writeback has cleaned it (a write fault), against a store
 * into a page that is still dirty, per 4 KiB page, in a directory:
 *   cc -O2 scripts/bench/ring-refault.c -o /tmp/refault && /tmp/refault DIR [MiB]
 * The file (default 4 MiB) is reserved with fallocate and mapped shared with MAP_POPULATE,
 * as a ring is. Each round stores one word per page: "written-back" rounds after fdatasync
 * (the pages written out and write-protected, as writeback leaves them), "dirty" rounds
 * after another store round. Best of 9 rounds; the faults are the best round's. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static long minflt(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_minflt;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: refault DIR [MiB]\n");
        return 2;
    }
    size_t mib = argc > 2 ? atol(argv[2]) : 4, len = mib << 20, pages = len / 4096;
    char path[4096];
    snprintf(path, sizeof path, "%s/refault.%d", argv[1], getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || fallocate(fd, 0, 0, len) != 0) {
        perror(path);
        return 1;
    }
    volatile char *p = mmap(0, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    /* [0]: dirty pages, [1]: pages written back */
    double best[2] = {1e9, 1e9};
    long faults[2] = {0, 0};
    for (int r = 0; r < 9; r++) {
        for (int clean = 0; clean < 2; clean++) {
            for (size_t i = 0; i < pages; i++)
                p[i * 4096] = (char)r; /* every page dirty */
            if (clean)
                fdatasync(fd);
            long f0 = minflt();
            double t0 = now();
            for (size_t i = 0; i < pages; i++)
                p[i * 4096 + 8] = (char)r;
            double t = now() - t0;
            long f = minflt() - f0;
            if (t < best[clean]) {
                best[clean] = t;
                faults[clean] = f;
            }
        }
    }
    printf("%s, %zu MiB: dirty pages %.3f µs/page (%ld faults), "
           "written-back pages %.3f µs/page (%ld faults)\n",
           argv[1], mib, best[0] / pages * 1e6, faults[0], best[1] / pages * 1e6, faults[1]);
    unlink(path);
    return 0;
}
