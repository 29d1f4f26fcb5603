/*
 * A load of the `shares` benchmark's mixed-length scenarios (issue 15): a C program on NVIDIA's cuda.h
 * launching spin kernels (tools/kernels/spin.ptx; simgpu occupies its engine for the kernel's argument in
 * ns) and synchronizing its stream every few launches, as a program that waits for its results does.
 *
 *   --ns LIST        kernel lengths in ns, comma-separated (e.g. 50000,5000000)
 *   --streams K      with 1 (the default), one thread and one stream cycling through the lengths; with
 *                    K > 1, K threads each with a stream of its own and the length LIST[i % count]
 *   --sync-every N   a cuStreamSynchronize after every N launches on a stream (default 4)
 *   --seconds S      how long to run (default 10)
 *   --device D       device ordinal (default 0)
 *
 * Prints {"scenario":"spin","launches":N} at the end, or {"scenario":"spin","error":..} and status 1.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_SCENARIO "spin"
#include "bench.h"

#define MAX_LENGTHS 16
#define MAX_STREAMS 16

static CUcontext ctx;
static CUfunction spin;
static unsigned long long lengths[MAX_LENGTHS];
static unsigned count, sync_every = 4;
static uint64_t stop_ns;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One stream's work: `first` is the index of its first length, `step` how far it moves per launch
 * (1: cycle through every length; 0: always the same). */
struct worker {
    unsigned first, step;
    unsigned long long launches;
    pthread_t thread;
};

static void *work(void *arg) {
    struct worker *w = arg;
    CUstream stream;
    CU(cuCtxSetCurrent(ctx));
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    unsigned i = w->first;
    while (now_ns() < stop_ns) {
        for (unsigned k = 0; k < sync_every; k++) {
            unsigned long long ns = lengths[i % count];
            void *params[] = {&ns};
            CU(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
            w->launches++;
            i += w->step;
        }
        CU(cuStreamSynchronize(stream));
    }
    CU(cuStreamDestroy(stream));
    return NULL;
}

static const char *value(int argc, char **argv, const char *name) {
    for (int i = 1; i + 1 < argc; i += 2)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return NULL;
}

static unsigned long long number(const char *name, const char *text, unsigned long long low, unsigned long long high) {
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || *end != '\0' || v < low || v > high) fail("%s %s: expected a number from %llu to %llu", name, text, low, high);
    return v;
}

int main(int argc, char **argv) {
    static const char *const known[] = {"--ns", "--streams", "--sync-every", "--seconds", "--device"};
    for (int i = 1; i < argc; i += 2) {
        int ok = 0;
        for (size_t k = 0; k < sizeof known / sizeof *known; k++) ok |= strcmp(argv[i], known[k]) == 0;
        if (!ok || i + 1 >= argc) fail("unknown or incomplete argument %s", argv[i]);
    }
    const char *list = value(argc, argv, "--ns");
    if (!list) fail("--ns is required");
    char copy[512];
    snprintf(copy, sizeof copy, "%s", list);
    for (char *save, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (count == MAX_LENGTHS) fail("--ns: at most %d lengths", MAX_LENGTHS);
        lengths[count++] = number("--ns", tok, 1, 10000000000ull);
    }
    if (count == 0) fail("--ns %s: no length", list);
    const char *text;
    unsigned streams = (text = value(argc, argv, "--streams")) ? (unsigned)number("--streams", text, 1, MAX_STREAMS) : 1;
    if ((text = value(argc, argv, "--sync-every"))) sync_every = (unsigned)number("--sync-every", text, 1, 1000000);
    unsigned long long seconds = (text = value(argc, argv, "--seconds")) ? number("--seconds", text, 1, 86400) : 10;
    int device = (text = value(argc, argv, "--device")) ? (int)number("--device", text, 0, 15) : 0;

    CUdevice dev;
    CUmodule module;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, device));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuModuleLoadData(&module, bench_spin_ptx));
    CU(cuModuleGetFunction(&spin, module, "spin"));
    stop_ns = now_ns() + seconds * 1000000000ull;

    struct worker workers[MAX_STREAMS];
    memset(workers, 0, sizeof workers);
    unsigned long long launches = 0;
    if (streams == 1) {
        workers[0].step = 1;
        work(&workers[0]);
        launches = workers[0].launches;
    } else {
        for (unsigned s = 0; s < streams; s++) {
            workers[s].first = s;
            if (pthread_create(&workers[s].thread, NULL, work, &workers[s]) != 0) fail("pthread_create failed");
        }
        for (unsigned s = 0; s < streams; s++) {
            pthread_join(workers[s].thread, NULL);
            launches += workers[s].launches;
        }
    }
    printf("{\"scenario\":\"spin\",\"launches\":%llu}\n", launches);
    CU(cuModuleUnload(module));
    CU(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
