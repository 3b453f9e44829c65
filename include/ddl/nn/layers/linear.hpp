#pragma once
// ddl/nn/layers/linear.hpp: the fully connected layer Y = W X + b 1ᵀ, tokens are columns.
//
//   X: (in, B)   W: (out, in)   b: (out, 1)   Y: (out, B)
//   backward:  dW += dY Xᵀ,  db += dY 1,  dX = Wᵀ dY
//
// The cache is a view of X, not a copy (core/view.hpp): X must stay alive and unchanged until
// backward. Steady state allocates nothing: every product goes through a GemmWorkspace per task
// (core/gemm.hpp) whose packing buffers persist, where Eigen's own product would heap-allocate them
// on every call at these sizes.
//
// Threads: a large product is cut into independent pieces, one single-threaded Eigen product per
// OpenMP thread (forward: column ranges of Y; backward: row ranges of dW and column ranges of dX
// as separate tasks). Eigen's own threaded GEMM shares packed panels and spins at each of them;
// on the benchmark net's shapes (B = 128, 256 <-> 1024) with 2 threads the pieces ran 10-40 % faster.
// Each output element is still one dot product computed by one thread: results depend on the
// thread count only through Eigen's blocking of the pieces, as with Eigen's own threading.
//
// One output (out = 1: the value head of a dv = 1 DeltaResidual, any scalar head) is a row vector
// times X, where the GEMM machinery (a 1-row kernel, packing, zeroing the output first) costs about
// 3x the work: forward is one GEMV, dX = wᵀ dY an outer product split over tokens, dw += dY Xᵀ one
// GEMV and db += Σ dY Eigen's vectorised sum, both on one thread (the same bits on any thread count).
#include <string>
#include <vector>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/param.hpp"
#include "ddl/nn/layers/weight_and_bias.hpp"
#include "ddl/core/reduce.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/types.hpp"
#include "ddl/core/view.hpp"
#include "ddl/nn/layers/init.hpp"

namespace ddl {

namespace detail {
// Multiply-adds below which one thread is faster than a fork (a fork costs a few microseconds).
inline constexpr Index kLinearParallelMin = Index(1) << 20;
// A one-column product (in * out multiply-adds) reads all of W once: memory-bound, so worth two threads
// from a smaller size than a GEMM of the same work.
inline constexpr Index kGemvParallelMin = Index(1) << 16;
// Its row ranges: a fixed number, so that each output's arithmetic is the same on any thread count.
inline constexpr int kGemvRowRanges = 4;

// Calls f(task, tasks) for task = 0 .. tasks-1, spread over the OpenMP threads when work
// (multiply-adds) is large enough; tasksPerThread(threads) chooses how many tasks there are.
template <class T, class F>
void runProductTasks(Index work, T&& tasksPerThread, F&& f) {
  int threads = 1;
#if DDL_WITH_OPENMP
  if (work >= kLinearParallelMin && !omp_in_parallel()) threads = omp_get_max_threads();
#else
  (void)work;
#endif
  const int tasks = tasksPerThread(threads);
  if (threads == 1) {
    for (int t = 0; t < tasks; ++t) f(t, tasks);
    return;
  }
  ParallelErrors errors;  // a throwing task must not terminate the process
  DDL_OMP(parallel for schedule(static) num_threads(threads))
  for (int t = 0; t < tasks; ++t) errors.guard([&] { f(t, tasks); });
  errors.rethrow();
}

// Start of part p when n items are cut into parts nearly equal parts.
inline Index partBegin(Index n, int p, int parts) { return n * p / parts; }
}  // namespace detail

// Parameters (WeightAndBias): "weight" (out, in), then "bias" [out] (held as (out, 1)) when present;
// init draws the weight column-major, then the bias.
template <class S>
class Linear : public WeightAndBias<S> {
  using Base = WeightAndBias<S>;
  using Base::m_hasBias;
  using Base::m_W;
  using Base::m_b;

