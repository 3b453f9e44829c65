#!/usr/bin/env bash
# ddl-text on 2 MPI ranks: the same validation and test loss as one process with the same global
# batch (float sums in another order: compared to the printed 4 digits), rank 0 alone writes the
# checkpoint and metrics; a batch of windows that does not divide over the ranks is refused by name.
#   text_mpi_runs.sh DDL_TEXT MPIEXEC WORK_DIR TEXT_FILE
set -euo pipefail
exe=$1 mpiexec=$2 work=$3 text=$4
rm -rf "$work"
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun() { timeout 300 "$mpiexec" --oversubscribe "$@"; }
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; tail -n 30 "$f"; done; exit 1; }
small=(--data "$text" --width 32 --depth 2 --heads 2 --context 32 --epochs 2 --steps 10 --sample-tokens 10 --eval-bytes 4096)
final() { grep -ao 'final validation loss [0-9.]* .*final test loss [0-9.]* nats' "$1"; }

"$exe" "${small[@]}" --batch 8 --threads 2 --out "$work/one" >"$work/one.log" 2>&1 || fail "the one-process run failed"
mpirun -np 2 "$exe" "${small[@]}" --batch 8 --threads 1 --out "$work/two" >"$work/two.log" 2>&1 || fail "the 2-rank run failed"
grep -q '1 threads per rank, 2 ranks (MPI, rank-order sums)' "$work/two.log" || fail "the model line does not name the ranks"
[ -n "$(final "$work/one.log")" ] || fail "no final line in the one-process run"
[ "$(final "$work/one.log")" = "$(final "$work/two.log")" ] ||
  fail "2 ranks: '$(final "$work/two.log")', one process: '$(final "$work/one.log")'"
[ -f "$work/two/checkpoint.safetensors" ] && [ -f "$work/two/metrics.csv" ] || fail "rank 0 wrote no checkpoint or metrics"

set +e
mpirun -np 2 "$exe" "${small[@]}" --batch 7 --threads 1 --out "$work/odd" >"$work/odd.log" 2>&1
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "7 windows on 2 ranks were accepted"
grep -q 'the global batch of 7 windows does not divide over 2 ranks' "$work/odd.log" || fail "no message for batch 7"
echo "text mpi runs: all checks passed"
