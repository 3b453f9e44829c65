#pragma once
// ddl/nn/blocks/delta_residual_options.hpp: every option of the rewrite step (nn/blocks/delta_residual.hpp,
// docs/spec.md §2), with their names in configurations and checkpoints. A model's configuration holds one
// as block.residual (DeltaNetConfig, ConvDeltaNetConfig, DeltaLMConfig): e.g. block.residual.residual =
// ddl::ResidualKind::WriteOnly for the write-only control, ResidualKind::Additive for the plain baseline.
#include <cmath>
#include <cstddef>
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/activation.hpp"
#include "ddl/nn/layers/beta_gate.hpp"
#include "ddl/ops/direction.hpp"

namespace ddl {

enum class ResidualKind {
  Delta,      // X + beta k (v^T - k^T X), the paper's rewrite
  WriteOnly,  // X + beta k v^T, the control without the erase
  Additive,   // X + h, the plain residual baseline: no direction, gate or value parameters
};
enum class DirectionSource { BranchOutput, AuxiliaryMlp };
enum class ValueKind { SigmoidScaled, LinearOnC, FromBranch, Constant, LinearOnInput };

inline const char* toString(ResidualKind k) {
  return k == ResidualKind::Delta ? "delta" : k == ResidualKind::WriteOnly ? "write_only" : "additive";
}
inline const char* toString(DirectionSource k) { return k == DirectionSource::BranchOutput ? "kmap" : "aux_mlp"; }
inline const char* toString(ValueKind k) {
  switch (k) {
    case ValueKind::SigmoidScaled: return "sigmoid_scaled";
    case ValueKind::LinearOnC: return "linear_on_c";
    case ValueKind::FromBranch: return "from_branch";
    case ValueKind::Constant: return "constant";
    case ValueKind::LinearOnInput: return "linear_on_input";
  }
  return "?";
}

namespace detail {
template <class E, std::size_t N>
E parseEnum(const char* fn, const std::string& name, const E (&all)[N]) {
  std::string choices;
  for (E e : all) {
    if (name == toString(e)) return e;
    choices += (choices.empty() ? "" : ", ") + std::string(toString(e));
  }
  throw ValueError(message(fn, "unknown value '", name, "', expected one of ", choices));
}
}  // namespace detail

inline ResidualKind parseResidualKind(const std::string& s) {
  const ResidualKind all[] = {ResidualKind::Delta, ResidualKind::WriteOnly, ResidualKind::Additive};
  return detail::parseEnum("ddl::parseResidualKind", s, all);
}
inline DirectionSource parseDirectionSource(const std::string& s) {
  const DirectionSource all[] = {DirectionSource::BranchOutput, DirectionSource::AuxiliaryMlp};
  return detail::parseEnum("ddl::parseDirectionSource", s, all);
}
inline ValueKind parseValueKind(const std::string& s) {
  const ValueKind all[] = {ValueKind::SigmoidScaled, ValueKind::LinearOnC, ValueKind::FromBranch, ValueKind::Constant,
                          ValueKind::LinearOnInput};
  return detail::parseEnum("ddl::parseValueKind", s, all);
}

// Every option of the rewrite step. Defaults are the authors' code (preset "code").
struct DeltaResidualOptions {
  ResidualKind residual = ResidualKind::Delta;
  DirectionSource direction = DirectionSource::BranchOutput;
  DirectionNorm norm = DirectionNorm::SqrtEps;
  double epsK = 1e-5;
  GateKind gate = GateKind::Linear;  // the gate's form, width and start (nn/layers/beta_gate.hpp)
  Index gateHidden = 128;            // TwoLayerTanh only
  double beta0 = 1.0;                // initial gate value in [0, betaMax]; 0 gives a dead gate (d beta/dz ~ 2e-6)
  double betaMax = 2.0;              // the gate's cap, beta = betaMax sigma(z), in (0, 2]; 1 allows no reflection
  ValueKind value = ValueKind::SigmoidScaled;
  double valueScale = 4.0;     // s of SigmoidScaled
  double valueConstant = 2.0;  // Constant
  Index auxHidden = 0;         // AuxiliaryMlp hidden width; 0 means d / 4 (at least 1)
  Activation auxActivation = Activation::GELU;

  // Throws ValueError naming the option and its value.
  void validate(const char* fn) const {
    require(epsK >= 0 && std::isfinite(epsK), fn, "epsK must be finite and >= 0, got ", epsK);
    gateOptions().validate(fn);
    require(auxHidden >= 0, fn, "auxHidden must be >= 0, got ", auxHidden);
    require(std::isfinite(valueScale) && valueScale > 0, fn, "valueScale must be finite and > 0, got ", valueScale);
    require(std::isfinite(valueConstant), fn, "valueConstant must be finite, got ", valueConstant);
    require(!(direction == DirectionSource::BranchOutput && value == ValueKind::FromBranch), fn,
            "value 'from_branch' needs direction 'aux_mlp' (with k-Map the branch output is the direction)");
    require(!(norm == DirectionNorm::AddEps && epsK == 0), fn, "add_eps normalization needs epsK > 0");
  }

  GateOptions gateOptions() const { return GateOptions{gate, gateHidden, beta0, betaMax}; }
};

}  // namespace ddl
