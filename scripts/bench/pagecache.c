/* What it costs to persist trace data through the page cache, per 32 bytes (one traced call's
 * two events), in a directory given on the command line:
 *   cc -O2 scripts/bench/pagecache.c -o /tmp/pagecache && /tmp/pagecache DIR
 * Five ways to get 256 MiB into a file, in 1 MiB chunks:
 *   fault      fallocate + mmap, then store (each page faults on first write)
 *   populate   fallocate + mmap + MADV_POPULATE_WRITE (what instrfn's collector did before
 *              the staging file), then store: "prepare" is the collector's share, "write" the
 *              threads'
 *   pwrite     store into one reused anonymous buffer, pwrite it out
 *   fpwrite    the same, with each chunk's blocks fallocated before its pwrite (what the
 *              collector does now, from a reused staging chunk)
 *   memory     store into one reused anonymous buffer only (no file: the floor)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define CHUNK (1ul << 20)
#define TOTAL (256ul << 20)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void fill(char *p) {
    for (size_t i = 0; i < CHUNK; i += 8) *(volatile long *)(p + i) = (long)i;
}

static double per32(double s) { return s * 1e9 / (TOTAL / 32); }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/instrfn-pagecache.%d", argv[1], (int)getpid());
    const char *names[] = {"fault", "populate", "pwrite", "fpwrite", "memory"};
    for (int mode = 0; mode < 5; mode++) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0) {
            perror(path);
            return 1;
        }
        double prepare = 0, write = 0;
        char *buf = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        for (size_t off = 0; off < TOTAL; off += CHUNK) {
            double t0 = now();
            char *p = buf;
            if (mode < 2) {
                if (fallocate(fd, 0, off, CHUNK) != 0) perror("fallocate");
                p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
                if (mode == 1 && madvise(p, CHUNK, MADV_POPULATE_WRITE) != 0)
                    perror("madvise");
            }
            double t1 = now();
            fill(p);
            if (mode == 3 && fallocate(fd, 0, off, CHUNK) != 0) perror("fallocate");
            if ((mode == 2 || mode == 3) && pwrite(fd, p, CHUNK, off) != (ssize_t)CHUNK)
                perror("pwrite");
            if (mode < 2) munmap(p, CHUNK);
            double t2 = now();
            prepare += t1 - t0;
            write += t2 - t1;
        }
        printf("%-9s prepare %6.2f ns  write %6.2f ns  per 32 bytes\n", names[mode],
               per32(prepare), per32(write));
        close(fd);
        unlink(path);
    }
    return 0;
}
