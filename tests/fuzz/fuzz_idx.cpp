// libFuzzer target: the IDX reader (raw and gzip). Input: u16 little-endian n, then n bytes of the
// image file and the rest as the label file (either may be gzip; the reader decides by magic).
#include <cstdint>
#include <cstdlib>

#include "ddl/core/error.hpp"
#include "ddl/data/idx.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  std::size_t n = data[0] | (std::size_t(data[1]) << 8);
  data += 2;
  size -= 2;
  if (n > size) n = size;
  static const std::string images = ddl_fuzz::tempPath("images"), labels = ddl_fuzz::tempPath("labels");
  ddl_fuzz::writeFile(images, data, n);
  ddl_fuzz::writeFile(labels, data + n, size - n);
  try {
    ddl::LoadOptions opts;
    opts.numClasses = (size & 1) ? 10 : 0;  // range-checked and inferred label counts
    opts.limit = (size & 2) ? 1 : 0;
    const ddl::Dataset<float> d = ddl::loadIdx<float>(images, labels, opts);
    if (d.images.cols() != static_cast<ddl::Index>(d.labels.size())) std::abort();
  } catch (const ddl::Error&) {
  }
  return 0;
}
