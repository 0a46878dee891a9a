"""Writes the PyTorch reference fixtures kvconnect's tests compare against (CI needs no torch):

- test/engine/model/fixtures/hf/<name>/: small random HF checkpoints in several configurations
  (GQA ratios, tied/untied, F32/F16/BF16, qwen2 biases, llama3 and linear RoPE scaling,
  mistral and qwen2 sliding windows, a sharded checkpoint), each with reference.json
  (prompts, greedy continuations) and reference-logits.safetensors (float32 logits of every
  prompt position), computed by llama_ref.py from the weights as stored.
- test/engine/model/fixtures/kjv-llama/: the same for the trained default model.
- test/engine/model/fixtures/kjv-tokenizer-ids.json: the Python BPE encoder's ids of fixture text.
- test/engine/lora/fixtures/<name>/: random PEFT LoRA adapters for one of the random checkpoints
  (every target with plain scaling; some targets with rsLoRA, stored BF16), each with the
  reference logits of the checkpoint with the adapter applied (lora_ref.py); and the adapters
  shipped with kjv-llama (models/kjv-llama/adapters/) applied to it.

    /usr/bin/python3 scripts/train/fixtures.py
"""

import json
import os
import shutil
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import lora_ref  # noqa: E402
import safetensors_io  # noqa: E402
from export import SAMPLE_PROMPTS, load_exported  # noqa: E402
from llama_ref import CausalLM  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FIXTURES = os.path.join(ROOT, "test", "engine", "model", "fixtures")
GREEDY_TOKENS = 8
MIN_MARGIN = 0.02

BASE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 160,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}

# name → (config overrides, dtype, shards, prompt lengths)
CASES = {
    "llama-gqa3-untied-f32": ({"num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 16}, "F32", 1, [5, 17, 40]),
    "llama-mha-tied-f16": (
        {"num_key_value_heads": 4, "head_dim": 24, "tie_word_embeddings": True, "rms_norm_eps": 1e-6, "rope_theta": 500000.0},
        "F16", 1, [6, 33],
    ),
    "qwen2-mqa-bias-bf16": (
        {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "num_key_value_heads": 1, "tie_word_embeddings": True,
         "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 2, "rms_norm_eps": 1e-6},
        "BF16", 1, [7, 29],
    ),
    "llama3-rope-scaling": (
        {"head_dim": 16, "max_position_embeddings": 512,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 64}},
        "BF16", 1, [9, 90],
    ),
    "llama-linear-rope": ({"rope_scaling": {"type": "linear", "factor": 4.0}}, "BF16", 1, [8, 70]),
    "mistral-sliding": (
        {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "sliding_window": 8, "head_dim": 16},
        "BF16", 1, [6, 40],
    ),
    "qwen2-hybrid-sliding": (
        {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 3, "use_sliding_window": True,
         "sliding_window": 12, "max_window_layers": 1},
        "BF16", 1, [10, 48],
    ),
    "llama-sharded-bf16": ({"num_hidden_layers": 3, "num_key_value_heads": 1}, "BF16", 3, [12, 30]),
}


def random_model(cfg, seed):
    torch.manual_seed(seed)
    model = CausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn_like(p))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * 1.5 / p.shape[1] ** 0.5)
    return model


def reference(model, prompts):
    """Logits of every prompt position and the greedy continuation, with its smallest top-2 margin."""
    logits, greedy, margin = {}, [], float("inf")
    with torch.no_grad():
        for i, ids in enumerate(prompts):
            logits[f"logits_{i}"] = model(torch.tensor([ids]))[0]
            seq = list(ids)
            for _ in range(GREEDY_TOKENS):
                row = model(torch.tensor([seq]))[0, -1]
                top = torch.topk(row, 2).values
                margin = min(margin, float(top[0] - top[1]))
                seq.append(int(torch.argmax(row)))
            greedy.append(seq[len(ids) :])
    return logits, greedy, margin


def write_reference(directory, prompts, logits, greedy, margin, extra=None):
    safetensors_io.write_file(os.path.join(directory, "reference-logits.safetensors"), logits, "F32")
    with open(os.path.join(directory, "reference.json"), "w") as f:
        json.dump({"prompts": prompts, "greedy": greedy, "min_greedy_margin": round(margin, 5),
                   "generator": "scripts/train/fixtures.py (PyTorch float32, llama_ref.py)", **(extra or {})}, f)
        f.write("\n")


def write_case(name, overrides, dtype, shards, lengths):
    cfg = {**BASE, **overrides}
    directory = os.path.join(FIXTURES, "hf", name)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    for seed in range(1, 50):
        model = random_model(cfg, seed)
        tensors = model.hf_state_dict()
        if shards > 1:
            safetensors_io.write_sharded(directory, tensors, dtype, shards)
        else:
            safetensors_io.write_file(os.path.join(directory, "model.safetensors"), tensors, dtype)
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        stored, _ = load_exported(directory)
        g = torch.Generator().manual_seed(seed)
        prompts = [torch.randint(0, cfg["vocab_size"], (n,), generator=g).tolist() for n in lengths]
        logits, greedy, margin = reference(stored, prompts)
        if margin >= MIN_MARGIN:
            write_reference(directory, prompts, logits, greedy, margin, {"weights_seed": seed, "dtype": dtype})
            print(f"{name}: seed {seed}, min greedy margin {margin:.3f}")
            return
    raise SystemExit(f"{name}: no seed gave greedy margins >= {MIN_MARGIN}")


