// An option's names in text (core/enum_names.hpp): every enumerator of each table round-trips, an unknown
// name is refused with the accepted ones, and a value outside the enum has no name.
#include <cstddef>
#include <string>

#include "catch_compat.hpp"

#include "ddl/core/enum_names.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/nn/blocks/delta_transformer_block.hpp"
#include "ddl/nn/layers/conv_algorithm.hpp"
#include "ddl/nn/models/delta_lm_config.hpp"
#include "ddl/nn/models/preset.hpp"
#include "ddl/ops/direction.hpp"
#include "ddl/train/lr_schedule.hpp"

namespace test_enum_names {  // each test file in its own namespace: a group of files compiles as one unit

template <class E, std::size_t N, class Parse>
void checkRoundTrip(const ddl::EnumName<E> (&table)[N], Parse parse) {
  for (const ddl::EnumName<E>& entry : table) {
    CHECK(std::string(ddl::toString(entry.value)) == entry.name);
    CHECK(parse(entry.name) == entry.value);
  }
}

TEST_CASE("enum names: each option's names round-trip through toString and its parser", "[enum_names]") {
  checkRoundTrip(ddl::kPresetNames, [](const std::string& s) { return ddl::parsePreset(s); });
  checkRoundTrip(ddl::kLrScheduleNames, [](const std::string& s) { return ddl::parseLrScheduleKind(s); });
  checkRoundTrip(ddl::kCompressorNames, [](const std::string& s) { return ddl::parseCompressorKind(s); });
  checkRoundTrip(ddl::kDirectionNormNames, [](const std::string& s) { return ddl::parseDirectionNorm(s); });
  checkRoundTrip(ddl::kStateCompressorNames, [](const std::string& s) { return ddl::parseStateCompressorKind(s); });
  checkRoundTrip(ddl::kLmInitNames, [](const std::string& s) { return ddl::parseLmInit(s); });
  checkRoundTrip(ddl::kConvAlgorithmNames,
                 [](const std::string& s) { return ddl::parseEnumName(ddl::kConvAlgorithmNames, s, "conv", "algorithm"); });
  CHECK(std::string(ddl::toString(ddl::ConvAlgorithm::ShiftedProducts)) == "shifted products");
}

TEST_CASE("enum names: an unknown name lists the accepted ones, and a value outside the enum has no name", "[enum_names]") {
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([] { ddl::parseDirectionNorm("l2"); }),
                           "ddl::parseDirectionNorm: unknown normalization 'l2', expected one of sqrt_eps, add_eps"));
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([] { ddl::parseCompressorKind("Free"); }),
                           "unknown value 'Free', expected one of free, structured"));
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([] { ddl::parseStateCompressorKind("xc"); }),
                           "ddl::parseStateCompressorKind: unknown value 'xc', expected one of cc, tc"));
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([] { ddl::toString(static_cast<ddl::Preset>(7)); }),
                           "ddl::nameOf: enumerator 7 has no name in its table"));
}

}  // namespace test_enum_names
