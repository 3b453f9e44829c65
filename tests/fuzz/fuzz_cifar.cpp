// libFuzzer target: the CIFAR-10 and CIFAR-100 binary readers (raw and gzip).
#include <cstdint>
#include <cstdlib>

#include "ddl/core/error.hpp"
#include "ddl/data/cifar.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = ddl_fuzz::tempPath("cifar");
  ddl_fuzz::writeFile(path, data, size);
  try {
    const ddl::Dataset<float> d = ddl::loadCifar10Files<float>({path});
    if (d.images.rows() != 3072 || d.images.cols() != static_cast<ddl::Index>(d.labels.size())) std::abort();
  } catch (const ddl::Error&) {
  }
  try {
    ddl::LoadOptions opts;
    opts.limit = 2;
    const ddl::Dataset<float> d = ddl::loadCifar100Files<float>({path}, ddl::CifarLabels::Coarse, opts);
    if (d.images.cols() > 2) std::abort();
  } catch (const ddl::Error&) {
  }
  return 0;
}
