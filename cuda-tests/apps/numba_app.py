"""An unmodified numba-cuda program, run by cuda-tests/probe/tests/e2e/numba.rs on the simulated driver.

    python3 numba_app.py kernel   a @cuda.jit vector add: compiled (NVVM, nvJitLink), loaded, launched,
                                  synchronized; says whether the result holds numbers, and whether it is right
    python3 numba_app.py quota    the device's memory as numba sees it, then a 1 GiB and a 3 GiB array
    python3 numba_app.py saturate SECONDS
                                  launches a @cuda.jit kernel in batches of 100, synchronizing after each,
                                  for that long (the engine time a kernel takes is the simulator's)

One fact per line, "key value", as the C test programs print them; "done ok" last.
"""
import sys

import numpy as np
from numba import cuda


@cuda.jit
def add(a, b, c):
    i = cuda.grid(1)
    if i < c.size:
        c[i] = a[i] + b[i]


def kernel():
    a = np.arange(1 << 16, dtype=np.float32)
    b = 2 * a
    d_a, d_b = cuda.to_device(a), cuda.to_device(b)
    d_c = cuda.to_device(np.zeros_like(a))
    add[(a.size + 255) // 256, 256](d_a, d_b, d_c)
    cuda.synchronize()
    c = d_c.copy_to_host()
    print("launched ok")
    print("right", bool(np.allclose(c, a + b)))
    print("nan", bool(np.isnan(c).all()))


def quota():
    free, total = cuda.current_context().get_memory_info()
    print("total", total)
    one = cuda.device_array(1 << 28, dtype=np.float32)
    print("one_gib ok")
    try:
        cuda.device_array(3 << 28, dtype=np.float32)
        print("three_gib allocated")
    except cuda.cudadrv.driver.CudaAPIError as e:
        print("three_gib refused", int(e.code))
    del one


def saturate():
    import time

    a = cuda.to_device(np.ones(1024, dtype=np.float32))
    end = time.monotonic() + float(sys.argv[2])
    launched = 0
    while time.monotonic() < end:
        for _ in range(100):
            add[4, 256](a, a, a)
        cuda.synchronize()
        launched += 100
    print("launched", launched)


{"kernel": kernel, "quota": quota, "saturate": saturate}[sys.argv[1]]()
print("done ok")
