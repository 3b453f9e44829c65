#!/usr/bin/env bash
# tools/check-run-scripts.sh WORK_DIR: the README's jobs, each as a newcomer meets it. Every
# tools/run-{main,text,cifar}.sh is run with the optional packages it does not install itself hidden
# from CMake (MPI, Catch2, Google Benchmark, nlohmann-json, zlib: whichever its install-deps line
# lacks), so that a build that needs a package the script forgets fails here and not on a fresh machine.
# Each builds its program (native, as the script does, with warnings as errors: the one -march=native
# build of CI) and trains it briefly (one short epoch) into WORK_DIR; exit != 0 on any failure.
# At -Og instead of the scripts' -O3: what this checks is what each script installs, that it builds and
# that it runs, which the optimisation level does not change (the same accuracies and losses to the last
# digit), and the three native compiles take 38 % less time (docs/building.md); -O3 with warnings as
# errors is the README test build's (tools/run-tests.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:?usage: tools/check-run-scripts.sh WORK_DIR}
mkdir -p "$work"

# Optional Debian package -> the CMake package it provides.
declare -A cmake_name=([libopenmpi-dev]=MPI [catch2]=Catch2 [libbenchmark-dev]=benchmark
                       [nlohmann-json3-dev]=nlohmann_json [zlib1g-dev]=ZLIB)

# hidden_flags SCRIPT: -DCMAKE_DISABLE_FIND_PACKAGE_<X>=ON for each optional package SCRIPT does not install.
hidden_flags() {
  local installs flags=""
  installs=$(sed -n '/install-deps.sh/,/[^\\]$/p' "$1" | tr '\\\n' '  ')
  for pkg in "${!cmake_name[@]}"; do
    grep -qw -- "$pkg" <<<"$installs" || flags+=" -DCMAKE_DISABLE_FIND_PACKAGE_${cmake_name[$pkg]}=ON"
  done
  echo "$flags"
}

# check NAME ARGS...: runs tools/run-NAME.sh in its own build directory with ARGS, output in WORK_DIR/NAME.log.
check() {
  local name=$1 script=tools/run-$1.sh flags
  shift
  flags=$(hidden_flags "$script")
  echo "check-run-scripts: $script (hidden:${flags:- nothing})"
  if DDL_BUILD_DIR="$work/build-$name" DDL_CMAKE_FLAGS="-DDDL_WARNINGS_AS_ERRORS=ON -DCMAKE_CXX_FLAGS_RELEASE=-Og$flags" "$script" "$@" --out "$work/out-$name" \
       >"$work/$name.log" 2>&1; then
    grep -E "final test|^test|bits/byte|accuracy" "$work/$name.log" | tail -n 2 || true
  else
    tail -n 40 "$work/$name.log"
    echo "check-run-scripts: $script FAILED with only the packages it installs (log: $work/$name.log)" >&2
    return 1
  fi
}

# The main job's packages are installed first, alone: they include what the other two need but for their
# data, so a package run-main.sh forgets fails it and is not installed for it by another script. Its
# configure line (`-- ddl ...`) marks that its install step is done; then the other two start beside its
# build (three single-threaded compiles on the machine's cores instead of one, then two).
rm -f "$work/main.log" "$work/text.log" "$work/cifar.log"
check main --epochs 1 --limit 3000 --val 500 --threads 2 & main=$!
until grep -q '^-- ddl' "$work/main.log" 2>/dev/null || ! kill -0 "$main" 2>/dev/null; do sleep 1; done
check text --epochs 1 --steps 5 --eval-bytes 4096 --threads 1 & text=$!
check cifar --epochs 1 --limit 600 --val 100 --threads 1 & cifar=$!
rc=0
wait "$main" || rc=1
wait "$text" || rc=1
wait "$cifar" || rc=1
[ "$rc" -eq 0 ] && echo "check-run-scripts: the README's jobs build and run with only what they install"
exit "$rc"
