#!/usr/bin/env bash
# DeltaLM at the paper's size (124M parameters: cc-ec and additive) against PyTorch, one interleaved round:
# ddl's training step, PyTorch's, ddl's cached generation, PyTorch's (bench/bench_lm_scale.cpp and
# bench/pytorch/bench_lm.py at the same size; PyTorch eager: TorchScript was slower on the language model here).
# ddl's step runs in float and, where the CPU has native bf16 products, under its bf16 policy (the bf16 rows say
# why not elsewhere); PyTorch's in eager float and, on such a CPU, in bf16 autocast too.
# About 10 minutes on 2 cores (15 with bf16); run it on a quiet machine.
#   bench/run_lm_scale.sh [build-dir] [threads]     (defaults: build-bench, 2)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build-bench}" && pwd)
threads=${2:-2}
exe="$build/bench/ddl_bench_lm_scale"
[ -x "$exe" ] || { echo "run_lm_scale.sh: $exe not found; build it first (tools/run-bench.sh does)" >&2; exit 1; }
export OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive
modes=eager
grep -qw avx512_bf16 /proc/cpuinfo && modes=eager,autocast
size=(--d 768 --depth 12 --heads 6 --length 1024 --batch 1 --vocab 50304 --variants cc-ec,dv1-additive
  --no-verify --threads "$threads" --modes "$modes")
stamp() { echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC') load $(cut -d' ' -f1-3 /proc/loadavg)"; }
stamp
echo "# tree $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'), $threads threads"
"$exe" --benchmark_filter=BM_ScaleStep 2>&1 | grep '^BM_'
/usr/bin/python3 "$here/pytorch/bench_lm.py" "${size[@]}" --repeats 3 --warmup 1 | grep '^pytorch'
stamp
"$exe" --benchmark_filter=BM_ScaleGenerate 2>&1 | grep '^BM_'
/usr/bin/python3 "$here/pytorch/bench_lm.py" "${size[@]}" --generate 960 | grep '^pytorch'
stamp
