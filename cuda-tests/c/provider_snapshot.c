/*
 * Snapshots or resumes through libaccelerator_tessera.so: `snapshot PID` / `resume PID` (process level,
 * AccelSnapshot/AccelResume with processIds), `snapshot-device` / `resume-device` (device 0 as a whole,
 * with deviceUUID). Prints the result code.
 */
#include "report.h"

#include <accelerator.h>

static void on_log(const char *level, const char *message) { fact("log", "%s %s", level, message); }

int main(int argc, char **argv) {
    AccelRegisterLogCallback(on_log);
    if (argc < 2) die("usage: provider_snapshot snapshot|resume PID | snapshot-device|resume-device");
    static ExtendedDeviceInfo devices[8];
    size_t n = 0;
    if (AccelGetAllDevices(devices, 8, &n) != ACCEL_SUCCESS || n == 0) die("no devices");
    pid_t pid = argc > 2 ? (pid_t)atoi(argv[2]) : 0;
    SnapshotContext processes = {&pid, 1, NULL};
    SnapshotContext device = {NULL, 0, devices[0].basic.uuid};
    int resume = strncmp(argv[1], "resume", 6) == 0;
    SnapshotContext *context = strstr(argv[1], "-device") ? &device : &processes;
    AccelResult r = resume ? AccelResume(context) : AccelSnapshot(context);
    fact("result", "%d", r);
    AccelShutdown();
    fact("done", "ok");
    return 0;
}
