#!/usr/bin/python3
"""ddl_torch.py: a PyTorch reference implementation of ddl's DeltaNet, ConvDeltaNet and DeltaLM (the causal
language model) that loads ddl checkpoints.

The network is rebuilt from the checkpoint's "model_config" metadata (the JSON text of
DeltaNetConfig::toKeyValues(), or ConvDeltaNetConfig::toKeyValues() with "model": "conv_delta_net"), the tensors are loaded by their dotted ddl names (the names of
visitParams; the state_dict of DeltaNet below has exactly those names and shapes), and the forward
pass mirrors include/ddl/nn/*.hpp and include/ddl/ops/*.hpp one module per ddl class.

Layout. ddl keeps tokens as columns: a state of dv value channels is (d, dv*N) with channel j in
columns j*N .. j*N+N-1. Here tokens are rows, as usual in PyTorch: x is (N, d) and the expanded
state X is (N, dv, d), so X[:, j, :] is ddl's channel j transposed. Parameters have PyTorch's shapes,
which ddl checkpoints (format version 2) store: a Linear is torch.nn.Linear (weight [out, in], bias
[out]), an RMSNorm gain is [d], a gate bias [1]. So `DeltaNet(cfg).load_state_dict(tensors)` takes a
ddl checkpoint as it is, and ddl loads this module's state_dict written as safetensors (`export`).
Version-1 ddl checkpoints (vectors stored as [n, 1]) are reshaped on load. Image nets take one CHW
image per row, x: (B, channels*height*width) (ddl: one per column), and keep pixels as token rows in
ddl's column order (b*H + y)*W + x between convolutions (torch.nn.Conv2d, weight [out, in, kh, kw]).

DeltaLM ("model": "delta_lm", DeltaLMConfig::toKeyValues) takes token ids (B, T) and gives logits
(B*T, vocab), row b*T + t (ddl's column b*T + t); its state X is (B*T, dv, d). EC (learned expansion)
and the TC compressor are torch.nn.Conv1d layers over tokens, made causal by padding K - 1 and dropping
the outputs past T, on channel o = i*dv + j for feature i and value channel j (weights [d*dv, 1, K],
w[..., K-1] on the current token). State_dict names are ddl's visitParams names (lm_param_names).

Usage (Debian's python3-torch with /usr/bin/python3; the safetensors package is not needed):
  ddl_torch.py check --checkpoint CK.safetensors --batch B.safetensors [--tol 1e-5] [--dtype auto]
      B holds "x" (input_dim, N) and ddl's "logits" (classes, N), in ddl's column layout.
      Prints the max abs error of the PyTorch logits; exit 0 if <= tol, 1 if above, 2 on bad input.
      If B also holds "dlogits" (classes, N), ddl's gradients "grad.<param name>" of the loss
      sum(logits * dlogits) (and "dx" (input_dim, N) if present) are checked against autograd
      (--grad-tol, relative to max(1, max |gradient|)).
      --checkpoint/--batch may be repeated in pairs (one torch start-up for many checks).
      For a DeltaLM checkpoint B holds "ids" (B, T) instead of "x": token ids as exact whole numbers
      in any float or int dtype (ddl writes its scalar type), and "logits" (vocab, B*T); no "dx".
  ddl_torch.py export --config CFG.json --out STATE.safetensors --batch B.safetensors [--seed S] [--n N]
      Builds the DeltaNet or ConvDeltaNet of CFG (its toKeyValues as JSON) in float64 with PyTorch's own
      initialisation (gains and gate biases perturbed), writes its state_dict as a plain safetensors
      file (metadata {"format": "pt"}, as PyTorch tools write) and a batch of N random inputs "x"
      (input_dim, N) with the logits "logits" (classes, N) in ddl's column layout. For a DeltaLM config
      (every parameter perturbed by 0.3 N(0, 1), so gains, biases and EC are off their starts) the batch
      holds N sequences of --length random "ids" (B, T) as float64 and "logits" (vocab, B*T).
  ddl_torch.py selftest
      Checks the PyTorch DeltaLM against hand-written formulas: names and shapes of every variant,
      dv 1 + additive = a pre-norm GPT written out per position, EC at its init = repetition, EC's and
      TC's channel order, TC with identity kernels = the free CC compressor, the structured CC = the
      authors' ResidualShortConvCompressor (their unfold construction for K = dv), causality, and the
      authors' attention options (head_dim, rope_ratio, qk_norm_eps, use_output_gate, using_groupnorm,
      output_norm_eps, use_k_shift, use_v_shift, q/k/v_activation) against their computation per position, and the
      authors' Delta options (the linear value on x_in, EC's own kernel, the refused causal flag).
  ddl_torch.py logits --checkpoint CK --idx DIR [--part t10k] [--limit N] [--scale 255 --mean 0 --std 1]
      Runs the net on the IDX images of DIR (found as ddl::findIdxFiles does, raw or .gz), prints the
      accuracy and the first logits. Inputs are pixels / scale (ddl's IDX reader: / 255), then
      (x - mean) / std. --idx may also name an image file, with --labels optional.
"""

import argparse
import gzip
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class FormatError(Exception):
    """A file that is not what the script expects (message names the file and the problem)."""


# ---------------------------------------------------------------------------------------------
# safetensors, parsed by hand: u64 little-endian header length, JSON header, raw row-major data.

_DTYPES = {"F32": (torch.float32, 4), "F64": (torch.float64, 8), "I64": (torch.int64, 8),
           "I32": (torch.int32, 4), "U8": (torch.uint8, 1), "I8": (torch.int8, 1)}


