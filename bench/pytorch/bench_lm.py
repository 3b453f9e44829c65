#!/usr/bin/python3
"""The DeltaLM training step (the DDL Transformer of docs/spec.md §8) in PyTorch, the reference for ddl's
language-model timings.

Model (tokens are rows here; defaults d 256, L 4, 4 heads, T 256, B 16, vocab 256, SwiGLU hidden
floor(8d/3) = 682, preset "code", tied head): x = E[ids] -> X0 = x | repeat to dv | EC(x) -> L blocks ->
z = X | readout(X) -> RMSNorm -> logits = E y. Block, for s in (attention, SwiGLU):
    x_in = X (dv = 1) | CC(X) (structured: a conv over dv per feature, kernel 4, then a read vector) | TC(X)
    c = RMSNorm_s(x_in);  h = F_s(c)
    attention: q, k, v, o without bias; RoPE (base 10000, half-split pairs) then RMSNorm per head on
               q and k; causal softmax(q.k / sqrt(d_h)); SwiGLU: W2 (silu(W1 c) * W3 c)
    delta:    k = h / sqrt(|h|^2 + eps_k^2),  beta = 2 sigmoid(w c + b),  v = 4 sigmoid(W_v x_in + b_v),
              X_j' = X_j + beta k (v_j - k.X_j);   additive: X_j' = X_j + h
Parameter names and shapes are those of ddl's checkpoint (tools/ddl_torch.py's DeltaLM); --verify loads
one random state_dict into both and compares their logits in double for every variant first.
Step: zero_grad + forward + loss (mean cross-entropy over the B*T positions, target = the next token)
+ backward + AdamW (lr 1e-3, weight decay 0.01); median and minimum over --repeats steps after --warmup.
Variants: dv1 (delta, dv 1), dv1-additive (the pre-norm GPT baseline), cc (delta, dv 4, CC per token,
repeat), and cc-ec, tc, tc-ec; --residual overrides the residual kind of every variant.

PyTorch 1.13 on the CPU has no fused attention and no torch.compile: its modes are eager float32,
TorchScript (torch.jit.script, optionally with its CPU fuser: script-fuse; torch.jit.trace) and bf16
autocast with float32 master weights (modes.py); the modes of --modes are timed and the fastest is
reported per variant.
Run fairly on 2 shared cores (without the wait policy PyTorch spins):
    OMP_WAIT_POLICY=passive /usr/bin/python3 bench/pytorch/bench_lm.py --threads 1
Output: one line per (mode, variant) "pytorch <mode> <variant> median_ms=<t> min_ms=<t> steps=<n>", then
one JSON line with every figure and the best mode per variant.
--generate PROMPT times cached generation instead (Decoder: keys and values per block, EC's last K
embeddings; checked against the full forward first): PROMPT random tokens fed one at a time, then decoding
up to --length, "pytorch generate <mode> <variant> prefill_tokens_per_s=<r> decode_tokens_per_s=<r>". At the
paper's size, beside bench/bench_lm_scale.cpp:
    bench_lm.py --d 768 --depth 12 --heads 6 --length 1024 --batch 1 --vocab 50304 --variants cc-ec,dv1-additive
    bench_lm.py ... --generate 960
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from blas_check import require_optimised_blas
import modes


class RmsNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Weight(nn.Module):
    """A bare parameter under the name "<module>.weight", as ddl names it."""

    def __init__(self, value: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(value)


class StructuredCC(nn.Module):
    """The authors' structured CC: per feature a kernel conv.weight[i] (d, K) along dv, "same" padding with
    (K - 1) // 2 zeros on the left, then read.weight (dv): W[i, j] = sum_j' r[j'] a[i, j - j' + p],
    x_in[i] = sum_j W[i, j] X_j[i]. X: (N, dv, d) -> (N, d)."""

    def __init__(self, d: int, dv: int, kernel: int = 4):
        super().__init__()
        self.conv = Weight(torch.randn(d, kernel) * (0.5 / d ** 0.5))
        self.read = Weight(torch.full((dv,), 1.0 / dv))
        p = (kernel - 1) // 2
        idx = torch.zeros(dv, dv, dtype=torch.long)  # W[:, j] = sum_j' r[j'] a_pad[:, idx[j, j']]: 0 means outside
        for j in range(dv):
            for jp in range(dv):
                t = j - jp + p
                if 0 <= t < kernel:
                    idx[j, jp] = t + 1
        self.register_buffer("idx", idx, persistent=False)

    def forward(self, X: torch.Tensor, B: int, T: int) -> torch.Tensor:
        a = torch.cat((self.conv.weight.new_zeros(self.conv.weight.shape[0], 1), self.conv.weight), dim=1)
        W = a[:, self.idx] @ self.read.weight  # (d, dv)
        return torch.einsum("njd,dj->nd", X, W)


class TokenConv(nn.Module):
    """TC: causal depthwise Conv1d over tokens on channel i*dv + j, then x_in = sum_j r_j Y_j.
    X: (N, dv, d) -> (N, d) for N = B*T."""

    def __init__(self, d: int, dv: int, kernel: int):
        super().__init__()
        self.dv, self.d = dv, d
        self.conv = nn.Conv1d(d * dv, d * dv, kernel, groups=d * dv, padding=kernel - 1, bias=False)
        self.read = Weight(torch.full((dv,), 1.0 / dv))

    def forward(self, X: torch.Tensor, B: int, T: int) -> torch.Tensor:
        x = X.reshape(B, T, self.dv, self.d).permute(0, 3, 2, 1).reshape(B, self.d * self.dv, T)  # i*dv + j
        y = self.conv(x)[:, :, :T].reshape(B, self.d, self.dv, T)
        return torch.einsum("bijt,j->bti", y, self.read.weight).reshape(B * T, self.d)


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, max_t: int, base: float = 10000.0, eps: float = 1e-5):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.q_norm = RmsNorm(self.dh, eps)
        self.k_norm = RmsNorm(self.dh, eps)
        t = torch.arange(max_t, dtype=torch.float64)[:, None]
        i = torch.arange(self.dh // 2, dtype=torch.float64)[None, :]
        a = t * base ** (-2.0 * i / self.dh)
        # (1, 1, T, dh/2) in float64; model.to(dtype) rounds them once, as ddl's table
        self.register_buffer("cos", torch.cos(a)[None, None], persistent=False)
        self.register_buffer("sin", torch.sin(a)[None, None], persistent=False)
        self.register_buffer("mask", torch.ones(max_t, max_t, dtype=torch.bool).triu(1), persistent=False)

    def rope(self, x: torch.Tensor, T: int) -> torch.Tensor:
        half = self.dh // 2
        x1, x2 = x[..., :half], x[..., half:]
        c, s = self.cos[:, :, :T], self.sin[:, :, :T]
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

    def forward(self, c: torch.Tensor, B: int, T: int) -> torch.Tensor:
        q = self.q(c).view(B, T, self.h, self.dh).transpose(1, 2)  # (B, H, T, dh)
        k = self.k(c).view(B, T, self.h, self.dh).transpose(1, 2)
        v = self.v(c).view(B, T, self.h, self.dh).transpose(1, 2)
        q = self.q_norm(self.rope(q, T)) * (1.0 / math.sqrt(self.dh))  # scaled here: 8x fewer entries than s
        k = self.k_norm(self.rope(k, T))
        s = torch.matmul(q, k.transpose(-1, -2))
        p = torch.softmax(s.masked_fill(self.mask[:T, :T], float("-inf")), dim=-1)
        o = torch.matmul(p, v).transpose(1, 2).reshape(B * T, self.h * self.dh)
        return self.o(o)


class SwiGlu(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, d, bias=False)
        self.fc3 = nn.Linear(d, hidden, bias=False)

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.silu(self.fc1(c)) * self.fc3(c))


class Squeeze(nn.Module):
    """dv = 1: the state (N, 1, d) is x_in itself."""

    def forward(self, X: torch.Tensor, B: int, T: int) -> torch.Tensor:
        return X.squeeze(1)


class Repeat(nn.Module):
    """X0 = x repeated to dv channels (dv = 1: x itself). x: (N, d) -> (N, dv, d)."""

    def __init__(self, dv: int):
        super().__init__()
        self.dv = dv

    def forward(self, x: torch.Tensor, B: int, T: int) -> torch.Tensor:
        return x.unsqueeze(1).expand(-1, self.dv, -1)


class EC(nn.Module):
    """X_j[i] = causal depthwise Conv1d(d -> d*dv) of x over tokens, output channel i*dv + j; the state_dict
    holds expand.weight [d*dv, 1, K] as the checkpoint does."""

    def __init__(self, d: int, dv: int, kernel: int):
        super().__init__()
        self.d, self.dv = d, dv
        self.weight = nn.Parameter(torch.zeros(d * dv, 1, kernel))
        with torch.no_grad():
            self.weight[:, 0, -1] = 1.0  # the copy of the current token
        self.pad = kernel - 1

    def forward(self, x: torch.Tensor, B: int, T: int) -> torch.Tensor:
        y = F.conv1d(x.view(B, T, self.d).transpose(1, 2), self.weight, None, 1, self.pad, 1, self.d)[:, :, :T]
        return y.reshape(B, self.d, self.dv, T).permute(0, 3, 2, 1).reshape(B * T, self.dv, self.d)


class Additive(nn.Module):
    def forward(self, X: torch.Tensor, x_in: torch.Tensor, c: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return X + h.unsqueeze(1)


class Rewrite(nn.Module):
    """The Delta rewrite (code preset: linear gate, value 4 sigmoid(W_v x_in + b_v)).
    X: (N, dv, d); x_in, c, h: (N, d)."""

    def __init__(self, d: int, dv: int, eps_k: float = 1e-5):
        super().__init__()
        self.eps_k2 = eps_k * eps_k
        self.gate = nn.Linear(d, 1)
        self.value = nn.Linear(d, dv)
        with torch.no_grad():
            self.gate.bias.zero_()  # logit(beta0 / 2) with beta0 = 1
            self.value.bias.zero_()

    def forward(self, X: torch.Tensor, x_in: torch.Tensor, c: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        k = h * torch.rsqrt(h.pow(2).sum(-1, keepdim=True) + self.eps_k2)
        beta = 2.0 * torch.sigmoid(self.gate(c))                      # (N, 1)
        v = 4.0 * torch.sigmoid(self.value(x_in))                     # (N, dv)
        proj = torch.matmul(X, k.unsqueeze(-1)).squeeze(-1)           # k.X_j: (N, dv)
        return X + (beta * (v - proj)).unsqueeze(-1) * k.unsqueeze(1)


class Block(nn.Module):
    def __init__(self, d: int, dv: int, heads: int, hidden: int, max_t: int, delta: bool, compressor: str,
                 kernel: int):
        super().__init__()
        self.compress = compressor_of(d, dv, compressor, kernel)
        self.attn_norm = RmsNorm(d)
        self.attn = Attention(d, heads, max_t)
        self.attn_delta = Rewrite(d, dv) if delta else Additive()
        self.mlp_norm = RmsNorm(d)
        self.mlp = SwiGlu(d, hidden)
        self.mlp_delta = Rewrite(d, dv) if delta else Additive()

    def forward(self, X: torch.Tensor, B: int, T: int) -> torch.Tensor:
        x_in = self.compress(X, B, T)
        c = self.attn_norm(x_in)
        X = self.attn_delta(X, x_in, c, self.attn(c, B, T))
        x_in = self.compress(X, B, T)
        c = self.mlp_norm(x_in)
        return self.mlp_delta(X, x_in, c, self.mlp(c))


def compressor_of(d: int, dv: int, kind: str, kernel: int) -> nn.Module:
    if dv == 1:
        return Squeeze()
    return TokenConv(d, dv, kernel) if kind == "tc" else StructuredCC(d, dv)


VARIANTS = {  # name -> (dv, residual, state compressor, EC)
    "dv1": (1, "delta", "cc", False),
    "dv1-additive": (1, "additive", "cc", False),
    "cc": (4, "delta", "cc", False),
    "cc-ec": (4, "delta", "cc", True),
    "tc": (4, "delta", "tc", False),
    "tc-ec": (4, "delta", "tc", True),
}


class DeltaLM(nn.Module):
    def __init__(self, vocab: int, d: int, depth: int, heads: int, context: int, dv: int, delta: bool,
                 compressor: str = "cc", ec: bool = False, kernel: int = 4):
        super().__init__()
        self.d = d
        self.embed = nn.Embedding(vocab, d)
        self.expand = EC(d, dv, kernel) if ec and dv > 1 else Repeat(dv)
        self.blocks = nn.ModuleList([Block(d, dv, heads, 8 * d // 3, context, delta, compressor, kernel)
                                     for _ in range(depth)])
        self.readout = compressor_of(d, dv, compressor, kernel)
        self.norm = RmsNorm(d)
        self.init_spec(depth)

    def init_spec(self, depth: int):
        """docs/spec.md §8: matrices N(0, (0.5/sqrt d)^2), W_o and W_2 / sqrt(L), embedding N(0, 0.02^2),
        EC the copy of the current token, one-dimensional parameters at their module's start."""
        std = 0.5 / math.sqrt(self.d)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name == "embed.weight":
                    p.normal_(0.0, 0.02)
                elif name == "expand.weight":
                    p.zero_()
                    p[:, 0, -1] = 1.0
                elif p.dim() >= 2:
                    out = name.endswith("attn.o.weight") or name.endswith("mlp.fc2.weight")
                    p.normal_(0.0, std / math.sqrt(depth) if out and depth > 0 else std)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        B, T = ids.shape[0], ids.shape[1]
        X = self.expand(self.embed(ids.reshape(-1)), B, T)
        for block in self.blocks:
            X = block(X, B, T)
        return F.linear(self.norm(self.readout(X, B, T)), self.embed.weight)


