#!/usr/bin/env bash
# ddl-ablation --net lm on a small file: a tiny DeltaLM per residual kind and seed (2 seeds); ablation.md
# and runs.csv are written with the three kinds, the report compares the validation loss (lower is
# better: its "b better" counts are the seeds where b's loss is below a's in runs.csv), the report names
# the products' precision (--precision bf16-emulated runs anywhere; an unknown value is refused before
# anything is written), and a missing text file is refused.
#   ablation_lm.sh PROGRAM WORK_DIR DATA_FILE
set -uo pipefail
exe=$1 work=$2 data=$3
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
out=$("$exe" --net lm --data "$data" --width 16 --depth 1 --heads 2 --context 16 --batch 4 --steps 5 --epochs 2 \
  --seeds 2 --eval-bytes 512 --threads 1 --out "$work/run" 2>&1)
status=$?
echo "$out" | tail -4
[ "$status" -eq 0 ] || fail "ddl-ablation --net lm exited $status"
md=$work/run/ablation.md csv=$work/run/runs.csv
[ -f "$md" ] || fail "no ablation.md"
[ -f "$csv" ] || fail "no runs.csv"
[ "$(wc -l <"$csv")" -eq 7 ] || fail "runs.csv does not have a header and 6 runs"
for kind in additive delta write_only; do
  [ "$(grep -c "^$kind,1," "$csv")" -eq 2 ] || fail "runs.csv does not hold 2 seeds of $kind"
  grep -Eq "^\| $kind \| 1 \| [0-9]+\.[0-9]{4} ± [0-9.]+ \| [0-9.]+ ± " "$md" || fail "ablation.md has no loss row for $kind"
done
grep -q "^# Residual ablation: DeltaLM" "$md" || fail "ablation.md does not name the DeltaLM"
grep -q "Paired comparisons on validation loss" "$md" || fail "ablation.md does not compare the validation loss"
# val_loss is column 5 of runs.csv; seeds in the same order for every kind.
for pair in "delta additive" "write_only additive" "delta write_only"; do
  set -- $pair
  lower=$(awk -F, -v b="$1" -v a="$2" '$1 == a { la[$3] = $5 } $1 == b { lb[$3] = $5 }
    END { n = 0; for (s in la) if (lb[s] < la[s]) n++; print n }' "$csv")
  row=$(grep -F "| 1 | $1 − $2 |" "$md") || fail "no paired row $1 − $2"
  better=$(echo "$row" | awk -F'|' '{ split($8, c, "/"); gsub(/ /, "", c[1]); print c[1] }')
  [ "$better" = "$lower" ] || fail "$1 − $2: the report says $1 is better in '$better' seeds, runs.csv in $lower"
done
"$exe" --net lm --data "$work/no-such-file" --out "$work/none" >"$work/missing.txt" 2>&1
status=$?
[ "$status" -eq 1 ] && grep -q "no-such-file" "$work/missing.txt" || fail "missing data: exit $status, $(cat "$work/missing.txt")"
grep -q "products in float" "$md" || fail "ablation.md does not say the products ran in float"
# --precision: the emulated bf16 numerics run anywhere and the report says so; an unknown value is
# refused before anything is written.
"$exe" --net lm --data "$data" --width 16 --depth 1 --heads 2 --context 16 --batch 4 --steps 2 --epochs 1 \
  --seeds 1 --eval-bytes 256 --threads 1 --precision bf16-emulated --out "$work/bf16" >"$work/bf16.txt" 2>&1
status=$?
[ "$status" -eq 0 ] && grep -q "products in bf16-emulated" "$work/bf16/ablation.md" ||
  fail "--precision bf16-emulated: exit $status, $(tail -2 "$work/bf16.txt")"
"$exe" --net lm --data "$data" --precision half --out "$work/half" >"$work/half.txt" 2>&1
status=$?
[ "$status" -eq 1 ] && grep -q -- "--precision" "$work/half.txt" && [ ! -e "$work/half" ] ||
  fail "--precision half: exit $status, $(cat "$work/half.txt")"
finish "ablation lm"
