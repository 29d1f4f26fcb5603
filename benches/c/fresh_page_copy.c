/* What a copy into memory that was given back to the host costs on this host (issue 17, resume bound).
 *
 * The simulated device's memory is host memory: a checkpoint gives the device pages back to the kernel,
 * and a restore must take fresh ones, which the kernel zeroes before the copy can fill them. This
 * program times, on 4 GiB in huge pages where the host allows them:
 *   - a copy into resident pages (what the HtoD baseline does);
 *   - the same copy into pages released first, a second thread faulting them in 64 MiB chunks ahead of
 *     the copy (what the simulated restore does);
 *   - the zero-filling of 4 GiB of released pages alone.
 * Build and run: gcc -O2 -pthread benches/c/fresh_page_copy.c -o /tmp/fresh_page_copy && /tmp/fresh_page_copy
 * It needs 8 GiB of free host memory. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include "host_clock.h"

#define BYTES (4UL << 30)
#define CHUNK (64UL << 20)
#define CHUNKS (BYTES / CHUNK)
#define AHEAD 2

static char *target;
static size_t prepared; /* chunks faulted in so far; written by the preparer, read by the copier */
static size_t copied;   /* chunks copied so far; the preparer stays at most AHEAD chunks ahead */


static char *huge_mapping(size_t bytes) {
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

static void *prepare(void *unused) {
    (void)unused;
    for (size_t k = 0; k < CHUNKS; k++) {
        while (k > __atomic_load_n(&copied, __ATOMIC_ACQUIRE) + AHEAD) {
        }
        madvise(target + k * CHUNK, CHUNK, MADV_POPULATE_WRITE);
        __atomic_store_n(&prepared, k + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

int main(void) {
    char *source = huge_mapping(BYTES);
    memset(source, 1, BYTES);
    target = huge_mapping(BYTES);
    memset(target, 0, BYTES);
    for (int round = 0; round < 3; round++) {
        double t = seconds();
        memcpy(target, source, BYTES);
        double resident = seconds() - t;

        madvise(target, BYTES, MADV_DONTNEED);
        prepared = copied = 0;
        pthread_t preparer;
        t = seconds();
        pthread_create(&preparer, NULL, prepare, NULL);
        for (size_t k = 0; k < CHUNKS; k++) {
            while (__atomic_load_n(&prepared, __ATOMIC_ACQUIRE) <= k) {
            }
            memcpy(target + k * CHUNK, source + k * CHUNK, CHUNK);
            __atomic_store_n(&copied, k + 1, __ATOMIC_RELEASE);
        }
        pthread_join(preparer, NULL);
        double fresh = seconds() - t;

        madvise(target, BYTES, MADV_DONTNEED);
        t = seconds();
        madvise(target, BYTES, MADV_POPULATE_WRITE);
        double zero = seconds() - t;
        printf("round %d: copy into resident pages %.0f ms; into released pages prepared alongside %.0f ms "
               "(%.0f%% of the resident copy's bandwidth); zero-filling alone %.0f ms\n",
               round, resident * 1e3, fresh * 1e3, 100 * resident / fresh, zero * 1e3);
    }
    return 0;
}
