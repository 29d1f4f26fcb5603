/*
 * cuGetProcAddress_v2, CUDA 11's cuGetProcAddress and cuGetProcAddress_v2_ptsz, asked for every row of the
 * real driver's probed table (ffi/data/proc-address-table.tsv), as the CUDA runtime and cudarc do.
 *
 * Usage: proc_address TABLE SHIM|- [BASE:VERSION:FLAGS...]
 * SHIM is the path of libtessera.so when the program runs under it ("-" when not). The lookup functions
 * come from dlsym on the driver's handle (under the shim: the shim's, which is path b at work).
 *
 * For each row (base, flags, min_version, symbol), a request for `base` at `min_version` with `flags`
 * must succeed with status 0 and answer the shim's export of `symbol` when the shim exports it (it is
 * intercepted), else the driver's own export of `symbol`; dladdr must agree (object and symbol name).
 * The _ptsz lookup is asked with the flags that select the same row (default means per-thread there).
 * For each (base, flags) the newest row must be the answer at the driver's version, and below the oldest
 * row the answer is NULL with status 2 (version not sufficient).
 *
 * Prints counts ("rows", "v2_ok", "v1_ok", "ptsz_checked", "ptsz_ok", "latest_checked", "latest_ok",
 * "old_checked", "old_ok"), up to 20 "mismatch ..." lines, one "hooked <symbol>" per intercepted symbol
 * answered, edge cases ("case.<name> code status object:symbol"), the queries given as arguments
 * ("query.<base>:<version>:<flags> code status object:symbol", via cuGetProcAddress_v2), and calls made
 * through answered pointers ("call.<symbol> code").
 */
#include "report.h"

#include <cuda.h>

typedef CUresult (*lookup_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*lookup_v1_fn)(const char *, void **, int, cuuint64_t);

enum { MAX_ROWS = 4096, NAME = 96 };

struct row {
    char base[NAME], symbol[NAME];
    int flags, version;
};

static struct row rows[MAX_ROWS];
static int row_count;
static void *driver, *shim;
static lookup_v2_fn lookup_v2, lookup_ptsz;
static lookup_v1_fn lookup_v1;
static int mismatches;

static void read_table(const char *path) {
    FILE *file = fopen(path, "r");
    if (file == NULL) die("cannot open %s", path);
    char line[512];
    while (fgets(line, sizeof line, file) != NULL) {
        struct row r;
        if (line[0] == '#' || strncmp(line, "base_name", 9) == 0) continue;
        if (sscanf(line, "%95s %d %d %95s", r.base, &r.flags, &r.version, r.symbol) != 4) continue;
        if (row_count == MAX_ROWS) die("more than %d rows", MAX_ROWS);
        rows[row_count++] = r;
    }
    fclose(file);
}

/* The function a lookup answering `symbol` must return, and where() must name it. */
static void *expected(const char *symbol, char *place, size_t size) {
    void *ours = shim != NULL ? dlsym(shim, symbol) : NULL;
    void *theirs = dlsym(driver, symbol);
    snprintf(place, size, "%s:%s", ours != NULL ? "libtessera.so" : "libsimcuda.so", symbol);
    return ours != NULL ? ours : theirs;
}

static void mismatch(const char *api, const struct row *r, int version, int flags, CUresult code, int status, void *pfn) {
    if (mismatches++ < 20)
        fact("mismatch", "%s(%s, %d, %d) = %d status %d %s; wanted %s", api, r->base, version, flags, (int)code,
             status, where(pfn), r->symbol);
}

/* True when the three answers agree with `r`, requested at `version`. */
static int answers(const char *api, const struct row *r, int version, int flags, CUresult code, int status, void *pfn) {
    char place[2 * NAME];
    void *want = expected(r->symbol, place, sizeof place);
    int ok = code == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && pfn != NULL && pfn == want &&
             strcmp(where(pfn), place) == 0;
    if (!ok) mismatch(api, r, version, flags, code, status, pfn);
    return ok;
}

static int ask_v2(const struct row *r, int version, int flags) {
    void *pfn = NULL;
    CUdriverProcAddressQueryResult status = -1;
    CUresult code = lookup_v2(r->base, &pfn, version, flags, &status);
    return answers("cuGetProcAddress_v2", r, version, flags, code, status, pfn);
}

static int ask_v1(const struct row *r, int version, int flags) {
    void *pfn = NULL;
    CUresult code = lookup_v1(r->base, &pfn, version, flags);
    return answers("cuGetProcAddress", r, version, flags, code, CU_GET_PROC_ADDRESS_SUCCESS, pfn);
}

