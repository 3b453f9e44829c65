#!/usr/bin/env bash
# examples/tests/token_runs.sh EXE WORK DIR TOKENIZE BPE: ddl-text on the tiny token files in DIR (written by
# test_token_files, "example path: write tiny token files"): trains with the loss in nats per token
# (loss_unit in metrics.csv), samples token ids from the checkpoint, evaluates --test-tokens with
# --eval-only, and refuses a vocabulary the tokens exceed (exit 2, the file and byte offset named).
# Then text -> ddl-tokenize (TOKENIZE) with the fixture vocabulary in the folder BPE -> ddl-text
# --tokenizer BPE: the prompt is encoded and the sample printed as text; --tokenizer is refused
# without --tokens and with a vocabulary smaller than the tokenizer's. Sets that share a file are refused;
# a token file truncated under a run ends it with exit 2 and a valid checkpoint.
set -euo pipefail
exe=$1 work=$2 dir=$3 tokenize=$4 bpe=$5
rm -rf "$work"
mkdir -p "$work"
fail() {
  echo "token runs: $*"
  exit 1
}
data=(--tokens "$dir/*train*.bin" --val-tokens "$dir/val.bin" --test-tokens "$dir/test.bin")
model=(--variant dv1 --width 16 --depth 1 --heads 2 --context 16)  # the samples checked below are dv1's
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
echo "$small" | grep -q -- "--data\|fortunes" && fail "an error in token files names --data or its hint: $small"
# --resume on other token files names the token options, not --data.
set +e
other=$("$exe" --tokens "$dir/*train*.bin" --val-tokens "$dir/test.bin" --out "$work/run" --resume --epochs 3 2>&1)
rc=$?
set -e
[ "$rc" -eq 2 ] && echo "$other" | grep -qF -- "--tokens | --val-tokens | --test-tokens $dir/*train*.bin | $dir/test.bin" ||
  fail "--resume on other token files: exit $rc: $other"
echo "$other" | grep -q -- "--data" && fail "--resume on other token files names --data: $other"

# Training, validation and test sets share no file (by identity): nanoGPT's folder of train.bin + val.bin as
# --tokens would train on the validation tokens. Refused (exit 1) before --out is created.
mkdir -p "$work/nano"
cp "$dir/val.bin" "$work/nano/val.bin"
cp "$dir/test.bin" "$work/nano/train.bin"
overlap() {  # overlap MESSAGE ARGS...: exit 1 naming MESSAGE, no --out folder left
  local msg=$1
  shift
  set +e
  r=$("$exe" "$@" --vocab 512 "${model[@]}" --steps 1 --epochs 1 --threads 1 --out "$work/overlap" 2>&1)
  local rc=$?
  set -e
  [ "$rc" -eq 1 ] && echo "$r" | grep -qF -- "$msg" || fail "ddl-text $*: exit $rc, expected 1 and '$msg': $r"
  [ ! -e "$work/overlap" ] || fail "a refused overlap left the folder $work/overlap"
}
overlap "--val-tokens: the file $work/nano/val.bin is also in --tokens ($work/nano/val.bin)" \
  --tokens "$work/nano" --val-tokens "$work/nano/val.bin"
overlap "--val-tokens: the file $dir/val.bin is also in --tokens" --tokens "$dir/val.bin" --val-tokens "$dir/val.bin"
overlap "--test-tokens: the file $dir/./val.bin is also in --val-tokens ($dir/val.bin)" \
  --tokens "$dir/*train*.bin" --val-tokens "$dir/val.bin" --test-tokens "$dir/./val.bin"

# A training file truncated between epochs (rewritten in place under the run): exit 2 naming the file,
# not a SIGBUS; run.lock is gone and the last checkpoint still samples.
mkdir -p "$work/shrink"
cp "$dir"/tiny_train_*.bin "$dir/val.bin" "$work/shrink/"
"$exe" --tokens "$work/shrink/*train*.bin" --val-tokens "$work/shrink/val.bin" --vocab 512 "${model[@]}" --batch 8 \
  --steps 5 --epochs 1000000 --eval-bytes 64 --threads 1 --out "$work/shrinking" >"$work/shrinking.log" 2>&1 &
pid=$!
for _ in $(seq 300); do [ -f "$work/shrinking/metrics.csv" ] && [ "$(wc -l <"$work/shrinking/metrics.csv")" -ge 3 ] && break; sleep 0.1; done
truncate -s 2048 "$work/shrink/tiny_train_000000.bin" "$work/shrink/tiny_train_000001.bin"
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && { kill "$pid"; fail "the run went on for 30 s after its token files were truncated"; }
set +e
wait "$pid"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -qE "tiny_train_00000[01].bin': byte offset [0-9]+: the file changed size while in use: 6024 bytes when opened, 2048 now" \
  "$work/shrinking.log" || fail "a token file truncated under a run: exit $rc: $(tail -3 "$work/shrinking.log")"
[ ! -e "$work/shrinking/run.lock" ] || fail "the truncated run left run.lock"
"$exe" --out "$work/shrinking" --generate "300" --sample-tokens 2 >/dev/null 2>&1 ||
  fail "the truncated run's last checkpoint does not sample"

