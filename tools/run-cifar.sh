#!/usr/bin/env bash
# The image job: sets up a fresh Debian 12 machine (apt-get, only what is missing), builds the example
# ddl-cifar and trains a ConvDeltaNet. Without --data it trains on Fashion-MNIST (Debian's
# dataset-fashion-mnist) written as CIFAR-10 binary files; with --data DIR on real CIFAR-10 binary
# files (cifar-10-batches-bin). Extra arguments go to ddl-cifar (see `ddl-cifar --help`), e.g.
#   tools/run-cifar.sh --residual additive
#   tools/run-cifar.sh --data ~/cifar-10-batches-bin --out out/cifar10
# Environment: DDL_CMAKE_FLAGS (extra CMake flags), DDL_BUILD_DIR (default build-main).
set -euo pipefail
cd "$(dirname "$0")/.."
"$(dirname "$0")/install-deps.sh" build-essential cmake libeigen3-dev nlohmann-json3-dev zlib1g-dev \
  dataset-fashion-mnist gnuplot-nox
build=${DDL_BUILD_DIR:-build-main}
# shellcheck disable=SC2086  # DDL_CMAKE_FLAGS: extra CMake flags, split on spaces
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDDL_BUILD_TESTS=OFF -DDDL_BUILD_BENCH=OFF \
  -DDDL_BUILD_EXAMPLES=ON ${DDL_CMAKE_FLAGS:-} | sed -n "/^-- ddl/p"  # what it found and skips
cmake --build "$build" --target ddl-cifar -j "$(nproc)"
# Passive OpenMP waiting: on a shared 2-core machine spinning threads steal the cores they wait for.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec "$build/examples/ddl-cifar" "$@"
