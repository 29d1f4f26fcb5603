/*
 * Tessera's accelerator provider interface, earlier ABI: the unprefixed functions returning `Result`
 * that hypervisors built before the `Accel*` ABI load (VirtualGPUInit, GetDeviceCount, ...).
 * libaccelerator_tessera.so exports these beside the current ones (accelerator.h); both call the same
 * implementation. Include one header or the other in a translation unit, not both (the type names
 * overlap with different layouts). Layouts are checked at build time against scheduler/provider/layout.tsv.
 */
#ifndef TESSERA_ACCELERATOR_LEGACY_H
#define TESSERA_ACCELERATOR_LEGACY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RESULT_SUCCESS = 0,
    RESULT_ERROR_INVALID_PARAM = 1,
    RESULT_ERROR_NOT_FOUND = 2,
    RESULT_ERROR_NOT_SUPPORTED = 3,
    RESULT_ERROR_RESOURCE_EXHAUSTED = 4,
    RESULT_ERROR_OPERATION_FAILED = 5,
    RESULT_ERROR_INTERNAL = 6
} Result;

typedef void (*LogCallbackFunc)(const char *level, const char *message);

typedef struct {
    bool supportsPartitioning;
    bool supportsSoftIsolation;
    bool supportsHardIsolation;
    bool supportsSnapshot;
    bool supportsMetrics;
    bool supportsRemoting;
    uint32_t maxPartitions;
    uint32_t maxWorkersPerDevice;
} VirtualizationCapabilities;

typedef struct {
    char uuid[64];
    char vendor[32];
    char model[128];
    char driverVersion[64];
    char firmwareVersion[64];
    int32_t index;
    int32_t numaNode;
    uint64_t totalMemoryBytes;
    uint64_t totalComputeUnits;
    double maxTflops;
    uint32_t pcieGen;
    uint32_t pcieWidth;
} DeviceBasicInfo;

typedef struct {
    char key[64];
    char value[256];
} DevicePropertyKV;

#define MAX_DEVICE_PROPERTIES 64

typedef struct {
    DevicePropertyKV properties[MAX_DEVICE_PROPERTIES];
    size_t count;
} DeviceProperties;

typedef struct {
    DeviceBasicInfo basic;
    DeviceProperties props;
    VirtualizationCapabilities virtualizationCapabilities;
} ExtendedDeviceInfo;

typedef struct {
    char deviceUUID[64];
    int32_t numaNode;
} DeviceTopology;

#define MAX_TOPOLOGY_DEVICES 64

typedef struct {
    DeviceTopology devices[MAX_TOPOLOGY_DEVICES];
    size_t deviceCount;
    char topologyType[32]; /* e.g. "PCIe" */
} ExtendedDeviceTopology;

/* In: templateId, deviceUUID. Out: partitionUUID. */
typedef struct {
    char templateId[64];
    char deviceUUID[64];
    char partitionUUID[64];
} PartitionAssignment;

#define MAX_PROCESSES 1024

typedef struct {
    pid_t processIds[MAX_PROCESSES];
    size_t processCount;
    char deviceUUID[64];
} ProcessArray;

typedef struct {
    char key[64];
    double value;
} ExtraMetric;

#define MAX_EXTRA_METRICS 64

typedef struct {
    char processId[32];
    char deviceUUID[64];
    double computeUtilizationPercent;
    uint64_t activeSMs;
    uint64_t totalSMs;
    uint64_t memoryUsedBytes;
    uint64_t memoryReservedBytes;
    double memoryUtilizationPercent;
} ProcessInformation;

typedef struct {
    char deviceUUID[64];
    double powerUsageWatts;
    double temperatureCelsius;
    uint64_t pcieRxBytes;
    uint64_t pcieTxBytes;
    uint32_t utilizationPercent;
    uint64_t memoryUsedBytes;
    ExtraMetric extraMetrics[MAX_EXTRA_METRICS];
    size_t extraMetricsCount;
} DeviceMetrics;

#define MAX_MOUNT_PATH 512

typedef struct {
    char hostPath[MAX_MOUNT_PATH];
    char guestPath[MAX_MOUNT_PATH];
} Mount;

Result VirtualGPUInit(void);
Result GetDeviceCount(size_t *deviceCount);
Result GetAllDevices(ExtendedDeviceInfo *devices, size_t maxCount, size_t *deviceCount);
Result GetDeviceTopology(int32_t *deviceIndexArray, size_t deviceCount, ExtendedDeviceTopology *topology);
bool AssignPartition(PartitionAssignment *assignment);
bool RemovePartition(const char *templateId, const char *deviceUUID);
/* workerId names the worker's vGPU (created on its first limit). */
Result SetMemHardLimit(const char *workerId, const char *deviceUUID, uint64_t memoryLimitBytes);
Result SetComputeUnitHardLimit(const char *workerId, const char *deviceUUID, uint32_t computeUnitLimit);
Result Snapshot(ProcessArray *processes);
Result Resume(ProcessArray *processes);
Result GetProcessInformation(ProcessInformation *processInfos, size_t maxCount, size_t *processInfoCount);
Result GetDeviceMetrics(const char **deviceUUIDs, size_t deviceCount, DeviceMetrics *metrics);
Result GetVendorMountLibs(Mount *mounts, size_t maxCount, size_t *mountCount);
Result RegisterLogCallback(LogCallbackFunc callback);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_ACCELERATOR_LEGACY_H */
