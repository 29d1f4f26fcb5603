/*
 * NVIDIA's CUDA runtime (libcudart.so.12 from the PyPI package nvidia-cuda-runtime-cu12, or with
 * -DCUDART_MAJOR=13 libcudart.so.13 from nvidia-cuda-runtime 13.x), unmodified, on the driver underneath;
 * run by cuda-tests/probe/tests/e2e/cudart.rs on the simulated driver.
 *
 *   cudart FATBIN [PRELINKED]
 *       FATBIN: a fatbin container holding the test kernels, registered as nvcc's generated code registers
 *       its own (__cudaRegisterFatBinary, __cudaRegisterFunction); with PRELINKED (a container of the
 *       relocatable kernels), in a version 2 wrapper listing it, as nvcc registers a program built with
 *       -rdc (FATBIN its device-linked image, PRELINKED what it was linked from)
 *
 * Facts: "runtime" (cudaRuntimeGetVersion), "count", "name", "memory" (cudaGetDeviceProperties), "major",
 * "minor" (cudaDeviceGetAttribute), "copy ok" (cudaMalloc, cudaMemcpy both ways), "kernel ok"
 * (vector_add_f32 launched through the runtime by its host stub), "graph ok" (the launch captured from a stream into a graph, instantiated and replayed twice), "done ok".
 */
#include "report.h"

#include <stdint.h>

/* The runtime's API as cuda_runtime_api.h declares it (the PyPI package ships that header without the
 * crt/ headers it includes, so the few calls used are declared here, with their C ABI types). */
typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaGraph_t;
typedef void *cudaGraphExec_t;
typedef struct { unsigned x, y, z; } dim3;
typedef struct { unsigned x, y, z; } uint3;
enum { cudaSuccess = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaStreamNonBlocking = 1 };
enum { cudaStreamCaptureModeGlobal = 0, cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76 };
extern const char *cudaGetErrorName(cudaError_t error);
extern cudaError_t cudaGetDeviceCount(int *count);
extern cudaError_t cudaRuntimeGetVersion(int *version);
#ifndef CUDART_MAJOR
#define CUDART_MAJOR 12
#endif
/* 12.x exports the properties as cudaGetDeviceProperties_v2 (its header renames the call); 13.x, whose
 * cudaDeviceProp lost its deprecated fields, as cudaGetDeviceProperties. */
#if CUDART_MAJOR >= 13
extern cudaError_t cudaGetDeviceProperties(void *prop, int device);
#define get_properties cudaGetDeviceProperties
#else
extern cudaError_t cudaGetDeviceProperties_v2(void *prop, int device);
#define get_properties cudaGetDeviceProperties_v2
#endif
extern cudaError_t cudaDeviceGetAttribute(int *value, int attr, int device);
extern cudaError_t cudaMalloc(void **ptr, size_t size);
extern cudaError_t cudaFree(void *ptr);
extern cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, int kind);
extern cudaError_t cudaMemset(void *ptr, int value, size_t count);
extern cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared,
                                    cudaStream_t stream);
extern cudaError_t cudaDeviceSynchronize(void);
extern cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags);
extern cudaError_t cudaStreamDestroy(cudaStream_t stream);
extern cudaError_t cudaStreamSynchronize(cudaStream_t stream);
extern cudaError_t cudaStreamBeginCapture(cudaStream_t stream, int mode);
extern cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph);
extern cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags);
extern cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
extern cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
extern cudaError_t cudaGraphDestroy(cudaGraph_t graph);

