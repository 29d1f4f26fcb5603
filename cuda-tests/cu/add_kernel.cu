/* The kernel of add_main.cu: its sum is defined in another translation unit (add_sum.cu), or, built without
 * -rdc (-DWHOLE_PROGRAM), in this one. */
#ifdef WHOLE_PROGRAM
#include "add_sum.cu"
#else
__device__ float sum(float x, float y);
#endif

extern "C" __global__ void vector_add_f32(const float *a, const float *b, float *c, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) c[i] = sum(a[i], b[i]);
}
