/*
 * Shared by the benchmarks' C clients (overhead.c, spin.c): the product's spin kernel embedded at build time,
 * and failing with one JSON line. Define BENCH_SCENARIO (the "scenario" their JSON lines carry) before
 * including it; it needs _GNU_SOURCE before any system header, as the clients define it first.
 */
#ifndef TESSERA_BENCH_H
#define TESSERA_BENCH_H

#include <cuda.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef BENCH_SCENARIO
#error "define BENCH_SCENARIO before including bench.h"
#endif

/* tools/kernels/spin.ptx (the product's spin kernel; simgpu runs it by entry name), embedded
 * NUL-terminated: the benchmark passes the folder as TESSERA_KERNELS_DIR. */
#ifndef TESSERA_KERNELS_DIR
#error "build with -DTESSERA_KERNELS_DIR=\"<path to tools/kernels>\""
#endif
__asm__(".section .rodata\n"
        ".globl bench_spin_ptx\n"
        ".hidden bench_spin_ptx\n"
        "bench_spin_ptx:\n"
        ".incbin \"" TESSERA_KERNELS_DIR "/spin.ptx\"\n"
        ".byte 0\n"
        ".previous\n");
extern const char bench_spin_ptx[];

/* Prints {"scenario":BENCH_SCENARIO,"error":MESSAGE} and exits with status 1. */
__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *format, ...) {
    char text[512];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    /* The message goes into a JSON string: no quote or backslash may end it early. */
    for (char *c = text; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '\'';
    printf("{\"scenario\":\"%s\",\"error\":\"%s\"}\n", BENCH_SCENARIO, text);
    fflush(stdout);
    exit(1);
}

#define BENCH_SPELLED(x) #x
/* Runs a driver call; any result but CUDA_SUCCESS fails naming the call. */
#define CU(call)                                                                         \
    do {                                                                                 \
        CUresult result_ = (call);                                                       \
        if (result_ != CUDA_SUCCESS) fail("%s = %d", BENCH_SPELLED(call), (int)result_); \
    } while (0)

#endif
