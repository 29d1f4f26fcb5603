/*
 * A worker whose vGPU exists (TESSERA_VGPU) asks libaccelerator_tessera.so for more of device 0 than the
 * other vGPUs there leave: a compute limit of argv[1] percent, then a memory limit of the whole device. The
 * daemon refuses each for want of room (protocol code resource_exhausted), which the library must report
 * as ACCEL_ERROR_RESOURCE_EXHAUSTED; then a compute limit that fits (argv[2] percent) succeeds.
 */
#include "report.h"

#include <accelerator.h>

int main(int argc, char **argv) {
    if (argc < 3) die("usage: provider_full SHARE FITTING_SHARE");
    if (AccelInit() != ACCEL_SUCCESS) die("AccelInit failed");
    static ExtendedDeviceInfo devices[8];
    size_t n = 0;
    if (AccelGetAllDevices(devices, 8, &n) != ACCEL_SUCCESS || n == 0) die("no devices");
    const char *uuid = devices[0].basic.uuid;
    fact("share", "%d", AccelSetComputeUnitHardLimit(uuid, (uint32_t)strtoul(argv[1], NULL, 10)));
    fact("memory", "%d", AccelSetMemHardLimit(uuid, devices[0].basic.totalMemoryBytes));
    fact("fits", "%d", AccelSetComputeUnitHardLimit(uuid, (uint32_t)strtoul(argv[2], NULL, 10)));
    fact("done", "ok");
    return 0;
}