class Decoder:
    """Cached decoding of a DeltaLM above, one token at a time, as ddl's LmDecoder does it: per block the
    keys and values of every past position (after RoPE and the QK norm), and EC's last K embeddings.
    TC (a convolution over past states) is not decoded here. step(id) -> logits (vocab,) of the next token."""

    def __init__(self, model: DeltaLM, capacity: int):
        if any(isinstance(b.compress, TokenConv) for b in model.blocks):
            raise SystemExit("bench_lm.py: --generate decodes dv1 and cc variants (TC has no decoder here)")
        self.m, self.capacity, self.pos = model, capacity, 0
        a = model.blocks[0].attn if model.blocks else None
        p = model.embed.weight
        self.keys = [p.new_zeros(a.h, capacity, a.dh) for _ in model.blocks]
        self.values = [p.new_zeros(a.h, capacity, a.dh) for _ in model.blocks]
        self.window = []  # EC's last K embeddings, oldest first

    def attend(self, a: Attention, c: torch.Tensor, layer: int, t: int) -> torch.Tensor:
        half = a.dh // 2
        cos, sin = a.cos[0, 0, t], a.sin[0, 0, t]  # (dh/2,)

        def rope(x):
            x1, x2 = x[..., :half], x[..., half:]
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

        q = a.q_norm(rope(a.q(c).view(a.h, a.dh))) * (1.0 / math.sqrt(a.dh))
        self.keys[layer][:, t] = a.k_norm(rope(a.k(c).view(a.h, a.dh)))
        self.values[layer][:, t] = a.v(c).view(a.h, a.dh)
        s = torch.einsum("hd,htd->ht", q, self.keys[layer][:, : t + 1])
        o = torch.einsum("ht,htd->hd", torch.softmax(s, dim=-1), self.values[layer][:, : t + 1])
        return a.o(o.reshape(1, a.h * a.dh))

    @torch.no_grad()
    def step(self, token: int) -> torch.Tensor:
        m, t = self.m, self.pos
        if t >= self.capacity:
            raise SystemExit(f"bench_lm.py: the decoder holds {self.capacity} positions")
        x = m.embed.weight[token]  # (d,)
        if isinstance(m.expand, EC):
            K = m.expand.weight.shape[-1]
            self.window = (self.window + [x])[-K:]
            xs = torch.stack([x.new_zeros(x.shape)] * (K - len(self.window)) + self.window)  # (K, d)
            W = m.expand.weight[:, 0, :].view(m.d, m.expand.dv, K)
            X = torch.einsum("ijk,ki->ji", W, xs).unsqueeze(0)  # (1, dv, d)
        else:
            X = m.expand(x.unsqueeze(0), 1, 1)
        for layer, b in enumerate(m.blocks):
            x_in = b.compress(X, 1, 1)
            c = b.attn_norm(x_in)
            X = b.attn_delta(X, x_in, c, self.attend(b.attn, c, layer, t))
            x_in = b.compress(X, 1, 1)
            c = b.mlp_norm(x_in)
            X = b.mlp_delta(X, x_in, c, b.mlp(c))
        self.pos += 1
        return F.linear(m.norm(m.readout(X, 1, 1)), m.embed.weight)[0]


