// Tests of the authors' model folders (train/authors_model.hpp, train/authors_config.hpp) against reference
// vectors computed by the authors' own code (tests/fixtures/authors, written by tools/authors_reference.py):
// each variant loads into DeltaLM<double> and DeltaLM<float> with the same logits, loss and gradients; a
// folder ddl writes reads back bit for bit; every refusal names what it refuses. The last test runs their
// code on folders ddl wrote (DDL_AUTHORS_DIR: the folder of their model/ package; skipped, exit 77, without).
#include "eigen_guard.hpp"  // first: live allocation checks even with NDEBUG

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "torch_runner.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/io/safetensors.hpp"
#include "ddl/train/authors_model.hpp"

#include <sys/stat.h>  // mkfifo

namespace test_authors_model {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl_test::contains;

namespace {

// The six variants at their defaults and option cases, all written by tools/authors_reference.py: +options
// (Mapped fields off their defaults: dv 3, kernels, eps_k, the value scale, rope_base, no QK-norm, the read
// init) and +attn (their attention options: head_dim other than hidden / heads, rope_ratio, output gate with
// o_norm and rms_norm_eps or with subln, using_groupnorm, k / v shift, q / k / v activations) and +delta
// (their Delta-write and init options: value without sigmoid, constant value under both names, two-layer
// gate, beta init, init stds, TC and EC kernels that differ, TC read init).
const std::vector<std::string> kVariants = {"baseline",         "dv1",         "cc",           "cc-ec",
                                            "tc",               "tc-ec",       "baseline+options", "dv1+options",
                                            "cc-ec+options",    "tc-ec+options", "baseline+attn", "dv1+attn",
                                            "cc-ec+attn",       "cc-ec+delta", "tc-ec+delta", "dv1+delta"};
// "cc-ec+options" -> "cc-ec"
std::string variantOf(const std::string& fixtureName) { return fixtureName.substr(0, fixtureName.find('+')); }

std::string fixture(const std::string& variant) { return std::string(DDL_TEST_FIXTURES) + "/authors/" + variant; }

// The reference of one variant: ids (B, T), targets, logits (B, T*V) as written, loss, and the reader for
// the gradients "grad.<their name>".
struct Reference {
  Index B = 0, T = 0;
  std::vector<int> ids, targets;
  MatX<double> logits;
  double loss = 0;
  std::string path;
};

Reference readReference(const std::string& variant) {
  Reference r;
  r.path = fixture(variant) + "/reference.safetensors";
  ddl::SafetensorsReader in(r.path);
  const MatX<std::int64_t> ids = in.readAny<std::int64_t>("ids"), targets = in.readAny<std::int64_t>("targets");
  r.B = ids.rows();
  r.T = ids.cols();
  for (Index b = 0; b < r.B; ++b)
    for (Index t = 0; t < r.T; ++t) {
      r.ids.push_back(static_cast<int>(ids(b, t)));
      r.targets.push_back(static_cast<int>(targets(b, t)));
    }
  r.logits = in.readAny<double>("logits");
  r.loss = in.readAny<double>("loss")(0, 0);
  return r;
}

double relErr(const MatX<double>& a, const MatX<double>& ref) {
  REQUIRE(a.rows() == ref.rows());
  REQUIRE(a.cols() == ref.cols());
  const double scale = std::max(ref.cwiseAbs().maxCoeff(), 1e-300);
  return (a - ref).cwiseAbs().maxCoeff() / scale;
}

// Loads the fixture of `variant` (or the folder `dir` instead, against the fixture's reference) into
// DeltaLM<S>, runs forward and backward of the mean cross-entropy and returns the worst relative error over
// logits, loss and every gradient.
template <class S>
double worstError(const std::string& variant, std::string& worstWhat, const std::string& dir = "") {
  const Reference ref = readReference(variant);
  ddl::DeltaLM<S> lm = ddl::loadAuthorsModel<S>(dir.empty() ? fixture(variant) : dir);
  ddl::TokenBatch batch{ref.ids, ddl::TokenLayout::sequence(ref.B, ref.T)};
  MatX<S> logits;
  lm.forward(batch, logits);
  const Index V = lm.config().vocab, N = ref.B * ref.T;
  MatX<double> asTheirs(ref.B, ref.T * V);  // [B, T, V] row-major as the file holds it
  for (Index n = 0; n < N; ++n)
    for (Index v = 0; v < V; ++v) asTheirs(n / ref.T, (n % ref.T) * V + v) = static_cast<double>(logits(v, n));
  double worst = relErr(asTheirs, ref.logits);
  worstWhat = "logits";
  MatX<S> dLogits(V, N);
  double loss = 0;
  for (Index n = 0; n < N; ++n) {
    const S m = logits.col(n).maxCoeff();
    const S sum = (logits.col(n).array() - m).exp().sum();
    loss += static_cast<double>(std::log(sum) + m - logits(ref.targets[static_cast<std::size_t>(n)], n));
    dLogits.col(n) = (logits.col(n).array() - m).exp() / sum / static_cast<S>(N);
    dLogits(ref.targets[static_cast<std::size_t>(n)], n) -= S(1) / static_cast<S>(N);
  }
  loss /= static_cast<double>(N);
  const double lossErr = std::abs(loss - ref.loss) / std::abs(ref.loss);
  if (lossErr > worst) {
    worst = lossErr;
    worstWhat = "loss";
  }
  lm.backward(dLogits);
  ddl::SafetensorsReader in(ref.path);
  Index checked = 0;
  lm.visitParams("", [&](const std::string& name, ddl::Param<S>& p) {
    const std::string theirs = ddl::authorsTensorName(name, lm.config());
    const double e = relErr(p.grad.template cast<double>(), in.readAny<double>("grad." + theirs));
    ++checked;
    if (e > worst) {
      worst = e;
      worstWhat = "grad." + theirs;
    }
  });
  std::size_t grads = 0;
  for (const auto& t : in.header().tensors) grads += t.name.rfind("grad.", 0) == 0;
  CHECK(static_cast<std::size_t>(checked) == grads);  // every gradient of theirs has its ddl parameter
  return worst;
}

// A safetensors tensor as raw bytes, for writing files ddl's writer would not (BF16, I32, edits).
struct RawTensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::vector<char> bytes;
};

std::vector<RawTensor> readRaw(const std::string& path) {
  std::ifstream in;
  const ddl::SafetensorsHeader h = ddl::readSafetensorsHeader(path, in);
  std::vector<RawTensor> out;
  for (const auto& t : h.tensors) {
    RawTensor r{t.name, ddl::dtypeName(t.dtype), t.shape, std::vector<char>(t.end - t.begin)};
    in.seekg(static_cast<std::streamoff>(h.dataStart() + t.begin));
    in.read(r.bytes.data(), static_cast<std::streamsize>(r.bytes.size()));
    REQUIRE(in.good());
    out.push_back(std::move(r));
  }
  return out;
}

void writeRaw(const std::string& path, const std::vector<RawTensor>& tensors) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    j[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = j.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream os(path, std::ios::binary | std::ios::trunc);
  char len[8];
  ddl::detail::writeU64LE(text.size(), len);
  os.write(len, 8);
  os << text;
  for (const auto& t : tensors) os.write(t.bytes.data(), static_cast<std::streamsize>(t.bytes.size()));
  REQUIRE(os.good());
}

nlohmann::json readJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}
void writeJson(const std::string& path, const nlohmann::json& j) {
  std::ofstream os(path, std::ios::trunc);
  os << j.dump(2);
  REQUIRE(os.good());
}

