#pragma once
// ddl/nn/layers/conv_scratch.hpp: the per-thread scratch of a convolution's products (nn/layers/conv2d.hpp).
//
// Both algorithms work in cache-sized pieces (bands, or chunks of output columns) in a per-thread
// scratch of about Conv2d::scratchBytes(), built once in forward and again in backward. Every product
// goes through a GemmWorkspace (core/gemm.hpp) reserved here before any parallel region, so a
// steady-state step allocates nothing and parallel regions neither allocate nor throw.
// A backward task sums its own weight and bias gradients; addGradients adds them up in task order,
// so the result does not depend on the thread timing.
// A matrix that several products read is bound to a copy (core/bf16_copy.hpp), so that under the bf16 policy
// it is converted once: the permuted weight once per thread and pass, a band's padded input and output
// gradient once for all its taps (docs/decisions.md, "The conv step's profile"); their bits are allocated
// at the first conversion, inside the first parallel region, as the products' own bf16 buffers are.
#include <cstddef>
#include <type_traits>
#include <vector>

#include "ddl/core/bf16_copy.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/reduce.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/conv_patches.hpp"

namespace ddl {
namespace detail {

template <class S>
class ConvScratch {
 public:
  // Scratch of one thread: a patch chunk and its gradient or a band's padded input, extended output and
  // input gradient, partial parameter gradients and the products' workspaces, [0] for full chunks or
  // bands, [1] for the shorter chunk at the end of the thread's range or the shorter last band.
  struct Task {
    MatX<S> P, dP;        // patches: (K, chunk)
    MatX<S> Xpad, dXpad;  // shifted products: (in, (R + kh - 1) * Wp)
    MatX<S> Yext;         // shifted products: (out, L), the band's output or its gradient
    MatX<S> dWp;          // (out, K)
    VecX<SumType<S>> db;  // (out) the bias gradient's sum over this task's pixels, in double
    GemmWorkspace<S> forward[2], weight[2], input[2];
    Bf16Copy weightBits, inputBits, outputBits;  // Wp, a band's Xpad and Yext (or a chunk's dY) in bf16
  };

  // in, out channels; K = kh*kw*in patch rows.
  ConvScratch(Index in, Index out, Index K) : m_in(in), m_out(out), m_K(K) {}

  Task& operator[](int t) { return m_tasks[static_cast<std::size_t>(t)]; }

  // Allocates everything `tasks` threads need for column ranges of lengths rangeLength(t), in chunks of
  // `chunk` columns: forward products, or backward ones (with the input gradient's when inputProducts).
  template <class RangeLength>
  void reservePatches(int tasks, Index chunk, RangeLength&& rangeLength, bool forwardProducts, bool inputProducts) {
    grow(tasks);
    for (int t = 0; t < tasks; ++t) {
      Task& task = (*this)[t];
      const Index len = rangeLength(t);
      ensureShape(task.P, m_K, chunk);
      reserveProducts(task, {len >= chunk ? chunk : 0, len % chunk}, m_K, !forwardProducts, inputProducts);
      if (!forwardProducts && inputProducts) ensureShape(task.dP, m_K, chunk);
    }
  }

  // Allocates everything `tasks` threads need for bands of g (kernel height kh).
  void reserveBands(int tasks, const ConvBands& g, Index kh, bool backward, bool inputGradient);

  // A backward task over images [b0, b1) of perIn pixels each: their dX columns zeroed (the task only
  // adds into them), its partial parameter gradients cleared.
  static void beginBackward(Task& task, Index b0, Index b1, Index perIn, MatX<S>* dX);

  // The gradients of the first `tasks` tasks, in task order, into the weight gradient (out, in*taps)
  // (Wp order -> weight order) and, when non-null, the bias gradient (out, 1).
  void addGradients(int tasks, Index taps, MatX<S>& dW, MatX<S>* db);

  // X bound to `copy` for the products of one thread, band or chunk that read blocks of it: under the bf16
  // policy the first of them converts X (float layers); nullptr for double ones.
  template <class Block>
  static Bf16Copy* shared(const Block& X, Bf16Copy& copy) {
    if constexpr (std::is_same_v<S, float>) {
      copy.bind(X.data(), X.outerStride(), X.rows(), X.cols());
      return &copy;
    } else {
      return nullptr;
    }
  }

 private:
  static void ensureShape(MatX<S>& M, Index rows, Index cols) {
    if (M.rows() != rows || M.cols() != cols) M.resize(rows, cols);
  }
  void grow(int tasks) {
    if (m_tasks.size() < static_cast<std::size_t>(tasks)) m_tasks.resize(static_cast<std::size_t>(tasks));
  }
  // The products of pieces of cols[0] and cols[1] columns (0: none) with inner size k (forward) and,
  // for backward, the weight products, the input gradient's (when input) and the gradient partials.
  void reserveProducts(Task& task, const Index (&cols)[2], Index k, bool backward, bool input);

  Index m_in, m_out, m_K;
  std::vector<Task> m_tasks;
  VecX<SumType<S>> m_dbWide;  // (out) the tasks' bias sums added in task order
};

template <class S>
void ConvScratch<S>::reserveBands(int tasks, const ConvBands& g, Index kh, bool backward, bool inputGradient) {
  grow(tasks);
  const Index L[2] = {g.extended(g.rows), g.lastRows != g.rows ? g.extended(g.lastRows) : 0};
  for (int t = 0; t < tasks; ++t) {
    Task& task = (*this)[t];
    ensureShape(task.Xpad, m_in, g.padded(g.rows, kh));
    ensureShape(task.Yext, m_out, g.extended(g.rows));
    reserveProducts(task, L, m_in, backward, inputGradient);
    if (backward && inputGradient) ensureShape(task.dXpad, m_in, g.padded(g.rows, kh));
  }
}

template <class S>
void ConvScratch<S>::reserveProducts(Task& task, const Index (&cols)[2], Index k, bool backward, bool input) {
  for (int s = 0; s < 2; ++s) {
    if (cols[s] == 0) continue;
    if (!backward) {
      task.forward[s].reserve(m_out, cols[s], k);
    } else {
      task.weight[s].reserve(m_out, k, cols[s]);
      if (input) task.input[s].reserve(k, cols[s], m_out);
    }
  }
  if (!backward) return;
  task.dWp.resize(m_out, m_K);
  task.db.resize(m_out);
}

template <class S>
void ConvScratch<S>::beginBackward(Task& task, Index b0, Index b1, Index perIn, MatX<S>* dX) {
  if (dX) dX->middleCols(b0 * perIn, (b1 - b0) * perIn).setZero();
  task.dWp.setZero();
  task.db.setZero();
}

template <class S>
void ConvScratch<S>::addGradients(int tasks, Index taps, MatX<S>& dW, MatX<S>* db) {
  if (db) m_dbWide.setZero(m_out);
  for (int t = 0; t < tasks; ++t) {
    const Task& task = (*this)[t];
    for (Index c = 0; c < m_in; ++c)
      for (Index k = 0; k < taps; ++k) dW.col(c * taps + k) += task.dWp.col(k * m_in + c);
    if (db) m_dbWide += task.db;
  }
  if (db) db->col(0) += m_dbWide.template cast<S>();  // one rounding to S
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class ConvScratch<float>;
extern template class ConvScratch<double>;
#endif

}  // namespace detail
}  // namespace ddl
