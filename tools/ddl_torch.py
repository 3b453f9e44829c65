#!/usr/bin/python3
"""ddl_torch.py: a PyTorch reference implementation of ddl's DeltaNet and ConvDeltaNet that loads ddl
checkpoints.

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

Usage (Debian's python3-torch with /usr/bin/python3; the safetensors package is not needed):
  ddl_torch.py check --checkpoint CK.safetensors --batch B.safetensors [--tol 1e-5] [--dtype auto]
      B holds "x" (input_dim, N) and ddl's "logits" (classes, N), in ddl's column layout.
      Prints the max abs error of the PyTorch logits; exit 0 if <= tol, 1 if above, 2 on bad input.
      If B also holds "dlogits" (classes, N), ddl's gradients "grad.<param name>" of the loss
      sum(logits * dlogits) (and "dx" (input_dim, N) if present) are checked against autograd
      (--grad-tol, relative to max(1, max |gradient|)).
      --checkpoint/--batch may be repeated in pairs (one torch start-up for many checks).
  ddl_torch.py export --config CFG.json --out STATE.safetensors --batch B.safetensors [--seed S] [--n N]
      Builds the DeltaNet or ConvDeltaNet of CFG (its toKeyValues as JSON) in float64 with PyTorch's own
      initialisation (gains and gate biases perturbed), writes its state_dict as a plain safetensors
      file (metadata {"format": "pt"}, as PyTorch tools write) and a batch of N random inputs "x"
      (input_dim, N) with the logits "logits" (classes, N) in ddl's column layout.
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
    """ddl::Activation by its toString name (nn/activation.hpp); GELU is the exact erf form."""
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
    """ddl::RmsNorm: y = g * x / sqrt(mean(x^2) + eps) per token, g: [d]. x: (N, d) -> (N, d)."""

    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        r = torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + self.eps)
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
    structured: W[i, j] = w_eff[j] = sum_j' r[j'] a[j - j' + K/2] (terms with the index outside
                [0, K) dropped), a = "conv.weight" [K], r = "read.weight" [dv].
    """

    def __init__(self, d, dv, kind, kernel):
        super().__init__()
        self.d, self.dv, self.kind, self.kernel = d, dv, kind, kernel
        if kind == "free":
            self.weight = nn.Parameter(torch.full((d, dv), 1.0 / dv))
        elif kind == "structured":
            if kernel < 1 or kernel % 2 == 0:
                raise ValueError(f"compressor_kernel must be odd and >= 1, got {kernel}")
            self.conv = Weight(kernel)
            self.read = Weight(dv)
        else:
            raise ValueError(f"unknown compressor '{kind}', expected free or structured")

    def channel_weights(self):
        """W: (d, dv)."""
        if self.kind == "free":
            return self.weight
        a, r = self.conv.weight, self.read.weight
        half = self.kernel // 2
        w_eff = [a.new_zeros(()) for _ in range(self.dv)]
        for jp in range(self.dv):
            for t in range(self.kernel):
                j = jp + t - half
                if 0 <= j < self.dv:
                    w_eff[j] = w_eff[j] + r[jp] * a[t]
        return torch.stack(w_eff).unsqueeze(0).expand(self.d, -1)

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
        beta = 2 sigmoid(z) with z from the gate head on c
        v = s sigmoid(W_v x_in + b_v) | W_v c + b_v | W_v h + b_v | constant    (dv entries)
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
        if self.value_kind in ("sigmoid_scaled", "linear_on_c", "from_branch"):
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
        beta = 2 * torch.sigmoid(self.gate(c))                          # (N,)
        if self.value_kind == "sigmoid_scaled":
            v = self.value_scale * torch.sigmoid(self.value(x_in))
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
# Loading.

_RESIDUAL_KEYS = ("final_norm_eps", "preset", "activation", "norm_eps", "compressor", "compressor_kernel",
                  "residual", "direction", "direction_norm", "eps_k", "gate", "gate_hidden", "beta0", "value",
                  "value_scale", "value_constant", "aux_hidden", "aux_activation", "dv", "learned_expansion")
_CONFIG_KEYS = {  # model_config "model" -> the keys its toKeyValues writes
    "delta_net": ("input_dim", "classes", "d", "depth", "hidden") + _RESIDUAL_KEYS,
    "conv_delta_net": ("model", "channels", "height", "width", "classes", "widths", "depths", "branch_ratio",
                       "stem_kernel", "stem_stride") + _RESIDUAL_KEYS,
}


def build_model(cfg, where):
    """The network of a model_config (DeltaNetConfig or ConvDeltaNetConfig::toKeyValues) and its input
    size per sample. where names the source in errors."""
    kind = cfg.get("model", "delta_net")  # DeltaNetConfig writes no "model" key
    if kind not in _CONFIG_KEYS:
        raise FormatError(f"{where}: model {kind!r}, expected one of {sorted(_CONFIG_KEYS)}")
    missing = [k for k in _CONFIG_KEYS[kind] if k not in cfg]
    if missing:
        raise FormatError(f"{where}: model_config of a {kind} lacks the keys {missing}")
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
    for key in ("x", "logits"):
        if key not in tensors:
            raise FormatError(f"{batch}: no tensor '{key}' (expected x: (input_dim, N), logits: (classes, N))")
    x = tensors["x"].t().to(next(model.parameters()).dtype).contiguous()  # ddl columns -> rows
    want = tensors["logits"].t().to(torch.float64)
    with_grads = "dlogits" in tensors
    x.requires_grad_(with_grads and "dx" in tensors)
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
    print(f"{os.path.basename(checkpoint)}: preset={cfg['preset']} residual={cfg['residual']} dv={cfg['dv']} "
          f"dtype={x.dtype}: {report} {'ok' if ok else 'FAIL'}")
    return ok


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
    x = torch.randn(args.n, input_dim, dtype=torch.float64)
    with torch.no_grad():
        logits = model(x)
    write_safetensors(args.out, model.state_dict(), {"format": "pt"})
    write_safetensors(args.batch, {"x": x.t(), "logits": logits.t()})
    print(f"{args.out}: {len(model.state_dict())} tensors; {args.batch}: x {list(x.t().shape)}, "
          f"logits {list(logits.t().shape)}")
    return 0


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
    pe = sub.add_parser("export", help="write a PyTorch-initialised DeltaNet state_dict for ddl to load")
    pe.add_argument("--config", required=True, help="JSON file of DeltaNetConfig::toKeyValues")
    pe.add_argument("--out", required=True, help="state_dict as safetensors")
    pe.add_argument("--batch", required=True, help="x (input_dim, N) and logits (classes, N)")
    pe.add_argument("--seed", type=int, default=1)
    pe.add_argument("--n", type=int, default=7)
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
        if args.command == "export":
            return export_command(args)
        return logits_command(args)
    except (FormatError, ValueError, KeyError, OSError) as e:
        print(f"ddl_torch.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