 public:
  // in, out >= 1. The bias has decay = false (AdamW does not shrink it); both start at zero
  // until init() is called.
  Linear(Index in, Index out, bool bias = true) : Base("ddl::Linear", bias), m_in(in), m_out(out) {
    require(in >= 1 && out >= 1, "ddl::Linear", "in and out must be >= 1, got in = ", in, ", out = ", out);
    m_W = Param<S>(out, in, /*withDecay=*/true);
    if (bias) m_b = Param<S>(std::vector<Index>{out}, /*withDecay=*/false);
  }

  // What backward needs of one application: a view of its input. forward/backward without a Cache
  // use the layer's own; a layer applied more than once per step (a shared projection) takes one
  // Cache per application from the caller and runs the backwards in reverse order of the forwards
  // (docs/decisions.md, "Modules applied more than once per step").
  struct Cache {
    ConstView<S> X;  // (in, B) input of the application, owned by the caller
    bool valid = false;
  };

  // X: (in, B) one column per token -> Y: (out, B). Keeps a view of X for backward: X must stay
  // alive and unchanged until then. Y must not alias X.
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y) { forward(X, Y, m_cache); }

  // The same, recording this application in cache.
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y, Cache& cache);

  // Same Y as forward, bit for bit; caches nothing, so backward still refers to the last forward.
  // Allocates nothing once Y has its shape (the product workspaces persist). Y must not alias X.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y);

  // Product workspaces of one caller, one per task (sized by apply before any parallel region).
  using Workspace = std::vector<GemmWorkspace<S>>;

  // The same Y with the caller's workspaces: reads the layer only, so callers on several threads
  // may share one layer, each with its own Workspace.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y, Workspace& ws) const;

  // Y (out, B) = W X (+ b 1ᵀ when b is given) by forward's product code, so a matrix that is not a
  // Linear's own (a tied head's embedding) gives the bits a Linear holding it would. W: (out, in),
  // b: (out, 1), X: (in, B); Y must not alias X or W.
  static void apply(const MatX<S>& W, const MatX<S>* b, const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y, Workspace& ws);

  // dY: (out, B) of the last forward -> dX: (in, B) overwritten; dW, db accumulate (+=).
  // dX must not alias dY.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) { backward(dY, dX, m_cache); }

  // The same for the application recorded in cache.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX, const Cache& cache);

  // dY: (out, B): accumulates dW and db only; for a layer whose input needs no gradient
  // (the first layer of a net), which saves the Wᵀ dY product.
  void backwardParamsOnly(const Eigen::Ref<const MatX<S>>& dY) { backwardParamsOnly(dY, m_cache); }

  void backwardParamsOnly(const Eigen::Ref<const MatX<S>>& dY, const Cache& cache);

  // Exchanges the buffers whose contents are dead between calls (the product workspaces, the bias sums)
  // with other, a layer of the same shape: layers that run one after another then share one set
  // (docs/decisions.md, "Scratch shared between blocks"). Parameters and the cache stay.
  void swapScratch(Linear& other) noexcept {
    m_dbWide.swap(other.m_dbWide);
    m_gemmForward.swap(other.m_gemmForward);
    m_gemmWeight.swap(other.m_gemmWeight);
    m_gemmInput.swap(other.m_gemmInput);
  }

  Index inFeatures() const { return m_in; }
  Index outFeatures() const { return m_out; }

 private:
  void checkBackward(const Eigen::Ref<const MatX<S>>& dY, const Cache& cache) const;

  // The out = 1 path needs dY's entries contiguous (a row block of a taller matrix takes the GEMMs).
  bool singleOutput(const Eigen::Ref<const MatX<S>>& dY) const {
    return m_out == 1 && (dY.outerStride() == 1 || dY.cols() <= 1);
  }

  // out = 1: dw += dY Xᵀ and db += Σ dY, each one reduction on one thread.
  void accumulateSingleOutputGrads(const Eigen::Ref<const MatX<S>>& dY, const Cache& cache);

  // dW += dY Xᵀ and db += dY 1 on row range `part` of `parts` (out is split, so parts never overlap).
  void accumulateParamGrads(const Eigen::Ref<const MatX<S>>& dY, const Cache& cache, int part, int parts);

  // One backward workspace per task and product, made before any parallel region (tasks <= 2 ceil(threads/2)).
  void reserveWorkspaces();

  Index m_in, m_out;
  Cache m_cache;  // the application of forward(X, Y) without a Cache
  VecX<SumType<S>> m_dbWide;  // (out) the bias gradient's sums over tokens, in double
  Workspace m_gemmForward, m_gemmWeight, m_gemmInput;  // per task: Y, dW rows, dX
};

