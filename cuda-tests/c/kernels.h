/*
 * The test kernels, cuda-tests/kernels/kernels.ptx (real PTX; simgpu runs them by their entry names),
 * embedded NUL-terminated at build time as `tessera_kernels_ptx`: the harness passes the folder as
 * TESSERA_KERNELS_DIR. Included by the C test programs that load a module.
 */
#ifndef TESSERA_TEST_KERNELS_H
#define TESSERA_TEST_KERNELS_H

#ifndef TESSERA_KERNELS_DIR
#error "build with -DTESSERA_KERNELS_DIR=\"<path to cuda-tests/kernels>\""
#endif
__asm__(".section .rodata\n"
        ".globl tessera_kernels_ptx\n"
        ".hidden tessera_kernels_ptx\n"
        "tessera_kernels_ptx:\n"
        ".incbin \"" TESSERA_KERNELS_DIR "/kernels.ptx\"\n"
        ".byte 0\n"
        ".previous\n");
extern const char tessera_kernels_ptx[];

#endif
