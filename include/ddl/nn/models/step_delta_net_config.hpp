#pragma once
// ddl/nn/models/step_delta_net_config.hpp: the configuration of a StepDeltaNet (nn/models/step_delta_net.hpp),
// the depth-as-time net of the claim test (docs/claims.md, "Models"): one block per step of a sequence
// whose columns are laid out as data/sequence_sampling.hpp's StepLayout (prefix, then the steps).
#include <string>

#include "ddl/core/enum_names.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/key_values.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/delta_block.hpp"
#include "ddl/nn/blocks/delta_residual_options.hpp"

namespace ddl {

// Where the head reads the state: after the last block only (one output per sample), or after every block
// (one output per sample and step: the model supervised at every step, docs/claims.md "Models").
enum class StepReadout { Final, EveryStep };
inline constexpr EnumName<StepReadout> kStepReadoutNames[] = {{StepReadout::Final, "final"},
                                                               {StepReadout::EveryStep, "every_step"}};
inline const char* toString(StepReadout r) { return nameOf(kStepReadoutNames, r); }

struct StepDeltaNetConfig {
  Index prefixDim = 0;  // width of the prefix p (the initial state's input); 0: x_0 = b_0, a learned vector
  Index stepWidth = 1;  // inputs per step
  Index steps = 8;      // L, one block per step
  Index outputs = 2;    // classes (logits) or regression outputs
  Index d = 64;
  double finalNormEps = 1e-5;
  StepReadout readout = StepReadout::Final;
  bool tied = false;  // one cell (norm, branch, residual) shared by every block: a recurrence; P_t stays per step
  DeltaBlockOptions block;  // hidden, activation, normEps and the residual (dv = 1: no compressor)

  Index inputDim() const { return prefixDim + steps * stepWidth; }  // rows of a sample's column
  Index readouts() const { return readout == StepReadout::EveryStep ? steps : 1; }  // output blocks per batch

  // Throws ValueError naming the option and its value.
  void validate() const {
    const char* fn = "ddl::StepDeltaNetConfig";
    require(prefixDim >= 0, fn, "prefixDim must be >= 0, got ", prefixDim);
    require(stepWidth >= 1, fn, "stepWidth must be >= 1, got ", stepWidth);
    require(steps >= 1, fn, "steps must be >= 1, got ", steps);
    require(outputs >= 1, fn, "outputs must be >= 1, got ", outputs);
    require(d >= 1, fn, "d must be >= 1, got ", d);
    require(block.hidden >= 0, fn, "hidden must be >= 0 (0 means 4 d), got ", block.hidden);
    require(block.normEps >= 0 && finalNormEps >= 0, fn, "RMSNorm eps must be >= 0");
    block.residual.validate(fn);
  }

  // The options as text (a run's report); hidden is written resolved.
  KeyValues toKeyValues() const {
    KeyValues kv;
    KeyValueWriter w(kv);
    w.put("prefix_dim", prefixDim);
    w.put("step_width", stepWidth);
    w.put("steps", steps);
    w.put("outputs", outputs);
    w.put("d", d);
    w.put("hidden", block.hidden > 0 ? block.hidden : 4 * d);
    w.put("activation", toString(block.activation));
    w.put("norm_eps", block.normEps);
    w.put("final_norm_eps", finalNormEps);
    w.put("readout", toString(readout));
    w.put("tied", tied ? "true" : "false");
    const DeltaResidualOptions& r = block.residual;
    w.put("residual", toString(r.residual));
    w.put("direction", toString(r.direction));
    w.put("direction_norm", toString(r.norm));
    w.put("gate", toString(r.gate));
    w.put("beta0", r.beta0);
    w.put("beta_max", r.betaMax);
    w.put("value", toString(r.value));
    w.put("value_scale", r.valueScale);
    return kv;
  }
};

}  // namespace ddl
