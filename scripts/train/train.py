"""Trains kvconnect's default model: a small Llama (RMSNorm, RoPE, SwiGLU, GQA) on the King
James Bible with a byte-level BPE trained here, then exports a HF checkpoint directory
(bf16 safetensors, config.json, tokenizer files, generation_config.json, model card).

    apt-get install bible-kjv-text python3-torch libopenblas0-pthread
    /usr/bin/python3 scripts/train/train.py --out models/kjv-llama

Checkpoints every --ckpt-every steps to <out>/train-state.pt and resumes from it, so a
crashed run loses little. Most steps use --seq-len tokens; the last --long-frac of the
steps use --long-seq-len (with proportionally fewer sequences), so the model works up to
max_position_embeddings = --long-seq-len. Deterministic for a given command on one machine.
"""

import argparse
import json
import math
import os
import sys
import time

# OpenMP threads that spin while waiting make a shared, oversubscribed machine much slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402
import export  # noqa: E402
from llama_ref import CausalLM  # noqa: E402

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--vocab-size", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=768)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--long-seq-len", type=int, default=1024)
    p.add_argument("--long-frac", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--ckpt-every", type=int, default=25)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--init-from", help="continue from the weights of an exported model directory (a second stage)")
    return p.parse_args()


def stream(enc, docs):
    ids = []
    for d in docs:
        ids.extend(enc.encode(d, add_bos=True))
        ids.append(enc.vocab[EOS])
    return torch.tensor(ids, dtype=torch.long)


def batch_at(data, step, batch, seq_len, seed):
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, len(data) - seq_len - 1, (batch,), generator=g)
    x = torch.stack([data[s : s + seq_len + 1] for s in starts.tolist()])
    return x[:, :-1], x[:, 1:]


@torch.no_grad()
def evaluate(model, data, seq_len):
    model.eval()
    losses = []
    for s in range(0, len(data) - seq_len - 1, seq_len):
        x = data[s : s + seq_len + 1][None]
        logits = model(x[:, :-1])
        losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1)).item())
    model.train()
    return sum(losses) / len(losses)


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def model_config(args, vocab):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(vocab),
        "hidden_size": args.hidden,
        "intermediate_size": args.intermediate,
        "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads,
        "num_key_value_heads": args.kv_heads,
        "head_dim": args.hidden // args.heads,
        "hidden_act": "silu",
        "max_position_embeddings": args.long_seq_len,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": True,
        "bos_token_id": vocab[BOS],
        "eos_token_id": vocab[EOS],
        "torch_dtype": "bfloat16",
    }


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    train_docs, val_docs = corpus.split(corpus.read_chapters())
    vocab, merges = bpe.train(train_docs, args.vocab_size, [BOS, EOS])
    enc = bpe.Encoder(vocab, merges, BOS)
    train_ids, val_ids = stream(enc, train_docs), stream(enc, val_docs)
    print(f"corpus: {len(train_ids)} train / {len(val_ids)} val tokens, vocab {len(vocab)}", flush=True)

    cfg = model_config(args, vocab)
    model = CausalLM(cfg)
    previous = None
    if args.init_from:
        previous = export.previous_stage(args.init_from, cfg, bpe.tokenizer_json(vocab, merges, BOS, EOS))
        model.load_state_dict(export.load_exported(args.init_from)[0].state_dict())
    else:
        for name, p in model.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * args.layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                torch.nn.init.normal_(p, std=std)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], betas=(0.9, 0.95)
    )
    state_file = os.path.join(args.out, "train-state.pt")
    step, log, spent = 0, [], 0.0
    if os.path.exists(state_file):
        state = torch.load(state_file)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, log, spent = state["step"], state["log"], state["seconds"]
        print(f"resumed at step {step}", flush=True)

    long_from = int(args.steps * (1 - args.long_frac))
    tokens_per_step = args.batch * args.seq_len
    t0 = time.time() - spent
    while step < args.steps:
        step_start = time.time()
        seq = args.seq_len if step < long_from else args.long_seq_len
        x, y = batch_at(train_ids, step, tokens_per_step // seq, seq, args.seed)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        loss = F.cross_entropy(model(x).reshape(-1, cfg["vocab_size"]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        entry = {"step": step, "train_loss": round(loss.item(), 4), "seq_len": seq,
                 "tok_per_s": round(tokens_per_step / (time.time() - step_start))}
        if step % args.eval_every == 0 or step == args.steps:
            entry["val_loss"] = round(evaluate(model, val_ids, args.seq_len), 4)
        log.append(entry)
        if step % 10 == 0 or "val_loss" in entry:
            print(f"{json.dumps(entry)} {time.time() - t0:.0f}s", flush=True)
        if step % args.ckpt_every == 0 or step == args.steps:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "log": log,
                        "seconds": time.time() - t0}, state_file + ".tmp")
            os.replace(state_file + ".tmp", state_file)

    train_seconds = time.time() - t0
    final_val = evaluate(model, val_ids, args.seq_len)
    tail = [e["train_loss"] for e in log[-50:]]
    summary = {
        "steps": args.steps,
        "tokens_seen": tokens_per_step * args.steps,
        "train_tokens": len(train_ids),
        "val_tokens": len(val_ids),
        "final_train_loss": round(sum(tail) / len(tail), 4),
        "final_val_loss": round(final_val, 4),
        "train_seconds": round(train_seconds),
        "total_seconds": round(time.time() - started),
        "parameters": sum(p.numel() for p in model.parameters()),
        "command": "/usr/bin/python3 scripts/train/train.py " + " ".join(sys.argv[1:]),
        "previous_stages": previous,
    }
    export.export_model(args.out, model, cfg, vocab, merges, BOS, EOS, summary, log)
    os.remove(state_file)
    print(json.dumps({k: v for k, v in summary.items() if k != "previous_stages"}), flush=True)


if __name__ == "__main__":
    main()
