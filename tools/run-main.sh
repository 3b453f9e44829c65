#!/usr/bin/env bash
# The main job: sets up a fresh Debian 12 machine (apt-get, only what is missing), builds the example
# ddl-mnist and trains a DeltaNet on Fashion-MNIST (Debian's dataset-fashion-mnist), ending with the
# test accuracy. Extra arguments go to ddl-mnist (see `ddl-mnist --help`), e.g. tools/run-main.sh --epochs 3
# Environment: DDL_CMAKE_FLAGS (extra CMake flags), DDL_BUILD_DIR (default build-main).
set -euo pipefail
cd "$(dirname "$0")/.."
"$(dirname "$0")/install-deps.sh" build-essential cmake libeigen3-dev nlohmann-json3-dev zlib1g-dev \
  dataset-fashion-mnist gnuplot-nox
build=${DDL_BUILD_DIR:-build-main}
# shellcheck disable=SC2086  # DDL_CMAKE_FLAGS: extra CMake flags, split on spaces
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDDL_BUILD_TESTS=OFF -DDDL_BUILD_BENCH=OFF \
  -DDDL_BUILD_EXAMPLES=ON ${DDL_CMAKE_FLAGS:-} | sed -n "/^-- ddl/p"  # what it found and skips
cmake --build "$build" --target ddl-mnist -j "$(nproc)"
# Passive OpenMP waiting: on a shared 2-core machine spinning threads steal the cores they wait for.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec "$build/examples/ddl-mnist" "$@"
