#!/usr/bin/python3
"""authors_reference.py: reference vectors computed by the authors' own Deep Delta Learning code
(github.com/yifanzhang-pro/deep-delta-learning, its model/ package), for tests/test_authors_model.cpp.

Their code is not part of this repository: pass the folder of their model/ package with --authors, e.g.
  git -C <mirror> archive HEAD model | tar -x -C /tmp/authors
  tools/authors_reference.py --authors /tmp/authors/model --out tests/fixtures/authors

For each variant it builds their GPT from a small GPTConfig (their field names), applies their own
initialisation (their constructor), moves it to float64, perturbs every parameter by 0.2 N(0, 1) (so
gains, biases, read vectors and EC are off their starts), runs forward and backward on fixed random
ids and targets (B 2, T 9) and writes into OUT/<variant>/:
  config.json         every field of their GPTConfig, as their save_pretrained writes it, with
                      "architectures" and "model_type" (HF's bookkeeping keys)
  model.safetensors   their state_dict in float64 under their names; the tied lm_head.weight is stored
                      once, as transformer.wte.weight (as HF's safetensors save does)
  reference.safetensors  ids and targets (I64, [B, T]), logits (F64, [B, T, V]), loss (F64, []) and
                      "grad.<name>" (F64) for every parameter of named_parameters()
Variants (file of theirs -> name here):
  baseline  gpt_base.py's GPTBase with the attention of DDL-vdim1-gpt-mha-rope.py (their repository has
            no concrete baseline class; architectures ["GPTBase"])
  dv1       DDL-vdim1-gpt-mha-rope.py          cc     DDL-gpt-mha-rope-CC.py
  cc-ec     DDL-gpt-mha-rope-CC-EC.py          tc     DDL-gpt-mha-rope.py (compressor over tokens)
  tc-ec     DDL-gpt-mha-rope-EC.py

What runs is their code, with only what this machine lacks supplied (install_shims): the few names
they import from transformers and pydantic (a config that keeps its keyword arguments, their pydantic
validation reduced to defaults plus strict bool/int checks), causal_conv1d_fn (a causal depthwise
Conv1d, K - 1 zeros on the left), and, for PyTorch 1.13, F.rms_norm and F.scaled_dot_product_attention.
For a float64 reference their fp32 casts are widened (widen_fp32_casts): in their code `.float()`,
`torch.sum(..., dtype=torch.float32)` and the fp32 RoPE tables mean "at least fp32" for bf16 training;
here they compute in float64, so the reference has float64 rounding throughout.

Options: --variants (default all), --seed, --set key=value (a GPTConfig override, JSON value, repeated;
applied to every variant) with --tag T (the folders are then OUT/<variant>+T), --dtype float32 writes
model.safetensors in F32 instead. The committed option cases (tests/fixtures/authors/*+options):
  --variants dv1,baseline --tag options --set num_hidden_layers=1 --set ddl_k_eps=0.01 \
      --set ddl_v_sigmoid_scale=2.5 --set rope_base=500.0 --set use_qk_rmsnorm=false
  --variants cc-ec --tag options --set num_hidden_layers=1 --set ddl_value_channels=3 \
      --set input_embed_shortconv_kernel_size=2 --set ddl_k_eps=0.01 --set ddl_v_sigmoid_scale=2.5 \
      --set rope_base=500.0 --set use_qk_rmsnorm=false --set ddl_state_read_init=0.3
  --variants tc-ec --tag options  (the same with --set ddl_state_shortconv_kernel_size=2)
and the attention option cases (*+attn):
  --variants cc-ec --tag attn --set num_hidden_layers=1 --set head_dim=5 --set rope_ratio=0.7 \
      --set use_output_gate=true --set rms_norm_eps=0.001 --set use_k_shift=true --set use_v_shift=true \
      --set q_activation='"silu"' --set k_activation='"elu+1"' --set v_activation='"relu"'
  --variants dv1 --tag attn --set num_hidden_layers=1 --set head_dim=4 --set rope_ratio=0.5 \
      --set using_groupnorm=true --set use_output_gate=true --set use_v_shift=true --set v_activation='"silu"'
  --variants baseline --tag attn --set num_hidden_layers=1 --set head_dim=8 --set rope_ratio=0.0 \
      --set using_groupnorm=true --set rms_norm_eps=0.0001 --set use_k_shift=true --set k_activation='"relu"'
and the Delta-write and init option cases (*+delta):
  --variants cc-ec --tag delta --set vocab_size=16 --set num_hidden_layers=1 --set ddl_v_sigmoid=false \
      --set ddl_beta_single_linear=false --set ddl_beta_hidden_size=5 --set ddl_beta_init=0.5 \
      --set embedding_init_std=0.05 --set hidden_init_std_factor=0.7
  --variants tc-ec --tag delta --set vocab_size=16 --set num_hidden_layers=1 --set ddl_v_constant=true \
      --set ddl_v_constant_value=1.5 --set ddl_state_shortconv_kernel_size=3 \
      --set input_embed_shortconv_kernel_size=2 --set ddl_state_read_init=0.3 --set ddl_beta_init=1.5
  --variants dv1 --tag delta --set vocab_size=16 --set num_hidden_layers=1 --set ddl_v_dim1_constant=true \
      --set ddl_v_dim1_constant_value=1.5 --set ddl_beta_single_linear=false --set ddl_beta_hidden_size=3
A parameter their forward never reads (v_proj with a constant value) has no gradient and none is written.
Their CC compressor computes only with ddl_state_shortconv_kernel_size = ddl_value_channels (their GPTConfig
sets it so when only the channels are given); any other kernel fails in their einsum.
"""

