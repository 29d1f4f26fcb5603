/*
 * Device memory and an event shared between two processes with IPC handles; run by
 * cuda-tests/probe/tests/e2e/ipc.rs.
 *
 *   ipc                  allocates 1 MiB, fills it with 0x5a, gets its IPC handle; launches custom_kernel on a
 *                        stream (the test makes it last 2 s) and records an interprocess event behind it, gets
 *                        the event's handle; runs "ipc child MEM EVENT" (this program again, a new process)
 *                        and waits for it, then reads the memory back
 *   ipc child HEX HEX    opens the memory handle, checks the 0x5a, fills the memory with 0xa5, closes it; opens
 *                        the event handle, queries the event (the parent's kernel still runs), waits for it
 *
 * Facts (parent): "own <CUresult of opening its own handle>", "plain_event <CUresult of cuIpcGetEventHandle on
 * an event created without CU_EVENT_INTERPROCESS>", "timed_interprocess <CUresult of cuEventCreate with
 * CU_EVENT_INTERPROCESS but timing on>", "child <exit status>", "back <first byte, hex>".
 * Facts (child, on the same stdout): "seen <first byte, hex>", "charged <bytes cuMemGetInfo's free fell by
 * when the handle was opened>", "garbage <CUresult of opening a handle of zeros>", "event_before <CUresult of
 * cuEventQuery before waiting>", "event_after <the same after cuEventSynchronize>", "event_timing <CUresult of
 * cuEventElapsedTime on the opened event>". "done ok" last, by each.
 */
#include "kernels.h"
#include "report.h"

#include <cuda.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#define CU(call)                                                          \
    do {                                                                  \
        CUresult result_ = (call);                                        \
        if (result_ != CUDA_SUCCESS) die("%s = %d", #call, (int)result_); \
    } while (0)

#define SIZE (1u << 20)

static void context(void) {
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CU(cuCtxCreate(&ctx, 0, dev));
}

/* Reads a handle's 64 bytes from hex. */
static void unhex(const char *hex, char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned byte;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1) die("bad handle %s", hex);
        bytes[i] = (char)byte;
    }
}

/* Writes a handle's 64 bytes as hex. */
static void tohex(const char *bytes, size_t n, char *hex) {
    for (size_t i = 0; i < n; i++) sprintf(hex + 2 * i, "%02x", (unsigned char)bytes[i]);
}

static int child(const char *hex, const char *event_hex) {
    context();
    CUipcMemHandle handle;
    unhex(hex, handle.reserved, sizeof handle.reserved);
    size_t free_before, free_after, total;
    CU(cuMemGetInfo(&free_before, &total));
    CUdeviceptr p;
    CU(cuIpcOpenMemHandle(&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CU(cuMemGetInfo(&free_after, &total));
    unsigned char first;
    CU(cuMemcpyDtoH(&first, p, 1));
    fact("seen", "%02x", first);
    fact("charged", "%zu", free_before - free_after);
    CU(cuMemsetD8(p, 0xa5, SIZE));
    CU(cuCtxSynchronize());
    CU(cuIpcCloseMemHandle(p));
    CUipcMemHandle zeros;
    memset(&zeros, 0, sizeof zeros);
    fact("garbage", "%d", (int)cuIpcOpenMemHandle(&p, zeros, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CUipcEventHandle event_handle;
    unhex(event_hex, event_handle.reserved, sizeof event_handle.reserved);
    CUevent event;
    CU(cuIpcOpenEventHandle(&event, event_handle));
    fact("event_before", "%d", (int)cuEventQuery(event));
    CU(cuEventSynchronize(event));
    fact("event_after", "%d", (int)cuEventQuery(event));
    float ms;
    fact("event_timing", "%d", (int)cuEventElapsedTime(&ms, event, event));
    CU(cuEventDestroy(event));
    fact("done", "ok");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "child")) return child(argv[2], argv[3]);
    context();
    CUdeviceptr p;
    CU(cuMemAlloc(&p, SIZE));
    CU(cuMemsetD8(p, 0x5a, SIZE));
    CU(cuCtxSynchronize());
    CUipcMemHandle handle;
    CU(cuIpcGetMemHandle(&handle, p));
    CUdeviceptr own;
    fact("own", "%d", (int)cuIpcOpenMemHandle(&own, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    char hex[2 * sizeof handle + 1];
    tohex(handle.reserved, sizeof handle.reserved, hex);

    CUevent plain, timed, shared;
    CUipcEventHandle event_handle;
    CU(cuEventCreate(&plain, CU_EVENT_DISABLE_TIMING));
    fact("plain_event", "%d", (int)cuIpcGetEventHandle(&event_handle, plain));
    fact("timed_interprocess", "%d", (int)cuEventCreate(&timed, CU_EVENT_INTERPROCESS));
    CU(cuEventCreate(&shared, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CUmodule module;
    CU(cuModuleLoadData(&module, tessera_kernels_ptx));
    CUfunction slow;
    CU(cuModuleGetFunction(&slow, module, "custom_kernel"));
    CUstream stream;
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUdeviceptr none = 0;
    void *args[] = {&none};
    CU(cuLaunchKernel(slow, 1, 1, 1, 32, 1, 1, 0, stream, args, NULL));
    CU(cuEventRecord(shared, stream));
    CU(cuIpcGetEventHandle(&event_handle, shared));
    char event_hex[2 * sizeof event_handle + 1];
    tohex(event_handle.reserved, sizeof event_handle.reserved, event_hex);

    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", argv[0], "child", hex, event_hex, (char *)0);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    fact("child", "%d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    unsigned char first;
    CU(cuMemcpyDtoH(&first, p, 1));
    fact("back", "%02x", first);
    CU(cuMemFree(p));
    fact("done", "ok");
    return 0;
}
