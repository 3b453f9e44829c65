#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/<target>/): small valid files and a few
near misses, so that the fuzzer starts inside the formats. Run from anywhere; overwrites the seeds."""
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    os.makedirs(os.path.join(HERE, target), exist_ok=True)
    with open(os.path.join(HERE, target, name), "wb") as f:
        f.write(data)


def idx_images(n, rows, cols):
    return struct.pack(">IIII", 0x803, n, rows, cols) + bytes((i * 37 + 5) % 256 for i in range(n * rows * cols))


def idx_labels(labels):
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)


def idx_pair(images, labels):  # the fuzz_idx input layout: u16 LE image length, images, labels
    return struct.pack("<H", len(images)) + images + labels


def gz(data):
    return gzip.compress(data, compresslevel=9, mtime=0)


img, lbl = idx_images(3, 4, 2), idx_labels([1, 0, 9])
put("idx", "raw", idx_pair(img, lbl))
put("idx", "gz", idx_pair(gz(img), gz(lbl)))
put("idx", "gz_images_raw_labels", idx_pair(gz(img), lbl))
put("idx", "truncated", idx_pair(img[:-3], lbl))
put("idx", "count_mismatch", idx_pair(img, idx_labels([1, 2])))
put("idx", "huge_dims_gz", idx_pair(gz(struct.pack(">IIII", 0x803, 1 << 30, 1, 1) + bytes(4096)), gz(lbl)))

record10 = bytes([3]) + bytes((i * 7) % 256 for i in range(3072))
record100 = bytes([4, 77]) + bytes((i * 5) % 256 for i in range(3072))
put("cifar", "cifar10_two", record10 + bytes([9]) + record10[1:])
put("cifar", "cifar100_one", record100)
put("cifar", "cifar10_gz", gz(record10 * 2))
put("cifar", "bad_label", bytes([10]) + record10[1:])
put("cifar", "partial", record10[:1000])


def safetensors(tensors, meta=None, pad=b" ", edit=None):
    """tensors: [(name, dtype, shape, bytes)] -> file bytes; edit(header bytes) may alter the JSON text."""
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if edit is not None:
        text = edit(text)
    text += pad * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def f32(*values):
    return struct.pack(f"<{len(values)}f", *values)


model = [("fc.weight", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6)), ("fc.bias", "F32", [2], f32(0.5, -0.5)),
         ("conv.weight", "F32", [2, 1, 1, 2], f32(1, 0, 0, 1))]
optim = [("optim.m." + n, "F32", [s[0], (len(r) // 4) // s[0]], r) for n, _, s, r in model]
meta = {"format": "ddl-checkpoint", "format_version": "2", "epoch": "1", "step": "3", "optimizer_step": "3",
        "optimizer_tensors": "3", "rng_state": "[1,2,3,4]", "model_config": "{\"d\":\"4\"}"}
put("safetensors", "checkpoint", safetensors(model + optim, meta))
put("safetensors", "model_only", safetensors(model, {"format": "pt"}))
meta_v1 = dict(meta, format_version="1")
put("safetensors", "checkpoint_v1", safetensors(
    [(n, d, [s[0], (len(r) // 4) // s[0]], r) for n, d, s, r in model] + optim, meta_v1))
put("safetensors", "ranks", safetensors([("s", "F64", [], struct.pack("<d", 2.5)),
                                         ("e", "F32", [0, 5], b""),
                                         ("i", "I64", [2], struct.pack("<qq", -1, 7)),
                                         ("u", "U8", [1, 2, 1, 1], b"\x01\x02")]))
put("safetensors", "nan", safetensors([(n, d, s, r if n != "fc.bias" else f32(float("nan"), 1)) for n, d, s, r in model]
                                      + optim, meta))
put("safetensors", "bad_step", safetensors(model + optim, dict(meta, optimizer_step="-1")))
# A number beyond double's range: nlohmann reports it as out_of_range, not parse_error (a fuzzer find).
put("safetensors", "number_overflow",
    safetensors(model + optim, meta, edit=lambda t: t.replace(b'"shape":[2,3]', b'"shape":[2e400,3]', 1)))


def text_input(split, window, body):  # the fuzz_text_corpus input layout: split byte, window byte, file
    return bytes([split, window]) + body


prose = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n".encode()
put("text_corpus", "prose", text_input(0x11, 7, prose * 3))  # 1/16 validation, 1/16 test, T = 8
put("text_corpus", "utf8", text_input(0x22, 3, "Grüße, 世界! ∂β/∂z\n".encode() * 4))
put("text_corpus", "binary", text_input(0x00, 63, bytes(range(256)) + bytes([0, 255, 0x1f, 0x8b])))
put("text_corpus", "gzip_magic", text_input(0x10, 1, gz(prose)))  # kept as bytes, never inflated
put("text_corpus", "too_short_split", text_input(0x33, 9, prose[:40]))  # held-out parts shorter than T + 1
put("text_corpus", "no_training_bytes", text_input(0x44, 0, b"ab"))  # 1/4 of 2 bytes rounds up twice
put("text_corpus", "fractions_sum_one", text_input(0x88, 0, b"abcd"))  # 1/2 + 1/2: fractions refused
put("text_corpus", "one_byte", text_input(0x00, 0, b"x"))
put("text_corpus", "empty", text_input(0x00, 0, b""))


def token_input(vocab_shift, cut, body):  # the fuzz_token_files input layout: vocab byte, cut byte, file
    return bytes([vocab_shift, cut]) + body


def llmc_shard(tokens, magic=20240520, version=1, count=None):
    header = struct.pack("<3i", magic, version, len(tokens) if count is None else count) + bytes(1012)
    return header + struct.pack("<%dH" % len(tokens), *tokens)


gpt2 = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 50256, 40, 0, 255, 256]
flat = struct.pack("<%dH" % len(gpt2), *gpt2)
put("token_files", "nanogpt_flat", token_input(8, 0, flat))  # vocab 65536
put("token_files", "llmc_shard", token_input(8, 0, llmc_shard(gpt2)))
put("token_files", "two_shards", token_input(8, 30, flat + llmc_shard(gpt2)))  # cut after the flat file's 30 bytes
put("token_files", "token_over_vocab", token_input(0, 0, flat))  # vocab 256: 464 is refused
put("token_files", "bad_version", token_input(8, 0, llmc_shard(gpt2, version=2)))
put("token_files", "count_larger", token_input(8, 0, llmc_shard(gpt2, count=16)))
put("token_files", "truncated_header", token_input(8, 0, llmc_shard(gpt2)[:600]))
put("token_files", "odd_size", token_input(8, 0, flat + b"\x01"))
put("token_files", "llama3_magic", token_input(8, 0, llmc_shard(gpt2, magic=20240801, version=7)))


# The tokenizer's files (fuzz_tokenizer input layout: form byte, then tokenizer.json, or u16 LE length of
# the first file, the first file and the second), from the fixture tokenizer tests/fixtures/bpe.
FIXTURE = os.path.join(HERE, "..", "fixtures", "bpe")
with open(os.path.join(FIXTURE, "vocab.json"), encoding="utf-8") as f:
    bpe_vocab = json.load(f)
with open(os.path.join(FIXTURE, "merges.txt"), encoding="utf-8") as f:
    bpe_merges = [line for line in f.read().split("\n")[1:] if line]


def tokenizer_pair(form, vocab, merges_text):
    first = json.dumps(vocab, ensure_ascii=False, separators=(",", ":")).encode()
    return bytes([form]) + struct.pack("<H", len(first)) + first + merges_text.encode()


def tokenizer_json(vocab, merges, added=("<|endoftext|>",), edit=None):
    doc = {"version": "1.0", "added_tokens": [{"id": vocab[a], "content": a, "special": True} for a in added],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "vocab": vocab, "merges": merges}}
    if edit is not None:
        edit(doc)
    return bytes([0]) + json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


merges_txt = "#version: 0.2\n" + "\n".join(bpe_merges) + "\n"
put("tokenizer", "vocab_merges", tokenizer_pair(1, bpe_vocab, merges_txt))
put("tokenizer", "encoder_vocab_bpe", tokenizer_pair(2, bpe_vocab, merges_txt.replace("\n", "\r\n")))
put("tokenizer", "tokenizer_json", tokenizer_json(bpe_vocab, bpe_merges))
put("tokenizer", "tokenizer_json_pairs", tokenizer_json(bpe_vocab, [m.split(" ") for m in bpe_merges]))
put("tokenizer", "merge_not_in_vocab", tokenizer_pair(1, bpe_vocab, merges_txt + "x y\n"))
put("tokenizer", "missing_byte", tokenizer_pair(1, {k: v for k, v in bpe_vocab.items() if v != 65}, merges_txt))
put("tokenizer", "duplicate_id", tokenizer_pair(2, dict(bpe_vocab, zz=3), merges_txt))
put("tokenizer", "huge_id", tokenizer_pair(1, dict(bpe_vocab, zz=2147483646), merges_txt))
put("tokenizer", "added_beyond_vocab", tokenizer_json(bpe_vocab, bpe_merges, edit=lambda d: d["added_tokens"].append(
    {"id": 300, "content": "<|pad|>", "special": True})))
put("tokenizer", "normalizer", tokenizer_json(bpe_vocab, bpe_merges, edit=lambda d: d.update(normalizer={"type": "NFC"})))

# fuzz_authors_config: a reader byte (0..5 the variants baseline, dv1, cc, cc-ec, tc, tc-ec; 6 the shard
# index), then the file: the committed fixtures' config.json (tests/fixtures/authors), and near misses.
AUTHORS = os.path.join(HERE, "..", "fixtures", "authors")
for reader, variant in enumerate(["baseline", "dv1", "cc", "cc-ec", "tc", "tc-ec"]):
    with open(os.path.join(AUTHORS, variant, "config.json"), "rb") as f:
        put("authors_config", variant, bytes([reader]) + f.read())
with open(os.path.join(AUTHORS, "cc-ec+attn", "config.json"), "rb") as f:
    put("authors_config", "cc-ec+attn", bytes([3]) + f.read())
put("authors_config", "sparse", bytes([1]) + b'{"vocab_size": 31, "hidden_size": 12, "num_attention_heads": 2}')
put("authors_config", "deep", bytes([1]) + b'{"vocab_size": ' + b"[" * 200 + b"]" * 200 + b"}")
put("authors_config", "index", bytes([6]) + json.dumps({"metadata": {"total_size": 96}, "weight_map": {
    "transformer.wte.weight": "model-00001-of-00002.safetensors",
    "ln_f.weight": "model-00002-of-00002.safetensors"}}).encode())
put("authors_config", "index_outside", bytes([6]) + b'{"weight_map": {"a": "../b.safetensors"}}')
