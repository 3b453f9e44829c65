#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for the benchmarks (apt-get, only what is missing: Google Benchmark,
# PyTorch with an optimised BLAS, jq), builds every benchmark program into build-bench, and runs the
# three ddl-against-PyTorch comparisons (the MLP, the conv and the language-model training step) in
# interleaved rounds, ddl in float and then in bf16 (on a CPU without native bf16 products each bf16
# comparison prints "not measured on this CPU" and why), then the data-parallel step on 1 and 2 MPI ranks
# (bench/run_mpi.sh).
#   tools/run-bench.sh [threads]        (default 2; the other benchmarks: build-bench/bench/ddl_bench_*)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
"$(dirname "$0")/install-deps.sh" build-essential cmake libeigen3-dev libbenchmark-dev nlohmann-json3-dev \
  zlib1g-dev python3-torch libopenblas0-openmp jq libopenmpi-dev openmpi-bin libdnnl-dev
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DDDL_BUILD_TESTS=OFF -DDDL_BUILD_EXAMPLES=OFF \
  -DDDL_BUILD_BENCH=ON >/dev/null
cmake --build build-bench -j "$(nproc)"
for precision in float bf16; do
  for net in mlp conv lm; do bench/run_compare.sh --net "$net" --precision "$precision" build-bench "$threads"; done
done
bench/run_mpi.sh 3 build-bench
