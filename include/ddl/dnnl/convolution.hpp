#pragma once
// ddl/dnnl/convolution.hpp: oneDNN's convolution as ddl's bf16 convolution, and its float one for tests.
//
//   ddl::installDnnlBf16();   // ddl/dnnl/bf16.hpp: products and convolutions on oneDNN's bf16 kernels
//
// A convolution of ddl's pixels-as-columns layout (core/bf16_conv.hpp) is oneDNN's NHWC: X (in, B*H*W)
// column-major is the tensor [B, in, H, W] with strides [H*W*in, 1, W*in, in], so activations pass without
// copies. The weight (out, in*kh*kw) column-major is [out, in, kh, kw] with strides
// [1, out*kh*kw, out*kw, out]; oneDNN multiplies it in its own blocked layout, reordered once per call
// (weights are small). One call runs a whole pass on oneDNN's OpenMP threads (ddl::setNumThreads sets
// their count): why it is faster than ddl's per-band products at narrow widths (docs/decisions.md,
// "bf16 convolutions"). A primitive is made once per geometry, pass and type, and kept per thread with
// its reorders and a user-managed scratchpad. The float convolution runs on every x86 CPU through the same
// code, so the integration is tested everywhere (tests/test_dnnl.cpp).
#include "ddl/core/config.hpp"

#if !DDL_WITH_DNNL
#error "ddl/dnnl/convolution.hpp needs oneDNN: link the target ddl::dnnl (Debian: libdnnl-dev)"
#endif

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "ddl/core/bf16_conv.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/dnnl/matmul.hpp"

