#!/usr/bin/env bash
# A run never destroys another (examples/run_folder.hpp, docs/runs.md): a new run in an --out that
# holds one is refused unless --resume or --overwrite, an empty or unusable --out is refused before
# anything starts (as is any empty path option), run.lock keeps a second run out while the first lives
# and a dead owner's lock is taken over, dead writers' temporaries are removed (ddl's alone), a failed
# start leaves no folder it created, and --resume accepts more epochs and a new --lr but names any
# other option that differs.
#   run_folder.sh DDL_TEXT WORK_DIR DATA_FILE
set -uo pipefail
exe=$1 work=$2 data=$3
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
failures=0
S=(--variant dv1 --width 32 --depth 1 --heads 2 --context 32 --batch 8 --threads 1 --steps 4
  --eval-bytes 256 --sample-tokens 8)

# expect STATUS 'TEXT' ARGS...: ddl-text ARGS exits with STATUS and prints TEXT (fixed string).
expect() {
  local status=$1 text=$2
  shift 2
  local out rc
  out=$("$exe" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$status" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL: ddl-text $* -> exit $rc (expected $status), output:"
    echo "$out" | tail -5
    echo "  expected to contain: $text"
    failures=$((failures + 1))
  else
    echo "ok: $* -> $rc: $(grep -F -- "$text" <<<"$out" | head -1 | cut -c1-160)"
  fi
}
check() { "$@" || { echo "FAIL: $*"; failures=$((failures + 1)); }; }

expect 0 "final test loss" "${S[@]}" --data "$data" --epochs 2 --out run
cp run/checkpoint.safetensors run.ckpt
cp run/metrics.csv run.csv
# Forgetting --resume: refused before anything is touched, naming the folder and both flags.
expect 2 "--out run already holds a run (checkpoint.safetensors, metrics.csv): continue it with --resume, replace it with --overwrite" \
  "${S[@]}" --data "$data" --epochs 2 --out run
check cmp -s run/checkpoint.safetensors run.ckpt
check cmp -s run/metrics.csv run.csv
check test ! -e run/run.lock
expect 1 "--resume continues the run in --out and --overwrite replaces it: give one of them" "${S[@]}" --data "$data" --out run --resume --overwrite

# --resume: more epochs and a new rate are taken (docs/runs.md); another option is named.
expect 1 "the training options differ from the saved run: warmup_steps (saved 0, now 1)" "${S[@]}" --data "$data" --epochs 2 --out run --resume --warmup 1
expect 0 "resumed run/checkpoint.safetensors at epoch 2" "${S[@]}" --data "$data" --out run --resume --epochs 3 --lr 0.001
check test "$(wc -l <run/metrics.csv)" -eq 4

# --resume on other data (same size, one byte changed) is refused by its digest; a model option that
# differs from the checkpoint's is named instead of being ignored.
sed 's/Permission/permission/' "$data" >other-data
check test "$(wc -c <other-data)" -eq "$(wc -c <"$data")"
expect 2 "is not the data of the saved run in run/checkpoint.safetensors ($data, " "${S[@]}" --data other-data --out run --resume
cp "$data" moved-data
expect 0 "nothing to do" "${S[@]}" --data moved-data --out run --resume
expect 1 "--variant cc differs from the saved run's variant dv1" "${S[@]/#dv1/cc}" --data "$data" --out run --resume
expect 1 "--context 16 differs from the saved run's context 32" --out run --generate "a" --context 16
# A checkpoint of another model (here: model_config says another model) is an unusable checkpoint.
mkdir other-model
LC_ALL=C sed 's/delta_lm/delta_nx/' run/checkpoint.safetensors >other-model/checkpoint.safetensors
expect 2 "other-model/checkpoint.safetensors: not a ddl-text checkpoint" --data "$data" --out other-model --eval-only

# A size in model_config that the tensors do not confirm (dv 9 in a dv 1 checkpoint, its variant renamed
# to match, a space keeping the header's length) is refused before anything is built (a large dv would
# otherwise allocate d x dv per token first); with the variant left as it was, the label contradicts dv.
mkdir big-dv bad-variant
LC_ALL=C sed 's/\(\\"dv\\":\\"\)1\\"/\19\\"/' run/checkpoint.safetensors >bad-variant/checkpoint.safetensors
LC_ALL=C sed 's/\\"variant\\":\\"dv1\\"/\\"variant\\":\\"cc\\" /' bad-variant/checkpoint.safetensors \
  >big-dv/checkpoint.safetensors
expect 2 "model_config implies tensor \"readout.read.weight\" [9], the file has none" --out big-dv --generate "a"
expect 2 "variant 'dv1' contradicts dv 9" --out bad-variant --generate "a"

# An empty --out is a usage error and writes nothing; an --out that cannot be a folder is exit 2.
mkdir empty-cwd
(cd empty-cwd && "$exe" "${S[@]}" --data "$data" --out "" >../empty.log 2>&1)
rc=$?
check test "$rc" -eq 1
check grep -qF -- "--out is empty" empty.log
check test -z "$(ls empty-cwd)"
touch a-file
expect 2 "cannot create output folder 'a-file/out'" "${S[@]}" --data "$data" --out a-file/out
# Every path option refuses an empty value (exit 1): "" would be the current folder, and --out ""
# would make --export-authors read /checkpoint.safetensors.
expect 1 "--init-from is empty: name a folder" "${S[@]}" --data "$data" --init-from "" --out from-empty
expect 1 "--out is empty: name a folder" --out "" --export-authors exported
expect 1 "--data is empty: name a file or folder" "${S[@]}" --data "" --out data-empty
expect 1 "--tokens is empty: name a file, folder or pattern" "${S[@]}" --tokens "" --val-tokens x --vocab 300 --out tok-empty
check test ! -e from-empty -a ! -e exported -a ! -e data-empty -a ! -e tok-empty
# A start that fails on its data leaves no folder it created (a folder that existed stays).
expect 2 "no-such-data" "${S[@]}" --data no-such-data --out fresh/deeper
check test ! -e fresh
head -c 20 "$data" >short-data
expect 2 "a window of T = 32 needs at least 33" "${S[@]}" --data short-data --out fresh-empty
check test ! -e fresh-empty
mkdir kept
expect 2 "no-such-data" "${S[@]}" --data no-such-data --out kept
check test -d kept
# A FIFO where run.lock should be is refused at once, not read (which would wait for a writer forever).
mkdir fifo-lock
mkfifo fifo-lock/run.lock
out=$(timeout -k 5 20 "$exe" "${S[@]}" --data "$data" --out fifo-lock 2>&1)
rc=$?
if [ "$rc" -ne 2 ] || ! grep -qF "fifo-lock/run.lock: not a regular file" <<<"$out"; then
  echo "FAIL: run.lock a FIFO -> exit $rc: $(tail -2 <<<"$out")"
  failures=$((failures + 1))
fi

# The lock: a live owner keeps a run out; a dead owner's lock and temporaries are taken over/removed.
mkdir locked
echo "pid $$ host $(hostname)" >locked/run.lock
expect 2 "locked/run.lock: another run (pid $$ on $(hostname)) is using this --out" "${S[@]}" --data "$data" --out locked
sh -c 'exit 0' &
dead=$!
wait "$dead"
echo "pid $dead host $(hostname)" >locked/run.lock
head -c 1000 /dev/zero >"locked/checkpoint.safetensors.ddl-tmp.$dead"
head -c 1000 /dev/zero >"locked/metrics.csv.ddl-tmp.$$"  # a live writer's: kept
head -c 1000 /dev/zero >"locked/notes.tmp.$dead"         # not ddl's temporary: kept
expect 0 "final test loss" "${S[@]}" --data "$data" --epochs 1 --out locked
check test ! -e "locked/checkpoint.safetensors.ddl-tmp.$dead"
check test -e "locked/metrics.csv.ddl-tmp.$$"
check test -e "locked/notes.tmp.$dead"
check test ! -e locked/run.lock

# --overwrite replaces the run: its files are removed first, the new run writes its own.
echo "stale" >locked/audit.csv
expect 0 "final test loss" "${S[@]}" --data "$data" --out locked --overwrite --epochs 1
check test "$(wc -l <locked/metrics.csv)" -eq 2
check test ! -e locked/audit.csv

# A 1-epoch run plots one point: gnuplot (when installed) must not warn about an empty x range.
out=$("$exe" "${S[@]}" --data "$data" --epochs 1 --out one-epoch 2>&1)
if command -v gnuplot >/dev/null && grep -q "empty x range" <<<"$out"; then
  echo "FAIL: gnuplot warned on a 1-epoch run: $(grep "empty x range" <<<"$out" | head -1)"
  failures=$((failures + 1))
fi

[ "$failures" -eq 0 ] && echo "run folder: all checks passed" || { echo "$failures failure(s)"; exit 1; }
