/* The bundled example of scripts/demo.sh: two threads each sort their own array of random
 * integers with a recursive quicksort that hands small ranges to insertion sort, then check
 * the result. A gprof profile shows the calls per function (exact, from both threads) and
 * where the time went. Usage: sort [ELEMENTS]  (default 2000000 per thread) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct job {
    unsigned *data;
    long n;
    unsigned seed;
    int sorted;
};

static unsigned next_random(unsigned *state) {
    *state = *state * 1103515245u + 12345u;
    return *state >> 1;
}

static void fill(struct job *j) {
    for (long i = 0; i < j->n; i++) j->data[i] = next_random(&j->seed);
}

static void insertion_sort(unsigned *a, long n) {
    for (long i = 1; i < n; i++) {
        unsigned v = a[i];
        long k = i;
        for (; k > 0 && a[k - 1] > v; k--) a[k] = a[k - 1];
        a[k] = v;
    }
}

static long partition(unsigned *a, long n) {
    unsigned pivot = a[n / 2];
    long i = -1, k = n;
    for (;;) {
        do i++; while (a[i] < pivot);
        do k--; while (a[k] > pivot);
        if (i >= k) return k + 1;
        unsigned t = a[i];
        a[i] = a[k];
        a[k] = t;
    }
}

static void quicksort(unsigned *a, long n) {
    if (n <= 16) {
        insertion_sort(a, n);
        return;
    }
    long p = partition(a, n);
    quicksort(a, p);
    quicksort(a + p, n - p);
}

static int is_sorted(const unsigned *a, long n) {
    for (long i = 1; i < n; i++)
        if (a[i - 1] > a[i]) return 0;
    return 1;
}

static void *run(void *arg) {
    struct job *j = arg;
    fill(j);
    quicksort(j->data, j->n);
    j->sorted = is_sorted(j->data, j->n);
    return NULL;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    struct job jobs[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        jobs[i] = (struct job){malloc(n * sizeof(unsigned)), n, 42u + i, 0};
        if (!jobs[i].data) return 1;
        pthread_create(&t[i], NULL, run, &jobs[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    printf("sorted 2 x %ld integers: %s\n", n, jobs[0].sorted && jobs[1].sorted ? "ok" : "FAILED");
    return jobs[0].sorted && jobs[1].sorted ? 0 : 1;
}
