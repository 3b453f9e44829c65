#!/usr/bin/python3
"""The DeltaNet training step of bench_net.cpp (784 -> 256, 4 blocks) in PyTorch, as the reference for ddl's bench_net.

Network (preset "code", dv = 1, tokens are rows here): input Linear(784, 256) -> 4 blocks ->
RMSNorm -> Linear(256, 10). Block: c = RMSNorm(x) (gain, eps 1e-5), h = fc2(GELU(fc1(c))) with
hidden 1024 (exact GELU), and the rewrite
    k = h / sqrt(|h|^2 + eps_k^2)      eps_k = 1e-5        (k-Map, SqrtEps)
    beta = 2 sigmoid(w c + b)          b = logit(beta0 / 2) = 0 for beta0 = 1
    v = 4 sigmoid(W_v x + b_v)         on the raw state x
    x' = x + beta k (v - k.x)
or x' = x + h for the plain (additive) net. Step: zero_grad + forward + cross-entropy + backward +
AdamW (lr 1e-3, weight decay 0.01), timed as the median of many steps after a warmup, in each of
PyTorch's modes (modes.py: eager, torch.jit.script, bf16 autocast).

Run fairly on 2 cores (without the wait policy PyTorch is 1.7-2.2x slower here):
    OMP_WAIT_POLICY=passive /usr/bin/python3 bench/pytorch/bench_deltanet.py --threads 2
Output: one line per (mode, residual): "pytorch <mode> <residual> median_ms=<t> min_ms=<t> steps=<n>".
"""
import argparse
import math
import os
import statistics
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


class Block(nn.Module):
    def __init__(self, d: int, hidden: int, delta: bool, eps_k: float = 1e-5, beta0: float = 1.0, scale: float = 4.0):
        super().__init__()
        self.delta = delta
        self.norm = RmsNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.gate = nn.Linear(d, 1)
        self.value = nn.Linear(d, 1)
        p = min(max(beta0 / 2.0, 1e-6), 1.0 - 1e-6)
        with torch.no_grad():
            self.gate.bias.fill_(math.log(p / (1.0 - p)))
            self.value.bias.zero_()
        self.eps_k2 = eps_k * eps_k
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.norm(x)
        h = self.fc2(F.gelu(self.fc1(c)))
        if not self.delta:
            return x + h
        k = h * torch.rsqrt(h.pow(2).sum(-1, keepdim=True) + self.eps_k2)
        beta = 2.0 * torch.sigmoid(self.gate(c))
        v = self.scale * torch.sigmoid(self.value(x))
        r = v - (k * x).sum(-1, keepdim=True)
        return x + beta * k * r


class DeltaNet(nn.Module):
    def __init__(self, in_dim: int, d: int, depth: int, hidden: int, classes: int, delta: bool):
        super().__init__()
        self.input = nn.Linear(in_dim, d)
        self.blocks = nn.ModuleList([Block(d, hidden, delta) for _ in range(depth)])
        self.norm = RmsNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.input(x)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def time_steps(model: nn.Module, mode: str, x: torch.Tensor, y: torch.Tensor, warmup: int, steps: int):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    def step():
        opt.zero_grad(set_to_none=False)
        with modes.forward_context(mode):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--modes", default=modes.default_modes(), help="comma list of " + ", ".join(modes.MODES))
    ap.add_argument("--residuals", default="plain,delta")
    args = ap.parse_args()
    if os.environ.get("OMP_WAIT_POLICY", "").lower() != "passive":
        print("# warning: OMP_WAIT_POLICY=passive is not set; PyTorch spins and runs slower on 2 shared cores")
    torch.set_num_threads(args.threads)
    require_optimised_blas()
    torch.manual_seed(0)
    x = torch.randn(args.batch, 784)
    y = torch.arange(args.batch) * 7 % 10
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, B {args.batch}")
    print(modes.describe_cpu())
    for residual in args.residuals.split(","):
        for mode in args.modes.split(","):
            torch.manual_seed(1)
            model = DeltaNet(784, 256, 4, 1024, 10, delta=(residual == "delta"))
            model = modes.prepare(model, mode)
            med, best = time_steps(model, mode, x, y, args.warmup, args.steps)
            print(f"pytorch {mode} {residual} median_ms={med * 1e3:.3f} min_ms={best * 1e3:.3f} steps={args.steps}",
                  flush=True)


if __name__ == "__main__":
    main()
