"""Fine-tune a Hugging Face Llama (built from a config, no download) with the `Trainer`.

The way most Hugging Face users train: `TrainingArguments` + `Trainer` over a `Dataset`, with
accelerate underneath (DDP when launched on several GPUs, `find_unused_parameters` as the
Trainer sets it, a pinned-memory DataLoader); optionally gradient checkpointing and LoRA
adapters (peft), as fine-tuning runs use them. A callback prints each step's wall time, and the
Trainer prints its own `train_runtime` and samples/s at the end.

    torchrun --nproc-per-node 2 examples/hf_trainer_train.py          # real GPUs
    phantom run --nproc-per-node 2 --gpu H100 examples/hf_trainer_train.py
"""
import argparse
import statistics
import time

import torch
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments


class RandomTokens(Dataset):
    """Fixed random token rows; causal LMs shift the labels themselves."""

    def __init__(self, rows: int, seq_len: int, vocab_size: int):
        self.tokens = torch.randint(vocab_size, (rows, seq_len), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


class StepTimer(TrainerCallback):
    """Wall time of each optimizer step, synchronised, as a user would time it."""

    def __init__(self) -> None:
        self.times_ms: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        torch.cuda.synchronize()
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        torch.cuda.synchronize()
        self.times_ms.append((time.perf_counter() - self.start) * 1e3)
        if state.is_world_process_zero:
            print(f"step {state.global_step} {self.times_ms[-1]:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden-size", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--intermediate-size", type=int, default=1408)
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=4, help="per device")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of the median")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--lora-rank", type=int, default=0,
                        help="fine-tune LoRA adapters of this rank on the attention and MLP projections "
                             "(needs peft); 0: train every weight")
    parser.add_argument("--output-dir", default="/tmp/hf_trainer_train")
    args = parser.parse_args()

    config = LlamaConfig(hidden_size=args.hidden_size, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                         intermediate_size=args.intermediate_size, vocab_size=args.vocab_size,
                         max_position_embeddings=args.seq_len)
    model = LlamaForCausalLM(config)
    if args.lora_rank:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, task_type="CAUSAL_LM",
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                 "gate_proj", "up_proj", "down_proj"]))
    training_args = TrainingArguments(
        output_dir=args.output_dir, per_device_train_batch_size=args.batch_size, max_steps=args.steps,
        bf16=True, learning_rate=1e-4, logging_steps=args.steps, save_strategy="no", report_to=[],
        dataloader_pin_memory=True, disable_tqdm=True, gradient_checkpointing=args.gradient_checkpointing)
    timer = StepTimer()
    rows = args.batch_size * training_args.world_size * args.steps
    trainer = Trainer(model=model, args=training_args, callbacks=[timer],
                      train_dataset=RandomTokens(rows, args.seq_len, args.vocab_size))
    metrics = trainer.train().metrics
    if trainer.is_world_process_zero():
        steady = timer.times_ms[args.warmup:] or timer.times_ms
        print(f"summary: median_iter_ms={statistics.median(steady):.2f} "
              f"train_runtime_s={metrics['train_runtime']:.3f} "
              f"peak_alloc_gib={torch.cuda.max_memory_allocated() / 2**30:.2f}")


if __name__ == "__main__":
    main()
