#!/usr/bin/python3
"""float_accuracy_torch.py: PyTorch's own float32 gradient error on the gate cases of
tests/test_float_accuracy.cpp, the numbers that test quotes as PyTorch's.

    build/tests/ddl_tests_training "[.torch_export]"     # prints one path stem per case
    /usr/bin/python3 tools/float_accuracy_torch.py STEM [STEM ...]

Each STEM names <STEM>.ck.safetensors (the float weights, a ddl checkpoint) and <STEM>.order<k>.safetensors
for k = 0..5 (x: (input_dim, N) in ddl's column layout, y: (1, N) labels). The net is loaded twice by
tools/ddl_torch.py, in float32 and float64 (the same values), and the mean cross-entropy's gradients
are compared as the test compares ddl's: per tensor ||g32 - g64|| / ||g64||, the worst tensor per order.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddl_torch  # noqa: E402


def gradients(model, x, y):
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    return {n: p.grad.to(torch.float64).clone() for n, p in model.named_parameters()}


def main(stems):
    torch.set_num_threads(1)  # the test's reference numbers are one thread's
    for stem in stems:
        models = {t: ddl_torch.load_checkpoint(stem + ".ck.safetensors", t)[0] for t in (torch.float32, torch.float64)}
        worst = []
        for order in range(6):
            batch, _ = ddl_torch.read_safetensors(f"{stem}.order{order}.safetensors")
            y = batch["y"][0].long()
            g = {t: gradients(m, batch["x"].t().to(t).contiguous(), y) for t, m in models.items()}
            errs = {n: (g[torch.float32][n] - t).norm().item() / t.norm().item()
                    for n, t in g[torch.float64].items() if t.norm().item() > 0}
            name = max(errs, key=errs.get)
            worst.append((errs[name], name))
        s = sorted(e for e, _ in worst)
        print(f"{os.path.basename(stem)}: worst tensor per order " + " ".join(f"{e:.2e}" for e, _ in worst) +
              f", median {(s[2] + s[3]) / 2:.2e} (" + ", ".join(sorted({n for _, n in worst})) + ")")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
