#pragma once
// ddl/core/parse.hpp: numbers that come from outside (command lines, JSON, checkpoint metadata),
// converted with every check a cast skips: the whole text is a number, an integer is integral,
// every value is finite and inside its range. A failure throws ValueError naming the option (the
// `what` argument, e.g. "--epochs" or "model_config key 'd'") and the offending text or value:
//   --epochs expects an integer in [1, 1000000], got '2.7'
// (static_cast<int>(1e300) or of NaN is undefined behaviour; strtol silently wraps or saturates.)
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

#include "ddl/core/error.hpp"

namespace ddl {

namespace detail {
template <class Int>
[[noreturn]] void throwIntegerExpected(std::string_view what, Int lo, Int hi, const std::string& got) {
  std::ostringstream os;
  os << what << " expects an integer in [" << +lo << ", " << +hi << "], got " << got;
  throw ValueError(os.str());
}
inline std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }
inline std::string numberText(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}
// a < b for integers of any signedness (what std::cmp_less does in C++20).
template <class A, class B>
constexpr bool integerLess(A a, B b) {
  if constexpr (std::is_signed<A>::value == std::is_signed<B>::value) return a < b;
  else if constexpr (std::is_signed<A>::value) return a < 0 || static_cast<std::make_unsigned_t<A>>(a) < b;
  else return b >= 0 && a < static_cast<std::make_unsigned_t<B>>(b);
}
}  // namespace detail

// v (any integer type) checked against [lo, hi] of Int.
template <class Int, class From>
Int integerInRange(std::string_view what, From v, Int lo = std::numeric_limits<Int>::min(),
                   Int hi = std::numeric_limits<Int>::max()) {
  static_assert(std::is_integral<Int>::value && std::is_integral<From>::value, "integers only");
  if (detail::integerLess(v, lo) || detail::integerLess(hi, v)) {
    std::ostringstream os;
    os << +v;
    detail::throwIntegerExpected(what, lo, hi, os.str());
  }
  return static_cast<Int>(v);
}

// A double that must hold an integer in [lo, hi] (JSON numbers arrive as doubles): finite,
// integral and inside the range, checked before any cast.
template <class Int>
Int integerFromDouble(std::string_view what, double v, Int lo = std::numeric_limits<Int>::min(),
                      Int hi = std::numeric_limits<Int>::max()) {
  static_assert(std::is_integral<Int>::value, "integers only");
  const bool ok = std::isfinite(v) && v == std::floor(v) && v >= static_cast<double>(lo) &&
                  v <= static_cast<double>(hi) &&
                  // static_cast<double>(INT64_MAX) rounds up to 2^63, which does not fit.
                  v < std::ldexp(1.0, std::numeric_limits<Int>::digits);
  if (!ok) detail::throwIntegerExpected(what, lo, hi, detail::numberText(v));
  return static_cast<Int>(v);
}

// The whole of text as a decimal integer in [lo, hi]. Leading '+', surrounding spaces, "2.0",
// "1e3" and hexadecimal are refused: an integer option is written as one.
template <class Int>
Int parseInteger(std::string_view what, std::string_view text, Int lo = std::numeric_limits<Int>::min(),
                 Int hi = std::numeric_limits<Int>::max()) {
  static_assert(std::is_integral<Int>::value, "integers only");
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (std::is_unsigned<Int>::value && first != last && *first == '-') {
    // from_chars refuses '-' for unsigned types; parse as signed to report a negative number clearly.
    std::intmax_t v = 0;
    const auto r = std::from_chars(first, last, v);
    if (r.ec == std::errc() && r.ptr == last) detail::throwIntegerExpected(what, lo, hi, detail::quoted(text));
  }
  Int v = 0;
  const auto r = std::from_chars(first, last, v);
  if (text.empty() || r.ec != std::errc() || r.ptr != last) detail::throwIntegerExpected(what, lo, hi, detail::quoted(text));
  if (v < lo || v > hi) detail::throwIntegerExpected(what, lo, hi, detail::quoted(text));
  return v;
}

// The whole of text as a finite number in [lo, hi] ("1e-3", "0.5", "3"); nan, inf, "", "1x" and
// out-of-range values are refused.
inline double parseNumber(std::string_view what, std::string_view text,
                          double lo = -std::numeric_limits<double>::max(),
                          double hi = std::numeric_limits<double>::max()) {
  double v = 0.0;
  const char* last = text.data() + text.size();
  const auto r = std::from_chars(text.data(), last, v);  // locale-independent, unlike strtod
  if (text.empty() || r.ec != std::errc() || r.ptr != last || !std::isfinite(v) || v < lo || v > hi) {
    std::ostringstream os;
    os.precision(17);
    os << what << " expects a finite number in [" << lo << ", " << hi << "], got " << detail::quoted(text);
    throw ValueError(os.str());
  }
  return v;
}

// v checked to be finite and inside [lo, hi] (for numbers that arrive as doubles, e.g. from JSON).
inline double numberInRange(std::string_view what, double v, double lo = -std::numeric_limits<double>::max(),
                            double hi = std::numeric_limits<double>::max()) {
  if (!std::isfinite(v) || v < lo || v > hi) {
    std::ostringstream os;
    os.precision(17);
    os << what << " expects a finite number in [" << lo << ", " << hi << "], got " << detail::numberText(v);
    throw ValueError(os.str());
  }
  return v;
}

}  // namespace ddl
