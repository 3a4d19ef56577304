"""Per-op GPU time estimates.

This package owns the answer to "how long does this aten op run on the simulated GPU": a
`CostModel` maps one dispatched op (its OpOverload, arguments and output, all metadata-only
FakeTensors) to a `KernelCost`, or to None when the real CUDA op launches no kernel.
`RooflineCostModel` is the first implementation: a roofline whose efficiencies are fitted
(`phantom.cost.calibrate`) to kernel times measured on real GPUs (`bench/kernels/measure.py`);
the fitted constants live in `phantom/cost/data/<GPU>.json` (`phantom.cost.calibration`).
"""
from phantom.cost.base import OP_CLASSES, CostModel, KernelCost
from phantom.cost.calibration import Calibration, load_calibration
from phantom.cost.roofline import RooflineCostModel, classify

__all__ = [
    "OP_CLASSES",
    "Calibration",
    "CostModel",
    "KernelCost",
    "RooflineCostModel",
    "classify",
    "load_calibration",
]
