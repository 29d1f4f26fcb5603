/*
 * Allocations follow the calling thread's current context as it changes, run by
 * cuda-tests/probe/tests/current_context.rs under the shim with a memory quota on two devices.
 *
 * The shim caches each thread's current context and device until a context call changes them, so every
 * way of changing it is taken here between allocations of distinct sizes: cuCtxCreate (the new context
 * becomes current), cuCtxPopCurrent, cuCtxPushCurrent, cuCtxSetCurrent, a second thread changing its own
 * context meanwhile, and cuCtxDestroy of the current context. Prints what each device's quota shows in
 * use ("used.<device>", from cuMemGetInfo in a context of that device, relative to the start) after the
 * allocations ("alloc.") and after freeing them all from the other device's context ("freed."), and the
 * allocation with no context current ("no_context <code>").
 */
#include "report.h"

#include <cuda.h>
#include <pthread.h>

#define CU(call)                                                                          \
    do {                                                                                  \
        CUresult result_ = (call);                                                        \
        if (result_ != CUDA_SUCCESS) die("%s = %d", #call, (int)result_);                 \
    } while (0)

#define MIB ((size_t)1 << 20)

static CUcontext ctx[2];

/* Bytes the quota shows free in context `c` (made current for the query, then popped). */
static size_t free_in(CUcontext c) {
    size_t free_bytes = 0, total = 0;
    CUcontext popped;
    CU(cuCtxPushCurrent(c));
    CU(cuMemGetInfo(&free_bytes, &total));
    CU(cuCtxPopCurrent(&popped));
    return free_bytes;
}

/* Another thread: binds device 1's context and allocates there, while the main thread holds device 0's. */
static void *other_thread(void *arg) {
    CUdeviceptr *p = arg;
    CU(cuCtxSetCurrent(ctx[1]));
    CU(cuMemAlloc(p, 32 * MIB));
    return NULL;
}

int main(void) {
    CUdevice dev[2];
    CUdeviceptr p[7];
    CU(cuInit(0));
    CU(cuDeviceGet(&dev[0], 0));
    CU(cuDeviceGet(&dev[1], 1));
    CU(cuCtxCreate(&ctx[0], 0, dev[0]));
    CU(cuCtxCreate(&ctx[1], 0, dev[1])); /* pushed: device 1 current */
    size_t start[2] = {free_in(ctx[0]), free_in(ctx[1])};

    CU(cuMemAlloc(&p[0], 1 * MIB)); /* device 1 */
    CUcontext popped;
    CU(cuCtxPopCurrent(&popped)); /* device 0 current */
    CU(cuMemAlloc(&p[1], 2 * MIB));
    CU(cuCtxPushCurrent(ctx[1]));
    CU(cuMemAlloc(&p[2], 4 * MIB)); /* device 1 */
    CU(cuCtxSetCurrent(ctx[0]));
    CU(cuMemAlloc(&p[3], 8 * MIB)); /* device 0 */
    pthread_t t;
    if (pthread_create(&t, NULL, other_thread, &p[4]) != 0) die("pthread_create");
    pthread_join(t, NULL);
    CU(cuMemAlloc(&p[5], 16 * MIB)); /* still device 0 on this thread */
    fact("alloc.used.0", "%zu", start[0] - free_in(ctx[0]));
    fact("alloc.used.1", "%zu", start[1] - free_in(ctx[1]));

    /* Freed with the other device's context current: each goes back to the device it was charged on. */
    CU(cuCtxSetCurrent(ctx[1]));
    for (int i = 0; i < 6; i++) CU(cuMemFree(p[i]));
    fact("freed.used.0", "%zu", start[0] - free_in(ctx[0]));
    fact("freed.used.1", "%zu", start[1] - free_in(ctx[1]));

    /* Destroying the current context leaves none current: the driver refuses the allocation itself. */
    CU(cuCtxSetCurrent(ctx[0]));
    CU(cuCtxDestroy(ctx[1]));
    CU(cuCtxPopCurrent(&popped));
    CU(cuCtxDestroy(ctx[0]));
    fact("no_context", "%d", (int)cuMemAlloc(&p[6], 1 * MIB));
    fact("done", "ok");
    return 0;
}
