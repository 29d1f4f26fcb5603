/*
 * Loads one module image (PTX, cubin or fatbin, from a file) the way the given call takes it, and reports
 * what the driver made of it; run by cuda-tests/probe/tests/e2e/images.rs on the simulated driver.
 *
 *   images FILE CALL     CALL: data (cuModuleLoadData), dataex (cuModuleLoadDataEx), file (cuModuleLoad),
 *                        fatbinary (cuModuleLoadFatBinary), wrapped (cuModuleLoadFatBinary given the
 *                        wrapper nvcc emits), library (cuLibraryLoadData)
 *   images link TYPE:FILE...   links the files (TYPE: ptx, cubin, fatbin, object, library, nvvm) with
 *                        cuLinkCreate/AddData/Complete, then loads the result with cuModuleLoadData
 *
 * Facts: "add <CUresult>" per linked file and "complete <CUresult>" when linking; "load <CUresult>"; once
 * loaded, "kernels <count>", and when the module has vector_add_f32,
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

/* The input type of "TYPE:FILE". */
static CUjitInputType input_type(const char *type, size_t len) {
    static const struct { const char *name; CUjitInputType type; } types[] = {
        {"ptx", CU_JIT_INPUT_PTX},       {"cubin", CU_JIT_INPUT_CUBIN},     {"fatbin", CU_JIT_INPUT_FATBINARY},
        {"object", CU_JIT_INPUT_OBJECT}, {"library", CU_JIT_INPUT_LIBRARY}, {"nvvm", CU_JIT_INPUT_NVVM},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (strlen(types[i].name) == len && !strncmp(types[i].name, type, len)) return types[i].type;
    }
    die("unknown input type %.*s", (int)len, type);
}

/* Links "TYPE:FILE" arguments; the completed image, or NULL when linking failed. */
static void *link_files(int n, char **inputs) {
    CUlinkState state;
    CU(cuLinkCreate(0, 0, 0, &state));
    int failed = 0;
    for (int i = 0; i < n; i++) {
        const char *colon = strchr(inputs[i], ':');
        if (!colon) die("%s is not TYPE:FILE", inputs[i]);
        size_t size;
        void *data = read_file(colon + 1, &size);
        CUresult added = cuLinkAddData(state, input_type(inputs[i], (size_t)(colon - inputs[i])), data, size, 0, 0, 0, 0);
        fact("add", "%d", (int)added);
        failed |= added != CUDA_SUCCESS;
    }
    void *cubin;
    size_t size;
    CUresult completed = cuLinkComplete(state, &cubin, &size);
    fact("complete", "%d", (int)completed);
    if (failed || completed != CUDA_SUCCESS) return 0;
    void *copy = aligned_alloc(8, (size + 7) & ~(size_t)7);
    memcpy(copy, cubin, size);
    CU(cuLinkDestroy(state));
    return copy;
}

int main(int argc, char **argv) {
    if (argc < 3) die("usage: images FILE data|dataex|file|fatbinary|wrapped|library, or images link TYPE:FILE...");
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    const char *path = argv[1], *call = argv[2];
    void *image;
    if (!strcmp(path, "link")) {
        image = link_files(argc - 2, argv + 2);
        if (!image) {
            fact("done", "ok");
            return 0;
        }
        call = "data";
    } else {
        if (argc != 3) die("usage: images FILE data|dataex|file|fatbinary|wrapped|library");
        image = read_file(path, 0);
    }

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
