#!/usr/bin/env bash
# ddl-claim end to end on a tiny setting (--smoke: one seed, two epochs, small sets and net), its report
# and CSV files; the protocol block of the default parameters is docs/claims.md's and carries its id,
# changed parameters do not; bad input is refused before training with nothing written.
#   claim_smoke.sh DDL_CLAIM CLAIMS_MD WORK_DIR
set -uo pipefail
exe=$1 claims=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ok() { echo "ok: $*"; }

# The default parameters print docs/claims.md's block, and its id.
awk '/^<!-- protocol:end -->/{f=0} f&&!/^```/{print} /^<!-- protocol:begin -->/{f=1}' "$claims" >"$work/doc_block.txt"
docId=$(grep -o 'Protocol id: `claims-[0-9]*-[0-9a-f]*`' "$claims" | grep -o 'claims-[0-9]*-[0-9a-f]*')
"$exe" --print-block >"$work/print_block.txt" 2>&1 || fail "--print-block exited $?"
if grep -v '^id: ' "$work/print_block.txt" | cmp -s - "$work/doc_block.txt"; then ok "the default block is docs/claims.md's"
else fail "the default block differs from docs/claims.md's:"; diff "$work/doc_block.txt" <(grep -v '^id: ' "$work/print_block.txt"); fi
grep -qx "id: $docId (the pre-registered protocol)" "$work/print_block.txt" && ok "its id is $docId" ||
  fail "the default parameters do not give the id $docId: $(grep '^id: ' "$work/print_block.txt")"
changed=$("$exe" --print-block --control-kinds delta_bmax2,delta_bmax1,additive 2>&1 | grep '^id: ')
[[ "$changed" == *"(not the protocol)" ]] && ok "--control-kinds: $changed" || fail "--control-kinds still claims the protocol: $changed"
changed=$("$exe" --print-block --epochs 39 2>&1 | grep '^id: ')
if [[ "$changed" == *"(not the protocol)" && "$changed" != *"$docId"* ]]; then ok "--epochs 39: $changed"
else fail "--epochs 39 still claims the protocol: $changed"; fi

# The smoke run: both forms, every kind, a classification and the regression task.
out="$work/smoke"
if "$exe" --smoke --task swap,householder --threads 2 --out "$out" >"$work/smoke.log" 2>&1; then ok "smoke run"
else fail "smoke run exited $?"; tail -5 "$work/smoke.log"; fi
report="$out/report.md"
for f in report.md runs.csv curves.csv selection.csv comparisons.csv gates.csv beta_hist.csv clamp.csv; do
  [ -s "$out/$f" ] || fail "no $f"
done
grep -q '^\*\*Not the pre-registered protocol\*\* (a --smoke run' "$report" && ok "the report says it is not the protocol" ||
  fail "the smoke report does not say it is not the protocol"
grep -q "$docId" "$report" && fail "the smoke report carries the protocol id $docId" || ok "no protocol id in the smoke report"
grep -q '^Block id: `claims-[0-9]*-[0-9a-f]\{16\}`$' "$report" && ok "the report names its block's id" || fail "no block id line"
grep -q '^Status: complete' "$report" && ok "complete" || fail "the report is not complete"
# 2 tasks x 8 (form, kind) pairs x (1 selection + 1 evaluation) runs
rows=$(($(wc -l <"$out/runs.csv") - 1))
[ "$rows" -eq 32 ] && ok "32 runs" || fail "runs.csv has $rows runs, expected 32"
for kind in delta_bmax2 delta_bmax1 write_only additive additive_wide additive_3x; do
  grep -q "^evaluation,swap,depth_as_time,$kind,1," "$out/runs.csv" || fail "no evaluation run of $kind"
done
grep -q '^evaluation,householder,control,additive,1,' "$out/runs.csv" || fail "no control-form run"
# additive_3x trains 3x the epochs; additive_wide is wider than 32 with more parameters than additive
awk -F, '$1=="evaluation" && $2=="swap" && $3=="depth_as_time" && $4=="additive_3x" {exit !($9==6)}' "$out/runs.csv" ||
  fail "additive_3x did not get 3x the epochs"
awk -F, '$1=="evaluation" && $2=="swap" && $3=="depth_as_time" && $4=="additive_wide" {exit !($7>32)}' "$out/runs.csv" ||
  fail "additive_wide is not wider than the others"