// A copy of a fixture folder under the test directory with its config and tensors edited.
std::string editedCopy(const std::string& name, const std::string& variant,
                       const std::function<void(nlohmann::json&)>& editConfig,
                       const std::function<void(std::vector<RawTensor>&)>& editTensors) {
  const std::string dir = ddl_test::freshTestDir("authors_" + name);
  nlohmann::json config = readJson(fixture(variant) + "/config.json");
  std::vector<RawTensor> tensors = readRaw(fixture(variant) + "/model.safetensors");
  if (editConfig) editConfig(config);
  if (editTensors) editTensors(tensors);
  writeJson(dir + "/config.json", config);
  writeRaw(dir + "/model.safetensors", tensors);
  return dir;
}

RawTensor* findRaw(std::vector<RawTensor>& ts, const std::string& name) {
  for (auto& t : ts)
    if (t.name == name) return &t;
  FAIL("no tensor " << name);
  return nullptr;
}

template <class S>
std::string loadError(const std::string& dir) {
  return ddl_test::thrownMessage<ddl::Error>([&] { ddl::loadAuthorsModel<S>(dir); });
}

// A one-block DeltaLM the authors' folders can hold (d 8, 2 heads, their MLP width), for the refusals.
ddl::DeltaLMConfig tinyAuthorsConfig() {
  ddl::DeltaLMConfig c;
  c.vocab = 17;
  c.d = 8;
  c.heads = 2;
  c.depth = 1;
  c.context = 8;
  c.hidden = ddl::authorsMlpWidth(8);
  return c;
}

template <class S>
std::vector<MatX<S>> paramsOf(ddl::DeltaLM<S>& lm) {
  std::vector<MatX<S>> out;
  lm.visitParams("", [&](const std::string&, ddl::Param<S>& p) { out.push_back(p.value); });
  return out;
}

}  // namespace

TEST_CASE("authors' variants load into DeltaLM<double>: logits, loss and every gradient within 1e-10") {
  for (const auto& v : kVariants) {
    std::string what;
    const double e = worstError<double>(v, what);
    std::cout << "authors " << v << " double: worst relative error " << e << " (" << what << ")\n";
    INFO(v << ": " << what);
    CHECK(e <= 1e-10);
  }
}

TEST_CASE("authors' variants load into DeltaLM<float>: logits, loss and every gradient within 1e-4") {
  for (const auto& v : kVariants) {
    std::string what;
    const double e = worstError<float>(v, what);
    std::cout << "authors " << v << " float: worst relative error " << e << " (" << what << ")\n";
    INFO(v << ": " << what);
    CHECK(e <= 1e-4);
  }
}

TEST_CASE("authors' folders: the variant and configuration read from a fixture are the ones written") {
  const auto lm = ddl::loadAuthorsModel<double>(fixture("tc-ec"));
  CHECK(lm.config().variant() == "tc-ec");
  CHECK(lm.config().dv == 4);
  CHECK(lm.config().d == 12);
  CHECK(lm.config().heads == 2);
  CHECK(lm.config().depth == 2);
  CHECK(lm.config().context == 16);
  CHECK(lm.config().resolvedHidden() == 32);
  CHECK(ddl::loadAuthorsModel<double>(fixture("baseline")).config().block.residual.residual ==
        ddl::ResidualKind::Additive);
  CHECK(ddl::loadAuthorsModel<double>(fixture("cc")).config().variant() == "cc");
  const ddl::DeltaLMConfig o = ddl::loadAuthorsModel<double>(fixture("cc-ec+options")).config();
  CHECK(o.variant() == "cc-ec");
  CHECK(o.dv == 3);
  CHECK(o.depth == 1);
  CHECK(o.block.compressorKernel == 3);
  CHECK(o.convKernel == 2);
  CHECK(o.block.residual.epsK == 0.01);
  CHECK(o.block.residual.valueScale == 2.5);
  CHECK(o.ropeBase == 500.0);
  CHECK(!o.qkNorm);
  CHECK(o.block.compressorReadInit.value_or(0) == 0.3);
  CHECK(ddl::loadAuthorsModel<double>(fixture("tc-ec+options")).config().convKernel == 2);
}

TEST_CASE("authors' attention options: read from config.json, the eps of each norm as their code takes it") {
  const ddl::DeltaLMConfig c = ddl::loadAuthorsModel<double>(fixture("cc-ec+attn")).config();
  const ddl::AttentionOptions& a = c.attention;
  CHECK(c.variant() == "cc-ec");
  CHECK(a.headDim == 5);  // hidden 12 / 2 heads would be 6
  CHECK(c.headDim() == 5);
  CHECK(a.ropeRatio == 0.7);
  CHECK(ddl::AttentionOptions::ropeDim(5, a.ropeRatio) == 2);  // int(3.5) = 3, rounded down to even
  CHECK(a.outputGate);
  CHECK(!a.groupNorm);
  CHECK(a.outputNormEps == 1e-3);  // their o_norm: rms_norm_eps
  CHECK(a.qkNormEps == 1e-5);
  CHECK(c.block.normEps == 1e-5);  // their DDL files fix ln_1, ln_2, ln_f at 1e-5
  CHECK(c.finalNormEps == 1e-5);
  CHECK(a.kShift);
  CHECK(a.vShift);
  CHECK(a.qActivation == ddl::QkvActivation::SiLU);
  CHECK(a.kActivation == ddl::QkvActivation::EluPlus1);
  CHECK(a.vActivation == ddl::QkvActivation::ReLU);
  const ddl::DeltaLMConfig g = ddl::loadAuthorsModel<double>(fixture("dv1+attn")).config();
  CHECK(g.attention.groupNorm);
  CHECK(g.attention.outputGate);
  CHECK(g.attention.outputNormEps == 1e-5);  // subln: fixed
  CHECK(g.attention.headDim == 4);
  CHECK(g.attention.ropeRatio == 0.5);
  CHECK(!g.attention.kShift);
  CHECK(g.attention.vShift);
  CHECK(g.attention.vActivation == ddl::QkvActivation::SiLU);
  const ddl::DeltaLMConfig b = ddl::loadAuthorsModel<double>(fixture("baseline+attn")).config();
  CHECK(b.block.residual.residual == ddl::ResidualKind::Additive);
  CHECK(b.block.normEps == 1e-4);  // gpt_base.py: ln_1, ln_2, ln_f take rms_norm_eps
  CHECK(b.finalNormEps == 1e-4);
  CHECK(b.attention.groupNorm);
  CHECK(!b.attention.outputGate);
  CHECK(b.attention.outputNormEps == 1e-5);
  CHECK(b.attention.headDim == 8);
  CHECK(b.attention.ropeRatio == 0.0);
  CHECK(b.attention.kActivation == ddl::QkvActivation::ReLU);
  // The default head width reads as ddl's 0 (d / heads).
  CHECK(ddl::loadAuthorsModel<double>(fixture("cc-ec")).config().attention.headDim == 0);
  // Each derived eps matters: with rms_norm_eps at 1e-5 the same weights no longer give their numbers.
  for (const char* v : {"cc-ec+attn", "baseline+attn"}) {
    INFO(v);
    const std::string dir = editedCopy(std::string("eps_") + v, v, [](nlohmann::json& j) { j.erase("rms_norm_eps"); },
                                       nullptr);
    std::string what;
    CHECK(worstError<double>(v, what, dir) > 1e-8);
  }
  // So does each option without tensors of its own: at its default, the same weights give other numbers
  // (the shifts, the gate and the norms change the tensors: "authors' tensors" below).
  for (const char* key : {"q_activation", "k_activation", "v_activation", "rope_ratio"}) {
    INFO(key);
    const std::string dir = editedCopy(std::string("off_") + key, "cc-ec+attn", [key](nlohmann::json& j) {
      j[key] = std::string(key) == "rope_ratio" ? nlohmann::json(1.0) : nlohmann::json(nullptr);
    }, nullptr);
    std::string what;
    CHECK(worstError<double>("cc-ec+attn", what, dir) > 1e-8);
  }
}

