#!/usr/bin/env bash
# The image job: sets up a fresh Debian 12 machine (apt-get, only what is missing), builds the example
# ddl-cifar and trains a ConvDeltaNet. Without --data it trains on Fashion-MNIST (Debian's
# dataset-fashion-mnist) written as CIFAR-10 binary files; with --data DIR on real CIFAR-10 binary
# files (cifar-10-batches-bin). Extra arguments go to ddl-cifar (see `ddl-cifar --help`), e.g.
#   tools/run-cifar.sh --residual additive
#   tools/run-cifar.sh --data ~/cifar-10-batches-bin --out out/cifar10
set -euo pipefail
cd "$(dirname "$0")/.."
"$(dirname "$0")/install-deps.sh" build-essential cmake libeigen3-dev nlohmann-json3-dev zlib1g-dev \
  dataset-fashion-mnist gnuplot-nox
cmake -S . -B build-main -DCMAKE_BUILD_TYPE=Release -DDDL_BUILD_TESTS=OFF -DDDL_BUILD_BENCH=OFF \
  -DDDL_BUILD_EXAMPLES=ON >/dev/null
cmake --build build-main --target ddl-cifar -j "$(nproc)"
# Passive OpenMP waiting: on a shared 2-core machine spinning threads steal the cores they wait for.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec build-main/examples/ddl-cifar "$@"
