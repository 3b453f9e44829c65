#pragma once
// ddl/dnnl/matmul.hpp: oneDNN's matmul as ddl's bf16 kernel, and its float matmul for comparison.
//
//   ddl::installDnnlBf16();                 // ddl/dnnl/bf16.hpp: bf16 products on oneDNN from now on
//   ddl::dnnlBf16Refusal();                 // "" where that is possible, else why not
//
// Needs oneDNN (Debian: libdnnl-dev): link ddl::dnnl, which defines DDL_WITH_DNNL=1. The bf16 policy
// (core/precision.hpp) hands every product to the installed kernel with its inputs already rounded to
// bf16 by ddl (core/bf16.hpp), so oneDNN multiplies exactly the numbers the emulation multiplies; only the
// order of the float sums differs. oneDNN runs bf16 natively only where the CPU has avx512_bf16 or AMX
// (and DNNL_MAX_CPU_ISA allows it); elsewhere installDnnlBf16 (ddl/dnnl/bf16.hpp) refuses and says why.
// The float matmul runs on every x86 CPU: the same descriptors, layouts and cache, so the integration is
// tested everywhere.
//
// Layout: a column-major C (m, n) with column stride ldc is the row-major C^T (n, m) with row stride ldc,
// so ddl's product is oneDNN's  C^T = op(B)^T op(A)^T  with op(B)^T as oneDNN's source and op(A)^T as its
// weights, every operand described by its strides (no copies). A primitive is made once per shape,
// transposes, strides, alpha, accumulate and type, and kept per thread (a product runs inside ddl's own
// threads, one task per thread, nn/layers/linear.hpp; oneDNN's OpenMP then runs it on the calling thread,
// and a product called outside a parallel region gets OpenMP's thread count, which ddl::setNumThreads sets).
#include "ddl/core/config.hpp"

#if !DDL_WITH_DNNL
#error "ddl/dnnl/matmul.hpp needs oneDNN: link the target ddl::dnnl (Debian: libdnnl-dev)"
#endif

#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

#include "ddl/core/error.hpp"
#include "ddl/core/precision.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

enum class DnnlType { Float, BF16 };

// One oneDNN product (core/precision.hpp's ProductArgs): A and B of type `type` (float, or bf16 bits).
struct DnnlProduct : ProductArgs<void> {
  DnnlType type = DnnlType::Float;
};

namespace detail {

struct DnnlKey {
  Index m, n, k, lda, ldb, ldc;
  std::uint32_t alphaBits;
  unsigned flags;  // transA, transB, accumulate, type
  bool operator==(const DnnlKey& o) const {
    return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldc == o.ldc &&
           alphaBits == o.alphaBits && flags == o.flags;
  }
};
struct DnnlKeyHash {
  std::size_t operator()(const DnnlKey& key) const {
    std::size_t h = 1469598103934665603ull;
    for (Index v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc, Index(key.alphaBits), Index(key.flags)})
      h = (h ^ static_cast<std::size_t>(v)) * 1099511628211ull;
    return h;
  }
};

struct DnnlPrimitive {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul matmul;
  dnnl::memory::desc src, weights, dst;
  std::vector<std::uint8_t> scratch;  // user-managed scratchpad: nothing shared between threads
  dnnl::memory::desc scratchDesc;
};

// The CPU engine and stream of the calling thread, and its primitives.
struct DnnlThread {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<DnnlKey, DnnlPrimitive, DnnlKeyHash> primitives;
};
inline DnnlThread& dnnlThread() {
  thread_local DnnlThread thread;
  return thread;
}

inline DnnlKey dnnlKey(const DnnlProduct& p) {
  std::uint32_t alphaBits;
  std::memcpy(&alphaBits, &p.alpha, sizeof alphaBits);
  const unsigned flags = (p.transA ? 1u : 0u) | (p.transB ? 2u : 0u) | (p.accumulate ? 4u : 0u) |
                         (p.type == DnnlType::BF16 ? 8u : 0u);
  return DnnlKey{p.m, p.n, p.k, p.lda, p.ldb, p.ldc, alphaBits, flags};
}

