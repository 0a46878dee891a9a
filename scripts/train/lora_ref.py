"""LoRA in PyTorch as PEFT defines it, for the reference logits kvconnect's LoRA is checked
against and for training adapters: each targeted nn.Linear gains y += scale * B(A x) with
A [r, in], B [out, r], scale = lora_alpha / r (lora_alpha / sqrt(r) with use_rslora).
Adapters are written and read in PEFT's layout (adapter_config.json +
adapter_model.safetensors with `base_model.model.<module>.lora_A.weight` names), so any
PEFT-trained adapter of a supported model loads the same way.
"""

import json
import math
import os

import torch
from torch import nn

import safetensors_io

# The projections vLLM applies LoRA to in Llama-family models.
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PREFIX = "base_model.model."


class LoRALinear(nn.Module):
    def __init__(self, base, r, scale):
        super().__init__()
        self.base = base
        self.lora_A = nn.Parameter(torch.zeros(r, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        self.scale = scale

    def forward(self, x):
        return self.base(x) + self.scale * ((x @ self.lora_A.T) @ self.lora_B.T)


def scaling(config):
    r, alpha = config["r"], config["lora_alpha"]
    return alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r


def wrap(model, config):
    """Replaces every targeted projection of `model` by a LoRALinear (zero B: no effect yet)."""
    wrapped = {}
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in config["target_modules"] and isinstance(child, nn.Linear):
                lora = LoRALinear(child, config["r"], scaling(config))
                setattr(module, child_name, lora)
                wrapped[f"{name}.{child_name}" if name else child_name] = lora
    return wrapped


def lora_state(wrapped):
    out = {}
    for name, m in wrapped.items():
        out[f"{PREFIX}{name}.lora_A.weight"] = m.lora_A.detach()
        out[f"{PREFIX}{name}.lora_B.weight"] = m.lora_B.detach()
    return out


def save_adapter(directory, wrapped, config, dtype="F32"):
    os.makedirs(directory, exist_ok=True)
    full = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "bias": "none",
        "fan_in_fan_out": False,
        "lora_dropout": 0.0,
        "modules_to_save": None,
        "use_dora": False,
        "use_rslora": False,
        **config,
    }
    with open(os.path.join(directory, "adapter_config.json"), "w") as f:
        json.dump(full, f, indent=2)
        f.write("\n")
    safetensors_io.write_file(os.path.join(directory, "adapter_model.safetensors"), lora_state(wrapped), dtype)


def load_adapter(model, directory):
    """Wraps `model` with the adapter stored in `directory` (weights as stored, widened to float32)."""
    with open(os.path.join(directory, "adapter_config.json")) as f:
        config = json.load(f)
    tensors = safetensors_io.read_file(os.path.join(directory, "adapter_model.safetensors"))
    wrapped = wrap(model, config)
    with torch.no_grad():
        for name, m in wrapped.items():
            m.lora_A.copy_(tensors[f"{PREFIX}{name}.lora_A.weight"].float())
            m.lora_B.copy_(tensors[f"{PREFIX}{name}.lora_B.weight"].float())
    return model, config
