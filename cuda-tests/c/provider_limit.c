/*
 * A worker that sets its own memory limit through libaccelerator_tessera.so (AccelSetMemHardLimit on
 * device 0) before it initializes CUDA, then allocates under the shim: within the limit succeeds,
 * beyond it must be refused with CUDA_ERROR_OUT_OF_MEMORY.
 * Argument: the limit in MiB.
 */
#include "report.h"

#include <accelerator.h>
#include <cuda.h>

int main(int argc, char **argv) {
    unsigned long long limit = (argc > 1 ? strtoull(argv[1], NULL, 10) : 64) << 20;
    if (AccelInit() != ACCEL_SUCCESS) die("AccelInit failed");
    static ExtendedDeviceInfo devices[8];
    size_t n = 0;
    if (AccelGetAllDevices(devices, 8, &n) != ACCEL_SUCCESS || n == 0) die("no devices");
    AccelResult r = AccelSetMemHardLimit(devices[0].basic.uuid, limit);
    fact("limit", "%d", r);
    if (r != ACCEL_SUCCESS) die("AccelSetMemHardLimit failed with %d", r);
    fact("vgpu", "%s", getenv("TESSERA_VGPU") ? getenv("TESSERA_VGPU") : "(unset)");

    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS) die("cuInit");
    if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS) die("cuDeviceGet");
    if (cuCtxCreate(&ctx, 0, dev) != CUDA_SUCCESS) die("cuCtxCreate");
    CUdeviceptr within, beyond;
    CUresult a = cuMemAlloc(&within, limit / 2);
    fact("within", "%d", a);
    CUresult b = cuMemAlloc(&beyond, limit);
    fact("beyond", "%d", b);
    if (a == CUDA_SUCCESS) cuMemFree(within);
    if (b == CUDA_SUCCESS) cuMemFree(beyond);
    cuCtxDestroy(ctx);
    fact("done", "ok");
    return 0;
}
