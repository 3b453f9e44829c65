#pragma once
// ddl/core/bf16_weights.hpp: the bf16 copies of a model's weights, made once per training step.
//
//   buf.bf16.refresh(buf.params);                 // after the last update, before the forward
//   { ddl::Bf16WeightScope scope(buf.bf16);       // products reading a weight read its bf16 copy
//     forward, backward }                          // the scope ends before the optimizer's update
//
// Under the bf16 policy (core/precision.hpp) every product rounds its inputs to bf16. A weight is the
// same in every product of a step, so converting it per product (the head's 38.6 M weights, three times
// a step) wastes memory traffic: train/task_step.hpp converts each matrix parameter once when the step
// starts (the weights then are those the last update wrote) and GemmWorkspace<float> looks its operands
// up here (core/gemm.hpp). A copy is found only while its scope is active, and the step ends the scope
// before the update, so no product can read a copy older than its weight. Activations and gradients
// are converted per product, or once for several products (core/bf16_copy.hpp).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "ddl/core/bf16.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

class Bf16Weights {
 public:
  // Converts every matrix parameter (rows and columns > 1) of a float walk (a module or a ParamList); allocates
  // only when the parameters changed (another model, new storage).
  template <class Walk>
  void refresh(Walk& params) {
    std::size_t i = 0, total = 0;
    bool same = true;
    params.visitParams("", [&](const std::string&, Param<float>& p) {
      if (!isMatrix(p.value)) return;
      same = same && i < m_entries.size() && m_entries[i].source == p.value.data() &&
             m_entries[i].rows == p.value.rows() && m_entries[i].cols == p.value.cols();
      ++i;
      total += static_cast<std::size_t>(p.value.size());
    });
    if (!same || i != m_entries.size()) {
      m_entries.clear();
      m_bits.assign(total, 0);
      std::size_t offset = 0;
      params.visitParams("", [&](const std::string&, Param<float>& p) {
        if (!isMatrix(p.value)) return;
        m_entries.push_back(Entry{p.value.data(), p.value.rows(), p.value.cols(), offset});
        offset += static_cast<std::size_t>(p.value.size());
      });
      std::sort(m_entries.begin(), m_entries.end(),
                [](const Entry& a, const Entry& b) { return a.source < b.source; });
    }
    for (const Entry& e : m_entries) toBf16(e.source, e.rows, e.rows, e.cols, m_bits.data() + e.offset);
  }

  // The bf16 copy of the column-major operand at p with column stride ld when p lies inside a converted
  // weight with that stride (the weight, a block of it): its bits with the same stride; else nullptr.
  const std::uint16_t* find(const float* p, Index ld) const {
    auto it = std::upper_bound(m_entries.begin(), m_entries.end(), p,
                               [](const float* q, const Entry& e) { return q < e.source; });
    if (it == m_entries.begin()) return nullptr;
    --it;
    const Index offset = static_cast<Index>(p - it->source);
    if (offset >= it->rows * it->cols || ld != it->rows) return nullptr;
    return m_bits.data() + it->offset + static_cast<std::size_t>(offset);
  }

  Index count() const { return static_cast<Index>(m_entries.size()); }

 private:
  struct Entry {
    const float* source;
    Index rows, cols;
    std::size_t offset;  // into m_bits
  };
  static bool isMatrix(const MatX<float>& value) { return value.rows() > 1 && value.cols() > 1; }
  std::vector<Entry> m_entries;  // by source address
  std::vector<std::uint16_t> m_bits;
};

namespace detail {
inline std::atomic<const Bf16Weights*>& activeBf16Weights() {
  static std::atomic<const Bf16Weights*> active{nullptr};
  return active;
}
}  // namespace detail

// Makes weights the copies products look up until end() or the scope's end (then the previous ones again);
// a null pointer makes a scope that does nothing (the float policy's step).
class Bf16WeightScope {
 public:
  explicit Bf16WeightScope(const Bf16Weights& weights) : Bf16WeightScope(&weights) {}
  explicit Bf16WeightScope(const Bf16Weights* weights)
      : m_active(weights != nullptr), m_previous(weights ? detail::activeBf16Weights().exchange(weights) : nullptr) {}
  ~Bf16WeightScope() { end(); }
  Bf16WeightScope(const Bf16WeightScope&) = delete;
  Bf16WeightScope& operator=(const Bf16WeightScope&) = delete;

  void end() {
    if (!m_active) return;
    detail::activeBf16Weights().store(m_previous);
    m_active = false;
  }

 private:
  bool m_active;
  const Bf16Weights* m_previous;
};

}  // namespace ddl
