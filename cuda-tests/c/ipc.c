/*
 * Device memory shared between two processes with IPC handles; run by cuda-tests/probe/tests/e2e/ipc.rs.
 *
 *   ipc            allocates 1 MiB, fills it with 0x5a, gets its IPC handle, runs "ipc child HANDLE" (this
 *                  program again, a new process) and waits for it, then reads the memory back
 *   ipc child HEX  opens the handle, checks the 0x5a, fills the memory with 0xa5, closes it
 *
 * Facts (parent): "own <CUresult of opening its own handle>", "child <exit status>", "back <first byte, hex>".
 * Facts (child, on the same stdout): "seen <first byte, hex>", "charged <bytes cuMemGetInfo's free fell by
 * when the handle was opened>", "garbage <CUresult of opening a handle of zeros>". "done ok" last, by each.
 */
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

static int child(const char *hex) {
    context();
    CUipcMemHandle handle;
    for (size_t i = 0; i < sizeof handle; i++) {
        unsigned byte;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1) die("bad handle %s", hex);
        handle.reserved[i] = (char)byte;
    }
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
    fact("done", "ok");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "child")) return child(argv[2]);
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
    for (size_t i = 0; i < sizeof handle; i++) sprintf(hex + 2 * i, "%02x", (unsigned char)handle.reserved[i]);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", argv[0], "child", hex, (char *)0);
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
