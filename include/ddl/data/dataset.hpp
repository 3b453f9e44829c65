#pragma once
// ddl/data/dataset.hpp: an in-memory labelled image set and what training does with it:
// subsets, a seeded train/validation split, per-channel normalisation, seeded shuffling,
// batching into caller-owned column-major matrices, and CIFAR-style augmentation.
// Samples are COLUMNS (docs/architecture.md principle 1); an image is stored in CHW order (channel planes of
// height x width, each row-major), so pixel (c, y, x) is row (c * H + y) * W + x.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

struct ImageShape {
  Index channels = 1;
  Index height = 1;
  Index width = 1;
  Index size() const { return channels * height * width; }
  Index planeSize() const { return height * width; }
};

// Which file set of a data set a loader reads.
enum class DataPart { Train, Test };

// Options shared by the loaders (idx.hpp, cifar.hpp).
struct LoadOptions {
  bool scale = true;   // pixels / 255 into [0, 1]; false keeps the raw 0..255 values
  Index limit = 0;     // keep only the first `limit` samples (0 = all); loaded files are still fully checked
  int numClasses = 0;  // IDX: labels must be < numClasses (0 = max label + 1); CIFAR's are fixed
};

template <class S>
struct Dataset {
  MatX<S> images;           // (features, N) one column per sample, CHW order
  std::vector<int> labels;  // N, each in [0, numClasses)
  int numClasses = 0;
  ImageShape shape;         // shape.size() == features

  Index size() const { return images.cols(); }
  Index features() const { return images.rows(); }
};

// Throws ShapeError/ValueError unless images, labels, shape and numClasses agree.
template <class S>
void validate(const Dataset<S>& d, const char* fn = "ddl::validate") {
  checkShape(fn, "images", d.images, d.shape.size(), static_cast<Index>(d.labels.size()));
  require(d.numClasses > 0, fn, "numClasses must be positive, got ", d.numClasses);
  for (std::size_t i = 0; i < d.labels.size(); ++i)
    require(d.labels[i] >= 0 && d.labels[i] < d.numClasses, fn, "label of sample ", i, " expected in [0, ",
            d.numClasses, "), found ", d.labels[i]);
}

// The samples idx[0], idx[1], ... of d, in that order. Result images: (features, idx.size())
template <class S>
Dataset<S> select(const Dataset<S>& d, const std::vector<Index>& idx) {
  Dataset<S> out;
  out.numClasses = d.numClasses;
  out.shape = d.shape;
  out.images.resize(d.features(), static_cast<Index>(idx.size()));
  out.labels.resize(idx.size());
  for (std::size_t j = 0; j < idx.size(); ++j) {
    const Index i = idx[j];
    require(i >= 0 && i < d.size(), "ddl::select", "index ", i, " at position ", j, " expected in [0, ",
            d.size(), ")");
    out.images.col(static_cast<Index>(j)) = d.images.col(i);
    out.labels[j] = d.labels[static_cast<std::size_t>(i)];
  }
  return out;
}

// The first min(n, size) samples (for smoke tests). Result images: (features, min(n, N))
template <class S>
Dataset<S> head(const Dataset<S>& d, Index n) {
  require(n >= 0, "ddl::head", "n must be >= 0, got ", n);
  const Index m = std::min(n, d.size());
  Dataset<S> out;
  out.numClasses = d.numClasses;
  out.shape = d.shape;
  out.images = d.images.leftCols(m);
  out.labels.assign(d.labels.begin(), d.labels.begin() + m);
  return out;
}