def read_safetensors(path):
    """Returns ({name: tensor}, {metadata key: string}); tensors have the file's shape and dtype."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise FormatError(f"{path}: {len(data)} bytes, too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise FormatError(f"{path}: header length {n} exceeds the file size {len(data)}")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{path}: header is not JSON: {e}") from e
    if not isinstance(header, dict):
        raise FormatError(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", {}) or {}
    body = data[8 + n:]
    tensors = {}
    for name, info in header.items():
        dtype_name = info.get("dtype")
        if dtype_name not in _DTYPES:
            raise FormatError(f"{path}: tensor '{name}' has unsupported dtype {dtype_name!r}")
        dtype, size = _DTYPES[dtype_name]
        shape = [int(s) for s in info["shape"]]
        begin, end = (int(o) for o in info["data_offsets"])
        count = math.prod(shape)
        if end - begin != count * size or end > len(body) or begin < 0:
            raise FormatError(f"{path}: tensor '{name}' {shape} {dtype_name} has data offsets "
                              f"[{begin}, {end}] that do not fit its size or the file")
        if sys.byteorder != "little" and size > 1:
            raise FormatError(f"{path}: this script reads little-endian data on little-endian hosts only")
        raw = bytearray(body[begin:end])  # writable copy: frombuffer warns on read-only buffers
        t = torch.frombuffer(raw, dtype=dtype) if count > 0 else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(shape).clone()
    return tensors, meta


_DTYPE_NAMES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.int32: "I32",
                torch.uint8: "U8", torch.int8: "I8"}


def write_safetensors(path, tensors, meta=None):
    """Writes {name: tensor} (any rank, row-major) with optional string metadata, sorted by name."""
    header, chunks, offset = {}, [], 0
    if meta:
        header["__metadata__"] = {str(k): str(v) for k, v in meta.items()}
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = t.numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# Building blocks. Each class mirrors the ddl class of the same name; parameter names and shapes
# are ddl's.

def activation(name):
    """ddl::Activation by its toString name (nn/layers/activation.hpp); GELU is the exact erf form."""
    name = name.lower()
    if name == "relu":
        return F.relu
    if name == "gelu":
        return lambda x: F.gelu(x)
    if name == "gelu_tanh":
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "silu":
        return F.silu
    if name == "tanh":
        return torch.tanh
    if name == "identity":
        return lambda x: x
    raise ValueError(f"unknown activation '{name}', expected one of relu, gelu, gelu_tanh, silu, tanh, identity")


class Weight(nn.Module):
    """A module holding one parameter called "weight" (for names like compress.conv.weight)."""

    def __init__(self, *shape):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(*shape))


def Linear(n_in, n_out, bias=True):
    """ddl::Linear is torch.nn.Linear: y = W x + b, W: [out, in], b: [out]. x: (N, in) -> (N, out)."""
    return nn.Linear(n_in, n_out, bias=bias)


class RmsNorm(nn.Module):
    """ddl::RmsNorm: y = g * x / sqrt(mean(x^2) + eps) over the last axis, g: [d]. x: (..., d) -> (..., d)."""

    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        r = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * r * self.weight


class Expansion(nn.Module):
    """ddl::Expansion: X_j = x (repeat) or e_j * x (learned, e: (d, dv)). x: (N, d) -> X: (N, dv, d)."""

    def __init__(self, d, dv, learned):
        super().__init__()
        self.dv = dv
        self.weight = nn.Parameter(torch.ones(d, dv)) if learned else None

    def forward(self, x):
        if self.weight is None:
            return x.unsqueeze(1).expand(-1, self.dv, -1).clone()
        return x.unsqueeze(1) * self.weight.t().unsqueeze(0)


class Compressor(nn.Module):
    """ddl::Compressor (CC): x_in[i] = sum_j W[i, j] X_j[i]. X: (N, dv, d) -> x_in: (N, d).

    free:       W (d, dv) is the parameter "weight".
    structured: the authors' ResidualShortConvCompressor: per feature i a kernel a[i, :] slides along
                the dv axis with p = (K - 1) // 2 zeros on the left, then a read vector r over dv:
                W[i, j] = sum_j' r[j'] a[i, j - j' + p] (terms with the index outside [0, K) dropped),
                a = "conv.weight" [d, K] (their "weight"), r = "read.weight" [dv] (their "read").
    """

    def __init__(self, d, dv, kind, kernel):
        super().__init__()
        self.d, self.dv, self.kind, self.kernel = d, dv, kind, kernel
        if kind == "free":
            self.weight = nn.Parameter(torch.full((d, dv), 1.0 / dv))
        elif kind == "structured":
            if kernel < 1:
                raise ValueError(f"compressor_kernel must be >= 1, got {kernel}")
            self.conv = Weight(d, kernel)
            self.read = Weight(dv)
        else:
            raise ValueError(f"unknown compressor '{kind}', expected free or structured")

    def channel_weights(self):
        """W: (d, dv)."""
        if self.kind == "free":
            return self.weight
        a, r = self.conv.weight, self.read.weight
        left = (self.kernel - 1) // 2
        cols = [a.new_zeros(self.d) for _ in range(self.dv)]
        for jp in range(self.dv):
            for t in range(self.kernel):
                j = jp + t - left
                if 0 <= j < self.dv:
                    cols[j] = cols[j] + r[jp] * a[:, t]
        return torch.stack(cols, dim=1)

    def forward(self, X):
        return torch.einsum("nji,ij->ni", X, self.channel_weights())


def normalize_directions(kt, kind, eps):
    """ops/direction.hpp. kt: (N, d) -> k: (N, d).
    sqrt_eps: k = kt / sqrt(|kt|^2 + eps^2);  add_eps: k = kt / (|kt| + eps)."""
    sq = kt.pow(2).sum(dim=1, keepdim=True)
    if kind == "sqrt_eps":
        return kt / torch.sqrt(sq + eps * eps)
    if kind == "add_eps":
        return kt / (torch.sqrt(sq) + eps)
    raise ValueError(f"unknown direction_norm '{kind}', expected sqrt_eps or add_eps")


class LinearGate(nn.Module):
    """ops/gate.hpp linear head: z = w c + b, w: [1, d], b: [1] (the state_dict of nn.Linear(d, 1))."""

    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, d))
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, c):
        return c @ self.weight[0] + self.bias[0]


class TwoLayerTanhGate(nn.Module):
    """ops/gate.hpp two-layer head: z = w2 tanh(W1 c) + b2; W1: [h, d] (fc1, no bias), w2: [1, h] and
    b2: [1] (fc2), the state_dict of nn.Linear(d, h, bias=False) followed by nn.Linear(h, 1)."""

    def __init__(self, d, hidden):
        super().__init__()
        self.fc1 = Linear(d, hidden, bias=False)
        self.fc2 = Linear(hidden, 1)

    def forward(self, c):
        return self.fc2(torch.tanh(self.fc1(c)))[:, 0]


class DeltaResidual(nn.Module):
    """ddl::DeltaResidual, the rewrite step (docs/spec.md §2). Per token, with the state X (dv x d here):
        k~ = h (kmap) | MLP_k(mean_j X_j) (aux_mlp);   k = normalize(k~)
        beta = beta_max sigmoid(z) with z from the gate head on c (beta_max in (0, 2]; 2 when the config has no key)
        v = s sigmoid(W_v x_in + b_v) | W_v x_in + b_v | W_v c + b_v | W_v h + b_v | constant    (dv entries)
            (sigmoid_scaled | linear_on_input, the authors' ddl_v_sigmoid = False | linear_on_c | from_branch | constant)
        X'_j = X_j + beta k (v_j - k.X_j) (delta) | X_j + beta v_j k (write_only) | X_j + h (additive)
    X: (N, dv, d), x_in, c, h: (N, d) -> X': (N, dv, d).
    """

    def __init__(self, d, dv, cfg):
        super().__init__()
        self.dv = dv
        self.residual = cfg["residual"]
        self.direction_source = cfg["direction"]
        self.direction_norm = cfg["direction_norm"]
        self.eps_k = float(cfg["eps_k"])
        self.gate_kind = cfg["gate"]
        self.value_kind = cfg["value"]
        self.value_scale = float(cfg["value_scale"])
        self.value_constant = float(cfg["value_constant"])
        self.beta_max = float(cfg.get("beta_max", "2"))  # written only when not 2 (checkpoints before it: 2)
        if not 0 < self.beta_max <= 2:
            raise ValueError(f"beta_max must lie in (0, 2], got {self.beta_max}")
        if self.residual not in ("delta", "write_only", "additive"):
            raise ValueError(f"unknown residual '{self.residual}', expected delta, write_only or additive")
        if self.residual == "additive":
            return  # no direction, gate or value parameters exist
        if self.direction_source == "aux_mlp":
            aux_hidden = int(cfg["aux_hidden"]) or max(d // 4, 1)  # 0: d / 4, as ddl's auxHiddenOf
            self.direction = nn.Module()
            self.direction.fc1 = Linear(d, aux_hidden)
            self.direction.fc2 = Linear(aux_hidden, d)
            self.aux_act = activation(cfg["aux_activation"])
        elif self.direction_source != "kmap":
            raise ValueError(f"unknown direction '{self.direction_source}', expected kmap or aux_mlp")
        if self.gate_kind == "linear":
            self.gate = LinearGate(d)
        elif self.gate_kind == "two_layer_tanh":
            self.gate = TwoLayerTanhGate(d, int(cfg["gate_hidden"]))
        else:
            raise ValueError(f"unknown gate '{self.gate_kind}', expected linear or two_layer_tanh")
        if self.value_kind in ("sigmoid_scaled", "linear_on_input", "linear_on_c", "from_branch"):
            self.value = Linear(d, dv)
        elif self.value_kind != "constant":
            raise ValueError(f"unknown value '{self.value_kind}'")

    def forward(self, X, x_in, c, h):
        if self.residual == "additive":
            return X + h.unsqueeze(1)
        if self.direction_source == "aux_mlp":
            pool = X.mean(dim=1)
            kt = self.direction.fc2(self.aux_act(self.direction.fc1(pool)))
        else:
            kt = h
        k = normalize_directions(kt, self.direction_norm, self.eps_k)  # (N, d)
        beta = self.beta_max * torch.sigmoid(self.gate(c))              # (N,)
        if self.value_kind == "sigmoid_scaled":
            v = self.value_scale * torch.sigmoid(self.value(x_in))
        elif self.value_kind == "linear_on_input":
            v = self.value(x_in)
        elif self.value_kind == "linear_on_c":
            v = self.value(c)
        elif self.value_kind == "from_branch":
            v = self.value(h)
        else:
            v = torch.full((X.shape[0], self.dv), self.value_constant, dtype=X.dtype)
        if self.residual == "delta":
            coef = beta[:, None] * (v - torch.einsum("njd,nd->nj", X, k))  # beta (v_j - k.X_j): (N, dv)
        else:
            coef = beta[:, None] * v
        return X + coef.unsqueeze(2) * k.unsqueeze(1)


class MlpBranch(nn.Module):
    """ddl::MlpBranch: h = fc2(act(fc1(c))). c: (N, d) -> h: (N, d); the layout is not needed."""

    def __init__(self, d, hidden, act):
        super().__init__()
        self.fc1 = Linear(d, hidden)
        self.fc2 = Linear(hidden, d)
        self.act = activation(act)

    def forward(self, c, layout):
        return self.fc2(self.act(self.fc1(c)))


def rows_to_images(x, layout):
    """ddl's pixels as tokens, row (b*H + y)*W + x of (N, C) -> NCHW (B, C, H, W)."""
    B, H, W = layout
    return x.reshape(B, H, W, -1).permute(0, 3, 1, 2)


def images_to_rows(t):
    """NCHW (B, C, H, W) -> tokens (B*H*W, C), row (b*H + y)*W + x (ddl's column order)."""
    return t.permute(0, 2, 3, 1).reshape(-1, t.shape[1])


def Conv2d(n_in, n_out, kernel, stride):
    """ddl::Conv2d with padding kernel // 2 is torch.nn.Conv2d: weight [out, in, kh, kw], bias [out]."""
    return nn.Conv2d(n_in, n_out, kernel, stride=stride, padding=kernel // 2)


class ConvBranch(nn.Module):
    """ddl::ConvBranch: h = conv2(act(conv1(c))), 3x3 convolutions with same padding. c: (N, d) pixels
    as tokens of layout (B, H, W) -> h: (N, d)."""

    def __init__(self, d, hidden, act):
        super().__init__()
        self.conv1 = Conv2d(d, hidden, 3, 1)
        self.conv2 = Conv2d(hidden, d, 3, 1)
        self.act = activation(act)

    def forward(self, c, layout):
        return images_to_rows(self.conv2(self.act(self.conv1(rows_to_images(c, layout)))))


class DeltaBlock(nn.Module):
    """ddl::DeltaBlock<S, Branch>: x_in = X (dv = 1) | CC(X); c = RMSNorm(x_in); h = F(c);
    X' = DeltaResidual(X, x_in, c, h). X: (N, dv, d) -> (N, dv, d). The branch F is "mlp"
    (MlpBranch, parameters mlp.*) or "conv" (ConvBranch, parameters conv.*)."""

    def __init__(self, d, dv, cfg, branch="mlp", hidden=None):
        super().__init__()
        self.dv = dv
        hidden = int(cfg["hidden"]) if hidden is None else hidden
        if dv > 1:
            self.compress = Compressor(d, dv, cfg["compressor"], int(cfg["compressor_kernel"]))
        self.norm = RmsNorm(d, float(cfg["norm_eps"]))
        if branch == "mlp":
            self.mlp = MlpBranch(d, hidden, cfg["activation"])
        elif branch == "conv":
            self.conv = ConvBranch(d, hidden, cfg["activation"])
        else:
            raise ValueError(f"unknown branch '{branch}', expected mlp or conv")
        self.branch_name = branch  # a second attribute holding the module would duplicate its state_dict keys
        self.delta = DeltaResidual(d, dv, cfg)

    def forward(self, X, layout=None):
        x_in = X[:, 0, :] if self.dv == 1 else self.compress(X)
        c = self.norm(x_in)
        h = getattr(self, self.branch_name)(c, layout)
        return self.delta(X, x_in, c, h)


class DeltaNet(nn.Module):
    """ddl::DeltaNet: input Linear -> expand to dv channels -> depth x DeltaBlock -> readout CC
    (dv > 1) -> RMSNorm -> Linear head. x: (N, input_dim) -> logits: (N, classes)."""

    def __init__(self, cfg):
        super().__init__()
        d, dv = int(cfg["d"]), int(cfg["dv"])
        self.dv = dv
        self.input = Linear(int(cfg["input_dim"]), d)
        if dv > 1:
            self.expand = Expansion(d, dv, int(float(cfg["learned_expansion"])) != 0)
        self.blocks = nn.ModuleList(DeltaBlock(d, dv, cfg) for _ in range(int(cfg["depth"])))
        if dv > 1:
            self.readout = Compressor(d, dv, cfg["compressor"], int(cfg["compressor_kernel"]))
        self.norm = RmsNorm(d, float(cfg["final_norm_eps"]))
        self.head = Linear(d, int(cfg["classes"]))

    def forward(self, x):
        x = self.input(x)
        X = x.unsqueeze(1) if self.dv == 1 else self.expand(x)
        for block in self.blocks:
            X = block(X)
        last = X[:, 0, :] if self.dv == 1 else self.readout(X)
        return self.head(self.norm(last))


def _int_list(text):
    return [int(v) for v in str(text).split(",")]


class StageTransition(nn.Module):
    """ddl::StageTransition (docs/spec.md §4): on the compressed state, x_in = X (dv = 1) | CC(X);
    y = conv 3x3 stride 2 (cin -> cout) of RMSNorm(x_in); X' = y (dv = 1) | expand(y).
    X: (N, dv, cin) of layout (B, H, W) -> (N', dv, cout) of layout (B, ceil(H/2), ceil(W/2))."""

    def __init__(self, cin, cout, dv, cfg):
        super().__init__()
        self.dv = dv
        if dv > 1:
            self.compress = Compressor(cin, dv, cfg["compressor"], int(cfg["compressor_kernel"]))
        self.norm = RmsNorm(cin, float(cfg["norm_eps"]))
        self.conv = Conv2d(cin, cout, 3, 2)
        if dv > 1:
            self.expand = Expansion(cout, dv, int(cfg["learned_expansion"]) != 0)

    def forward(self, X, layout):
        x_in = X[:, 0, :] if self.dv == 1 else self.compress(X)
        y = self.conv(rows_to_images(self.norm(x_in), layout))
        out_layout = (y.shape[0], y.shape[2], y.shape[3])
        y = images_to_rows(y)
        return (y.unsqueeze(1) if self.dv == 1 else self.expand(y)), out_layout


class ConvDeltaNet(nn.Module):
    """ddl::ConvDeltaNet (docs/spec.md §4): stem conv -> expand to dv -> per stage [transition] + DeltaBlocks with
    the conv branch -> readout CC (dv > 1) -> RMSNorm per pixel -> global average pool per image ->
    Linear head. x: (B, channels*height*width), one CHW image per row -> logits: (B, classes).
    Blocks are numbered over all stages (blocks.<i>), transitions.<s-1> precede stage s."""

    def __init__(self, cfg):
        super().__init__()
        self.channels, self.height, self.width = int(cfg["channels"]), int(cfg["height"]), int(cfg["width"])
        widths, depths = _int_list(cfg["widths"]), _int_list(cfg["depths"])
        if len(widths) != len(depths) or not widths:
            raise ValueError(f"widths {widths} and depths {depths} must have one entry per stage")
        dv, ratio = int(cfg["dv"]), int(cfg["branch_ratio"])
        self.dv = dv
        self.stem = Conv2d(self.channels, widths[0], int(cfg["stem_kernel"]), int(cfg["stem_stride"]))
        if dv > 1:
            self.expand = Expansion(widths[0], dv, int(cfg["learned_expansion"]) != 0)
        self.transitions = nn.ModuleList(StageTransition(widths[s - 1], widths[s], dv, cfg)
                                         for s in range(1, len(widths)))
        self.blocks = nn.ModuleList(DeltaBlock(w, dv, cfg, branch="conv", hidden=ratio * w)
                                    for w, n in zip(widths, depths) for _ in range(n))
        self.depths = depths
        if dv > 1:
            self.readout = Compressor(widths[-1], dv, cfg["compressor"], int(cfg["compressor_kernel"]))
        self.norm = RmsNorm(widths[-1], float(cfg["final_norm_eps"]))
        self.head = Linear(widths[-1], int(cfg["classes"]))

    def forward(self, x):
        t = self.stem(x.reshape(x.shape[0], self.channels, self.height, self.width))
        layout = (t.shape[0], t.shape[2], t.shape[3])
        x0 = images_to_rows(t)
        X = x0.unsqueeze(1) if self.dv == 1 else self.expand(x0)
        b = 0
        for s, n in enumerate(self.depths):
            if s > 0:
                X, layout = self.transitions[s - 1](X, layout)
            for _ in range(n):
                X = self.blocks[b](X, layout)
                b += 1
        last = X[:, 0, :] if self.dv == 1 else self.readout(X)
        z = self.norm(last)                                    # (B*H*W, C)
        pooled = z.reshape(layout[0], layout[1] * layout[2], -1).mean(dim=1)
        return self.head(pooled)


# ---------------------------------------------------------------------------------------------
# The causal language model (docs/spec.md §8, include/ddl/nn/models/delta_lm.hpp). Tokens are rows in ddl's
# column order: row b*T + t is position t of sequence b; the state X is (B*T, dv, d).

def rope_tables(T, dh, base, dtype):
    """cos and sin of a = t * base^(-2i/dh), (T, dh/2), computed in float64 and rounded once (as ddl)."""
    t = torch.arange(T, dtype=torch.float64)[:, None]
    i = torch.arange(dh // 2, dtype=torch.float64)[None, :]
    a = t * torch.pow(torch.tensor(float(base), dtype=torch.float64), -2.0 * i / dh)
    return torch.cos(a).to(dtype), torch.sin(a).to(dtype)


def apply_rope(x, cos, sin):
    """Half-split RoPE on x (B, T, H, dh): pairs (i, i + dh/2), x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def qkv_activation(name):
    """ddl::QkvActivation by its name (nn/layers/qkv_activation.hpp), the authors' activations.py:
    identity (or none), silu, relu, elu+1 (or elu) = elu(x) + 1."""
    if name in ("identity", "none", ""):
        return lambda x: x
    if name == "silu":
        return F.silu
    if name == "relu":
        return F.relu
    if name in ("elu+1", "elu"):
        return lambda x: F.elu(x) + 1.0
    raise ValueError(f"unsupported activation '{name}', expected one of identity, silu, relu, elu+1")


def attention_options(cfg):
    """The authors' attention options of a DeltaLM's key-values (nn/blocks/attention_options.hpp), each
    with its default when the key is missing (an older checkpoint); qk_norm_eps falls back to norm_eps."""
    d, heads = int(cfg["d"]), int(cfg["heads"])
    head_dim = int(cfg.get("head_dim", 0))
    return dict(
        head_dim=head_dim if head_dim > 0 else (d // heads if heads > 0 and d % heads == 0 else 0),
        rope_ratio=float(cfg.get("rope_ratio", 1.0)),
        qk_norm_eps=float(cfg.get("qk_norm_eps", cfg["norm_eps"])),
        output_gate=_flag(cfg.get("use_output_gate", "0")),
        group_norm=_flag(cfg.get("using_groupnorm", "0")),
        output_norm_eps=float(cfg.get("output_norm_eps", 1e-5)),
        k_shift=_flag(cfg.get("use_k_shift", "0")),
        v_shift=_flag(cfg.get("use_v_shift", "0")),
        q_activation=cfg.get("q_activation", "identity"),
        k_activation=cfg.get("k_activation", "identity"),
        v_activation=cfg.get("v_activation", "identity"))


def token_shift(z, alpha):
    """The authors' ShiftLinear mix: z (B, T, H, dh), alpha (B, T, H) -> alpha z[t-1] + (1 - alpha) z[t],
    z[-1] = 0."""
    prev = torch.zeros_like(z)
    prev[:, 1:] = z[:, :-1]
    a = alpha.unsqueeze(-1)
    return a * prev + (1.0 - a) * z


class CausalSelfAttention(nn.Module):
    """ddl::CausalSelfAttention: q, k, v = W c (no biases) to H heads of d_h (head_dim, default d / H);
    k_shift / v_shift: the token shift with alpha = sigmoid(W_s c); q/k/v activations; RoPE on the first
    r = int(d_h rope_ratio) (rounded down to even) features of each head; qk_norm: RMSNorm over each
    head's d_h features after RoPE (gains [d_h] shared by the heads); causal softmax of q.k / sqrt(d_h)
    per sequence; using_groupnorm / use_output_gate: RMSNorm per head on o (subln | o_norm), then
    o * silu(W_g c) with the gate; out = W_o concat_h(o). c: (B*T, d) -> (B*T, d)."""

    def __init__(self, d, heads, rope_base, qk_norm, eps, opts=None):
        super().__init__()
        opts = dict(opts or {})
        dh = int(opts.get("head_dim", 0)) or (d // heads if heads >= 1 and d % heads == 0 else 0)
        if heads < 1 or dh < 1:
            raise ValueError(f"heads {heads} must divide d = {d} (or head_dim be given)")
        ratio = float(opts.get("rope_ratio", 1.0))
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"rope_ratio must be in [0, 1], got {ratio}")
        rd = int(dh * ratio)
        rd -= rd % 2
        self.heads, self.dh, self.rd, self.rope_base = heads, dh, rd, rope_base
        D = heads * dh
        self.q = Linear(d, D, bias=False)
        self.k = Linear(d, D, bias=False)
        self.v = Linear(d, D, bias=False)
        self.o = Linear(D, d, bias=False)
        self.qk_norm = qk_norm
        qk_eps = float(opts.get("qk_norm_eps", eps))
        if qk_norm:
            self.q_norm = RmsNorm(self.dh, qk_eps)
            self.k_norm = RmsNorm(self.dh, qk_eps)
        self.acts = [qkv_activation(opts.get(f"{x}_activation", "identity")) for x in "qkv"]
        self.k_shifted, self.v_shifted = bool(opts.get("k_shift")), bool(opts.get("v_shift"))
        if self.k_shifted:
            self.k_shift = Linear(d, heads, bias=False)
        if self.v_shifted:
            self.v_shift = Linear(d, heads, bias=False)
        self.gated, self.group_norm = bool(opts.get("output_gate")), bool(opts.get("group_norm"))
        if self.gated:
            self.g = Linear(d, D, bias=False)
        out_eps = float(opts.get("output_norm_eps", 1e-5))
        if self.group_norm:
            self.subln = RmsNorm(dh, out_eps)
        elif self.gated:
            self.o_norm = RmsNorm(dh, out_eps)

    def forward(self, c, B, T):
        H, dh, rd = self.heads, self.dh, self.rd
        q, k, v = (m(c).reshape(B, T, H, dh) for m in (self.q, self.k, self.v))
        if self.k_shifted:
            k = token_shift(k, torch.sigmoid(self.k_shift(c)).reshape(B, T, H))
        if self.v_shifted:
            v = token_shift(v, torch.sigmoid(self.v_shift(c)).reshape(B, T, H))
        q, k, v = self.acts[0](q), self.acts[1](k), self.acts[2](v)
        if rd > 0:
            cos, sin = rope_tables(T, rd, self.rope_base, c.dtype)
            q = torch.cat((apply_rope(q[..., :rd], cos, sin), q[..., rd:]), dim=-1)
            k = torch.cat((apply_rope(k[..., :rd], cos, sin), k[..., rd:]), dim=-1)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        scores = torch.einsum("bthe,bshe->bhts", q, k) / math.sqrt(dh)
        future = torch.ones(T, T, dtype=torch.bool).triu(1)   # s > t
        p = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        o = torch.einsum("bhts,bshe->bthe", p, v)
        if self.group_norm:
            o = self.subln(o)
        elif self.gated:
            o = self.o_norm(o)
        if self.gated:
            o = o * F.silu(self.g(c).reshape(B, T, H, dh))
        return self.o(o.reshape(B * T, H * dh))


class SwiGlu(nn.Module):
    """ddl::SwiGluBranch: h = W2 (silu(W1 c) * (W3 c)), no biases; fc1, fc3 [hidden, d], fc2 [d, hidden]."""

    def __init__(self, d, hidden):
        super().__init__()
        self.fc1 = Linear(d, hidden, bias=False)
        self.fc2 = Linear(hidden, d, bias=False)
        self.fc3 = Linear(d, hidden, bias=False)

    def forward(self, c):
        return self.fc2(F.silu(self.fc1(c)) * self.fc3(c))


def tokens_to_channels(X, B, T):
    """(B*T, dv, d) -> (B, d*dv, T) with channel o = i*dv + j holding X_j[i] (the Conv1d layout)."""
    dv, d = X.shape[1], X.shape[2]
    return X.reshape(B, T, dv, d).permute(0, 3, 2, 1).reshape(B, d * dv, T)


def channels_to_tokens(Y, dv):
    """(B, d*dv, T), channel o = i*dv + j -> (B*T, dv, d)."""
    B, C, T = Y.shape
    return Y.reshape(B, C // dv, dv, T).permute(0, 3, 2, 1).reshape(B * T, dv, C // dv)


def causal_depthwise(conv, x):
    """A Conv1d with padding K-1 on both ends, the outputs past T dropped: y[t] = sum_k w[k] x[t-K+1+k],
    so w[..., K-1] multiplies the current token and no output sees a later one."""
    return conv(x)[..., :x.shape[-1]]


class TokenCompressor(nn.Module):
    """The TC state compressor: Y = causal depthwise Conv1d over tokens on every channel o = i*dv + j
    (conv.weight [d*dv, 1, K], no bias), then x_in[i] = sum_j r[j] Y_j[i] (read.weight [dv]).
    X: (B*T, dv, d) -> x_in: (B*T, d)."""

    def __init__(self, d, dv, kernel):
        super().__init__()
        if kernel < 1:
            raise ValueError(f"conv_kernel must be >= 1, got {kernel}")
        self.dv = dv
        self.conv = nn.Conv1d(d * dv, d * dv, kernel, groups=d * dv, padding=kernel - 1, bias=False)
        self.read = Weight(dv)
        with torch.no_grad():
            self.read.weight.fill_(1.0 / dv)

    def forward(self, X, B, T):
        Y = channels_to_tokens(causal_depthwise(self.conv, tokens_to_channels(X, B, T)), self.dv)
        return torch.einsum("nji,j->ni", Y, self.read.weight)


class DeltaTransformerBlock(nn.Module):
    """ddl::DeltaTransformerBlock: for s in (attn, mlp), with one compressor per block:
    x_in = X (dv = 1) | compress(X);  c = RMSNorm_s(x_in);  h = F_s(c);  X <- rewrite_s(X, x_in, c, h).
    X: (B*T, dv, d) -> (B*T, dv, d)."""

    def __init__(self, cfg):
        super().__init__()
        d, dv = int(cfg["d"]), int(cfg["dv"])
        self.dv = dv
        self.tc = cfg["state_compressor"] == "tc"
        eps = float(cfg["norm_eps"])
        if dv > 1:
            self.compress = (TokenCompressor(d, dv, int(cfg["conv_kernel"])) if self.tc else
                             Compressor(d, dv, cfg["compressor"], int(cfg["compressor_kernel"])))
        self.attn_norm = RmsNorm(d, eps)
        self.attn = CausalSelfAttention(d, int(cfg["heads"]), float(cfg["rope_base"]), _flag(cfg["qk_norm"]), eps,
                                        attention_options(cfg))
        self.attn_delta = DeltaResidual(d, dv, cfg)
        self.mlp_norm = RmsNorm(d, eps)
        self.mlp = SwiGlu(d, int(cfg["hidden"]))
        self.mlp_delta = DeltaResidual(d, dv, cfg)

    def compressed(self, X, B, T):
        if self.dv == 1:
            return X[:, 0, :]
        return self.compress(X, B, T) if self.tc else self.compress(X)

    def forward(self, X, B, T):
        x_in = self.compressed(X, B, T)
        c = self.attn_norm(x_in)
        X = self.attn_delta(X, x_in, c, self.attn(c, B, T))
        x_in = self.compressed(X, B, T)
        c = self.mlp_norm(x_in)
        return self.mlp_delta(X, x_in, c, self.mlp(c))


def _flag(text):
    return int(float(text)) != 0


def ec_kernel(cfg):
    """EC's K: the authors' input_embed_shortconv_kernel_size; checkpoints before that key used conv_kernel."""
    return int(cfg.get("input_embed_shortconv_kernel_size", cfg["conv_kernel"]))


def check_authors_options(cfg):
    """The authors' Delta options of DeltaLMConfig (all optional keys). The init keys (embedding_init_std,
    hidden_init_std_factor, init) shape only a new model's start, which a loaded checkpoint replaces; the
    structured compressor's read start (compressor_read_init) likewise. Refuses what ddl refuses."""
    if _flag(cfg.get("ddl_state_dv_shortconv_causal", "0")):
        raise ValueError("ddl_state_dv_shortconv_causal = true is not supported (the authors' reference forward "
                         "never reads it; ddl refuses it too)")
    if cfg.get("init", "ddl") not in ("ddl", "authors"):
        raise ValueError(f"unknown init '{cfg['init']}', expected one of ddl, authors")
    if ec_kernel(cfg) < 1:
        raise ValueError(f"input_embed_shortconv_kernel_size must be >= 1, got {ec_kernel(cfg)}")


class DeltaLM(nn.Module):
    """ddl::DeltaLM: ids (B, T) -> x = E[ids] -> X0 = x (dv = 1) | repeat (dv > 1) | EC(x) (learned
    expansion: causal depthwise Conv1d(d, d*dv, K, groups=d), output channel i*dv + j is X_j[i],
    expand.weight [d*dv, 1, K]) -> blocks -> z = X (dv = 1) | readout(X) (the blocks' compressor kind)
    -> RMSNorm -> logits = E y (tied_head) | head.weight y.  Returns (B*T, vocab), row b*T + t."""

    def __init__(self, cfg):
        super().__init__()
        V, d, dv = int(cfg["vocab"]), int(cfg["d"]), int(cfg["dv"])
        self.dv, self.context = dv, int(cfg["context"])
        self.tc = cfg["state_compressor"] == "tc"
        if cfg["state_compressor"] not in ("cc", "tc"):
            raise ValueError(f"unknown state_compressor '{cfg['state_compressor']}', expected cc or tc")
        if cfg["direction"] != "kmap":
            raise ValueError(f"a DeltaLM takes its directions from the sublayers (kmap), got '{cfg['direction']}'")
        self.embed = nn.Embedding(V, d)
        check_authors_options(cfg)
        self.ec = dv > 1 and _flag(cfg["learned_expansion"])
        if self.ec:
            K = ec_kernel(cfg)
            self.expand = nn.Conv1d(d, d * dv, K, groups=d, padding=K - 1, bias=False)
            with torch.no_grad():  # starts as the copy of the current token, as ddl's EC
                self.expand.weight.zero_()
                self.expand.weight[:, 0, K - 1] = 1.0
        self.blocks = nn.ModuleList(DeltaTransformerBlock(cfg) for _ in range(int(cfg["depth"])))
        if dv > 1:
            self.readout = (TokenCompressor(d, dv, int(cfg["conv_kernel"])) if self.tc else
                            Compressor(d, dv, cfg["compressor"], int(cfg["compressor_kernel"])))
        self.norm = RmsNorm(d, float(cfg["final_norm_eps"]))
        self.tied = _flag(cfg["tied_head"])
        if not self.tied:
            self.head = Linear(d, V, bias=False)

    def forward(self, ids):
        B, T = ids.shape
        if T > self.context:
            raise ValueError(f"sequence length {T} exceeds the context {self.context}")
        x = self.embed(ids.reshape(-1))                        # (B*T, d)
        if self.dv == 1:
            X = x.unsqueeze(1)
        elif self.ec:
            xc = x.reshape(B, T, -1).transpose(1, 2)           # (B, d, T)
            X = channels_to_tokens(causal_depthwise(self.expand, xc), self.dv)
        else:
            X = x.unsqueeze(1).expand(-1, self.dv, -1)
        for block in self.blocks:
            X = block(X, B, T)
        if self.dv == 1:
            z = X[:, 0, :]
        else:
            z = self.readout(X, B, T) if self.tc else self.readout(X)
        y = self.norm(z)
        return y @ self.embed.weight.t() if self.tied else self.head(y)


# ---------------------------------------------------------------------------------------------
# Loading.

_RESIDUAL_KEYS = ("final_norm_eps", "preset", "activation", "norm_eps", "compressor", "compressor_kernel",
                  "residual", "direction", "direction_norm", "eps_k", "gate", "gate_hidden", "beta0", "value",
                  "value_scale", "value_constant", "aux_hidden", "aux_activation", "dv", "learned_expansion")
_CONFIG_KEYS = {  # model_config "model" -> the keys its toKeyValues writes
    "delta_net": ("input_dim", "classes", "d", "depth", "hidden") + _RESIDUAL_KEYS,
    "conv_delta_net": ("model", "channels", "height", "width", "classes", "widths", "depths", "branch_ratio",
                       "stem_kernel", "stem_stride") + _RESIDUAL_KEYS,
    "delta_lm": ("model", "vocab", "d", "depth", "heads", "context", "hidden", "variant", "state_compressor",
                 "conv_kernel", "tied_head", "rope_base", "qk_norm") + _RESIDUAL_KEYS,
}


def build_model(cfg, where):
    """The network of a model_config (DeltaNetConfig, ConvDeltaNetConfig or DeltaLMConfig::toKeyValues)
    and its input size per sample (for DeltaLM: the vocabulary). where names the source in errors."""
    kind = cfg.get("model", "delta_net")  # DeltaNetConfig writes no "model" key
    if kind not in _CONFIG_KEYS:
        raise FormatError(f"{where}: model {kind!r}, expected one of {sorted(_CONFIG_KEYS)}")
    missing = [k for k in _CONFIG_KEYS[kind] if k not in cfg]
    if missing:
        raise FormatError(f"{where}: model_config of a {kind} lacks the keys {missing}")
    if kind == "delta_lm":
        return DeltaLM(cfg), int(cfg["vocab"])
    if kind == "conv_delta_net":
        return ConvDeltaNet(cfg), int(cfg["channels"]) * int(cfg["height"]) * int(cfg["width"])
    return DeltaNet(cfg), int(cfg["input_dim"])


def load_checkpoint(path, dtype=None):
    """Builds the DeltaNet of a ddl checkpoint and loads its parameters (every tensor must match a
    parameter by name and shape, and vice versa; "optim." tensors are ignored). dtype None keeps
    the checkpoint's dtype. Returns (model, metadata)."""
    tensors, meta = read_safetensors(path)
    if meta.get("format") != "ddl-checkpoint":
        raise FormatError(f"{path}: metadata 'format' is {meta.get('format')!r}, expected 'ddl-checkpoint'")
    if "model_config" not in meta:
        raise FormatError(f"{path}: metadata has no 'model_config' (save with CheckpointMeta::modelConfig)")
    cfg = json.loads(meta["model_config"])
    params = {k: v for k, v in tensors.items() if not k.startswith("optim.")}
    version = meta.get("format_version", "3")
    if version not in ("1", "2", "3"):
        raise FormatError(f"{path}: checkpoint format_version {version!r}, this script reads 1 to 3")
    if version in ("1", "2"):  # the two-layer gate's output bias was "gate.bias", now nn.Linear's "gate.fc2.bias"
        params = {(k[:-len("gate.bias")] + "gate.fc2.bias"
                   if k.endswith(".gate.bias") and k[:-len("bias")] + "fc2.weight" in params else k): v
                  for k, v in params.items()}
    dtypes = {t.dtype for t in params.values()}
    if len(dtypes) > 1:
        raise FormatError(f"{path}: parameters mix dtypes {sorted(str(t) for t in dtypes)}")
    if dtype is None:
        dtype = dtypes.pop() if dtypes else torch.float32
    model = build_model(cfg, path)[0].to(dtype)
    expected = model.state_dict()
    if version == "1":  # every tensor was stored as [rows, cols]; vectors as [n, 1]
        params = {k: v.reshape(expected[k].shape) if k in expected and v.numel() == expected[k].numel() else v
                  for k, v in params.items()}
    extra = sorted(set(params) - set(expected))
    absent = sorted(set(expected) - set(params))
    if extra or absent:
        raise FormatError(f"{path}: tensors do not match the network of its model_config: "
                          f"missing {absent}, unexpected {extra}")
    for name, t in params.items():
        if list(t.shape) != list(expected[name].shape):
            raise FormatError(f"{path}: tensor '{name}' has shape {list(t.shape)}, "
                              f"the network expects {list(expected[name].shape)}")
    model.load_state_dict({k: v.to(dtype) for k, v in params.items()}, strict=True)
    model.eval()
    return model, meta


def _max_abs(a, b):
    return (a - b).abs().max().item() if a.numel() else 0.0


def check(checkpoint, batch, tol, grad_tol, dtype):
    """Compares the PyTorch logits with ddl's on the batch (max abs error <= tol). When the batch also
    holds "dlogits" (classes, N), ddl's parameter gradients "grad.<name>" for the loss
    sum(logits * dlogits) and optionally "dx" (input_dim, N), autograd's gradients are compared too,
    by max abs error relative to max(1, max |ddl gradient|) <= grad_tol. Returns True when all pass."""
    model, meta = load_checkpoint(checkpoint, dtype)
    tensors, _ = read_safetensors(batch)
    lm = isinstance(model, DeltaLM)
    expected = ("ids: (B, T), logits: (vocab, B*T)" if lm else "x: (input_dim, N), logits: (classes, N)")
    for key in ("ids", "logits") if lm else ("x", "logits"):
        if key not in tensors:
            raise FormatError(f"{batch}: no tensor '{key}' (expected {expected})")
    compute = next(model.parameters()).dtype
    with_grads = "dlogits" in tensors
    if lm:
        x = read_ids(tensors["ids"], model.embed.num_embeddings, batch)
    else:
        x = tensors["x"].t().to(compute).contiguous()  # ddl columns -> rows
        x.requires_grad_(with_grads and "dx" in tensors)
    want = tensors["logits"].t().to(torch.float64)
    with torch.set_grad_enabled(with_grads):
        logits = model(x)
    got = logits.detach().to(torch.float64)
    if got.shape != want.shape:
        raise FormatError(f"{batch}: logits have shape {list(want.shape)} (as N x classes), "
                          f"the network gives {list(got.shape)}")
    err = _max_abs(got, want)
    ok = err <= tol
    cfg = json.loads(meta["model_config"])
    report = f"max abs error {err:.3e} (tol {tol:g})"
    if with_grads:
        dlogits = tensors["dlogits"].t().to(logits.dtype)
        if dlogits.shape != logits.shape:
            raise FormatError(f"{batch}: dlogits has shape {list(tensors['dlogits'].shape)}, "
                              f"expected {list(logits.t().shape)}")
        (logits * dlogits).sum().backward()
        pairs = [(f"grad.{name}", p.grad if p.grad is not None else torch.zeros_like(p))
                 for name, p in model.named_parameters()]
        if x.requires_grad:
            pairs.append(("dx", x.grad.t()))
        worst, worst_name = 0.0, ""
        for key, g in pairs:
            if key not in tensors:
                raise FormatError(f"{batch}: no tensor '{key}' (dlogits is present, so every gradient must be)")
            ref = tensors[key].to(torch.float64)
            if ref.numel() == g.numel() and ref.dim() == 2 and g.dim() != 2:
                ref = ref.reshape(g.shape)  # ddl's batch file holds gradients as matrices: [n, 1] for [n]
            if list(ref.shape) != list(g.shape):
                raise FormatError(f"{batch}: '{key}' has shape {list(ref.shape)}, expected {list(g.shape)}")
            rel = _max_abs(g.to(torch.float64), ref) / max(1.0, ref.abs().max().item() if ref.numel() else 0.0)
            if rel >= worst:
                worst, worst_name = rel, key
        ok = ok and worst <= grad_tol
        report += f"; gradients: {len(pairs)} tensors, worst {worst_name} {worst:.3e} (tol {grad_tol:g})"
    variant = f" variant={cfg['variant']}" if lm else ""
    print(f"{os.path.basename(checkpoint)}:{variant} preset={cfg['preset']} residual={cfg['residual']} dv={cfg['dv']} "
          f"dtype={compute}: {report} {'ok' if ok else 'FAIL'}")
    return ok


def accuracy(checkpoint, batch):
    """Float accuracy of ddl against PyTorch: the checkpoint's float32 weights are loaded twice, in
    float32 and in float64 (exactly the same values), and autograd's float64 gradients of
    sum(logits * dlogits) serve as the truth for both float32 computations, ddl's (the batch's
    grad.<name>) and PyTorch's own. Error of a tensor: max abs error over max(1, max |truth|), as in
    check. Returns the worst tensor's error of each side: (ddl, pytorch)."""
    batch_tensors, _ = read_safetensors(batch)
    for key in ("logits", "dlogits"):
        if key not in batch_tensors:
            raise FormatError(f"{batch}: no tensor '{key}' (accuracy needs ddl's logits, dlogits and gradients)")
    if batch_tensors["logits"].dtype != torch.float32:
        raise FormatError(f"{batch}: logits are {batch_tensors['logits'].dtype}; accuracy compares float32 runs")
    runs = {}
    for dtype in (torch.float32, torch.float64):
        model, meta = load_checkpoint(checkpoint, dtype)
        lm = isinstance(model, DeltaLM)
        if lm:
            x = read_ids(batch_tensors["ids"], model.embed.num_embeddings, batch)
        else:
            x = batch_tensors["x"].t().to(dtype).contiguous()
        logits = model(x)
        (logits * batch_tensors["dlogits"].t().to(dtype)).sum().backward()
        runs[dtype] = (logits.detach().to(torch.float64),
                       {f"grad.{n}": (p.grad if p.grad is not None else torch.zeros_like(p)).to(torch.float64)
                        for n, p in model.named_parameters()})

    def rel(g, truth):
        return _max_abs(g, truth) / max(1.0, truth.abs().max().item() if truth.numel() else 0.0)

    truth_logits, truth = runs[torch.float64]
    worst = {"ddl": (0.0, ""), "pytorch": (0.0, "")}
    for key, t in truth.items():
        if key not in batch_tensors:
            raise FormatError(f"{batch}: no tensor '{key}'")
        mine = batch_tensors[key].to(torch.float64).reshape(t.shape)
        for side, g in (("ddl", mine), ("pytorch", runs[torch.float32][1][key])):
            e = rel(g, t)
            if e >= worst[side][0]:
                worst[side] = (e, key)
    logit_err = {"ddl": _max_abs(batch_tensors["logits"].t().to(torch.float64), truth_logits),
                 "pytorch": _max_abs(runs[torch.float32][0], truth_logits)}
    print(f"{os.path.basename(checkpoint)}: float32 against float64 truth, {len(truth)} gradients: "
          f"ddl worst {worst['ddl'][1]} {worst['ddl'][0]:.3e}, pytorch worst {worst['pytorch'][1]} "
          f"{worst['pytorch'][0]:.3e}; logits ddl {logit_err['ddl']:.3e}, pytorch {logit_err['pytorch']:.3e}")
    return worst["ddl"][0], worst["pytorch"][0]


def read_ids(t, vocab, where):
    """Token ids of a batch file: (B, T) of any dtype (ddl writes its scalar type, F32 or F64), exact
    integers in [0, vocab). Returns an int64 tensor (B, T)."""
    if t.dim() != 2 or t.numel() == 0:
        raise FormatError(f"{where}: ids has shape {list(t.shape)}, expected (B, T) with B, T >= 1")
    v = t.to(torch.float64)
    if not torch.isfinite(v).all() or (v != v.round()).any():
        raise FormatError(f"{where}: ids are not whole numbers")
    if v.min().item() < 0 or v.max().item() >= vocab:
        raise FormatError(f"{where}: ids range over [{v.min().item():g}, {v.max().item():g}], "
                          f"the vocabulary is [0, {vocab})")
    return v.to(torch.int64)


# ---------------------------------------------------------------------------------------------
# IDX files (MNIST layout).

def export_command(args):
    """Writes a PyTorch-initialised DeltaNet's state_dict and a batch with its logits (see usage)."""
    with open(args.config, encoding="utf-8") as f:
        cfg = json.load(f)
    torch.manual_seed(args.seed)
    model, input_dim = build_model(cfg, args.config)
    model = model.to(torch.float64)
    with torch.no_grad():  # PyTorch's init leaves gains at 1 and gate biases at 0: move them
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    if isinstance(model, DeltaLM):  # n sequences of --length random ids, stored as float64 (B, T)
        T = min(args.length, model.context)
        x = torch.randint(0, input_dim, (args.n, T))
        inputs = {"ids": x.to(torch.float64)}
    else:
        x = torch.randn(args.n, input_dim, dtype=torch.float64)
        inputs = {"x": x.t()}
    with torch.no_grad():
        logits = model(x)
    write_safetensors(args.out, model.state_dict(), {"format": "pt"})
    write_safetensors(args.batch, dict(inputs, logits=logits.t()))
    print(f"{args.out}: {len(model.state_dict())} tensors; {args.batch}: "
          + ", ".join(f"{k} {list(v.shape)}" for k, v in inputs.items()) + f", logits {list(logits.t().shape)}")
    return 0


# ---------------------------------------------------------------------------------------------
# Self-test of the language model against hand-written formulas (no ddl needed).

def lm_config(variant="dv1", residual="delta", preset="code", **over):
    """The model_config DeltaLMConfig::toKeyValues writes for a small model of `variant`
    (dv1 | cc | cc-ec | tc | tc-ec), `residual` and `preset` (code | paper); `over` replaces keys."""
    dv = 1 if variant == "dv1" else 4
    cfg = {"model": "delta_lm", "vocab": 11, "d": 8, "depth": 2, "heads": 2, "context": 9, "hidden": 6,
           "variant": variant, "state_compressor": "tc" if variant.startswith("tc") else "cc", "conv_kernel": 3,
           "tied_head": 1, "rope_base": 10000, "qk_norm": 1, "dv": dv, "learned_expansion": int(variant.endswith("-ec")),
           "final_norm_eps": 1e-5, "preset": preset, "activation": "silu", "norm_eps": 1e-5,
           "compressor": "structured" if preset == "code" else "free", "compressor_kernel": 3, "residual": residual,
           "direction": "kmap", "direction_norm": "sqrt_eps", "eps_k": 1e-5, "gate": "linear", "gate_hidden": 128,
           "beta0": 1, "value": "sigmoid_scaled" if preset == "code" else "linear_on_c", "value_scale": 4,
           "value_constant": 2, "aux_hidden": 0, "aux_activation": "gelu",
           "input_embed_shortconv_kernel_size": 3, "ddl_state_dv_shortconv_causal": 0, "embedding_init_std": 0.02,
           "hidden_init_std_factor": 0.5, "init": "ddl"}
    cfg.update(over)
    return {k: str(v) for k, v in cfg.items()}


def lm_param_names(cfg):
    """The parameter names of docs/spec.md §8 in ddl's visit order (lm_math: embed, expand, blocks, readout,
    norm, head)."""
    dv, tc = int(cfg["dv"]), cfg["state_compressor"] == "tc"
    comp = ["conv.weight", "read.weight"] if tc or cfg["compressor"] == "structured" else ["weight"]
    delta = [] if cfg["residual"] == "additive" else ["gate.weight", "gate.bias", "value.weight", "value.bias"]
    if cfg["residual"] != "additive" and cfg["value"] == "constant":
        delta = ["gate.weight", "gate.bias"]
    names = ["embed.weight"] + (["expand.weight"] if dv > 1 and _flag(cfg["learned_expansion"]) else [])
    for l in range(int(cfg["depth"])):
        b = f"blocks.{l}."
        names += [b + "compress." + c for c in comp] if dv > 1 else []
        names += [b + "attn_norm.weight"] + [b + f"attn.{m}.weight" for m in "qkvo"]
        names += [b + "attn.q_norm.weight", b + "attn.k_norm.weight"] if _flag(cfg["qk_norm"]) else []
        opt = attention_options(cfg)
        names += [b + "attn.k_shift.weight"] if opt["k_shift"] else []
        names += [b + "attn.v_shift.weight"] if opt["v_shift"] else []
        names += [b + "attn.g.weight"] if opt["output_gate"] else []
        names += ([b + "attn.subln.weight"] if opt["group_norm"] else
                  [b + "attn.o_norm.weight"] if opt["output_gate"] else [])
        names += [b + "attn_delta." + n for n in delta] + [b + "mlp_norm.weight"]
        names += [b + f"mlp.fc{i}.weight" for i in (1, 2, 3)] + [b + "mlp_delta." + n for n in delta]
    names += ["readout." + c for c in comp] if dv > 1 else []
    return names + ["norm.weight"] + ([] if _flag(cfg["tied_head"]) else ["head.weight"])


def _randomize(model, scale=0.5):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn_like(p))


def _hand_attention(attn, c, B, T, cfg):
    """The authors' CausalSelfAttention (model/DDL-gpt-mha-rope-CC-EC.py) written out per position:
    c (B*T, d) -> (B*T, d) with attn's weights and cfg's options."""
    o = attention_options(cfg)
    H, dh = attn.heads, attn.dh
    act = {"identity": lambda x: x, "silu": lambda x: x * torch.sigmoid(x), "relu": lambda x: torch.clamp(x, min=0),
           "elu+1": lambda x: torch.where(x > 0, x + 1, torch.exp(x))}
    r = int(dh * o["rope_ratio"])
    r -= r % 2

    def rms(x, g, eps):
        return x / torch.sqrt((x * x).mean() + eps) * g

    def rope(x, t):
        y = x.clone()
        for i in range(r // 2):
            a = t * float(cfg["rope_base"]) ** (-2.0 * i / r)
            y[i] = x[i] * math.cos(a) - x[i + r // 2] * math.sin(a)
            y[i + r // 2] = x[i + r // 2] * math.cos(a) + x[i] * math.sin(a)
        return y

    out = torch.zeros(B * T, attn.o.weight.shape[0], dtype=c.dtype)
    for b in range(B):
        q, k, v = {}, {}, {}
        for t in range(T):
            n = b * T + t
            for h in range(H):
                sl = slice(h * dh, (h + 1) * dh)
                kk, vv = attn.k.weight[sl] @ c[n], attn.v.weight[sl] @ c[n]
                if o["k_shift"]:
                    al = torch.sigmoid(attn.k_shift.weight[h] @ c[n])
                    kk = (1 - al) * kk + (al * (attn.k.weight[sl] @ c[n - 1]) if t > 0 else 0)
                if o["v_shift"]:
                    al = torch.sigmoid(attn.v_shift.weight[h] @ c[n])
                    vv = (1 - al) * vv + (al * (attn.v.weight[sl] @ c[n - 1]) if t > 0 else 0)
                qq = rope(act[o["q_activation"]](attn.q.weight[sl] @ c[n]), t)
                kk = rope(act[o["k_activation"]](kk), t)
                if attn.qk_norm:
                    qq, kk = rms(qq, attn.q_norm.weight, o["qk_norm_eps"]), rms(kk, attn.k_norm.weight, o["qk_norm_eps"])
                q[t, h], k[t, h], v[t, h] = qq, kk, act[o["v_activation"]](vv)
        for t in range(T):
            heads = []
            for h in range(H):
                w = torch.softmax(torch.stack([q[t, h] @ k[s, h] for s in range(t + 1)]) / math.sqrt(dh), 0)
                y = sum(w[s] * v[s, h] for s in range(t + 1))
                if o["group_norm"]:
                    y = rms(y, attn.subln.weight, o["output_norm_eps"])
                elif o["output_gate"]:
                    y = rms(y, attn.o_norm.weight, o["output_norm_eps"])
                if o["output_gate"]:
                    u = attn.g.weight[h * dh:(h + 1) * dh] @ c[b * T + t]
                    y = y * u * torch.sigmoid(u)
                heads.append(y)
            out[b * T + t] = attn.o.weight @ torch.cat(heads)
    return out


def _hand_gpt(model, ids):
    """A pre-norm GPT written out per position with explicit rotation matrices: the DeltaLM of dv 1 and
    additive residuals must equal it. Returns logits (B*T, V)."""
    B, T = ids.shape
    E = model.embed.weight
    out = []
    for b in range(B):
        xs = [E[ids[b, t]] for t in range(T)]
        for blk in model.blocks:
            a = blk.attn
            H, dh = a.heads, a.dh

            def rms(v, g, eps):
                return g * v / torch.sqrt((v * v).mean() + eps)

            cs = [rms(x, blk.attn_norm.weight, blk.attn_norm.eps) for x in xs]
            qs, ks, vs = [], [], []
            for t, c in enumerate(cs):
                q, k, v = a.q.weight @ c, a.k.weight @ c, a.v.weight @ c
                R = torch.zeros(dh, dh, dtype=c.dtype)  # rotation of the pairs (i, i + dh/2) by t*base^(-2i/dh)
                for i in range(dh // 2):
                    ang = t * a.rope_base ** (-2.0 * i / dh)
                    R[i, i], R[i, i + dh // 2] = math.cos(ang), -math.sin(ang)
                    R[i + dh // 2, i], R[i + dh // 2, i + dh // 2] = math.sin(ang), math.cos(ang)
                qh = [R @ q[h * dh:(h + 1) * dh] for h in range(H)]
                kh = [R @ k[h * dh:(h + 1) * dh] for h in range(H)]
                if a.qk_norm:
                    qh = [rms(z, a.q_norm.weight, a.q_norm.eps) for z in qh]
                    kh = [rms(z, a.k_norm.weight, a.k_norm.eps) for z in kh]
                qs.append(qh), ks.append(kh), vs.append(v)
            new = []
            for t in range(T):
                o = []
                for h in range(H):
                    s = torch.stack([qs[t][h] @ ks[u][h] / math.sqrt(dh) for u in range(t + 1)])
                    p = torch.exp(s - s.max())
                    p = p / p.sum()
                    o.append(sum(p[u] * vs[u][h * dh:(h + 1) * dh] for u in range(t + 1)))
                new.append(xs[t] + a.o.weight @ torch.cat(o))
            xs = new
            m = blk.mlp
            xs = [x + m.fc2.weight @ (F.silu(m.fc1.weight @ c) * (m.fc3.weight @ c))
                  for x, c in ((x, rms(x, blk.mlp_norm.weight, blk.mlp_norm.eps)) for x in xs)]
        for x in xs:
            y = rms(x, model.norm.weight, model.norm.eps)
            out.append(E @ y if model.tied else model.head.weight @ y)
    return torch.stack(out)


def selftest_command(args):
    """Checks the PyTorch DeltaLM against hand-written formulas; prints one line per check."""
    torch.manual_seed(args.seed)
    dt = torch.float64
    failures = []

    def report(name, err, tol):
        ok = err <= tol
        print(f"{name}: {err:.3e} (tol {tol:g}) {'ok' if ok else 'FAIL'}")
        if not ok:
            failures.append(name)

    B, T = 3, 7
    ids = torch.randint(0, 11, (B, T))
    # 1. names and shapes of every variant, residual, preset, head
    for variant in ("dv1", "cc", "cc-ec", "tc", "tc-ec"):
        for residual in ("delta", "write_only", "additive"):
            for preset in ("code", "paper"):
                for tied in (1, 0):
                    cfg = lm_config(variant, residual, preset, tied_head=tied)
                    model = DeltaLM(cfg)
                    names = list(model.state_dict())
                    if names != lm_param_names(cfg):
                        failures.append(f"names {variant}/{residual}/{preset}/tied{tied}")
                        print(f"names {variant}/{residual}/{preset}: {names} != {lm_param_names(cfg)} FAIL")
                    shapes = model.state_dict()
                    d, dv, K = 8, int(cfg["dv"]), 3
                    want = {"embed.weight": [11, d], "blocks.0.attn.q_norm.weight": [d // 2],
                            "blocks.1.mlp.fc2.weight": [d, 6], "blocks.0.mlp.fc3.weight": [6, d]}
                    if dv > 1:
                        want["readout.read.weight" if variant.startswith("tc") or preset == "code" else
                             "readout.weight"] = [dv] if variant.startswith("tc") or preset == "code" else [d, dv]
                    if variant.endswith("-ec"):
                        want["expand.weight"] = [d * dv, 1, K]
                    if variant.startswith("tc"):
                        want["blocks.1.compress.conv.weight"] = [d * dv, 1, K]
                    elif dv > 1 and preset == "code":
                        want["blocks.1.compress.conv.weight"] = [d, int(cfg["compressor_kernel"])]
                    if residual != "additive":
                        want.update({"blocks.0.attn_delta.gate.weight": [1, d], "blocks.0.attn_delta.gate.bias": [1],
                                     "blocks.0.mlp_delta.value.weight": [dv, d], "blocks.0.mlp_delta.value.bias": [dv]})
                    if not tied:
                        want["head.weight"] = [11, d]
                    bad = {k: list(shapes[k].shape) for k, v in want.items() if list(shapes[k].shape) != v}
                    if bad:
                        failures.append(f"shapes {variant}/{residual}/{preset}")
                        print(f"shapes {variant}/{residual}/{preset}: {bad} FAIL")
    print(f"names and shapes: 60 configurations checked")

    # 2. dv 1 + additive is the pre-norm GPT written out by hand (tied and untied, with and without QK-norm)
    for tied, qk in ((1, 1), (0, 0)):
        model = DeltaLM(lm_config("dv1", "additive", tied_head=tied, qk_norm=qk, rope_base=50)).to(dt)
        _randomize(model)
        with torch.no_grad():
            report(f"dv1 additive (tied {tied}, qk_norm {qk}) = hand-written pre-norm GPT",
                   _max_abs(model(ids), _hand_gpt(model, ids)), 1e-12)

    # 3. EC at its init (copy of the current token) equals repetition; a changed ids sequence changes nothing
    for tc in (False, True):
        v = "tc" if tc else "cc"
        rep = DeltaLM(lm_config(v)).to(dt)
        _randomize(rep)
        ec = DeltaLM(lm_config(v + "-ec")).to(dt)
        sd = dict(rep.state_dict())
        sd["expand.weight"] = ec.state_dict()["expand.weight"]  # the init
        ec.load_state_dict(sd)
        with torch.no_grad():
            report(f"{v}-ec at its init = {v} (repeat)", _max_abs(ec(ids), rep(ids)), 0.0)

    # 4. EC's channel order: weight (i*dv + j, K-1) = s_j and (i*dv + j, K-2) = u_i gives X_j[i] = s_j x_t[i]
    #    + u_i x_{t-1}[i]; checked on the expansion alone
    d, dv, K = 8, 4, 3
    ec = DeltaLM(lm_config("cc-ec", depth=0)).to(dt)
    s_, u_ = torch.randn(dv, dtype=dt), torch.randn(d, dtype=dt)
    with torch.no_grad():
        ec.expand.weight.zero_()
        for i in range(d):
            for j in range(dv):
                ec.expand.weight[i * dv + j, 0, K - 1] = s_[j]
                ec.expand.weight[i * dv + j, 0, K - 2] = u_[i]
        x = ec.embed(ids.reshape(-1)).reshape(B, T, d)
        X = channels_to_tokens(causal_depthwise(ec.expand, x.transpose(1, 2)), dv).reshape(B, T, dv, d)
        prev = torch.cat((torch.zeros(B, 1, d, dtype=dt), x[:, :-1]), dim=1)
        want = s_[None, None, :, None] * x[:, :, None, :] + (u_[None, None, :] * prev)[:, :, None, :]
        report("EC channel order (i*dv + j is X_j[i]), w[..., K-1] on the current token", _max_abs(X, want), 1e-14)

    # 5. TC with identity conv weights equals the free CC compressor with W[i, :] = r
    for residual in ("delta", "additive"):
        tcm = DeltaLM(lm_config("tc", residual, "paper")).to(dt)
        _randomize(tcm)
        ccm = DeltaLM(lm_config("cc", residual, "paper")).to(dt)
        sd = {}
        for name, t in tcm.state_dict().items():
            if name.endswith("compress.conv.weight") or name == "readout.conv.weight":
                continue
            if name.endswith("read.weight"):
                sd[name[:-len("read.weight")] + "weight"] = t[None, :].expand(d, -1).clone()
            else:
                sd[name] = t
        ccm.load_state_dict(sd)
        with torch.no_grad():
            for name, p in tcm.named_parameters():
                if name.endswith("conv.weight"):
                    p.zero_()
                    p[:, 0, -1] = 1.0
            report(f"tc ({residual}) with identity conv weights = cc free with W = r", _max_abs(tcm(ids), ccm(ids)),
                   1e-13)

    # 6. TC's channel order and causality: a conv weight that reads the previous token on channel (i, j)
    #    only; compared with the formula on one compressor
    comp = TokenCompressor(d, dv, K).to(dt)
    _randomize(comp)
    Xs = torch.randn(B * T, dv, d, dtype=dt)
    w, r = comp.conv.weight[:, 0, :], comp.read.weight
    X4 = Xs.reshape(B, T, dv, d)
    want = torch.zeros(B, T, d, dtype=dt)
    for t in range(T):
        for k in range(K):
            src = t - (K - 1) + k
            if src >= 0:
                for j in range(dv):
                    want[:, t, :] += r[j] * w[torch.arange(d) * dv + j, k] * X4[:, src, j, :]
    with torch.no_grad():
        report("TC = sum_j r_j sum_k w[i*dv+j, k] X_j[t-K+1+k][i]", _max_abs(comp(Xs, B, T).reshape(B, T, d), want),
               1e-13)

    # 7. structured CC = the authors' construction: for K = dv, pad the kernel rows by K - 1 on both sides,
    # take windows b = K - 1 + p down to p and x_conv[i, k] = sum_v X[i, v] window_b[v]; for any K, a
    # per-feature cross-correlation along dv with p = (K - 1) // 2 zeros on the left; then sum_k r[k] x_conv
    N, d = 5, 6
    for dv, K in ((4, 4), (3, 3), (5, 2), (2, 5), (1, 4), (6, 1)):
        comp = Compressor(d, dv, "structured", K).to(dt)
        _randomize(comp, 1.0)
        a, r = comp.conv.weight, comp.read.weight
        X = torch.randn(N, dv, d, dtype=dt)
        p = (K - 1) // 2
        Xp = torch.nn.functional.pad(X.transpose(1, 2), (p, K - 1 - p))  # (N, d, dv + K - 1)
        x_conv = torch.stack([(Xp[:, :, o:o + K] * a[None]).sum(-1) for o in range(dv)], dim=-1)  # (N, d, dv)
        want = (x_conv * r).sum(-1)
        if K == dv:
            padded = torch.nn.functional.pad(a, (K - 1, K - 1))
            b = torch.arange(K - 1 + p, p - 1, -1)
            unfolded = padded.unfold(-1, K, 1)[:, b, :]  # (d, K, dv)
            theirs = (torch.einsum("ndv,dkv->ndk", X.transpose(1, 2), unfolded) * r).sum(-1)
            report(f"structured CC dv {dv} K {K} = the authors' unfold construction", _max_abs(want, theirs), 1e-13)
        with torch.no_grad():
            report(f"structured CC dv {dv} K {K} = per-feature same-padded conv along dv, then read",
                   _max_abs(comp(X), want), 1e-13)

    # 8. causal: changing the id at position t changes no logit before t and no other sequence
    for variant in ("dv1", "cc", "cc-ec", "tc", "tc-ec"):
        model = DeltaLM(lm_config(variant, "delta")).to(dt)
        _randomize(model)
        worst = 0.0
        with torch.no_grad():
            base = model(ids).reshape(B, T, -1)
            for t in range(T):
                other = ids.clone()
                other[1, t] = (other[1, t] + 1 + t) % 11
                got = model(other).reshape(B, T, -1)
                worst = max(worst, _max_abs(got[1, :t], base[1, :t]), _max_abs(got[0], base[0]),
                            _max_abs(got[2], base[2]))
                if (got[1, t] - base[1, t]).abs().max().item() < 1e-9:
                    failures.append(f"causal {variant}: position {t} does not see its own token")
        report(f"causal {variant}: earlier positions and other sequences unchanged", worst, 1e-13)

    # 9. the authors' attention options: names in ddl's order, and the attention against their computation
    #    written out per position (ShiftLinear, activations, partial RoPE, QK norms, output norm and gate)
    for opts in (dict(head_dim=6, rope_ratio=0.5, use_output_gate=1, output_norm_eps=1e-3, use_k_shift=1,
                      q_activation="silu", v_activation="elu+1"),
                 dict(use_v_shift=1, using_groupnorm=1, use_output_gate=1, k_activation="relu", qk_norm_eps=1e-3)):
        cfg = lm_config("dv1", "additive", **opts)
        model = DeltaLM(cfg).to(dt)
        if list(model.state_dict()) != lm_param_names(cfg):
            failures.append(f"names with attention options {opts}")
            print(f"names with attention options: {list(model.state_dict())} != {lm_param_names(cfg)} FAIL")
        _randomize(model)
        attn = model.blocks[0].attn
        c = torch.randn(B * T, 8, dtype=dt)
        with torch.no_grad():
            report(f"attention options {sorted(opts)} = their computation per position",
                   _max_abs(attn(c, B, T), _hand_attention(attn, c, B, T, cfg)), 1e-12)

    # 10. the authors' Delta options: the linear value on the raw compressor output (their ddl_v_sigmoid =
    # False) is W_v x_in + b_v, not a function of c; EC's kernel is its own key (absent: conv_kernel);
    # ddl_state_dv_shortconv_causal = true and an unknown init are refused
    N, d = 5, 6
    for dv in (1, 3):
        res = DeltaResidual(d, dv, lm_config("cc", value="linear_on_input")).to(dt)
        _randomize(res, 1.0)
        X, x_in, c, h = (torch.randn(N, dv, d, dtype=dt), torch.randn(N, d, dtype=dt), torch.randn(N, d, dtype=dt),
                         torch.randn(N, d, dtype=dt))
        W, b = res.value.weight, res.value.bias
        k = h / torch.sqrt((h * h).sum(1, keepdim=True) + 1e-10)
        beta = 2 * torch.sigmoid(c @ res.gate.weight[0] + res.gate.bias[0])
        v = x_in @ W.t() + b
        want = X + (beta[:, None] * (v - torch.einsum("njd,nd->nj", X, k)))[:, :, None] * k[:, None, :]
        with torch.no_grad():
            report(f"linear_on_input dv {dv}: X + beta k (W_v x_in + b_v - k.X)", _max_abs(res(X, x_in, c, h), want), 1e-13)
    # The gate's cap: beta = beta_max sigmoid(z) (absent: 2); a cap outside (0, 2] is refused.
    res = DeltaResidual(d, 1, lm_config("dv1", beta_max=1)).to(dt)
    _randomize(res, 1.0)
    X, x_in, c, h = (torch.randn(N, 1, d, dtype=dt), torch.randn(N, d, dtype=dt), torch.randn(N, d, dtype=dt),
                     torch.randn(N, d, dtype=dt))
    k = h / torch.sqrt((h * h).sum(1, keepdim=True) + 1e-10)
    beta = torch.sigmoid(c @ res.gate.weight[0] + res.gate.bias[0])
    v = 4 * torch.sigmoid(x_in @ res.value.weight.t() + res.value.bias)
    want = X + (beta[:, None] * (v - torch.einsum("njd,nd->nj", X, k)))[:, :, None] * k[:, None, :]
    with torch.no_grad():
        report("beta_max 1: X + sigma(z) k (v - k.X)", _max_abs(res(X, x_in, c, h), want), 1e-13)
    for cap in ("0", "2.5", "nan"):
        try:
            DeltaResidual(d, 1, lm_config("dv1", beta_max=cap))
            report(f"beta_max {cap} refused", 1.0, 0.0)
        except ValueError as e:
            report(f"beta_max {cap} refused ({e})", 0.0, 0.0)
    ec = DeltaLM(lm_config("tc-ec", input_embed_shortconv_kernel_size=2))
    old = lm_config("tc-ec")
    del old["input_embed_shortconv_kernel_size"]
    shapes = (list(ec.expand.weight.shape), list(ec.readout.conv.weight.shape), list(DeltaLM(old).expand.weight.shape))
    report("EC kernel 2 beside TC kernel 3; without the key EC takes conv_kernel",
           0.0 if shapes == ([32, 1, 2], [32, 1, 3], [32, 1, 3]) else 1.0, 0.0)
    for key, value in (("ddl_state_dv_shortconv_causal", "1"), ("init", "torch")):
        try:
            DeltaLM(lm_config("cc", **{key: value}))
            report(f"{key} = {value} refused", 1.0, 0.0)
        except ValueError as e:
            report(f"{key} = {value} refused ({e})", 0.0, 0.0)
    print(f"{'all checks passed' if not failures else 'FAILED: ' + ', '.join(failures)}")
    return 0 if not failures else 1


def _open_maybe_gz(path):
    with open(path, "rb") as f:
        head = f.read(2)
    return gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb")


def read_idx(path):
    """Reads an IDX file of unsigned bytes (type 0x08) into a uint8 tensor of its shape."""
    with _open_maybe_gz(path) as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise FormatError(f"{path}: not an IDX file (bad magic)")
    if data[2] != 0x08:
        raise FormatError(f"{path}: IDX element type 0x{data[2]:02x}, only unsigned bytes (0x08) are read")
    ndim = data[3]
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    body = data[4 + 4 * ndim:]
    if len(body) != math.prod(dims):
        raise FormatError(f"{path}: {len(body)} data bytes, shape {list(dims)} needs {math.prod(dims)}")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(dims).clone()


def find_idx_files(directory, part):
    """The images/labels pair of part ("train" or "t10k") under directory or directory/data, named as
    ddl::findIdxFiles accepts: {part}-images-idx3-ubyte or {part}-images.idx3-ubyte, raw or .gz."""
    def find(d, kind, ndim):
        for ext in ("", ".gz"):
            for name in (f"{part}-{kind}-idx{ndim}-ubyte", f"{part}-{kind}.idx{ndim}-ubyte"):
                if os.path.isfile(os.path.join(d, name + ext)):
                    return os.path.join(d, name + ext)
        return None
    for d in (directory, os.path.join(directory, "data")):
        images, labels = find(d, "images", 3), find(d, "labels", 1)
        if images and labels:
            return images, labels
    raise FormatError(f"{directory}: no {part}-images-idx3-ubyte / {part}-labels-idx1-ubyte pair (raw or .gz), "
                      f"also looked in {os.path.join(directory, 'data')}")


def logits_command(args):
    """Runs the checkpoint on IDX images; prints the accuracy (with labels) and the first logits."""
    model, _ = load_checkpoint(args.checkpoint)
    if not isinstance(model, DeltaNet):
        raise FormatError(f"{args.checkpoint}: 'logits' runs DeltaNet checkpoints on IDX images; this one holds a "
                          f"{type(model).__name__} (use 'check' with a batch file)")
    if os.path.isdir(args.idx):
        images_path, labels_path = find_idx_files(args.idx, args.part)
    else:
        images_path, labels_path = args.idx, args.labels
    images = read_idx(images_path)
    if args.limit is not None:
        images = images[:args.limit]
    dtype = next(model.parameters()).dtype
    # ddl's Dataset: one column per sample, the image flattened row-major, pixels / 255 by default;
    # then (x - mean) / std when the training run normalized its inputs.
    x = (images.reshape(images.shape[0], -1).to(dtype) / args.scale - args.mean) / args.std
    with torch.no_grad():
        logits = model(x)
    pred = logits.argmax(dim=1)
    print(f"{images_path}: {x.shape[0]} samples of {x.shape[1]} features")
    if labels_path is not None:
        labels = read_idx(labels_path)[:x.shape[0]].to(torch.int64)
        acc = (pred == labels).to(torch.float64).mean().item()
        print(f"{labels_path}: accuracy {acc:.4f}")
    for i in range(min(x.shape[0], args.show)):
        print(f"{i}: pred {pred[i].item()} logits {' '.join(f'{v:.6g}' for v in logits[i].tolist())}")
    return 0


# ---------------------------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description="Load ddl checkpoints in PyTorch.")
    sub = parser.add_subparsers(dest="command", required=True)
    pc = sub.add_parser("check", help="reproduce ddl's logits on a batch")
    pc.add_argument("--checkpoint", action="append", required=True)
    pc.add_argument("--batch", action="append", required=True)
    pc.add_argument("--tol", type=float, default=1e-5, help="max abs error of the logits")
    pc.add_argument("--grad-tol", type=float, default=1e-5,
                    help="max abs error of the gradients over max(1, max |gradient|), when the batch has dlogits")
    pc.add_argument("--dtype", choices=("auto", "float32", "float64"), default="auto",
                    help="compute dtype (auto: the checkpoint's)")
    pa = sub.add_parser("accuracy", help="ddl's float32 gradients against PyTorch's, both against float64")
    pa.add_argument("--checkpoint", action="append", required=True)
    pa.add_argument("--batch", action="append", required=True)
    pa.add_argument("--max-ratio", type=float, default=1.0,
                    help="pass when ddl's geometric mean worst error is at most this times PyTorch's")
    pl = sub.add_parser("logits", help="run a checkpoint on IDX images")
    pl.add_argument("--checkpoint", required=True)
    pl.add_argument("--idx", required=True,
                    help="a directory with the IDX pair of --part (e.g. /usr/share/datasets/fashion-mnist), "
                         "or an IDX image file")
    pl.add_argument("--part", choices=("t10k", "train"), default="t10k")
    pl.add_argument("--labels", help="IDX label file, when --idx names an image file")
    pl.add_argument("--limit", type=int)
    pl.add_argument("--scale", type=float, default=255.0, help="pixels are divided by this (ddl: 255)")
    pl.add_argument("--mean", type=float, default=0.0, help="then (x - mean) / std")
    pl.add_argument("--std", type=float, default=1.0)
    pl.add_argument("--show", type=int, default=5)
    pe = sub.add_parser("export", help="write a PyTorch-initialised net's state_dict for ddl to load")
    pe.add_argument("--config", required=True,
                    help="JSON file of DeltaNetConfig, ConvDeltaNetConfig or DeltaLMConfig::toKeyValues")
    pe.add_argument("--out", required=True, help="state_dict as safetensors")
    pe.add_argument("--batch", required=True,
                    help="x (input_dim, N) or ids (B, T) for DeltaLM, and logits (classes, N)")
    pe.add_argument("--seed", type=int, default=1)
    pe.add_argument("--n", type=int, default=7, help="samples (DeltaLM: sequences)")
    pe.add_argument("--length", type=int, default=5, help="DeltaLM: tokens per sequence (at most the context)")
    ps = sub.add_parser("selftest", help="check the PyTorch DeltaLM against hand-written formulas")
    ps.add_argument("--seed", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    try:
        if args.command == "check":
            if len(args.checkpoint) != len(args.batch):
                parser.error(f"{len(args.checkpoint)} --checkpoint but {len(args.batch)} --batch; give them in pairs")
            dtype = {"auto": None, "float32": torch.float32, "float64": torch.float64}[args.dtype]
            results = [check(c, b, args.tol, args.grad_tol, dtype) for c, b in zip(args.checkpoint, args.batch)]
            print(f"{sum(results)} of {len(results)} checks passed")
            return 0 if all(results) else 1
        if args.command == "accuracy":
            if len(args.checkpoint) != len(args.batch):
                parser.error(f"{len(args.checkpoint)} --checkpoint but {len(args.batch)} --batch; give them in pairs")
            results = [accuracy(c, b) for c, b in zip(args.checkpoint, args.batch)]
            # One model's worst tensor is a noisy sample (each side's rounding falls differently), so
            # the sides are compared by the geometric mean of their worst errors over all the files.
            geo = [math.exp(sum(math.log(max(r[i], 1e-300)) for r in results) / len(results)) for i in (0, 1)]
            ok = geo[0] <= args.max_ratio * geo[1]
            print(f"geometric mean of the worst gradient errors over {len(results)} models: ddl {geo[0]:.3e}, "
                  f"pytorch {geo[1]:.3e}, ratio {geo[0] / geo[1]:.2f} (limit {args.max_ratio:g}) "
                  f"{'ok' if ok else 'FAIL'}")
            return 0 if ok else 1
        if args.command == "export":
            return export_command(args)
        if args.command == "selftest":
            return selftest_command(args)
        return logits_command(args)
    except (FormatError, ValueError, KeyError, OSError) as e:
        print(f"ddl_torch.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
