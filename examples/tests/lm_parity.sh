#!/usr/bin/env bash
# ddl-text against its PyTorch twin (tools/torch_train_lm.py): for a few variants, a tiny DeltaLM trained
# K steps by ddl and by PyTorch from ddl's step-0 weights (a run at --lr 0, whose one step changes nothing)
# with the same batches, loss, schedule (warmup + cosine), clipping and AdamW must end with the same
# parameters and validation loss. Exits 77 (skipped) without python3-torch.
#   lm_parity.sh PROGRAM WORK_DIR DATA_FILE [PYTHON]
set -uo pipefail
exe=$1 work=$2 data=$3 python=${4:-/usr/bin/python3}
script="$(cd "$(dirname "$0")/../.." && pwd)/tools/torch_train_lm.py"
if ! "$python" -c "import torch" >/dev/null 2>&1; then
  echo "lm parity: skipped ($python cannot import torch)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
for variant in dv1 cc-ec tc; do
  tiny=(--data "$data" --variant "$variant" --width 16 --depth 1 --heads 2 --context 16 --batch 4 --seed 3
    --eval-bytes 512 --sample-tokens 1 --threads 1)
  "$exe" "${tiny[@]}" --steps 1 --epochs 1 --lr 0 --out "$work/$variant-init" >"$work/$variant-init.log" 2>&1 ||
    fail "$variant: the step-0 run failed: $(tail -3 "$work/$variant-init.log")"
  "$exe" "${tiny[@]}" --steps 3 --epochs 2 --lr 0.01 --warmup 2 --clip 0.5 --out "$work/$variant" \
    >"$work/$variant.log" 2>&1 || fail "$variant: the ddl run failed: $(tail -3 "$work/$variant.log")"
  out=$("$python" "$script" --run "$work/$variant" --init "$work/$variant-init/checkpoint.safetensors" \
    --eval-bytes 512 --loss-tol 1e-4 --param-tol 1e-4 --quiet 2>&1)
  status=$?
  echo "$out" | tail -4
  [ "$status" -eq 0 ] || fail "$variant: PyTorch does not reproduce ddl's training (exit $status)"
done
finish "lm parity"
