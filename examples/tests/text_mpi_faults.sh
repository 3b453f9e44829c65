#!/usr/bin/env bash
# ddl-text under mpirun with mistakes: ranks that run other commands (one with --help, one with another
# --seed) or read other data (same size, one byte changed) end the job at the first collective call,
# each differing rank naming its first difference, instead of hanging or training silently; --eval-only
# prints its result once (rank 0); a rank that stops (SIGSTOP) ends the job after --mpi-timeout with
# exit 4, and a rank stopped for less than its peers' timeout, then continued, finishes the run; so do a
# rank stopped after its last collective call (rank 0 names it) and one that exits before it starts MPI.
# Every mpirun runs under a timeout, so a hang fails the test.
#   text_mpi_faults.sh DDL_TEXT MPIEXEC WORK_DIR TEXT_FILE
set -uo pipefail
exe=$1 mpiexec=$2 work=$3 text=$4
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
failures=0
B=(--width 32 --depth 1 --heads 2 --context 32 --batch 8 --threads 1 --epochs 1 --eval-bytes 256 --sample-tokens 8)
S=("${B[@]}" --steps 4)

# expect 'TEXT' ARGS...: mpirun ARGS ends within 60 s, with a non-zero status and TEXT in its output.
expect() {
  local text=$1
  shift
  local out rc
  out=$(timeout 60 "$mpiexec" --oversubscribe "$@" 2>&1)
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 0 ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL: mpirun $* -> exit $rc (124 = hung), output:"
    echo "$out" | tail -8
    echo "  expected to contain: $text"
    failures=$((failures + 1))
  else
    echo "ok: exit $rc: $(grep -F -- "$text" <<<"$out" | head -1 | cut -c1-200)"
  fi
}

expect "rank 1 of 2: --help is '1' here, '0' on rank 0" \
  -np 1 "$exe" "${S[@]}" --data "$text" --out a : -np 1 "$exe" "${S[@]}" --data "$text" --out a --help
expect "rank 1 of 2: --seed is '2' here, '1' on rank 0" \
  -np 1 "$exe" "${S[@]}" --data "$text" --out b : -np 1 "$exe" "${S[@]}" --data "$text" --out b --seed 2
expect "rank 1 of 2: --eval-only is '1' here, '0' on rank 0" \
  -np 1 "$exe" "${S[@]}" --data "$text" --out c : -np 1 "$exe" "${S[@]}" --data "$text" --out c --eval-only
sed 's/Permission/permission/' "$text" >other
expect "ddl-text: the ranks disagree on their data: every rank must run the same command on the same data" \
  -np 1 "$exe" "${S[@]}" --data "$text" --out d : -np 1 "$exe" "${S[@]}" --data other --out d
expect "rank 1 of 2: data is '6a2d656a5e185c2b of 1075 bytes' here (--data other), '" -np 1 "$exe" "${S[@]}" --data "$text" --out e : -np 1 "$exe" "${S[@]}" --data other --out e
[ -e d/checkpoint.safetensors ] && { echo "FAIL: ranks with other data trained"; failures=$((failures + 1)); }

# Rank 0 alone prints, in every mode: the --eval-only line once.
timeout 120 "$mpiexec" --oversubscribe -np 2 "$exe" "${S[@]}" --data "$text" --out f >f.log 2>&1 ||
  { echo "FAIL: the 2-rank run failed: $(tail -3 f.log)"; failures=$((failures + 1)); }
timeout 60 "$mpiexec" --oversubscribe -np 2 "$exe" --data "$text" --out f --eval-only --threads 1 >g.log 2>&1 ||
  { echo "FAIL: the 2-rank --eval-only failed: $(tail -3 g.log)"; failures=$((failures + 1)); }
n=$(grep -c "bits per byte" g.log)
[ "$n" -eq 1 ] || { echo "FAIL: --eval-only printed its result $n times: $(cat g.log)"; failures=$((failures + 1)); }

