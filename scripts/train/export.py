"""Writes a trained model as a HF checkpoint directory with its model card."""

import json
import os

import torch

import bpe
import safetensors_io
from llama_ref import CausalLM

# A base model has no chat format: the template writes each message's text on its own
# line, so /v1/chat/completions continues the conversation as plain text.
CHAT_TEMPLATE = "{{ bos_token }}{% for message in messages %}{{ message['content'] }}\n{% endfor %}"

SAMPLE_PROMPTS = ["In the beginning", "And the LORD said unto Moses,", "Blessed are the"]


def _write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def load_exported(directory):
    """The model exactly as the checkpoint stores it (bf16 weights widened to float32)."""
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    model = CausalLM(cfg)
    tensors = safetensors_io.read_checkpoint(directory)
    if cfg.get("tie_word_embeddings"):
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    model.load_state_dict(tensors)
    return model.eval(), cfg


def export_model(out, model, cfg, vocab, merges, bos, eos, summary, log):
    safetensors_io.write_file(os.path.join(out, "model.safetensors"), model.hf_state_dict(), "BF16")
    _write_json(os.path.join(out, "config.json"), cfg)
    _write_json(os.path.join(out, "tokenizer.json"), bpe.tokenizer_json(vocab, merges, bos, eos))
    _write_json(
        os.path.join(out, "tokenizer_config.json"),
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": bos,
            "eos_token": eos,
            "add_bos_token": True,
            "model_max_length": cfg["max_position_embeddings"],
            "clean_up_tokenization_spaces": False,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    _write_json(
        os.path.join(out, "generation_config.json"),
        {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"], "do_sample": False},
    )
    with open(os.path.join(out, "training-log.jsonl"), "w") as f:
        for entry in log:
            f.write(json.dumps(entry) + "\n")
    exported, _ = load_exported(out)
    enc = bpe.Encoder(vocab, merges, bos)
    samples = []
    with torch.no_grad():
        for prompt in SAMPLE_PROMPTS:
            ids = exported.greedy(enc.encode(prompt), 40)
            samples.append((prompt, enc.decode([i for i in ids if i < 256 + len(merges)])))
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(model_card(cfg, summary, samples))


def model_card(cfg, s, samples):
    sample_lines = "\n".join(f"- **{p}**{c}" for p, c in samples)
    return f"""---
license: apache-2.0
language: en
library_name: kvconnect
pipeline_tag: text-generation
---

# kjv-llama: kvconnect's default model

A small Llama-architecture model (RMSNorm, RoPE, SwiGLU, grouped-query attention) trained
from scratch so that `kvconnect serve` and `kvconnect demo` produce readable English on a
CPU-only machine. It writes King James Bible-style text; it is not an assistant and knows
nothing beyond that book.

| | |
|---|---|
| parameters | {s["parameters"]:,} ({cfg["num_hidden_layers"]} layers, hidden {cfg["hidden_size"]}, {cfg["num_attention_heads"]} heads / {cfg["num_key_value_heads"]} KV heads, MLP {cfg["intermediate_size"]}, tied embeddings) |
| vocabulary | {cfg["vocab_size"]} (byte-level BPE trained on the corpus; BOS `<|begin_of_text|>`, EOS `<|end_of_text|>`) |
| context | {cfg["max_position_embeddings"]} tokens |
| weights | bfloat16 safetensors |
| steps | {s["steps"]} |
| tokens seen | {s["tokens_seen"]:,} (corpus: {s["train_tokens"]:,} train / {s["val_tokens"]:,} validation tokens) |
| final train loss | {s["final_train_loss"]} (mean of the last 50 steps, nats/token) |
| final validation loss | {s["final_val_loss"]} (held-out chapters, nats/token) |
| training wall time | {s["train_seconds"]} s of training, {s["total_seconds"]} s in all, on 2 shared CPU cores |

## Corpus and licence

The King James Version of the Bible as Debian's `bible-kjv-text` package ships it
(`/usr/lib/bible.data`, read with the package's `bible` program). The text is in the public
domain (the package's copyright file: "The copyright for the King James Version text of
the Bible is expired"). One document per chapter, one verse per line, verse numbers
removed; every 40th chapter is held out for validation. The weights and tokenizer are
released under Apache-2.0, like kvconnect.

## Reproduce

```
apt-get install bible-kjv-text python3-torch libopenblas0-pthread
{s["command"]}
```

The script (`scripts/train/` in the kvconnect repository) trains the tokenizer, the model
(AdamW, cosine schedule, float32 PyTorch written after HF transformers' Llama), and writes
this directory. `training-log.jsonl` holds the loss of every step.

## Greedy samples (40 tokens)

{sample_lines}
"""
