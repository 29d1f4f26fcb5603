/*
 * Stream capture under the shim, run by cuda-tests/probe/tests/capture.rs in a vGPU that is suspended
 * when it starts (so that any launch the shim gates waits until the test resumes the vGPU).
 *
 * 1. Captures one launch through every capture entry point (cuStreamBeginCapture, _v2 in the global,
 *    thread-local and relaxed modes, the _ptsz variants on the per-thread default stream,
 *    cuStreamBeginCaptureToGraph and its _ptsz variant), with cuLaunchKernel, cuLaunchKernelEx,
 *    cuLaunchCooperativeKernel, cuLaunchKernel_ptsz and cuGraphLaunch, each writing its own value into
 *    one slot of a buffer; prints "captured <n>" once all are captured and instantiated.
 * 2. Launches one kernel directly (gated: it waits until the test resumes the vGPU) and prints how long
 *    that took ("held_ns").
 * 3. Runs every graph and checks each slot ("graph.<case> ok").
 * 4. Captures in global mode on this thread while another thread launches kernels that the shim measures
 *    (its measurement thread waits for their events meanwhile): the capture must end successfully
 *    ("global_beside_measured ok").
 * 5. Checks that the simulated driver enforces the modes: an unsafe call (cuEventQuery) from another
 *    thread in global mode is refused and invalidates a global capture; from a relaxed thread it is not.
 *
 * Entry points are looked up by their exported names with dlsym, so each variant is called exactly.
 * A watchdog ends the program if anything hangs.
 */
#include "report.h"

#include <cuda.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define CU(call)                                                                          \
    do {                                                                                  \
        CUresult result_ = (call);                                                        \
        if (result_ != CUDA_SUCCESS) die("%s = %d", #call, (int)result_);                 \
    } while (0)

#include "kernels.h"

typedef CUresult (*begin1_fn)(CUstream);
typedef CUresult (*begin2_fn)(CUstream, CUstreamCaptureMode);
typedef CUresult (*begin_to_graph_fn)(CUstream, CUgraph, const CUgraphNode *, const void *, size_t,
                                      CUstreamCaptureMode);
typedef CUresult (*end_fn)(CUstream, CUgraph *);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*cooperative_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, CUstream, void **);
typedef CUresult (*graph_launch_fn)(CUgraphExec, CUstream);

static void *entry(const char *name) {
    void *f = dlsym(RTLD_DEFAULT, name);
    if (!f) die("no entry point %s", name);
    return f;
}

static CUfunction fill;
static CUdeviceptr slots;
enum { CASES = 10 };

static unsigned long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

/* The arguments of a fill_u32 launch writing `value` into slot `slot`. */
struct fill_args {
    CUdeviceptr dst;
    unsigned value;
    unsigned long long n;
    void *params[3];
};

static void fill_args(struct fill_args *a, int slot, unsigned value) {
    a->dst = slots + (CUdeviceptr)slot * sizeof(unsigned);
    a->value = value;
    a->n = 1;
    a->params[0] = &a->dst;
    a->params[1] = &a->value;
    a->params[2] = &a->n;
}

/* How case `i` launches its kernel on `stream` (while capturing). */
static void launch(int i, const char *how, CUstream stream, CUgraphExec inner) {
    struct fill_args a;
    fill_args(&a, i, 100 + (unsigned)i);
    CUresult r;
    if (!strcmp(how, "cuLaunchKernel") || !strcmp(how, "cuLaunchKernel_ptsz")) {
        r = ((launch_fn)entry(how))(fill, 1, 1, 1, 1, 1, 1, 0, stream, a.params, NULL);
    } else if (!strcmp(how, "cuLaunchKernelEx")) {
        CUlaunchConfig config;
        memset(&config, 0, sizeof config);
        config.gridDimX = config.gridDimY = config.gridDimZ = 1;
        config.blockDimX = config.blockDimY = config.blockDimZ = 1;
        config.hStream = stream;
        r = ((launch_ex_fn)entry(how))(&config, fill, a.params, NULL);
    } else if (!strcmp(how, "cuLaunchCooperativeKernel")) {
        r = ((cooperative_fn)entry(how))(fill, 1, 1, 1, 1, 1, 1, 0, stream, a.params);
    } else if (!strcmp(how, "cuGraphLaunch")) {
        r = ((graph_launch_fn)entry(how))(inner, stream);
    } else {
        die("unknown launch %s", how);
    }
    if (r != CUDA_SUCCESS) die("case %d: %s while capturing = %d", i, how, (int)r);
}

