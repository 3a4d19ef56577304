"""Hardware descriptions: GPU presets (datasheet numbers) used by the cost and memory models."""
from phantom.hardware.gpus import GPUSpec, get_gpu, list_gpus

__all__ = ["GPUSpec", "get_gpu", "list_gpus"]
