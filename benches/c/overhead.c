/*
 * The measuring client of `benches/src/bin/overhead.rs`: a CUDA program compiled against NVIDIA's cuda.h
 * and linked to libcuda.so.1, timing the calls a launch-bound program makes, so that running it natively
 * and under the shim tells what the shim adds to each.
 *
 * Operations, each run in batches of BATCH (default 100) after three batches of warm-up:
 *   launch      cuLaunchKernel of an empty kernel (spin(0)) on a created stream, a cuStreamSynchronize
 *               after every batch;
 *   launch_ex   the same with cuLaunchKernelEx;
 *   graph       cuGraphLaunch of a graph of one empty kernel (captured once from the stream), synced the
 *               same way;
 *   alloc_256 / alloc_1m   cuMemAlloc + cuMemFree pairs of 256 B and 1 MiB;
 *   event_record  cuEventRecord of a timed event on the stream (synced after every batch), and
 *   event_query   cuEventQuery of it once complete: the bare costs of the shim's per-launch measurement.
 * A batch's figure is the time of its calls over their number, without the sync: the sync waits for the
 * simulated engine to run the batch, which is the engine's time, not the calls'. Printed per operation:
 * the median batch (and p90, mean), and the wall time per operation with the syncs.
 *
 * Driver calls: the simulated driver counts every driver call, per thread and per process
 * (`simgpu_driver_calls`, simulator instrumentation found with dlsym; the real driver has no such symbol
 * and the program then prints "counted":false). Around each operation's measured batches the program
 * reads both counts; what the calling thread's count rose by, minus the calls the program made itself
 * (own_calls), is what an interposer made on its thread; what the process count rose by beyond the
 * thread's, other threads made meanwhile.
 *
 * Prints one JSON line: {"scenario":"overhead","device":D,"counted":B,"batch":N,"ops":[{"op":..,
 * "count":N,"median_ns":..,"own_calls":..,"thread_calls":..,"process_calls":..}, ...]}, or
 * {"scenario":"overhead","error":..} and exit status 1.
 *
 * Usage: overhead [--device N] [--launches N (40000)] [--batch N (100)] [--pairs N (20000)] [--events N (20000)]
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_SCENARIO "overhead"
#include "bench.h"

typedef int (*driver_calls_fn)(uint64_t *thread, uint64_t *process);
static driver_calls_fn driver_calls;

struct counts {
    uint64_t thread, process;
};

static struct counts read_counts(void) {
    struct counts c = {0, 0};
    if (driver_calls) driver_calls(&c.thread, &c.process);
    return c;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* What the timed operations share. */
struct bench {
    CUstream stream;
    CUfunction spin;
    CUgraphExec graph;
    CUevent event;
    unsigned long long zero;
    void *params[1];
    unsigned batch;
};

enum op { LAUNCH, LAUNCH_EX, GRAPH, ALLOC_256, ALLOC_1M, EVENT_RECORD, EVENT_QUERY };
static const char *const OP_NAMES[] = {"launch",   "launch_ex",    "graph",      "alloc_256",
                                       "alloc_1m", "event_record", "event_query"};

/* Runs one batch of `n` operations of kind `op` (launches followed by one cuStreamSynchronize); adds the
 * driver calls the program made itself to `own`, and returns the time of the calls, without the sync. */
