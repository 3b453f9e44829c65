#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (apt-get, only what is missing), configures, builds and runs
# every ddl test. Portable code (no -march=native): the tests check behaviour, not speed, and in a
# portable build the examples and benchmarks link the compiled models as the tests do, which saves
# compiling them again (docs/building.md); the native builds are the jobs' own (run-main.sh,
# run-bench.sh, ...). Usage: tools/run-tests.sh [build-dir]   (extra CMake flags via DDL_CMAKE_FLAGS, extra
# ctest arguments via DDL_CTEST_FLAGS, e.g. "-E ^headers:" to leave out the header check)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
"$(dirname "$0")/install-deps.sh" build-essential cmake libeigen3-dev catch2 libbenchmark-dev \
  zlib1g-dev nlohmann-json3-dev python3-torch clang libopenmpi-dev openmpi-bin libdnnl-dev
# shellcheck disable=SC2086
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDDL_WARNINGS_AS_ERRORS=ON -DDDL_NATIVE=OFF ${DDL_CMAKE_FLAGS:-}
cmake --build "$build" -j "$(nproc)"
# shellcheck disable=SC2086
ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$(nproc)" ${DDL_CTEST_FLAGS:-}
