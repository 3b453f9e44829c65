#!/usr/bin/env bash
# examples/tests/token_runs.sh EXE WORK DIR: ddl-text on the tiny token files in DIR (written by
# test_token_files, "example path: write tiny token files"): trains with the loss in nats per token
# (loss_unit in metrics.csv), samples token ids from the checkpoint, evaluates --test-tokens with
# --eval-only, and refuses a vocabulary the tokens exceed (exit 2, the file and byte offset named).
set -euo pipefail
exe=$1 work=$2 dir=$3
rm -rf "$work"
mkdir -p "$work"
fail() {
  echo "token runs: $*"
  exit 1
}
data=(--tokens "$dir/*train*.bin" --val-tokens "$dir/val.bin" --test-tokens "$dir/test.bin")
model=(--width 16 --depth 1 --heads 2 --context 16)
out=$("$exe" "${data[@]}" --vocab 512 "${model[@]}" --batch 8 --steps 25 --epochs 2 --lr 0.01 --sample-tokens 5 \
  --threads 1 --out "$work/run" 2>&1) || fail "training failed: $out"
echo "$out" | grep -q "^ddl-text: training tokens .*: 2 files (llm.c shard), 5000 tokens" || fail "shards not read: $out"
echo "$out" | grep -qE "^final validation loss [0-9.]+ nats per token; final test loss [0-9.]+ nats per token" ||
  fail "no loss in nats per token: $out"
csv=$work/run/metrics.csv
head -1 "$csv" | grep -q ",loss_unit$" || fail "metrics.csv has no loss_unit column: $(head -1 "$csv")"
tail -1 "$csv" | grep -q ",nats_per_token$" || fail "metrics.csv's loss_unit is not nats_per_token: $(tail -1 "$csv")"
val=$(tail -1 "$csv" | cut -d, -f6)
awk -v v="$val" 'BEGIN { exit !(v < 5.5) }' || fail "validation loss $val is not below 5.5 nats (uniform: 6.24)"
echo "$out" | grep -A1 "^sample" | tail -1 | grep -qE "^[0-9]+( [0-9]+){5}$" || fail "the sample is not token ids: $out"

gen=$("$exe" --out "$work/run" --generate "300 301" --sample-tokens 4 2>&1) || fail "--generate failed: $gen"
echo "$gen" | tail -1 | grep -qE "^300 301( [0-9]+){4}$" || fail "--generate did not print ids: $gen"
set +e
bad=$("$exe" --out "$work/run" --generate "The " 2>&1)
rc=$?
set -e
[ "$rc" -eq 1 ] && echo "$bad" | grep -q "takes token ids" || fail "a text prompt for a token model: exit $rc: $bad"

ev=$("$exe" "${data[@]}" --out "$work/run" --eval-only 2>&1) || fail "--eval-only failed: $ev"
echo "$ev" | grep -qE "test loss [0-9.]+ nats per token \(499 tokens\)" || fail "--eval-only: $ev"

set +e
small=$("$exe" "${data[@]}" --vocab 300 "${model[@]}" --steps 1 --epochs 1 --threads 1 --out "$work/small" 2>&1)
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "tokens >= --vocab 300: exit $rc, expected 2: $small"
echo "$small" | grep -qE "tiny_train_000000.bin': byte offset 1028: token [0-9]+ is outside the vocabulary of 300" ||
  fail "tokens >= --vocab 300 are not named by file and offset: $small"
echo "token runs: all checks passed"
