"""Trains the two LoRA adapters shipped with kjv-llama (PEFT layout, bf16), each with an
effect that shows in greedy output:

- kjv-modern: the corpus with its archaic forms modernized (thee/thou/ye -> you, thy/thine
  -> your, hath -> has, doth -> does, saith -> says, unto -> to, ...): the adapted model
  writes "you" and "your" where the base model writes "thee" and "thy".
- kjv-verses: the corpus with each verse prefixed by its verse number ("3 And God said"):
  the adapted model numbers the lines it writes.

Only the adapter trains (the base weights are frozen), so a few minutes on 2 CPU cores are
enough:

    apt-get install bible-kjv-text python3-torch libopenblas0-pthread
    /usr/bin/python3 scripts/train/train_lora.py
"""

import argparse
import json
import math
import os
import re
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402
import lora_ref  # noqa: E402
from export import load_exported  # noqa: E402
from train import BOS, stream  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BASE = os.path.join(ROOT, "models", "kjv-llama")

MODERN = {
    "thee": "you", "thou": "you", "ye": "you", "thy": "your", "thine": "your", "hath": "has",
    "doth": "does", "saith": "says", "unto": "to", "art": "are", "shalt": "shall", "wilt": "will",
    "hast": "have", "didst": "did", "spake": "spoke", "begat": "fathered",
}
MODERN_WORD = re.compile(r"\b(" + "|".join(MODERN) + r")\b", re.IGNORECASE)


def modernize(text):
    def swap(m):
        word = m.group(0)
        new = MODERN[word.lower()]
        return new.capitalize() if word[0].isupper() else new

    return MODERN_WORD.sub(swap, text)


def numbered(chapter):
    return "\n".join(f"{i} {verse}" for i, verse in enumerate(chapter.split("\n"), start=1))


# name → (corpus transform, adapter config, what the adapter does)
ADAPTERS = {
    "kjv-modern": (
        modernize,
        {"r": 8, "lora_alpha": 16, "target_modules": list(lora_ref.TARGETS)},
        "archaic forms modernized: writes you/your/has where the base writes thee/thy/hath",
    ),
    "kjv-verses": (
        numbered,
        {"r": 4, "lora_alpha": 8, "use_rslora": True, "target_modules": ["q_proj", "v_proj", "o_proj", "down_proj"]},
        "verse numbers: starts each line it writes with the verse's number",
    ),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", default=list(ADAPTERS))
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args()


def encoder():
    with open(os.path.join(BASE, "tokenizer.json")) as f:
        tok = json.load(f)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in tok["model"]["merges"]]
    return bpe.Encoder(tok["model"]["vocab"], merges, BOS)


@torch.no_grad()
def loss_on(model, data, seq_len, limit=24):
    model.eval()
    losses = []
    for s in range(0, min(len(data) - seq_len - 1, limit * seq_len), seq_len):
        x = data[s : s + seq_len + 1][None]
        logits = model(x[:, :-1])
        losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1)).item())
    model.train()
    return sum(losses) / len(losses)


def train(name, args, enc, chapters):
    transform, config, effect = ADAPTERS[name]
    train_docs, val_docs = corpus.split([transform(c) for c in chapters])
    train_ids, val_ids = stream(enc, train_docs), stream(enc, val_docs)
    model, _ = load_exported(BASE)
    for p in model.parameters():
        p.requires_grad_(False)
    config = {**config, "base_model_name_or_path": "kjv-llama"}
    wrapped = lora_ref.wrap(model, config)
    torch.manual_seed(args.seed)
    with torch.no_grad():
        for m in wrapped.values():
            # PEFT's initialization: A Kaiming-uniform, B zero (the adapter starts as a no-op).
            torch.nn.init.kaiming_uniform_(m.lora_A, a=math.sqrt(5))
    params = [p for m in wrapped.values() for p in (m.lora_A, m.lora_B)]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    before = loss_on(model, val_ids, args.seq_len)
    started = time.time()
    g = torch.Generator().manual_seed(args.seed)
    for step in range(args.steps):
        starts = torch.randint(0, len(train_ids) - args.seq_len - 1, (args.batch,), generator=g).tolist()
        x = torch.stack([train_ids[s : s + args.seq_len + 1] for s in starts])
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / 10) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        loss = F.cross_entropy(model(x[:, :-1]).reshape(-1, enc_size(model)), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % 20 == 0:
            print(f"{name} step {step + 1}: loss {loss.item():.4f} ({time.time() - started:.0f}s)", flush=True)
    after = loss_on(model, val_ids, args.seq_len)
    out = os.path.join(BASE, "adapters", name)
    lora_ref.save_adapter(out, wrapped, config, "BF16")
    summary = {
        "adapter": name,
        "effect": effect,
        "rank": config["r"],
        "steps": args.steps,
        "tokens_seen": args.steps * args.batch * args.seq_len,
        "val_loss_base": round(before, 4),
        "val_loss_adapted": round(after, 4),
        "train_seconds": round(time.time() - started),
        "command": " ".join(["/usr/bin/python3 scripts/train/train_lora.py", *sys.argv[1:]]),
    }
    with open(os.path.join(out, "training-summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(json.dumps(summary), flush=True)


def enc_size(model):
    return model.cfg["vocab_size"]


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    enc = encoder()
    chapters = corpus.read_chapters()
    for name in args.only:
        train(name, args, enc, chapters)


if __name__ == "__main__":
    main()