def verify_decoder() -> None:
    """The decoder's logits at every position equal the full forward's (double, perturbed weights)."""
    torch.manual_seed(6)
    for variant in ("dv1", "dv1-additive", "cc", "cc-ec"):
        dv, kind, compressor, ec = VARIANTS[variant]
        model = DeltaLM(13, 16, 2, 2, 9, dv, kind == "delta", compressor, ec, 4).double()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.3 * torch.randn_like(p))
            ids = torch.randint(0, 13, (1, 9))
            full = model(ids)
        dec = Decoder(model, 9)
        err = max((dec.step(int(ids[0, t])) - full[t]).abs().max().item() for t in range(9))
        if not err < 1e-12:
            print(f"bench_lm.py: the {variant} decoder differs from the full forward by {err:.3e}", file=sys.stderr)
            sys.exit(4)
    print("# verified: cached decoding equals the full forward for dv1, dv1-additive, cc, cc-ec (double, < 1e-12)")


def time_generation(model: DeltaLM, mode: str, prompt: int, context: int, vocab: int):
    """Feeds `prompt` random tokens one at a time, then decodes up to `context`: tokens/s of each part."""
    gen = torch.Generator().manual_seed(13)
    ids = torch.randint(0, vocab, (context,), generator=gen).tolist()
    dec = Decoder(model, context)
    with modes.forward_context(mode):
        t0 = time.perf_counter()
        for t in range(prompt):
            dec.step(ids[t])
        t1 = time.perf_counter()
        for t in range(prompt, context):
            dec.step(ids[t])
        t2 = time.perf_counter()
    return prompt / (t1 - t0), (context - prompt) / (t2 - t1)


