#pragma once
// tests/fuzz/fuzz_input.hpp: the readers take paths, so each fuzz input is written to a private
// temporary file first. Only ddl::Error may escape a reader; anything else (bad_alloc, a sanitizer
// report, a crash) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include <unistd.h>

namespace ddl_fuzz {

// A file path unique to this process and slot (libFuzzer may run several jobs in one folder).
inline std::string tempPath(const char* slot) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/ddl_fuzz_" + std::to_string(::getpid()) + "_" + slot;
}

inline void writeFile(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

}  // namespace ddl_fuzz
