/*
 * A preloaded library that interposes malloc and free the usual way: it finds the next definitions with
 * dlsym(RTLD_NEXT, ...). Loaded after libtessera.so (LD_PRELOAD="libtessera.so libinterposer.so"), its
 * RTLD_NEXT lookups go through the shim's dlsym: they must still be resolved against this library, not
 * the shim, or "next" would be this very malloc and every allocation would recurse.
 *
 * Exports interposer_next_malloc() (what RTLD_NEXT returned) and interposer_calls() (mallocs seen).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stddef.h>

static void *(*next_malloc)(size_t);
static void (*next_free)(void *);
static unsigned long calls;
static int resolving;

/* Allocations made while dlsym itself runs (it may allocate) come from here and are never freed. */
static _Alignas(16) char early[1 << 16];
static size_t early_used;

static void resolve(void) {
    if (next_malloc != NULL || resolving) return;
    resolving = 1;
    next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    resolving = 0;
}

void *malloc(size_t size) {
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    resolve();
    if (next_malloc != NULL) return next_malloc(size);
    size_t rounded = (size + 15) & ~(size_t)15;
    if (rounded > sizeof early - early_used) return NULL;
    void *p = early + early_used;
    early_used += rounded;
    return p;
}

void free(void *p) {
    if ((char *)p >= early && (char *)p < early + sizeof early) return;
    resolve();
    if (next_free != NULL) next_free(p);
}

void *interposer_next_malloc(void) {
    resolve();
    return (void *)next_malloc;
}

unsigned long interposer_calls(void) {
    return __atomic_load_n(&calls, __ATOMIC_RELAXED);
}
