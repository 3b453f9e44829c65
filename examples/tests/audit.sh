#!/usr/bin/env bash
# --audit: after every epoch the program writes audit.csv and audit.json into --out, one row per gated
# block per epoch, with the measured |e_post|/|e_pre| (never "nan" for the delta kind, and the printed
# gate table shows it instead of "-"); with --eval-only the test evaluation's rows go to eval_audit.*.
# (Resume keeping earlier rows: tests/test_recorder.cpp.)
#   audit.sh PROGRAM WORK_DIR BLOCKS ARGS...   (ARGS: data and model options, without --epochs / --out)
set -uo pipefail
exe=$1 work=$2 blocks=$3
shift 3
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# column NAME FILE: the values of CSV column NAME, one per line
column() {
  awk -F, -v name="$1" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next } { print $c }' "$2"
}

# checkRows EPOCHS: audit.csv has BLOCKS x EPOCHS rows, epochs 1..EPOCHS, a measured error ratio equal
# to the mean |1 - beta rho| within 1e-3 (float training), and audit.json has as many rows.
checkRows() {
  local epochs=$1 csv=$work/audit.csv json=$work/audit.json
  [ -f "$csv" ] || { fail "no $csv"; return; }
  [ -f "$json" ] || { fail "no $json"; return; }
  local rows
  rows=$(($(wc -l <"$csv") - 1))
  [ "$rows" -eq $((blocks * epochs)) ] || fail "audit.csv has $rows rows, expected $((blocks * epochs))"
  [ "$(column epoch "$csv" | sort -un | tr '\n' ' ')" = "$(seq -s ' ' 1 "$epochs") " ] ||
    fail "audit.csv epochs are $(column epoch "$csv" | sort -un | tr '\n' ' ')"
  paste -d' ' <(column error_ratio_mean "$csv") <(column expected_ratio_mean "$csv") <(column error_ratio_tokens "$csv") |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if ($1 == "nan" || $3 == 0 || d > 1e-3) { bad = 1; print "row " NR ": " $0 } }
         END { exit bad }' || fail "a row without a measured error ratio equal to |1 - beta rho|"
  [ "$(grep -c '"epoch"' "$json")" -eq "$rows" ] || fail "audit.json rows differ from audit.csv"
  grep -q '"format": "ddl-audit"' "$json" || fail "audit.json has no format tag"
}

out=$("$exe" "$@" --epochs 2 --audit --out "$work" 2>&1) || fail "the first run failed: $(tail -3 <<<"$out")"
checkRows 2
# the printed gate table shows the measured ratio, not "-"
grep -E '^block [0-9]+ ' <<<"$out" | grep -qE ' - \(' && fail "the gate table still prints '-' for e_ratio"
grep -qE '^block 0 ' <<<"$out" || fail "no gate table printed"
"$exe" --help | grep -q -- "--audit" || fail "--help does not list --audit"

# --eval-only --audit: one row per block from the test evaluation, in eval_audit.csv / eval_audit.json,
# labelled with the checkpoint's epoch; the training run's audit.csv stays as it was.
trained=$(cat "$work/audit.csv")
out=$("$exe" "$@" --eval-only --audit --out "$work" 2>&1) || fail "--eval-only --audit failed: $(tail -3 <<<"$out")"
ecsv=$work/eval_audit.csv
if [ -f "$ecsv" ]; then
  [ "$(($(wc -l <"$ecsv") - 1))" -eq "$blocks" ] || fail "eval_audit.csv has $(($(wc -l <"$ecsv") - 1)) rows, expected $blocks"
  [ "$(column epoch "$ecsv" | sort -u)" = 2 ] || fail "eval_audit.csv rows are not labelled epoch 2"
  paste -d' ' <(column error_ratio_mean "$ecsv") <(column expected_ratio_mean "$ecsv") |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if ($1 == "nan" || d > 1e-3) bad = 1 } END { exit bad }' ||
    fail "eval_audit.csv: a row without a measured error ratio equal to |1 - beta rho|"
else
  fail "no $ecsv"
fi
[ "$(grep -c '"epoch"' "$work/eval_audit.json" 2>/dev/null)" = "$blocks" ] || fail "eval_audit.json does not have $blocks rows"
[ "$(cat "$work/audit.csv")" = "$trained" ] || fail "--eval-only --audit changed the training run's audit.csv"

finish "audit"
