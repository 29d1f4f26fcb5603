/*
 * Calls every function of the earlier provider ABI (scheduler/provider/include/accelerator_legacy.h) of
 * libaccelerator_tessera.so, linked to it: success paths, and RESULT_ERROR_INVALID_PARAM (false for the
 * bool functions) for NULL pointers, zero counts and out-of-range limits.
 * Argument: the worker id whose vGPU the limits create.
 */
#include "report.h"

#include <accelerator_legacy.h>
#include <unistd.h>

static int log_lines;
static void on_log(const char *level, const char *message) {
    if (level && message) log_lines++;
}

#define EXPECT(call, code)                                                                      \
    do {                                                                                        \
        Result r_ = (call);                                                                     \
        if (r_ != (code)) die("%s returned %d, expected %d (line %d)", #call, r_, code, __LINE__); \
        checks++;                                                                               \
    } while (0)

int main(int argc, char **argv) {
    const char *worker = argc > 1 ? argv[1] : "legacy-worker";
    int checks = 0;
    EXPECT(RegisterLogCallback(on_log), RESULT_SUCCESS);
    EXPECT(VirtualGPUInit(), RESULT_SUCCESS);
    size_t count = 0;
    EXPECT(GetDeviceCount(NULL), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetDeviceCount(&count), RESULT_SUCCESS);
    fact("devices", "%zu", count);

    static ExtendedDeviceInfo devices[8];
    size_t got = 0;
    EXPECT(GetAllDevices(NULL, 8, &got), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetAllDevices(devices, 0, &got), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetAllDevices(devices, 8, NULL), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetAllDevices(devices, 8, &got), RESULT_SUCCESS);
    if (got != count || got == 0) die("GetAllDevices gave %zu of %zu", got, count);
    for (size_t i = 0; i < got; i++)
        fact("device", "%d %s %s %.1f", devices[i].basic.index, devices[i].basic.uuid, devices[i].basic.driverVersion,
             devices[i].basic.maxTflops);

    int32_t indices[8];
    for (size_t i = 0; i < count && i < 8; i++) indices[i] = (int32_t)i;
    static ExtendedDeviceTopology topo;
    int32_t missing[1] = {99};
    EXPECT(GetDeviceTopology(NULL, 1, &topo), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetDeviceTopology(indices, 0, &topo), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetDeviceTopology(indices, 1, NULL), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetDeviceTopology(missing, 1, &topo), RESULT_ERROR_NOT_FOUND);
    EXPECT(GetDeviceTopology(indices, count, &topo), RESULT_SUCCESS);
    fact("topology", "%zu %s %s", topo.deviceCount, topo.topologyType, topo.devices[0].deviceUUID);

    const char *uuid = devices[0].basic.uuid;
    PartitionAssignment a;
    memset(&a, 0, sizeof a);
    if (AssignPartition(NULL)) die("AssignPartition(NULL) succeeded");
    if (AssignPartition(&a)) die("AssignPartition of nothing succeeded");
    snprintf(a.templateId, sizeof a.templateId, "1g.10gb");
    snprintf(a.deviceUUID, sizeof a.deviceUUID, "%s", uuid);
    fact("assign_without_mig", "%d", AssignPartition(&a));
    if (RemovePartition(NULL, uuid)) die("RemovePartition(NULL, ...) succeeded");
    if (RemovePartition("1g.10gb", NULL)) die("RemovePartition(..., NULL) succeeded");
    checks += 4;

    EXPECT(SetMemHardLimit(NULL, uuid, 1 << 20), RESULT_ERROR_INVALID_PARAM);
    EXPECT(SetMemHardLimit(worker, NULL, 1 << 20), RESULT_ERROR_INVALID_PARAM);
    EXPECT(SetMemHardLimit(worker, uuid, 0), RESULT_ERROR_INVALID_PARAM);
    EXPECT(SetComputeUnitHardLimit(NULL, uuid, 50), RESULT_ERROR_INVALID_PARAM);
    EXPECT(SetComputeUnitHardLimit(worker, uuid, 0), RESULT_ERROR_INVALID_PARAM);
    EXPECT(SetComputeUnitHardLimit(worker, uuid, 101), RESULT_ERROR_INVALID_PARAM);
    EXPECT(SetMemHardLimit(worker, uuid, 128ull << 20), RESULT_SUCCESS);
    EXPECT(SetComputeUnitHardLimit(worker, uuid, 30), RESULT_SUCCESS);

    static ProcessArray procs;
    EXPECT(Snapshot(NULL), RESULT_ERROR_INVALID_PARAM);
    EXPECT(Snapshot(&procs), RESULT_ERROR_INVALID_PARAM);
    EXPECT(Resume(NULL), RESULT_ERROR_INVALID_PARAM);
    procs.processIds[0] = getpid();
    procs.processCount = 1;
    fact("snapshot", "%d", Snapshot(&procs));
    fact("resume", "%d", Resume(&procs));

    static ProcessInformation infos[64];
    size_t n = 0;
    EXPECT(GetProcessInformation(NULL, 64, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetProcessInformation(infos, 0, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetProcessInformation(infos, 64, NULL), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetProcessInformation(infos, 64, &n), RESULT_SUCCESS);

    static DeviceMetrics metrics[1];
    const char *uuids[1] = {uuid};
    EXPECT(GetDeviceMetrics(NULL, 1, metrics), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetDeviceMetrics(uuids, 0, metrics), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetDeviceMetrics(uuids, 1, NULL), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetDeviceMetrics(uuids, 1, metrics), RESULT_SUCCESS);
    fact("metrics", "%s %zu", metrics[0].deviceUUID, metrics[0].extraMetricsCount);

    static Mount mounts[16];
    size_t nm = 0;
    EXPECT(GetVendorMountLibs(NULL, 16, &nm), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetVendorMountLibs(mounts, 0, &nm), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetVendorMountLibs(mounts, 16, NULL), RESULT_ERROR_INVALID_PARAM);
    EXPECT(GetVendorMountLibs(mounts, 16, &nm), RESULT_SUCCESS);
    fact("mounts", "%zu", nm);
    fact("log_lines", "%d", log_lines);
    EXPECT(RegisterLogCallback(NULL), RESULT_SUCCESS);
    fact("checks", "%d", checks);
    fact("done", "ok");
    return 0;
}
