"""transformer_engine.common: the recipes (configuration only; FP8 is not simulated)."""
from transformer_engine.common import recipe  # noqa: F401
