"""phantom's simulated Transformer Engine (phantom/adapters/te_standin/__init__.py says why).

The version is the one Megatron-Core 0.16 is written against (its `dev` extra pins
transformer-engine >=2.9.0a0,<2.12.0): Megatron chooses its code paths by TE version.
"""
__version__ = "2.9.0"
PHANTOM_SIMULATED = True

from transformer_engine import common, pytorch  # noqa: E402,F401  (as the real package does)