import argparse
import importlib.util
import json
import math
import os
import struct
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

VARIANT_FILES = {
    "baseline": "DDL-vdim1-gpt-mha-rope.py",
    "dv1": "DDL-vdim1-gpt-mha-rope.py",
    "cc": "DDL-gpt-mha-rope-CC.py",
    "cc-ec": "DDL-gpt-mha-rope-CC-EC.py",
    "tc": "DDL-gpt-mha-rope.py",
    "tc-ec": "DDL-gpt-mha-rope-EC.py",
}
PACKAGE = "authors_ddl_model"


# ---------------------------------------------------------------------------------------------
# What their modules import and this machine lacks.

def install_shims():
    # transformers: the four names their modules import.
    class PretrainedConfig:
        model_type = ""

        def __init__(self, **kwargs):
            for k, v in kwargs.items():
                setattr(self, k, v)

    class PreTrainedModel(nn.Module):
        def __init__(self, config=None, *args, **kwargs):
            super().__init__()
            self.config = config

        def tie_weights(self):
            pass

    class GenerationMixin:
        pass

    class CausalLMOutputWithPast(dict):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.__dict__.update(kwargs)

    mods = {}
    for name in ("transformers", "transformers.configuration_utils", "transformers.modeling_outputs",
                 "transformers.modeling_utils", "transformers.generation", "transformers.generation.utils"):
        mods[name] = types.ModuleType(name)
        sys.modules[name] = mods[name]
    mods["transformers.configuration_utils"].PretrainedConfig = PretrainedConfig
    mods["transformers.modeling_outputs"].CausalLMOutputWithPast = CausalLMOutputWithPast
    mods["transformers.modeling_utils"].PreTrainedModel = PreTrainedModel
    mods["transformers.generation.utils"].GenerationMixin = GenerationMixin

    # pydantic: create_model(...).model_validate(values).model_dump() = the declared defaults overridden
    # by the values, with StrictBool / StrictInt refusing other types and float accepting ints.
    class StrictBool:
        pass

    class StrictInt:
        pass

    class StrictStr:
        pass

    class BaseModel:
        pass

    def ConfigDict(**kwargs):
        return dict(kwargs)

    def create_model(name, __config__=None, **fields):
        class Validated:
            def __init__(self, values):
                self.values = values

            def model_dump(self):
                return dict(self.values)

            @staticmethod
            def model_validate(values):
                out = {}
                for key, (kind, default) in fields.items():
                    out[key] = default
                for key, value in values.items():
                    if key in fields:
                        kind = fields[key][0]
                        if kind is StrictBool and not isinstance(value, bool):
                            raise ValueError(f"{key}: expected a bool, got {value!r}")
                        if kind is StrictInt and (not isinstance(value, int) or isinstance(value, bool)):
                            raise ValueError(f"{key}: expected an int, got {value!r}")
                        if kind is float and isinstance(value, int) and not isinstance(value, bool):
                            value = float(value)
                    out[key] = value
                return Validated(out)

        return Validated

    pyd = types.ModuleType("pydantic")
    pyd.BaseModel, pyd.ConfigDict, pyd.create_model = BaseModel, ConfigDict, create_model
    pyd.StrictBool, pyd.StrictInt, pyd.StrictStr = StrictBool, StrictInt, StrictStr
    sys.modules["pydantic"] = pyd

    # causal_conv1d (a CUDA package): y[c, t] = sum_k w[c, k] x[c, t - K + 1 + k], zeros before t = 0.
    def causal_conv1d_fn(x, weight, bias=None, activation=None):
        K = weight.shape[-1]
        y = F.conv1d(F.pad(x, (K - 1, 0)), weight.unsqueeze(1), bias, groups=weight.shape[0])
        return F.silu(y) if activation in ("silu", "swish") else y

    cc = types.ModuleType("causal_conv1d")
    cc.causal_conv1d_fn = causal_conv1d_fn
    sys.modules["causal_conv1d"] = cc

    # PyTorch >= 2 functions missing from 1.13.
    if not hasattr(F, "rms_norm"):
        def rms_norm(x, normalized_shape, weight=None, eps=None):
            dims = tuple(range(-len(normalized_shape), 0))
            if eps is None:
                eps = torch.finfo(x.dtype).eps
            y = x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps)
            return y * weight if weight is not None else y
        F.rms_norm = rms_norm
    if not hasattr(F, "scaled_dot_product_attention"):
        def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
            s = (q @ k.transpose(-2, -1)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
            if is_causal:
                T, S = q.shape[-2], k.shape[-2]
                s = s.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(S - T + 1), float("-inf"))
            if attn_mask is not None:
                s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
            return torch.softmax(s, dim=-1) @ v
        F.scaled_dot_product_attention = sdpa


