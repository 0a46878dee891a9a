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


def previous_stage(directory, cfg, tokenizer):
    """The stages that trained `directory`'s weights, checked to be the same model and tokenizer."""
    with open(os.path.join(directory, "config.json")) as f:
        old = json.load(f)
    with open(os.path.join(directory, "tokenizer.json")) as f:
        old_tok = json.load(f)
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "max_position_embeddings"):
        if old.get(key) != cfg.get(key):
            raise SystemExit(f"--init-from {directory}: {key} is {old.get(key)}, this run has {cfg.get(key)}")
    if old_tok["model"] != tokenizer["model"]:
        raise SystemExit(f"--init-from {directory}: its tokenizer differs from the one trained now")
    with open(os.path.join(directory, "training-summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(directory, "training-log.jsonl")) as f:
        log = [{"stage": 1, **entry} if "stage" not in entry else entry for entry in map(json.loads, f)]
    return {"stages": summary.get("previous_stages", []) + [{k: v for k, v in summary.items() if k != "previous_stages"}],
            "log": log}


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
    previous = summary.get("previous_stages") or {"stages": [], "log": []}
    stage = len(previous["stages"]) + 1
    summary = {**summary, "previous_stages": previous["stages"]}
    _write_json(os.path.join(out, "training-summary.json"), summary)
    with open(os.path.join(out, "training-log.jsonl"), "w") as f:
        for entry in previous["log"] + [{"stage": stage, **e} for e in log]:
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
    stages = s["previous_stages"] + [s]
    steps = sum(x["steps"] for x in stages)
    tokens = sum(x["tokens_seen"] for x in stages)
    train_s = sum(x["train_seconds"] for x in stages)
    total_s = sum(x["total_seconds"] for x in stages)
    stage_rows = "\n".join(
        f"| {i + 1} | {x['steps']} | {x['tokens_seen']:,} | {x['final_train_loss']} | {x['final_val_loss']} | "
        f"{x['train_seconds']} s | `{x['command']}` |"
        for i, x in enumerate(stages)
    )
    commands = "\n".join(x["command"] for x in stages)
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
| steps | {steps} |
| tokens seen | {tokens:,} (corpus: {s["train_tokens"]:,} train / {s["val_tokens"]:,} validation tokens) |
| final train loss | {s["final_train_loss"]} (mean of the last 50 steps, nats/token) |
| final validation loss | {s["final_val_loss"]} (held-out chapters, nats/token) |
| training wall time | {train_s} s of training, {total_s} s in all, on 2 CPU cores shared with other jobs (load average 10–20) |

| stage | steps | tokens | final train loss | final validation loss | training time | command |
|---|---|---|---|---|---|---|
{stage_rows}

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
{commands}
```

The script (`scripts/train/` in the kvconnect repository) trains the tokenizer, the model
(AdamW, cosine schedule, float32 PyTorch written after HF transformers' Llama), and writes
this directory. A later stage (`--init-from`) continues from the weights of the previous one
with a fresh optimizer and schedule. `training-log.jsonl` holds the loss of every step,
`training-summary.json` the figures above.

## Greedy samples (40 tokens)

{sample_lines}
"""
