"""A float32 PyTorch decoder following HF transformers' modeling_llama / modeling_mistral /
modeling_qwen2 semantics, written from those models' definitions (not from kvconnect's
TypeScript). It trains the default model and produces the reference logits the TypeScript
engine is tested against, so it must stay independent of the engine's code.

Supported: RMSNorm, RoPE (default, `linear` and `llama3` rope_scaling, computed in float32
as HF does), grouped-query attention with optional q/k/v biases (qwen2), sliding-window
layers (mistral: every layer; qwen2: layers >= max_window_layers when use_sliding_window;
any model: `layer_types`), SwiGLU MLP, tied or untied LM head.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def head_dim_of(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def rope_inv_freq(cfg):
    """Inverse frequencies and the attention factor, as HF's ROPE_INIT_FUNCTIONS compute them."""
    dim = head_dim_of(cfg)
    base = cfg.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scaling = cfg.get("rope_scaling") or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "default":
        return inv_freq, 1.0
    if rope_type == "linear":
        return inv_freq / scaling["factor"], 1.0
    if rope_type == "llama3":
        factor = scaling["factor"]
        low = scaling["low_freq_factor"]
        high = scaling["high_freq_factor"]
        old_len = scaling["original_max_position_embeddings"]
        low_wavelen = old_len / low
        high_wavelen = old_len / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled), 1.0
    raise ValueError(f"rope_scaling type {rope_type!r} is not implemented")


def layer_types_of(cfg):
    n = cfg["num_hidden_layers"]
    if cfg.get("layer_types"):
        return list(cfg["layer_types"])
    mt = cfg["model_type"]
    if mt == "mistral" and cfg.get("sliding_window"):
        return ["sliding_attention"] * n
    if mt == "qwen2" and cfg.get("use_sliding_window") and cfg.get("sliding_window"):
        first = cfg.get("max_window_layers", n)
        return ["sliding_attention" if i >= first else "full_attention" for i in range(n)]
    return ["full_attention"] * n


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg, window):
        super().__init__()
        h = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg.get("num_key_value_heads") or self.nh
        self.hd = head_dim_of(cfg)
        qkv_bias = cfg["model_type"] == "qwen2"
        self.q_proj = nn.Linear(h, self.nh * self.hd, bias=qkv_bias)
        self.k_proj = nn.Linear(h, self.nkv * self.hd, bias=qkv_bias)
        self.v_proj = nn.Linear(h, self.nkv * self.hd, bias=qkv_bias)
        self.o_proj = nn.Linear(self.nh * self.hd, h, bias=False)
        self.window = window

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(2, 3)) * self.hd**-0.5
        pos = torch.arange(s)
        visible = pos[None, :] <= pos[:, None]
        if self.window is not None:
            # HF's sliding mask: key k is visible from query q when q - window < k <= q.
            visible = visible & (pos[None, :] > pos[:, None] - self.window)
        scores = scores.masked_fill(~visible, float("-inf"))
        probs = F.softmax(scores, dim=-1, dtype=torch.float32)
        out = (probs @ v).transpose(1, 2).reshape(b, s, self.nh * self.hd)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, i = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, window):
        super().__init__()
        eps = cfg.get("rms_norm_eps", 1e-6)
        self.input_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.self_attn = Attention(cfg, window)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        window = cfg.get("sliding_window")
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, window if t == "sliding_attention" else None) for t in layer_types_of(cfg)
        )
        self.norm = RMSNorm(cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6))


class CausalLM(nn.Module):
    """Parameter names equal HF's (`model.layers.0.self_attn.q_proj.weight`, ...)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if self.tied:
            self.lm_head.weight = self.model.embed_tokens.weight
        inv_freq, self.attention_scaling = rope_inv_freq(cfg)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rope(self, seq_len):
        pos = torch.arange(seq_len, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling

    def forward(self, ids):
        cos, sin = self.rope(ids.shape[1])
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))

    def hf_state_dict(self):
        """Tensors under HF names; the tied head is stored once, as the embedding."""
        sd = {k: v.detach() for k, v in self.state_dict().items()}
        if self.tied:
            sd.pop("lm_head.weight")
        return sd

    @torch.no_grad()
    def greedy(self, ids, n):
        out = list(ids)
        for _ in range(n):
            logits = self(torch.tensor([out]))[0, -1]
            out.append(int(torch.argmax(logits)))
        return out[len(ids) :]
