#!/usr/bin/python3
"""A DeltaNet (dv = 1) parameter layout written the way a PyTorch user would write it, independently of
tools/ddl_torch.py: nn.Linear layers, nn.Parameter gains, attributes named after what they are. Its
state_dict, randomised, is written as a safetensors file that ddl must load as it is.
    torch_plain_deltanet.py --preset code|paper|v1 --gate linear|two_layer_tanh --out FILE [sizes...]
"""
import argparse
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from ddl_torch import write_safetensors  # noqa: E402  (the file writer only)


class Gain(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))


class Mlp(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)


class TwoLayerGate(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, 1)


class Rewrite(nn.Module):
    def __init__(self, d, preset, gate, gate_hidden):
        super().__init__()
        if preset == "v1":  # k from an auxiliary MLP of the state
            self.direction = Mlp(d, max(d // 4, 1))
        self.gate = nn.Linear(d, 1) if gate == "linear" else TwoLayerGate(d, gate_hidden)
        self.value = nn.Linear(d, 1)


class Block(nn.Module):
    def __init__(self, d, hidden, preset, gate, gate_hidden):
        super().__init__()
        self.norm = Gain(d)
        self.mlp = Mlp(d, hidden)
        self.delta = Rewrite(d, preset, gate, gate_hidden)


class DeltaNet(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.input = nn.Linear(a.input, a.d)
        self.blocks = nn.ModuleList(Block(a.d, a.hidden, a.preset, a.gate, a.gate_hidden) for _ in range(a.depth))
        self.norm = Gain(a.d)
        self.head = nn.Linear(a.d, a.classes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", required=True)
    ap.add_argument("--gate", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--input", type=int, default=6)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--d", type=int, default=8)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--gate-hidden", type=int, default=4)
    a = ap.parse_args()
    torch.manual_seed(3)
    net = DeltaNet(a).double()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p))
    write_safetensors(a.out, net.state_dict(), {"format": "pt"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
