#!/usr/bin/env bash
# ddl-mnist on 2 MPI ranks: the same result as one process with the same global batch; a batch that
# does not divide over the ranks and ranks started with different options are refused with a
# message, every rank ends; a rank killed mid-run ends the job (no hang) and the last checkpoint
# stays usable. (A stop on one rank and resuming on another number of ranks: tests/mpi.)
#   mpi_runs.sh DDL_MNIST MPIEXEC WORK_DIR [ddl-mnist options but --batch and --epochs...]
set -euo pipefail
exe=$1 mpiexec=$2 work=$3
shift 3
rm -rf "$work"
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun() { timeout 300 "$mpiexec" --oversubscribe "$@"; }
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; tail -n 30 "$f"; done; exit 1; }
final() { grep -o 'final test loss [0-9.]*, final test accuracy: [0-9.]*%' "$1"; }

# 1. Two ranks give the one-process result (float sums in another order: compared to 4 digits).
"$exe" "$@" --batch 16 --epochs 6 --threads 2 --out "$work/one" >"$work/one.log" 2>&1 || fail "the one-process run failed"
mpirun -np 2 "$exe" "$@" --batch 16 --epochs 6 --threads 1 --out "$work/two" >"$work/two.log" 2>&1 || fail "the 2-rank run failed"
grep -q '1 threads per rank, 2 ranks (MPI, rank-order sums)' "$work/two.log" || fail "the first line does not name the ranks"
[ "$(final "$work/one.log")" = "$(final "$work/two.log")" ] ||
  fail "2 ranks: '$(final "$work/two.log")', one process: '$(final "$work/one.log")'"
[ -f "$work/two/checkpoint.safetensors" ] && [ -f "$work/two/metrics.csv" ] || fail "rank 0 wrote no checkpoint or metrics"

# 2. A global batch of 33 does not divide over 2 ranks.
set +e
mpirun -np 2 "$exe" "$@" --batch 33 --epochs 1 --threads 1 --out "$work/odd" >"$work/odd.log" 2>&1
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "batch 33 on 2 ranks was accepted"
grep -q 'the global batch of 33 samples does not divide over 2 ranks' "$work/odd.log" || fail "no message for batch 33"

# 3. Ranks started with different options: refused before training.
set +e
mpirun -np 1 "$exe" "$@" --batch 16 --epochs 1 --threads 1 --seed 1 --out "$work/differ" : -np 1 "$exe" "$@" --batch 16 \
  --epochs 1 --threads 1 --seed 2 \
  --out "$work/differ" >"$work/differ.log" 2>&1
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "ranks with different seeds were accepted"
grep -q 'the ranks disagree on their command-line options' "$work/differ.log" || fail "no disagreement message"
grep -q "rank 1 of 2: --seed is '2' here, '1' on rank 0" "$work/differ.log" || fail "the message does not name rank 1 and --seed"
# 3b. Rank 1's labels shifted by one (files of the same size): refused by the data digest, naming it.
if [ "$1" = --data ]; then
  mkdir -p "$work/shifted"
  cp "$2"/* "$work/shifted/" 2>/dev/null || true
  labels=$(ls "$work/shifted"/train-labels*)
  { head -c 8 "$2/$(basename "$labels")"; tail -c +9 "$2/$(basename "$labels")" | tr '\000-\011' '\001-\011\000'; } >"$labels"
  set +e
  mpirun -np 1 "$exe" "$@" --batch 16 --epochs 1 --threads 1 --out "$work/shift" : -np 1 "$exe" --data "$work/shifted" \
    "${@:3}" --batch 16 --epochs 1 --threads 1 --out "$work/shift" >"$work/shift.log" 2>&1
  rc=$?
  set -e
  [ "$rc" -ne 0 ] || fail "ranks with shifted labels were accepted"
  grep -q "rank 1 of 2: data is '.*' here (--data $work/shifted)" "$work/shift.log" || fail "the shifted labels are not named"
  [ ! -e "$work/shift/checkpoint.safetensors" ] || fail "ranks with shifted labels trained"
fi

# 4. A rank killed (SIGKILL) after the first epoch of a long run: the job ends (the timeout would
#    fail it), and the checkpoint rank 0 wrote last is complete: --eval-only reads it.
mpirun -np 2 "$exe" "$@" --batch 16 --epochs 100000 --threads 1 --out "$work/kill" >"$work/kill.log" 2>&1 &
launcher=$!
for _ in $(seq 1 600); do
  [ -f "$work/kill/checkpoint.safetensors" ] && break
  sleep 0.1
done
rank=$(pgrep -f -n -- "--out $work/kill" || true)  # the newest process of the job: a rank
[ -n "$rank" ] || fail "no rank process to kill"
kill -KILL "$rank"
set +e
wait "$launcher"
rc=$?
set -e
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "the job with a killed rank exited with $rc (124: it hung)"
"$exe" "$@" --batch 16 --epochs 100000 --threads 1 --out "$work/kill" --eval-only >"$work/kill-eval.log" 2>&1 || fail "the last checkpoint is unusable"
echo "mpi runs: all checks passed"
