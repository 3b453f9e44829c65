#!/usr/bin/env bash
# ddl-text on a small file: trains a tiny DeltaLM, reports bits per byte and a sample; --resume after
# the last epoch has nothing to do; --eval-only gives the final test figure again; --generate samples
# the same text for the same settings; --audit writes a row per Delta sublayer and epoch;
# bad sampling settings and missing data are refused with the documented exit statuses. (A resume
# mid-run equal to an unbroken run: tests/test_lm_training.cpp.)
#   text_runs.sh PROGRAM WORK_DIR DATA_FILE
set -uo pipefail
exe=$1 work=$2 data=$3
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
tiny=(--data "$data" --width 16 --depth 1 --heads 2 --context 16 --batch 4 --steps 6 --epochs 2 --lr 0.01
  --eval-bytes 512 --sample-tokens 40 --threads 1)

out=$("$exe" "${tiny[@]}" --variant cc --out "$work/run" 2>&1)
status=$?
echo "$out" | tail -5
[ "$status" -eq 0 ] || fail "training exited $status"
echo "$out" | grep -q "^ddl-text: read $data" || fail "the first line does not say what was read"
test_line=$(echo "$out" | grep "final test loss") || fail "no final test line"
echo "$test_line" | grep -Eq "[0-9]+\.[0-9]+ bits per byte" || fail "no bits per byte in: $test_line"
echo "$out" | grep -q "^sample (temperature 0.8, top-k 40):" || fail "no sample"
[ -f "$work/run/checkpoint.safetensors" ] || fail "no checkpoint"
[ "$(wc -l <"$work/run/metrics.csv")" -eq 3 ] || fail "metrics.csv does not have a header and 2 epochs"

out=$("$exe" "${tiny[@]}" --variant cc --out "$work/run" --resume 2>&1) || fail "resume of a finished run failed: $out"
echo "$out" | grep -q "nothing to do" || fail "resume of a finished run did not say so: $out"

tested=$(echo "$test_line" | sed -E 's/.*final test loss ([0-9.]+) nats.*/\1/')
out=$("$exe" --data "$data" --out "$work/run" --eval-only 2>&1) || fail "--eval-only failed: $out"
echo "$out" | grep -q "test loss $tested nats" || fail "--eval-only does not repeat the test loss $tested: $out"

# --audit: one row per Delta sublayer and epoch (block 0 attn = stage 0, block 0 mlp = stage 1), a table
# at the end; with --eval-only the test text's eval_audit.csv.
out=$("$exe" "${tiny[@]}" --out "$work/audit" --audit 2>&1) || fail "--audit training failed: $out"
csv="$work/audit/audit.csv"
if [ -f "$csv" ] && [ -f "$work/audit/audit.json" ]; then
  [ "$(head -1 "$csv" | cut -d, -f1-4)" = "epoch,block,stage,tokens" ] || fail "audit.csv header: $(head -1 "$csv")"
  rows=$(tail -n +2 "$csv" | cut -d, -f1-3 | tr '\n' ' ')
  [ "$rows" = "1,0,0 1,0,1 2,0,0 2,0,1 " ] || fail "audit.csv rows (epoch,block,stage) are: $rows"
  val=$(echo "$out" | sed -nE 's/.*validation ([0-9]+),.*/\1/p' | head -1)
  expected=$(( (val < 512 ? val : 512) - 1 ))  # --eval-bytes 512: every evaluated byte but the last is predicted
  tokens=$(tail -n +2 "$csv" | cut -d, -f4 | sort -u)
  [ "$tokens" = "$expected" ] || fail "audit.csv tokens are not the $expected predicted validation bytes: $tokens"
else
  fail "--audit wrote no audit.csv / audit.json"
fi
echo "$out" | grep -q "^block 0 attn " || fail "no 'block 0 attn' row in the printed audit: $out"
echo "$out" | grep -q "^block 0 mlp " || fail "no 'block 0 mlp' row in the printed audit: $out"
out=$("$exe" --data "$data" --out "$work/audit" --eval-only --audit 2>&1) || fail "--eval-only --audit failed: $out"
[ "$(tail -n +2 "$work/audit/eval_audit.csv" 2>/dev/null | wc -l)" -eq 2 ] || fail "eval_audit.csv does not have 2 rows"
echo "$out" | grep -q "^block 0 mlp " || fail "--eval-only --audit printed no 'block 0 mlp' row: $out"
out=$("$exe" "${tiny[@]}" --residual additive --out "$work/audit-add" --audit 2>&1) ||
  fail "--audit of the additive baseline failed: $out"