TEST_CASE("authors' Delta and init options: read from config.json as their code reads them") {
  const ddl::DeltaLMConfig c = ddl::loadAuthorsModel<double>(fixture("cc-ec+delta")).config();
  CHECK(c.block.residual.value == ddl::ValueKind::LinearOnInput);  // ddl_v_sigmoid false
  CHECK(c.block.residual.gate == ddl::GateKind::TwoLayerTanh);     // ddl_beta_single_linear false
  CHECK(c.block.residual.gateHidden == 5);
  CHECK(c.block.residual.beta0 == 0.5);
  CHECK(c.embeddingInitStd == 0.05);
  CHECK(c.hiddenInitStdFactor == 0.7);
  const ddl::DeltaLMConfig t = ddl::loadAuthorsModel<double>(fixture("tc-ec+delta")).config();
  CHECK(t.variant() == "tc-ec");
  CHECK(t.block.residual.value == ddl::ValueKind::Constant);
  CHECK(t.block.residual.valueConstant == 1.5);
  CHECK(t.block.residual.gate == ddl::GateKind::Linear);
  CHECK(t.block.residual.beta0 == 1.5);
  CHECK(t.convKernel == 3);
  CHECK(t.ecKernel() == 2);
  CHECK(t.block.compressorReadInit.value_or(0) == 0.3);
  const ddl::DeltaLMConfig v = ddl::loadAuthorsModel<double>(fixture("dv1+delta")).config();
  CHECK(v.block.residual.value == ddl::ValueKind::Constant);  // their dv = 1 name: ddl_v_dim1_constant
  CHECK(v.block.residual.valueConstant == 1.5);
  CHECK(v.block.residual.gate == ddl::GateKind::TwoLayerTanh);
  CHECK(v.block.residual.gateHidden == 3);
  // ddl_beta_init is clamped to [0, 2] as their code clamps it.
  CHECK(ddl::loadAuthorsModel<double>(editedCopy("beta_high", "dv1", [](nlohmann::json& j) { j["ddl_beta_init"] = 5.0; },
                                                 nullptr)).config().block.residual.beta0 == 2.0);
  CHECK(ddl::loadAuthorsModel<double>(editedCopy("beta_low", "dv1", [](nlohmann::json& j) { j["ddl_beta_init"] = -1; },
                                                 nullptr)).config().block.residual.beta0 == 0.0);
  // Each value-changing option matters: at its default the same weights give other numbers.
  const auto off = [](const char* name, const char* variant, const std::function<void(nlohmann::json&)>& edit) {
    std::string what;
    return worstError<double>(variant, what, editedCopy(std::string("delta_off_") + name, variant, edit, nullptr));
  };
  CHECK(off("sigmoid", "cc-ec+delta", [](nlohmann::json& j) { j["ddl_v_sigmoid"] = true; }) > 1e-8);
  CHECK(off("constant", "tc-ec+delta", [](nlohmann::json& j) { j["ddl_v_constant_value"] = 2.0; }) > 1e-8);
  CHECK(off("dim1_constant", "dv1+delta", [](nlohmann::json& j) { j["ddl_v_dim1_constant_value"] = 2.0; }) > 1e-8);
  // Refusals name the field.
  std::string m = loadError<double>(editedCopy("beta_hidden", "cc-ec+delta", [](nlohmann::json& j) {
    j["ddl_beta_hidden_size"] = 0;
  }, nullptr));
  CHECK(contains(m, "field 'ddl_beta_hidden_size' = 0: expected an integer in [1, "));
  m = loadError<double>(editedCopy("beta_init_type", "dv1", [](nlohmann::json& j) { j["ddl_beta_init"] = "1"; }, nullptr));
  CHECK(contains(m, "field 'ddl_beta_init' = \"1\": expected a finite number"));
  m = loadError<double>(editedCopy("v_constant_type", "cc-ec", [](nlohmann::json& j) { j["ddl_v_constant"] = 1; }, nullptr));
  CHECK(contains(m, "field 'ddl_v_constant' = 1: expected true or false"));
  m = loadError<double>(editedCopy("v_dim1_value_type", "dv1", [](nlohmann::json& j) {
    j["ddl_v_dim1_constant_value"] = "2";
  }, nullptr));  // the reader ddl_v_constant_value shares names the field by the name it was read under
  CHECK(contains(m, "field 'ddl_v_dim1_constant_value' = \"2\": expected a finite number"));
  m = loadError<double>(editedCopy("init_std", "cc-ec", [](nlohmann::json& j) { j["embedding_init_std"] = -0.1; }, nullptr));
  CHECK(contains(m, "field 'embedding_init_std' = -0.1: expected a finite number >= 0"));
  m = loadError<double>(editedCopy("dim1_in_cc", "cc-ec", [](nlohmann::json& j) { j["ddl_v_dim1_constant"] = true; }, nullptr));
  CHECK(contains(m, "field 'ddl_v_dim1_constant' = true is not supported"));
  CHECK(contains(m, "not read by the cc-ec model"));
  m = loadError<double>(editedCopy("two_layer", "cc-ec", [](nlohmann::json& j) { j["ddl_beta_single_linear"] = false; }, nullptr));
  CHECK(contains(m, "missing tensor \"transformer.h.0.ddl_attn.beta_in.weight\" (ddl's blocks.0.attn_delta.gate.fc1.weight)"));
  m = loadError<double>(editedCopy("v_proj", "tc-ec+delta", nullptr, [](std::vector<RawTensor>& ts) {
    ts.erase(std::remove_if(ts.begin(), ts.end(), [](const RawTensor& r) {
      return r.name == "transformer.h.0.ddl_mlp.v_proj.bias";
    }), ts.end());
  }));
  CHECK(contains(m, "missing tensor \"transformer.h.0.ddl_mlp.v_proj.bias\""));
  m = loadError<double>(editedCopy("ec_kernel", "tc-ec+delta", [](nlohmann::json& j) {
    j["input_embed_shortconv_kernel_size"] = 3;
  }, nullptr));
  CHECK(contains(m, "tensor \"input_embed.conv.weight\" has shape [48, 1, 2], expected [48, 1, 3]"));
}

TEST_CASE("authors' folders: write then read is bit-exact, in the model's scalar and in F32") {
  for (const auto& v : kVariants) {
    INFO(v);
    auto lm = ddl::loadAuthorsModel<double>(fixture(v));
    const std::string dir = ddl_test::freshTestDir("authors_roundtrip_" + v);
    ddl::saveAuthorsModel(dir, lm, /*float32=*/false);
    auto back = ddl::loadAuthorsModel<double>(dir);
    CHECK(back.config().toKeyValues() == lm.config().toKeyValues());
    CHECK(ddl_test::bitIdentical(paramsOf(lm), paramsOf(back)));
    // The file holds what the fixture holds: their names, their shapes, the tied head once.
    std::vector<std::string> written, fixtureNames;
    for (const auto& t : readRaw(dir + "/model.safetensors")) written.push_back(t.name + ddl::shapeString(t.shape));
    for (const auto& t : readRaw(fixture(v) + "/model.safetensors")) fixtureNames.push_back(t.name + ddl::shapeString(t.shape));
    std::sort(written.begin(), written.end());
    std::sort(fixtureNames.begin(), fixtureNames.end());
    CHECK(written == fixtureNames);
    // config.json: every field the fixture (their GPTConfig) has, with the same values.
    nlohmann::json mine = readJson(dir + "/config.json"), theirs = readJson(fixture(v) + "/config.json");
    CHECK(mine.size() == theirs.size());
    for (auto it = theirs.begin(); it != theirs.end(); ++it) {
      INFO(it.key());
      CHECK(mine.contains(it.key()));
      if (mine.contains(it.key())) CHECK(mine[it.key()] == it.value());
    }
  }
  auto f = ddl::loadAuthorsModel<float>(fixture("cc-ec"));
  const std::string dir = ddl_test::freshTestDir("authors_roundtrip_f32");
  ddl::saveAuthorsModel(dir, f);
  CHECK(readRaw(dir + "/model.safetensors")[0].dtype == "F32");
  CHECK(readJson(dir + "/config.json")["torch_dtype"] == "float32");
  auto back = ddl::loadAuthorsModel<float>(dir);
  CHECK(ddl_test::bitIdentical(paramsOf(f), paramsOf(back)));
}