static int ask_ptsz(const struct row *r, int version, int flags) {
    void *pfn = NULL;
    CUdriverProcAddressQueryResult status = -1;
    CUresult code = lookup_ptsz(r->base, &pfn, version, flags, &status);
    return answers("cuGetProcAddress_v2_ptsz", r, version, flags, code, status, pfn);
}

static int same_group(const struct row *a, const struct row *b) {
    return a->flags == b->flags && strcmp(a->base, b->base) == 0;
}

static void check_rows(int driver_version) {
    int v2_ok = 0, v1_ok = 0, ptsz_checked = 0, ptsz_ok = 0;
    int latest_checked = 0, latest_ok = 0, old_checked = 0, old_ok = 0;
    for (int i = 0; i < row_count; i++) {
        const struct row *r = &rows[i];
        v2_ok += ask_v2(r, r->version, r->flags);
        v1_ok += ask_v1(r, r->version, r->flags);
        /* cuGetProcAddress_v2_ptsz: a default request is a per-thread one; legacy stays legacy. */
        if (r->flags != 0) {
            ptsz_checked++;
            ptsz_ok += ask_ptsz(r, r->version, r->flags == 2 ? 0 : 1);
        }
        int newest = 1, oldest = 1;
        for (int j = 0; j < row_count; j++) {
            if (j == i || !same_group(r, &rows[j])) continue;
            if (rows[j].version > r->version) newest = 0;
            if (rows[j].version < r->version) oldest = 0;
        }
        if (newest) {
            latest_checked++;
            latest_ok += ask_v2(r, driver_version, r->flags);
        }
        if (oldest && r->version > 1) {
            void *pfn = &pfn;
            CUdriverProcAddressQueryResult status = -1;
            CUresult code = lookup_v2(r->base, &pfn, r->version - 1, r->flags, &status);
            old_checked++;
            if (code == CUDA_SUCCESS && pfn == NULL && status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
                old_ok++;
            else
                mismatch("cuGetProcAddress_v2", r, r->version - 1, r->flags, code, status, pfn);
        }
    }
    fact("rows", "%d", row_count);
    fact("v2_ok", "%d", v2_ok);
    fact("v1_ok", "%d", v1_ok);
    fact("ptsz_checked", "%d", ptsz_checked);
    fact("ptsz_ok", "%d", ptsz_ok);
    fact("latest_checked", "%d", latest_checked);
    fact("latest_ok", "%d", latest_ok);
    fact("old_checked", "%d", old_checked);
    fact("old_ok", "%d", old_ok);
    fact("mismatches", "%d", mismatches);
}

/* Every distinct symbol of the table that comes back as the shim's entry. */
static void report_hooked(void) {
    for (int i = 0; i < row_count; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = strcmp(rows[j].symbol, rows[i].symbol) == 0;
        if (seen) continue;
        void *pfn = NULL;
        CUdriverProcAddressQueryResult status;
        lookup_v2(rows[i].base, &pfn, rows[i].version, rows[i].flags, &status);
        if (pfn != NULL && strncmp(where(pfn), "libtessera.so:", 14) == 0) fact("hooked", "%s", rows[i].symbol);
    }
}

static void report_case(const char *name, CUresult code, int status, void *pfn) {
    char key[64];
    snprintf(key, sizeof key, "case.%s", name);
    fact(key, "%d %d %s", (int)code, status, where(pfn));
}

static void check_cases(int driver_version) {
    void *pfn;
    CUdriverProcAddressQueryResult status;
#define CASE(name, call)                          \
    do {                                          \
        pfn = NULL;                               \
        status = -1;                              \
        CUresult code_ = (call);                  \
        report_case(name, code_, status, pfn);    \
    } while (0)
    CASE("unknown_symbol", lookup_v2("cuTesseraNoSuchFunction", &pfn, 12000, 0, &status));
    CASE("unknown_symbol_v1", lookup_v1("cuTesseraNoSuchFunction", &pfn, 12000, 0));
    CASE("unknown_symbol_ptsz", lookup_ptsz("cuTesseraNoSuchFunction", &pfn, 12000, 0, &status));
    CASE("version_not_sufficient", lookup_v2("cuMemAllocAsync", &pfn, 11010, 0, &status));
    CASE("version_above_driver", lookup_v2("cuMemAlloc", &pfn, driver_version + 10, 0, &status));
    CASE("version_above_driver_v1", lookup_v1("cuMemAlloc", &pfn, driver_version + 10, 0));
    CASE("version_above_driver_ptsz", lookup_ptsz("cuMemAlloc", &pfn, driver_version + 10, 0, &status));
    CASE("version_zero", lookup_v2("cuMemAlloc", &pfn, 0, 0, &status));
    CASE("no_status_pointer", lookup_v2("cuMemAlloc", &pfn, 12000, 0, NULL));
    CASE("null_symbol", lookup_v2(NULL, &pfn, 12000, 0, &status));
    CASE("null_pfn", lookup_v2("cuMemAlloc", NULL, 12000, 0, &status));
#undef CASE
}

static void run_queries(int argc, char **argv) {
    for (int i = 3; i < argc; i++) {
        char base[NAME];
        int version, flags;
        if (sscanf(argv[i], "%95[^:]:%d:%d", base, &version, &flags) != 3) die("query %s is not BASE:VERSION:FLAGS", argv[i]);
        void *pfn = NULL;
        CUdriverProcAddressQueryResult status = -1;
        CUresult code = lookup_v2(base, &pfn, version, flags, &status);
        char key[2 * NAME];
        snprintf(key, sizeof key, "query.%s", argv[i]);
        fact(key, "%d %d %s", (int)code, (int)status, where(pfn));
    }
}

/* Calls through answered pointers: the per-thread allocation entry points must work end to end. */
static void call_answers(void) {
#define GET(var, name, flags)                                                                  \
    do {                                                                                       \
        CUdriverProcAddressQueryResult status_;                                                \
        if (lookup_v2(name, (void **)&var, 12000, flags, &status_) != CUDA_SUCCESS || !var)    \
            die("cuGetProcAddress_v2(%s) found nothing", name);                                \
    } while (0)
    CUresult (*init)(unsigned) = NULL;
    CUresult (*retain)(CUcontext *, CUdevice) = NULL;
    CUresult (*set_current)(CUcontext) = NULL;
    CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream) = NULL;
    CUresult (*free_async)(CUdeviceptr, CUstream) = NULL;
    CUresult (*synchronize)(CUstream) = NULL;
    GET(init, "cuInit", 0);
    GET(retain, "cuDevicePrimaryCtxRetain", 0);
    GET(set_current, "cuCtxSetCurrent", 0);
    GET(alloc_async, "cuMemAllocAsync", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    GET(free_async, "cuMemFreeAsync", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    GET(synchronize, "cuStreamSynchronize", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
#undef GET
    CUcontext ctx;
    CUdeviceptr p = 0;
    CUresult r = init(0);
    if (r == CUDA_SUCCESS) r = retain(&ctx, 0);
    if (r == CUDA_SUCCESS) r = set_current(ctx);
    if (r != CUDA_SUCCESS) die("context setup: %d", (int)r);
    fact("call.cuMemAllocAsync_ptsz", "%d", (int)alloc_async(&p, 1 << 20, 0));
    fact("call.cuMemFreeAsync_ptsz", "%d", (int)free_async(p, 0));
    fact("call.cuStreamSynchronize_ptsz", "%d", (int)synchronize(0));
}

int main(int argc, char **argv) {
    if (argc < 3) die("usage: proc_address TABLE SHIM|- [BASE:VERSION:FLAGS...]");
    read_table(argv[1]);
    if (strcmp(argv[2], "-") != 0) {
        shim = dlopen(argv[2], RTLD_LAZY | RTLD_NOLOAD);
        if (shim == NULL) die("%s is not loaded in this process", argv[2]);
    }
    driver = open_library("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    lookup_v2 = (lookup_v2_fn)dlsym(driver, "cuGetProcAddress_v2");
    lookup_v1 = (lookup_v1_fn)dlsym(driver, "cuGetProcAddress");
    lookup_ptsz = (lookup_v2_fn)dlsym(driver, "cuGetProcAddress_v2_ptsz");
    if (!lookup_v2 || !lookup_v1 || !lookup_ptsz) die("a cuGetProcAddress entry point is missing");
    fact("lookup.cuGetProcAddress_v2", "%s", where((void *)lookup_v2));
    fact("lookup.cuGetProcAddress", "%s", where((void *)lookup_v1));
    fact("lookup.cuGetProcAddress_v2_ptsz", "%s", where((void *)lookup_ptsz));
    int (*get_version)(int *) = (int (*)(int *))dlsym(driver, "cuDriverGetVersion");
    int driver_version = 0;
    if (get_version == NULL || get_version(&driver_version) != 0) die("cuDriverGetVersion");
    fact("driver_version", "%d", driver_version);
    check_rows(driver_version);
    report_hooked();
    check_cases(driver_version);
    run_queries(argc, argv);
    call_answers();
    fact("done", "ok");
    return 0;
}
