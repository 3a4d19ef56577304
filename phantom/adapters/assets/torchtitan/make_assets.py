"""Writes the offline torchtitan assets next to this file (run once; the outputs are committed).

tokenizer/  tokenizer.json + tokenizer_config.json that torchtitan 0.3.0's HuggingFaceTokenizer
            loads (components/tokenizer.py, "Strategy 1"): byte-level BPE with no merges, so
            every byte of text is one token (ids 0-255), plus <|begin_of_text|> (256) and
            <|end_of_text|> (257). torchtitan 0.3.0 takes the vocabulary size from the model
            config (Decoder.Config.vocab_size: 128256 for Llama3, 151936 for Qwen3), never
            from the tokenizer; a tokenizer only has to emit ids below it, and 258 ids fit
            every model torchtitan ships (the smallest, the debug model, has 2048).
c4_tiny/    data.jsonl, 4 documents of synthetic text, each exactly 8191 bytes, so with the
            BOS token each document is 8192 input tokens: every training sample of length
            8192 (or of a length that divides it) lies inside one document, and torchtitan's
            block-causal (per-document) attention mask equals the causal mask. That is the
            assumption the simulation makes (docs/frameworks.md, "TorchTitan"), so the real run
            (bench/suites/torchtitan.py real) computes the same attention.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOC_BYTES = 8191
DOCS = 4
WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all would their we him if has "
    "when who will more no out do so can what up said about other into than its time only "
    "could new them man some these then two first may any like now my such make over our "
    "even most me state after also made many did must before back see through way where get "
    "much go well your know should down work year because come people just say each those "
    "take day good how long little use own here very place world under same last might "
    "great year old off come since against right found used still small large part around"
).split()


def _document(rng: random.Random) -> str:
    words: list[str] = []
    size = -1
    while size < DOC_BYTES:
        word = rng.choice(WORDS)
        if not words or words[-1].endswith("."):
            word = word.capitalize()
        if rng.random() < 0.08:
            word += "."
        words.append(word)
        size += len(word) + 1
    text = " ".join(words)[:DOC_BYTES - 1].rstrip() + "."
    return text + " " * (DOC_BYTES - len(text))  # exactly DOC_BYTES ASCII bytes


def write_tokenizer() -> None:
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    vocab["<|begin_of_text|>"] = 256
    vocab["<|end_of_text|>"] = 257
    tok = Tokenizer(BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    out = HERE / "tokenizer"
    out.mkdir(exist_ok=True)
    data = json.loads(tok.to_str())
    data["added_tokens"] = [
        {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for c, i in (("<|begin_of_text|>", 256), ("<|end_of_text|>", 257))]
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False) + "\n")
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
         "add_bos_token": True, "add_eos_token": True,
         "tokenizer_class": "PreTrainedTokenizerFast"}, indent=1) + "\n")


def write_dataset() -> None:
    rng = random.Random(0)
    out = HERE / "c4_tiny"
    out.mkdir(exist_ok=True)
    with open(out / "data.jsonl", "w") as f:
        for _ in range(DOCS):
            doc = _document(rng)
            assert len(doc.encode()) == DOC_BYTES
            f.write(json.dumps({"text": doc}) + "\n")


if __name__ == "__main__":
    write_tokenizer()
    write_dataset()