TEST_CASE("authors' config.json: unknown fields, unsupported values and wrong types are refused by name") {
  const auto cfg = [](const char* name, const std::function<void(nlohmann::json&)>& edit) {
    return loadError<double>(editedCopy(name, "cc-ec", edit, nullptr));
  };
  std::string m = cfg("unknown", [](nlohmann::json& j) { j["use_fancy_thing"] = true; });
  CHECK(contains(m, "ddl::authorsConfigToDeltaLM"));
  CHECK(contains(m, "config.json"));
  CHECK(contains(m, "unknown field 'use_fancy_thing' = true"));
  m = cfg("output_gate", [](nlohmann::json& j) { j["use_output_gate"] = 1; });
  CHECK(contains(m, "field 'use_output_gate' = 1: expected true or false"));
  m = cfg("dropout", [](nlohmann::json& j) { j["dropout"] = 0.1; });
  CHECK(contains(m, "field 'dropout' = 0.1 is not supported"));
  m = cfg("activation", [](nlohmann::json& j) { j["q_activation"] = "gelu"; });
  CHECK(contains(m, "field 'q_activation' = \"gelu\": expected null, \"identity\", \"silu\", \"relu\" or \"elu+1\""));
  m = cfg("activation_elu", [](nlohmann::json& j) { j["v_activation"] = "elu"; });  // their Literal refuses it
  CHECK(contains(m, "field 'v_activation' = \"elu\": expected null"));
  m = cfg("activation_type", [](nlohmann::json& j) { j["k_activation"] = 1; });
  CHECK(contains(m, "field 'k_activation' = 1: expected null"));
  m = cfg("rope_ratio", [](nlohmann::json& j) { j["rope_ratio"] = 1.5; });
  CHECK(contains(m, "field 'rope_ratio' = 1.5: expected a number in [0, 1]"));
  m = cfg("rope_ratio_neg", [](nlohmann::json& j) { j["rope_ratio"] = -0.5; });
  CHECK(contains(m, "field 'rope_ratio' = -0.5: expected a finite number >= 0"));
  m = cfg("rms_norm_eps", [](nlohmann::json& j) { j["rms_norm_eps"] = 1e-6; });  // no output gate: unread
  CHECK(contains(m, "field 'rms_norm_eps' = 1e-06 is not supported (accepted: only its default 1e-05; the cc-ec "
                    "model reads it only for the output gate's o_norm"));
  m = loadError<double>(editedCopy("rms_norm_eps_subln", "dv1+attn", [](nlohmann::json& j) { j["rms_norm_eps"] = 1e-6; }, nullptr));
  CHECK(contains(m, "field 'rms_norm_eps' = 1e-06 is not supported"));  // gate with subln: fixed 1e-5
  m = cfg("rms_norm_eps_type", [](nlohmann::json& j) { j["rms_norm_eps"] = "1e-6"; });
  CHECK(contains(m, "field 'rms_norm_eps' = \"1e-6\": expected a finite number >= 0"));
  m = cfg("head_dim_zero", [](nlohmann::json& j) { j["head_dim"] = 0; });
  CHECK(contains(m, "field 'head_dim' = 0: expected an integer in [1, "));
  m = cfg("type", [](nlohmann::json& j) { j["hidden_size"] = "16"; });
  CHECK(contains(m, "field 'hidden_size' = \"16\": expected an integer"));
  m = cfg("bool", [](nlohmann::json& j) { j["use_qk_rmsnorm"] = 1; });
  CHECK(contains(m, "field 'use_qk_rmsnorm' = 1: expected true or false"));
  m = cfg("eps", [](nlohmann::json& j) { j["ddl_k_eps"] = -1; });
  CHECK(contains(m, "field 'ddl_k_eps' = -1: expected a finite number >= 0"));
  m = cfg("rope_base", [](nlohmann::json& j) { j["rope_base"] = 0; });
  CHECK(contains(m, "field 'rope_base' = 0: expected a finite number > 0"));
  m = cfg("read_init", [](nlohmann::json& j) { j["ddl_state_read_init"] = "x"; });
  CHECK(contains(m, "field 'ddl_state_read_init' = \"x\": expected null or a finite number"));
  m = cfg("cc_kernel", [](nlohmann::json& j) { j["ddl_state_shortconv_kernel_size"] = 5; });
  CHECK(contains(m, "ddl_state_shortconv_kernel_size' = 5 must equal ddl_value_channels = 4"));
  m = loadError<double>(editedCopy("dv1_field", "dv1", [](nlohmann::json& j) { j["ddl_value_channels"] = 8; }, nullptr));
  CHECK(contains(m, "field 'ddl_value_channels' = 8 is not supported"));
  CHECK(contains(m, "not read by the dv1 model"));
  m = cfg("not_object", [](nlohmann::json& j) { j = nlohmann::json::array(); });
  CHECK(contains(m, "expected a JSON object"));
  // A hand-written cc-ec config without the kernel takes dv, as their GPTConfig does.
  CHECK(ddl::loadAuthorsModel<double>(editedCopy("cc_ec_kernel", "cc-ec+options", [](nlohmann::json& j) {
          j.erase("ddl_state_shortconv_kernel_size");
        }, nullptr)).config().block.compressorKernel == 3);
  // Hugging Face's bookkeeping keys and mapped options are accepted.
  const std::string ok = editedCopy("bookkeeping", "cc-ec", [](nlohmann::json& j) {
    j["transformers_version"] = "4.57.0";
    j["_name_or_path"] = "somewhere";
    j["kv_cache_slot_size"] = 128;
    j["ddl_state_read_init"] = 0.3;
  }, nullptr);
  CHECK(ddl::loadAuthorsModel<double>(ok).config().block.compressorReadInit.value_or(0) == 0.3);
  // Broken files.
  const std::string broken = editedCopy("broken_json", "dv1", nullptr, nullptr);
  { std::ofstream(broken + "/config.json", std::ios::trunc) << "{\"vocab_size\": "; }
  CHECK(contains(loadError<double>(broken), "config.json: invalid JSON"));
  std::filesystem::remove(broken + "/config.json");
  CHECK(contains(loadError<double>(broken), "config.json: cannot open"));
}