namespace ddl {

// One oneDNN convolution pass (core/bf16_conv.hpp's ConvArgs): X, W, dY of type `type` (float, or bf16 bits).
struct DnnlConv : ConvArgs<void> {
  DnnlType type = DnnlType::Float;
};

namespace detail {

struct DnnlConvKey {
  ConvGeometry g;
  int pass, type;
  bool bias;
  bool operator==(const DnnlConvKey& o) const {
    const ConvGeometry &a = g, &b = o.g;
    return a.batch == b.batch && a.in == b.in && a.out == b.out && a.height == b.height && a.width == b.width &&
           a.outHeight == b.outHeight && a.outWidth == b.outWidth && a.kernelH == b.kernelH &&
           a.kernelW == b.kernelW && a.strideH == b.strideH && a.strideW == b.strideW && a.padH == b.padH &&
           a.padW == b.padW && pass == o.pass && type == o.type && bias == o.bias;
  }
};
struct DnnlConvKeyHash {
  std::size_t operator()(const DnnlConvKey& key) const {
    const ConvGeometry& g = key.g;
    std::size_t h = 1469598103934665603ull;
    for (Index v : {g.batch, g.in, g.out, g.height, g.width, g.outHeight, g.outWidth, g.kernelH, g.kernelW,
                    g.strideH, g.strideW, g.padH, g.padW, Index(key.pass), Index(key.type), Index(key.bias)})
      h = (h ^ static_cast<std::size_t>(v)) * 1099511628211ull;
    return h;
  }
};

// A pass's primitive, the user layouts of its operands, and the weight reorder between ddl's layout and the
// primitive's (in for Forward / BackwardData, out for BackwardWeights) when they differ.
struct DnnlConvPrimitive {
  dnnl::primitive primitive;
  dnnl::memory::desc userWeights, weights, scratchDesc;
  dnnl::reorder weightReorder;
  bool reorderWeights = false;
  std::vector<std::uint8_t> weightBuffer, scratch;
  std::vector<float> gradient;  // BackwardWeights: dW in ddl's layout before it is added
  std::string implementation;   // oneDNN's name for the kernel it chose
};

struct DnnlConvThread {
  std::unordered_map<DnnlConvKey, DnnlConvPrimitive, DnnlConvKeyHash> primitives;
};
inline DnnlConvThread& dnnlConvThread() {
  thread_local DnnlConvThread thread;
  return thread;
}

inline dnnl::memory::desc dnnlImage(Index batch, Index channels, Index height, Index width,
                                    dnnl::memory::data_type type) {
  return dnnl::memory::desc({batch, channels, height, width}, type, dnnl::memory::format_tag::nhwc);
}

inline dnnl::memory::desc dnnlUserWeights(const ConvGeometry& g, dnnl::memory::data_type type) {
  return dnnl::memory::desc({g.out, g.in, g.kernelH, g.kernelW}, type,
                            dnnl::memory::dims{1, g.out * g.kernelH * g.kernelW, g.out * g.kernelW, g.out});
}

inline DnnlConvPrimitive& dnnlConvPrimitive(const DnnlConv& c) {
  DnnlConvThread& thread = dnnlConvThread();
  const DnnlConvKey key{c.g, int(c.pass), int(c.type), c.bias != nullptr};
  auto found = thread.primitives.find(key);
  if (found != thread.primitives.end()) return found->second;
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const ConvGeometry& g = c.g;
  const dnnl::engine& engine = dnnlThread().engine;
  const dt in = c.type == DnnlType::BF16 ? dt::bf16 : dt::f32;
  const dnnl::memory::dims strides{g.strideH, g.strideW};
  const dnnl::memory::dims padL{g.padH, g.padW};
  // oneDNN's right padding: what the output size needs past the input (may be below the left one).
  const dnnl::memory::dims padR{(g.outHeight - 1) * g.strideH + g.kernelH - g.height - g.padH,
                                (g.outWidth - 1) * g.strideW + g.kernelW - g.width - g.padW};
  const auto image = [&](Index channels, Index h, Index w, dt type) { return dnnlImage(g.batch, channels, h, w, type); };
  const dnnl::memory::desc anyWeights({g.out, g.in, g.kernelH, g.kernelW}, in, tag::any);
  const dnnl::memory::desc bias({g.out}, dt::f32, tag::a);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto direct = dnnl::algorithm::convolution_direct;
  DnnlConvPrimitive prim;
  try {
    // The forward's descriptor: the primitive of Forward, the hint of the backward passes.
    const auto forwardDesc =
        c.bias != nullptr
            ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, image(g.in, g.height, g.width, in),
                                              anyWeights, bias, image(g.out, g.outHeight, g.outWidth, dt::f32),
                                              strides, padL, padR)
            : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, image(g.in, g.height, g.width, in),
                                              anyWeights, image(g.out, g.outHeight, g.outWidth, dt::f32), strides,
                                              padL, padR);
    const dnnl::convolution_forward::primitive_desc forward(forwardDesc, attr, engine);
    // Keeps a pass's primitive, the layout it wants the weight (or gives its gradient) in, its scratchpad.
    const auto take = [&](const auto& pd, dnnl::primitive primitive, const dnnl::memory::desc& weights) {
      prim.primitive = std::move(primitive);
      prim.weights = weights, prim.scratchDesc = pd.scratchpad_desc();
      prim.implementation = pd.impl_info_str();
    };
    switch (c.pass) {
      case ConvPass::Forward:
        take(forward, dnnl::convolution_forward(forward), forward.weights_desc());
        break;
      case ConvPass::BackwardData: {
        const dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(direct, image(g.in, g.height, g.width, dt::f32), anyWeights,
                                                  image(g.out, g.outHeight, g.outWidth, in), strides, padL, padR),
            attr, engine, forward);
        take(pd, dnnl::convolution_backward_data(pd), pd.weights_desc());
        break;
      }
      case ConvPass::BackwardWeights: {
        const dnnl::convolution_backward_weights::primitive_desc pd(
            dnnl::convolution_backward_weights::desc(
                direct, image(g.in, g.height, g.width, in),
                dnnl::memory::desc({g.out, g.in, g.kernelH, g.kernelW}, dt::f32, tag::any),
                image(g.out, g.outHeight, g.outWidth, in), strides, padL, padR),
            attr, engine, forward);
        take(pd, dnnl::convolution_backward_weights(pd), pd.diff_weights_desc());
        break;
      }
    }
    prim.scratch.resize(prim.scratchDesc.get_size());
    const bool backwardWeights = c.pass == ConvPass::BackwardWeights;
    prim.userWeights = dnnlUserWeights(g, backwardWeights ? dt::f32 : in);
    prim.reorderWeights = prim.weights != prim.userWeights;
    if (prim.reorderWeights) {
      prim.weightBuffer.resize(prim.weights.get_size());
      prim.weightReorder = backwardWeights ? dnnl::reorder(dnnl::reorder::primitive_desc(engine, prim.weights, engine, prim.userWeights))
                                           : dnnl::reorder(dnnl::reorder::primitive_desc(engine, prim.userWeights, engine, prim.weights));
    }
    if (backwardWeights) prim.gradient.resize(static_cast<std::size_t>(g.out * g.in * g.kernelH * g.kernelW));
  } catch (const dnnl::error& e) {
    throw Error(message("ddl::dnnlConvolution", "oneDNN has no ", c.type == DnnlType::BF16 ? "bf16" : "float",
                        " convolution for ", g.in, " -> ", g.out, " channels, ", g.height, "x", g.width, " -> ",
                        g.outHeight, "x", g.outWidth, ", window ", g.kernelH, "x", g.kernelW, ": ", e.what()));
  }
  return thread.primitives.emplace(key, std::move(prim)).first->second;
}

}  // namespace detail

