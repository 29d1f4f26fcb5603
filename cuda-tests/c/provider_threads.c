/*
 * Calls libaccelerator_tessera.so from 8 threads at once (device queries, topology, metrics, processes,
 * mounts, the log callback, invalid arguments, and one thread re-initializing), checking every answer.
 * Argument: rounds per thread.
 */
#include "report.h"

#include <accelerator.h>
#include <pthread.h>

static int rounds = 20;
static size_t expected_devices;
static _Atomic int failures;
static _Atomic long calls;

static void on_log(const char *level, const char *message) { (void)level, (void)message; }

#define OK(call)                                                                  \
    do {                                                                          \
        AccelResult r_ = (call);                                                  \
        calls++;                                                                  \
        if (r_ != ACCEL_SUCCESS) {                                                \
            printf("failure thread %d: %s returned %d\n", id, #call, r_);        \
            failures++;                                                           \
        }                                                                         \
    } while (0)

static void *work(void *arg) {
    int id = (int)(long)arg;
    static __thread ExtendedDeviceInfo devices[8];
    static __thread ExtendedDeviceTopology topo;
    static __thread DeviceMetrics metrics[1];
    static __thread ProcessInformation procs[32];
    static __thread MountPath mounts[8];
    for (int r = 0; r < rounds; r++) {
        size_t n = 0;
        OK(AccelGetDeviceCount(&n));
        if (n != expected_devices) printf("failure thread %d: %zu devices\n", id, n), failures++;
        OK(AccelGetAllDevices(devices, 8, &n));
        OK(AccelGetAllDevicesTopology(&topo));
        const char *uuid[1] = {devices[0].basic.uuid};
        OK(AccelGetDeviceMetrics(uuid, 1, metrics));
        OK(AccelGetProcessInformation(procs, 32, &n));
        OK(AccelGetVendorMountLibs(mounts, 8, &n));
        OK(AccelRegisterLogCallback(r % 2 ? on_log : NULL));
        if (AccelSetComputeUnitHardLimit(uuid[0], 0) != ACCEL_ERROR_INVALID_PARAM)
            printf("failure thread %d: compute limit 0 accepted\n", id), failures++;
        if (id == 0 && r % 5 == 4) {
            OK(AccelShutdown());
            OK(AccelInit());
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) rounds = atoi(argv[1]);
    if (AccelInit() != ACCEL_SUCCESS) die("AccelInit failed");
    if (AccelGetDeviceCount(&expected_devices) != ACCEL_SUCCESS || expected_devices == 0) die("no devices");
    pthread_t threads[8];
    for (long i = 0; i < 8; i++)
        if (pthread_create(&threads[i], NULL, work, (void *)i) != 0) die("pthread_create");
    for (int i = 0; i < 8; i++) pthread_join(threads[i], NULL);
    fact("threads", "8");
    fact("calls", "%ld", (long)calls);
    fact("failures", "%d", (int)failures);
    if (failures) die("%d failures", (int)failures);
    AccelShutdown();
    fact("done", "ok");
    return 0;
}
