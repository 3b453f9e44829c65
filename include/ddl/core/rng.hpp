#pragma once
// ddl/core/rng.hpp: a small, portable, seedable generator (xoshiro256**, seeded by splitmix64).
// std::normal_distribution differs between standard libraries, so ddl draws its own normals:
// the same seed gives bit-identical initialisations everywhere, and the state is six integers
// (the four xoshiro words and the pending Box-Muller spare) that a checkpoint can store for a
// bit-identical resume.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ddl/core/error.hpp"

namespace ddl {

class Rng {
 public:
  // [0..3] the xoshiro256** words, [4] 1 if a Box-Muller spare is pending else 0,
  // [5] the spare's IEEE-754 bits (0 when none is pending).
  using State = std::array<std::uint64_t, 6>;

  explicit Rng(std::uint64_t seed = 0) { reseed(seed); }

  void reseed(std::uint64_t seed) {
    std::uint64_t x = seed;
    for (auto& s : m_s) s = splitmix64(x);
    m_hasSpare = false;
  }

  // Next raw 64-bit value.
  std::uint64_t next() {
    const std::uint64_t result = rotl(m_s[1] * 5, 7) * 9;
    const std::uint64_t t = m_s[1] << 17;
    m_s[2] ^= m_s[0];
    m_s[3] ^= m_s[1];
    m_s[1] ^= m_s[2];
    m_s[0] ^= m_s[3];
    m_s[2] ^= t;
    m_s[3] = rotl(m_s[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n), n > 0, without modulo bias.
  std::uint64_t below(std::uint64_t n) {
    if (n == 0) throw ValueError("Rng::below: n must be positive, got 0");
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    std::uint64_t r = next();
    while (r >= limit) r = next();
    return r % n;
  }
  // Standard normal (Box-Muller, the spare value is kept).
  double normal() {
    if (m_hasSpare) {
      m_hasSpare = false;
      return m_spare;
    }
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 6.283185307179586476925 * u2;
    m_spare = r * std::sin(a);
    m_hasSpare = true;
    return r * std::cos(a);
  }
  double normal(double mean, double stddev) { return mean + stddev * normal(); }

  // Full state, for checkpoints, including the pending Box-Muller spare: a generator restored with
  // setState(state()) continues exactly the stream the saved one would have produced.
  State state() const {
    State out{};
    for (std::size_t i = 0; i < 4; ++i) out[i] = m_s[i];
    out[4] = m_hasSpare ? 1 : 0;
    if (m_hasSpare) std::memcpy(&out[5], &m_spare, sizeof m_spare);
    return out;
  }
  void setState(const State& s) {
    if (s[4] > 1) throw ValueError(message("Rng::setState", "word 4 (spare flag) must be 0 or 1, got ", s[4]));
    if (s[0] == 0 && s[1] == 0 && s[2] == 0 && s[3] == 0)
      throw ValueError("Rng::setState: the four generator words are all zero (xoshiro would emit only zeros)");
    for (std::size_t i = 0; i < 4; ++i) m_s[i] = s[i];
    m_hasSpare = s[4] == 1;
    m_spare = 0.0;
    if (m_hasSpare) std::memcpy(&m_spare, &s[5], sizeof m_spare);
  }
  void discardSpare() { m_hasSpare = false; }

  // UniformRandomBitGenerator interface (usable with <algorithm>).
  using result_type = std::uint64_t;
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return UINT64_MAX; }
  result_type operator()() { return next(); }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix64(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  std::array<std::uint64_t, 4> m_s{};
  double m_spare = 0.0;
  bool m_hasSpare = false;
};

// Fisher-Yates shuffle driven by Rng::below (std::shuffle's algorithm is implementation-defined).
template <class RandomIt>
void shuffle(RandomIt first, RandomIt last, Rng& rng) {
  const auto n = last - first;
  for (auto i = n - 1; i > 0; --i) {
    const auto j = static_cast<decltype(i)>(rng.below(static_cast<std::uint64_t>(i) + 1));
    using std::swap;
    swap(first[i], first[j]);
  }
}

}  // namespace ddl
