"""Ready-to-run torchtitan 0.3.0 presets for `phantom run` (and for a real GPU run).

torchtitan 0.3.0 has no TOML job files: a run is configured by a Python function returning a
`Trainer.Config` (`--module <package> --config <function>`), then overridden by CLI flags
(`--training.local_batch_size 2`, `--parallelism.tensor_parallel_degree 8`, an activation
checkpointing subcommand such as `activation-checkpoint:full` at the end). `--module` takes a
dotted module path and appends `.config_registry`, so from the repository root:

    phantom run --nproc-per-node 8 --gpu H100 -m torchtitan.train \\
        --module examples.torchtitan --config llama3_8b

Every preset is torchtitan's own config for that model with:
  * the offline assets shipped with phantom (tokenizer and a tiny dataset,
    phantom/adapters/assets/torchtitan/), so nothing is downloaded;
  * no checkpointing, validation, profiler or TensorBoard, a metrics line every step
    (`--metrics.log_freq`), and few steps;
  * the settings of the published benchmark it reproduces where there is one
    (bench/torchtitan.py; ../shared/reference/public-ground-truth.md).
The same functions work for a real run on GPUs (bench/torchtitan.py real).
"""
from __future__ import annotations

from pathlib import Path

from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.loss import CrossEntropyLoss
from torchtitan.components.metrics import MetricsProcessor
from torchtitan.components.optimizer import LRSchedulersContainer
from torchtitan.components.validate import Validator
from torchtitan.distributed.activation_checkpoint import SelectiveAC
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from torchtitan.models.common import ComplexRoPE, compute_ffn_hidden_dim, Embedding, Linear, RMSNorm
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.llama3 import model_registry as llama3_registry
from torchtitan.models.llama3 import config_registry as llama3_configs
from torchtitan.models.qwen3 import config_registry as qwen3_configs
from torchtitan.tools.profiler import Profiler
from torchtitan.trainer import Trainer

ASSETS = Path(__file__).resolve().parents[2] / "phantom" / "adapters" / "assets" / "torchtitan"


def _ready(config: Trainer.Config, steps: int = 8) -> Trainer.Config:
    """Offline assets, no side outputs, a log line every step, `steps` steps."""
    config.hf_assets_path = str(ASSETS / "tokenizer")
    config.dataloader = HuggingFaceTextDataLoader.Config(
        dataset="c4_test", dataset_path=str(ASSETS / "c4_tiny"))
    config.profiler = Profiler.Config()
    config.metrics = MetricsProcessor.Config(log_freq=1)
    config.checkpoint = CheckpointManager.Config()
    config.validator = Validator.Config()
    config.training.steps = steps
    config.lr_scheduler = LRSchedulersContainer.Config(warmup_steps=2)
    return config


def _plain_cross_entropy(config: Trainer.Config) -> None:
    """The published runs (2024) computed the loss on the whole logits tensor in fp32;
    torchtitan 0.3.0 defaults to a chunked loss, which peaks lower."""
    config.loss = CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec))


# -- Llama 3 ---------------------------------------------------------------------------------

def debugmodel() -> Trainer.Config:
    """Llama3 debug model (6M parameters), FSDP over all ranks, selective AC, seq 2048."""
    return _ready(llama3_configs.llama3_debugmodel(), steps=10)


def llama3_8b() -> Trainer.Config:
    """Llama 3.1 8B as in torchtitan's H100 benchmark (benchmarks/llama3_h100_202412_torchtitan.md,
    Tables 1 and 3): FSDP over all ranks, local batch 2, seq 8192, selective (op) AC, no
    compile, no float8."""
    config = _ready(llama3_configs.llama3_8b())
    config.training.local_batch_size = 2
    config.training.seq_len = 8192
    config.activation_checkpoint = SelectiveAC.Config()
    _plain_cross_entropy(config)
    return config


def llama3_8b_5layers() -> Trainer.Config:
    """The first 5 of Llama 3.1 8B's 32 blocks (2.1B parameters), otherwise `llama3_8b`: the 8B's
    kernels at a size one 80 GB GPU trains without sharding (bench/torchtitan.py single)."""
    config = llama3_8b()
    config.model_spec.model.layers = config.model_spec.model.layers[:5]
    return config


def llama3_70b() -> Trainer.Config:
    """Llama 3.1 70B, torchtitan's own config: FSDP x TP 8, local batch 8, seq 8192, full AC."""
    config = _ready(llama3_configs.llama3_70b(), steps=6)
    _plain_cross_entropy(config)
    return config


# -- Llama 2 (torchtitan's April 2024 A100 numbers, docs/performance.md) -------------------------

def _llama2(dim: int, n_layers: int, n_heads: int, n_kv_heads: int | None, hidden_dim: int):
    """A Llama 2 model in torchtitan 0.3.0's Llama3 classes: vocabulary 32000, RoPE theta
    10000 without scaling; otherwise the same blocks (RMSNorm, SwiGLU, GQA when n_kv_heads)."""
    from torchtitan.models.llama3 import (
        _EMBEDDING_INIT, _NORM_INIT, _build_llama3_layers, _output_linear_init,
    )
    from torchtitan.models.llama3.model import Llama3Model

    vocab = 32000
    model = Llama3Model.Config(
        dim=dim,
        vocab_size=vocab,
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim,
                                        param_init=_EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=_NORM_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=vocab,
                              param_init=_output_linear_init(dim)),
        layers=_build_llama3_layers(
            fuse_qkv=True, n_layers=n_layers, dim=dim, n_heads=n_heads, n_kv_heads=n_kv_heads,
            hidden_dim=hidden_dim,
            rope=ComplexRoPE.Config(dim=dim // n_heads, max_seq_len=4096, theta=10000,
                                    scaling="none"),
            attn_backend="flex"),
    )
    spec = llama3_registry("8B")
    spec.flavor = f"llama2-{dim}"
    spec.model = model
    return spec


def _llama2_config(spec) -> Trainer.Config:
    config = _ready(llama3_configs.llama3_8b())
    config.model_spec = spec
    config.training.local_batch_size = 2
    config.training.seq_len = 4096
    config.activation_checkpoint = SelectiveAC.Config()
    _plain_cross_entropy(config)
    return config


def llama2_13b() -> Trainer.Config:
    """Llama 2 13B: dim 5120, 40 layers, 40 heads, FFN 13824; local batch 2, seq 4096."""
    return _llama2_config(_llama2(5120, 40, 40, None, compute_ffn_hidden_dim(5120, multiple_of=256)))


def llama2_70b() -> Trainer.Config:
    """Llama 2 70B: dim 8192, 80 layers, 64 heads, 8 KV heads, FFN 28672; local batch 2, seq 4096."""
    hidden = compute_ffn_hidden_dim(8192, multiple_of=4096, ffn_dim_multiplier=1.3)
    return _llama2_config(_llama2(8192, 80, 64, 8, hidden))


# -- Qwen3 MoE ---------------------------------------------------------------------------------

def qwen3_moe_debug() -> Trainer.Config:
    """Qwen3 MoE debug model (64 experts, top 8): torchtitan's own, offline."""
    return _ready(qwen3_configs.qwen3_moe_debug(), steps=6)


def qwen3_30b_a3b() -> Trainer.Config:
    """Qwen3 30B-A3B (128 experts, top 8, 3B active): torchtitan's own config (FSDP over all
    ranks, local batch 2, seq 4096, full AC). Under phantom, experts are load-balanced
    (docs/frameworks.md, "TorchTitan"); add `--parallelism.expert_parallel_degree N` for EP."""
    return _ready(qwen3_configs.qwen3_30b_a3b(), steps=6)