TEST_CASE("authors' tensors: missing, unexpected, misshapen, unconvertible and untied tensors are refused") {
  std::string m = loadError<double>(editedCopy("missing", "cc", nullptr, [](std::vector<RawTensor>& ts) {
    ts.erase(std::remove_if(ts.begin(), ts.end(), [](const RawTensor& t) { return t.name == "ln_f.weight"; }), ts.end());
  }));
  CHECK(contains(m, "ddl::loadAuthorsModel"));
  CHECK(contains(m, "missing tensor \"ln_f.weight\" (ddl's norm.weight) of the cc model"));
  m = loadError<double>(editedCopy("unexpected", "cc", nullptr, [](std::vector<RawTensor>& ts) {
    ts.push_back(RawTensor{"transformer.h.0.attn.g_proj.weight", "F64", {2}, std::vector<char>(16)});
  }));
  CHECK(contains(m, "unexpected tensor \"transformer.h.0.attn.g_proj.weight\""));
  CHECK(contains(m, "model.safetensors"));
  m = loadError<double>(editedCopy("shape", "cc", [](nlohmann::json& j) { j["vocab_size"] = 30; }, nullptr));
  CHECK(contains(m, "tensor \"transformer.wte.weight\" has shape [31, 12], expected [30, 12]"));
  // Sizes the file does not back are refused before anything is allocated.
  m = loadError<double>(editedCopy("depth", "cc", [](nlohmann::json& j) { j["num_hidden_layers"] = 100000; }, nullptr));
  CHECK(contains(m, "missing tensor \"transformer.h.2.attn.c_q.weight\" (ddl's blocks.2.attn.q.weight) of the cc model"));
  m = loadError<double>(editedCopy("huge", "tc", [](nlohmann::json& j) {
    j["hidden_size"] = 1 << 22;
    j["head_dim"] = 1 << 21;
    j["vocab_size"] = 1 << 22;
  }, nullptr));
  CHECK(contains(m, "tensor \"transformer.wte.weight\" has shape [31, 12], expected [4194304, 4194304]"));
  // The attention options decide the tensors: head_dim their shapes, a shift or the gate their names.
  m = loadError<double>(editedCopy("head_dim", "cc-ec", [](nlohmann::json& j) { j["head_dim"] = 4; }, nullptr));
  CHECK(contains(m, "tensor \"transformer.h.0.attn.c_q.weight\" has shape [12, 12], expected [8, 12]"));
  m = loadError<double>(editedCopy("k_shift", "cc-ec", [](nlohmann::json& j) { j["use_k_shift"] = true; }, nullptr));
  CHECK(contains(m, "missing tensor \"transformer.h.0.attn.c_k.linear.weight\" (ddl's blocks.0.attn.k.weight)"));
  m = loadError<double>(editedCopy("v_shift_off", "cc-ec+attn", [](nlohmann::json& j) { j["use_v_shift"] = false; }, nullptr));
  CHECK(contains(m, "missing tensor \"transformer.h.0.attn.c_v.weight\" (ddl's blocks.0.attn.v.weight)"));
  m = loadError<double>(editedCopy("gate", "dv1", [](nlohmann::json& j) { j["use_output_gate"] = true; }, nullptr));
  CHECK(contains(m, "missing tensor \"transformer.h.0.attn.g_proj.weight\" (ddl's blocks.0.attn.g.weight)"));
  m = loadError<double>(editedCopy("gate_off", "cc-ec+attn", [](nlohmann::json& j) {
    j["use_output_gate"] = false;
    j.erase("rms_norm_eps");
  }, nullptr));
  CHECK(contains(m, "unexpected tensor \"transformer.h.0.attn.g_proj.weight\""));
  m = loadError<double>(editedCopy("subln", "dv1+attn", [](nlohmann::json& j) { j["using_groupnorm"] = false; }, nullptr));
  CHECK(contains(m, "missing tensor \"transformer.h.0.attn.o_norm.weight\" (ddl's blocks.0.attn.o_norm.weight)"));
  m = loadError<double>(editedCopy("dv", "tc", [](nlohmann::json& j) { j["ddl_value_channels"] = 1000; }, nullptr));
  CHECK(contains(m, "tensor \"readout.read\" has shape [4], expected [1000]"));
  m = loadError<double>(editedCopy("dtype", "cc", nullptr, [](std::vector<RawTensor>& ts) {
    RawTensor* t = findRaw(ts, "ln_f.weight");
    t->dtype = "I64";
  }));
  CHECK(contains(m, "tensor \"ln_f.weight\" has dtype I64, which cannot convert"));
  m = loadError<double>(editedCopy("untied", "dv1", nullptr, [](std::vector<RawTensor>& ts) {
    RawTensor head = *findRaw(ts, "transformer.wte.weight");
    head.name = "lm_head.weight";
    head.bytes[3] ^= 1;
    ts.push_back(head);
  }));
  CHECK(contains(m, "\"lm_head.weight\" differs from \"transformer.wte.weight\""));
  // A head stored as well as the embedding (torch.save keeps both) loads when it is the same.
  const std::string tied = editedCopy("tied", "dv1", nullptr, [](std::vector<RawTensor>& ts) {
    RawTensor head = *findRaw(ts, "transformer.wte.weight");
    head.name = "lm_head.weight";
    ts.push_back(head);
  });
  auto a = ddl::loadAuthorsModel<double>(tied);
  auto b = ddl::loadAuthorsModel<double>(fixture("dv1"));
  CHECK(ddl_test::bitIdentical(paramsOf(a), paramsOf(b)));
  const std::string none = ddl_test::freshTestDir("authors_no_weights");
  std::filesystem::copy_file(fixture("dv1") + "/config.json", none + "/config.json");
  CHECK(contains(loadError<double>(none), "neither model.safetensors nor model.safetensors.index.json"));
}

TEST_CASE("authors' tensors convert from F32, BF16 and F16") {
  // ln_f.weight as F32, BF16 and F16 of values every format holds exactly: 1.5, -0.25, 3, 0.
  const std::vector<float> values = {1.5f, -0.25f, 3.0f, 0.0f};
  const auto edit = [&](const std::string& dtype) {
    return [&values, dtype](std::vector<RawTensor>& ts) {
      RawTensor* t = findRaw(ts, "ln_f.weight");
      const std::size_t n = static_cast<std::size_t>(t->shape[0]);
      t->dtype = dtype;
      t->bytes.clear();
      for (std::size_t i = 0; i < n; ++i) {
        const float v = values[i % values.size()];
        std::uint32_t bits;
        std::memcpy(&bits, &v, 4);
        if (dtype == "F32") {
          t->bytes.insert(t->bytes.end(), reinterpret_cast<const char*>(&v), reinterpret_cast<const char*>(&v) + 4);
          continue;
        }
        std::uint16_t h;
        if (dtype == "BF16") {
          h = static_cast<std::uint16_t>(bits >> 16);
        } else {  // F16 of these normal values: sign, exponent rebiased 127 -> 15, top 10 mantissa bits
          const std::uint32_t sign = bits >> 31, exp = (bits >> 23) & 0xff, man = (bits >> 13) & 0x3ff;
          h = v == 0.0f ? 0 : static_cast<std::uint16_t>(sign << 15 | (exp - 112) << 10 | man);
        }
        t->bytes.push_back(static_cast<char>(h & 0xff));
        t->bytes.push_back(static_cast<char>(h >> 8));
      }
    };
  };
  for (const std::string dtype : {"F32", "BF16", "F16"}) {
    INFO(dtype);
    auto lm = ddl::loadAuthorsModel<double>(editedCopy("dtype_" + dtype, "dv1", nullptr, edit(dtype)));
    lm.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
      if (name != "norm.weight") return;
      for (Index i = 0; i < p.value.rows(); ++i) CHECK(p.value(i, 0) == values[static_cast<std::size_t>(i) % 4]);
    });
  }
}

