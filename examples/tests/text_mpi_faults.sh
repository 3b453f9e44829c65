#!/usr/bin/env bash
# ddl-text under mpirun with mistakes: ranks that run other commands (one with --help, one with another
# --seed) or read other data (same size, one byte changed) end the job at the first collective call,
# each differing rank naming its first difference, instead of hanging or training silently; --eval-only
# prints its result once (rank 0). Every mpirun runs under a timeout, so a hang fails the test.
#   text_mpi_faults.sh DDL_TEXT MPIEXEC WORK_DIR TEXT_FILE
set -uo pipefail
exe=$1 mpiexec=$2 work=$3 text=$4
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
failures=0
S=(--width 32 --depth 1 --heads 2 --context 32 --batch 8 --threads 1 --steps 4 --epochs 1 --eval-bytes 256 --tokens 8)

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

[ "$failures" -eq 0 ] && echo "text mpi faults: all checks passed" || { echo "$failures failure(s)"; exit 1; }
