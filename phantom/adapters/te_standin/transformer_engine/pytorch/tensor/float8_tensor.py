from transformer_engine.pytorch.tensor import Float8Tensor  # noqa: F401
