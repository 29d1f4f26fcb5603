/*
 * Stream-ordered frees and the quota, run by cuda-tests/probe/tests/stream_frees.rs under the shim.
 *
 *   stream_frees owner <bytes> <kernel_ns>
 *       Allocates <bytes> with cuMemAllocAsync on a stream, queues a spin kernel of <kernel_ns> behind it
 *       and cuMemFreeAsync after that, then prints what cuMemGetInfo says ("pending.free", "pending.total")
 *       and "ready". On a line from stdin: prints whether the stream is still busy ("busy 1|0"),
 *       synchronizes it, prints cuMemGetInfo again ("synced.free") and "synced". On a second line (or end
 *       of input): "done ok".
 *   stream_frees peer <bytes>
 *       cuMemAlloc of <bytes>: prints its result ("alloc <code>"), frees it, "done ok".
 *   stream_frees reuse <bytes> <kernel_ns>
 *       cuMemAllocAsync of <bytes>, a spin kernel of <kernel_ns>, cuMemFreeAsync, then cuMemAllocAsync of
 *       <bytes> again on the same stream: prints its result ("again <code>") and, when it succeeded, how
 *       long it took ("again_ns"); frees it, "done ok".
 *   stream_frees captured <bytes>
 *       Allocates <bytes> with cuMemAllocAsync, then frees them with cuMemFreeAsync while the stream is
 *       captured into a graph: prints cuMemGetInfo once the capture ended ("captured.free"), once the graph
 *       ran ("launched.free"), and, after destroying the context, in a new one ("recreated.free").
 *   stream_frees kept <bytes> <threshold> [sync]
 *       Sets the device's default pool's release threshold to <threshold>, allocates <bytes> with
 *       cuMemAllocAsync, frees them with cuMemFreeAsync (cuMemFree with `sync`) and synchronizes the
 *       stream (the pool keeps up to
 *       <threshold> of them): prints cuMemGetInfo ("kept.free") and "kept". On a line from stdin: trims the
 *       pool to nothing with cuMemPoolTrimTo, prints cuMemGetInfo ("trimmed.free") and "trimmed". On a
 *       second line (or end of input): "done ok".
 *   stream_frees churn <seed>
 *       For ever: allocates 1-256 MiB by every path in turn at random (cuMemAlloc, cuMemAllocAsync,
 *       cuMemAllocFromPoolAsync from a pool of its own, cuMemCreate + cuMemMap, cuMemAllocManaged), holds
 *       up to four allocations (its pool keeping up to 128 MiB of what is freed from it), and frees the
 *       oldest by its own path; stream-ordered ones are freed with
 *       cuMemFreeAsync behind a 1-20 ms kernel. A refusal (CUDA_ERROR_OUT_OF_MEMORY) is expected; any
 *       other error ends it. It waits for room in the quota to create its context, and prints how many
 *       allocations each path made so far every 16 rounds ("made <sync> <async> <pool> <vmm> <managed>").
 */
#include "report.h"

#include <cuda.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#ifndef TESSERA_SPIN_PTX
#error "build with -DTESSERA_SPIN_PTX=\"<path to tools/kernels/spin.ptx>\""
#endif
__asm__(".section .rodata\n"
        ".globl stream_frees_spin_ptx\n"
        ".hidden stream_frees_spin_ptx\n"
        "stream_frees_spin_ptx:\n"
        ".incbin \"" TESSERA_SPIN_PTX "\"\n"
        ".byte 0\n"
        ".previous\n");
extern const char stream_frees_spin_ptx[];

