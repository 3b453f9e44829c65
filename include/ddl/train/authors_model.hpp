#pragma once
// ddl/train/authors_model.hpp: the authors' model folders (github.com/yifanzhang-pro/deep-delta-learning)
// in and out of ddl's DeltaLM:
//
//   auto lm = ddl::loadAuthorsModel<double>("ckpt/");   // config.json + model.safetensors (or a sharded
//                                                       // model.safetensors.index.json) -> DeltaLM<double>
//   ddl::saveAuthorsModel("out/", lm);                   // config.json + model.safetensors, F32 by default;
//                                                       // a folder that holds a model: only with overwrite
//
// The variant (baseline, dv1, cc, cc-ec, tc, tc-ec) is read from the tensor names (their modules' names
// differ: compress.weight for CC, compress.shortconv.weight for TC, input_embed.conv.weight for EC,
// ddl_attn.* for the Delta residual); config.json maps onto DeltaLMConfig by the table of
// train/authors_config.hpp; each ddl parameter has one tensor of theirs (authorsTensorName), and the v_proj
// their modules keep with a constant value (never read; ddl has no parameter for it) is checked for its
// shape on reading and written as zeros. Their head is tied: lm_head.weight is written once as
// transformer.wte.weight and, when a file holds it too, must equal it. Tensors convert from F64, F32, BF16 and F16. A missing, unexpected, misshapen or unconvertible
// tensor throws (IoError, ShapeError) naming it and its file; the model is built fresh and returned only
// when everything has loaded. Format, table and refusals: docs/authors_models.md.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/types.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/io/atomic_folder.hpp"
#include "ddl/io/safetensors.hpp"
#include "ddl/io/safetensors_header.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/train/authors_config.hpp"
#include "ddl/train/authors_folder.hpp"
#include "ddl/train/authors_weights.hpp"

