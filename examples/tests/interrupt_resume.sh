#!/usr/bin/env bash
# Stops a running ddl-mnist with each signal in turn after its first epoch, resumes it with --resume, and
# checks that the result equals a run that was never interrupted (made once): the final checkpoint byte for
# byte and every metrics row except the wall-clock columns (seconds, samples_per_s).
#   interrupt_resume.sh DDL_MNIST WORK_DIR "SIGNALS" [ddl-mnist options...]     (SIGNALS: e.g. "INT TERM")
set -euo pipefail
exe=$1 work=$2 signals=$3
shift 3
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done; exit 1; }

"$exe" "$@" --out "$work/full" >"$work/full.log" 2>&1 || fail "the uninterrupted run failed"
untimed() { cut -d, -f1-9,12- "$1"; }

for sig in $signals; do
  split=$work/split-$sig
  "$exe" "$@" --out "$split" >"$split.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 30000); do  # up to ~5 minutes for the first epoch (sanitizer builds under load)
    grep -q '^epoch 1/' "$split.log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
  done
  kill -s "$sig" "$pid" 2>/dev/null || true
  set +e
  wait "$pid"
  rc=$?
  set -e
  expected=$((128 + $(kill -l "$sig")))
  [ "$rc" -eq "$expected" ] || fail "the interrupted run exited with $rc, expected $expected (did it finish before SIG$sig arrived?)"
  grep -q "ddl-mnist: stopped by SIG$sig at epoch" "$split.log" || fail "no 'stopped by SIG$sig' message"
  grep -q "continue with the same options and --resume" "$split.log" || fail "no hint to resume"
  grep "stopped by" "$split.log"

  "$exe" "$@" --out "$split" --resume >"$work/resume-$sig.log" 2>&1 || fail "the run resumed after SIG$sig failed"
  grep "^resumed " "$work/resume-$sig.log" || fail "the run resumed after SIG$sig did not resume"

  cmp "$work/full/checkpoint.safetensors" "$split/checkpoint.safetensors" || fail "final checkpoints differ (SIG$sig)"
  diff <(untimed "$work/full/metrics.csv") <(untimed "$split/metrics.csv") || fail "metrics rows differ (SIG$sig)"
  echo "PASS: stopped by SIG$sig, resumed, identical to the uninterrupted run ($(($(wc -l <"$work/full/metrics.csv") - 1)) epochs)"
done