def widen_fp32_casts(rotary_module):
    """Their fp32 casts compute in float64 when the tensor is float64 (see the module comment)."""
    narrow_float = torch.Tensor.float
    torch.Tensor.float = lambda self, *a, **k: self if self.dtype == torch.float64 else narrow_float(self, *a, **k)
    plain_sum = torch.sum

    def wide_sum(input, *args, dtype=None, **kwargs):
        if dtype == torch.float32 and input.dtype == torch.float64:
            dtype = torch.float64
        return plain_sum(input, *args, dtype=dtype, **kwargs) if dtype is not None else plain_sum(input, *args, **kwargs)
    torch.sum = wide_sum

    Rotary = rotary_module.Rotary
    plain_init = Rotary.__init__

    def init(self, dim, *, base=10000.0, rope_ratio=1.0):
        plain_init(self, dim, base=base, rope_ratio=rope_ratio)
        self.wide_base = float(base)

    def set_cache(self, seq_len, *, device):  # their angles t * base^(-i/rd), i = 0, 2, ..., in float64
        self.seq_len_cached = seq_len
        rd = self.rotary_dim
        inv = 1.0 / (self.wide_base ** (torch.arange(0, rd, 2, dtype=torch.float64) / float(rd)))
        freqs = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv)
        self.cos_cached, self.sin_cached = freqs.cos().to(device), freqs.sin().to(device)
    Rotary.__init__ = init
    Rotary._set_cos_sin_cache = set_cache


