"""An unmodified CuPy program, run by cuda-tests/probe/tests/e2e/cupy.rs on the simulated driver.

    python3 cupy_app.py memory    devices, the memory CuPy sees, a 1 GiB and a 3 GiB array
    python3 cupy_app.py kernels   an ElementwiseKernel and a RawKernel, compiled by NVRTC, launched and
                                  synchronized

CuPy links NVIDIA's CUDA runtime statically: every call goes through the driver's private tables. One
fact per line, "key value"; "done ok" last.
"""
import sys

import cupy as cp


def memory():
    print("count", cp.cuda.runtime.getDeviceCount())
    free, total = cp.cuda.runtime.memGetInfo()
    print("total", total)
    one = cp.zeros(1 << 28, dtype=cp.float32)
    print("one_gib ok")
    try:
        cp.zeros(3 << 28, dtype=cp.float32)
        print("three_gib allocated")
    except cp.cuda.memory.OutOfMemoryError:
        print("three_gib refused")
    del one


def kernels():
    add = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = x + y", "tessera_add")
    x = cp.ones(1024, dtype=cp.float32)
    add(x, x)
    scale = cp.RawKernel(
        r'extern "C" __global__ void tessera_scale(float* v, int n) {'
        r" int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) v[i] *= 2; }",
        "tessera_scale",
    )
    scale((4,), (256,), (x, cp.int32(1024)))
    cp.cuda.Device().synchronize()
    print("kernels ok")


{"memory": memory, "kernels": kernels}[sys.argv[1]]()
print("done ok")