[ "$(grep -c ',1$' "$out/selection.csv")" -eq 16 ] && ok "one chosen rate per task, form and kind" ||
  fail "selection.csv does not mark one chosen rate per task, form and kind"
# 2 tasks x 5 depth-as-time comparisons + 2 tasks x 1 control comparison
[ "$(($(wc -l <"$out/comparisons.csv") - 1))" -eq 12 ] && ok "12 comparisons" || fail "comparisons.csv: expected 12 rows"
# Unsolved runs are censored alike for both kinds: where neither kind solved, every pair is a tie (also
# against additive_3x, whose budget is three times delta's).
awk -F, 'NR > 1 && $6 == 0 && $7 == 0 && $15 != $5 {bad = 1} END {exit bad}' "$out/comparisons.csv" &&
  ok "two unsolved runs tie in the sign test" || fail "unsolved pairs counted as wins: $(grep additive_3x "$out/comparisons.csv")"
grep -q '^evaluation,swap,depth_as_time,delta_bmax2,1,7,' "$out/gates.csv" && ok "gate audit of block 7" ||
  fail "gates.csv lacks swap's block 7"
[ "$(grep -c '^evaluation,swap,depth_as_time,delta_bmax2,1,0,' "$out/beta_hist.csv")" -eq 20 ] || fail "beta_hist.csv: not 20 bins"
grep -q '## The clamp intervention' "$report" || fail "no clamp section"
curves=$(grep -c '^evaluation,swap,depth_as_time,delta_bmax2,1,' "$out/curves.csv")
[ "$curves" -eq 2 ] && ok "a validation score per epoch" || fail "curves.csv: $curves epochs, expected 2"

# Two runs at once give the same runs, in the same order (every column but the seconds).
if "$exe" --smoke --task swap,householder --threads 1 --jobs 2 --out "$work/jobs2" >"$work/jobs2.log" 2>&1 &&
   cmp -s <(cut -d, -f1-15 "$out/runs.csv") <(cut -d, -f1-15 "$work/jobs2/runs.csv") &&
   cmp -s "$out/curves.csv" "$work/jobs2/curves.csv" && cmp -s "$out/gates.csv" "$work/jobs2/gates.csv"; then
  ok "--jobs 2 gives the runs of one job"
else fail "--jobs 2 differs from one job (or failed: $(tail -1 "$work/jobs2.log"))"; fi
# The depth-as-time net's other forms run: supervised at every step, one cell shared by the blocks.
if "$exe" --smoke --task parity --form depth_as_time --kinds delta_bmax2 --readout every_step --tied \
     --stop-when-solved no --out "$work/every" >"$work/every.log" 2>&1 &&
   grep -q 'model.readout = every_step' "$work/every/report.md" && grep -q 'model.tied = true' "$work/every/report.md"; then
  ok "--readout every_step --tied"
else fail "--readout every_step --tied: $(tail -2 "$work/every.log")"; fi

# Refusals before training: nothing written.
expectRefused() {
  local text=$1 dir=$2
  shift 2
  local msg rc
  msg=$("$exe" "$@" --out "$dir" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] && grep -qF -- "$text" <<<"$msg" && [ ! -e "$dir" ]; then ok "refused: $*"
  else fail "$* -> exit $rc, wrote $(ls "$dir" 2>/dev/null | wc -l) files: $msg"; fi
}
expectRefused "unknown task 'cups'" "$work/r1" --smoke --task cups
expectRefused "unknown kind 'delta'" "$work/r2" --smoke --task swap --kinds delta
expectRefused "fewer than train + validation + test" "$work/r3" --smoke --task parity --steps 4 --sizes 10,4,4
expectRefused "--form expects" "$work/r4" --smoke --task swap --form sideways
expectRefused "unknown readout 'sometimes'" "$work/r5" --smoke --task swap --readout sometimes
expectRefused "--stop-when-solved expects yes or no" "$work/r6" --smoke --task swap --stop-when-solved maybe
expectRefused "--control-kinds must include delta_bmax2" "$work/r7" --smoke --task swap --control-kinds additive,delta_bmax1
# a folder that holds anything is never written into
mkdir -p "$work/used" && echo keep >"$work/used/notes.txt"
msg=$("$exe" --smoke --task swap --out "$work/used" 2>&1)
if [ $? -ne 0 ] && grep -q "not an empty folder" <<<"$msg" && [ "$(ls "$work/used")" = notes.txt ]; then ok "a used folder is refused"
else fail "a used --out was not refused: $msg"; fi

finish "claim smoke"
