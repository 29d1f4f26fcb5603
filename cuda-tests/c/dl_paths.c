/*
 * dlopen + dlsym/dlvsym: how cudarc and most bindings reach the driver and NVML. Not linked to either.
 *
 * Usage: dl_paths LIBRARY NAME... [LIBRARY NAME...]
 * An argument containing ".so" opens that library (RTLD_NOW | RTLD_LOCAL); every other argument is a
 * symbol looked up in the library opened last, on every path:
 *   handle.<name>        dlsym(handle, name)
 *   default.<name>       dlsym(RTLD_DEFAULT, name)
 *   next.<name>          dlsym(RTLD_NEXT, name)
 *   vsym.<name>          dlvsym(handle, name, <library's name>)
 *   vsym_default.<name>  dlvsym(RTLD_DEFAULT, name, <library's name>)
 *   vsym_next.<name>     dlvsym(RTLD_NEXT, name, <library's name>)
 * each printed as object:symbol (report.h's where()).
 *
 * Then it calls through what it found: cuMemGetInfo_v2 and nvmlDeviceGetMemoryInfo resolved on each path
 * ("call.<name>.<path> code total"), and reports libc lookups that must pass through untouched: RTLD_NEXT
 * and RTLD_DEFAULT lookups of malloc, versioned ones, a failing one (dlerror must be set), and, when the
 * malloc interposer (interposer.c) is preloaded, what its own dlsym(RTLD_NEXT, "malloc") returned.
 */
#include "report.h"

#include <cuda.h>

typedef CUresult (*mem_get_info_fn)(size_t *, size_t *);

/* nvml.h is not among the headers the tests install: the few declarations used here. */
typedef struct {
    unsigned long long total, free, used;
} nvml_memory;
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_fn)(unsigned int, void **);
typedef int (*nvml_memory_fn)(void *, nvml_memory *);

static const char *const PATHS[] = {"handle", "default", "next", "vsym", "vsym_default", "vsym_next"};
enum { PATH_COUNT = sizeof PATHS / sizeof PATHS[0] };

/* `name` looked up on path `path` (an index into PATHS) for the library `handle` opened as `library`. */
static void *lookup(int path, void *handle, const char *library, const char *name) {
    switch (path) {
    case 0: return dlsym(handle, name);
    case 1: return dlsym(RTLD_DEFAULT, name);
    case 2: return dlsym(RTLD_NEXT, name);
    case 3: return dlvsym(handle, name, library);
    case 4: return dlvsym(RTLD_DEFAULT, name, library);
    default: return dlvsym(RTLD_NEXT, name, library);
    }
}

static void report_symbol(void *handle, const char *library, const char *name) {
    for (int path = 0; path < PATH_COUNT; path++) {
        char key[256];
        snprintf(key, sizeof key, "%s.%s", PATHS[path], name);
        fact(key, "%s", where(lookup(path, handle, library, name)));
    }
}

/* cuMemGetInfo_v2 through every path that finds it, with a current context. */
static void call_driver(void *cuda) {
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(cuda, "cuInit");
    CUresult (*retain)(CUcontext *, CUdevice) = (CUresult(*)(CUcontext *, CUdevice))dlsym(cuda, "cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = (CUresult(*)(CUcontext))dlsym(cuda, "cuCtxSetCurrent");
    if (!init || !retain || !set_current) die("cuInit, cuDevicePrimaryCtxRetain or cuCtxSetCurrent not found");
    CUcontext ctx;
    CUresult r = init(0);
    if (r == CUDA_SUCCESS) r = retain(&ctx, 0);
    if (r == CUDA_SUCCESS) r = set_current(ctx);
    if (r != CUDA_SUCCESS) die("context setup: %d", (int)r);
    for (int path = 0; path < PATH_COUNT; path++) {
        mem_get_info_fn f = (mem_get_info_fn)lookup(path, cuda, "libcuda.so.1", "cuMemGetInfo_v2");
        if (f == NULL) continue;
        size_t free_bytes = 0, total = 0;
        CUresult code = f(&free_bytes, &total);
        char key[64];
        snprintf(key, sizeof key, "call.cuMemGetInfo_v2.%s", PATHS[path]);
        fact(key, "%d %zu", (int)code, total);
    }
}

/* nvmlDeviceGetMemoryInfo through every path that finds it. */
static void call_nvml(void *nvml) {
    nvml_init_fn init = (nvml_init_fn)dlsym(nvml, "nvmlInit_v2");
    nvml_handle_fn by_index = (nvml_handle_fn)dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
    if (!init || !by_index) die("nvmlInit_v2 or nvmlDeviceGetHandleByIndex_v2 not found");
    void *device = NULL;
    int r = init();
    if (r == 0) r = by_index(0, &device);
    if (r != 0) die("NVML setup: %d", r);
    for (int path = 0; path < PATH_COUNT; path++) {
        nvml_memory_fn f = (nvml_memory_fn)lookup(path, nvml, "libnvidia-ml.so.1", "nvmlDeviceGetMemoryInfo");
        if (f == NULL) continue;
        nvml_memory memory = {0, 0, 0};
        int code = f(device, &memory);
        char key[64];
        snprintf(key, sizeof key, "call.nvmlDeviceGetMemoryInfo.%s", PATHS[path]);
        fact(key, "%d %llu", code, memory.total);
    }
}

/* Lookups of libc's own functions, which must behave exactly as without the shim. */
static void report_libc(void) {
    fact("libc.next.malloc", "%s", where(dlsym(RTLD_NEXT, "malloc")));
    fact("libc.default.malloc", "%s", where(dlsym(RTLD_DEFAULT, "malloc")));
    fact("libc.vsym_next.malloc", "%s", where(dlvsym(RTLD_NEXT, "malloc", "GLIBC_2.2.5")));
    fact("libc.vsym_default.memcpy", "%s", where(dlvsym(RTLD_DEFAULT, "memcpy", "GLIBC_2.14")));
    dlerror();
    void *missing = dlsym(RTLD_DEFAULT, "tessera_test_no_such_symbol");
    const char *error = dlerror();
    fact("libc.missing", "%s %s", where(missing), error != NULL ? "dlerror-set" : "dlerror-empty");
    void *(*interposer_next)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "interposer_next_malloc");
    unsigned long (*interposer_calls)(void) = (unsigned long (*)(void))dlsym(RTLD_DEFAULT, "interposer_calls");
    if (interposer_next != NULL && interposer_calls != NULL) {
        free(malloc(64));
        fact("interposer.next.malloc", "%s", where(interposer_next()));
        fact("interposer.calls", "%lu", interposer_calls());
    }
}

int main(int argc, char **argv) {
    void *cuda = NULL, *nvml = NULL, *handle = NULL;
    const char *library = NULL;
    for (int i = 1; i < argc; i++) {
        if (strstr(argv[i], ".so") != NULL) {
            library = argv[i];
            handle = open_library(library, RTLD_NOW | RTLD_LOCAL);
            if (strstr(library, "libcuda") != NULL) cuda = handle;
            if (strstr(library, "nvidia-ml") != NULL) nvml = handle;
        } else if (handle != NULL) {
            report_symbol(handle, library, argv[i]);
        } else {
            die("%s: open a library first", argv[i]);
        }
    }
    if (cuda != NULL) call_driver(cuda);
    if (nvml != NULL) call_nvml(nvml);
    report_libc();
    fact("done", "ok");
    return 0;
}
