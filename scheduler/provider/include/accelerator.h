/*
 * Tessera's accelerator provider interface: the C ABI a cluster hypervisor (TensorFusion) loads from
 * libaccelerator_tessera.so. Written for Tessera from the interface's published facts (function
 * signatures, struct layouts, field sizes and enum values of the current `Accel*` ABI); every struct's
 * size and field offsets are checked at build time against scheduler/provider/layout.tsv, on both the C
 * and the Rust side. The earlier ABI (unprefixed names) is in accelerator_legacy.h.
 *
 * Every function is thread-safe, returns ACCEL_ERROR_INVALID_PARAM for a NULL pointer or a zero count,
 * and never lets a failure escape as a crash (an internal fault answers ACCEL_ERROR_INTERNAL).
 */
#ifndef TESSERA_ACCELERATOR_H
#define TESSERA_ACCELERATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ACCELERATOR_API __attribute__((visibility("default")))

/* Result of every call. */
typedef enum {
    ACCEL_SUCCESS = 0,
    ACCEL_ERROR_INVALID_PARAM = 1,
    ACCEL_ERROR_NOT_FOUND = 2,
    ACCEL_ERROR_NOT_SUPPORTED = 3,
    ACCEL_ERROR_RESOURCE_EXHAUSTED = 4,
    ACCEL_ERROR_OPERATION_FAILED = 5,
    ACCEL_ERROR_INTERNAL = 6
} AccelResult;

/* Receives the library's log lines: level ("DEBUG", "INFO", "WARN", "ERROR") and message. */
typedef void (*LogCallbackFunc)(const char *level, const char *message);

/* What a device supports. */
typedef struct {
    bool supportsPartitioning;    /* hardware partitions (MIG) */
    bool supportsSoftIsolation;   /* limits enforced by the interposed library */
    bool supportsHardIsolation;   /* limits set once per worker */
    bool supportsSnapshot;        /* snapshot and resume of processes */
    bool supportsMetrics;         /* device and process metrics */
    bool supportsRemoting;        /* remote device access */
    uint32_t maxPartitions;       /* most partitions at once */
    uint32_t maxWorkersPerDevice; /* most workers sharing the device */
} VirtualizationCapabilities;

/* The fixed facts of one device. */
typedef struct {
    char uuid[64];
    char vendor[32];
    char model[128];
    char driverVersion[80];
    char firmwareVersion[64];
    char deviceNode[64];        /* e.g. /dev/nvidia0 */
    int32_t index;
    int32_t numaNode;           /* -1 when unknown */
    uint64_t totalMemoryBytes;
    uint64_t totalComputeUnits; /* SMs */
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

/* How two devices are connected (the common ancestor of their PCI paths). */
typedef enum {
    TOPO_LEVEL_INTERNAL = 0,      /* same board */
    TOPO_LEVEL_SINGLE_SWITCH = 1, /* one PCIe switch */
    TOPO_LEVEL_MULTI_SWITCH = 2,  /* several PCIe switches, no host bridge */
    TOPO_LEVEL_HOST_BRIDGE = 3,   /* the same host bridge */
    TOPO_LEVEL_NUMA_NODE = 4,     /* the same NUMA node */
    TOPO_LEVEL_SYSTEM = 5,        /* across NUMA nodes */
    TOPO_LEVEL_SELF = 6,          /* the device itself */
    TOPO_LEVEL_UNKNOWN = 7
} TopoLevelType;

typedef struct {
    char peerUUID[64];
    int32_t peerIndex;
    TopoLevelType topoLevel;
} DeviceTopoNode;

#define MAX_TOPOLOGY_DEVICES 64

typedef struct {
    char deviceUUID[64];
    int32_t deviceIndex;
    int32_t numaNode;
    DeviceTopoNode peers[MAX_TOPOLOGY_DEVICES];
    size_t peerCount;
} DeviceTopologyInfo;

typedef struct {
    DeviceTopologyInfo devices[MAX_TOPOLOGY_DEVICES];
    size_t deviceCount;
} ExtendedDeviceTopology;

/* Processes (processIds/processCount) or a whole device (deviceUUID) to snapshot or resume. */
typedef struct {
    pid_t *processIds;
    size_t processCount;
    const char *deviceUUID;
} SnapshotContext;

typedef struct {
    char key[64];
    double value;
} ExtraMetric;

#define MAX_EXTRA_METRICS 64

/* One process on one device. */
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
} MountPath;

typedef enum {
    PARTITION_TYPE_ENVIRONMENT_VARIABLE = 0,
    PARTITION_TYPE_DEVICE_NODE = 1
} PartitionResultType;

#define MAX_PARTITION_ENVS 16
#define MAX_PARTITION_ENV_LENGTH 256
#define MAX_PARTITION_DEVICE_NODES 16
#define MAX_DEVICE_PATH 512

typedef struct {
    char hostPath[MAX_DEVICE_PATH];
    char guestPath[MAX_DEVICE_PATH];
} DeviceNodeKV;

/* What a worker needs to use a partition: "KEY=VALUE" environment entries, and device nodes. */
typedef struct {
    PartitionResultType type;
    char deviceUUID[64]; /* the partition's own UUID (MIG-...) */
    char envVars[MAX_PARTITION_ENVS][MAX_PARTITION_ENV_LENGTH];
    DeviceNodeKV deviceNodes[MAX_PARTITION_DEVICE_NODES];
    uint32_t deviceNodeCount;
    char reserved[28];
} PartitionResult;

ACCELERATOR_API AccelResult AccelInit(void);
ACCELERATOR_API AccelResult AccelShutdown(void);

ACCELERATOR_API AccelResult AccelGetDeviceCount(size_t *deviceCount);
ACCELERATOR_API AccelResult AccelGetAllDevices(ExtendedDeviceInfo *devices, size_t maxCount, size_t *deviceCount);
ACCELERATOR_API AccelResult AccelGetAllDevicesTopology(ExtendedDeviceTopology *topology);

ACCELERATOR_API AccelResult AccelAssignPartition(const char *templateId, const char *deviceUUID,
                                                 PartitionResult *partitionResult);
ACCELERATOR_API AccelResult AccelRemovePartition(const char *templateId, const char *deviceUUID);

ACCELERATOR_API AccelResult AccelSetMemHardLimit(const char *deviceUUID, uint64_t memoryLimitBytes);
ACCELERATOR_API AccelResult AccelSetComputeUnitHardLimit(const char *deviceUUID, uint32_t computeUnitLimit);

ACCELERATOR_API AccelResult AccelSnapshot(SnapshotContext *context);
ACCELERATOR_API AccelResult AccelResume(SnapshotContext *context);

ACCELERATOR_API AccelResult AccelGetProcessInformation(ProcessInformation *processInfos, size_t maxCount,
                                                       size_t *processInfoCount);
ACCELERATOR_API AccelResult AccelGetDeviceMetrics(const char **deviceUUIDs, size_t deviceCount,
                                                  DeviceMetrics *metrics);
ACCELERATOR_API AccelResult AccelGetVendorMountLibs(MountPath *mounts, size_t maxCount, size_t *mountCount);

ACCELERATOR_API AccelResult AccelRegisterLogCallback(LogCallbackFunc callback);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_ACCELERATOR_H */
