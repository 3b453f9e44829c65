#pragma once
// ddl/core/gemm.hpp: a single-threaded matrix product whose packing buffers persist between calls.
//
// Eigen's product C.noalias() = A * B packs panels of A and B into scratch buffers on every call: on
// the stack up to EIGEN_STACK_ALLOCATION_LIMIT (128 KiB), on the heap above it, and always on the
// heap when Eigen threads the product itself. A training step runs the same shapes every time, so
// GemmWorkspace keeps one set of buffers sized for its last shape and calls Eigen's packed kernel
// (internal::general_matrix_matrix_product) directly: after the first call with a given shape, a
// product allocates nothing. Callers split large products over threads themselves, one workspace per
// thread (nn/layers/linear.hpp does). This is the one place ddl uses Eigen's internal product kernel.
//
// Float products run ddl's packed AVX2 kernel instead when the CPU has it (core/packed_sgemm.hpp): faster,
// and its bits do not depend on how a product is cut into row or column ranges. Under the bf16 policy
// (core/precision.hpp) float products round their inputs to bf16 and run the installed bf16 kernel, or
// are emulated; a weight's bf16 copy is read from the step's cache (core/bf16_weights.hpp), a block of a
// matrix the calling thread bound for several products from its one conversion (core/bf16_copy.hpp).
#include <cstdint>
#include <memory>
#include <type_traits>

#include <Eigen/Core>

#include "ddl/core/bf16.hpp"
#include "ddl/core/bf16_copy.hpp"
#include "ddl/core/bf16_weights.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/packed_sgemm.hpp"
#include "ddl/core/precision.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

template <class S>
class GemmWorkspace {
 public:
  // Column-major operands with unit inner stride: plain matrices, their column blocks, row blocks.
  using ConstOperand = Eigen::Ref<const MatX<S>, 0, Eigen::OuterStride<>>;
  using Output = Eigen::Ref<MatX<S>, 0, Eigen::OuterStride<>>;

  // The buffers are scratch: a copy starts empty (so layers holding workspaces stay copyable).
  GemmWorkspace() = default;
  GemmWorkspace(const GemmWorkspace&) {}
  GemmWorkspace& operator=(const GemmWorkspace&) { return *this; }
  GemmWorkspace(GemmWorkspace&&) noexcept = default;
  GemmWorkspace& operator=(GemmWorkspace&&) noexcept = default;

  // C = alpha op(A) op(B)            (accumulate == false)
  // C = C + alpha op(A) op(B)        (accumulate == true)
  // op(A): (m, k), op(B): (k, n), C: (m, n); op(M) is M or M^T. C must not alias A or B.
  void product(const ConstOperand& A, bool transA, const ConstOperand& B, bool transB, Output C, S alpha,
               bool accumulate) {
    const Index m = transA ? A.cols() : A.rows(), k = transA ? A.rows() : A.cols();
    const Index kB = transB ? B.cols() : B.rows(), n = transB ? B.rows() : B.cols();
    if (k != kB || C.rows() != m || C.cols() != n)
      throw ShapeError(message("ddl::GemmWorkspace::product", "op(A) is ", shapeString(m, k), ", op(B) is ",
                               shapeString(kB, n), " and C is ", shapeOf(C), ": shapes do not chain"));
    if constexpr (std::is_same_v<S, float>) {
      if (m > 0 && n > 0 && k > 0 && productPrecision() == Precision::BF16) {
        bf16Product(m, n, k, A, transA, B, transB, C, alpha, accumulate);
        return;
      }
    }
    nativeProduct(m, n, k, A, transA, B, transB, C, alpha, accumulate);
  }

  // (Re)builds the buffers for a product of op(A): (m, k) times op(B): (k, n) when the shape changes;
  // the only allocation this class makes. product() calls it; a caller that runs products inside a
  // parallel region calls it before, so the region allocates nothing. m, n, k >= 1.
  void reserve(Index m, Index n, Index k) {
#if DDL_PACKED_SGEMM_X86
    if constexpr (std::is_same_v<S, float>) {
      if (packedSgemmEnabled()) {
        detail::sgemmReserve(m, n, k, m_packA, m_packB);
        return;
      }
    }
#endif
    if (m_blocking && m == m_m && n == m_n && k == m_k) return;
    m_blocking = std::make_unique<Blocking>(packedRows(m, n, k), n, k, 1, true);
    m_blocking->allocateAll();
    m_m = m;
    m_n = n;
    m_k = k;
  }

  // The packed block of A holds kc x mc scalars. Eigen takes mc = m whenever its L3 estimate (256 MiB on
  // this machine kind) holds A, so a tall product (the language model's head: 50 304 rows) packed 75-100
  // MiB per task. Rows beyond kMaxPackedLhsBytes are cut into blocks of a multiple of the kernel's mr
  // rows, with kc and nc unchanged: every output element then sums the same kc panels in the same order
  // and every row runs the same micro kernel as without the cut (the kernel's row peeling starts each
  // block at a multiple of mr), so the bits do not change (tests/test_gemm.cpp checks it). Returns the
  // rows to give Eigen's blocking: m, or the cut when it keeps kc and nc.
  static Index packedRows(Index m, Index n, Index k) {
    constexpr Index kMaxPackedLhsBytes = Index(4) << 20;
    constexpr Index mr = Eigen::internal::gebp_traits<S, S>::mr;
    Index kc = k, mc = m, nc = n;
    Eigen::internal::computeProductBlockingSizes<S, S, 1>(kc, mc, nc, Index(1));
    const Index cut = kMaxPackedLhsBytes / (kc * static_cast<Index>(sizeof(S))) / mr * mr;
    if (cut < mr || mc <= cut) return m;
    Index kcCut = k, mcCut = cut, ncCut = n;
    Eigen::internal::computeProductBlockingSizes<S, S, 1>(kcCut, mcCut, ncCut, Index(1));
    return kcCut == kc && ncCut == nc && mcCut == cut ? cut : m;
  }

