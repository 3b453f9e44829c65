#!/usr/bin/env bash
# Stops a running ddl-mnist with a signal after its first epoch, resumes it with --resume, and checks
# that the result equals a run that was never interrupted: the final checkpoint byte for byte and
# every metrics row except the wall-clock columns (seconds, samples_per_s).
#   interrupt_resume.sh DDL_MNIST WORK_DIR SIGNAL [ddl-mnist options...]     (SIGNAL: INT or TERM)
set -euo pipefail
exe=$1 work=$2 sig=$3
shift 3
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done; exit 1; }

"$exe" "$@" --out "$work/full" >"$work/full.log" 2>&1 || fail "the uninterrupted run failed"

"$exe" "$@" --out "$work/split" >"$work/split.log" 2>&1 &
pid=$!
for _ in $(seq 1 30000); do  # up to ~5 minutes for the first epoch (sanitizer builds under load)
  grep -q '^epoch 1/' "$work/split.log" && break
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
grep -q "ddl-mnist: stopped by SIG$sig at epoch" "$work/split.log" || fail "no 'stopped by SIG$sig' message"
grep -q "continue with the same options and --resume" "$work/split.log" || fail "no hint to resume"
grep "stopped by" "$work/split.log"

"$exe" "$@" --out "$work/split" --resume >"$work/resume.log" 2>&1 || fail "the resumed run failed"
grep "^resumed " "$work/resume.log" || fail "the resumed run did not resume"

cmp "$work/full/checkpoint.safetensors" "$work/split/checkpoint.safetensors" || fail "final checkpoints differ"
untimed() { cut -d, -f1-9,12- "$1"; }
diff <(untimed "$work/full/metrics.csv") <(untimed "$work/split/metrics.csv") || fail "metrics rows differ"
echo "PASS: stopped by SIG$sig, resumed, identical to the uninterrupted run ($(($(wc -l <"$work/full/metrics.csv") - 1)) epochs)"