// A seeded uniformly random permutation of 0..n-1 (Fisher-Yates through ddl::Rng, portable).
inline std::vector<Index> permutation(Index n, Rng& rng) {
  std::vector<Index> p(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i;
  shuffle(p.begin(), p.end(), rng);
  return p;
}

// Permutes the samples of d in place (images and labels together).
template <class S>
void shuffleDataset(Dataset<S>& d, Rng& rng) {
  d = select(d, permutation(d.size(), rng));
}

template <class S>
struct TrainValidation {
  Dataset<S> train;
  Dataset<S> validation;
};

// Seeded split: a random permutation of d's samples, the first N - validationSize become train and
// the rest validation; each part keeps the original sample order (so it is a stable subset).
template <class S>
TrainValidation<S> splitValidation(const Dataset<S>& d, Index validationSize, std::uint64_t seed) {
  require(validationSize >= 0 && validationSize <= d.size(), "ddl::splitValidation",
          "validationSize expected in [0, ", d.size(), "], found ", validationSize);
  Rng rng(seed);
  std::vector<Index> p = permutation(d.size(), rng);
  const auto cut = static_cast<std::ptrdiff_t>(d.size() - validationSize);
  std::vector<Index> tr(p.begin(), p.begin() + cut), va(p.begin() + cut, p.end());
  std::sort(tr.begin(), tr.end());
  std::sort(va.begin(), va.end());
  return {select(d, tr), select(d, va)};
}

template <class S>
struct ChannelStats {
  VecX<S> mean;    // (channels)
  VecX<S> stddev;  // (channels), population standard deviation over all pixels and samples
};

// Per-channel mean and standard deviation of d (accumulated in double). Compute them on the
// training set and apply them to every set with normalize().
template <class S>
ChannelStats<S> channelStats(const Dataset<S>& d) {
  const Index C = d.shape.channels, P = d.shape.planeSize();
  checkShape("ddl::channelStats", "images", d.images, d.shape.size(), -1);
  require(d.size() > 0, "ddl::channelStats", "dataset is empty");
  ChannelStats<S> st{VecX<S>(C), VecX<S>(C)};
  const double count = static_cast<double>(P) * static_cast<double>(d.size());
  for (Index c = 0; c < C; ++c) {
    const auto plane = d.images.middleRows(c * P, P);
    const double mean = plane.template cast<double>().sum() / count;
    const double var = (plane.template cast<double>().array() - mean).square().sum() / count;
    st.mean(c) = static_cast<S>(mean);
    st.stddev(c) = static_cast<S>(std::sqrt(var));
  }
  return st;
}

// images(c-plane) = (images(c-plane) - mean(c)) / stddev(c); ValueError on a zero deviation.
template <class S>
void normalize(Dataset<S>& d, const ChannelStats<S>& st) {
  const Index C = d.shape.channels, P = d.shape.planeSize();
  checkShape("ddl::normalize", "images", d.images, d.shape.size(), -1);
  checkShape("ddl::normalize", "mean", st.mean, C, 1);
  checkShape("ddl::normalize", "stddev", st.stddev, C, 1);
  for (Index c = 0; c < C; ++c) {
    require(st.stddev(c) > S(0), "ddl::normalize", "stddev of channel ", c, " expected > 0, found ", st.stddev(c));
    d.images.middleRows(c * P, P).array() -= st.mean(c);
    d.images.middleRows(c * P, P).array() *= S(1) / st.stddev(c);
  }
}

// Random crop with zero padding and horizontal flip (the standard CIFAR augmentation).
struct AugmentOptions {
  bool enabled = false;
  Index pad = 4;     // crop offsets are drawn in [-pad, pad] on each axis
  bool flip = true;  // mirror left-right with probability 1/2
};

namespace detail {
// dst(c, y, x) = src(c, y + dy, xs + dx) with xs = W-1-x when flip else x; zero outside the image.
template <class S>
void translateFlipOne(const S* src, S* dst, const ImageShape& sh, Index dy, Index dx, bool flip) {
  const Index H = sh.height, W = sh.width;
  for (Index c = 0; c < sh.channels; ++c) {
    const S* sp = src + c * H * W;
    S* dp = dst + c * H * W;
    for (Index y = 0; y < H; ++y) {
      const Index sy = y + dy;
      S* drow = dp + y * W;
      if (sy < 0 || sy >= H) {
        for (Index x = 0; x < W; ++x) drow[x] = S(0);
        continue;
      }
      const S* srow = sp + sy * W;
      for (Index x = 0; x < W; ++x) {
        const Index sx = (flip ? W - 1 - x : x) + dx;
        drow[x] = (sx >= 0 && sx < W) ? srow[sx] : S(0);
      }
    }
  }
}
// Draws (dy, dx, flip) for one image: always in this order, so results depend only on the seed.
inline void drawAugment(const AugmentOptions& opt, Rng& rng, Index& dy, Index& dx, bool& flip) {
  const auto span = static_cast<std::uint64_t>(2 * opt.pad + 1);
  dy = static_cast<Index>(rng.below(span)) - opt.pad;
  dx = static_cast<Index>(rng.below(span)) - opt.pad;
  flip = opt.flip && rng.below(2) == 1;
}
inline std::uint64_t mixSeed(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a ^ (b * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace detail

// Every column of src translated by (dy, dx) (zero fill) and, when flip, mirrored left-right.
// src, dst: (shape.size(), N); dst is resized; src and dst must be different matrices.
template <class S>
void translateFlip(const MatX<S>& src, MatX<S>& dst, const ImageShape& shape, Index dy, Index dx, bool flip) {
  checkShape("ddl::translateFlip", "src", src, shape.size(), -1);
  require(&src != &dst, "ddl::translateFlip", "src and dst must be different matrices");
  dst.resize(src.rows(), src.cols());
  for (Index j = 0; j < src.cols(); ++j)
    detail::translateFlipOne(src.col(j).data(), dst.col(j).data(), shape, dy, dx, flip);
}

// Independent random crop (pad opt.pad) and flip per column, drawn from rng in column order.
// src, dst: (shape.size(), N); dst is resized; src and dst must be different matrices.
template <class S>
void randomCropFlip(const MatX<S>& src, MatX<S>& dst, const ImageShape& shape, const AugmentOptions& opt, Rng& rng) {
  checkShape("ddl::randomCropFlip", "src", src, shape.size(), -1);
  require(&src != &dst, "ddl::randomCropFlip", "src and dst must be different matrices");
  require(opt.pad >= 0, "ddl::randomCropFlip", "pad must be >= 0, got ", opt.pad);
  dst.resize(src.rows(), src.cols());
  for (Index j = 0; j < src.cols(); ++j) {
    Index dy = 0, dx = 0;
    bool flip = false;
    detail::drawAugment(opt, rng, dy, dx, flip);
    detail::translateFlipOne(src.col(j).data(), dst.col(j).data(), shape, dy, dx, flip);
  }
}

struct BatchOptions {
  Index batchSize = 128;
  bool shuffle = true;     // a fresh seeded permutation every epoch
  bool dropLast = false;   // drop the final partial batch instead of returning it smaller
  AugmentOptions augment;  // off by default; use for training sets only
};

// Walks a dataset in batches. Everything is a function of (seed, epoch, batch index): epoch e's
// order comes from Rng(mix(seed, e)) and batch b's augmentation from Rng(mix(mix(seed, e), b)), so a
// run resumed with startEpoch(e) + seek(b) continues bit-identically. The dataset must outlive it.
//   Batcher<float> batches(train, opts, seed);
//   for (int e = 0; e < epochs; ++e) { batches.startEpoch(e); while (batches.next(X, y)) {...} }
template <class S>
class Batcher {
 public:
  Batcher(const Dataset<S>& data, const BatchOptions& opts, std::uint64_t seed)
      : m_data(&data), m_opts(opts), m_seed(seed) {
    validate(data, "ddl::Batcher");
    require(opts.batchSize > 0, "ddl::Batcher", "batchSize must be positive, got ", opts.batchSize);
    require(opts.augment.pad >= 0, "ddl::Batcher", "augment.pad must be >= 0, got ", opts.augment.pad);
    startEpoch(0);
  }
  // The Batcher keeps a pointer to the dataset: a temporary would dangle.
  Batcher(Dataset<S>&&, const BatchOptions&, std::uint64_t) = delete;

  // Starts epoch `epoch` at its first batch (reshuffling when opts.shuffle).
  void startEpoch(std::uint64_t epoch) {
    m_epoch = epoch;
    m_batch = 0;
    const Index n = m_data->size();
    if (m_opts.shuffle) {
      Rng rng(detail::mixSeed(m_seed, epoch));
      m_order = permutation(n, rng);
    } else {
      m_order.resize(static_cast<std::size_t>(n));
      for (Index i = 0; i < n; ++i) m_order[static_cast<std::size_t>(i)] = i;
    }
  }

  // Jumps to batch b of the current epoch (0 <= b <= numBatches()).
  void seek(Index b) {
    require(b >= 0 && b <= numBatches(), "ddl::Batcher::seek", "batch expected in [0, ", numBatches(),
            "], found ", b);
    m_batch = b;
  }

  // Batches per epoch (the partial one counts unless dropLast).
  Index numBatches() const {
    const Index n = m_data->size(), B = m_opts.batchSize;
    return m_opts.dropLast ? n / B : (n + B - 1) / B;
  }

  // Fills X: (features, b) and y (b) with the next batch and returns true, or returns false at
  // the end of the epoch. b == batchSize except for a final partial batch (dropLast == false).
  // Full batches never allocate once X and y have been sized by a first call.
  bool next(MatX<S>& X, std::vector<int>& y) {
    if (m_batch >= numBatches()) return false;
    const Index n = m_data->size(), start = m_batch * m_opts.batchSize;
    const Index b = std::min(m_opts.batchSize, n - start);
    if (X.rows() != m_data->features() || X.cols() != b) X.resize(m_data->features(), b);
    y.resize(static_cast<std::size_t>(b));
    Rng rng(detail::mixSeed(detail::mixSeed(m_seed, m_epoch), static_cast<std::uint64_t>(m_batch)));
    for (Index j = 0; j < b; ++j) {
      const Index i = m_order[static_cast<std::size_t>(start + j)];
      y[static_cast<std::size_t>(j)] = m_data->labels[static_cast<std::size_t>(i)];
      if (m_opts.augment.enabled) {
        Index dy = 0, dx = 0;
        bool flip = false;
        detail::drawAugment(m_opts.augment, rng, dy, dx, flip);
        detail::translateFlipOne(m_data->images.col(i).data(), X.col(j).data(), m_data->shape, dy, dx, flip);
      } else {
        X.col(j) = m_data->images.col(i);
      }
    }
    ++m_batch;
    return true;
  }

  std::uint64_t epoch() const { return m_epoch; }
  Index batchIndex() const { return m_batch; }               // next batch to be returned
  const std::vector<Index>& order() const { return m_order; }  // this epoch's sample order
  const BatchOptions& options() const { return m_opts; }

 private:
  const Dataset<S>* m_data;
  BatchOptions m_opts;
  std::uint64_t m_seed;
  std::uint64_t m_epoch = 0;
  Index m_batch = 0;
  std::vector<Index> m_order;
};

}  // namespace ddl
