#!/usr/bin/env python3
"""make_gpt_golden.py — the PyTorch reference for tests/trainer/test_model.c
(tests/golden/gpt_small.bin).

Builds a small GPT-2 (the architecture of trainer/model.c: pre-LN blocks, fused QKV, causal
attention, tanh GELU, LayerNorm eps 1e-5, LM head tied to wte, no dropout, no vocab padding) in
fp32, runs one forward/backward on a fixed batch of byte tokens and then 5 AdamW steps with
global-norm clipping and llm.c's warm-up + cosine schedule, and writes everything the C test
compares. Weights are drawn with torch (seeded), larger than GPT-2's init so that activations are
of order 1, and biases and LayerNorm parameters away from 0 / 1, so that a kernel that ignored
them would fail.

Run with Debian's torch (apt-get install python3-torch python3-numpy):
    /usr/bin/python3 tests/golden/make_gpt_golden.py [--out tests/golden/gpt_small.bin]
The same model times PyTorch's forward + backward for comparison with
"tests/trainer/test_model --bench"
(same arguments, same tokens/s definition: B*T over the best of the iterations):
    /usr/bin/python3 tests/golden/make_gpt_golden.py --bench L NH C T B [iters] [--threads N]

File format (little-endian), in the spirit of llm.c's debug state:
  header: 256 int32
    [0] magic 20250721  [1] version 1  [2] B  [3] T  [4] max_seq_len  [5] V  [6] L  [7] NH  [8] C
    [9] num_params  [10] nsteps  [11] warmup steps  [12] schedule length (total steps)
    float32 in int32 slots: [16] max_lr [17] min_lr [18] beta1 [19] beta2 [20] eps
    [21] weight_decay (2-D tensors only) [22] max grad norm
  then float32 unless noted:
    params (num_params)      initial weights in trainer/model.c's buffer order
    x, y (B*T int32 each)    inputs and targets
    logits (B*T*V)           of the initial weights
    loss (1)                 mean cross-entropy of the initial weights
    grads (num_params)       d loss / d params of the initial weights, buffer order, unclipped
    losses (nsteps)          the loss of each training step, before its update
    final params (num_params) after nsteps AdamW steps
Buffer order: wte (V, C), wpe (maxT, C); per layer ln1.w, ln1.b, attn.qkv.w (3C, C), attn.qkv.b,
attn.proj.w (C, C), attn.proj.b, ln2.w, ln2.b, mlp.fc.w (4C, C), mlp.fc.b, mlp.proj.w (C, 4C),
mlp.proj.b; then lnf.w, lnf.b. Weights are (out, in) as in torch.nn.Linear.
"""
import argparse
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MAGIC, VERSION = 20250721, 1
CFG = dict(B=4, T=32, max_seq_len=32, V=256, L=2, NH=4, C=48)
TRAIN = dict(nsteps=5, warmup=2, total=5, max_lr=1e-3, min_lr=1e-4, beta1=0.9, beta2=0.95,
             eps=1e-8, weight_decay=0.1, grad_clip=1.0)
TEXT = (b"First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        b"First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. "
        b"resolved.\n\nFirst Citizen:\nFirst, you know Caius Marcius is chief enemy to the "
        b"people.\n")


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attn(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (a.view(B, T, self.NH, hs).transpose(1, 2) for a in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg["V"], cfg["C"])
        self.wpe = nn.Embedding(cfg["max_seq_len"], cfg["C"])
        self.h = nn.ModuleList(Block(cfg["C"], cfg["NH"]) for _ in range(cfg["L"]))
        self.lnf = nn.LayerNorm(cfg["C"], eps=1e-5)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        return logits, loss

    def ordered(self):
        """(name, tensor) in trainer/model.c's buffer order."""
        out = [("wte", self.wte.weight), ("wpe", self.wpe.weight)]
        for l, b in enumerate(self.h):
            for name, mod in (("ln1", b.ln1), ("attn.qkv", b.qkv), ("attn.proj", b.proj),
                              ("ln2", b.ln2), ("mlp.fc", b.fc), ("mlp.proj", b.mlp_proj)):
                out += [(f"h.{l}.{name}.w", mod.weight), (f"h.{l}.{name}.b", mod.bias)]
        return out + [("lnf.w", self.lnf.weight), ("lnf.b", self.lnf.bias)]


def init_weights(model):
    """Larger than GPT-2's init (std 0.1 instead of 0.02), with non-trivial biases and LayerNorm
    parameters: pre-activations of order 1 exercise the GELU's curvature and make the attention
    far from uniform, so errors there show in the logits and gradients."""
    with torch.no_grad():
        for name, p in model.ordered():
            if p.dim() == 2:
                p.normal_(0.0, 0.1)
            elif name.split(".")[-2].startswith("ln") and name.endswith(".w"):
                p.normal_(1.0, 0.2)
            else:
                p.normal_(0.0, 0.05)


def lr_schedule(step, warmup, total, max_lr, min_lr):
    """llm.c's schedule, as trainer/optim.c lr_schedule (rounded to fp32 there and here)."""
    if step < warmup:
        lr = max_lr * (step + 1) / warmup
    elif step >= total:
        lr = min_lr
    else:
        r = (step - warmup) / (total - warmup)
        lr = min_lr + 0.5 * (1.0 + math.cos(math.pi * r)) * (max_lr - min_lr)
    return float(np.float32(lr))


def flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors]).numpy().astype("<f4")