TEST_CASE("authors' sharded folders: model.safetensors.index.json with its weight_map") {
  const std::string dir = ddl_test::freshTestDir("authors_sharded");
  std::filesystem::copy_file(fixture("tc") + "/config.json", dir + "/config.json");
  const std::vector<RawTensor> all = readRaw(fixture("tc") + "/model.safetensors");
  std::vector<RawTensor> first(all.begin(), all.begin() + static_cast<long>(all.size() / 2));
  std::vector<RawTensor> second(all.begin() + static_cast<long>(all.size() / 2), all.end());
  writeRaw(dir + "/model-00001-of-00002.safetensors", first);
  writeRaw(dir + "/model-00002-of-00002.safetensors", second);
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (const auto& t : first) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : second) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  writeJson(dir + "/model.safetensors.index.json", index);
  auto a = ddl::loadAuthorsModel<double>(dir);
  auto b = ddl::loadAuthorsModel<double>(fixture("tc"));
  CHECK(ddl_test::bitIdentical(paramsOf(a), paramsOf(b)));
  index["weight_map"][first[0].name] = "model-00002-of-00002.safetensors";
  writeJson(dir + "/model.safetensors.index.json", index);
  CHECK(contains(loadError<double>(dir), "is not listed for this file"));
  index["weight_map"][first[0].name] = "../elsewhere.safetensors";
  writeJson(dir + "/model.safetensors.index.json", index);
  CHECK(contains(loadError<double>(dir), "expected a file name inside the folder"));
}

TEST_CASE("authors' folders: a configuration their code has no model for is refused before writing") {
  const ddl::DeltaLMConfig c = tinyAuthorsConfig();
  const auto refused = [&](const ddl::DeltaLMConfig& cfg, const char* name) {
    ddl::DeltaLM<double> lm(cfg);
    const std::string dir = ddl_test::clearedTestPath(std::string("authors_refused_") + name);
    const std::string m = ddl_test::thrownMessage<ddl::Error>([&] { ddl::saveAuthorsModel(dir, lm); });
    CHECK(!std::filesystem::exists(dir));  // nothing written
    return m;
  };
  ddl::DeltaLMConfig u = c;
  u.tiedHead = false;
  CHECK(contains(refused(u, "untied"), "an untied head has no counterpart in the authors' models"));
  ddl::DeltaLMConfig w = c;
  w.block.residual.residual = ddl::ResidualKind::WriteOnly;
  CHECK(contains(refused(w, "write_only"), "residual 'write_only' has no counterpart"));
  ddl::DeltaLMConfig f = c;
  ddl::applyVariant(f, "cc");
  f.block.compressor = ddl::CompressorKind::Free;
  CHECK(contains(refused(f, "free"), "the free CC compressor has no counterpart"));
  ddl::DeltaLMConfig k = c;
  ddl::applyVariant(k, "cc");
  k.block.compressorKernel = 2;
  CHECK(contains(refused(k, "cc_kernel"), "a CC kernel size other than dv has no counterpart"));
  ddl::DeltaLMConfig h = c;
  h.hidden = 20;
  CHECK(contains(refused(h, "hidden"), "a SwiGLU width other than floor(8/3 d)"));
  ddl::DeltaLMConfig p = c;
  ddl::applyPreset(p, "paper");
  CHECK(contains(refused(p, "paper"), "has no counterpart in the authors' models"));
  // The eps their norms fix, and the baseline's one rms_norm_eps.
  ddl::DeltaLMConfig e = c;
  e.attention.qkNormEps = 1e-6;
  CHECK(contains(refused(e, "qk_eps"), "a QK-norm eps other than 1e-5 has no counterpart"));
  ddl::DeltaLMConfig gn = c;
  gn.attention.groupNorm = true;
  gn.attention.outputNormEps = 1e-6;
  CHECK(contains(refused(gn, "subln_eps"), "a using_groupnorm eps other than 1e-5 has no counterpart"));
  ddl::DeltaLMConfig ne = c;
  ne.block.normEps = 1e-6;
  CHECK(contains(refused(ne, "norm_eps"), "a block or final RMSNorm eps other than 1e-5 has no counterpart"));
  ddl::DeltaLMConfig be = c;
  be.block.residual.residual = ddl::ResidualKind::Additive;
  be.block.normEps = 1e-6;
  CHECK(contains(refused(be, "baseline_final_eps"), "a final RMSNorm eps other than the blocks' in the baseline"));
  be.finalNormEps = 1e-6;
  be.attention.outputGate = true;
  CHECK(contains(refused(be, "baseline_gate_eps"), "an output-gate norm eps other than the blocks' in the baseline"));
  // With the attention options on: their fields and tensors, the eps their o_norm takes as rms_norm_eps.
  ddl::DeltaLMConfig at = c;
  ddl::applyVariant(at, "cc");
  at.attention.headDim = 3;
  at.attention.ropeRatio = 0.75;
  at.attention.outputGate = true;
  at.attention.outputNormEps = 1e-4;
  at.attention.kShift = true;
  at.attention.qActivation = ddl::QkvActivation::ReLU;
  at.attention.vActivation = ddl::QkvActivation::EluPlus1;
  at.qkNorm = false;
  at.attention.qkNormEps = 1e-6;  // unread without the QK-norm: not refused, reads back as theirs (1e-5)
  {
    ddl::DeltaLM<double> lmAt(at, 7);
    const std::string dirAt = ddl_test::freshTestDir("authors_fresh_attn");
    ddl::saveAuthorsModel(dirAt, lmAt, false);
    const nlohmann::json j = readJson(dirAt + "/config.json");
    CHECK(j["head_dim"] == 3);
    CHECK(j["rope_ratio"] == 0.75);
    CHECK(j["use_output_gate"] == true);
    CHECK(j["using_groupnorm"] == false);
    CHECK(j["rms_norm_eps"] == 1e-4);
    CHECK(j["use_k_shift"] == true);
    CHECK(j["use_v_shift"] == false);
    CHECK(j["q_activation"] == "relu");
    CHECK(j["k_activation"].is_null());
    CHECK(j["v_activation"] == "elu+1");
    auto backAt = ddl::loadAuthorsModel<double>(dirAt);
    ddl::DeltaLMConfig expect = at;
    expect.attention.qkNormEps = 1e-5;
    CHECK(backAt.config().toKeyValues() == expect.toKeyValues());
    CHECK(ddl_test::bitIdentical(paramsOf(lmAt), paramsOf(backAt)));
  }
  // With the Delta and init options: their fields, and zeros for the v_proj a constant value never reads.
  for (const bool constant : {false, true}) {
    INFO("constant " << constant);
    ddl::DeltaLMConfig dl = c;
    ddl::applyVariant(dl, "tc-ec");
    dl.convKernel = 3;
    dl.inputEmbedKernel = 2;
    dl.block.residual.gate = ddl::GateKind::TwoLayerTanh;
    dl.block.residual.gateHidden = 4;
    dl.block.residual.beta0 = 0.25;
    dl.block.residual.value = constant ? ddl::ValueKind::Constant : ddl::ValueKind::LinearOnInput;
    dl.block.residual.valueConstant = 1.25;
    dl.embeddingInitStd = 0.03;
    dl.hiddenInitStdFactor = 0.6;
    dl.block.compressorReadInit = 0.2;
    ddl::DeltaLM<double> lmDl(dl, 9);
    const std::string dirDl = ddl_test::freshTestDir(std::string("authors_fresh_delta") + (constant ? "_c" : ""));
    ddl::saveAuthorsModel(dirDl, lmDl, false);
    const nlohmann::json j = readJson(dirDl + "/config.json");
    CHECK(j["ddl_beta_single_linear"] == false);
    CHECK(j["ddl_beta_hidden_size"] == 4);
    CHECK(j["ddl_beta_init"] == 0.25);
    CHECK(j["ddl_v_sigmoid"] == constant);
    CHECK(j["ddl_v_constant"] == constant);
    CHECK(j["ddl_v_constant_value"] == 1.25);
    CHECK(j["embedding_init_std"] == 0.03);
    CHECK(j["hidden_init_std_factor"] == 0.6);
    CHECK(j["ddl_state_shortconv_kernel_size"] == 3);
    CHECK(j["input_embed_shortconv_kernel_size"] == 2);
    CHECK(j["ddl_state_read_init"] == 0.2);
    bool vProj = false;
    for (const auto& t : readRaw(dirDl + "/model.safetensors")) vProj = vProj || t.name == "transformer.h.0.ddl_attn.v_proj.weight";
    CHECK(vProj);  // their model holds it either way
    auto backDl = ddl::loadAuthorsModel<double>(dirDl);
    ddl::DeltaLMConfig expect = dl;
    if (constant) expect.block.residual.value = ddl::ValueKind::Constant;
    CHECK(backDl.config().toKeyValues() == expect.toKeyValues());
    CHECK(ddl_test::bitIdentical(paramsOf(lmDl), paramsOf(backDl)));
  }
  ddl::DeltaLMConfig ok = c;
  ddl::applyVariant(ok, "tc-ec");
  ok.convKernel = 3;
  ddl::DeltaLM<double> lm(ok, 5);
  const std::string dir = ddl_test::freshTestDir("authors_fresh_tc_ec");
  ddl::saveAuthorsModel(dir, lm, false);
  auto back = ddl::loadAuthorsModel<double>(dir);
  CHECK(back.config().toKeyValues() == lm.config().toKeyValues());
  CHECK(ddl_test::bitIdentical(paramsOf(lm), paramsOf(back)));
}