def load_authors(folder):
    """Their model/ folder as the package PACKAGE; returns {variant: module}."""
    spec = importlib.util.spec_from_file_location(PACKAGE, os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    pkg = types.ModuleType(PACKAGE)
    pkg.__path__ = [folder]
    pkg.__spec__ = spec
    sys.modules[PACKAGE] = pkg

    def load(file):
        name = PACKAGE + "." + file[:-3].replace("-", "_")
        if name in sys.modules:
            return sys.modules[name]
        s = importlib.util.spec_from_file_location(name, os.path.join(folder, file))
        m = importlib.util.module_from_spec(s)
        sys.modules[name] = m
        s.loader.exec_module(m)
        return m
    rotary = importlib.import_module(PACKAGE + ".rotary")
    return rotary, {v: load(f) for v, f in VARIANT_FILES.items()}, importlib.import_module(PACKAGE + ".gpt_base")


# ---------------------------------------------------------------------------------------------
# safetensors, written by hand (the format of io/safetensors_header.hpp).

_NAMES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}
_TYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    body, out = data[8 + n:], {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = bytearray(body[begin:end])
        out[name] = torch.frombuffer(raw, dtype=_TYPES[info["dtype"]]).reshape(info["shape"]).clone()
    return out


def write_safetensors(path, tensors, meta=None):
    header, chunks, offset = {}, [], 0
    if meta:
        header["__metadata__"] = dict(meta)
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    os.replace(path + ".tmp", path)


# ---------------------------------------------------------------------------------------------

def small_config(variant, overrides):
    c = {"vocab_size": 31, "num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 12, "head_dim": 6,
         "block_size": 16}
    if variant not in ("baseline", "dv1"):
        c["ddl_value_channels"] = 4
    c.update(overrides)
    return c


def build(variant, modules, gpt_base, overrides):
    mod = modules[variant]
    config = mod.GPTConfig(**small_config(variant, overrides))
    if variant == "baseline":
        class GPTBase(gpt_base.GPTBase):
            attention_cls = mod.CausalSelfAttention
        return GPTBase(config), config, "GPTBase"
    return mod.GPT(config), config, "GPT"


def config_json(config, architecture, dtype):
    """Every field of their GPTConfig (its annotations) with its value, as save_pretrained writes them."""
    out = {"architectures": [architecture], "model_type": type(config).model_type}
    for klass in reversed(type(config).__mro__):
        for key in klass.__dict__.get("__annotations__", {}):
            if hasattr(config, key):
                out[key] = getattr(config, key)
    # Keys set outside the declared fields (--set rope_base, GPTBase's HF flags), minus what HF's to_diff_dict
    # leaves out: private keys and values equal to PretrainedConfig's defaults.
    hf_defaults = {"is_encoder_decoder": False, "add_cross_attention": False, "tie_word_embeddings": True,
                   "torchscript": False}
    for key, value in vars(config).items():
        if not key.startswith("_") and not (key in hf_defaults and hf_defaults[key] == value):
            out.setdefault(key, value)
    out["torch_dtype"] = "float64" if dtype == torch.float64 else "float32"
    return out


def generate(variant, modules, gpt_base, args, overrides):
    torch.manual_seed(args.seed)
    model, config, architecture = build(variant, modules, gpt_base, overrides)
    model = model.double()
    gen = torch.Generator().manual_seed(args.seed + 1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    B, T, V = 2, 9, config.vocab_size
    ids = torch.randint(0, V, (B, T), generator=gen)
    targets = torch.randint(0, V, (B, T), generator=gen)
    logits, loss = model(ids, targets)
    loss.backward()

    folder = os.path.join(args.out, variant + ("+" + args.tag if args.tag else ""))
    os.makedirs(folder, exist_ok=True)
    state = model.state_dict()
    tied = model.lm_head.weight is model.transformer.wte.weight
    if not tied:
        raise RuntimeError(f"{variant}: lm_head.weight is not tied to transformer.wte.weight")
    save_dtype = torch.float64 if args.dtype == "float64" else torch.float32
    weights = {k: v.to(save_dtype) for k, v in state.items() if k != "lm_head.weight"}
    write_safetensors(os.path.join(folder, "model.safetensors"), weights, {"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config_json(config, architecture, save_dtype), f, indent=2, sort_keys=True)
        f.write("\n")
    ref = {"ids": ids, "targets": targets, "logits": logits.detach(), "loss": loss.detach()}
    for name, p in model.named_parameters():
        if p.grad is not None:  # None: a parameter their forward never reads (v_proj with a constant value)
            ref["grad." + name] = p.grad
    write_safetensors(os.path.join(folder, "reference.safetensors"), ref)
    print(f"{variant}: {len(weights)} tensors, loss {loss.item():.12f}")


_BOOKKEEPING = ("architectures", "model_type", "torch_dtype", "transformers_version", "_name_or_path")


def check(args, modules, gpt_base):
    with open(os.path.join(args.check, "config.json")) as f:
        fields = {k: v for k, v in json.load(f).items() if k not in _BOOKKEEPING}
    model, _, _ = build(args.variant, modules, gpt_base, fields)
    model = model.double()
    state = {k: v.double() for k, v in read_safetensors(os.path.join(args.check, "model.safetensors")).items()}
    state.setdefault("lm_head.weight", state.get("transformer.wte.weight"))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        print(f"load_state_dict(strict=True) failed: {e}")
        return 2
    ref = read_safetensors(args.reference)
    with torch.no_grad():
        logits, _ = model(ref["ids"], ref["targets"])
    err = float((logits - ref["logits"]).abs().max() / ref["logits"].abs().max())
    print(f"{args.variant}: relative logit error {err:.3e} (tol {args.tol:g})")
    return 0 if err <= args.tol else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--authors", required=True, help="folder of the authors' model/ package")
    ap.add_argument("--out", default="tests/fixtures/authors")
    ap.add_argument("--variants", default=",".join(VARIANT_FILES))
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="GPTConfig override, VALUE as JSON (true, 3, 0.5, \"silu\", null)")
    ap.add_argument("--tag", default="", help="folder name suffix of an option case: OUT/<variant>+TAG")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                    help="dtype of model.safetensors (the reference is float64 either way)")
    ap.add_argument("--check", metavar="FOLDER", help="load FOLDER with their code and compare logits (see above)")
    ap.add_argument("--variant", help="with --check: the variant of FOLDER")
    ap.add_argument("--reference", help="with --check: a reference.safetensors with ids, targets and logits")
    ap.add_argument("--tol", type=float, default=1e-10)
    args = ap.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key] = json.loads(value)
    install_shims()
    rotary, modules, gpt_base = load_authors(os.path.abspath(args.authors))
    widen_fp32_casts(rotary)
    torch.set_default_dtype(torch.float64)
    if args.check:
        if args.variant not in VARIANT_FILES or not args.reference:
            ap.error("--check needs --variant (one of " + ", ".join(VARIANT_FILES) + ") and --reference")
        sys.exit(check(args, modules, gpt_base))
    for v in args.variants.split(","):
        if v not in VARIANT_FILES:
            ap.error(f"unknown variant {v!r}, expected one of {', '.join(VARIANT_FILES)}")
        generate(v, modules, gpt_base, args, overrides)


if __name__ == "__main__":
    main()