echo "$out" | grep -q "no gated blocks (additive residual)" || fail "the additive audit does not say there is nothing to audit"

a=$("$exe" --out "$work/run" --generate "The " --sample-tokens 30 --seed 3 2>&1) || fail "--generate failed: $a"
b=$("$exe" --out "$work/run" --generate "The " --sample-tokens 30 --seed 3 2>&1)
[ "$a" = "$b" ] || fail "--generate is not reproducible"
echo "$a" | grep -q "^The " || fail "--generate does not print the prompt: $a"

"$exe" --out "$work/run" --generate "The " --temperature 0 >"$work/temp.txt" 2>&1
status=$?
[ "$status" -eq 1 ] && grep -qF -- "--temperature expects a number > 0" "$work/temp.txt" ||
  fail "temperature 0: exit $status, $(cat "$work/temp.txt")"
long=$(head -c 40 /dev/zero | tr '\0' 'x')
"$exe" --out "$work/run" --generate "$long" >"$work/long.txt" 2>&1
status=$?
[ "$status" -eq 1 ] && grep -qF -- "--generate has 40 bytes, more than the model's context of 16" "$work/long.txt" ||
  fail "over-long prompt: exit $status, $(cat "$work/long.txt")"
# Ctrl-C during a long --generate: the sample stops within seconds with 128 + SIGINT.
"$exe" --out "$work/run" --generate "The " --sample-tokens 1048576 >"$work/long-sample.txt" 2>&1 &
pid=$!
sleep 1
kill -INT "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
  kill -9 "$pid"
  fail "--generate ran on 5 s after SIGINT"
else
  wait "$pid"
  status=$?
  [ "$status" -eq 130 ] && grep -q "stopped by SIGINT after" "$work/long-sample.txt" ||
    fail "--generate after SIGINT: exit $status, $(tail -c 200 "$work/long-sample.txt")"
fi
# Any byte is a prompt byte (UTF-8 above 0x7f too), in --generate and after training.
out=$("$exe" --out "$work/run" --generate "é→" --sample-tokens 5 2>&1) || fail "a non-ASCII --generate prompt failed: $out"
echo "$out" | grep -q "^é→" || fail "the non-ASCII prompt is not printed back: $out"
bare=(--width 16 --depth 1 --heads 2 --batch 4 --steps 1 --epochs 1 --eval-bytes 512 --sample-tokens 8 --threads 1)
out=$("$exe" "${bare[@]}" --data "$data" --context 16 --prompt "ü" --out "$work/utf8" 2>&1) || fail "--prompt ü failed: $out"
# Sampling settings and data too short for the context are refused before training: no checkpoint.
refusedEarly() {  # refusedEarly STATUS TEXT ARGS...
  local status=$1 text=$2
  shift 2
  rm -rf "$work/early"
  local out rc
  out=$("$exe" "$@" --out "$work/early" 2>&1)
  rc=$?
  if [ "$rc" -ne "$status" ] || ! grep -qF -- "$text" <<<"$out" || [ -e "$work/early/checkpoint.safetensors" ]; then
    fail "$* -> exit $rc (expected $status, '$text', no checkpoint): $(tail -3 <<<"$out")"
  fi
}
refusedEarly 1 "--prompt is empty" "${tiny[@]}" --prompt ""
refusedEarly 1 "--prompt has 20 bytes, more than the model's context of 16" "${tiny[@]}" --prompt "$(head -c 20 /dev/zero | tr '\0' 'y')"
refusedEarly 1 "--prompt has 4 bytes, more than the model's context of 1" "${bare[@]}" --data "$data" --context 1
refusedEarly 1 "--temperature expects a number > 0" "${tiny[@]}" --temperature 0
printf 'abc' >"$work/three-bytes"
refusedEarly 2 "3 bytes leave the validation split empty" "${bare[@]}" --context 1 --prompt a --data "$work/three-bytes"
head -c 300 "$data" >"$work/short"
refusedEarly 2 "a window of T = 16 needs at least 17" "${bare[@]}" --context 16 --data "$work/short"
"$exe" --data "$work/no-such-file" --out "$work/none" >"$work/missing.txt" 2>&1
status=$?
[ "$status" -eq 2 ] && grep -q "hint: install the default text" "$work/missing.txt" ||
  fail "missing data: exit $status, $(cat "$work/missing.txt")"
finish "text runs"
