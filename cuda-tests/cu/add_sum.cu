/* The device function add_kernel.cu's kernel calls, joined to it by nvcc's device linker. */
__device__ float sum(float x, float y) { return x + y; }