#define CU(call)                                                                          \
    do {                                                                                  \
        CUresult result_ = (call);                                                        \
        if (result_ != CUDA_SUCCESS) die("%s = %d", #call, (int)result_);                 \
    } while (0)

static CUfunction spin;
static CUstream stream;
static CUdevice dev;

/* Creates the context; `patient`: waits while the quota has no room for it (a churning process). */
static void set_up(int patient) {
    CUcontext ctx;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CUresult r;
    while ((r = cuCtxCreate(&ctx, 0, dev)) == CUDA_ERROR_OUT_OF_MEMORY && patient) usleep(1000);
    if (r != CUDA_SUCCESS) die("cuCtxCreate = %d", (int)r);
    CUmodule module;
    CU(cuModuleLoadData(&module, stream_frees_spin_ptx));
    CU(cuModuleGetFunction(&spin, module, "spin"));
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
}

static void launch_spin(unsigned long long ns) {
    void *params[] = {&ns};
    CU(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
}

static void wait_line(void) {
    char line[64];
    if (fgets(line, sizeof line, stdin) == NULL) return;
}

static int owner(unsigned long long bytes, unsigned long long kernel_ns) {
    size_t free_b, total;
    CUdeviceptr p;
    CU(cuMemAllocAsync(&p, bytes, stream));
    launch_spin(kernel_ns);
    CU(cuMemFreeAsync(p, stream));
    CU(cuMemGetInfo(&free_b, &total));
    fact("pending.free", "%zu", free_b);
    fact("pending.total", "%zu", total);
    fact("ready", "1");
    fflush(stdout);
    wait_line();
    CUresult q = cuStreamQuery(stream);
    fact("busy", "%d", q == CUDA_ERROR_NOT_READY);
    CU(cuStreamSynchronize(stream));
    CU(cuMemGetInfo(&free_b, &total));
    fact("synced.free", "%zu", free_b);
    fact("synced", "1");
    fflush(stdout);
    wait_line();
    fact("done", "ok");
    return 0;
}

static unsigned long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

static int reuse(unsigned long long bytes, unsigned long long kernel_ns) {
    CUdeviceptr p, q;
    CU(cuMemAllocAsync(&p, bytes, stream));
    launch_spin(kernel_ns);
    CU(cuMemFreeAsync(p, stream));
    unsigned long long start = now_ns();
    CUresult r = cuMemAllocAsync(&q, bytes, stream);
    fact("again", "%d", (int)r);
    if (r == CUDA_SUCCESS) {
        fact("again_ns", "%llu", now_ns() - start);
        CU(cuMemFreeAsync(q, stream));
    }
    CU(cuStreamSynchronize(stream));
    fact("done", "ok");
    return 0;
}

static int captured(unsigned long long bytes) {
    size_t free_b, total;
    CUdeviceptr p;
    CU(cuMemAllocAsync(&p, bytes, stream));
    CU(cuStreamSynchronize(stream));
    CUgraph graph;
    CUgraphExec exec;
    CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cuMemFreeAsync(p, stream));
    CU(cuStreamEndCapture(stream, &graph));
    CU(cuMemGetInfo(&free_b, &total));
    fact("captured.free", "%zu", free_b);
    CU(cuGraphInstantiate(&exec, graph, 0));
    CU(cuGraphLaunch(exec, stream));
    CU(cuStreamSynchronize(stream));
    CU(cuMemGetInfo(&free_b, &total));
    fact("launched.free", "%zu", free_b);
    CUcontext ctx;
    CU(cuCtxGetCurrent(&ctx));
    CU(cuCtxDestroy(ctx));
    CU(cuCtxCreate(&ctx, 0, dev));
    CU(cuMemGetInfo(&free_b, &total));
    fact("recreated.free", "%zu", free_b);
    fact("done", "ok");
    return 0;
}

static int kept(unsigned long long bytes, unsigned long long threshold, int sync) {
    size_t free_b, total;
    CUmemoryPool pool;
    CU(cuDeviceGetDefaultMemPool(&pool, dev));
    cuuint64_t keep = threshold;
    CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    CUdeviceptr p;
    CU(cuMemAllocAsync(&p, bytes, stream));
    if (sync) {
        CU(cuStreamSynchronize(stream));
        CU(cuMemFree(p));
    } else {
        CU(cuMemFreeAsync(p, stream));
    }
    CU(cuStreamSynchronize(stream));
    CU(cuMemGetInfo(&free_b, &total));
    fact("kept.free", "%zu", free_b);
    fact("kept", "1");
    fflush(stdout);
    wait_line();
    CU(cuMemPoolTrimTo(pool, 0));
    CU(cuMemGetInfo(&free_b, &total));
    fact("trimmed.free", "%zu", free_b);
    fact("trimmed", "1");
    fflush(stdout);
    wait_line();
    fact("done", "ok");
    return 0;
}

static int peer(unsigned long long bytes) {
    CUdeviceptr p;
    CUresult r = cuMemAlloc(&p, bytes);
    fact("alloc", "%d", (int)r);
    if (r == CUDA_SUCCESS) CU(cuMemFree(p));
    fact("done", "ok");
    return 0;
}

/* One live allocation of the churn. */
enum path { SYNC, ASYNC, POOL, VMM, MANAGED, PATHS };
struct held {
    enum path path;
    CUdeviceptr ptr;
    size_t bytes;
    CUmemGenericAllocationHandle handle;
};

static uint64_t rng;
static uint64_t next(uint64_t below) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng % below;
}

