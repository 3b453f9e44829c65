#pragma once
// ddl/nn/layers/weight_and_bias.hpp: the parameters of a layer with a weight and an optional bias
// (Linear, Conv2d, TokenConv): their walk, their seeded initialisation and their accessors. The layer's
// constructor gives m_W and m_b their shapes; the weight's value is read as a matrix (out, fan_in).
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/nn/layers/init.hpp"

namespace ddl {

template <class S>
class WeightAndBias {
 public:
  // Seeded initialisation by scheme (init.hpp). Draw order: the weight matrix column by column, then the bias.
  void init(Rng& rng, const InitScheme& scheme = InitScheme::pytorchDefault()) {
    initLinearParams(m_W.value, m_hasBias ? &m_b.value : nullptr, rng, scheme);
  }

  // Parameters in a fixed order: "weight", then "bias" when present.
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(joinName(prefix, "weight"), m_W);
    if (m_hasBias) f(joinName(prefix, "bias"), m_b);
  }

  Param<S>& weight() { return m_W; }
  const Param<S>& weight() const { return m_W; }
  // Error for a layer built without a bias.
  Param<S>& bias() {
    if (!m_hasBias) throw Error(std::string(m_name) + "::bias: this layer was built without a bias");
    return m_b;
  }
  const Param<S>& bias() const { return const_cast<WeightAndBias*>(this)->bias(); }
  bool hasBias() const { return m_hasBias; }

 protected:
  // name ("ddl::Linear") starts the errors.
  WeightAndBias(const char* name, bool bias) : m_name(name), m_hasBias(bias) {}

  const char* m_name;
  bool m_hasBias;
  Param<S> m_W, m_b;
};

}  // namespace ddl
