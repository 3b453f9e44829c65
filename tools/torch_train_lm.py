#!/usr/bin/python3
"""torch_train_lm.py: ddl-text's training of DeltaLM reproduced in PyTorch, float32, step for step, to
compare the learning dynamics of ddl with PyTorch's (the same model from the same initial weights, the
same batches in the same order, the same loss, optimizer, schedule and clipping).

The model is tools/ddl_torch.py's DeltaLM (its `check` command and tests/test_torch_interop_lm.cpp show
it gives ddl's logits and gradients), built from the step-0 checkpoint's model_config and loaded with
its weights. What this script ports from ddl, exactly:
  data      the corpus of ddl-text's --data: one file, or every regular file (not a symlink, not
            fortune's *.dat) of a folder in name order, concatenated and split contiguously into
            train | validation | test with nVal = llround(n * 0.05), nTest = llround(n * 0.05)
            (data/text_corpus.hpp, readTextCorpusFiles; examples/text.cpp, corpusFiles)
  batches   batch b of epoch e (both 0-based): B windows of T + 1 bytes of the training split whose
            starts are Rng(mixSeed(mixSeed(seed, e), b)).below(len(train) - T), one per window in order
            (train/text_windows.hpp, drawWindows); Rng is xoshiro256** seeded by splitmix64
            (core/rng.hpp), mixSeed is data/dataset.hpp's; T = the model's context
  loss      mean cross-entropy over the B*T positions (train/next_token_task.hpp)
  clipping  the global gradient norm in double; when clip / (norm + 1e-6) < 1 every gradient is
            multiplied by that coefficient rounded to float (train/grad_clip.hpp)
  schedule  lr of 0-based optimizer step s: warmup base * (s + 1) / W for s < W, then cosine
            min + (base - min) (1 + cos(pi (s - W) / (total - W))) / 2, total = epochs * steps,
            min = min_lr_factor * base (train/lr_schedule.hpp; constant and step kinds too)
  AdamW     p *= 1 - lr wd (decay parameters only); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
            p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps), in ddl's order of float32
            operations (train/adamw.hpp; --optimizer torch uses torch.optim.AdamW with two groups
            instead). Decay parameters are ddl's Param(decay = true): every weight but the RMSNorm
            gains (*norm.weight) and the biases (*.bias, the gate and value biases), which have none.
  eval      the held-out text (the first --eval-bytes of the validation split) in consecutive windows
            of T bytes, every byte after the first predicted once, batches of --batch windows, the
            shorter last window alone; loss summed in double (NextTokenTask::evaluate)

The step-0 weights. ddl-text initialises DeltaLM(cfg, seed) and saves nothing before training; a run of
the same model options and seed with `--lr 0 --epochs 1 --steps 1` takes one AdamW step at lr 0, which
changes no parameter (p *= 1 - 0 * wd = 1, p -= 0 * ...), so its checkpoint holds the step-0 weights.

Usage (Debian's python3-torch with /usr/bin/python3):
  M="--variant dv1 --width 64 --depth 2 --heads 2 --context 64 --batch 16 --seed 1 --threads 1"
  ddl-text $M --steps 50 --epochs 4 --eval-bytes 16384 --out RUN           # the run to reproduce
  ddl-text $M --steps 1 --epochs 1 --lr 0 --eval-bytes 16384 --out INIT      # its step-0 weights
  torch_train_lm.py --run RUN --init INIT/checkpoint.safetensors --eval-bytes 16384
Prints per epoch PyTorch's and ddl's (RUN/metrics.csv) training and validation loss and their
difference, then compares the parameters (and AdamW's moments) after the last step with RUN's
checkpoint: per tensor max |torch - ddl| relative to max |ddl| and to the largest change of that
tensor during training. The training options (epochs, batch, lr, betas, eps, weight decay, schedule,
warmup, clip, seed) and the data path come from RUN's checkpoint (train_options, data); the steps per
epoch from its step / epoch. Without --run they are the options below (ddl-text's defaults).
Exit 0 when the requested tolerances hold (--loss-tol on every epoch's validation difference,
--param-tol on the parameters' relative difference), 1 when one fails, 2 on bad input.
"""