def bench(argv, threads):
    import time
    L, NH, C, T, B = argv[:5] if len(argv) >= 5 else (4, 4, 128, 128, 8)
    iters = argv[5] if len(argv) >= 6 else 10
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPT(dict(V=256, max_seq_len=T, L=L, NH=NH, C=C))
    x = torch.randint(0, 256, (B, T))
    y = torch.randint(0, 256, (B, T))
    best = float("inf")
    for it in range(iters + 1):
        t0 = time.perf_counter()
        _, loss = model(x, y)
        model.zero_grad()
        loss.backward()
        dt = time.perf_counter() - t0
        best = min(best, dt) if it > 0 else best  # the first one warms up
    n = sum(p.numel() for p in model.parameters())
    blas = "unknown"
    try:  # the BLAS library this process loaded (Debian's libblas.so.3 is an alternative)
        with open("/proc/self/maps") as f:
            libs = {ln.split()[-1] for ln in f if "blas" in ln or "mkl" in ln}
        blas = ", ".join(sorted(os.path.realpath(p) for p in libs)) or "none loaded"
    except OSError:
        pass
    print(f"PyTorch {torch.__version__}: L {L} NH {NH} C {C} T {T} B {B}, {n} params, "
          f"{threads} thread(s): best of {iters}: {dt * 1e3:.1f} ms last, "
          f"{B * T / best:.0f} tokens/s; BLAS {blas}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "gpt_small.bin"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--bench", type=int, nargs="*", metavar="L NH C T B [iters]",
                    help="time forward + backward instead of writing the file")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for --bench")
    args = ap.parse_args()
    if args.bench is not None:
        return bench(args.bench, args.threads)

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    c, tr = CFG, TRAIN
    B, T = c["B"], c["T"]
    model = GPT(c)
    init_weights(model)
    named = model.ordered()
    assert len(named) == len(list(model.parameters()))
    params0 = flat(p for _, p in named)

    data = torch.tensor(list(TEXT[: B * T + 1]), dtype=torch.long)
    assert data.numel() == B * T + 1
    x = data[:-1].view(B, T)
    y = data[1:].view(B, T)

    logits, loss = model(x, y)
    model.zero_grad()
    loss.backward()
    grads0 = flat(p.grad for _, p in named)
    logits0 = logits.detach().numpy().astype("<f4")
    loss0 = float(loss)

    decay = [p for _, p in named if p.dim() == 2]
    no_decay = [p for _, p in named if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tr["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=tr["max_lr"], betas=(tr["beta1"], tr["beta2"]), eps=tr["eps"],
                            foreach=False)
    losses = []
    for step in range(tr["nsteps"]):
        opt.zero_grad(set_to_none=False)
        _, loss = model(x, y)
        loss.backward()
        losses.append(float(loss))
        torch.nn.utils.clip_grad_norm_(model.parameters(), tr["grad_clip"])
        lr = lr_schedule(step, tr["warmup"], tr["total"], tr["max_lr"], tr["min_lr"])
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
    params_final = flat(p for _, p in named)

    header = np.zeros(256, dtype="<i4")
    header[:13] = [MAGIC, VERSION, B, T, c["max_seq_len"], c["V"], c["L"], c["NH"], c["C"],
                   params0.size, tr["nsteps"], tr["warmup"], tr["total"]]
    hb = bytearray(header.tobytes())
    for slot, key in enumerate(("max_lr", "min_lr", "beta1", "beta2", "eps", "weight_decay",
                                "grad_clip"), start=16):
        struct.pack_into("<f", hb, 4 * slot, tr[key])
    with open(args.out, "wb") as f:
        f.write(hb)
        f.write(params0.tobytes())
        f.write(x.numpy().astype("<i4").tobytes())
        f.write(y.numpy().astype("<i4").tobytes())
        f.write(logits0.tobytes())
        f.write(np.array([loss0], dtype="<f4").tobytes())
        f.write(grads0.tobytes())
        f.write(np.array(losses, dtype="<f4").tobytes())
        f.write(params_final.tobytes())
    print(f"wrote {args.out}: {params0.size} params, loss {loss0:.6f}, "
          f"losses {' '.join(f'{v:.6f}' for v in losses)}, {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
