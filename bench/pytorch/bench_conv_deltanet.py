#!/usr/bin/python3
"""ddl-cifar's ConvDeltaNet training step in PyTorch, the reference for ddl's bench_conv_block BM_ConvNetStep.

Network (preset "code", dv = 1, NCHW here): stem Conv2d(3, w0, 3, stride s, padding 1) -> per stage s:
[transition: RMSNorm over channels -> Conv2d(w_{s-1}, w_s, 3, stride 2, padding 1)] + blocks ->
RMSNorm over channels -> global average pool -> Linear(w_last, 10). Block (per pixel):
    c = RMSNorm_channels(x);  h = conv2(GELU(conv1(c)))       (3x3, same padding, hidden = width)
    k = h / sqrt(|h|^2 + eps_k^2)  over channels;  beta = 2 sigmoid(w c + b)  (1x1 conv, b = 0)
    v = 4 sigmoid(W_v x + b_v)     (1x1 conv on the raw state)
    x' = x + beta k (v - k.x)      or x' = x + h for the plain (additive) net.
Step: zero_grad + forward + cross-entropy + backward + AdamW, median of many steps after a warmup, in
each of PyTorch's modes (modes.py: eager, torch.jit.script, bf16 autocast). Run fairly on 2 cores:
    OMP_WAIT_POLICY=passive /usr/bin/python3 bench/pytorch/bench_conv_deltanet.py --threads 2
Output: "pytorch <mode> <residual> median_ms=<t> min_ms=<t> steps=<n>" (wall time; with --clock cpu the
process CPU time of all threads, as ddl_bench_conv_block BM_ConvNetParts' step_cpu_ms, for a loaded machine).
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


class ChannelRmsNorm(nn.Module):
    def __init__(self, c: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + self.eps) * self.weight.view(1, -1, 1, 1)


class Block(nn.Module):
    def __init__(self, c: int, delta: bool, eps_k: float = 1e-5, beta0: float = 1.0, scale: float = 4.0):
        super().__init__()
        self.delta = delta
        self.norm = ChannelRmsNorm(c)
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.gate = nn.Conv2d(c, 1, 1)
        self.value = nn.Conv2d(c, 1, 1)
        p = min(max(beta0 / 2.0, 1e-6), 1.0 - 1e-6)
        with torch.no_grad():
            self.gate.bias.fill_(math.log(p / (1.0 - p)))
            self.value.bias.zero_()
        self.eps_k2 = eps_k * eps_k
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.norm(x)
        h = self.conv2(F.gelu(self.conv1(c)))
        if not self.delta:
            return x + h
        k = h * torch.rsqrt(h.pow(2).sum(1, keepdim=True) + self.eps_k2)
        beta = 2.0 * torch.sigmoid(self.gate(c))
        v = self.scale * torch.sigmoid(self.value(x))
        r = v - (k * x).sum(1, keepdim=True)
        return x + beta * k * r


class Transition(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.norm = ChannelRmsNorm(cin)
        self.conv = nn.Conv2d(cin, cout, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.norm(x))


class ConvDeltaNet(nn.Module):
    def __init__(self, widths, depths, stem_stride: int, classes: int, delta: bool):
        super().__init__()
        self.stem = nn.Conv2d(3, widths[0], 3, stride=stem_stride, padding=1)
        layers = []
        for s, (w, n) in enumerate(zip(widths, depths)):
            if s > 0:
                layers.append(Transition(widths[s - 1], w))
            layers.extend(Block(w, delta) for _ in range(n))
        self.layers = nn.Sequential(*layers)
        self.norm = ChannelRmsNorm(widths[-1])
        self.head = nn.Linear(widths[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.head(self.norm(x).mean((2, 3)))


def time_steps(model: nn.Module, mode: str, x: torch.Tensor, y: torch.Tensor, warmup: int, steps: int,
               clock=time.perf_counter):
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
        t0 = clock()
        step()
        times.append(clock() - t0)
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--widths", default="24,48,96")
    ap.add_argument("--depths", default="1,1,1")
    ap.add_argument("--stem-stride", type=int, default=2)
    ap.add_argument("--modes", default=modes.default_modes(), help="comma list of " + ", ".join(modes.MODES))
    ap.add_argument("--residuals", default="plain,delta")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: process CPU time of all threads per step (time.process_time), the load-robust "
                         "figure beside ddl_bench_conv_block BM_ConvNetParts' step_cpu_ms")
    args = ap.parse_args()
    if os.environ.get("OMP_WAIT_POLICY", "").lower() != "passive":
        print("# warning: OMP_WAIT_POLICY=passive is not set; PyTorch spins and runs slower on 2 shared cores")
    torch.set_num_threads(args.threads)
    require_optimised_blas()
    widths = [int(v) for v in args.widths.split(",")]
    depths = [int(v) for v in args.depths.split(",")]
    torch.manual_seed(0)
    x = torch.randn(args.batch, 3, 32, 32)
    y = torch.arange(args.batch) * 7 % 10
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, B {args.batch}, widths {widths}, "
          f"depths {depths}, stem stride {args.stem_stride}")
    print(modes.describe_cpu())
    for residual in args.residuals.split(","):
        for mode in args.modes.split(","):
            torch.manual_seed(1)
            model = ConvDeltaNet(widths, depths, args.stem_stride, 10, delta=(residual == "delta"))
            model = modes.prepare(model, mode)
            clock = time.process_time if args.clock == "cpu" else time.perf_counter
            med, best = time_steps(model, mode, x, y, args.warmup, args.steps, clock)
            print(f"pytorch {mode} {residual} median_ms={med * 1e3:.3f} min_ms={best * 1e3:.3f} steps={args.steps}",
                  flush=True)


if __name__ == "__main__":
    main()