template <class S>
void Linear<S>::forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y, Cache& cache) {
  checkShape("ddl::Linear::forward", "X", X, m_in, -1);
  requireNoAlias("ddl::Linear::forward", "X", X, "Y", Y);
  cache.X.bind(X);
  cache.valid = true;
  apply(m_W.value, m_hasBias ? &m_b.value : nullptr, X, Y, m_gemmForward);
}

template <class S>
void Linear<S>::forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y) {
  forwardInference(X, Y, m_gemmForward);
}

template <class S>
void Linear<S>::forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y, Workspace& ws) const {
  checkShape("ddl::Linear::forwardInference", "X", X, m_in, -1);
  requireNoAlias("ddl::Linear::forwardInference", "X", X, "Y", Y);
  apply(m_W.value, m_hasBias ? &m_b.value : nullptr, X, Y, ws);
}

template <class S>
void Linear<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX, const Cache& cache) {
  checkBackward(dY, cache);
  requireNoAlias("ddl::Linear::backward", "dY", dY, "dX", dX);
  const Index B = dY.cols();
  dX.resize(m_in, B);
  if (singleOutput(dY)) {
    const auto w = m_W.value.row(0);
    DDL_OMP(parallel for schedule(static) if (m_in * B >= detail::kParallelMinWork))
    for (Index j = 0; j < B; ++j) dX.col(j) = dY(0, j) * w.transpose();
    accumulateSingleOutputGrads(dY, cache);
    return;
  }
  reserveWorkspaces();
  // The two products have equal work: half of the tasks are row ranges of dW, half column ranges of dX.
  detail::runProductTasks(m_in * m_out * B * 2, [](int threads) { return 2 * ((threads + 1) / 2); },
                          [&](int t, int tasks) {
                            const int half = tasks / 2;
                            if (t < half) {
                              accumulateParamGrads(dY, cache, t, half);
                            } else {
                              const Index j0 = detail::partBegin(B, t - half, half);
                              const Index n = detail::partBegin(B, t - half + 1, half) - j0;
                              m_gemmInput[t - half].product(m_W.value, true, dY.middleCols(j0, n), false,
                                                            dX.middleCols(j0, n), S(1), false);
                            }
                          });
}

template <class S>
void Linear<S>::backwardParamsOnly(const Eigen::Ref<const MatX<S>>& dY, const Cache& cache) {
  checkBackward(dY, cache);
  if (singleOutput(dY)) {
    accumulateSingleOutputGrads(dY, cache);
    return;
  }
  reserveWorkspaces();
  detail::runProductTasks(m_in * m_out * dY.cols(), [](int threads) { return threads; },
                          [&](int t, int tasks) { accumulateParamGrads(dY, cache, t, tasks); });
}

template <class S>
void Linear<S>::checkBackward(const Eigen::Ref<const MatX<S>>& dY, const Cache& cache) const {
  const char* fn = "ddl::Linear::backward";
  if (!cache.valid) throw Error(message(fn, "called before forward"));
  checkShape(fn, "dY", dY, m_out, cache.X.cols());
}

