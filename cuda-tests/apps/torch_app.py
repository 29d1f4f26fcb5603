"""An unmodified PyTorch program, run by cuda-tests/probe/tests/e2e/torch.rs (through tools/test-apps.sh).

    python3 torch_app.py device     is_available, device count, properties, mem_get_info
    python3 torch_app.py memory     a 1 GiB tensor, then one past the memory the device shows (the caching
                                    allocator; PYTORCH_CUDA_ALLOC_CONF chooses its path)
    python3 torch_app.py graph      a CUDA graph captured and replayed
    python3 torch_app.py train [SECONDS]
                                    a small MLP's training loop: 50 steps, or as many as fit in SECONDS

PyTorch's CUDA runtime and libraries run over the driver underneath; the simulated driver computes none
of their kernels, so values are not checked, only that every call succeeds. One fact per line, "key
value"; "done ok" last.
"""
import sys
import time

import torch


def device():
    print("available", torch.cuda.is_available())
    print("count", torch.cuda.device_count())
    props = torch.cuda.get_device_properties(0)
    print("name", props.name.replace(" ", "_"))
    print("capability", f"{props.major}.{props.minor}")
    free, total = torch.cuda.mem_get_info()
    print("total", total)


def memory():
    one = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    print("one_gib ok")
    _, total = torch.cuda.mem_get_info()
    try:
        torch.empty(total // 4 + (1 << 20), dtype=torch.float32, device="cuda")
        print("past_total allocated")
    except torch.OutOfMemoryError:
        print("past_total refused")
    del one


def graph():
    x = torch.ones(1024, device="cuda")
    y = torch.empty_like(x)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y.copy_(x * 2)  # warm-up, as PyTorch asks before a capture
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y.copy_(x * 2)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    print("graph ok")


def train():
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else None
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256, device="cuda")
    target = torch.randint(0, 10, (64,), device="cuda")
    end = time.monotonic() + seconds if seconds else None
    steps = 0
    while (end is None and steps < 50) or (end is not None and time.monotonic() < end):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()
        opt.step()
        steps += 1
        if steps % 10 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    print("steps", steps)


{"device": device, "memory": memory, "graph": graph, "train": train}[sys.argv[1]]()
print("done ok")