// Runs one pass through oneDNN (its primitive is made on the first call with that geometry on this thread).
inline void dnnlConvolution(const DnnlConv& c) {
  const ConvGeometry& g = c.g;
  const Index outputs = c.pass == ConvPass::BackwardData ? g.in * g.batch * g.height * g.width
                                                         : c.pass == ConvPass::Forward ? g.out * g.batch * g.outHeight * g.outWidth : 0;
  if (g.batch * g.outHeight * g.outWidth == 0 || g.in * g.kernelH * g.kernelW == 0) {
    // Nothing to multiply: the overwritten outputs become the bias or zero, a weight gradient stays.
    for (Index i = 0; i < outputs; ++i) c.out[i] = c.pass == ConvPass::Forward && c.bias ? c.bias[i % g.out] : 0.0f;
    return;
  }
  detail::DnnlConvPrimitive& prim = detail::dnnlConvPrimitive(c);
  detail::DnnlThread& thread = detail::dnnlThread();
  const dnnl::engine& engine = thread.engine;
  using dt = dnnl::memory::data_type;
  const dt in = c.type == DnnlType::BF16 ? dt::bf16 : dt::f32;
  const auto image = [&](Index channels, Index h, Index w, dt type, const void* data) {
    return dnnl::memory(detail::dnnlImage(g.batch, channels, h, w, type), engine, const_cast<void*>(data));
  };
  dnnl::memory scratch(prim.scratchDesc, engine, prim.scratch.data());
  const bool backwardWeights = c.pass == ConvPass::BackwardWeights;
  dnnl::memory user(prim.userWeights, engine,
                    backwardWeights ? static_cast<void*>(prim.gradient.data()) : const_cast<void*>(c.W));
  dnnl::memory weights = prim.reorderWeights ? dnnl::memory(prim.weights, engine, prim.weightBuffer.data()) : user;
  if (prim.reorderWeights && !backwardWeights) prim.weightReorder.execute(thread.stream, user, weights);
  switch (c.pass) {
    case ConvPass::Forward: {
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, image(g.in, g.height, g.width, in, c.X)},
                                                 {DNNL_ARG_WEIGHTS, weights},
                                                 {DNNL_ARG_DST, image(g.out, g.outHeight, g.outWidth, dt::f32, c.out)},
                                                 {DNNL_ARG_SCRATCHPAD, scratch}};
      if (c.bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory({{g.out}, dt::f32, dnnl::memory::format_tag::a}, engine,
                                                           const_cast<float*>(c.bias)));
      prim.primitive.execute(thread.stream, args);
      break;
    }
    case ConvPass::BackwardData:
      prim.primitive.execute(thread.stream, {{DNNL_ARG_DIFF_SRC, image(g.in, g.height, g.width, dt::f32, c.out)},
                                             {DNNL_ARG_WEIGHTS, weights},
                                             {DNNL_ARG_DIFF_DST, image(g.out, g.outHeight, g.outWidth, in, c.dY)},
                                             {DNNL_ARG_SCRATCHPAD, scratch}});
      break;
    case ConvPass::BackwardWeights:
      prim.primitive.execute(thread.stream, {{DNNL_ARG_SRC, image(g.in, g.height, g.width, in, c.X)},
                                             {DNNL_ARG_DIFF_WEIGHTS, weights},
                                             {DNNL_ARG_DIFF_DST, image(g.out, g.outHeight, g.outWidth, in, c.dY)},
                                             {DNNL_ARG_SCRATCHPAD, scratch}});
      if (prim.reorderWeights) prim.weightReorder.execute(thread.stream, weights, user);
      break;
  }
  thread.stream.wait();
  if (backwardWeights)
    for (std::size_t i = 0; i < prim.gradient.size(); ++i) c.out[i] += prim.gradient[i];
}

// The implementation oneDNN chose for a pass (e.g. "brg:avx512_core_bf16"), for tests and benchmarks.
inline std::string dnnlConvImplementation(const DnnlConv& c) { return detail::dnnlConvPrimitive(c).implementation; }

// The bf16 convolution of the policy (core/bf16_conv.hpp) through oneDNN.
inline void dnnlBf16ConvKernel(const Bf16ConvArgs& a) {
  DnnlConv c;
  c.g = a.g, c.pass = a.pass, c.X = a.X, c.W = a.W, c.dY = a.dY, c.bias = a.bias, c.out = a.out;
  c.type = DnnlType::BF16;
  dnnlConvolution(c);
}

}  // namespace ddl
