#!/usr/bin/env bash
# tools/run-fuzz.sh BUILD_DIR SECONDS [TARGET...]: builds the libFuzzer targets (clang, ASan+UBSan)
# in BUILD_DIR and runs each for SECONDS, one per core at a time, on a scratch copy of its seed corpus (tests/fuzz/<target>/
# stays as committed). A crash, leak, sanitizer report, a malloc above -malloc_limit_mb (far more
# than any input of -max_len bytes justifies) or RSS above -rss_limit_mb fails the run (exit != 0).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: tools/run-fuzz.sh BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?usage: tools/run-fuzz.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(idx cifar safetensors text_corpus token_files tokenizer authors_config)
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release -DDDL_BUILD_FUZZ=ON \
  -DDDL_BUILD_TESTS=OFF -DDDL_BUILD_BENCH=OFF -DDDL_BUILD_EXAMPLES=OFF -DDDL_INSTALL=OFF -DDDL_USE_OPENMP=OFF >/dev/null
cmake --build "$build" -j2 --target "${targets[@]/#/fuzz_}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The targets write each input to a file: a tmpfs makes that ~10x faster.
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm
# fuzz TARGET: runs one target; its log and status go to the scratch folder.
fuzz() {
  local t=$1 rc=0
  mkdir -p "$scratch/$t"
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -max_len=16384 -rss_limit_mb=2048 -malloc_limit_mb=512 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="$build/fuzz_$t-" "$scratch/$t" "tests/fuzz/$t" \
    >"$scratch/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$scratch/$t.status"
}
# One target per core at a time (each fuzzer is one process on one core).
jobs_max=$(nproc)
for t in "${targets[@]}"; do
  echo "fuzz_$t: ${seconds}s"
  fuzz "$t" &
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
done
wait
failed=0
for t in "${targets[@]}"; do
  echo "fuzz_$t:"
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|Done)" "$scratch/$t.log" || true
  rc=$(cat "$scratch/$t.status")
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$scratch/$t.log"
    echo "fuzz_$t failed (exit $rc): the input is in $build/fuzz_$t-*"
    failed=1
  fi
done
exit "$failed"