#define RT(call)                                                                                 \
    do {                                                                                         \
        cudaError_t result_ = (call);                                                            \
        if (result_ != cudaSuccess) die("%s = %d (%s)", #call, (int)result_, cudaGetErrorName(result_)); \
    } while (0)

/* What nvcc's generated host code calls to register its fatbin and kernels (exported by libcudart). */
extern void **__cudaRegisterFatBinary(void *fat_cubin);
extern void __cudaRegisterFatBinaryEnd(void **handle);
extern void __cudaRegisterFunction(void **handle, const char *host_fun, char *device_fun, const char *device_name,
                                   int thread_limit, uint3 *tid, uint3 *bid, dim3 *block, dim3 *grid, int *warp_size);

#define N 1024

static dim3 dim3_of(unsigned x) {
    dim3 d = {x, 1, 1};
    return d;
}

/* The host stub the kernel is registered under: its address names the kernel to the runtime. */
static void vector_add_stub(void) {}

static void check_sums(const float *dc, const float *a, const float *b, const char *what) {
    float c[N];
    RT(cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) {
        if (c[i] != a[i] + b[i]) die("%s: c[%d] = %f, not %f", what, i, c[i], a[i] + b[i]);
    }
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) die("usage: cudart FATBIN [PRELINKED]");
    /* nvcc's __fatBinC_Wrapper_t around the container: version 1 names an offline file (none here),
     * version 2 a NULL-terminated array of relocatable fatbins. */
    static struct { uint32_t magic, version; const void *data; const void *name_or_fatbins; } wrapper = {0x466243B1u, 1, 0, 0};
    static const void *prelinked[2];
    wrapper.data = read_file(argv[1], 0);
    if (argc == 3) {
        prelinked[0] = read_file(argv[2], 0);
        wrapper.version = 2;
        wrapper.name_or_fatbins = prelinked;
    }
    void **handle = __cudaRegisterFatBinary(&wrapper);
    __cudaRegisterFunction(handle, (const char *)vector_add_stub, "vector_add_f32", "vector_add_f32", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFatBinaryEnd(handle);

    int runtime = 0;
    RT(cudaRuntimeGetVersion(&runtime));
    fact("runtime", "%d", runtime);
    int count = 0;
    RT(cudaGetDeviceCount(&count));
    fact("count", "%d", count);
    /* cudaDeviceProp begins with char name[256], cudaUUID_t uuid, char luid[8], unsigned luidDeviceNodeMask,
     * then size_t totalGlobalMem (offset 288) in both versions; the struct is about 1 KiB. */
    static union { char name[256]; unsigned char bytes[8192]; } prop;
    RT(get_properties(&prop, 0));
    fact("name", "%s", prop.name);
    size_t total;
    memcpy(&total, prop.bytes + 288, sizeof total);
    fact("memory", "%zu", total);
    int major, minor;
    RT(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    RT(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    fact("major", "%d", major);
    fact("minor", "%d", minor);

    float a[N], b[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = 0.5f * (float)i;
    }
    float *da, *db, *dc;
    RT(cudaMalloc((void **)&da, sizeof a));
    RT(cudaMalloc((void **)&db, sizeof b));
    RT(cudaMalloc((void **)&dc, sizeof a));
    RT(cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice));
    RT(cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice));
    float back[N];
    RT(cudaMemcpy(back, da, sizeof back, cudaMemcpyDeviceToHost));
    if (memcmp(back, a, sizeof a)) die("the copy back differs");
    fact("copy", "ok");

    uint64_t n = N;
    void *args[] = {&da, &db, &dc, &n};
    RT(cudaLaunchKernel((const void *)vector_add_stub, dim3_of(N / 256), dim3_of(256), args, 0, 0));
    RT(cudaDeviceSynchronize());
    check_sums(dc, a, b, "kernel");
    fact("kernel", "ok");

    RT(cudaMemset(dc, 0, sizeof a));
    cudaStream_t stream;
    RT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    RT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    RT(cudaLaunchKernel((const void *)vector_add_stub, dim3_of(N / 256), dim3_of(256), args, 0, stream));
    cudaGraph_t graph;
    RT(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    RT(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 2; i++) RT(cudaGraphLaunch(exec, stream));
    RT(cudaStreamSynchronize(stream));
    check_sums(dc, a, b, "graph");
    fact("graph", "ok");
    RT(cudaGraphExecDestroy(exec));
    RT(cudaGraphDestroy(graph));
    RT(cudaStreamDestroy(stream));
    RT(cudaFree(da));
    RT(cudaFree(db));
    RT(cudaFree(dc));
    fact("done", "ok");
    return 0;
}
