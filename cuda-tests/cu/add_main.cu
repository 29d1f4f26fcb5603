/*
 * A CUDA program as people write them, compiled by NVIDIA's nvcc, its runtime linked statically (nvcc's
 * default): with -rdc (separate compilation: the kernel in add_kernel.cu calls a device function defined
 * in add_sum.cu, which nvcc's device linker joins), or whole (-DWHOLE_PROGRAM: add_kernel.cu includes
 * add_sum.cu). Run by cuda-tests/probe/tests/e2e/cudart.rs on the simulated driver, built for several
 * architectures.
 *
 * The kernel is named and laid out as the simulator's built-in vector_add_f32, so the simulated driver
 * computes it and the result shows that the registered kernel ran with its arguments.
 *
 * Facts: "runtime" (cudaRuntimeGetVersion), "kernel ok" (c = a + b for every element), "done ok"; or
 * "error ..." naming the call that failed and its error.
 */
#include "../c/report.h"

extern "C" __global__ void vector_add_f32(const float *a, const float *b, float *c, unsigned long long n);

#define RT(call)                                                                                     \
    do {                                                                                             \
        cudaError_t result_ = (call);                                                                \
        if (result_ != cudaSuccess) die("%s = %d (%s)", #call, (int)result_, cudaGetErrorName(result_)); \
    } while (0)

int main() {
    const unsigned n = 1024;
    static float host[3][n];
    float *dev[3];
    int version = 0;
    RT(cudaRuntimeGetVersion(&version));
    fact("runtime", "%d", version);
    for (unsigned i = 0; i < n; i++) {
        host[0][i] = (float)i;
        host[1][i] = 2.0f * (float)i + 1.0f;
    }
    for (int k = 0; k < 3; k++) RT(cudaMalloc(&dev[k], n * sizeof(float)));
    RT(cudaMemcpy(dev[0], host[0], n * sizeof(float), cudaMemcpyHostToDevice));
    RT(cudaMemcpy(dev[1], host[1], n * sizeof(float), cudaMemcpyHostToDevice));
    vector_add_f32<<<n / 256, 256>>>(dev[0], dev[1], dev[2], n);
    RT(cudaGetLastError());
    RT(cudaMemcpy(host[2], dev[2], n * sizeof(float), cudaMemcpyDeviceToHost));
    for (unsigned i = 0; i < n; i++)
        if (host[2][i] != host[0][i] + host[1][i]) die("c[%u] = %g, not %g", i, host[2][i], host[0][i] + host[1][i]);
    fact("kernel", "ok");
    for (int k = 0; k < 3; k++) RT(cudaFree(dev[k]));
    fact("done", "ok");
    return 0;
}
