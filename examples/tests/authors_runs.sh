#!/usr/bin/env bash
# examples/tests/authors_runs.sh EXE WORK TEXT [MPIEXEC]: ddl-text and the authors' model folders
# (docs/authors_models.md). A tiny byte model trained on TEXT is exported (--export-authors); --init-from
# that folder evaluates to the checkpoint's test loss, samples the checkpoint's text, and trains from its
# weights (with --lr 0 the final test loss is the folder's); with MPIEXEC two ranks train from it too.
# Model options with --init-from, --init-from with --resume, a missing folder, a folder of tokens given
# bytes and the export of a model their code lacks (write_only) are refused, each named.
set -euo pipefail
exe=$1 work=$2 text=$3 mpiexec=${4:-}
rm -rf "$work"
mkdir -p "$work"
fail() {
  echo "authors runs: $*"
  exit 1
}
tiny=(--batch 8 --steps 10 --epochs 1 --threads 1 --sample-tokens 5)
out=$("$exe" --data "$text" --variant dv1 --width 16 --depth 1 --heads 2 --context 16 "${tiny[@]}" --out "$work/run" 2>&1) ||
  fail "training failed: $out"
out=$("$exe" --out "$work/run" --export-authors "$work/authors" 2>&1) || fail "--export-authors failed: $out"
echo "$out" | grep -q "the authors' dv1 model" || fail "--export-authors: $out"
[ -f "$work/authors/model.safetensors" ] || fail "no model.safetensors in $work/authors"
grep -q '"vocab_size": 256' "$work/authors/config.json" || fail "config.json: $(cat "$work/authors/config.json")"

loss() { grep -oE "test loss [0-9.]+ nats, [0-9.]+ bits per byte" <<<"$1" | head -1; }
ref=$("$exe" --data "$text" --out "$work/run" --eval-only 2>&1) || fail "--eval-only failed: $ref"
got=$("$exe" --data "$text" --init-from "$work/authors" --out "$work/eval" --eval-only 2>&1) ||
  fail "--init-from --eval-only failed: $got"
[ -n "$(loss "$ref")" ] && [ "$(loss "$ref")" = "$(loss "$got")" ] || fail "test loss differs: '$ref' vs '$got'"

ref=$("$exe" --out "$work/run" --generate "The " --sample-tokens 30 2>&1) || fail "--generate failed: $ref"
got=$("$exe" --init-from "$work/authors" --out "$work/gen" --generate "The " --sample-tokens 30 2>&1) ||
  fail "--init-from --generate failed: $got"
[ "$(tail -1 <<<"$ref")" = "$(tail -1 <<<"$got")" ] || fail "samples differ: '$ref' vs '$got'"

ref_eval=$("$exe" --data "$text" --out "$work/run" --eval-only 2>&1)
cont=$("$exe" --data "$text" --init-from "$work/authors" --out "$work/cont" "${tiny[@]}" --lr 0 2>&1) ||
  fail "--init-from training failed: $cont"
grep -q "^final .*final test loss $(loss "$ref_eval" | sed 's/test loss //; s/ nats,.*//') nats" <<<"$cont" ||
  fail "--lr 0 from the folder does not keep its test loss ($(loss "$ref_eval")): $cont"
cont=$("$exe" --data "$text" --init-from "$work/authors" --out "$work/cont2" "${tiny[@]}" 2>&1) ||
  fail "--init-from training failed: $cont"
grep -q "^final validation loss" <<<"$cont" || fail "--init-from training: $cont"
res=$("$exe" --data "$text" --out "$work/cont2" --resume --epochs 2 --threads 1 --sample-tokens 5 2>&1) ||
  fail "--resume of a run started with --init-from failed: $res"
grep -q "^resumed .* at epoch 1" <<<"$res" || fail "--resume: $res"

if [ -n "$mpiexec" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  mpi=$(timeout 300 "$mpiexec" --oversubscribe -n 2 "$exe" --data "$text" --init-from "$work/authors" \
    --out "$work/mpi" "${tiny[@]}" --lr 0 2>&1) || fail "--init-from on 2 ranks failed: $mpi"
  grep -q "^final .*final test loss $(loss "$ref_eval" | sed 's/test loss //; s/ nats,.*//') nats" <<<"$mpi" ||
    fail "--lr 0 from the folder on 2 ranks does not keep its test loss: $mpi"
  grep -q "2 ranks (MPI" <<<"$mpi" || fail "not 2 MPI ranks: $mpi"
fi

refused() {  # refused CODE PATTERN ARGS...: exit CODE and a message matching PATTERN
  local code=$1 pattern=$2 rc=0 msg
  shift 2
  msg=$("$exe" "$@" 2>&1) || rc=$?
  [ "$rc" -eq "$code" ] && grep -q -- "$pattern" <<<"$msg" || fail "$*: exit $rc (expected $code): $msg"
}
refused 1 "--width with --init-from" --data "$text" --init-from "$work/authors" --width 32 --out "$work/x"
refused 1 "give one of them" --data "$text" --init-from "$work/authors" --resume --out "$work/x"
refused 2 "nothere/config.json: cannot open for reading (--init-from)" --init-from "$work/nothere" --out "$work/x"
"$exe" --data "$text" --residual write_only --width 16 --depth 1 --heads 2 --context 16 "${tiny[@]}" \
  --out "$work/wo" >/dev/null 2>&1 || fail "write_only training failed"
refused 1 "residual 'write_only' has no counterpart in the authors' models" --out "$work/wo" --export-authors "$work/wo-a"
[ ! -e "$work/wo-a/model.safetensors" ] || fail "a refused export wrote $work/wo-a/model.safetensors"
echo "authors runs: all checks passed"