TEST_CASE("authors' config.json: a field left out takes their default, not ddl's") {
  // block_size 1024 (ddl's context default is 256): no tensor depends on it, so the folder loads.
  const std::string noBlock = editedCopy("absent_block", "dv1", [](nlohmann::json& j) { j.erase("block_size"); }, nullptr);
  CHECK(ddl::loadAuthorsModel<double>(noBlock).config().context == 1024);
  // hidden_size 768 (ddl's d default is 256): the tensors, of width 12, then disagree with it.
  std::string m = loadError<double>(editedCopy("absent_hidden", "dv1", [](nlohmann::json& j) {
    j.erase("hidden_size");
    j.erase("head_dim");
  }, nullptr));
  CHECK(contains(m, "tensor \"transformer.wte.weight\" has shape [31, 12], expected [31, 768]"));
  // Their other defaults: 12 layers, head_dim 128, ddl_value_channels 4, vocab 50304.
  m = loadError<double>(editedCopy("absent_layers", "dv1", [](nlohmann::json& j) { j.erase("num_hidden_layers"); }, nullptr));
  CHECK(contains(m, "missing tensor \"transformer.h.2.attn.c_q.weight\""));
  m = loadError<double>(editedCopy("absent_head_dim", "dv1", [](nlohmann::json& j) { j.erase("head_dim"); }, nullptr));
  CHECK(contains(m, "tensor \"transformer.h.0.attn.c_q.weight\" has shape [12, 12], expected [256, 12]"));
  m = loadError<double>(editedCopy("absent_vocab", "dv1", [](nlohmann::json& j) { j.erase("vocab_size"); }, nullptr));
  CHECK(contains(m, "expected [50304, 12]"));
  // A cc-ec config that names neither the channels nor the kernel: their 4 and 4.
  const ddl::DeltaLMConfig cc = ddl::loadAuthorsModel<double>(editedCopy("absent_dv", "cc-ec", [](nlohmann::json& j) {
    j.erase("ddl_value_channels");
    j.erase("ddl_state_shortconv_kernel_size");
  }, nullptr)).config();
  CHECK(cc.dv == 4);
  CHECK(cc.block.compressorKernel == 4);
}

TEST_CASE("authors' tensors: a NaN or Inf weight is refused at load, naming the tensor and the flat index") {
  const auto poke = [](const char* name, std::size_t element, double value) {
    return [=](std::vector<RawTensor>& ts) {
      RawTensor* t = findRaw(ts, name);
      REQUIRE(t->dtype == "F64");
      std::memcpy(t->bytes.data() + 8 * element, &value, 8);
    };
  };
  std::string m = loadError<double>(editedCopy("nan", "dv1", nullptr, poke("transformer.h.0.attn.c_q.weight", 13, std::nan(""))));
  CHECK(contains(m, "tensor \"transformer.h.0.attn.c_q.weight\" holds nan at flat index 13"));
  m = loadError<float>(editedCopy("inf", "dv1", nullptr, poke("ln_f.weight", 2, -HUGE_VAL)));
  CHECK(contains(m, "tensor \"ln_f.weight\" holds -inf at flat index 2"));
  // A finite F64 beyond float's range is Inf in a float model.
  m = loadError<float>(editedCopy("overflow", "dv1", nullptr, poke("ln_f.weight", 1, 1e300)));
  CHECK(contains(m, "tensor \"ln_f.weight\" holds 1e+300 at flat index 1, beyond the range of float"));
  CHECK_NOTHROW(ddl::loadAuthorsModel<double>(editedCopy("overflow_double", "dv1", nullptr, poke("ln_f.weight", 1, 1e300))));
}

TEST_CASE("authors' JSON files: nesting is limited, values are quoted by a bounded excerpt, only regular files") {
  const auto deep = [](std::size_t levels) { return std::string(levels, '[') + "1" + std::string(levels, ']'); };
  const auto withConfigText = [](const std::string& name, const std::string& text) {
    const std::string dir = editedCopy(name, "dv1", nullptr, nullptr);
    std::ofstream(dir + "/config.json", std::ios::trunc) << text;
    return dir;
  };
  // 5000 levels made a 10 KB message of brackets; 200 000 overflowed the stack in the message's dump.
  for (const std::size_t levels : {std::size_t(5000), std::size_t(200000)}) {
    INFO(levels);
    const std::string m = loadError<double>(withConfigText("deep_" + std::to_string(levels), "{\"vocab_size\": " + deep(levels) + "}"));
    CHECK(contains(m, "config.json: byte offset 142: JSON nested deeper than 128 levels"));
    CHECK(m.size() < 400);
  }
  // 127 levels parse, and the wrong type is quoted by its first 80 bytes.
  std::string m = loadError<double>(withConfigText("deep_127", "{\"vocab_size\": " + deep(127) + "}"));
  CHECK(contains(m, "field 'vocab_size' = " + std::string(80, '[') + "... ("));
  CHECK(m.size() < 400);
  m = loadError<double>(editedCopy("long_value", "dv1", [](nlohmann::json& j) { j["q_activation"] = std::string(100000, 'x'); }, nullptr));
  CHECK(contains(m, "field 'q_activation' = \"" + std::string(79, 'x') + "... (100002 bytes): expected null"));
  m = loadError<double>(editedCopy("long_key", "dv1", [](nlohmann::json& j) { j[std::string(100000, 'k')] = 1; }, nullptr));
  CHECK(contains(m, "unknown field '" + std::string(80, 'k') + "... (100000 bytes)' = 1"));
  CHECK(m.size() < 400);
  m = loadError<double>(withConfigText("long_syntax", "{\"vocab_size\": \"" + std::string(100000, 's')));
  CHECK(contains(m, "config.json: invalid JSON"));
  CHECK(m.size() < 500);
  // The shard index: the same limits.
  const std::string dir = editedCopy("deep_index", "tc", nullptr, nullptr);
  std::filesystem::remove(dir + "/model.safetensors");
  { std::ofstream(dir + "/model.safetensors.index.json") << "{\"weight_map\": {\"a\": " << deep(200000) << "}}"; }
  m = loadError<double>(dir);
  CHECK(contains(m, "model.safetensors.index.json: byte offset 147: JSON nested deeper than 128 levels"));
  { std::ofstream(dir + "/model.safetensors.index.json", std::ios::trunc) << "{\"weight_map\": {\"a\": " << deep(100) << "}}"; }
  m = loadError<double>(dir);
  CHECK(contains(m, "weight_map[\"a\"] = " + std::string(80, '[') + "... (201 bytes): expected a file name"));
  // config.json that is a folder or a FIFO: "not a regular file" (a FIFO used to block the read forever).
  const std::string folder = editedCopy("config_folder", "dv1", nullptr, nullptr);
  std::filesystem::remove(folder + "/config.json");
  std::filesystem::create_directory(folder + "/config.json");
  CHECK(contains(loadError<double>(folder), "config.json: not a regular file (a folder)"));
  const std::string fifo = editedCopy("config_fifo", "dv1", nullptr, nullptr);
  std::filesystem::remove(fifo + "/config.json");
  REQUIRE(::mkfifo((fifo + "/config.json").c_str(), 0600) == 0);
  CHECK(contains(loadError<double>(fifo), "config.json: not a regular file (a FIFO, device or socket)"));
  // Both a single file and a shard index: which is the model is not guessed.
  const std::string both = editedCopy("both", "dv1", nullptr, nullptr);
  { std::ofstream(both + "/model.safetensors.index.json") << "{\"weight_map\": {}}"; }
  CHECK(contains(loadError<double>(both), "holds both model.safetensors and model.safetensors.index.json"));
}