/* Allocates `bytes` by `path` into *h; returns the driver's answer. */
static CUresult allocate(struct held *h, enum path path, size_t bytes, CUmemoryPool pool, size_t granularity) {
    h->path = path;
    h->bytes = bytes;
    switch (path) {
    case SYNC:
        return cuMemAlloc(&h->ptr, bytes);
    case ASYNC:
        return cuMemAllocAsync(&h->ptr, bytes, stream);
    case POOL:
        return cuMemAllocFromPoolAsync(&h->ptr, bytes, pool, stream);
    case MANAGED:
        return cuMemAllocManaged(&h->ptr, bytes, CU_MEM_ATTACH_GLOBAL);
    case VMM: {
        h->bytes = (bytes + granularity - 1) / granularity * granularity;
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        CUresult r = cuMemCreate(&h->handle, h->bytes, &prop, 0);
        if (r != CUDA_SUCCESS) return r;
        CU(cuMemAddressReserve(&h->ptr, h->bytes, 0, 0, 0));
        CU(cuMemMap(h->ptr, h->bytes, 0, h->handle, 0));
        return CUDA_SUCCESS;
    }
    default:
        die("no path %d", (int)path);
    }
}

static void release(struct held *h) {
    switch (h->path) {
    case SYNC:
    case MANAGED:
        CU(cuMemFree(h->ptr));
        break;
    case ASYNC:
    case POOL:
        /* The memory is in use until the kernel ends: the free waits for it in the stream. */
        launch_spin(1000000ull + next(19000000ull));
        CU(cuMemFreeAsync(h->ptr, stream));
        break;
    case VMM:
        CU(cuMemUnmap(h->ptr, h->bytes));
        CU(cuMemRelease(h->handle));
        CU(cuMemAddressFree(h->ptr, h->bytes));
        break;
    default:
        break;
    }
}

static int churn(unsigned long long seed) {
    rng = seed | 1;
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    CUmemoryPool pool;
    CU(cuMemPoolCreate(&pool, &props));
    /* The pool keeps up to 128 MiB of what is freed from it (the driver holds that memory). */
    cuuint64_t keep = 128ull << 20;
    CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t granularity = 0;
    CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (granularity == 0) granularity = 2u << 20;
    enum { HOLD = 4 };
    struct held held[HOLD];
    int live = 0;
    long made[PATHS] = {0};
    fact("ready", "1");
    fflush(stdout);
    for (unsigned long round = 1;; round++) {
        if (live == HOLD) {
            release(&held[0]);
            memmove(&held[0], &held[1], sizeof held[0] * (HOLD - 1));
            live--;
        }
        enum path path = (enum path)next(PATHS);
        size_t bytes = (size_t)(1 + next(256)) << 20;
        CUresult r = allocate(&held[live], path, bytes, pool, granularity);
        if (r == CUDA_SUCCESS) {
            live++;
            made[path]++;
        } else if (r != CUDA_ERROR_OUT_OF_MEMORY) {
            die("allocation by path %d of %zu bytes = %d", (int)path, bytes, (int)r);
        } else if (live > 0) {
            /* Refused: give back the oldest, as a program short of memory would. */
            release(&held[0]);
            memmove(&held[0], &held[1], sizeof held[0] * (HOLD - 1));
            live--;
        }
        if (round % 16 == 0) {
            fact("made", "%ld %ld %ld %ld %ld", made[SYNC], made[ASYNC], made[POOL], made[VMM], made[MANAGED]);
            fflush(stdout);
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 3) die("usage: stream_frees owner <bytes> <kernel_ns> | peer <bytes> | reuse <bytes> <kernel_ns> | captured <bytes> | churn <seed>");
    set_up(!strcmp(argv[1], "churn"));
    if (!strcmp(argv[1], "owner") && argc == 4) return owner(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
    if (!strcmp(argv[1], "peer")) return peer(strtoull(argv[2], NULL, 0));
    if (!strcmp(argv[1], "reuse") && argc == 4) return reuse(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
    if (!strcmp(argv[1], "captured")) return captured(strtoull(argv[2], NULL, 0));
    if (!strcmp(argv[1], "kept") && (argc == 4 || (argc == 5 && !strcmp(argv[4], "sync"))))
        return kept(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0), argc == 5);
    if (!strcmp(argv[1], "churn")) return churn(strtoull(argv[2], NULL, 0));
    die("unknown mode %s", argv[1]);
}
