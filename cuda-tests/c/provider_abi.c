/*
 * Calls every function of the current provider ABI (scheduler/provider/include/accelerator.h) of
 * libaccelerator_tessera.so, linked to it: each success path on the devices it reports, and
 * ACCEL_ERROR_INVALID_PARAM for every NULL pointer, zero count, memory limit 0 and compute limit 0 or
 * above 100. Prints what it found as facts for cuda-tests/probe/tests/provider.rs.
 * Arguments: the MIG profile to assign on the first device with MIG mode on ("-" for none expected), and
 * "nodaemon" when no Tessera daemon runs (hard limits then fail with ACCEL_ERROR_OPERATION_FAILED).
 */
#include "report.h"

#include <accelerator.h>
#include <unistd.h>

static int log_lines;
static void on_log(const char *level, const char *message) {
    if (level && message) log_lines++;
}

#define EXPECT(call, code)                                                                      \
    do {                                                                                        \
        AccelResult r_ = (call);                                                                \
        if (r_ != (code)) die("%s returned %d, expected %d (line %d)", #call, r_, code, __LINE__); \
        checks++;                                                                               \
    } while (0)

int main(int argc, char **argv) {
    const char *mig_profile = argc > 1 ? argv[1] : "-";
    AccelResult with_daemon = argc > 2 && !strcmp(argv[2], "nodaemon") ? ACCEL_ERROR_OPERATION_FAILED : ACCEL_SUCCESS;
    int checks = 0;
    EXPECT(AccelRegisterLogCallback(on_log), ACCEL_SUCCESS);
    EXPECT(AccelInit(), ACCEL_SUCCESS);

    size_t count = 0;
    EXPECT(AccelGetDeviceCount(NULL), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetDeviceCount(&count), ACCEL_SUCCESS);
    fact("devices", "%zu", count);
    if (count == 0) die("no devices");

    static ExtendedDeviceInfo devices[8];
    size_t got = 0;
    EXPECT(AccelGetAllDevices(NULL, 8, &got), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetAllDevices(devices, 0, &got), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetAllDevices(devices, 8, NULL), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetAllDevices(devices, 8, &got), ACCEL_SUCCESS);
    if (got != count) die("AccelGetAllDevices gave %zu of %zu", got, count);
    int mig_device = -1;
    for (size_t i = 0; i < got; i++) {
        DeviceBasicInfo *b = &devices[i].basic;
        VirtualizationCapabilities *c = &devices[i].virtualizationCapabilities;
        if (!b->uuid[0] || !b->model[0] || b->totalMemoryBytes == 0 || b->totalComputeUnits == 0 || b->maxTflops <= 0)
            die("device %zu is incomplete", i);
        fact("device", "%d %s %s %llu %llu %.1f %s", b->index, b->uuid, b->deviceNode, (unsigned long long)b->totalMemoryBytes,
             (unsigned long long)b->totalComputeUnits, b->maxTflops, b->vendor);
        fact("capabilities", "%d partitioning=%d soft=%d hard=%d snapshot=%d metrics=%d maxPartitions=%u workers=%u", b->index,
             c->supportsPartitioning, c->supportsSoftIsolation, c->supportsHardIsolation, c->supportsSnapshot,
             c->supportsMetrics, c->maxPartitions, c->maxWorkersPerDevice);
        for (size_t p = 0; p < devices[i].props.count; p++) {
            fact("property", "%d %s=%s", b->index, devices[i].props.properties[p].key, devices[i].props.properties[p].value);
            if (!strcmp(devices[i].props.properties[p].key, "migMode") && !strcmp(devices[i].props.properties[p].value, "enabled") &&
                mig_device < 0)
                mig_device = (int)i;
        }
    }
    /* Fewer than there are: the first maxCount. */
    EXPECT(AccelGetAllDevices(devices, 1, &got), ACCEL_SUCCESS);
    if (got != 1) die("maxCount 1 gave %zu", got);

    static ExtendedDeviceTopology topo;
    EXPECT(AccelGetAllDevicesTopology(NULL), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetAllDevicesTopology(&topo), ACCEL_SUCCESS);
    if (topo.deviceCount != count) die("topology has %zu devices", topo.deviceCount);
    for (size_t i = 0; i < topo.deviceCount; i++) {
        if (topo.devices[i].peerCount != count - 1) die("device %zu has %zu peers", i, topo.devices[i].peerCount);
        for (size_t p = 0; p < topo.devices[i].peerCount; p++)
            fact("topology", "%d %d %d", topo.devices[i].deviceIndex, topo.devices[i].peers[p].peerIndex,
                 topo.devices[i].peers[p].topoLevel);
    }

    const char *uuid = devices[0].basic.uuid;
    static PartitionResult part;
    EXPECT(AccelAssignPartition(NULL, uuid, &part), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelAssignPartition("1g.10gb", NULL, &part), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelAssignPartition("1g.10gb", uuid, NULL), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelAssignPartition("1g.10gb", "GPU-no-such-device", &part), ACCEL_ERROR_NOT_FOUND);
    EXPECT(AccelRemovePartition(NULL, uuid), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelRemovePartition("1g.10gb", NULL), ACCEL_ERROR_INVALID_PARAM);
    /* A device without MIG mode on cannot be partitioned. */
    for (size_t i = 0; i < count; i++) {
        if ((int)i == mig_device) continue;
        AccelResult r = AccelAssignPartition("1g.10gb", devices[i].basic.uuid, &part);
        fact("partition_without_mig", "%zu %d", i, r);
        if (r != ACCEL_ERROR_NOT_SUPPORTED) die("assign on device %zu without MIG mode gave %d", i, r);
        checks++;
    }
    if (strcmp(mig_profile, "-") != 0) {
        if (mig_device < 0) die("no device has MIG mode on");
        const char *parent = devices[mig_device].basic.uuid;
        EXPECT(AccelAssignPartition("no-such-profile", parent, &part), ACCEL_ERROR_NOT_FOUND);
        EXPECT(AccelAssignPartition(mig_profile, parent, &part), ACCEL_SUCCESS);
        fact("partition", "%s", part.deviceUUID);
        for (int e = 0; e < MAX_PARTITION_ENVS && part.envVars[e][0]; e++) fact("partition_env", "%s", part.envVars[e]);
        EXPECT(AccelRemovePartition(mig_profile, part.deviceUUID), ACCEL_SUCCESS);
        EXPECT(AccelRemovePartition(mig_profile, part.deviceUUID), ACCEL_ERROR_NOT_FOUND);
    }

    EXPECT(AccelSetMemHardLimit(NULL, 1 << 20), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelSetMemHardLimit(uuid, 0), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelSetComputeUnitHardLimit(NULL, 50), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelSetComputeUnitHardLimit(uuid, 0), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelSetComputeUnitHardLimit(uuid, 101), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelSetMemHardLimit("GPU-no-such-device", 1 << 20), ACCEL_ERROR_NOT_FOUND);
    EXPECT(AccelSetMemHardLimit(uuid, 256ull << 20), with_daemon);
    EXPECT(AccelSetComputeUnitHardLimit(uuid, 40), with_daemon);
    fact("vgpu", "%s", getenv("TESSERA_VGPU") ? getenv("TESSERA_VGPU") : "(unset)");

    pid_t me = getpid();
    SnapshotContext snap = {&me, 1, NULL};
    SnapshotContext empty = {NULL, 0, NULL};
    SnapshotContext bad = {NULL, 1, NULL};
    EXPECT(AccelSnapshot(NULL), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelSnapshot(&empty), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelSnapshot(&bad), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelResume(NULL), ACCEL_ERROR_INVALID_PARAM);
    fact("snapshot", "%d", AccelSnapshot(&snap));
    fact("resume", "%d", AccelResume(&snap));

    static ProcessInformation procs[64];
    size_t nprocs = 0;
    EXPECT(AccelGetProcessInformation(NULL, 64, &nprocs), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetProcessInformation(procs, 0, &nprocs), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetProcessInformation(procs, 64, NULL), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetProcessInformation(procs, 64, &nprocs), ACCEL_SUCCESS);
    fact("processes", "%zu", nprocs);
    for (size_t i = 0; i < nprocs; i++)
        fact("process", "%s %s %.1f %llu %llu", procs[i].processId, procs[i].deviceUUID, procs[i].computeUtilizationPercent,
             (unsigned long long)procs[i].memoryUsedBytes, (unsigned long long)procs[i].memoryReservedBytes);

    const char *uuids[8];
    for (size_t i = 0; i < count && i < 8; i++) uuids[i] = devices[i].basic.uuid;
    static DeviceMetrics metrics[8];
    const char *unknown[1] = {"GPU-no-such-device"};
    const char *null_entry[1] = {NULL};
    EXPECT(AccelGetDeviceMetrics(NULL, 1, metrics), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetDeviceMetrics(uuids, 0, metrics), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetDeviceMetrics(uuids, 1, NULL), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetDeviceMetrics(null_entry, 1, metrics), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetDeviceMetrics(unknown, 1, metrics), ACCEL_ERROR_NOT_FOUND);
    EXPECT(AccelGetDeviceMetrics(uuids, count < 8 ? count : 8, metrics), ACCEL_SUCCESS);
    for (size_t i = 0; i < count && i < 8; i++) {
        fact("metrics", "%s %.1f %.1f %u %llu %zu", metrics[i].deviceUUID, metrics[i].powerUsageWatts,
             metrics[i].temperatureCelsius, metrics[i].utilizationPercent, (unsigned long long)metrics[i].memoryUsedBytes,
             metrics[i].extraMetricsCount);
        for (size_t e = 0; e < metrics[i].extraMetricsCount; e++)
            fact("extra", "%zu %s %.1f", i, metrics[i].extraMetrics[e].key, metrics[i].extraMetrics[e].value);
    }

    static MountPath mounts[16];
    size_t nmounts = 0;
    EXPECT(AccelGetVendorMountLibs(NULL, 16, &nmounts), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetVendorMountLibs(mounts, 0, &nmounts), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetVendorMountLibs(mounts, 16, NULL), ACCEL_ERROR_INVALID_PARAM);
    EXPECT(AccelGetVendorMountLibs(mounts, 16, &nmounts), ACCEL_SUCCESS);
    for (size_t i = 0; i < nmounts; i++) fact("mount", "%s %s", mounts[i].hostPath, mounts[i].guestPath);

    fact("log_lines", "%d", log_lines);
    EXPECT(AccelRegisterLogCallback(NULL), ACCEL_SUCCESS);
    EXPECT(AccelShutdown(), ACCEL_SUCCESS);
    fact("checks", "%d", checks);
    fact("done", "ok");
    return 0;
}