TEST_CASE("authors' folders: a folder that holds a model is replaced only with overwrite, whole and at once") {
  auto tc = ddl::loadAuthorsModel<double>(fixture("tc"));
  auto dv1 = ddl::loadAuthorsModel<double>(fixture("dv1"));
  const std::string dir = ddl_test::freshTestDir("authors_overwrite");
  ddl::saveAuthorsModel(dir, tc, false);
  { std::ofstream(dir + "/tokenizer.json") << "{}"; }  // not part of the model: kept
  std::string m = ddl_test::thrownMessage<ddl::IoError>([&] { ddl::saveAuthorsModel(dir, dv1, false); });
  CHECK(contains(m, "already holds a model (config.json, ...); replacing it needs overwrite"));
  CHECK(ddl::loadAuthorsModel<double>(dir).config().variant() == "tc");
  // A sharded folder: the new model.safetensors would sit beside the shards; with overwrite they go.
  const std::string sharded = ddl_test::freshTestDir("authors_overwrite_sharded");
  std::filesystem::copy_file(fixture("tc") + "/config.json", sharded + "/config.json");
  const std::vector<RawTensor> all = readRaw(fixture("tc") + "/model.safetensors");
  writeRaw(sharded + "/model-00001-of-00002.safetensors", std::vector<RawTensor>(all.begin(), all.begin() + 3));
  writeRaw(sharded + "/model-00002-of-00002.safetensors", std::vector<RawTensor>(all.begin() + 3, all.end()));
  writeRaw(sharded + "/extra-shard.safetensors", {});  // named by the index only
  nlohmann::json index = {{"weight_map", nlohmann::json::object()}};
  for (std::size_t i = 0; i < all.size(); ++i)
    index["weight_map"][all[i].name] = i < 3 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  index["weight_map"]["unused"] = "extra-shard.safetensors";
  writeJson(sharded + "/model.safetensors.index.json", index);
  { std::ofstream(sharded + "/README.md") << "mine"; }
  CHECK(contains(ddl_test::thrownMessage<ddl::IoError>([&] { ddl::saveAuthorsModel(sharded, dv1, false); }),
                 "already holds a model"));
  ddl::AuthorsSaveOptions over;
  over.float32 = false;
  over.overwrite = true;
  ddl::saveAuthorsModel(sharded, dv1, over);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(sharded)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"README.md", "config.json", "model.safetensors"});
  auto back = ddl::loadAuthorsModel<double>(sharded);
  CHECK(ddl_test::bitIdentical(paramsOf(dv1), paramsOf(back)));
  { std::ifstream in(sharded + "/README.md"); std::string t; in >> t; CHECK(t == "mine"); }
  // Nothing is left beside the folder (the temporary folder of the swap is gone).
  const std::string parent = std::filesystem::path(sharded).parent_path().string();
  for (const auto& e : std::filesystem::directory_iterator(parent))
    CHECK(e.path().filename().string().rfind("authors_overwrite_sharded.", 0) != 0);
  // A subfolder cannot be carried over by a swap of the folder: refused, nothing changed.
  std::filesystem::create_directory(sharded + "/checkpoints");
  m = ddl_test::thrownMessage<ddl::IoError>([&] { ddl::saveAuthorsModel(sharded, tc, over); });
  CHECK(contains(m, "holds checkpoints, a folder that a replacement of the folder at once cannot carry over"));
  CHECK(ddl::loadAuthorsModel<double>(sharded).config().variant() == "dv1");
}

// Last in the file: it ends the program with 77 (ctest: skipped) unless DDL_AUTHORS_DIR names their model/.
TEST_CASE("authors' own code loads the folders ddl writes (strict) and computes the same logits") {
  const char* env = std::getenv("DDL_AUTHORS_DIR");
  if (env == nullptr || !std::filesystem::exists(std::string(env) + "/DDL-gpt-mha-rope-CC-EC.py") ||
      !torch_runner::torchAvailable()) {
    std::cerr << "skipped: set DDL_AUTHORS_DIR to the folder of the authors' model/ package "
                 "(git -C <their repository> archive HEAD model | tar -x) and install python3-torch\n";
    std::exit(torch_runner::kSkipExitCode);
  }
  const std::string script =
      (std::filesystem::path(__FILE__).parent_path().parent_path() / "tools" / "authors_reference.py").string();
  for (const auto& v : kVariants) {
    INFO(v);
    auto lm = ddl::loadAuthorsModel<double>(fixture(v));
    const std::string dir = ddl_test::freshTestDir("authors_theirs_" + v);
    ddl::saveAuthorsModel(dir, lm, /*float32=*/false);
    const std::string cmd = std::string(torch_runner::kPython) + " " + torch_runner::quoted(script) + " --authors " +
                            torch_runner::quoted(env) + " --check " + torch_runner::quoted(dir) + " --variant " + variantOf(v) +
                            " --reference " + torch_runner::quoted(fixture(v) + "/reference.safetensors") +
                            " --tol 1e-12";
    CHECK(torch_runner::runCommand(cmd) == 0);
  }
}

TEST_CASE("authors' folders hold only betaMax 2: another cap is refused by name before writing") {
  const ddl::DeltaLMConfig c = tinyAuthorsConfig();
  for (const char* variant : {"dv1", "cc-ec"}) {
    CAPTURE(variant);
    ddl::DeltaLMConfig b = c;
    ddl::applyVariant(b, variant);
    b.block.residual.betaMax = 1.0;
    b.block.residual.beta0 = 0.5;
    ddl::DeltaLM<double> lm(b);
    const std::string dir = ddl_test::clearedTestPath(std::string("authors_refused_beta_max_") + variant);
    const std::string m = ddl_test::thrownMessage<ddl::Error>([&] { ddl::saveAuthorsModel(dir, lm); });
    CHECK(contains(m, "a gate cap betaMax other than 2 has no counterpart in the authors' models (betaMax 1;"));
    CHECK(!std::filesystem::exists(dir));  // nothing written
    CHECK(contains(ddl_test::thrownMessage<ddl::Error>([&] { ddl::authorsConfigJson(b, "float32"); }), "betaMax 1"));
  }
  // The additive baseline has no gate: its (unused) cap does not matter.
  ddl::DeltaLMConfig a = c;
  a.block.residual.residual = ddl::ResidualKind::Additive;
  a.block.residual.betaMax = 1.0;
  a.block.residual.beta0 = 0.5;
  CHECK_NOTHROW(ddl::authorsConfigJson(a, "float32"));
}

}  // namespace test_authors_model