static uint64_t batch(struct bench *b, enum op op, unsigned n, uint64_t *own) {
    CUlaunchConfig config;
    memset(&config, 0, sizeof config);
    config.gridDimX = config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = config.blockDimY = config.blockDimZ = 1;
    config.hStream = b->stream;
    uint64_t t0 = now_ns();
    for (unsigned i = 0; i < n; i++) {
        switch (op) {
        case LAUNCH:
            CU(cuLaunchKernel(b->spin, 1, 1, 1, 1, 1, 1, 0, b->stream, b->params, NULL));
            break;
        case LAUNCH_EX:
            CU(cuLaunchKernelEx(&config, b->spin, b->params, NULL));
            break;
        case GRAPH:
            CU(cuGraphLaunch(b->graph, b->stream));
            break;
        case ALLOC_256:
        case ALLOC_1M: {
            CUdeviceptr p;
            CU(cuMemAlloc(&p, op == ALLOC_256 ? 256 : 1 << 20));
            CU(cuMemFree(p));
            *own += 1;
            break;
        }
        case EVENT_RECORD:
            CU(cuEventRecord(b->event, b->stream));
            break;
        case EVENT_QUERY:
            CU(cuEventQuery(b->event));
            break;
        }
    }
    uint64_t took = now_ns() - t0;
    *own += n;
    if (op < ALLOC_256 || op == EVENT_RECORD) {
        CU(cuStreamSynchronize(b->stream));
        *own += 1;
    }
    return took;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Times `total` operations of kind `op` in batches and prints the op's JSON object. */
static void measure(struct bench *b, enum op op, unsigned total) {
    unsigned batches = total / b->batch ? total / b->batch : 1;
    double *per = malloc(batches * sizeof *per);
    if (!per) fail("out of host memory");
    uint64_t own = 0, warm = 0;
    /* Warm-up: first-use costs (lazy resolution, the shim's first sight of the stream) stay out. */
    for (int k = 0; k < 3; k++) batch(b, op, b->batch, &warm);
    struct counts before = read_counts();
    uint64_t calls_ns = 0, t0 = now_ns();
    for (unsigned k = 0; k < batches; k++) {
        uint64_t took = batch(b, op, b->batch, &own);
        calls_ns += took;
        per[k] = (double)took / b->batch;
    }
    uint64_t wall = now_ns() - t0;
    struct counts after = read_counts();
    qsort(per, batches, sizeof *per, by_value);
    unsigned n = batches * b->batch;
    printf("%s{\"op\":\"%s\",\"count\":%u,\"batches\":%u,\"median_ns\":%.2f,\"p90_ns\":%.2f,\"mean_ns\":%.2f,"
           "\"wall_ns_per_op\":%.2f,\"own_calls\":%llu,\"thread_calls\":%llu,\"process_calls\":%llu}",
           op ? "," : "", OP_NAMES[op], n, batches, per[batches / 2], per[batches * 9 / 10],
           (double)calls_ns / n, (double)wall / n, (unsigned long long)own,
           (unsigned long long)(after.thread - before.thread), (unsigned long long)(after.process - before.process));
    free(per);
}

static unsigned arg(int argc, char **argv, const char *name, unsigned fallback) {
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], name) == 0) {
            char *end;
            unsigned long v = strtoul(argv[i + 1], &end, 10);
            if (*end != '\0' || v == 0 || v > 100000000ul) fail("%s %s: expected a count from 1 to 10^8", name, argv[i + 1]);
            return (unsigned)v;
        }
    }
    return fallback;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i += 2) {
        static const char *const known[] = {"--device", "--launches", "--batch", "--pairs", "--events"};
        int ok = 0;
        for (size_t k = 0; k < sizeof known / sizeof *known; k++) ok |= strcmp(argv[i], known[k]) == 0;
        if (!ok || i + 1 >= argc) fail("unknown or incomplete argument %s", argv[i]);
    }
    /* --device is an ordinal from 0, parsed apart from the counts (which start at 1). */
    int device = 0;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--device") == 0) {
            char *end;
            long v = strtol(argv[i + 1], &end, 10);
            if (*end != '\0' || v < 0 || v > 15) fail("--device %s: expected an ordinal from 0 to 15", argv[i + 1]);
            device = (int)v;
        }
    unsigned launches = arg(argc, argv, "--launches", 40000);
    unsigned pairs = arg(argc, argv, "--pairs", 20000);
    unsigned events = arg(argc, argv, "--events", 20000);
    struct bench b;
    memset(&b, 0, sizeof b);
    b.batch = arg(argc, argv, "--batch", 100);

    driver_calls = (driver_calls_fn)dlsym(RTLD_DEFAULT, "simgpu_driver_calls");

    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUgraph graph;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, device));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuStreamCreate(&b.stream, CU_STREAM_NON_BLOCKING));
    CU(cuModuleLoadData(&module, bench_spin_ptx));
    CU(cuModuleGetFunction(&b.spin, module, "spin"));
    b.zero = 0;
    b.params[0] = &b.zero;
    CU(cuStreamBeginCapture(b.stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cuLaunchKernel(b.spin, 1, 1, 1, 1, 1, 1, 0, b.stream, b.params, NULL));
    CU(cuStreamEndCapture(b.stream, &graph));
    CU(cuGraphInstantiate(&b.graph, graph, 0));
    /* A timed event, as the shim records behind a launch it measures: the bare cost of recording one
     * and of querying it once complete. */
    CU(cuEventCreate(&b.event, CU_EVENT_DEFAULT));
    CU(cuEventRecord(b.event, b.stream));
    CU(cuStreamSynchronize(b.stream));

    printf("{\"scenario\":\"overhead\",\"device\":%d,\"counted\":%s,\"batch\":%u,\"ops\":[", device,
           driver_calls ? "true" : "false", b.batch);
    for (int op = LAUNCH; op <= EVENT_QUERY; op++)
        measure(&b, (enum op)op, op >= EVENT_RECORD ? events : op >= ALLOC_256 ? pairs : launches);
    printf("]}\n");
    CU(cuGraphExecDestroy(b.graph));
    CU(cuGraphDestroy(graph));
    CU(cuModuleUnload(module));
    CU(cuStreamDestroy(b.stream));
    CU(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
