/* How fast this host's memcpy moves 4 GiB between resident mappings, by the size of each memcpy call
 * (issue 17: the simulated checkpoint copies in chunks; glibc takes a faster path for large copies).
 * Build and run: gcc -O2 benches/c/copy_sizes.c -o /tmp/copy_sizes && /tmp/copy_sizes
 * It needs 8 GiB of free host memory. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "host_clock.h"

#define BYTES (4UL << 30)


static char *resident(int fill, int huge) {
    char *p = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    if (huge)
        madvise(p, BYTES, MADV_HUGEPAGE);
    memset(p, fill, BYTES);
    return p;
}

int main(void) {
    /* The destination as a device allocation (4 KiB pages), the source as a host copy (huge pages). */
    char *dst = resident(1, 0), *src = resident(2, 1);
    static const size_t sizes[] = {8UL << 20, 64UL << 20, 256UL << 20, 1UL << 30, BYTES};
    for (int round = 0; round < 3; round++) {
        printf("round %d:", round);
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            double t = seconds();
            for (size_t at = 0; at < BYTES; at += sizes[i])
                memcpy(dst + at, src + at, sizes[i]);
            printf("  %zu MiB calls %.0f ms", sizes[i] >> 20, (seconds() - t) * 1e3);
        }
        printf("\n");
    }
    return 0;
}