namespace ddl {

// The authors' state_dict name of ddl's parameter `name` in a model of configuration c (its variant:
// authorsVariantOf). Throws ValueError for a name their model has no tensor for.
inline std::string authorsTensorName(const std::string& name, const DeltaLMConfig& c) {
  const char* fn = "ddl::authorsTensorName";
  const bool tc = c.dv > 1 && c.stateCompressor == StateCompressorKind::OverTokens;
  if (name == "embed.weight") return "transformer.wte.weight";
  if (name == "expand.weight") return "input_embed.conv.weight";
  if (name == "norm.weight") return "ln_f.weight";
  if (name == "readout.conv.weight") return tc ? "readout.shortconv.weight" : "readout.weight";
  if (name == "readout.read.weight") return "readout.read";
  static const std::map<std::string, std::string> inBlock = {
      {"attn_norm.weight", "ln_1.weight"},          {"mlp_norm.weight", "ln_2.weight"},
      {"attn.q.weight", "attn.c_q.weight"},         {"attn.k.weight", "attn.c_k.weight"},
      {"attn.v.weight", "attn.c_v.weight"},         {"attn.o.weight", "attn.c_proj.weight"},
      {"attn.q_norm.weight", "attn.q_rms.weight"},  {"attn.k_norm.weight", "attn.k_rms.weight"},
      {"mlp.fc1.weight", "mlp.c_fc1.weight"},       {"mlp.fc3.weight", "mlp.c_fc2.weight"},
      {"mlp.fc2.weight", "mlp.c_proj.weight"},      {"compress.read.weight", "compress.read"},
      {"attn_delta.gate.weight", "ddl_attn.beta.weight"}, {"attn_delta.gate.bias", "ddl_attn.beta.bias"},
      {"attn_delta.value.weight", "ddl_attn.v_proj.weight"}, {"attn_delta.value.bias", "ddl_attn.v_proj.bias"},
      {"mlp_delta.gate.weight", "ddl_mlp.beta.weight"},   {"mlp_delta.gate.bias", "ddl_mlp.beta.bias"},
      {"attn_delta.gate.fc1.weight", "ddl_attn.beta_in.weight"},
      {"attn_delta.gate.fc2.weight", "ddl_attn.beta_out.weight"},
      {"attn_delta.gate.fc2.bias", "ddl_attn.beta_out.bias"},
      {"mlp_delta.gate.fc1.weight", "ddl_mlp.beta_in.weight"},
      {"mlp_delta.gate.fc2.weight", "ddl_mlp.beta_out.weight"},
      {"mlp_delta.gate.fc2.bias", "ddl_mlp.beta_out.bias"},
      {"mlp_delta.value.weight", "ddl_mlp.v_proj.weight"}, {"mlp_delta.value.bias", "ddl_mlp.v_proj.bias"},
  };
  // The attention options' parameters: with a shift, c_k / c_v are their ShiftLinear (linear + shift_proj).
  static const std::map<std::string, std::string> attentionOptions = {
      {"attn.k_shift.weight", "attn.c_k.shift_proj.weight"}, {"attn.v_shift.weight", "attn.c_v.shift_proj.weight"},
      {"attn.g.weight", "attn.g_proj.weight"},               {"attn.subln.weight", "attn.subln.weight"},
      {"attn.o_norm.weight", "attn.o_norm.weight"},
  };
  if (name.rfind("blocks.", 0) == 0) {
    const std::size_t dot = name.find('.', 7);
    if (dot != std::string::npos) {
      const std::string layer = name.substr(7, dot - 7), rest = name.substr(dot + 1);
      const std::string prefix = "transformer.h." + layer + ".";
      if (rest == "compress.conv.weight") return prefix + (tc ? "compress.shortconv.weight" : "compress.weight");
      if (rest == "attn.k.weight" && c.attention.kShift) return prefix + "attn.c_k.linear.weight";
      if (rest == "attn.v.weight" && c.attention.vShift) return prefix + "attn.c_v.linear.weight";
      const auto opt = attentionOptions.find(rest);
      if (opt != attentionOptions.end()) return prefix + opt->second;
      const auto it = inBlock.find(rest);
      if (it != inBlock.end()) return prefix + it->second;
    }
  }
  throw ValueError(message(fn, "ddl parameter \"", name, "\" has no tensor in the authors' models"));
}

// The shape of that tensor in their files: ddl's, except TC's kernels [d*dv, K] (ddl: [d*dv, 1, K]).
inline std::vector<std::int64_t> authorsTensorShape(const std::string& authorsName, const std::vector<Index>& ddlShape) {
  std::vector<std::int64_t> s(ddlShape.begin(), ddlShape.end());
  const std::string tcSuffix = "shortconv.weight";
  if (authorsName.size() >= tcSuffix.size() &&
      authorsName.compare(authorsName.size() - tcSuffix.size(), tcSuffix.size(), tcSuffix) == 0 && s.size() == 3)
    s.erase(s.begin() + 1);
  return s;
}

namespace detail {

// Throws unless the folder holds `name` with `shape` (IoError: missing; ShapeError: another shape).
inline void requireAuthorsTensor(const AuthorsWeights& w, const std::string& dir, const std::string& name,
                                 const std::vector<std::int64_t>& shape, AuthorsVariant v, const std::string& ddlName) {
  const char* fn = "ddl::loadAuthorsModel";
  if (!w.has(name))
    throw IoError(message(fn, dir, ": missing tensor \"", name, "\" (ddl's ", ddlName, ") of the ", toString(v),
                          " model"));
  if (w.info(name).shape != shape)
    throw ShapeError(message(fn, w.fileOf(name), ": tensor \"", name, "\" has shape ", shapeString(w.info(name).shape),
                             ", expected ", shapeString(shape), " (config.json: ", toString(v), ")"));
}

// Every size of c that allocation scales with (vocab, d, depth, heads · head_dim, the MLP width, dv, the
// kernels), confirmed by the file's tensors before the model is built: a config.json cannot make ddl allocate
// what the file lacks.
inline void checkAuthorsSizes(const DeltaLMConfig& c, AuthorsVariant v, const AuthorsWeights& w, const std::string& dir) {
  requireAuthorsTensor(w, dir, "transformer.wte.weight", {c.vocab, c.d}, v, "embed.weight");
  for (Index l = 0; l < c.depth; ++l) {
    const std::string b = "transformer.h." + std::to_string(l) + ".";
    requireAuthorsTensor(w, dir, b + "attn.c_q.weight", {c.heads * c.headDim(), c.d}, v,
                         "blocks." + std::to_string(l) + ".attn.q.weight");
    requireAuthorsTensor(w, dir, b + "mlp.c_fc1.weight", {c.resolvedHidden(), c.d}, v,
                         "blocks." + std::to_string(l) + ".mlp.fc1.weight");
  }
  if (c.dv == 1) return;
  requireAuthorsTensor(w, dir, "readout.read", {c.dv}, v, "readout.read.weight");
  if (c.stateCompressor == StateCompressorKind::OverTokens)
    requireAuthorsTensor(w, dir, "readout.shortconv.weight", {c.d * c.dv, c.convKernel}, v, "readout.conv.weight");
  else
    requireAuthorsTensor(w, dir, "readout.weight", {c.d, c.block.compressorKernel}, v, "readout.conv.weight");
  if (c.learnedExpansion)
    requireAuthorsTensor(w, dir, "input_embed.conv.weight", {c.d * c.dv, 1, c.ecKernel()}, v, "expand.weight");
}

// The variant of a folder, from its tensor names.
inline AuthorsVariant authorsVariantFromTensors(const AuthorsWeights& w) {
  bool delta = false, blocks = false;
  for (const std::string& name : w.names()) {
    blocks = blocks || name.rfind("transformer.h.", 0) == 0;
    delta = delta || name.find(".ddl_attn.") != std::string::npos;
  }
  const bool ec = w.has("input_embed.conv.weight");
  if (w.has("readout.shortconv.weight")) return ec ? AuthorsVariant::TcEc : AuthorsVariant::Tc;
  if (w.has("readout.weight")) return ec ? AuthorsVariant::CcEc : AuthorsVariant::Cc;
  return blocks && !delta ? AuthorsVariant::Baseline : AuthorsVariant::Dv1;
}

// Their value heads' tensors that ddl has no parameter for: with a constant value (ddl_v_constant) their
// DDL modules still hold v_proj (weight [dv, d], bias [dv]), which their forward never reads.
inline std::vector<std::pair<std::string, std::vector<std::int64_t>>> authorsUnreadTensors(const DeltaLMConfig& c) {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> out;
  if (authorsVariantOf(c) == AuthorsVariant::Baseline || c.block.residual.value != ValueKind::Constant) return out;
  for (Index l = 0; l < c.depth; ++l)
    for (const char* sub : {"ddl_attn", "ddl_mlp"}) {
      const std::string b = "transformer.h." + std::to_string(l) + "." + sub + ".v_proj.";
      out.push_back({b + "weight", {c.dv, c.d}});
      out.push_back({b + "bias", {c.dv}});
    }
  return out;
}

}  // namespace detail

// Reads the authors' model folder `dir` into a new DeltaLM<S> (see the header comment).
template <class S>
DeltaLM<S> loadAuthorsModel(const std::string& dir) {
  const char* fn = "ddl::loadAuthorsModel";
  const std::string configPath = (std::filesystem::path(dir) / "config.json").string();
  const nlohmann::json j = parseJsonText<nlohmann::json>(detail::readAuthorsJsonFile(configPath, fn), fn, configPath);
  detail::AuthorsWeights weights(dir);
  const AuthorsVariant variant = detail::authorsVariantFromTensors(weights);
  const DeltaLMConfig config = authorsConfigToDeltaLM(j, variant, configPath);
  detail::checkAuthorsSizes(config, variant, weights, dir);
  DeltaLM<S> model(config);
  std::set<std::string> used;
  model.visitParams("", [&](const std::string& name, Param<S>& p) {
    const std::string theirs = authorsTensorName(name, config);
    detail::requireAuthorsTensor(weights, dir, theirs, authorsTensorShape(theirs, p.shape), variant, name);
    p.value = weights.read<S>(theirs);
    used.insert(theirs);
  });
  for (const auto& t : detail::authorsUnreadTensors(config)) {  // held by their model, read by nothing
    detail::requireAuthorsTensor(weights, dir, t.first, t.second, variant, "value 'constant', which reads none");
    used.insert(t.first);
  }
  if (weights.has("lm_head.weight")) {  // tied: must be the embedding itself
    const TensorInfo& t = weights.info("lm_head.weight");
    const std::vector<std::int64_t> want{config.vocab, config.d};
    if (t.shape != want)
      throw ShapeError(message(fn, weights.fileOf("lm_head.weight"), ": tensor \"lm_head.weight\" has shape ",
                               shapeString(t.shape), ", expected ", shapeString(want)));
    if (weights.read<double>("lm_head.weight") != weights.read<double>("transformer.wte.weight"))
      throw IoError(message(fn, weights.fileOf("lm_head.weight"), ": tensor \"lm_head.weight\" differs from "
                            "\"transformer.wte.weight\"; the authors' head is tied to the embedding"));
    used.insert("lm_head.weight");
  }
  for (const std::string& name : weights.names())
    if (used.count(name) == 0)
      throw IoError(message(fn, weights.fileOf(name), ": unexpected tensor \"", name, "\" (the ",
                            toString(variant), " model of config.json has no such parameter)"));
  return model;
}

// How saveAuthorsModel writes.
struct AuthorsSaveOptions {
  bool float32 = true;     // F32 tensors; false: the model's scalar
  bool overwrite = false;  // replace the model a folder already holds (refused otherwise)
};

// Writes model as the authors' model folder `dir` (created if needed): model.safetensors (their names,
// the tied head once, F32 or, with float32 = false, the model's scalar) and config.json. Throws ValueError
// before writing anything when their code has no model of this configuration (requireAuthorsExpressible),
// IoError when dir already holds a model (authorsModelFiles) and options.overwrite is false, or when a file
// cannot be written. The folder changes at once (io/atomic_folder.hpp): the new model replaces the whole
// old one (its shards and index too); the folder's other files stay.
template <class S>
void saveAuthorsModel(const std::string& dir, DeltaLM<S>& model, const AuthorsSaveOptions& options) {
  const char* fn = "ddl::saveAuthorsModel";
  const bool float32 = options.float32;
  const nlohmann::json config = authorsConfigJson(model.config(), float32 || sizeof(S) == 4 ? "float32" : "float64");
  struct Entry {
    std::string name;
    std::vector<std::int64_t> shape;
    const MatX<S>* value;
  };
  std::vector<Entry> entries;
  model.visitParams("", [&](const std::string& name, Param<S>& p) {
    const std::string theirs = authorsTensorName(name, model.config());
    entries.push_back({theirs, authorsTensorShape(theirs, p.shape), &p.value});
  });
  // The tensors their model holds and never reads (a constant value's v_proj), as zeros, so that their
  // load_state_dict(strict=True) takes the folder.
  const auto unread = detail::authorsUnreadTensors(model.config());
  std::vector<MatX<S>> zeros;
  zeros.reserve(unread.size());  // no reallocation: entries point into it
  for (const auto& t : unread) {
    Index r = 0, cols = 0;
    matrixDimsOf(t.second, r, cols);
    zeros.push_back(MatX<S>::Zero(r, cols));
    entries.push_back({t.first, t.second, &zeros.back()});
  }
  const std::set<std::string> old = authorsModelFiles(dir);
  if (!old.empty() && !options.overwrite)
    throw IoError(message(fn, dir, ": already holds a model (", *old.begin(), old.size() > 1 ? ", ..." : "",
                          "); replacing it needs overwrite (ddl-text: --overwrite), or choose another folder"));
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::absolute(dir, ec).lexically_normal().parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) throw IoError(message(fn, "cannot create the folder ", parent.string(), ": ", ec.message()));
  SafetensorsWriter w;
  w.setMetadata({{"format", "pt"}});
  const DType dtype = float32 ? DType::F32 : DTypeOf<S>::value;
  for (const auto& e : entries) w.declare(e.name, dtype, e.shape);
  replaceFolderAtomically(
      dir, [&](const std::string& name) { return old.count(name) != 0; },
      [&](const std::string& tmp) {
        writeFileAtomically((std::filesystem::path(tmp) / "model.safetensors").string(), [&](std::ostream& os) {
          w.writeHeader(os);
          for (const auto& e : entries) {
            if (float32)
              w.writeTensor(os, e.name, e.shape, e.value->template cast<float>());
            else
              w.writeTensor(os, e.name, e.shape, *e.value);
          }
          w.finish();
        });
        writeFileAtomically((std::filesystem::path(tmp) / "config.json").string(),
                            [&](std::ostream& os) { os << config.dump(2) << "\n"; });
      });
}
template <class S>
void saveAuthorsModel(const std::string& dir, DeltaLM<S>& model, bool float32 = true) {
  saveAuthorsModel(dir, model, AuthorsSaveOptions{float32, false});
}

}  // namespace ddl
