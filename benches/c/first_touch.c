/* What the first touch of 4 GiB of host memory costs on this host (issue 17: the first checkpoint of a
 * process copies into host memory it never touched before). Each round maps 4 GiB, faults it in
 * (huge pages where the host allows: MADV_HUGEPAGE + MADV_POPULATE_WRITE, as the simulated checkpoint
 * does), unmaps it, and either touches the next mapping at once or after the host had time to take the
 * freed memory back (on a VM with free page reporting, the hypervisor reclaims it within seconds).
 * Build and run: gcc -O2 benches/c/first_touch.c -o /tmp/first_touch && /tmp/first_touch */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include "host_clock.h"
#include <unistd.h>

#define BYTES (4UL << 30)


static double touch(void) {
    char *p = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    double t = seconds();
    madvise(p, BYTES, MADV_HUGEPAGE);
    if (madvise(p, BYTES, MADV_POPULATE_WRITE) != 0)
        perror("MADV_POPULATE_WRITE");
    t = seconds() - t;
    munmap(p, BYTES);
    return t * 1e3;
}

int main(void) {
    for (int round = 0; round < 3; round++) {
        double at_once = touch();
        double again = touch();
        sleep(10);
        double later = touch();
        printf("round %d: fault in 4 GiB %.0f ms, again at once %.0f ms, after 10 s idle %.0f ms\n", round, at_once,
               again, later);
    }
    return 0;
}
