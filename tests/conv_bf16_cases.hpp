// The convolutions the bf16 copies are tested on (core/bf16_copy.hpp; test_conv.cpp emulated, test_dnnl.cpp on
// oneDNN): stage 0 of ddl-cifar's net (24 channels, 16 x 16) in one band per image and in bands of 3 rows with a
// 1-row last band, one channel with batch 1 and odd sizes, odd channels in 1-row bands, a stride-2 layer and a
// stride-1 one by patches. Each case is one forward and one backward with a bias.
#pragma once

#include <cstddef>
#include <cstring>
#include <vector>

#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/conv2d.hpp"

namespace ddl_test {

struct ConvBf16Case {
  const char* name;
  ddl::Index in, out, batch, height, width, stride, scratchBytes;
  ddl::ConvAlgorithm algorithm;
};

inline std::vector<ConvBf16Case> convBf16Cases() {
  using A = ddl::ConvAlgorithm;
  const ddl::Index whole = ddl::detail::kConvScratchBytes;
  return {{"stage 0, one band per image", 24, 24, 2, 16, 16, 1, whole, A::ShiftedProducts},
          {"stage 0, 3-row bands and a 1-row last band", 24, 24, 2, 16, 16, 1, 3 * 18 * 72 * 4, A::ShiftedProducts},
          {"one channel, batch 1, 5 x 7", 1, 1, 1, 5, 7, 1, whole, A::ShiftedProducts},
          {"3 -> 5 channels, 7 x 9, 1-row bands", 3, 5, 3, 7, 9, 1, 1, A::ShiftedProducts},
          {"24 -> 48 channels, stride 2, 9 x 11, patches", 24, 48, 2, 9, 11, 2, 1 << 12, A::Patches},
          {"3 -> 24 channels, 5 x 7, patches", 3, 24, 1, 5, 7, 1, 1 << 12, A::Patches}};
}

// The case's layer: 3 x 3, padding 1, a bias, parameters drawn from seed 7.
inline ddl::Conv2d<float> convOf(const ConvBf16Case& c) {
  ddl::Conv2d<float> conv(c.in, c.out, 3, c.stride, 1);
  ddl::Rng rng(7);
  conv.init(rng);
  conv.setAlgorithm(c.algorithm);
  conv.setScratchBytes(c.scratchBytes);
  return conv;
}

struct ConvBf16Run {
  ddl::MatX<float> Y, dX, dW, db;
};

// One forward of X and one backward of dY from zero gradients.
inline ConvBf16Run runConv(ddl::Conv2d<float>& conv, const ConvBf16Case& c, const ddl::MatX<float>& X,
                           const ddl::MatX<float>& dY) {
  ConvBf16Run r;
  conv.forward(X, ddl::TokenLayout::image(c.batch, c.height, c.width), r.Y);
  ddl::zeroGrad(conv);
  conv.backward(dY, r.dX);
  r.dW = conv.weight().grad;
  r.db = conv.bias().grad;
  return r;
}

// The same shapes and the same bits (memcmp: -0 and +0 differ).
inline bool sameBits(const ddl::MatX<float>& a, const ddl::MatX<float>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<std::size_t>(a.size())) == 0;
}

}  // namespace ddl_test