inline DnnlPrimitive& dnnlPrimitive(const DnnlProduct& p) {
  DnnlThread& thread = dnnlThread();
  const DnnlKey key = dnnlKey(p);
  auto found = thread.primitives.find(key);
  if (found != thread.primitives.end()) return found->second;
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  const dt in = p.type == DnnlType::BF16 ? dt::bf16 : dt::f32;
  DnnlPrimitive prim;
  // source op(B)^T (n, k), weights op(A)^T (k, m), destination C^T (n, m): see the header comment.
  prim.src = dnnl::memory::desc(dims{p.n, p.k}, in, p.transB ? dims{1, p.ldb} : dims{p.ldb, 1});
  prim.weights = dnnl::memory::desc(dims{p.k, p.m}, in, p.transA ? dims{1, p.lda} : dims{p.lda, 1});
  prim.dst = dnnl::memory::desc(dims{p.n, p.m}, dt::f32, dims{p.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (p.alpha != 1.0f) attr.set_output_scales(0, {p.alpha});
  if (p.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  try {
    prim.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(prim.src, prim.weights, prim.dst), attr, thread.engine);
  } catch (const dnnl::error& e) {
    throw Error(message("ddl::dnnlProduct", "oneDNN has no ", p.type == DnnlType::BF16 ? "bf16" : "float",
                        " matmul for op(A) ", shapeString(p.m, p.k), " op(B) ", shapeString(p.k, p.n), ": ", e.what()));
  }
  prim.matmul = dnnl::matmul(prim.pd);
  prim.scratchDesc = prim.pd.scratchpad_desc();
  prim.scratch.resize(prim.scratchDesc.get_size());
  return thread.primitives.emplace(key, std::move(prim)).first->second;
}

}  // namespace detail

// Runs one product through oneDNN (the primitive is made on the first call with its shape on this thread).
inline void dnnlProduct(const DnnlProduct& p) {
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) {
    if (!p.accumulate)
      for (Index j = 0; j < p.n; ++j)
        for (Index i = 0; i < p.m; ++i) p.C[i + j * p.ldc] = 0.0f;
    return;
  }
  detail::DnnlPrimitive& prim = detail::dnnlPrimitive(p);
  detail::DnnlThread& thread = detail::dnnlThread();
  dnnl::memory src(prim.src, thread.engine, const_cast<void*>(p.B));
  dnnl::memory weights(prim.weights, thread.engine, const_cast<void*>(p.A));
  dnnl::memory dst(prim.dst, thread.engine, p.C);
  dnnl::memory scratch(prim.scratchDesc, thread.engine, prim.scratch.data());
  prim.matmul.execute(thread.stream, {{DNNL_ARG_SRC, src},
                                      {DNNL_ARG_WEIGHTS, weights},
                                      {DNNL_ARG_DST, dst},
                                      {DNNL_ARG_SCRATCHPAD, scratch}});
  thread.stream.wait();
}

// The implementation oneDNN chose for a product's shape (e.g. "brg:avx512_core_bf16"), for tests and benchmarks.
inline std::string dnnlImplementation(const DnnlProduct& p) { return detail::dnnlPrimitive(p).pd.impl_info_str(); }

// The bf16 kernel of the policy (core/precision.hpp) through oneDNN.
inline void dnnlBf16Kernel(const Bf16ProductArgs& a) {
  DnnlProduct p;
  p.m = a.m, p.n = a.n, p.k = a.k, p.A = a.A, p.lda = a.lda, p.transA = a.transA, p.B = a.B, p.ldb = a.ldb;
  p.transB = a.transB, p.C = a.C, p.ldc = a.ldc, p.alpha = a.alpha, p.accumulate = a.accumulate;
  p.type = DnnlType::BF16;
  dnnlProduct(p);
}

// Why oneDNN cannot run bf16 products natively here, or "" when it can: the CPU needs avx512_bf16 or AMX,
// and oneDNN's ISA (which DNNL_MAX_CPU_ISA may lower) must reach avx512_core_bf16.
inline std::string dnnlBf16Refusal() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  bool cpu = false;
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    const bool avx512bf16 = (eax >> 5) & 1u;
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    const bool amxbf16 = (edx >> 22) & 1u;
    cpu = avx512bf16 || amxbf16;
  }
  if (!cpu) return "this CPU has neither avx512_bf16 nor AMX: oneDNN would only emulate bf16";
#endif
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto needed = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  if ((isa & needed) != needed)
    return "oneDNN's CPU ISA is limited below avx512_core_bf16 (DNNL_MAX_CPU_ISA)";
  return "";
}

}  // namespace ddl