# stopRank1 SECONDS OUT RANK0_ARGS -- RANK1_ARGS: a 2-rank training run whose rank 1 is stopped
# (SIGSTOP) 1.5 s after rank 0 says the training starts (a start slowed by load must not put the stop
# into MPI_Init) and continued after SECONDS (never when SECONDS is 0); the mpirun status is printed
# last in OUT/log.
stopRank1() {
  local seconds=$1 out=$2 r0=() r1=()
  shift 2
  while [ "$1" != "--" ]; do r0+=("$1"); shift; done
  shift
  r1=("$@")
  mkdir -p "$out"
  (timeout 60 "$mpiexec" --oversubscribe -np 1 "$exe" "${r0[@]}" : \
     -np 1 bash -c 'echo $$ >"$0/rank1.pid"; shift; exec "$@"' "$out" x "$exe" "${r1[@]}" >"$out/log" 2>&1
   echo "status $?" >>"$out/log") &
  local job=$!
  for _ in $(seq 300); do grep -aq "^training: " "$out/log" 2>/dev/null && break; sleep 0.1; done
  sleep 1.5
  kill -STOP "$(cat "$out/rank1.pid")"
  if [ "$seconds" != 0 ]; then sleep "$seconds"; kill -CONT "$(cat "$out/rank1.pid")"; fi
  wait "$job"
}
L=("${B[@]}" --steps 100000 --data "$text" --out h)
stopRank1 0 h "${L[@]}" --mpi-timeout 3 -- "${L[@]}"
if grep -q "status 4" h/log && grep -qF "rank 0 of 2: MPI_" h/log && grep -qF "has waited 3 s for the other ranks" h/log; then
  echo "ok: a stopped rank ends the job: $(grep -F "has waited" h/log | sed 's/.*ddl::Mpi/ddl::Mpi/')"
else
  echo "FAIL: a stopped rank did not end the job with status 4 after --mpi-timeout 3: $(tail -c 600 h/log)"
  failures=$((failures + 1))
fi
# Rank 1 waits only 2 s itself, but its own stop (4 s) is not a wait; rank 0 tolerates 30 s.
L=("${B[@]}" --steps 1500 --data "$text" --out i)
stopRank1 4 i "${L[@]}" --mpi-timeout 30 -- "${L[@]}" --mpi-timeout 2
if grep -q "status 0" i/log && [ -e i/checkpoint.safetensors ]; then
  echo "ok: a rank stopped for 4 s and continued: the run finished"
else
  echo "FAIL: a rank stopped for 4 s and continued did not finish: $(tail -c 600 i/log)"
  failures=$((failures + 1))
fi

# The job's end: rank 1 is stopped once its training is over, while rank 0 samples (the job's only work
# left, about a second of CPU); rank 0 then names rank 1 after --mpi-timeout and ends the job with exit 4.
# (Before, rank 0 finished, and mpirun waited for the stopped rank 1 in MPI_Finalize forever.)
mkdir -p j
E=(--width 32 --depth 1 --heads 2 --context 32 --batch 8 --threads 1 --epochs 1 --eval-bytes 256 --steps 4
  --sample-tokens 30000 --data "$text" --out j --mpi-timeout 3)
(timeout 90 "$mpiexec" --oversubscribe -np 1 "$exe" "${E[@]}" : \
   -np 1 bash -c 'echo $$ >j/rank1.pid; exec "$@"' x "$exe" "${E[@]}" >j/log 2>&1
 echo "status $?" >>j/log) &
job=$!
for _ in $(seq 300); do grep -aq "^sample (" j/log && break; sleep 0.1; done
kill -STOP "$(cat j/rank1.pid)"
wait "$job"
if grep -aq "status 4" j/log && grep -aqF "has waited 3 s for the other ranks (rank 1 did not answer" j/log; then
  echo "ok: a rank stopped after its last collective call ends the job: $(grep -aF "did not answer" j/log | sed 's/.*ddl::Mpi/ddl::Mpi/')"
else
  echo "FAIL: a rank stopped after training did not end the job with status 4, naming it: $(tail -c 600 j/log)"
  failures=$((failures + 1))
fi
# The job's start: a rank that exits before it starts MPI leaves rank 0 in MPI_Init until --mpi-timeout.
expect "ddl::MpiSession: MPI_Init has waited 3 s for the other ranks" \
  -np 1 "$exe" "${S[@]}" --data "$text" --out k --mpi-timeout 3 : -np 1 /bin/true

[ "$failures" -eq 0 ] && echo "text mpi faults: all checks passed" || { echo "$failures failure(s)"; exit 1; }
