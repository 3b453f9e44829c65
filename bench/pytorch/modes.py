"""PyTorch's training-step modes, shared by the comparison scripts, so that ddl is always timed against
PyTorch's fastest way of running the same step on this machine.

  eager     float32 modules as written
  script    torch.jit.script of the same modules (float32)
  autocast  eager modules with float32 master weights and AdamW state, forward and loss under
            torch.autocast("cpu", dtype=torch.bfloat16): the large matrix products run in bf16 on oneDNN
            (native on a CPU with AVX512-BF16 or AMX-BF16, emulated and slow without), backward outside
            the context, as PyTorch's documentation has users write it.

Every mode is timed; the caller reports the fastest per model (bench/run_compare.sh does the same).
autocast is in the default list only on a CPU with native bf16 products: emulated, it is 16x slower than
eager here (AMD EPYC with AVX2 only, 2026-12-05: 618 ms against 38 ms for bench_deltanet.py's step), so it
can never be the fastest and would only spend minutes; --modes can still ask for it.
"""
import contextlib

import torch

MODES = ("eager", "script", "autocast")


def cpu_bf16_flags():
    """The bf16 instruction-set flags of this CPU (/proc/cpuinfo), e.g. ['avx512_bf16']; [] if none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return sorted(x for x in line.split(":", 1)[1].split() if x in ("avx512_bf16", "amx_bf16"))
    except OSError:
        pass
    return []


def default_modes():
    """eager,script, and autocast where the CPU has native bf16 products."""
    return ",".join(m for m in MODES if m != "autocast" or cpu_bf16_flags())


def describe_cpu():
    """One comment line for the scripts' output: whether autocast's bf16 products are native here."""
    flags = cpu_bf16_flags()
    native = ("native (" + ", ".join(flags) + "), timed by default" if flags else
              "emulated (no AVX512-BF16 / AMX-BF16 on this CPU), not timed unless --modes asks")
    return f"# bf16 autocast: {native}"


def prepare(model, mode):
    """The module to time in `mode` (TorchScript for script, the module itself otherwise)."""
    if mode == "script":
        return torch.jit.script(model)
    if mode in ("eager", "autocast"):
        return model
    raise ValueError(f"unknown mode '{mode}', expected one of {', '.join(MODES)}")


def forward_context(mode):
    """The context the forward pass and the loss run in: bf16 autocast for mode autocast."""
    if mode == "autocast":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()