/* Thread of step 4: launches measured kernels on its own stream until told to stop. */
static volatile int stop_measured;
static CUcontext ctx;

static void *measured_launches(void *arg) {
    (void)arg;
    CU(cuCtxSetCurrent(ctx));
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    struct fill_args a;
    fill_args(&a, CASES, 7);
    long launches = 0;
    while (!stop_measured) {
        CU(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s, a.params, NULL));
        launches++;
        usleep(100);
    }
    /* No cuStreamSynchronize: that is an unsafe call itself while a global capture runs elsewhere. */
    return (void *)launches;
}

/* Thread of step 5: one cuEventQuery in the given capture mode, its result in *arg. */
struct query {
    CUevent event;
    CUstreamCaptureMode mode;
    CUresult result;
};

static void *query_event(void *arg) {
    struct query *q = arg;
    CU(cuCtxSetCurrent(ctx));
    CUstreamCaptureMode mode = q->mode;
    CU(cuThreadExchangeStreamCaptureMode(&mode));
    q->result = cuEventQuery(q->event);
    return NULL;
}

static CUresult query_from_thread(CUevent event, CUstreamCaptureMode mode) {
    struct query q = {event, mode, CUDA_SUCCESS};
    pthread_t t;
    if (pthread_create(&t, NULL, query_event, &q)) die("pthread_create");
    pthread_join(t, NULL);
    return q.result;
}