def trained_model_fixtures():
    src = os.path.join(ROOT, "models", "kjv-llama")
    model, cfg = load_exported(src)
    with open(os.path.join(src, "tokenizer.json")) as f:
        tok = json.load(f)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in tok["model"]["merges"]]
    enc = bpe.Encoder(tok["model"]["vocab"], merges, "<|begin_of_text|>")
    directory = os.path.join(FIXTURES, "kjv-llama")
    os.makedirs(directory, exist_ok=True)
    prompts = [enc.encode(p) for p in SAMPLE_PROMPTS]
    logits, greedy, margin = reference(model, prompts)
    write_reference(directory, prompts, logits, greedy, margin, {"texts": SAMPLE_PROMPTS})
    print(f"kjv-llama: min greedy margin {margin:.3f}")
    texts = [
        "In the beginning God created the heaven and the earth.",
        "And God said, Let there be light: and there was light.\n\nVerse 3:16 -- 'tis done; they're here, we'll see.",
        "  leading spaces,\ttabs,\r\nCRLF lines   and trailing spaces   ",
        "Numbers 1234567 and 3.14159; symbols #@!$%^&*()[]{}<>|~`",
        "Unicode: naïve café, Ærø, Ελληνικά, русский, 日本語, emoji 🙂👍🏽, combining é.",
        "",
    ]
    with open(os.path.join(FIXTURES, "kjv-tokenizer-ids.json"), "w") as f:
        json.dump({"generator": "scripts/train/bpe.py Encoder", "cases": [{"text": t, "ids": enc.encode(t)} for t in texts]},
                  f, ensure_ascii=False)
        f.write("\n")


LORA_BASE = "llama-gqa3-untied-f32"
# name → (adapter config, stored dtype)
LORA_CASES = {
    "all-targets-r4": ({"r": 4, "lora_alpha": 8, "target_modules": list(lora_ref.TARGETS)}, "F32"),
    "qv-down-rslora-r8": (
        {"r": 8, "lora_alpha": 6, "use_rslora": True, "target_modules": ["q_proj", "v_proj", "down_proj"]},
        "BF16",
    ),
}


def lora_fixtures():
    base_dir = os.path.join(FIXTURES, "hf", LORA_BASE)
    with open(os.path.join(base_dir, "reference.json")) as f:
        prompts = json.load(f)["prompts"]
    for name, (config, dtype) in LORA_CASES.items():
        directory = os.path.join(ROOT, "test", "engine", "lora", "fixtures", name)
        config = {**config, "base_model_name_or_path": LORA_BASE}
        for seed in range(100, 150):
            shutil.rmtree(directory, ignore_errors=True)
            model, _ = load_exported(base_dir)
            wrapped = lora_ref.wrap(model, config)
            torch.manual_seed(seed)
            with torch.no_grad():
                for m in wrapped.values():
                    m.lora_A.copy_(torch.randn_like(m.lora_A) / m.lora_A.shape[1] ** 0.5)
                    m.lora_B.copy_(torch.randn_like(m.lora_B) * 0.5 / m.lora_B.shape[1] ** 0.5)
            lora_ref.save_adapter(directory, wrapped, config, dtype)
            stored, _ = lora_ref.load_adapter(load_exported(base_dir)[0], directory)
            logits, greedy, margin = reference(stored, prompts)
            if margin >= MIN_MARGIN:
                write_reference(directory, prompts, logits, greedy, margin, {"base": LORA_BASE, "seed": seed})
                print(f"lora {name}: seed {seed}, min greedy margin {margin:.3f}")
                break
        else:
            raise SystemExit(f"lora {name}: no seed gave greedy margins >= {MIN_MARGIN}")


SHIPPED_ADAPTERS = ("kjv-modern", "kjv-verses")


def trained_lora_fixtures():
    """The adapters shipped with kjv-llama (scripts/train/train_lora.py), applied to it."""
    src = os.path.join(ROOT, "models", "kjv-llama")
    with open(os.path.join(FIXTURES, "kjv-llama", "reference.json")) as f:
        prompts = json.load(f)["prompts"]
    for name in SHIPPED_ADAPTERS:
        directory = os.path.join(ROOT, "test", "engine", "lora", "fixtures", name)
        os.makedirs(directory, exist_ok=True)
        model, _ = lora_ref.load_adapter(load_exported(src)[0], os.path.join(src, "adapters", name))
        logits, greedy, margin = reference(model, prompts)
        write_reference(directory, prompts, logits, greedy, margin, {"base": "kjv-llama", "texts": SAMPLE_PROMPTS})
        print(f"lora {name}: min greedy margin {margin:.3f}")


def main():
    torch.set_num_threads(2)
    only = sys.argv[1:]
    for name, (overrides, dtype, shards, lengths) in CASES.items():
        if not only or name in only:
            write_case(name, overrides, dtype, shards, lengths)
    if not only or "kjv-llama" in only:
        trained_model_fixtures()
    if not only or "lora" in only:
        lora_fixtures()
    if not only or "kjv-lora" in only:
        trained_lora_fixtures()


if __name__ == "__main__":
    main()