import argparse
import csv
import importlib.util
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


def _load_ddl_torch():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddl_torch.py")
    spec = importlib.util.spec_from_file_location("ddl_torch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ddl_torch = _load_ddl_torch()
FormatError = ddl_torch.FormatError


# ---------------------------------------------------------------------------------------------
# ddl's random numbers (core/rng.hpp, data/dataset.hpp), in exact 64-bit arithmetic.

def _splitmix64(x):
    """One splitmix64 draw: (new state, output)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return x, z ^ (z >> 31)


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK64


class Rng:
    """ddl::Rng: xoshiro256** whose four words are four splitmix64 draws from the seed."""

    def __init__(self, seed):
        x = seed & MASK64
        self.s = []
        for _ in range(4):
            x, z = _splitmix64(x)
            self.s.append(z)

    def next(self):
        s = self.s
        result = (_rotl((s[1] * 5) & MASK64, 7) * 9) & MASK64
        t = (s[1] << 17) & MASK64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = _rotl(s[3], 45)
        return result

    def below(self, n):
        """Uniform in [0, n) without modulo bias (rejection above the last multiple of n)."""
        if n <= 0:
            raise ValueError(f"Rng.below: n must be positive, got {n}")
        limit = MASK64 - MASK64 % n
        r = self.next()
        while r >= limit:
            r = self.next()
        return r % n


def mix_seed(a, b):
    """ddl::detail::mixSeed."""
    z = (a ^ ((b * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & MASK64)) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


# ---------------------------------------------------------------------------------------------
# The corpus and its windows (data/text_corpus.hpp, examples/text.cpp).

def corpus_files(path):
    """ddl-text's corpusFiles: the file itself, or the folder's regular files (symlinks and *.dat
    excluded) sorted by name (byte order, as std::sort of std::string)."""
    if not os.path.isdir(path):
        return [path]
    files = []
    with os.scandir(path) as it:
        for e in it:
            if e.is_file() and not e.is_symlink() and os.path.splitext(e.name)[1] != ".dat":
                files.append(os.path.join(path, e.name))
    if not files:
        raise FormatError(f"{path}: the folder holds no text files")
    return sorted(files, key=os.fsencode)


def _llround(x):
    """std::llround for x >= 0: halves away from zero."""
    f = math.floor(x)
    return int(f) + (1 if x - f >= 0.5 else 0)


def read_corpus(path, val_fraction=0.05, test_fraction=0.05):
    """(train, validation, test) bytes of readTextCorpusFiles(corpusFiles(path))."""
    data = b"".join(open(p, "rb").read() for p in corpus_files(path))
    n = len(data)
    n_val, n_test = _llround(n * val_fraction), _llround(n * test_fraction)
    if n == 0 or n_val + n_test >= n:
        raise FormatError(f"{path}: {n} bytes leave none for training")
    n_train = n - n_val - n_test
    return data[:n_train], data[n_train:n_train + n_val], data[n_train + n_val:]


def window_starts(n_split, B, T, seed):
    """drawWindows' starts: Rng(seed).below(n_split - T), one per window in order."""
    rng = Rng(seed)
    return [rng.below(n_split - T) for _ in range(B)]


def draw_batch(train, B, T, seed, epoch, batch):
    """Batch `batch` of epoch `epoch` of TextWindows: ids (B, T) and next ids (B, T), int64."""
    starts = torch.tensor(window_starts(train.numel(), B, T, mix_seed(mix_seed(seed, epoch), batch)),
                          dtype=torch.int64)
    w = train[starts[:, None] + torch.arange(T + 1, dtype=torch.int64)[None, :]].to(torch.int64)
    return w[:, :T], w[:, 1:]


# ---------------------------------------------------------------------------------------------
# Schedule, clipping, AdamW (train/lr_schedule.hpp, train/grad_clip.hpp, train/adamw.hpp).

def lr_at(step, o, total):
    """LrSchedule::lrAt for the 0-based optimizer step about to be taken."""
    base, warm = o["lr"], int(o["warmup_steps"])
    if step < warm:
        return base * float(step + 1) / float(warm)
    kind = o["schedule"]
    if kind == "constant":
        return base
    if kind == "cosine":
        low = o["min_lr_factor"] * base
        if step >= total:
            return low
        progress = float(step - warm) / float(total - warm)
        return low + 0.5 * (base - low) * (1.0 + math.cos(3.14159265358979323846 * progress))
    if kind == "step":
        every = int(o["step_every"]) if int(o["step_every"]) > 0 else max(1, total // 3)
        return base * math.pow(o["step_gamma"], float(step // every))
    raise FormatError(f"unknown schedule {kind!r}")


def has_decay(name):
    """ddl's Param::decay: false for RMSNorm gains and biases (Linear, gate), true for everything else
    (weights, embedding, EC and TC kernels, compressor and read vectors)."""
    return not (name.endswith(".bias") or name.endswith("norm.weight"))


def clip_grad_norm(params, max_norm):
    """clipGradNorm: norm over every gradient entry in double; scale by max_norm / (norm + 1e-6) when < 1."""
    sum_sq = 0.0
    for p in params:
        sum_sq += float((p.grad.to(torch.float64) ** 2).sum())
    norm = math.sqrt(sum_sq)
    if not math.isfinite(norm):
        raise FloatingPointError(f"gradient norm {norm}")
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        c = torch.tensor(coef, dtype=torch.float32)
        for p in params:
            p.grad.mul_(c)
    return norm


class DdlAdamW:
    """ddl::AdamW<float>::step, operation by operation in float32 (scalars rounded as ddl rounds them)."""

    def __init__(self, named, o):
        self.named = named  # [(name, parameter)]
        self.o = o
        self.t = 0
        self.m = {n: torch.zeros_like(p) for n, p in named}
        self.v = {n: torch.zeros_like(p) for n, p in named}
        self.lr = o["lr"]

    def state(self, name):
        return self.m[name], self.v[name]

    @torch.no_grad()
    def step(self):
        o = self.o
        self.t += 1
        f32 = lambda x: torch.tensor(x, dtype=torch.float32)  # static_cast<float>
        bc1 = 1.0 - math.pow(o["beta1"], self.t)
        bc2 = 1.0 - math.pow(o["beta2"], self.t)
        step_size, sqrt_bc2 = f32(self.lr / bc1), f32(math.sqrt(bc2))
        decay_factor = f32(1.0 - self.lr * o["weight_decay"])
        b1, c1 = f32(o["beta1"]), f32(1.0 - o["beta1"])
        b2, c2 = f32(o["beta2"]), f32(1.0 - o["beta2"])
        eps = f32(o["adam_eps"])
        decay_on = o["weight_decay"] != 0.0
        for name, p in self.named:
            g, m, v = p.grad, self.m[name], self.v[name]
            if decay_on and has_decay(name):
                p.mul_(decay_factor)
            m.copy_(b1 * m + c1 * g)
            v.copy_(b2 * v + c2 * (g * g))
            p.sub_(step_size * m / (v.sqrt() / sqrt_bc2 + eps))


class TorchAdamW:
    """torch.optim.AdamW with ddl's decay rule as two parameter groups (to compare PyTorch's update
    formula with ddl's)."""

    def __init__(self, named, o):
        self.named = named
        decay = [p for n, p in named if has_decay(n)]
        plain = [p for n, p in named if not has_decay(n)]
        groups = [{"params": decay, "weight_decay": o["weight_decay"]}]
        if plain:
            groups.append({"params": plain, "weight_decay": 0.0})
        self.opt = torch.optim.AdamW(groups, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["adam_eps"],
                                     foreach=False)
        self.lr = o["lr"]

    def state(self, name):
        p = dict(self.named)[name]
        s = self.opt.state.get(p, {})
        return s.get("exp_avg"), s.get("exp_avg_sq")

    def step(self):
        for g in self.opt.param_groups:
            g["lr"] = self.lr
        self.opt.step()


# ---------------------------------------------------------------------------------------------
# Evaluation (NextTokenTask::evaluate).

@torch.no_grad()
def evaluate(model, text, T, batch):
    """Mean next-byte cross-entropy (nats) of the byte tensor text in consecutive windows of T."""
    predicted = text.numel() - 1
    full = predicted // T
    loss_sum = 0.0

    def run(first, windows, length):
        nonlocal loss_sum
        starts = torch.arange(first, first + windows, dtype=torch.int64) * T
        w = text[starts[:, None] + torch.arange(length + 1, dtype=torch.int64)[None, :]].to(torch.int64)
        logits = model(w[:, :length])
        loss = F.cross_entropy(logits, w[:, 1:].reshape(-1))  # float32 mean, as ddl's loss layer
        loss_sum += float(loss) * float(windows * length)

    for w0 in range(0, full, batch):
        run(w0, min(batch, full - w0), T)
    if predicted % T:
        run(full, 1, predicted % T)
    return loss_sum / predicted


# ---------------------------------------------------------------------------------------------

# ddl-text's defaults (examples/text.cpp, examples/example_run.hpp, train/trainer_options.hpp).
_DEFAULTS = {"epochs": 10, "batch": 32, "lr": 0.002, "beta1": 0.9, "beta2": 0.999, "adam_eps": 1e-8,
             "weight_decay": 0.1, "schedule": "cosine", "warmup_steps": None, "min_lr_factor": 0.0,
             "step_every": 0, "step_gamma": 0.1, "clip_norm": 1.0, "seed": 1}


def _read_metrics(path):
    if not os.path.exists(path):
        return {}
    with open(path, newline="") as f:
        return {int(r["epoch"]): r for r in csv.DictReader(f)}


def _float(row, key):
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError):
        return None


def options(args, run_meta):
    """The training options: --option if given, else the run's train_options, else ddl-text's default."""
    o = dict(_DEFAULTS)
    if run_meta is not None:
        saved = json.loads(run_meta.get("train_options", "{}"))
        o.update({k: saved[k] for k in o if k in saved})
        o["clip_norm"] = saved.get("clip_norm", 0.0)
    given = {"epochs": args.epochs, "batch": args.batch, "lr": args.lr, "weight_decay": args.weight_decay,
             "schedule": args.schedule, "warmup_steps": args.warmup, "clip_norm": args.clip, "seed": args.seed}
    o.update({k: v for k, v in given.items() if v is not None})
    return o


def compare_params(model, opt, ddl_tensors, init_state):
    """Per tensor: max |torch - ddl| / max |ddl| and / max |ddl - init| (the change of training), and the
    same for AdamW's moments when the checkpoint holds them. Returns (worst rel, worst of change, lines)."""
    worst_rel, worst_chg, lines = (0.0, ""), (0.0, ""), []
    moments = 0.0
    for name, p in model.named_parameters():
        ref = ddl_tensors[name].to(torch.float64).reshape(p.shape)
        got = p.detach().to(torch.float64)
        diff = (got - ref).abs().max().item()
        rel = diff / max(ref.abs().max().item(), 1e-30)
        change = (ref - init_state[name].to(torch.float64)).abs().max().item()
        chg = diff / max(change, 1e-30)
        worst_rel = max(worst_rel, (rel, name))
        worst_chg = max(worst_chg, (chg, name))
        lines.append(f"  {name:36s} {list(p.shape)!s:16s} max|diff| {diff:.3e}  rel {rel:.3e}  of change {chg:.3e}")
        for slot, mine in zip(("exp_avg", "exp_avg_sq"), opt.state(name)):
            key = f"optim.{name}.{slot}"
            if key in ddl_tensors and mine is not None:
                r = ddl_tensors[key].to(torch.float64).reshape(p.shape)
                moments = max(moments, (mine.to(torch.float64) - r).abs().max().item() / max(r.abs().max().item(), 1e-30))
    return worst_rel, worst_chg, moments, lines


def main(argv=None):
    ap = argparse.ArgumentParser(description="Reproduce ddl-text's DeltaLM training in PyTorch (float32) and "
                                             "compare the losses and parameters with ddl's.")
    ap.add_argument("--run", help="a ddl-text output folder (checkpoint.safetensors, metrics.csv) to reproduce")
    ap.add_argument("--init", required=True, help="ddl's step-0 checkpoint of the same model and seed "
                    "(ddl-text ... --lr 0 --epochs 1 --steps 1 --out INIT: INIT/checkpoint.safetensors)")
    ap.add_argument("--data", help="the corpus (default: the run's 'data' metadata, else the init's)")
    ap.add_argument("--eval-bytes", type=int, default=65536, help="validation bytes (as ddl-text; 0 = all)")
    ap.add_argument("--steps", type=int, help="steps per epoch (default: the run's step / epoch)")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--weight-decay", type=float)
    ap.add_argument("--schedule", choices=("cosine", "constant", "step"))
    ap.add_argument("--warmup", type=int, help="default: min(200, steps * epochs / 10), as ddl-text")
    ap.add_argument("--clip", type=float)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--optimizer", choices=("ddl", "torch"), default="ddl",
                    help="ddl: ddl's AdamW in its float32 operation order; torch: torch.optim.AdamW")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--loss-tol", type=float, help="fail when an epoch's |val torch - val ddl| exceeds this")
    ap.add_argument("--param-tol", type=float,
                    help="fail when a parameter's max |torch - ddl| / max |ddl| after training exceeds this")
    ap.add_argument("--save", help="write the PyTorch parameters after training (safetensors)")
    ap.add_argument("--quiet", action="store_true", help="no per-tensor table")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    try:
        init_tensors, init_meta = ddl_torch.read_safetensors(args.init)
        model, _ = ddl_torch.load_checkpoint(args.init, torch.float32)
        run_tensors, run_meta, metrics = None, None, {}
        if args.run:
            ck = os.path.join(args.run, "checkpoint.safetensors")
            run_tensors, run_meta = ddl_torch.read_safetensors(ck)
            if run_meta.get("model_config") != init_meta.get("model_config"):
                raise FormatError(f"{ck} and {args.init} hold different models:\n  run:  "
                                  f"{run_meta.get('model_config')}\n  init: {init_meta.get('model_config')}")
            metrics = _read_metrics(os.path.join(args.run, "metrics.csv"))
        init_opts = json.loads(init_meta.get("train_options", "{}"))
        if int(init_meta.get("step", "0")) != 0 and init_opts.get("lr", None) != 0:
            raise FormatError(f"{args.init}: step {init_meta.get('step')} at lr {init_opts.get('lr')}: not step-0 "
                              "weights (write them with --lr 0 --epochs 1 --steps 1)")
        o = options(args, run_meta)
        if "seed" in init_opts and init_opts["seed"] != o["seed"]:
            raise FormatError(f"{args.init} was initialised with seed {init_opts['seed']}, the run uses {o['seed']}")
        steps = args.steps
        if steps is None:
            if run_meta is None:
                steps = 100
            else:
                epochs_done, step_done = int(run_meta["epoch"]), int(run_meta["step"])
                if epochs_done < 1 or step_done % epochs_done:
                    raise FormatError(f"{args.run}: epoch {epochs_done}, step {step_done}: pass --steps")
                steps = step_done // epochs_done
        total = o["epochs"] * steps
        if o["warmup_steps"] is None:
            o["warmup_steps"] = min(200, total // 10)
        data = args.data or (run_meta or {}).get("data") or init_meta.get("data")
        if not data:
            raise FormatError("no --data and no 'data' metadata in the checkpoints")
        train_b, val_b, _ = read_corpus(data)
        if args.eval_bytes > 0:
            val_b = val_b[:args.eval_bytes]
    except (FormatError, OSError, ValueError, KeyError) as e:
        print(f"torch_train_lm.py: {e}", file=sys.stderr)
        return 2

    cfg = json.loads(init_meta["model_config"])
    T, B = int(cfg["context"]), int(o["batch"])
    train = torch.frombuffer(bytearray(train_b), dtype=torch.uint8)
    val = torch.frombuffer(bytearray(val_b), dtype=torch.uint8)
    named = list(model.named_parameters())
    init_state = {n: p.detach().clone() for n, p in named}
    opt = DdlAdamW(named, o) if args.optimizer == "ddl" else TorchAdamW(named, o)
    print(f"torch_train_lm: {cfg['variant']} d {cfg['d']} depth {cfg['depth']} heads {cfg['heads']} T {T} "
          f"dv {cfg['dv']}, B {B}, {steps} steps x {o['epochs']} epochs, lr {o['lr']:g} ({o['schedule']}, warmup "
          f"{o['warmup_steps']}, min factor {o['min_lr_factor']:g}), wd {o['weight_decay']:g}, clip {o['clip_norm']:g}, "
          f"seed {o['seed']}, optimizer {args.optimizer}; data {data}: train {len(train_b)} bytes, "
          f"validation {len(val_b)} bytes")
    print(f"{'epoch':>5} {'step':>6} {'lr':>9} | {'torch train':>11} {'ddl train':>10} | {'torch val':>10} "
          f"{'ddl val':>10} {'val diff':>10} | {'s':>6}")
    model.train()
    step = 0
    worst_val = 0.0
    failed = False
    for e in range(o["epochs"]):
        t0 = time.time()
        loss_sum = 0.0
        for b in range(steps):
            ids, nxt = draw_batch(train, B, T, o["seed"], e, b)
            opt.lr = lr_at(step, o, total)
            for _, p in named:
                p.grad = None
            logits = model(ids)
            loss = F.cross_entropy(logits, nxt.reshape(-1))
            loss_sum += float(loss)
            loss.backward()
            for _, p in named:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            if not math.isfinite(float(loss)):
                print(f"non-finite loss at step {step + 1}", file=sys.stderr)
                return 1
            if o["clip_norm"] > 0:
                clip_grad_norm([p for _, p in named], o["clip_norm"])
            opt.step()
            step += 1
        model.eval()
        val_loss = evaluate(model, val, T, B) if val.numel() >= 2 else float("nan")
        model.train()
        row = metrics.get(e + 1, {})
        ddl_train, ddl_val = _float(row, "train_loss"), _float(row, "val_loss")
        diff = val_loss - ddl_val if ddl_val is not None else None
        if diff is not None:
            worst_val = max(worst_val, abs(diff))
        fmt = lambda x, w: f"{x:{w}.4f}" if x is not None else " " * (w - 1) + "-"
        print(f"{e + 1:5d} {step:6d} {opt.lr:9.3e} | {loss_sum / steps:11.4f} {fmt(ddl_train, 10)} | "
              f"{val_loss:10.4f} {fmt(ddl_val, 10)} {(f'{diff:+10.5f}' if diff is not None else '         -')} | "
              f"{time.time() - t0:6.1f}", flush=True)
    if metrics:
        print(f"largest |val torch - val ddl| over the epochs: {worst_val:.5f} nats")
        if args.loss_tol is not None and worst_val > args.loss_tol:
            print(f"FAIL: above --loss-tol {args.loss_tol:g}")
            failed = True
    if run_tensors is not None:
        done = int(run_meta["step"])
        if done != step:
            print(f"the run's checkpoint is at step {done}, this training at {step}: parameters not compared")
        else:
            (rel, rname), (chg, cname), moments, lines = compare_params(model, opt, run_tensors, init_state)
            if not args.quiet:
                print("parameters after the last step, PyTorch vs ddl's checkpoint:")
                print("\n".join(lines))
            print(f"parameters after step {step}: worst max|torch - ddl| / max|ddl| {rel:.3e} ({rname}); "
                  f"relative to the change in training {chg:.3e} ({cname}); AdamW moments worst relative {moments:.3e}")
            if args.param_tol is not None and rel > args.param_tol:
                print(f"FAIL: above --param-tol {args.param_tol:g}")
                failed = True
    if args.save:
        ddl_torch.write_safetensors(args.save, {n: p.detach() for n, p in named})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
