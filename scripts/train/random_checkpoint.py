"""Random-weight checkpoints with the exact config.json shapes of public models, to check
that kvconnect loads them and to measure speed and memory without downloading the real
weights (which this machine cannot). The weights are random: the text is meaningless.

    /usr/bin/python3 scripts/train/random_checkpoint.py smollm2-135m /tmp/smollm2-135m
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

CONFIGS = {
    "smollm2-135m": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
        "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 100000, "rope_scaling": None,
        "tie_word_embeddings": True, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "bfloat16",
    },
    "qwen2.5-0.5b": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896,
        "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "max_position_embeddings": 32768, "max_window_layers": 24, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "sliding_window": 32768, "use_sliding_window": False, "tie_word_embeddings": True, "hidden_act": "silu",
        "bos_token_id": 151643, "eos_token_id": 151643, "torch_dtype": "bfloat16",
    },
    "tinyllama-1.1b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000, "hidden_size": 2048,
        "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": None,
        "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
    },
}


def shapes_of(cfg):
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h]}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes.update({
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q],
            p + "mlp.gate_proj.weight": [i, h], p + "mlp.up_proj.weight": [i, h], p + "mlp.down_proj.weight": [h, i],
        })
        if cfg["model_type"] == "qwen2":
            shapes.update({p + "self_attn.q_proj.bias": [q], p + "self_attn.k_proj.bias": [kv],
                           p + "self_attn.v_proj.bias": [kv]})
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = [v, h]
    return shapes


def main():
    name, out = sys.argv[1], sys.argv[2]
    cfg = CONFIGS[name]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    g = torch.Generator().manual_seed(0)

    def make(tensor_name, shape):
        if len(shape) == 1:
            return torch.ones(shape) if tensor_name.endswith("norm.weight") else 0.02 * torch.randn(shape, generator=g)
        return torch.randn(shape, generator=g) * (1 / shape[1] ** 0.5)

    safetensors_io.write_file_streaming(os.path.join(out, "model.safetensors"), shapes_of(cfg), "BF16", make)
    params = sum(torch.Size(s).numel() for s in shapes_of(cfg).values())
    print(f"{name}: {params:,} parameters written to {out}")


if __name__ == "__main__":
    main()
