#!/usr/bin/env bash
# examples/tests/authors_runs.sh EXE WORK TEXT [MPIEXEC]: ddl-text and the authors' model folders
# (docs/authors_models.md). A tiny byte model trained on TEXT is exported (--export-authors); --init-from
# that folder evaluates to the checkpoint's test loss, samples the checkpoint's text, and trains from its
# weights (with --lr 0 the final test loss is the folder's); with MPIEXEC two ranks train from it too.
# Model options with --init-from, --init-from with --resume, a missing folder, a folder of tokens given
# bytes and the export of a model their code lacks (write_only) are refused, each named; an export refuses
# the options it would ignore and replaces a model only with --overwrite, never the run's --init-from
# folder; a model whose heads x head_dim is not its width resumes, evaluates, samples and exports.
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

# --export-authors: options it would ignore are refused by name; a folder that holds a model is replaced only
# with --overwrite (the folder's other files stay, nothing is left beside it), never the run's --init-from
# folder, under any name, nor --out itself.
for opt in --resume "--epochs 3" "--lr 0.1" "--init-from $work/authors" "--data $text" "--threads 2"; do
  refused 1 "^ddl-text: ${opt%% *} with --export-authors: the export writes the checkpoint in --out as it is" \
    --out "$work/run" --export-authors "$work/x2" $opt
done
[ ! -e "$work/x2" ] || fail "a refused export created $work/x2"
refused 2 "authors: already holds a model (config.json, ...); replacing it needs overwrite" \
  --out "$work/run" --export-authors "$work/authors"
cp -r "$work/authors" "$work/authors2"
echo '{}' >"$work/authors2/tokenizer.json"
out=$("$exe" --out "$work/run" --export-authors "$work/authors2" --overwrite 2>&1) || fail "--overwrite failed: $out"
[ "$(ls "$work/authors2" | tr '\n' ' ')" = "config.json model.safetensors tokenizer.json " ] ||
  fail "--overwrite left: $(ls "$work/authors2")"
[ -z "$(ls -d "$work"/authors2.* 2>/dev/null)" ] || fail "left beside the folder: $(ls -d "$work"/authors2.*)"
sum=$(cat "$work/authors"/* | cksum)
ln -s authors "$work/alias"
for target in "$work/authors" "$work/alias" "$work/authors/"; do  # cont2 started from it and was resumed since
  refused 1 "is the folder this run started from (--init-from $work/authors)" \
    --out "$work/cont2" --export-authors "$target" --overwrite
done
mv "$work/authors" "$work/moved"
refused 1 "is the folder this run started from" --out "$work/cont2" --export-authors "$work/moved" --overwrite
mv "$work/moved" "$work/authors"
[ "$(cat "$work/authors"/* | cksum)" = "$sum" ] || fail "the --init-from folder changed"
refused 1 "is the run folder --out" --out "$work/run" --export-authors "$work/run" --overwrite

# A model whose heads x head_dim is not its width (their head_dim defaults to 128), here the fixture of 2
# heads of 4 in width 12 over 31 token ids: a run from it saves a checkpoint that resumes, evaluates, samples
# and exports.
fixture=$(cd "$(dirname "$0")/../../tests/fixtures/authors/dv1+attn" && pwd)
perl -e 'print pack("v*", map { ($_ * 7 + 3) % 31 } 0 .. 3999)' >"$work/ids31.bin"
# Three files: ddl-text refuses a file that is in two of the sets.
cp "$work/ids31.bin" "$work/val31.bin"
cp "$work/ids31.bin" "$work/test31.bin"
toks=(--tokens "$work/ids31.bin" --val-tokens "$work/val31.bin" --test-tokens "$work/test31.bin")
small=(--batch 2 --steps 2 --threads 1 --sample-tokens 3 --top-k 5)  # top-k at most the 31 ids
out=$("$exe" --init-from "$fixture" "${toks[@]}" --out "$work/hd" "${small[@]}" --epochs 1 2>&1) ||
  fail "--init-from head_dim 4 failed: $out"
out=$("$exe" "${toks[@]}" --out "$work/hd" "${small[@]}" --resume --epochs 2 2>&1) || fail "--resume (head_dim 4): $out"
grep -q "^resumed .* at epoch 1" <<<"$out" || fail "--resume (head_dim 4): $out"
out=$("$exe" "${toks[@]}" --out "$work/hd" --eval-only 2>&1) || fail "--eval-only (head_dim 4): $out"
out=$("$exe" --out "$work/hd" --generate "1 2" --sample-tokens 3 --top-k 5 2>&1) || fail "--generate (head_dim 4): $out"
out=$("$exe" --out "$work/hd" --export-authors "$work/hd-authors" 2>&1) || fail "--export-authors (head_dim 4): $out"
grep -q '"head_dim": 4' "$work/hd-authors/config.json" || fail "head_dim: $(cat "$work/hd-authors/config.json")"
echo "authors runs: all checks passed"
