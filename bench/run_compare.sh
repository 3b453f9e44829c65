#!/bin/sh
# Runs ddl's DeltaNet step benchmark and the PyTorch reference back to back on the same thread count
# and prints the issue-3 ratios.
#   bench/run_compare.sh [build-dir] [threads] [bench_deltanet.py options...]   (defaults: build-bench, 2)
# Build first: cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release && cmake --build build-bench --target ddl_bench_net
# ddl runs with the OpenMP defaults; PyTorch with OMP_WAIT_POLICY=passive, which it needs on 2 shared cores.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build-bench}
threads=${2:-2}
shift $(($# < 2 ? $# : 2))
exe="$build/bench/ddl_bench_net"
[ -x "$exe" ] || { echo "run_compare.sh: $exe not found; build the ddl_bench_net target first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load average: $(cut -d' ' -f1-3 /proc/loadavg), threads $threads"
OMP_NUM_THREADS=$threads "$exe" --benchmark_filter='BM_Gemm/|BM_NetStep' --benchmark_out="$tmp/ddl.json" \
  --benchmark_out_format=json >"$tmp/ddl.txt" 2>"$tmp/ddl.err"
grep -E '^BM_' "$tmp/ddl.txt"
OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive /usr/bin/python3 "$here/pytorch/bench_deltanet.py" \
  --threads "$threads" "$@" | tee "$tmp/torch.txt"

paired() { jq -r ".benchmarks[] | select(.name | startswith(\"BM_NetStep_Paired\")) | .$1" "$tmp/ddl.json"; }
torch_ms() { awk -v m="$1" -v r="$2" '$1 == "pytorch" && $2 == m && $3 == r { sub("median_ms=", "", $4); print $4 }' "$tmp/torch.txt"; }
floor=$(paired floor_ms)
plain=$(paired plain_ms)
delta=$(paired delta_ms)
te=$(torch_ms eager delta)
ts=$(torch_ms script delta)
tpe=$(torch_ms eager plain)
tps=$(torch_ms script plain)
awk -v f="$floor" -v p="$plain" -v d="$delta" -v te="$te" -v ts="$ts" -v tpe="$tpe" -v tps="$tps" 'BEGIN {
  best = te < ts ? te : ts; pbest = tpe < tps ? tpe : tps
  printf "ddl: GEMM floor %.2f ms, plain step %.2f ms, delta step %.2f ms (medians, interleaved)\n", f, p, d
  printf "pytorch delta step: eager %.2f ms, script %.2f ms; plain: eager %.2f ms, script %.2f ms\n", te, ts, tpe, tps
  printf "delta step / GEMM floor      = %.2f   (goal <= 1.3)\n", d / f
  printf "pytorch best / ddl, delta    = %.2f   (goal >= 2)\n", best / d
  printf "pytorch best / ddl, plain    = %.2f\n", pbest / p
  printf "ddl delta / ddl plain        = %.2f\n", d / p
}'
