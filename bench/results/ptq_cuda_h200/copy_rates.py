# D2H / H2D rates on the GPU host for 1 GiB: pageable vs pinned (PyTorch), and host memcpy; the PTQ statistics'
# trip measured 1.5 GB/s, this says which kind of copy runs at that rate.
import time, torch, numpy as np
n = 1 << 28  # floats: 1 GiB
d = torch.randn(n, device="cuda")
def rate(f, reps=3):
    best = 1e9
    for _ in range(reps):
        torch.cuda.synchronize(); t = time.perf_counter(); f(); torch.cuda.synchronize(); best = min(best, time.perf_counter() - t)
    return 4 * n / best / 1e9
page = torch.empty(n)           # pageable, touched
page.fill_(0)
pin = torch.empty(n, pin_memory=True)
fresh = lambda: torch.empty(n).copy_(d)  # fresh pageable (first-touch inside)
print(f"D2H pageable (touched) {rate(lambda: page.copy_(d)):.1f} GB/s")
print(f"D2H pinned             {rate(lambda: pin.copy_(d)):.1f} GB/s")
print(f"D2H fresh pageable     {rate(fresh):.1f} GB/s")
print(f"H2D pageable           {rate(lambda: d.copy_(page)):.1f} GB/s")
print(f"H2D pinned             {rate(lambda: d.copy_(pin)):.1f} GB/s")
a = np.ones(n, np.float32); b = np.empty_like(a); b[:] = 0
t = time.perf_counter(); np.copyto(b, a); print(f"host memcpy 1 thread   {4*n/(time.perf_counter()-t)/1e9:.1f} GB/s")
