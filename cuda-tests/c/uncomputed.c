/*
 * Launches custom_kernel (in cuda-tests/kernels/kernels.ptx; not one of the simulator's built-ins) three
 * times on a buffer of known values, then reads the buffer back; run by
 * cuda-tests/probe/tests/e2e/uncomputed.rs under each SIMGPU_UNKNOWN_KERNELS mode.
 *
 * Facts: "launch <CUresult>" for each launch, "first <the buffer's first word, hex>" once synchronized,
 * "done ok" last.
 */
#include "report.h"

#include <cuda.h>
#include <stdint.h>

#include "kernels.h"

#define CU(call)                                                          \
    do {                                                                  \
        CUresult result_ = (call);                                        \
        if (result_ != CUDA_SUCCESS) die("%s = %d", #call, (int)result_); \
    } while (0)

int main(void) {
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CU(cuCtxCreate(&ctx, 0, dev));
    CUmodule module;
    CU(cuModuleLoadData(&module, tessera_kernels_ptx));
    CUfunction custom;
    CU(cuModuleGetFunction(&custom, module, "custom_kernel"));
    uint32_t words[64];
    for (int i = 0; i < 64; i++) words[i] = 0x12345678u;
    CUdeviceptr data;
    CU(cuMemAlloc(&data, sizeof words));
    CU(cuMemcpyHtoD(data, words, sizeof words));
    void *args[] = {&data};
    for (int i = 0; i < 3; i++) fact("launch", "%d", (int)cuLaunchKernel(custom, 1, 1, 1, 32, 1, 1, 0, 0, args, 0));
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH(words, data, sizeof words));
    fact("first", "%08x", words[0]);
    fact("last", "%08x", words[63]);
    fact("done", "ok");
    return 0;
}
