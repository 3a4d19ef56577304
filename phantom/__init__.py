"""phantom: run unmodified PyTorch training scripts on a simulated GPU cluster, without a GPU.

Packages, in the order data flows through them:
  interception/  fake CUDA tensors, the torch.cuda API, clocks: turns a script into ops
  cost/          GPU time per op (roofline now; measured database later)
  memory/        the CUDA caching allocator model
  engine/        virtual time: host clock and per-stream GPU timelines
  report/        summary and JSON results
  launcher/      starts the simulated rank process; native/ builds the fake CUDA library
  cli.py         the `phantom` command
"""
__version__ = "0.1.0"
