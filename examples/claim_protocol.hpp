#pragma once
// examples/claim_protocol.hpp: ddl-claim's parameters, their machine-readable block and its id
// (docs/claims.md, "Protocol id"). The block is printed from the parameters the runner actually uses, one
// `key = value` line per entry of a std::map (keys in byte order); its id is the first 16 hex digits of
// the SHA-256 of those lines. A report carries the pre-registered id only when its block hashes to it.
#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ddl/core/types.hpp"
#include "ddl/data/sequence_sampling.hpp"
#include "ddl/nn/models/step_delta_net_config.hpp"

namespace ddl::claim {

// The id of the protocol docs/claims.md pre-registers (its block's hash, checked by a ctest).
inline constexpr const char* kProtocolId = "claims-2-4b1e5b7173cfbd90";
inline constexpr const char* kProtocolVersion = "2";

// SHA-256 (FIPS 180-4) of a byte string, as 64 lowercase hex digits.
inline std::string sha256Hex(const std::string& bytes) {
  static constexpr std::array<std::uint32_t, 64> k = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  std::array<std::uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::vector<unsigned char> m(bytes.begin(), bytes.end());
  const std::uint64_t bits = static_cast<std::uint64_t>(bytes.size()) * 8;
  m.push_back(0x80);
  while (m.size() % 64 != 56) m.push_back(0);
  for (int i = 7; i >= 0; --i) m.push_back(static_cast<unsigned char>(bits >> (8 * i)));
  auto rotr = [](std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (std::size_t block = 0; block < m.size(); block += 64) {
    std::array<std::uint32_t, 64> w{};
    for (int i = 0; i < 16; ++i)
      w[static_cast<std::size_t>(i)] = static_cast<std::uint32_t>(m[block + 4 * static_cast<std::size_t>(i)]) << 24 |
                                       static_cast<std::uint32_t>(m[block + 4 * static_cast<std::size_t>(i) + 1]) << 16 |
                                       static_cast<std::uint32_t>(m[block + 4 * static_cast<std::size_t>(i) + 2]) << 8 |
                                       static_cast<std::uint32_t>(m[block + 4 * static_cast<std::size_t>(i) + 3]);
    for (std::size_t i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::array<std::uint32_t, 8> v = h;
    for (std::size_t i = 0; i < 64; ++i) {
      const std::uint32_t S1 = rotr(v[4], 6) ^ rotr(v[4], 11) ^ rotr(v[4], 25);
      const std::uint32_t ch = (v[4] & v[5]) ^ (~v[4] & v[6]);
      const std::uint32_t t1 = v[7] + S1 + ch + k[i] + w[i];
      const std::uint32_t S0 = rotr(v[0], 2) ^ rotr(v[0], 13) ^ rotr(v[0], 22);
      const std::uint32_t maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
      const std::uint32_t t2 = S0 + maj;
      v = {t1 + t2, v[0], v[1], v[2], v[3] + t1, v[4], v[5], v[6]};
    }
    for (std::size_t i = 0; i < 8; ++i) h[i] += v[i];
  }
  std::string hex;
  char buf[9];
  for (std::uint32_t x : h) {
    std::snprintf(buf, sizeof buf, "%08x", x);
    hex += buf;
  }
  return hex;
}

// The sizes of one task of the protocol.
struct TaskSpec {
  std::string name;   // swap, parity, householder, permutation_s3, permutation_s5
  Index size = 3;     // cups (swap), n (permutations), dim (householder); unused for parity
  Index steps = 8;
  SplitSizes split;
};

// Everything a run of the protocol is a function of.
struct Parameters {
  std::vector<TaskSpec> tasks;  // all five, in the protocol's order (the block lists them all)
  Index epochs = 40, epochs3x = 120, batch = 128;
  std::vector<double> lrs{0.001, 0.003, 0.01};
  std::vector<std::uint64_t> selectionSeeds{1001, 1002, 1003};
  std::vector<std::uint64_t> seeds{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  Index d = 32, hidden = 64, dv = 1;
  double threshold = 0.95;
  StepReadout readout = StepReadout::Final;  // the depth-as-time net's supervision: final label or every step
  bool stopWhenSolved = true;                // a run ends after the epoch that reaches the threshold
  bool tied = false;                         // the depth-as-time net's blocks share one cell (a recurrence)
  std::vector<std::string> controlKinds{"delta_bmax2", "additive"};  // the kinds run in the control form
};

inline const std::vector<std::string>& protocolControlKinds() {
  static const std::vector<std::string> kinds{"delta_bmax2", "additive"};
  return kinds;
}

inline std::vector<TaskSpec> protocolTasks() {
  return {{"swap", 3, 8, {8000, 2000, 2000}},
          {"parity", 0, 16, {16000, 2000, 2000}},
          {"householder", 4, 8, {16000, 2000, 2000}},
          {"permutation_s3", 3, 8, {16000, 2000, 2000}},
          {"permutation_s5", 5, 8, {16000, 2000, 2000}}};
}

// "0.001, 0.003, 0.01" as the block writes lists (shortest round-trip form of each number).
template <class T>
std::string joinList(const std::vector<T>& v) {
  std::ostringstream os;
  os.precision(12);
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str();
}

inline std::string numberText(double x) {
  std::ostringstream os;
  os.precision(12);
  os << x;
  return os.str();
}

// The block of the parameters: what docs/claims.md's block says, printed from p. The descriptive lines
// name what this runner implements (ddl-claim's code is their definition).
inline std::map<std::string, std::string> protocolBlock(const Parameters& p) {
  std::map<std::string, std::string> b;
  b["budget.additive_3x_epochs"] = std::to_string(p.epochs3x);
  b["budget.batch"] = std::to_string(p.batch);
  b["budget.epochs"] = std::to_string(p.epochs);
  b["budget.stop"] = p.stopWhenSolved ? "after the first epoch whose validation score reaches the threshold"
                                      : "none: every run trains its whole budget";
  b["budget.warmup_steps"] = "min(200, steps / 10)";
  b["data.held_out"] = "validation and test sequences never occur in training";
  b["data.seed"] = "the run's seed";
  b["init.seed"] = "the run's seed";
  b["kinds"] = "delta_bmax2, delta_bmax1, write_only, additive, additive_wide, additive_3x";
  b["kinds.additive_wide.hidden"] = "smallest hidden >= " + std::to_string(p.hidden) + " with at least delta_bmax2's parameters";
  b["kinds.gate_bias_init"] = "0";
  // Written only when changed, so that the protocol's block (which names them in model.control_form's
  // description) keeps its id.
  if (p.controlKinds != protocolControlKinds()) b["kinds.control"] = joinList(p.controlKinds);
  b["lr.grid"] = joinList(p.lrs);
  b["lr.selection"] = "most selection seeds solved, then lower mean epochs to threshold, then higher mean best "
                      "validation score, then lower lr";
  b["lr.selection_seeds"] = joinList(p.selectionSeeds);
  b["model.activation"] = "gelu";
  b["model.control_form"] = "inputs_at_first_layer";
  b["model.d"] = std::to_string(p.d);
  b["model.dv"] = std::to_string(p.dv);
  b["model.form"] = "depth_as_time";
  b["model.hidden"] = std::to_string(p.hidden);
  b["model.preset"] = "code";
  b["model.readout"] = p.readout == StepReadout::Final ? "final: the loss reads the state after the last step only"
                                                       : "every_step: the loss reads the state after every step";
  b["model.tied"] = p.tied ? "true: one cell shared by the blocks, a step projection per block"
                           : "false: every block its own parameters";
  b["model.step_input"] = "per-block projection into the branch input, no bias";
  b["optimizer"] = "adamw, beta1 0.9, beta2 0.999, weight_decay 0.01, cosine";
  b["outcome.censor"] = "budget + 1";
  const std::string th = numberText(p.threshold);
  b["outcome.epochs_to"] = "first 1-based epoch with validation score >= " + th;
  b["outcome.solved"] = "validation accuracy >= " + th + " (householder: validation R2 >= " + th + ")";
  b["protocol"] = "ddl-claims";
  b["seeds"] = joinList(p.seeds);
  b["stats.alpha"] = "0.05";
  b["stats.clamp"] = "beta <- min(beta, 1) at evaluation, all blocks and each block alone, solved delta_bmax2 runs";
  b["stats.intervals"] = "wilson, clopper_pearson, newcombe_hybrid_score, sign_test_median_difference, 0.95";
  b["stats.multiplicity"] = "holm, primary family 25, secondary family 25";
  b["stats.primary"] = "fisher_exact two-sided, delta_bmax2 against each other kind, per task, depth_as_time";
  b["stats.secondary"] = "sign_test two-sided on epochs_to, ties dropped; control form";
  for (const TaskSpec& t : p.tasks) {
    const std::string sizes = "train " + std::to_string(t.split.train) + ", validation " +
                              std::to_string(t.split.validation) + ", test " + std::to_string(t.split.test);
    const std::string steps = "steps " + std::to_string(t.steps);
    if (t.name == "swap") b["task.swap"] = "cups " + std::to_string(t.size) + ", " + steps + ", " + sizes;
    else if (t.name == "parity") b["task.parity"] = steps + ", " + sizes;
    else if (t.name == "householder") b["task.householder"] = "dim " + std::to_string(t.size) + ", " + steps + ", " + sizes;
    else b["task." + t.name] = "n " + std::to_string(t.size) + ", " + steps + ", " + sizes;
  }
  b["version"] = kProtocolVersion;
  return b;
}

// The block's lines, each ending in a newline (what the id hashes).
inline std::string blockText(const std::map<std::string, std::string>& block) {
  std::string text;
  for (const auto& [key, value] : block) text += key + " = " + value + "\n";
  return text;
}

// "claims-<version>-<16 hex digits of the block's SHA-256>".
inline std::string blockId(const std::map<std::string, std::string>& block) {
  return std::string("claims-") + kProtocolVersion + "-" + sha256Hex(blockText(block)).substr(0, 16);
}

}  // namespace ddl::claim
