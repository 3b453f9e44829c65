#pragma once
// ddl/io/content_digest.hpp: a 64-bit digest of bytes, to tell whether two runs (a checkpoint and a
// resume, two MPI ranks) read the same data.
//
//   ddl::ContentDigest d;
//   d.add(corpus.train.data(), corpus.train.size());
//   std::string id = d.hex();               // 16 hex digits, the same on every machine
//
// Not cryptographic: it guards against mistakes (another file, a shifted label), not against an
// adversary. Eight bytes per round of multiply-xorshift keep it near memory speed, so hashing a whole
// data set at start costs milliseconds (docs/runs.md). Each add() pads its last partial word, so the
// digest depends on how the bytes are split over calls: callers add whole buffers in a fixed order.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace ddl {

class ContentDigest {
 public:
  void add(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);  // the machine's byte order: digests compare between machines of one order
      mix(w);
    }
    std::uint64_t tail = 0;
    std::memcpy(&tail, p + i, n - i);
    mix(tail ^ (static_cast<std::uint64_t>(n - i) << 56));
    m_bytes += n;
  }
  std::uint64_t value() const { return finalize(m_h ^ m_bytes); }
  std::uint64_t bytes() const { return m_bytes; }
  std::string hex() const {
    char s[17];
    std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(value()));
    return s;
  }

 private:
  void mix(std::uint64_t w) { m_h = (m_h ^ finalize(w)) * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull; }
  static std::uint64_t finalize(std::uint64_t x) {  // splitmix64's finalizer
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  std::uint64_t m_h = 0x6A09E667F3BCC908ull;
  std::uint64_t m_bytes = 0;
};

}  // namespace ddl
