#pragma once
// tests/counting_new.hpp: replaces every global operator new and delete (plain, array, nothrow,
// aligned) with forms that count, so a test can prove that a code path allocates nothing at all,
// std::string and std::vector included, which EIGEN_RUNTIME_NO_MALLOC cannot see (Eigen allocates
// through std::malloc; tests/eigen_guard.hpp or EIGEN_RUNTIME_NO_MALLOC covers that).
// Include it in exactly one translation unit of a test executable (a test file that includes it is an
// executable of its own: tests/CMakeLists.txt).
// Every form is replaced so that each allocation pairs with its own release (ASan checks that);
// noinline keeps g++ 12 from pairing the inlined malloc()/free() with new/delete
// (-Wmismatched-new-delete).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#include <stdlib.h>  // posix_memalign

namespace ddl_test {
namespace detail {
inline std::atomic<long> operatorNews{0};
[[gnu::noinline]] inline void* countedMalloc(std::size_t n) noexcept {
  operatorNews.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
[[gnu::noinline]] inline void* countedAligned(std::size_t n, std::align_val_t al) noexcept {
  operatorNews.fetch_add(1, std::memory_order_relaxed);
  const std::size_t a = std::max(static_cast<std::size_t>(al), sizeof(void*));
  void* p = nullptr;
  return posix_memalign(&p, a, n == 0 ? 1 : n) == 0 ? p : nullptr;
}
}  // namespace detail

// Calls of any global operator new so far, on all threads.
inline long operatorNewCount() { return detail::operatorNews.load(); }
}  // namespace ddl_test

[[gnu::noinline]] void* operator new(std::size_t n) {
  if (void* p = ddl_test::detail::countedMalloc(n)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void* operator new[](std::size_t n) {
  if (void* p = ddl_test::detail::countedMalloc(n)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return ddl_test::detail::countedMalloc(n);
}
[[gnu::noinline]] void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return ddl_test::detail::countedMalloc(n);
}
[[gnu::noinline]] void* operator new(std::size_t n, std::align_val_t a) {
  if (void* p = ddl_test::detail::countedAligned(n, a)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void* operator new[](std::size_t n, std::align_val_t a) {
  if (void* p = ddl_test::detail::countedAligned(n, a)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return ddl_test::detail::countedAligned(n, a);
}
[[gnu::noinline]] void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return ddl_test::detail::countedAligned(n, a);
}
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
