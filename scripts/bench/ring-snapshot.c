/* How long instrfn_snapshot() takes in ring mode (scripts/bench/ring.py builds and runs it).
 *   usage: ring-snapshot T MS idle|busy K
 * T worker threads each call work_a() and work_b() in a loop for MS ms, so every ring is full
 * and has gone round. Then main calls instrfn_snapshot() K times and prints each one's wall
 * time in µs, one line per snapshot: "snapshot <k> <result> <µs>".
 *   idle  the workers wait on a condition variable during the snapshots;
 *   busy  they keep calling, so chunks are rewritten during the copy (see the window lines).
 * Built in two parts: -DWORKERS with -pg (the instrumented workers), and main without -pg,
 * so main has no ring of its own and the snapshot copies exactly T rings. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Shared by the two parts. */
extern volatile int parked, stopping, keep_busy;
void *worker(void *arg);
void wait_parked(void);

#ifdef WORKERS

static volatile unsigned long sink;

__attribute__((noinline, noclone)) unsigned long work_a(unsigned long x) {
    __asm__ volatile("" : "+r"(x));
    return x * 3 + 1;
}

__attribute__((noinline, noclone)) unsigned long work_b(unsigned long x) {
    __asm__ volatile("" : "+r"(x));
    return x ^ 0x5555;
}

void *worker(void *arg) {
    unsigned long acc = (unsigned long)arg;
    for (unsigned long i = 0; !stopping; i++) {
        if (parked && !keep_busy) {
            wait_parked();
            break;
        }
        acc += work_a(i);
        acc ^= work_b(acc);
    }
    sink += acc;
    return NULL;
}

#else

extern int instrfn_snapshot(void) __attribute__((weak));

volatile int parked, stopping, keep_busy;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;

void wait_parked(void) {
    pthread_mutex_lock(&lock);
    while (!stopping)
        pthread_cond_wait(&wake, &lock);
    pthread_mutex_unlock(&lock);
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc != 5 || !instrfn_snapshot) {
        fprintf(stderr, "usage: ring-snapshot T MS idle|busy K (preloaded, INSTRFN_MODE=ring)\n");
        return 2;
    }
    int t = atoi(argv[1]), ms = atoi(argv[2]), k = atoi(argv[4]);
    keep_busy = strcmp(argv[3], "busy") == 0;
    pthread_t th[64];
    if (t < 1 || t > 64 || ms < 0 || k < 1)
        return 2;
    for (long i = 0; i < t; i++)
        pthread_create(&th[i], NULL, worker, (void *)i);
    usleep(ms * 1000);
    parked = 1;
    usleep(20000); /* every worker reaches wait_parked (or goes on, if busy) */
    for (int i = 1; i <= k; i++) {
        double t0 = now_us();
        int r = instrfn_snapshot();
        double t1 = now_us();
        printf("snapshot %d %d %.0f\n", i, r, t1 - t0);
        fflush(stdout);
    }
    pthread_mutex_lock(&lock);
    stopping = 1;
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < t; i++)
        pthread_join(th[i], NULL);
    return 0;
}

#endif
