#pragma once
// ddl/nn/layers/conv_algorithm.hpp: how Conv2d (nn/layers/conv2d.hpp) forms its products, and which way Automatic
// picks. Both algorithms compute the same function up to rounding, on the input copies of
// nn/layers/conv_patches.hpp (Wp_t: the weight columns of tap t, Wp: all taps):
//   Shifted products (stride 1; the default on narrow layers), per band of output rows:
//     forward:  Yext = Σ_t Wp_t Xpad[:, off_t : off_t + L]
//     backward: dYext = dY in extended columns (zero in the discarded ones)
//               dWp_t += dYext Xpad[:, off_t : off_t + L]ᵀ,   dXpad[:, off_t : off_t + L] += Wp_tᵀ dYext
//               dX(:, image rows of the band) += the interior of dXpad (bands of an image overlap by kh-1 rows)
//     The copies per band are Xpad, Yext and dXpad, about 1× the band's pixels each, where patches copy
//     kh*kw× (at 16 channels the patch copies cost as much as the products: bench/RESULTS.md).
//   Patches (any stride), per chunk of output columns:
//     forward:  Y = Wp P + b 1ᵀ
//     backward: dWp += dY Pᵀ,  db += dY 1,  dP = Wpᵀ dY,  dX = col2im(dP)
#include "ddl/core/config.hpp"
#include "ddl/core/enum_names.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/window2d.hpp"

namespace ddl {

// Automatic: ShiftedProducts for stride 1 on narrow layers (resolveConvAlgorithm), Patches otherwise.
enum class ConvAlgorithm { Automatic, Patches, ShiftedProducts };

inline constexpr EnumName<ConvAlgorithm> kConvAlgorithmNames[] = {
    {ConvAlgorithm::Automatic, "automatic"}, {ConvAlgorithm::Patches, "patches"},
    {ConvAlgorithm::ShiftedProducts, "shifted products"}};
inline const char* toString(ConvAlgorithm a) { return nameOf(kConvAlgorithmNames, a); }

namespace detail {
// ConvAlgorithm::Automatic takes shifted products for stride 1 up to this many input channels, on
// images whose padded pixels are at most kShiftedMaxPaddedTenths / 10 times the output pixels (the
// extended columns past the row ends are computed and discarded). Measured (bench_conv
// BM_Algorithms_Paired, bench/RESULTS.md): a train step by shifted products takes 0.82× the time by
// patches at 16 channels on 32×32, 0.89–0.93× on 8×8, 0.96× at 24 channels on 16×16, 1.0× at 32,
// and 1.05–1.5× from 48 channels up or on 4×4 images, where the products dominate and the k = in
// products of the taps run below the rate of one k = kh*kw*in product.
inline constexpr Index kShiftedMaxChannels = 32;
inline constexpr Index kShiftedMaxPaddedTenths = 16;
}  // namespace detail

// The algorithm a convolution of window w with `in` input channels runs on input layout inL: `chosen`,
// or for Automatic shifted products where the patch copies outweigh the longer product chain.
// fn names the caller in the ShapeError of a kernel that does not fit.
inline ConvAlgorithm resolveConvAlgorithm(const char* fn, ConvAlgorithm chosen, const Window2d& w, Index in,
                                          const TokenLayout& inL) {
  if (chosen != ConvAlgorithm::Automatic) return chosen;
  if (w.strideH != 1 || w.strideW != 1 || in > detail::kShiftedMaxChannels) return ConvAlgorithm::Patches;
  const TokenLayout out = w.outputLayout(inL, fn);
  const Index padded = (inL.height + 2 * w.padH) * (inL.width + 2 * w.padW);
  return 10 * padded <= detail::kShiftedMaxPaddedTenths * out.tokensPerSample() ? ConvAlgorithm::ShiftedProducts
                                                                                : ConvAlgorithm::Patches;
}

}  // namespace ddl
