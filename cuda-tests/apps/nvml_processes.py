"""The processes NVML sees on device 0 and the memory it counts for each, as nvidia-smi shows them: run
by the real-GPU check bundle's `nvml` check (cuda-tests/probe/src/gpu_check) with the host's python3,
which needs nothing but ctypes. One fact per line, "process PID BYTES"; "done ok" last.
"""
import ctypes
import sys


class ProcessInfo(ctypes.Structure):
    # nvmlProcessInfo_t (nvml.h, the _v3 query's element).
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


def check(what, result):
    if result != 0:
        print("error", what, "returned", result)
        sys.exit(1)


nvml = ctypes.CDLL("libnvidia-ml.so.1")
check("nvmlInit_v2", nvml.nvmlInit_v2())
device = ctypes.c_void_p()
check("nvmlDeviceGetHandleByIndex_v2", nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(device)))
count = ctypes.c_uint(64)
infos = (ProcessInfo * 64)()
check("nvmlDeviceGetComputeRunningProcesses_v3",
      nvml.nvmlDeviceGetComputeRunningProcesses_v3(device, ctypes.byref(count), infos))
for info in infos[: count.value]:
    print("process", info.pid, info.usedGpuMemory)
nvml.nvmlShutdown()
print("done ok")
