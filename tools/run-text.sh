#!/usr/bin/env bash
# The sequence job: sets up a fresh Debian 12 machine (apt-get, only what is missing), builds the
# example ddl-text and trains DeltaLM, the paper's causal language model, on the bytes of Debian's
# fortunes package (~2.8 MB of English text), ending with the test bits per byte and a sample. Extra
# arguments go to ddl-text (see `ddl-text --help`), e.g.
#   tools/run-text.sh --residual additive          the plain pre-norm Transformer on the same budget
#   tools/run-text.sh --variant dv1                 the vector state (dv 1) instead of the default tc-ec (dv 4)
#   tools/run-text.sh --data book.txt --out out/book
# Environment: DDL_CMAKE_FLAGS (extra CMake flags), DDL_BUILD_DIR (default build-main).
set -euo pipefail
cd "$(dirname "$0")/.."
"$(dirname "$0")/install-deps.sh" build-essential cmake libeigen3-dev nlohmann-json3-dev zlib1g-dev \
  fortunes gnuplot-nox
build=${DDL_BUILD_DIR:-build-main}
# shellcheck disable=SC2086  # DDL_CMAKE_FLAGS: extra CMake flags, split on spaces
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDDL_BUILD_TESTS=OFF -DDDL_BUILD_BENCH=OFF \
  -DDDL_BUILD_EXAMPLES=ON ${DDL_CMAKE_FLAGS:-} | sed -n "/^-- ddl/p"  # what it found and skips
cmake --build "$build" --target ddl-text -j "$(nproc)"
# Passive OpenMP waiting: on a shared 2-core machine spinning threads steal the cores they wait for.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec "$build/examples/ddl-text" "$@"