int main(void) {
    alarm(60);
    setvbuf(stdout, NULL, _IOLBF, 0);
    CUdevice dev;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuCtxCreate(&ctx, 0, dev));
    CUmodule module;
    CU(cuModuleLoadData(&module, tessera_kernels_ptx));
    CU(cuModuleGetFunction(&fill, module, "fill_u32"));
    CU(cuMemAlloc(&slots, (CASES + 1) * sizeof(unsigned)));
    CU(cuMemsetD32(slots, 0, CASES + 1));
    CUstream stream;
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

    /* 1. Every begin entry point, mode and launch entry point, in a suspended vGPU. */
    static const struct {
        const char *begin;
        int mode; /* -1: cuStreamBeginCapture without a mode */
        int per_thread;
        const char *launch;
    } cases[CASES] = {
        {"cuStreamBeginCapture", -1, 0, "cuLaunchKernel"},
        {"cuStreamBeginCapture_v2", CU_STREAM_CAPTURE_MODE_GLOBAL, 0, "cuLaunchKernelEx"},
        {"cuStreamBeginCapture_v2", CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, 0, "cuLaunchCooperativeKernel"},
        {"cuStreamBeginCapture_v2", CU_STREAM_CAPTURE_MODE_RELAXED, 0, "cuLaunchKernel"},
        {"cuStreamBeginCapture_ptsz", -1, 1, "cuLaunchKernel_ptsz"},
        {"cuStreamBeginCapture_v2_ptsz", CU_STREAM_CAPTURE_MODE_GLOBAL, 1, "cuLaunchKernel_ptsz"},
        {"cuStreamBeginCapture_v2_ptsz", CU_STREAM_CAPTURE_MODE_RELAXED, 1, "cuLaunchKernel_ptsz"},
        {"cuStreamBeginCaptureToGraph", CU_STREAM_CAPTURE_MODE_GLOBAL, 0, "cuLaunchKernel"},
        {"cuStreamBeginCaptureToGraph_ptsz", CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, 1, "cuLaunchKernel_ptsz"},
        {"cuStreamBeginCapture_v2", CU_STREAM_CAPTURE_MODE_GLOBAL, 0, "cuGraphLaunch"},
    };
    CUgraphExec execs[CASES];
    for (int i = 0; i < CASES; i++) {
        CUstream s = cases[i].per_thread ? NULL : stream;
        const char *end_name = cases[i].per_thread ? "cuStreamEndCapture_ptsz" : "cuStreamEndCapture";
        CUgraph into = NULL, graph = NULL;
        CUresult r;
        if (strstr(cases[i].begin, "ToGraph")) {
            CU(cuGraphCreate(&into, 0));
            r = ((begin_to_graph_fn)entry(cases[i].begin))(s, into, NULL, NULL, 0, cases[i].mode);
        } else if (cases[i].mode < 0) {
            r = ((begin1_fn)entry(cases[i].begin))(s);
        } else {
            r = ((begin2_fn)entry(cases[i].begin))(s, cases[i].mode);
        }
        if (r != CUDA_SUCCESS) die("case %d: %s = %d", i, cases[i].begin, (int)r);
        CUstreamCaptureStatus status;
        CU(((CUresult(*)(CUstream, CUstreamCaptureStatus *))entry(
            cases[i].per_thread ? "cuStreamIsCapturing_ptsz" : "cuStreamIsCapturing"))(s, &status));
        if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE) die("case %d: not capturing (%d)", i, (int)status);
        /* The last case captures a graph launch: of the first case's graph (slot 0 written again). */
        launch(i, cases[i].launch, s, i == CASES - 1 ? execs[0] : NULL);
        r = ((end_fn)entry(end_name))(s, &graph);
        if (r != CUDA_SUCCESS) die("case %d: %s = %d", i, end_name, (int)r);
        if (into && graph != into) die("case %d: the capture did not end in its graph", i);
        CU(cuGraphInstantiateWithFlags(&execs[i], graph, 0));
        fact("captured.case", "%d %s %s", i, cases[i].begin, cases[i].launch);
    }
    fact("captured", "%d", CASES);

    /* 2. A launch not captured is gated: it waits for the test to resume the vGPU. */
    struct fill_args direct;
    fill_args(&direct, CASES, 1);
    unsigned long long before = now_ns();
    CU(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, stream, direct.params, NULL));
    fact("held_ns", "%llu", now_ns() - before);

    /* 3. The graphs run. */
    for (int i = 0; i < CASES; i++) CU(cuGraphLaunch(execs[i], stream));
    CU(cuStreamSynchronize(stream));
    unsigned got[CASES + 1];
    CU(cuMemcpyDtoH(got, slots, sizeof got));
    for (int i = 0; i < CASES - 1; i++) {
        if (got[i] == 100u + (unsigned)i)
            fact("graph.case", "%d ok", i);
        else
            fact("graph.case", "%d wrong %u", i, got[i]);
    }

    /* 4. A global-mode capture beside measured launches on another thread. */
    pthread_t worker;
    if (pthread_create(&worker, NULL, measured_launches, NULL)) die("pthread_create");
    usleep(20000);
    CU(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    for (int k = 0; k < 100; k++) launch(0, "cuLaunchKernel", stream, NULL);
    usleep(50000);
    CUgraph beside;
    CUresult ended = cuStreamEndCapture(stream, &beside);
    stop_measured = 1;
    void *launched;
    pthread_join(worker, &launched);
    fact("measured_launches", "%ld", (long)launched);
    fact("global_beside_measured", "%s", ended == CUDA_SUCCESS ? "ok" : "failed");
    fact("global_beside_measured.code", "%d", (int)ended);

    /* 5. The simulated driver's modes: another thread's unsafe call breaks a global capture unless relaxed. */
    CUevent event;
    CU(cuEventCreate(&event, CU_EVENT_DEFAULT));
    CU(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    fact("relaxed_query", "%d", (int)query_from_thread(event, CU_STREAM_CAPTURE_MODE_RELAXED));
    fact("thread_local_query", "%d", (int)query_from_thread(event, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CUgraph kept;
    fact("end_after_allowed", "%d", (int)cuStreamEndCapture(stream, &kept));
    CU(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    fact("global_query", "%d", (int)query_from_thread(event, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUgraph broken;
    fact("end_after_unsafe", "%d", (int)cuStreamEndCapture(stream, &broken));
    fact("done", "ok");
    return 0;
}
