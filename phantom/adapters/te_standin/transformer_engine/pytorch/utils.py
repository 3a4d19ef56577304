"""transformer_engine/pytorch/utils.py (the part Megatron imports)."""
import torch


def make_weak_ref(x):
    return x


def get_device_compute_capability() -> tuple[int, int]:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return (props.major, props.minor)
