#pragma once
// ddl/train/finite_guard.hpp: stops training at the first non-finite loss or gradient.
//
//   ddl::FiniteGuard<float> guard(net);          // walks the parameters once (a ParamList)
//   guard.check(stats.loss, step);               // after backward, before the optimizer step
//
// check() is one pass over the gradients (a sum of squares in double, which is finite for any
// finite float gradient) and allocates nothing; only when something is not finite does it walk
// again to name the first parameter (visit order, so the name shows the block: "blocks.2.…") and
// entry, and throw NonFiniteError. Thrown before the update, the parameters, the optimizer state
// and the last checkpoint are still those of the last good step. parameterReport() helps explain
// a failure a layer detected itself (e.g. a NaN direction after weights blew up).
// The model is anything with visitParams(prefix, f), f(const std::string&, Param<S>&), or a
// ParamList; the Param objects must outlive the guard (they are members of the model).
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/param_list.hpp"
#include "ddl/core/types.hpp"
#include "ddl/train/grad_clip.hpp"

namespace ddl {

// Training produced a NaN or an infinity (loss or gradient).
class NonFiniteError : public MathError {
 public:
  NonFiniteError(const std::string& what, std::int64_t step) : MathError(what), m_step(step) {}
  std::int64_t step() const { return m_step; }  // 1-based training step that went bad

 private:
  std::int64_t m_step;
};

template <class S>
class FiniteGuard {
 public:
  template <class Model, class = std::enable_if_t<!std::is_same<std::decay_t<Model>, ParamList<S>>::value>>
  explicit FiniteGuard(Model& model) : m_params(model) {}
  explicit FiniteGuard(const ParamList<S>& params) : m_params(params) {}

  // loss: the batch's mean loss; step: the 1-based number of the step being taken. Throws
  // NonFiniteError when the loss or a gradient entry is NaN or infinite.
  void check(double loss, std::int64_t step) const {
    const char* fn = "ddl::FiniteGuard";
    if (!std::isfinite(loss))
      throw NonFiniteError(message(fn, "the loss is ", loss, " at step ", step,
                                   " (the forward pass overflowed: check the learning rate and the input data)"),
                           step);
    double sumSq = 0.0;
    for (const auto& np : m_params) sumSq += detail::sumOfSquares(np.param->grad.data(), np.param->grad.size());
    if (std::isfinite(sumSq)) return;
    for (const auto& np : m_params) {
      const MatX<S>& g = np.param->grad;
      Index bad = 0, firstRow = -1, firstCol = -1;
      for (Index j = 0; j < g.cols(); ++j)
        for (Index i = 0; i < g.rows(); ++i)
          if (!std::isfinite(static_cast<double>(g(i, j))) && bad++ == 0) {
            firstRow = i;
            firstCol = j;
          }
      if (bad > 0)
        throw NonFiniteError(message(fn, "the gradient of parameter '", np.name, "' is not finite at step ", step, ": entry (", firstRow, ", ", firstCol, ") = ",
                                     g(firstRow, firstCol), ", ", bad, " of ", g.size(), " entries non-finite"),
                             step);
    }
    // Every entry finite, only the double sum overflowed (double gradients beyond 1e154): not an error.
  }

  // For an error message after a numeric failure elsewhere (cold path, allocates): the first
  // parameter holding a non-finite value, else the one with the largest magnitude.
  std::string parameterReport() const {
    const typename ParamList<S>::Entry* largest = nullptr;
    double largestAbs = -1.0;
    for (const auto& np : m_params) {
      const MatX<S>& v = np.param->value;
      if (!v.allFinite()) return "parameter '" + np.name + "' holds non-finite values";
      const double a = v.size() > 0 ? static_cast<double>(v.cwiseAbs().maxCoeff()) : 0.0;
      if (a > largestAbs) {
        largestAbs = a;
        largest = &np;
      }
    }
    if (!largest) return "the model has no parameters";
    std::ostringstream os;
    os << "every parameter is finite; the largest entry is " << largestAbs << " in '" << largest->name << "'";
    return os.str();
  }

  std::size_t numParams() const { return m_params.size(); }

 private:
  ParamList<S> m_params;
};

}  // namespace ddl
