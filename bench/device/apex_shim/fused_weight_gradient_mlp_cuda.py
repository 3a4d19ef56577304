"""A stand-in for Apex's `fused_weight_gradient_mlp_cuda` extension on a real GPU without Apex
(the lent machines have none): the same cuBLAS work as apex csrc/megatron/
fused_weight_gradient_dense.cpp, d_weight += d_output^T @ input in one GEMM with beta = 1 and
C = d_weight (fp32, or the inputs' dtype for the fp16 variant), through torch's `out_dtype`
GEMM. Put this folder on PYTHONPATH to run Megatron with gradient_accumulation_fusion on a
real GPU (PYTHONPATH=bench/device/apex_shim:.); phantom simulates the module itself."""
import torch


def wgrad_gemm_accum_fp32(input, d_output, d_weight):
    x = input.reshape(-1, input.shape[-1])
    g = d_output.reshape(-1, d_output.shape[-1])
    torch.addmm(d_weight, g.t(), x, out_dtype=torch.float32, out=d_weight)


def wgrad_gemm_accum_fp16(input, d_output, d_weight):
    x = input.reshape(-1, input.shape[-1])
    g = d_output.reshape(-1, d_output.shape[-1])
    d_weight.addmm_(g.t(), x)
