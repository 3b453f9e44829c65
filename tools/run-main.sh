#!/usr/bin/env bash
# The main job: sets up a fresh Debian 12 machine (apt-get, only what is missing), builds the example
# ddl-mnist and trains a DeltaNet on Fashion-MNIST (Debian's dataset-fashion-mnist), ending with the
# test accuracy. Extra arguments go to ddl-mnist (see `ddl-mnist --help`), e.g. tools/run-main.sh --epochs 3
set -euo pipefail
cd "$(dirname "$0")/.."
"$(dirname "$0")/install-deps.sh" build-essential cmake libeigen3-dev nlohmann-json3-dev zlib1g-dev \
  dataset-fashion-mnist gnuplot-nox
cmake -S . -B build-main -DCMAKE_BUILD_TYPE=Release -DDDL_BUILD_TESTS=OFF -DDDL_BUILD_BENCH=OFF \
  -DDDL_BUILD_EXAMPLES=ON >/dev/null
cmake --build build-main --target ddl-mnist -j "$(nproc)"
# Passive OpenMP waiting: on a shared 2-core machine spinning threads steal the cores they wait for.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec build-main/examples/ddl-mnist "$@"
