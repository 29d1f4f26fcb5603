/*
 * cuBLAS math modes, as a program using cuBLAS sets them: the tensor-core policy's test program. Linked to
 * neither the driver nor cuBLAS; both are opened with dlopen, as frameworks do.
 *
 * Usage: cublas_modes ARG...
 * Prints "tf32_override VALUE" (getenv("NVIDIA_TF32_OVERRIDE"), "unset" when it is not set), initializes
 * the driver ("cu_init CODE"), tells whether cuBLAS was loaded before the program opened it
 * ("cublas_loaded 0|1"), where dlsym found cublasSetMathMode ("set_math_mode object:symbol"), then creates
 * a handle and, for every ARG:
 *   a number   cublasSetMathMode(handle, ARG), then cublasGetMathMode: "mode ARG STATUS READ_BACK";
 *   wait       prints "waiting" and waits for a line on stdin (a test changes the vGPU meanwhile).
 */
#include "report.h"

typedef int (*create_fn)(void **);
typedef int (*destroy_fn)(void *);
typedef int (*set_mode_fn)(void *, unsigned);
typedef int (*get_mode_fn)(void *, unsigned *);

/* dlsym, or exit naming the symbol. */
static void *symbol(void *library, const char *name) {
    void *address = dlsym(library, name);
    if (address == NULL) die("dlsym(%s): %s", name, dlerror());
    return address;
}

int main(int argc, char **argv) {
    const char *tf32 = getenv("NVIDIA_TF32_OVERRIDE");
    fact("tf32_override", "%s", tf32 ? tf32 : "unset");

    int (*cu_init)(unsigned) = (int (*)(unsigned))symbol(open_library("libcuda.so.1", RTLD_NOW), "cuInit");
    fact("cu_init", "%d", cu_init(0));

    void *already = dlopen("libcublas.so.12", RTLD_LAZY | RTLD_NOLOAD);
    fact("cublas_loaded", "%d", already != NULL);
    if (already != NULL) dlclose(already);

    void *cublas = open_library("libcublas.so.12", RTLD_NOW | RTLD_LOCAL);
    create_fn create = (create_fn)symbol(cublas, "cublasCreate_v2");
    destroy_fn destroy = (destroy_fn)symbol(cublas, "cublasDestroy_v2");
    set_mode_fn set_mode = (set_mode_fn)symbol(cublas, "cublasSetMathMode");
    get_mode_fn get_mode = (get_mode_fn)symbol(cublas, "cublasGetMathMode");
    fact("set_math_mode", "%s", where((void *)set_mode));

    void *handle = NULL;
    int status = create(&handle);
    if (status != 0) die("cublasCreate_v2: %d", status);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "wait") == 0) {
            fact("waiting", "%d", i);
            fflush(stdout);
            char line[64];
            if (fgets(line, sizeof line, stdin) == NULL) die("stdin closed while waiting");
            continue;
        }
        unsigned mode = (unsigned)strtoul(argv[i], NULL, 10), read_back = 999;
        int set = set_mode(handle, mode);
        int got = get_mode(handle, &read_back);
        if (got != 0) die("cublasGetMathMode: %d", got);
        fact("mode", "%u %d %u", mode, set, read_back);
    }
    status = destroy(handle);
    if (status != 0) die("cublasDestroy_v2: %d", status);
    fact("done", "ok");
    return 0;
}
