#pragma once
// ddl/data/orientation_histograms.hpp: fixed (not learned) histograms of oriented gradients of
// one-channel images, the classical edge features of Dalal and Triggs without blocks or interpolation,
// and a flat data set of an image set's pixels followed by such features (docs/spec.md §9).
//
// Per image x (H x W, pixel (y, c) = row y*W + c of the column), per pixel:
//   gx = x(y, c+1) - x(y, c-1),  gy = x(y+1, c) - x(y-1, c)   (central differences; 0 on the border
//                                                              where a neighbour is missing)
//   m  = sqrt(gx^2 + gy^2),  theta = atan2(gy, gx) mod pi in [0, pi)   (unsigned orientation)
//   bin = min(floor(theta / pi * bins), bins - 1)
// per cell (cell x cell pixels, H and W multiples of cell) the histogram h[bin] = sum of m over the
// cell's pixels of that bin, normalised as h / sqrt(|h|^2 + eps^2) (a flat cell stays 0).
// Feature row of (cell row r, cell column q, bin b): (r * W/cell + q) * bins + b.
// Mirroring an image left-right maps bin b to (bins - b) mod bins up to ties; pixels on the top and
// bottom rows (gy = 0) stay in bin 0.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/dataset.hpp"

namespace ddl {

struct OrientationHistogramOptions {
  Index cell = 4;    // cell side in pixels
  Index bins = 8;    // orientation bins over [0, pi)
  double eps = 0.1;  // guard of the per-cell normalisation
};

// Features per image: (H/cell) * (W/cell) * bins.
inline Index orientationHistogramSize(const ImageShape& shape, const OrientationHistogramOptions& opt) {
  return (shape.height / opt.cell) * (shape.width / opt.cell) * opt.bins;
}

// d: one-channel images -> (orientationHistogramSize, N), one column per image.
// Throws ValueError for a bad option or a non-finite pixel (naming the sample), ShapeError for
// images that are not one channel or do not split into whole cells.
template <class S>
MatX<S> orientationHistograms(const Dataset<S>& d, const OrientationHistogramOptions& opt = {}) {
  const char* fn = "ddl::orientationHistograms";
  require(opt.cell >= 1 && opt.bins >= 1 && opt.eps > 0 && std::isfinite(opt.eps), fn,
          "cell and bins must be >= 1 and eps finite and > 0, got cell = ", opt.cell, ", bins = ", opt.bins,
          ", eps = ", opt.eps);
  const ImageShape& sh = d.shape;
  if (sh.channels != 1 || sh.height % opt.cell != 0 || sh.width % opt.cell != 0)
    throw ShapeError(message(fn, "needs one-channel images whose sides are multiples of the cell (", opt.cell,
                             "), got ", sh.channels, " x ", sh.height, " x ", sh.width));
  checkShape(fn, "images", d.images, sh.size(), -1);
  const Index H = sh.height, W = sh.width, cellsX = W / opt.cell, F = orientationHistogramSize(sh, opt);
  const double pi = std::acos(-1.0), eps2 = opt.eps * opt.eps;
  MatX<S> out(F, d.size());
  std::vector<double> h(static_cast<std::size_t>(F));
  for (Index n = 0; n < d.size(); ++n) {
    const S* x = d.images.col(n).data();
    for (Index i = 0; i < sh.size(); ++i)
      require(std::isfinite(static_cast<double>(x[i])), fn, "sample ", n, " has a non-finite pixel at row ", i);
    std::fill(h.begin(), h.end(), 0.0);
    const auto at = [&](Index y, Index c) { return static_cast<double>(x[y * W + c]); };
    for (Index y = 0; y < H; ++y)
      for (Index c = 0; c < W; ++c) {
        const double gx = c > 0 && c + 1 < W ? at(y, c + 1) - at(y, c - 1) : 0.0;
        const double gy = y > 0 && y + 1 < H ? at(y + 1, c) - at(y - 1, c) : 0.0;
        const double m = std::sqrt(gx * gx + gy * gy);
        if (m == 0) continue;
        double theta = std::atan2(gy, gx);
        if (theta < 0) theta += pi;
        if (theta >= pi) theta -= pi;
        const Index bin = std::min(static_cast<Index>(theta / pi * static_cast<double>(opt.bins)), opt.bins - 1);
        h[static_cast<std::size_t>(((y / opt.cell) * cellsX + c / opt.cell) * opt.bins + bin)] += m;
      }
    for (Index cellIndex = 0; cellIndex < F / opt.bins; ++cellIndex) {
      const std::size_t o = static_cast<std::size_t>(cellIndex * opt.bins);
      double sq = 0;
      for (Index b = 0; b < opt.bins; ++b) sq += h[o + static_cast<std::size_t>(b)] * h[o + static_cast<std::size_t>(b)];
      const double scale = 1.0 / std::sqrt(sq + eps2);
      for (Index b = 0; b < opt.bins; ++b)
        out(cellIndex * opt.bins + b, n) = static_cast<S>(h[o + static_cast<std::size_t>(b)] * scale);
    }
  }
  return out;
}

// The flat data set of d's samples with features appended under them: images (d.features() +
// features.rows(), N), shape 1 x 1 x that, same labels. Image operations (augmentation) no longer
// apply to it.
template <class S>
Dataset<S> withFeatures(const Dataset<S>& d, const MatX<S>& features) {
  const char* fn = "ddl::withFeatures";
  checkShape(fn, "features", features, -1, d.size());
  Dataset<S> out;
  out.numClasses = d.numClasses;
  out.labels = d.labels;
  out.shape = ImageShape{1, 1, d.features() + features.rows()};
  out.images.resize(out.shape.size(), d.size());
  out.images.topRows(d.features()) = d.images;
  out.images.bottomRows(features.rows()) = features;
  return out;
}

// Mean and population deviation over every value of F (accumulated in double), for standardising a
// block of features with the training set's figures. Throws ValueError when F is empty.
template <class S>
void featureMeanStd(const MatX<S>& F, double& mean, double& stddev) {
  require(F.size() > 0, "ddl::featureMeanStd", "no features (", shapeOf(F), ")");
  const double n = static_cast<double>(F.size());
  double sum = 0;
  for (Index j = 0; j < F.cols(); ++j)
    for (Index i = 0; i < F.rows(); ++i) sum += static_cast<double>(F(i, j));
  mean = sum / n;
  double sq = 0;
  for (Index j = 0; j < F.cols(); ++j)
    for (Index i = 0; i < F.rows(); ++i) sq += (static_cast<double>(F(i, j)) - mean) * (static_cast<double>(F(i, j)) - mean);
  stddev = std::sqrt(sq / n);
}

}  // namespace ddl
