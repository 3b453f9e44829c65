#!/usr/bin/env bash
# --beta-max and --clamp-beta (docs/runs.md): a cap outside (0, 2] is refused by every training program
# before anything is written; a capped run starts its gate at B/2, stores beta_max in its checkpoint and
# keeps it (another --beta-max on --eval-only / --resume is refused); a default run stores no beta_max key.
# --eval-only --clamp-beta evaluates unclamped, all named blocks and each alone, prints the table, writes
# clamp_beta.csv (never replacing a file: the next one is clamp_beta.2.csv); bad specs are refused before
# anything runs. ddl-text: the clamp on a DeltaLM, and --export-authors refuses a capped model.
#   beta_max.sh MNIST CIFAR TEXT ABLATION TINY_IDX_DIR TEXT_FILE WORK_DIR
set -uo pipefail
mnist=$1 cifar=$2 text=$3 ablation=$4 idx=$5 textfile=$6 work=$7
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# refused STATUS 'TEXT' PROGRAM ARGS...: PROGRAM ARGS exits with STATUS and prints TEXT (fixed string).
refused() {
  local status=$1 text=$2 exe=$3
  shift 3
  local out rc
  out=$("$exe" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$status" ] || ! grep -qF -- "$text" <<<"$out"; then
    fail "$(basename "$exe") $* -> exit $rc (expected $status), output: $(tail -3 <<<"$out") (expected: $text)"
  else
    echo "ok: $(basename "$exe") $* -> $rc: $(grep -F -- "$text" <<<"$out" | head -1)"
  fi
}

# 1. A cap outside (0, 2], or not a number: refused by every program before any folder is made.
for exe in "$mnist" "$cifar" "$text" "$ablation"; do
  for bad in 0 -1 2.5 nan inf abc ""; do
    refused 1 "--beta-max expects a number in (0, 2]" "$exe" --data "$work/no-data" --beta-max "$bad" \
      --out "$work/refused"
  done
done
[ ! -e "$work/refused" ] || fail "a refused --beta-max left $work/refused behind"
refused 1 "--residual additive has no gate" "$mnist" --data "$idx" --residual additive --beta-max 1 --out "$work/refused"
[ ! -e "$work/refused" ] || fail "a refused --beta-max with --residual additive left $work/refused behind"

# 2. A capped run and a default run of ddl-mnist (3 blocks).
small=(--data "$idx" --width 16 --depth 3 --hidden 32 --batch 32 --lr 0.005 --epochs 1 --threads 1)
out=$("$mnist" "${small[@]}" --beta-max 1 --out "$work/capped" 2>&1) || fail "training with --beta-max 1 failed: $out"
grep -qF '"beta_max":"1"' <<<"$out" || fail "the config of --beta-max 1 does not hold beta_max 1: $(grep config <<<"$out")"
grep -qF '"beta0":"0.5"' <<<"$out" || fail "the gate of --beta-max 1 does not start at 0.5: $(grep config <<<"$out")"
out=$("$mnist" "${small[@]}" --out "$work/default" 2>&1) || fail "default training failed: $out"
grep -q '"beta_max"' <<<"$out" && fail "a default run writes beta_max: $(grep config <<<"$out")"
grep -qF '"beta0":"1"' <<<"$out" || fail "a default run's gate does not start at 1: $(grep config <<<"$out")"

# The saved cap is the model's: --eval-only keeps it; another --beta-max is refused, naming both.
out=$("$mnist" --data "$idx" --out "$work/capped" --eval-only 2>&1) || fail "--eval-only of the capped run failed: $out"
grep -qF '"beta_max":"1"' <<<"$out" || fail "--eval-only of the capped run lost its cap: $(grep config <<<"$out")"
refused 1 "--beta-max 2 differs from the saved model's beta_max 1" "$mnist" --data "$idx" --out "$work/capped" \
  --eval-only --beta-max 2
refused 1 "--beta-max 2 differs from the saved model's beta_max 1" "$mnist" "${small[@]}" --out "$work/capped" \
  --resume --beta-max 2
refused 1 "--beta-max 1 differs from the saved model's beta_max 2" "$mnist" --data "$idx" --out "$work/default" \
  --eval-only --beta-max 1
"$mnist" --data "$idx" --out "$work/default" --eval-only --beta-max 2 >/dev/null 2>&1 ||
  fail "--eval-only --beta-max 2 of a default run (no beta_max key) was refused"

# 3. --clamp-beta on the default run.
plain=$("$mnist" --data "$idx" --out "$work/default" --eval-only 2>&1) || fail "--eval-only failed: $plain"
accuracy=$(sed -nE 's/.*test accuracy ([0-9.]+)%.*/\1/p' <<<"$plain")
out=$("$mnist" --data "$idx" --out "$work/default" --eval-only --clamp-beta 0-2:1.0 2>&1) ||
  fail "--clamp-beta 0-2:1.0 failed: $out"
echo "$out" | tail -7
for row in none "all 0 1 2" "block 0" "block 1" "block 2"; do
  grep -qE "^  $row +[0-9]" <<<"$out" || fail "the clamp table has no row '$row'"
done
grep -qE "^  none +[0-9.]+ +$accuracy%" <<<"$out" || fail "the unclamped row is not the plain --eval-only accuracy $accuracy%"
csv=$work/default/clamp_beta.csv
[ -f "$csv" ] || fail "no clamp_beta.csv"
[ "$(wc -l <"$csv")" -eq 6 ] || fail "clamp_beta.csv does not have a header and 5 rows: $(cat "$csv")"
head -1 "$csv" | grep -qx "clamped,blocks,c,loss,accuracy,loss_change,accuracy_change,count" || fail "clamp_beta.csv header: $(head -1 "$csv")"
sed -n 2p "$csv" | grep -q "^none,,,.*,0,0," || fail "the unclamped row does not change: $(sed -n 2p "$csv")"
# A clamp at 2 never binds (beta < 2): every change is 0 exactly. A clamp of 1e-9 erases every gate: the score moves.
before=$(sha256sum "$csv")
"$mnist" --data "$idx" --out "$work/default" --eval-only --clamp-beta 0,2:2 >/dev/null 2>&1 || fail "--clamp-beta 0,2:2 failed"
[ "$(sha256sum "$csv")" = "$before" ] || fail "a second clamp replaced clamp_beta.csv"
[ -f "$work/default/clamp_beta.2.csv" ] || fail "the second clamp did not write clamp_beta.2.csv"
awk -F, 'NR > 1 && ($6 != 0 || $7 != 0) { bad = 1 } END { exit bad }' "$work/default/clamp_beta.2.csv" ||
  fail "a clamp at 2 changed the score: $(cat "$work/default/clamp_beta.2.csv")"
echo "a user's file" >"$work/default/clamp_beta.3.csv"
"$mnist" --data "$idx" --out "$work/default" --eval-only --clamp-beta 1:1e-9 >/dev/null 2>&1 || fail "--clamp-beta 1:1e-9 failed"
[ "$(cat "$work/default/clamp_beta.3.csv")" = "a user's file" ] || fail "a user's clamp_beta.3.csv was replaced"
[ -f "$work/default/clamp_beta.4.csv" ] || fail "the third clamp did not write clamp_beta.4.csv"
awk -F, 'NR == 3 && $6 == 0 { exit 1 }' "$work/default/clamp_beta.4.csv" ||
  fail "a clamp of 1e-9 in block 1 left the loss unchanged: $(cat "$work/default/clamp_beta.4.csv")"

# Bad clamps: refused before anything is evaluated or written.
ev=(--data "$idx" --out "$work/default" --eval-only)
refused 1 "--clamp-beta 3:1: block 3 does not exist (the model has 3 blocks, 0 to 2)" "$mnist" "${ev[@]}" --clamp-beta 3:1
refused 1 "--clamp-beta 0-5:1: block 3 does not exist" "$mnist" "${ev[@]}" --clamp-beta 0-5:1
refused 1 "C must be > 0 (beta is positive), got 0" "$mnist" "${ev[@]}" --clamp-beta 0:0
refused 1 "--clamp-beta expects BLOCKS:C (e.g. 0-2:1.0" "$mnist" "${ev[@]}" --clamp-beta 0:-1
refused 1 "--clamp-beta expects BLOCKS:C (e.g. 0-2:1.0" "$mnist" "${ev[@]}" --clamp-beta 0:nan
refused 1 "no ':' before the clamp C" "$mnist" "${ev[@]}" --clamp-beta 0-2
refused 1 "the range 2-0 runs backwards" "$mnist" "${ev[@]}" --clamp-beta 2-0:1
refused 1 "block 0 is named twice" "$mnist" "${ev[@]}" --clamp-beta 0,0-1:1
refused 1 "an empty block index" "$mnist" "${ev[@]}" --clamp-beta 0,:1
refused 1 "--clamp-beta expects BLOCKS:C" "$mnist" "${ev[@]}" --clamp-beta x:1
refused 1 "--clamp-beta 0:1 with --audit" "$mnist" "${ev[@]}" --clamp-beta 0:1 --audit
refused 1 "--clamp-beta 0:1 is an evaluation intervention: give it with --eval-only" "$mnist" "${small[@]}" \
  --clamp-beta 0:1 --out "$work/refused"
[ ! -e "$work/refused" ] || fail "a refused --clamp-beta left $work/refused behind"
"$mnist" "${small[@]}" --residual additive --out "$work/additive" >/dev/null 2>&1 || fail "additive training failed"
refused 1 "--clamp-beta 0:1: the model's residual is additive (X + h): it has no gate to clamp" "$mnist" \
  --data "$idx" --out "$work/additive" --eval-only --clamp-beta 0:1
[ "$(ls "$work/default" | grep -c '^clamp_beta')" -eq 4 ] || fail "a refused clamp wrote a file: $(ls "$work/default")"
[ "$(ls "$work/additive" | grep -c '^clamp_beta')" -eq 0 ] || fail "a refused clamp wrote into the additive run"

# 4. ddl-text: a capped DeltaLM of 2 blocks, its clamp per block (both sublayers), no authors' export.
lm=(--data "$textfile" --width 16 --depth 2 --heads 2 --context 16 --batch 4 --steps 4 --epochs 1 --lr 0.01
  --eval-bytes 256 --sample-tokens 8 --threads 1 --variant dv1)
out=$("$text" "${lm[@]}" --beta-max 1.5 --out "$work/lm" 2>&1) || fail "ddl-text --beta-max 1.5 failed: $out"
out=$("$text" --data "$textfile" --out "$work/lm" --eval-only --clamp-beta 0-1:0.5 2>&1) ||
  fail "ddl-text --clamp-beta 0-1:0.5 failed: $out"
for row in none "all 0 1" "block 0" "block 1"; do
  grep -qE "^  $row +[0-9]" <<<"$out" || fail "ddl-text's clamp table has no row '$row': $out"
done
[ "$(wc -l <"$work/lm/clamp_beta.csv")" -eq 5 ] || fail "ddl-text's clamp_beta.csv does not have 4 rows"
refused 1 "--clamp-beta 2:1: block 2 does not exist (the model has 2 blocks, 0 to 1)" "$text" --data "$textfile" \
  --out "$work/lm" --eval-only --clamp-beta 2:1
refused 1 "--beta-max 2 differs from the saved model's beta_max 1.5" "$text" --data "$textfile" --out "$work/lm" \
  --eval-only --beta-max 2
refused 1 "a gate cap betaMax other than 2 has no counterpart in the authors' models (betaMax 1.5" "$text" \
  --out "$work/lm" --export-authors "$work/authors"
[ ! -e "$work/authors" ] || fail "a refused export left $work/authors behind"

finish "beta max"
