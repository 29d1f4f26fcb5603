/*
 * Loads one module image (PTX, cubin or fatbin, from a file) the way the given call takes it, and reports
 * what the driver made of it; run by cuda-tests/probe/tests/e2e/images.rs on the simulated driver.
 *
 *   images FILE CALL     CALL: data (cuModuleLoadData), dataex (cuModuleLoadDataEx), file (cuModuleLoad),
 *                        fatbinary (cuModuleLoadFatBinary), wrapped (cuModuleLoadFatBinary given the
 *                        wrapper nvcc emits), library (cuLibraryLoadData)
 *
 * Facts: "load <CUresult>"; once loaded, "kernels <count>", and when the module has vector_add_f32,
 * "param<i> <offset> <size>" for each of its parameters (cuFuncGetParamInfo) and "sum ok" once a launch of
 * it added two vectors; "done ok" last.
 */
#include "report.h"

#include <cuda.h>
#include <stdint.h>

#define CU(call)                                                          \
    do {                                                                  \
        CUresult result_ = (call);                                        \
        if (result_ != CUDA_SUCCESS) die("%s = %d", #call, (int)result_); \
    } while (0)

#define N 256

/* The whole file, NUL-terminated (PTX is text), 8-byte aligned (a wrapper points at it). */
static void *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = aligned_alloc(8, ((size_t)len + 8) & ~(size_t)7);
    if (!data || fread(data, 1, (size_t)len, f) != (size_t)len) die("cannot read %s", path);
    data[len] = 0;
    fclose(f);
    return data;
}

/* Adds two vectors with the module's vector_add_f32 and checks the sums. */
static void add(CUfunction f) {
    float a[N], b[N], c[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = 2.0f * (float)i;
    }
    CUdeviceptr da, db, dc;
    CU(cuMemAlloc(&da, sizeof a));
    CU(cuMemAlloc(&db, sizeof b));
    CU(cuMemAlloc(&dc, sizeof c));
    CU(cuMemcpyHtoD(da, a, sizeof a));
    CU(cuMemcpyHtoD(db, b, sizeof b));
    uint64_t n = N;
    void *args[] = {&da, &db, &dc, &n};
    CU(cuLaunchKernel(f, 1, 1, 1, N, 1, 1, 0, 0, args, 0));
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH(c, dc, sizeof c));
    for (int i = 0; i < N; i++) {
        if (c[i] != 3.0f * (float)i) die("c[%d] = %f, not %f", i, c[i], 3.0f * (float)i);
    }
    fact("sum", "ok");
}

int main(int argc, char **argv) {
    if (argc != 3) die("usage: images FILE data|dataex|file|fatbinary|wrapped|library");
    const char *path = argv[1], *call = argv[2];
    void *image = read_file(path);
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));

    CUmodule module = 0;
    CUlibrary library = 0;
    CUresult loaded;
    /* nvcc's __fatBinC_Wrapper_t: magic, version, the container, no file name. */
    struct { uint32_t magic, version; const void *data; const void *name; } wrapper = {0x466243B1u, 1, image, 0};
    if (!strcmp(call, "data")) loaded = cuModuleLoadData(&module, image);
    else if (!strcmp(call, "dataex")) loaded = cuModuleLoadDataEx(&module, image, 0, 0, 0);
    else if (!strcmp(call, "file")) loaded = cuModuleLoad(&module, path);
    else if (!strcmp(call, "fatbinary")) loaded = cuModuleLoadFatBinary(&module, image);
    else if (!strcmp(call, "wrapped")) loaded = cuModuleLoadFatBinary(&module, &wrapper);
    else if (!strcmp(call, "library")) loaded = cuLibraryLoadData(&library, image, 0, 0, 0, 0, 0, 0);
    else die("unknown call %s", call);
    fact("load", "%d", (int)loaded);
    if (loaded != CUDA_SUCCESS) {
        fact("done", "ok");
        return 0;
    }

    unsigned count = 0;
    CUfunction add_f = 0;
    if (library) {
        CU(cuLibraryGetKernelCount(&count, library));
        CUkernel k;
        if (cuLibraryGetKernel(&k, library, "vector_add_f32") == CUDA_SUCCESS) CU(cuKernelGetFunction(&add_f, k));
    } else {
        CU(cuModuleGetFunctionCount(&count, module));
        if (cuModuleGetFunction(&add_f, module, "vector_add_f32") != CUDA_SUCCESS) add_f = 0;
    }
    fact("kernels", "%u", count);
    if (add_f) {
        size_t offset, size;
        for (size_t i = 0; cuFuncGetParamInfo(add_f, i, &offset, &size) == CUDA_SUCCESS; i++) {
            fact("param", "%zu %zu %zu", i, offset, size);
        }
        add(add_f);
    }
    fact("done", "ok");
    return 0;
}
