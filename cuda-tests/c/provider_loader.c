/*
 * Loads libaccelerator_tessera.so as a cluster hypervisor does: dlopen(path), dlsym of the 14 required
 * Accel* names (a missing one is fatal) and of AccelRegisterLogCallback, then AccelInit through the
 * pointer; then the earlier ABI's 14 names the same way, with VirtualGPUInit.
 * Argument: the library's path.
 */
#include "report.h"

#include <stddef.h>

static const char *const CURRENT[] = {
    "AccelInit", "AccelShutdown", "AccelGetDeviceCount", "AccelGetAllDevices", "AccelGetAllDevicesTopology",
    "AccelAssignPartition", "AccelRemovePartition", "AccelSetMemHardLimit", "AccelSetComputeUnitHardLimit",
    "AccelSnapshot", "AccelResume", "AccelGetProcessInformation", "AccelGetDeviceMetrics", "AccelGetVendorMountLibs",
};
static const char *const LEGACY[] = {
    "VirtualGPUInit", "GetDeviceCount", "GetAllDevices", "GetDeviceTopology", "AssignPartition", "RemovePartition",
    "SetMemHardLimit", "SetComputeUnitHardLimit", "Snapshot", "Resume", "GetProcessInformation", "GetDeviceMetrics",
    "GetVendorMountLibs", "RegisterLogCallback",
};

int main(int argc, char **argv) {
    if (argc < 2) die("usage: provider_loader LIBRARY");
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) die("dlopen: %s", dlerror());
    for (size_t i = 0; i < sizeof CURRENT / sizeof *CURRENT; i++)
        if (!dlsym(lib, CURRENT[i])) die("missing required symbol %s", CURRENT[i]);
    fact("current_resolved", "%zu", sizeof CURRENT / sizeof *CURRENT);
    if (!dlsym(lib, "AccelRegisterLogCallback")) die("missing AccelRegisterLogCallback");
    for (size_t i = 0; i < sizeof LEGACY / sizeof *LEGACY; i++)
        if (!dlsym(lib, LEGACY[i])) die("missing earlier-ABI symbol %s", LEGACY[i]);
    fact("legacy_resolved", "%zu", sizeof LEGACY / sizeof *LEGACY);

    int (*init)(void) = (int (*)(void))dlsym(lib, "AccelInit");
    int (*count)(size_t *) = (int (*)(size_t *))dlsym(lib, "AccelGetDeviceCount");
    int (*shutdown)(void) = (int (*)(void))dlsym(lib, "AccelShutdown");
    int (*legacy_init)(void) = (int (*)(void))dlsym(lib, "VirtualGPUInit");
    int (*legacy_count)(size_t *) = (int (*)(size_t *))dlsym(lib, "GetDeviceCount");
    size_t n = 0, m = 0;
    fact("init", "%d", init());
    int rc = count(&n);
    fact("count", "%d %zu", rc, n);
    fact("legacy_init", "%d", legacy_init());
    rc = legacy_count(&m);
    fact("legacy_count", "%d %zu", rc, m);
    fact("shutdown", "%d", shutdown());
    if (dlclose(lib) != 0) die("dlclose: %s", dlerror());
    fact("done", "ok");
    return 0;
}