 private:
  using Blocking = Eigen::internal::gemm_blocking_space<Eigen::ColMajor, S, S, Eigen::Dynamic, Eigen::Dynamic,
                                                        Eigen::Dynamic>;

  // A transposed column-major operand is the same memory read as row-major with the same stride.
  template <int LhsOrder, int RhsOrder>
  void kernel(Index m, Index n, Index k, const ConstOperand& A, const ConstOperand& B, Output& C, S alpha) {
    Eigen::internal::general_matrix_matrix_product<Index, S, LhsOrder, false, S, RhsOrder, false, Eigen::ColMajor,
                                                   1>::run(m, n, k, A.data(), A.outerStride(), B.data(),
                                                           B.outerStride(), C.data(), 1, C.outerStride(), alpha,
                                                           *m_blocking, nullptr);
  }

  // The product in S, every term in S: ddl's packed float kernel or Eigen's.
  void nativeProduct(Index m, Index n, Index k, const ConstOperand& A, bool transA, const ConstOperand& B, bool transB,
                     Output& C, S alpha, bool accumulate) {
#if DDL_PACKED_SGEMM_X86
    if constexpr (std::is_same_v<S, float>) {
      if (m > 0 && n > 0 && k > 0 && packedSgemmEnabled()) {
        detail::packedSgemm(m, n, k, A.data(), A.outerStride(), transA, B.data(), B.outerStride(), transB, C.data(),
                            C.outerStride(), alpha, accumulate, m_packA, m_packB);
        return;
      }
    }
#endif
    if (!accumulate) C.setZero();
    if (m == 0 || n == 0 || k == 0) return;
    reserve(m, n, k);
    const int code = (transA ? 2 : 0) + (transB ? 1 : 0);
    switch (code) {
      case 0: kernel<Eigen::ColMajor, Eigen::ColMajor>(m, n, k, A, B, C, alpha); break;
      case 1: kernel<Eigen::ColMajor, Eigen::RowMajor>(m, n, k, A, B, C, alpha); break;
      case 2: kernel<Eigen::RowMajor, Eigen::ColMajor>(m, n, k, A, B, C, alpha); break;
      default: kernel<Eigen::RowMajor, Eigen::RowMajor>(m, n, k, A, B, C, alpha); break;
    }
  }

  // The bf16 policy: op(A), op(B) rounded to bf16 (a weight's copy from the step's cache, a block of a
  // matrix the thread bound from its copy, others converted here), then the installed bf16 kernel, or
  // the emulation: the rounded values widened back to float (exactly) and multiplied by the float kernel,
  // float products and sums.
  void bf16Product(Index m, Index n, Index k, const ConstOperand& A, bool transA, const ConstOperand& B, bool transB,
                   Output& C, S alpha, bool accumulate) {
    const Bf16Weights* weights = detail::activeBf16Weights().load(std::memory_order_relaxed);
    Bf16ProductArgs args;
    args.m = m, args.n = n, args.k = k, args.transA = transA, args.transB = transB;
    args.C = C.data(), args.ldc = C.outerStride(), args.alpha = alpha, args.accumulate = accumulate;
    args.A = bf16Operand(A, weights, m_bitsA, args.lda);
    args.B = bf16Operand(B, weights, m_bitsB, args.ldb);
    if (const Bf16Kernel kernel = bf16Kernel()) {
      kernel(args);
      return;
    }
    const Index ra = A.rows(), ca = A.cols(), rb = B.rows(), cb = B.cols();
    float* a = m_wideA.reserve(ra * ca);
    float* b = m_wideB.reserve(rb * cb);
    fromBf16(args.A, args.lda, ra, ca, a, ra);
    fromBf16(args.B, args.ldb, rb, cb, b, rb);
    using Map = Eigen::Map<const MatX<float>>;
    nativeProduct(m, n, k, Map(a, ra, ca), transA, Map(b, rb, cb), transB, C, alpha, accumulate);
  }

  // X's bf16 bits and their column stride: the cached copy of a weight, else the thread's copy holding X,
  // else X converted into bits.
  static const std::uint16_t* bf16Operand(const ConstOperand& X, const Bf16Weights* weights,
                                          detail::Bf16Buffer& bits, Index& ld) {
    if (weights != nullptr) {
      if (const std::uint16_t* cached = weights->find(X.data(), X.outerStride())) {
        ld = X.outerStride();
        return cached;
      }
    }
    if (const std::uint16_t* copied = findBf16Copy(X.data(), X.outerStride(), X.rows(), X.cols(), ld)) return copied;
    std::uint16_t* out = bits.reserve(static_cast<std::size_t>(X.rows() * X.cols()));
    toBf16(X.data(), X.outerStride(), X.rows(), X.cols(), out);
    ld = X.rows();
    return out;
  }

  std::unique_ptr<Blocking> m_blocking;
  Index m_m = -1, m_n = -1, m_k = -1;
  detail::PackBuffer m_packA, m_packB;  // the packed kernel's blocks (float only)
  detail::Bf16Buffer m_bitsA, m_bitsB;  // the bf16 policy's converted operands
  detail::PackBuffer m_wideA, m_wideB;  // the emulation's rounded operands in float
};

}  // namespace ddl
