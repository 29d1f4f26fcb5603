/*
 * Shared by the C test programs: they print one fact per line, "key value", which the Rust integration
 * tests (cuda-tests/probe/tests/common/cprog.rs) read, and stop with "error ..." on an unexpected failure.
 * Include it first: it needs _GNU_SOURCE (dladdr, realpath) before any system header.
 */
#ifndef TESSERA_TEST_REPORT_H
#define TESSERA_TEST_REPORT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints one fact: "key value". */
__attribute__((format(printf, 2, 3), unused)) static void fact(const char *key, const char *format, ...) {
    va_list args;
    va_start(args, format);
    printf("%s ", key);
    vprintf(format, args);
    putchar('\n');
    va_end(args);
}

/* Reports an unexpected failure and exits. */
__attribute__((format(printf, 1, 2), noreturn, unused)) static void die(const char *format, ...) {
    va_list args;
    va_start(args, format);
    printf("error ");
    vprintf(format, args);
    putchar('\n');
    va_end(args);
    fflush(stdout);
    exit(1);
}

/*
 * Where a code address lives, as "object:symbol": the file's name with symlinks resolved (the simulated
 * driver reads libsimcuda.so whatever name it was loaded by) and the exported symbol starting exactly
 * there ("?" when none does). "null" for NULL. Returns one of four rotating static buffers.
 */
__attribute__((unused)) static const char *where(const void *address) {
    static char buffers[4][PATH_MAX + 256];
    static unsigned next;
    char *out = buffers[next++ % 4];
    Dl_info info;
    if (address == NULL) return "null";
    if (!dladdr(address, &info) || info.dli_fname == NULL) {
        snprintf(out, sizeof buffers[0], "unknown:%p", address);
        return out;
    }
    char resolved[PATH_MAX];
    const char *file = realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
    const char *base = strrchr(file, '/');
    const char *symbol = info.dli_sname != NULL && info.dli_saddr == address ? info.dli_sname : "?";
    snprintf(out, sizeof buffers[0], "%s:%s", base ? base + 1 : file, symbol);
    return out;
}

/* The whole file at `path`, NUL-terminated (for text) and 8-byte aligned (for binary images a structure
 * points at); its length in `*len` when `len` is not NULL. Exits when it cannot be read. */
__attribute__((unused)) static void *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = (char *)aligned_alloc(8, ((size_t)size + 8) & ~(size_t)7);
    if (!data || fread(data, 1, (size_t)size, f) != (size_t)size) die("cannot read %s", path);
    data[size] = 0;
    fclose(f);
    if (len) *len = (size_t)size;
    return data;
}

/* dlopen, or exit with dlerror's message. */
__attribute__((unused)) static void *open_library(const char *name, int flags) {
    void *handle = dlopen(name, flags);
    if (handle == NULL) die("dlopen(%s): %s", name, dlerror());
    return handle;
}

#endif
