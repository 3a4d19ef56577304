"""phantom: run unmodified PyTorch training scripts on a simulated GPU cluster, without a GPU.

Packages, from the top of the import order down (ARCHITECTURE.md; tests/test_layering.py):
  cli.py, launcher/  the `phantom` command; rank processes, the coordinator
  report/            summary, JSON report, traces, HTML
  adapters/          one module per framework, applied when it is imported
  interception/      fake CUDA tensors, the torch.cuda API, clocks: turns a script into ops
  distributed/       the simulated NCCL process group and its coordinator
  sim/               one rank's simulation: streams, storage, graphs, fused code, transfers
  host/              host time: the script's Python at the node's speed, torch's from a table
  engine/            virtual time: host clock and per-stream GPU timelines
  cost/, memory/, network/   GPU time per op; the CUDA caching allocator; collectives on links
  hardware/, native/, config.py, errors.py   GPU presets; the fake CUDA library; the run's
                     options; shared error types
"""
__version__ = "0.1.0"