template <class S>
void Linear<S>::accumulateSingleOutputGrads(const Eigen::Ref<const MatX<S>>& dY, const Cache& cache) {
  const Eigen::Map<const RowX<S>> dy(dY.data(), dY.cols());
  m_W.grad.noalias() += dy * cache.X.map().transpose();
  if (m_hasBias) m_b.grad(0, 0) += static_cast<S>(sumWide(dy));
}

template <class S>
void Linear<S>::apply(const MatX<S>& W, const MatX<S>* b, const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y,
                      Workspace& ws) {
  const Index B = X.cols(), in = W.cols(), out = W.rows();
  if (X.rows() != in || (b != nullptr && b->rows() != out))
    throw ShapeError(message("ddl::Linear::apply", "W is ", shapeOf(W), ", b is ", b ? shapeOf(*b) : std::string("none"),
                             " and X is ", shapeOf(X), ": shapes do not chain"));
  Y.resize(out, B);
  if (out == 1) {
    Eigen::Map<RowX<S>> y(Y.data(), B);
    y.noalias() = W * X;
    if (b != nullptr) y.array() += (*b)(0, 0);
    return;
  }
  if (B == 1) {  // one token (decoding): row ranges of a matrix-vector product, W never packed
    // Eigen threads no matrix-vector product, and the packed GEMM kernel would copy all of W for one
    // column.
    const auto x = X.col(0);
    detail::runProductTasks(in * out >= detail::kGemvParallelMin ? detail::kLinearParallelMin : 0,
                            [](int) { return detail::kGemvRowRanges; }, [&](int t, int parts) {
      const Index r0 = detail::partBegin(out, t, parts), rn = detail::partBegin(out, t + 1, parts) - r0;
      if (rn == 0) return;
      auto y = Y.col(0).segment(r0, rn);
      y.noalias() = W.middleRows(r0, rn) * x;
      if (b != nullptr) y += b->col(0).segment(r0, rn);
    });
    return;
  }
  const std::size_t tasks = static_cast<std::size_t>(2 * ((numThreads() + 1) / 2));
  if (ws.size() < tasks) ws.resize(tasks);
  // One task per thread, each a column range of Y.
  detail::runProductTasks(in * out * B, [](int threads) { return threads; }, [&](int t, int parts) {
    const Index j0 = detail::partBegin(B, t, parts), n = detail::partBegin(B, t + 1, parts) - j0;
    auto Yj = Y.middleCols(j0, n);
    ws[static_cast<std::size_t>(t)].product(W, false, X.middleCols(j0, n), false, Yj, S(1), false);
    if (b != nullptr) Yj.colwise() += b->col(0);
  });
}

template <class S>
void Linear<S>::accumulateParamGrads(const Eigen::Ref<const MatX<S>>& dY, const Cache& cache, int part, int parts) {
  const Index r0 = detail::partBegin(m_out, part, parts), rn = detail::partBegin(m_out, part + 1, parts) - r0;
  if (rn == 0) return;
  m_gemmWeight[part].product(dY.middleRows(r0, rn), false, cache.X.map(), true, m_W.grad.middleRows(r0, rn), S(1), true);
  if (m_hasBias) {
    // Column sweep into a double accumulator (core/reduce.hpp): contiguous, vectorised, and its
    // error does not grow with the number of tokens. Each row's sum is the same on any split.
    auto acc = m_dbWide.segment(r0, rn);
    acc.setZero();
    addRowSums(dY.middleRows(r0, rn), acc);
    m_b.grad.col(0).segment(r0, rn) += acc.template cast<S>();
  }
}

template <class S>
void Linear<S>::reserveWorkspaces() {
  if (m_hasBias && m_dbWide.size() != m_out) m_dbWide.resize(m_out);
  const std::size_t tasks = static_cast<std::size_t>(2 * ((numThreads() + 1) / 2));
  for (Workspace* ws : {&m_gemmWeight, &m_gemmInput})  // forward's are sized by apply
    if (ws->size() < tasks) ws->resize(tasks);
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class Linear<float>;
extern template class Linear<double>;
#endif

}  // namespace ddl
