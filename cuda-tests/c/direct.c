/*
 * Direct linking: a program compiled against NVIDIA's cuda.h and linked to libcuda.so.1, calling the driver
 * API by name as any CUDA C program does. Built once normally and once with
 * -DCUDA_API_PER_THREAD_DEFAULT_STREAM=1, where cuda.h renames the stream-ordered calls to their
 * _ptsz/_ptds entry points.
 *
 * Prints where each called function resolved ("address.<exported name> object:symbol") and what
 * cuGetProcAddress answers for two of them ("proc_address.<name> object:symbol"), the memory figures,
 * the result of an allocation just above argv[1] bytes (the quota under test, if given), and whether a
 * vector_add_f32 kernel loaded from PTX computed the right sums.
 *
 * Built against the cuda.h of CUDA 12 or 13: what each makes of the same source (CUDA 13 maps cuCtxCreate
 * to cuCtxCreate_v4) is what a program of that version calls; "cuda_version" says which header it was.
 *
 * Usage: direct [quota-bytes]
 */
#include "report.h"

#include <cuda.h>

#define SPELLED(name) #name
/* The exported name a call compiles to (cuda.h's macros expanded). */
#define EXPORTED(name) SPELLED(name)
#define ADDRESS(fn) fact("address." EXPORTED(fn), "%s", where((const void *)&fn))
#define CU(call)                                                                          \
    do {                                                                                  \
        CUresult result_ = (call);                                                        \
        if (result_ != CUDA_SUCCESS) die("%s = %d", EXPORTED(call), (int)result_);        \
    } while (0)

#include "kernels.h"

static void report_addresses(void) {
    ADDRESS(cuInit);
    ADDRESS(cuDriverGetVersion);
    ADDRESS(cuDeviceGet);
    ADDRESS(cuDeviceTotalMem);
    ADDRESS(cuCtxCreate);
    ADDRESS(cuCtxDestroy);
    ADDRESS(cuMemGetInfo);
    ADDRESS(cuMemAlloc);
    ADDRESS(cuMemFree);
    ADDRESS(cuMemAllocAsync);
    ADDRESS(cuMemFreeAsync);
    ADDRESS(cuMemcpyHtoD);
    ADDRESS(cuMemcpyHtoDAsync);
    ADDRESS(cuMemcpyDtoH);
    ADDRESS(cuStreamCreate);
    ADDRESS(cuStreamSynchronize);
    ADDRESS(cuModuleLoadData);
    ADDRESS(cuModuleGetFunction);
    ADDRESS(cuLaunchKernel);
}

/* What cuGetProcAddress answers this build for `symbol` with default flags: in a per-thread build,
 * cuda.h's inline cuGetProcAddress_v2_ptsz turns them into a per-thread request. */
static void report_proc_address(const char *symbol) {
    void *pfn = NULL;
    CUdriverProcAddressQueryResult status;
    CU(cuGetProcAddress(symbol, &pfn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status));
    char key[128];
    snprintf(key, sizeof key, "proc_address.%s", symbol);
    fact(key, "%s", where(pfn));
}

/* Allocating just above the quota must fail once quotas are enforced; below the device's size it
 * succeeds without one. */
static void over_quota(size_t quota) {
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc(&p, quota + (64u << 20));
    fact("over_quota_alloc", "%d", (int)r);
    if (r == CUDA_SUCCESS) CU(cuMemFree(p));
}

int main(int argc, char **argv) {
    report_addresses();
    report_proc_address("cuMemAllocAsync");
    report_proc_address("cuLaunchKernel");
    CU(cuInit(0));
    int version = 0;
    CU(cuDriverGetVersion(&version));
    fact("driver_version", "%d", version);
    fact("cuda_version", "%d", CUDA_VERSION);
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
#if CUDA_VERSION >= 13000
    /* CUDA 13's cuda.h makes cuCtxCreate cuCtxCreate_v4, which takes creation parameters (none here). */
    CU(cuCtxCreate(&ctx, NULL, 0, dev));
#else
    CU(cuCtxCreate(&ctx, 0, dev));
#endif
    size_t free_bytes = 0, total_bytes = 0, device_bytes = 0;
    CU(cuMemGetInfo(&free_bytes, &total_bytes));
    CU(cuDeviceTotalMem(&device_bytes, dev));
    fact("mem_total", "%zu", total_bytes);
    fact("mem_free", "%zu", free_bytes);
    fact("device_total", "%zu", device_bytes);
    if (argc > 1) over_quota(strtoull(argv[1], NULL, 10));

    enum { N = 100000 };
    const size_t bytes = N * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    if (!a || !b || !c) die("host allocation");
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = 0.5f * (float)i;
        c[i] = -1.0f;
    }
    CUstream stream;
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUdeviceptr da, db, dc;
    CU(cuMemAlloc(&da, bytes));
    CU(cuMemAllocAsync(&db, bytes, 0)); /* the default stream: legacy or per-thread, as built */
    CU(cuMemAllocAsync(&dc, bytes, stream));
    CU(cuStreamSynchronize(stream));
    CU(cuMemcpyHtoD(da, a, bytes));
    CU(cuMemcpyHtoDAsync(db, b, bytes, 0));

    CUmodule module;
    CUfunction vector_add;
    CU(cuModuleLoadData(&module, tessera_kernels_ptx));
    CU(cuModuleGetFunction(&vector_add, module, "vector_add_f32"));
    unsigned long long n = N;
    void *params[] = {&da, &db, &dc, &n};
    CU(cuLaunchKernel(vector_add, (N + 255) / 256, 1, 1, 256, 1, 1, 0, 0, params, NULL));
    CU(cuStreamSynchronize(0));
    CU(cuMemcpyDtoH(c, dc, bytes));
    int wrong = -1;
    for (int i = 0; i < N && wrong < 0; i++)
        if (c[i] != a[i] + b[i]) wrong = i;
    if (wrong < 0)
        fact("vector_add", "ok");
    else
        fact("vector_add", "wrong at %d: %g + %g = %g", wrong, a[wrong], b[wrong], c[wrong]);

    CU(cuMemFreeAsync(dc, stream));
    CU(cuMemFreeAsync(db, 0));
    CU(cuStreamSynchronize(stream));
    CU(cuStreamSynchronize(0));
    CU(cuMemFree(da));
    CU(cuModuleUnload(module));
    CU(cuStreamDestroy(stream));
    CU(cuCtxDestroy(ctx));
    free(a);
    free(b);
    free(c);
    fact("done", "ok");
    return 0;
}