# Text through the fixture tokenizer (273 ids) and back: the folder as ddl-text takes it.
for i in $(seq 1 300); do printf 'hello world\nthe caf\xc3\xa9 the world\n'; done > "$work/text.txt"
tk=$("$tokenize" --tokenizer "$bpe" --in "$work/text.txt" --out "$work/bpe_train.bin" --val-out "$work/bpe_val.bin" 2>&1) ||
  fail "ddl-tokenize --tokenizer $bpe: $tk"
"$tokenize" --vocab "$bpe/vocab.json" --merges "$bpe/merges.txt" --in "$work/text.txt" --out "$work/files.bin" > /dev/null
"$tokenize" --tokenizer "$bpe" --in "$work/text.txt" --out "$work/folder.bin" > /dev/null
cmp -s "$work/files.bin" "$work/folder.bin" || fail "ddl-tokenize: the folder $bpe and its two files give different ids"
bpedata=(--tokens "$work/bpe_train.bin" --val-tokens "$work/bpe_val.bin" --tokenizer "$bpe")
out=$("$exe" "${bpedata[@]}" --vocab 273 "${model[@]}" --batch 8 --steps 30 --epochs 2 --lr 0.01 --prompt "hello" \
  --sample-tokens 12 --threads 1 --out "$work/bpe" 2>&1) || fail "training with --tokenizer failed: $out"
line=$(echo "$out" | grep -A1 "^sample" | tail -1)
echo "$line" | grep -q "^hello" || fail "the sample does not start with its prompt as text: $out"
echo "$line" | grep -qE "^[0-9 ]+$" && fail "the sample is token ids, not text: $out"
echo "$line" | grep -qE "(world|the|caf)" || fail "the sample holds none of the text's words: $out"
gen=$("$exe" --out "$work/bpe" --tokenizer "$bpe" --generate "the caf" --sample-tokens 6 2>&1) ||
  fail "--generate with --tokenizer failed: $gen"
echo "$gen" | grep -A1 "^sample" | tail -1 | grep -q "^the caf" || fail "--generate did not print text: $gen"
refused() {  # refused CODE MESSAGE ARGS...: ddl-text ARGS exits with CODE and prints MESSAGE (left in $r)
  local code=$1 msg=$2
  shift 2
  set +e
  r=$("$exe" "$@" 2>&1)
  local rc=$?
  set -e
  [ "$rc" -eq "$code" ] && echo "$r" | grep -q -- "$msg" || fail "ddl-text $*: exit $rc, expected $code and '$msg': $r"
}
refused 1 "give it with --tokens" --data "$work/text.txt" --tokenizer "$bpe" --steps 1 --epochs 1 --out "$work/bytes"
[ ! -e "$work/bytes" ] || fail "a refused --tokenizer left the folder $work/bytes"
"$exe" --data "$work/text.txt" --width 16 --depth 1 --heads 2 --context 16 --steps 1 --epochs 1 --sample-tokens 1 \
  --threads 1 --out "$work/bytes" > /dev/null || fail "a byte run failed"
refused 1 "the checkpoint in --out is a model of bytes" --out "$work/bytes" --tokenizer "$bpe" --generate "hello"
refused 1 "has 273 ids, more than the model's vocabulary of 272 (--vocab)" "${bpedata[@]}" --vocab 272 "${model[@]}" \
  --steps 1 --epochs 1 --out "$work/small-vocab"
refused 2 "holds none of tokenizer.json" --tokens "$work/bpe_train.bin" --val-tokens "$work/bpe_val.bin" \
  --tokenizer "$work" --vocab 273 "${model[@]}" --steps 1 \
  --epochs 1 --out "$work/no-tokenizer"
echo "$r" | grep -q "hint" && fail "an unusable --tokenizer comes with another file's hint: $r"

# A vocabulary below the default --top-k 40: the default is clamped to it and the run samples; a --top-k
# above it is refused before training (nothing written), also with --generate.
for f in small_train small_val; do
  for i in $(seq 0 599); do printf "\\x$(printf %02x $(( (i * 7 + ${#f}) % 20 )))\\x00"; done > "$work/$f.bin"
done
smalldata=(--tokens "$work/small_train.bin" --val-tokens "$work/small_val.bin" --vocab 20 "${model[@]}" --batch 4
  --steps 2 --epochs 1 --sample-tokens 5 --threads 1)
out=$("$exe" "${smalldata[@]}" --out "$work/vocab20" 2>&1) || fail "--vocab 20 with the default --top-k failed: $out"
echo "$out" | grep -q "^sample (temperature 0.8, top-k 20):" || fail "--vocab 20: the default top-k is not 20: $out"
echo "$out" | grep -A1 "^sample" | tail -1 | grep -qE "^[0-9]+( [0-9]+){5}$" || fail "--vocab 20 sampled no ids: $out"
refused 1 "--top-k 21 is more than the model's vocabulary of 20" "${smalldata[@]}" --top-k 21 --out "$work/topk21"
[ ! -e "$work/topk21" ] || fail "a refused --top-k left the folder $work/topk21"
refused 1 "--top-k 21 is more than the model's vocabulary of 20" --out "$work/vocab20" --generate "3" --top-k 21
echo "token runs: all checks passed"
