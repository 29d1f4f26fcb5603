/* Shared by the host-memory measurements (fresh_page_copy.c, copy_sizes.c, first_touch.c): a monotonic clock
 * in seconds. */
#ifndef TESSERA_HOST_CLOCK_H
#define TESSERA_HOST_CLOCK_H

#include <time.h>

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

#endif
