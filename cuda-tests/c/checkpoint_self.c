/*
 * The process checkpoint API called on the process itself, compiled against NVIDIA's cuda.h (so the
 * argument structs and signatures are the real header's), as NVIDIA's samples do it: lock, checkpoint,
 * restore and unlock getpid(), then check every word of a device buffer. Run by
 * cuda-tests/probe/tests/checkpoint.rs, with and without the shim (which must pass these calls through).
 * Prints "size.<struct> <bytes>", "state.<step> <CUprocessState>", "tid <restore thread id>",
 * "free.<step> <cuMemGetInfo free bytes>", "verified <words>".
 */
#include "report.h"

#include <cuda.h>
#include <unistd.h>

#define CU(call)                                                                          \
    do {                                                                                  \
        CUresult result_ = (call);                                                        \
        if (result_ != CUDA_SUCCESS) die("%s = %d", #call, (int)result_);                 \
    } while (0)

#define WORDS ((size_t)4 << 20)

static void state(const char *step) {
    CUprocessState s;
    CU(cuCheckpointProcessGetState(getpid(), &s));
    fact(step, "%d", (int)s);
}

int main(void) {
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    size_t free_bytes, total;
    int tid = 0;
    fact("size.lock", "%zu", sizeof(CUcheckpointLockArgs));
    fact("size.checkpoint", "%zu", sizeof(CUcheckpointCheckpointArgs));
    fact("size.restore", "%zu", sizeof(CUcheckpointRestoreArgs));
    fact("size.unlock", "%zu", sizeof(CUcheckpointUnlockArgs));
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuMemAlloc(&p, WORDS * 4));
    CU(cuMemsetD32(p, 0xC0DEC0DE, WORDS));
    CU(cuCtxSynchronize());
    CU(cuMemGetInfo(&free_bytes, &total));
    fact("free.before", "%zu", free_bytes);
    state("state.running");
    CU(cuCheckpointProcessGetRestoreThreadId(getpid(), &tid));
    fact("tid", "%d", tid);

    CUcheckpointLockArgs lock = {.timeoutMs = 10000};
    CU(cuCheckpointProcessLock(getpid(), &lock));
    state("state.locked");
    CU(cuCheckpointProcessCheckpoint(getpid(), NULL));
    state("state.checkpointed");
    CUcheckpointRestoreArgs restore = {0};
    CU(cuCheckpointProcessRestore(getpid(), &restore));
    state("state.restored");
    CU(cuCheckpointProcessUnlock(getpid(), NULL));
    state("state.unlocked");

    unsigned *host = malloc(WORDS * 4);
    if (host == NULL) die("malloc");
    CU(cuMemcpyDtoH(host, p, WORDS * 4));
    size_t good = 0;
    for (size_t i = 0; i < WORDS; i++) good += host[i] == 0xC0DEC0DE;
    fact("verified", "%zu", good);
    CU(cuMemGetInfo(&free_bytes, &total));
    fact("free.after", "%zu", free_bytes);
    CU(cuMemFree(p));
    CU(cuDevicePrimaryCtxRelease(dev));
    fact("done", "ok");
    return 0;
}
