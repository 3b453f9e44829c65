#pragma once
// ddl/core/bf16_copy.hpp: a float matrix that several products of one thread read, converted to bf16 once.
//
//   copy.bind(X.data(), X.outerStride(), X.rows(), X.cols());  // after X was written
//   { ddl::Bf16CopyScope scope(&copy);       // this thread's products find blocks of X in the copy
//     products reading blocks of X }         // the scope ends before X is written again
//
// Under the bf16 policy (core/precision.hpp) every product rounds its inputs to bf16. When several products
// read overlapping blocks of one matrix (a 3x3 convolution's nine shifted products read nine overlapping
// slices of its padded input band, docs/decisions.md "The conv step's profile"), converting the matrix once
// and reading each block from the copy gives the same bits for a fraction of the conversions. Binding
// converts nothing: the first bf16 product that reads a block of the matrix converts it whole, so under the
// float policy a bound copy costs nothing and the caller need not know the policy. Copies are per thread:
// GemmWorkspace<float> (core/gemm.hpp) looks an operand up in the calling thread's active scopes after the
// step's weights (core/bf16_weights.hpp). A copy does not see writes after its conversion: whoever binds
// keeps the matrix unchanged while the scope is active, and binds it again after writing it.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>

#include "ddl/core/bf16.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

namespace detail {
// A buffer of bf16 bits that only grows.
class Bf16Buffer {
 public:
  std::uint16_t* reserve(std::size_t size) {
    if (size > m_size) {
      m_data.reset(new std::uint16_t[size]);
      m_size = size;
    }
    return m_data.get();
  }
  const std::uint16_t* data() const { return m_data.get(); }

 private:
  std::unique_ptr<std::uint16_t[]> m_data;
  std::size_t m_size = 0;
};

// Off: products ignore the copies and convert their operands themselves (tests compare the two bit for bit).
inline std::atomic<bool>& bf16CopiesSwitch() {
  static std::atomic<bool> on{true};
  return on;
}
}  // namespace detail

// Whether products read the active copies; setBf16CopiesEnabled returns the previous setting.
inline bool bf16CopiesEnabled() { return detail::bf16CopiesSwitch().load(std::memory_order_relaxed); }
inline bool setBf16CopiesEnabled(bool on) { return detail::bf16CopiesSwitch().exchange(on); }

class Bf16Copy {
 public:
  // A copy of a copy starts unbound (so layers holding one stay copyable and never read another's matrix).
  Bf16Copy() = default;
  Bf16Copy(const Bf16Copy&) {}
  Bf16Copy& operator=(const Bf16Copy&) {
    clear();
    return *this;
  }

  // Names the column-major (rows, cols) at src with column stride ld >= rows; converted at the first find
  // that hits it (the bits packed, column stride rows).
  void bind(const float* src, Index ld, Index rows, Index cols) {
    m_source = src, m_data = nullptr, m_ld = ld, m_rows = rows, m_cols = cols;
  }

  // Unbinds: find() finds nothing until the next bind().
  void clear() { m_source = nullptr; }
  bool bound() const { return m_source != nullptr; }
  bool converted() const { return m_data != nullptr; }

  // The bits of the (rows, cols) block at p with column stride ld, when it lies inside the bound matrix and
  // ld is its stride, with their column stride in bitsLd (converting the matrix first if not yet); else
  // nullptr. Allocates only when the matrix is larger than every one converted before.
  const std::uint16_t* find(const float* p, Index ld, Index rows, Index cols, Index& bitsLd) {
    if (m_source == nullptr || ld != m_ld) return nullptr;
    const auto at = reinterpret_cast<std::uintptr_t>(p), start = reinterpret_cast<std::uintptr_t>(m_source);
    if (at < start || (at - start) % sizeof(float) != 0) return nullptr;  // p may point into another matrix
    const auto offset = static_cast<Index>((at - start) / sizeof(float));
    if (offset >= m_ld * m_cols) return nullptr;
    const Index i = offset % m_ld, j = offset / m_ld;
    if (i + rows > m_rows || j + cols > m_cols) return nullptr;
    if (m_data == nullptr) {
      std::uint16_t* bits = m_bits.reserve(static_cast<std::size_t>(m_rows * m_cols));
      toBf16(m_source, m_ld, m_rows, m_cols, bits);
      m_data = bits;
    }
    bitsLd = m_rows;
    return m_data + i + j * m_rows;
  }

 private:
  const float* m_source = nullptr;
  const std::uint16_t* m_data = nullptr;  // in m_bits once converted
  Index m_ld = 0, m_rows = 0, m_cols = 0;
  detail::Bf16Buffer m_bits;
};

class Bf16CopyScope;
namespace detail {
inline const Bf16CopyScope*& activeBf16Copies() {
  thread_local const Bf16CopyScope* top = nullptr;
  return top;
}
}  // namespace detail

// Makes up to three copies visible to the calling thread's products until the scope ends (scopes nest;
// the previous ones stay visible). Null pointers are skipped; with none the scope does nothing.
class Bf16CopyScope {
 public:
  explicit Bf16CopyScope(Bf16Copy* a, Bf16Copy* b = nullptr, Bf16Copy* c = nullptr) {
    for (Bf16Copy* copy : {a, b, c})
      if (copy != nullptr) m_copies[m_count++] = copy;
    if (m_count == 0) return;
    m_previous = detail::activeBf16Copies();
    detail::activeBf16Copies() = this;
  }
  ~Bf16CopyScope() {
    if (m_count > 0) detail::activeBf16Copies() = m_previous;
  }
  Bf16CopyScope(const Bf16CopyScope&) = delete;
  Bf16CopyScope& operator=(const Bf16CopyScope&) = delete;

  // The bits of a block (Bf16Copy::find) from this scope's copies or an enclosing scope's.
  const std::uint16_t* find(const float* p, Index ld, Index rows, Index cols, Index& bitsLd) const {
    for (int i = 0; i < m_count; ++i)
      if (const std::uint16_t* bits = m_copies[i]->find(p, ld, rows, cols, bitsLd)) return bits;
    return m_previous != nullptr ? m_previous->find(p, ld, rows, cols, bitsLd) : nullptr;
  }

 private:
  Bf16Copy* m_copies[3] = {};
  int m_count = 0;
  const Bf16CopyScope* m_previous = nullptr;
};

// The bits of the (rows, cols) block at p with column stride ld from a copy the calling thread made
// visible (their column stride in bitsLd), or nullptr.
inline const std::uint16_t* findBf16Copy(const float* p, Index ld, Index rows, Index cols, Index& bitsLd) {
  const Bf16CopyScope* top = detail::activeBf16Copies();
  if (top == nullptr || !bf16CopiesEnabled()) return nullptr;
  return top->find(p, ld, rows, cols, bitsLd);
}

}  // namespace ddl
