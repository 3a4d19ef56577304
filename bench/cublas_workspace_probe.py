"""How much device memory a GEMM on a new stream allocates (cuBLAS's per-stream workspace), on a
GPU and under phantom: `python bench/cublas_workspace_probe.py` / `phantom run --gpu H100 ...`."""
import torch

a = torch.randn(256, 256, device="cuda")
base = torch.cuda.memory_allocated()
out = {"first_gemm_default": None, "side_stream_1": None, "side_stream_2": None}
a @ a
torch.cuda.synchronize()
out["first_gemm_default"] = torch.cuda.memory_allocated() - base
for i in (1, 2):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        a @ a
    torch.cuda.synchronize()
    out[f"side_stream_{i}"] = torch.cuda.memory_allocated() - base
print({k: round(v / 2**20, 2) for k, v in out.items()}, "MiB over the input")
