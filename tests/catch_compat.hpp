#pragma once
// Catch2 v2 (Debian 12: one header) and v3 (split headers) behind one include.
#if defined(__has_include)
#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/generators/catch_generators_random.hpp>
#include <catch2/generators/catch_generators_range.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#define DDL_CATCH_V3 1
#else
#include <catch2/catch.hpp>
#endif
#else
#include <catch2/catch.hpp>
#endif

#include <string>

namespace ddl_test {
// Runs f and returns the message of the exception of type Exc it throws, or "<no exception>".
// Tests then check that the message names the function and the shapes.
template <class Exc, class F>
std::string thrownMessage(F&& f) {
  try {
    f();
  } catch (const Exc& e) {
    return e.what();
  }
  return "<no exception>";
}
inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}
}  // namespace ddl_test