def build(variant: str, residual: str, args) -> DeltaLM:
    dv, kind, compressor, ec = VARIANTS[variant]
    kind = residual or kind
    if kind not in ("delta", "additive"):
        raise SystemExit(f"bench_lm.py: residual '{kind}' is not timed here (delta or additive)")
    return DeltaLM(args.vocab, args.d, args.depth, args.heads, args.length, dv, kind == "delta", compressor, ec,
                   args.kernel)


def verify(args) -> None:
    """Loads a random state_dict of every variant into this model and into tools/ddl_torch.py's DeltaLM
    (the one checked against ddl) and compares the logits in double: exits 4 when they differ."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
    import ddl_torch  # noqa: E402  (the reference twin)
    torch.manual_seed(5)
    for variant, (dv, kind, compressor, ec) in VARIANTS.items():
        d, T, B = 16, 9, 2
        cfg = ddl_torch.lm_config(variant if variant != "dv1-additive" else "dv1", kind, "code", d=d, heads=2,
                                  vocab=13, context=T, hidden=8 * d // 3, conv_kernel=4, compressor_kernel=4,
                                  input_embed_shortconv_kernel_size=4, depth=2)
        ref = ddl_torch.DeltaLM(cfg).double()
        mine = DeltaLM(13, d, 2, 2, T, dv, kind == "delta", compressor, ec, 4).double()
        with torch.no_grad():
            for p in ref.parameters():
                p.add_(0.3 * torch.randn_like(p))
        mine.load_state_dict(ref.state_dict(), strict=True)  # same names and shapes
        ids = torch.randint(0, 13, (B, T))
        with torch.no_grad():
            err = (mine(ids) - ref(ids)).abs().max().item()
        if not err < 1e-12:
            print(f"bench_lm.py: {variant} differs from tools/ddl_torch.py's DeltaLM by {err:.3e}", file=sys.stderr)
            sys.exit(4)
    print(f"# verified: every variant equals tools/ddl_torch.py's DeltaLM (double, < 1e-12)")


def time_steps(model, mode: str, ids: torch.Tensor, targets: torch.Tensor, warmup: int, repeats: int):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    def step():
        opt.zero_grad(set_to_none=False)
        with modes.forward_context(mode):
            logits = model(ids)
            loss = F.cross_entropy(logits, targets)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="dv1,dv1-additive,cc", help=f"comma list of {', '.join(VARIANTS)}")
    ap.add_argument("--residual", choices=("delta", "additive"), help="override every variant's residual kind")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--modes", default=modes.default_modes(),
                    help="comma list of eager, script, autocast (modes.py), script-fuse (TorchScript with its CPU "
                         "fuser on), trace")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--length", type=int, default=256, help="T")
    ap.add_argument("--batch", type=int, default=16, help="B")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--kernel", type=int, default=4, help="K of TC and EC")
    ap.add_argument("--no-verify", action="store_true", help="skip the comparison with tools/ddl_torch.py")
    ap.add_argument("--verify-only", action="store_true",
                    help="only compare the models (step and cached decoder) with tools/ddl_torch.py's, then exit: "
                         "the check a test runs, on any BLAS")
    ap.add_argument("--generate", type=int, metavar="PROMPT",
                    help="time cached generation instead of the step: PROMPT tokens fed one at a time, then "
                         "decoding up to --length (eager and autocast modes; dv1 and cc variants)")
    args = ap.parse_args()
    for v in args.variants.split(","):
        if v not in VARIANTS:
            ap.error(f"unknown variant '{v}', expected one of {', '.join(VARIANTS)}")
    if os.environ.get("OMP_WAIT_POLICY", "").lower() != "passive":
        print("# warning: OMP_WAIT_POLICY=passive is not set; PyTorch spins and runs slower on 2 shared cores")
    torch.set_num_threads(args.threads)
    if args.verify_only:
        verify(args)
        verify_decoder()
        return
    require_optimised_blas()
    blas = [f for f in torch.__config__.show().replace("\n", ",").split(",") if "BLAS" in f or "LAPACK" in f]
    print(f"# torch.__config__: {', '.join(f.strip() for f in blas)}")
    if not args.no_verify:
        verify(args)
    dtype = torch.float32 if args.dtype == "float32" else torch.float64
    if args.generate is not None:
        return generate_main(args, ap, dtype)
    torch.manual_seed(0)
    seq = torch.randint(0, args.vocab, (args.batch, args.length + 1))
    ids, targets = seq[:, :-1].contiguous(), seq[:, 1:].reshape(-1)
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, {args.dtype}, d {args.d}, L {args.depth}, "
          f"heads {args.heads}, T {args.length}, B {args.batch}, vocab {args.vocab}, load {os.getloadavg()[0]:.2f}")
    print(modes.describe_cpu())
    results = []
    for variant in args.variants.split(","):
        for mode in args.modes.split(","):
            torch.manual_seed(1)
            model = build(variant, args.residual, args).to(dtype)  # parameters and the RoPE tables
            torch._C._jit_override_can_fuse_on_cpu(mode == "script-fuse")
            if mode == "script-fuse":
                model = torch.jit.script(model)
            elif mode == "trace":
                model = torch.jit.trace(model, (ids,), check_trace=False)
            elif mode in modes.MODES:
                model = modes.prepare(model, mode)
            else:
                ap.error(f"unknown mode '{mode}'")
            if mode == "autocast" and dtype != torch.float32:
                ap.error("mode autocast runs float32 master weights: use --dtype float32")
            med, best = time_steps(model, mode, ids, targets, args.warmup, args.repeats)
            print(f"pytorch {mode} {variant} median_ms={med * 1e3:.1f} min_ms={best * 1e3:.1f} steps={args.repeats}",
                  flush=True)
            results.append({"variant": variant, "mode": mode, "median_ms": round(med * 1e3, 2),
                            "min_ms": round(best * 1e3, 2)})
    best = {}
    for r in results:
        if r["variant"] not in best or r["median_ms"] < best[r["variant"]]["median_ms"]:
            best[r["variant"]] = r
    print(json.dumps({"bench": "pytorch_lm", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "dtype": args.dtype, "d": args.d, "depth": args.depth, "heads": args.heads, "T": args.length,
                      "B": args.batch, "vocab": args.vocab, "residual": args.residual, "results": results,
                      "best": {v: {"mode": r["mode"], "median_ms": r["median_ms"], "min_ms": r["min_ms"]}
                               for v, r in best.items()},
                      "load_avg_1min": round(os.getloadavg()[0], 2)}))


def generate_main(args, ap, dtype) -> None:
    if not 1 <= args.generate < args.length:
        ap.error(f"--generate takes a prompt of 1 .. {args.length - 1} tokens (below --length)")
    if not args.no_verify:
        verify_decoder()
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, {args.dtype}, d {args.d}, L {args.depth}, "
          f"heads {args.heads}, context {args.length}, prompt {args.generate}, vocab {args.vocab}")
    print(modes.describe_cpu())
    for variant in args.variants.split(","):
        for mode in args.modes.split(","):
            if mode not in ("eager", "autocast"):
                continue  # TorchScript does not script the decoder's Python loop
            torch.manual_seed(1)
            model = build(variant, args.residual, args).to(dtype)
            prefill, decode = time_generation(model, mode, args.generate, args.length, args.vocab)
            print(f"pytorch generate {mode} {variant} prefill_tokens_per_s={prefill:.1f} "
                  f"decode_tokens_per_s={decode:.1f}", flush=True)


if __name__ == "__main__":
    main()
