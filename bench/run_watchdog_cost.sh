#!/usr/bin/env bash
# What the MPI watchdog (--mpi-timeout, docs/runs.md) costs a training step: ddl-text on 2 ranks x 1
# thread, a small model whose step is short (so one collective call per step weighs most), with the
# watchdog off (--mpi-timeout 0) and on (the default 600 s), interleaved over R rounds. Prints the
# throughput of each run and the medians; the two must agree within the noise.
#   bench/run_watchdog_cost.sh [rounds] [build-dir]      (ddl-text built with MPI in build-dir/examples)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-4}
exe=${2:-build}/examples/ddl-text
[ -x "$exe" ] || { echo "run_watchdog_cost.sh: $exe is missing (build ddl-text with libopenmpi-dev present)"; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat README.md docs/*.md >"$work/text"  # about 160 KB of text
args=(--width 64 --depth 2 --heads 2 --context 64 --batch 8 --threads 1 --epochs 1 --steps 800 --eval-bytes 512
      --sample-tokens 8 --data "$work/text")
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); ddl-text ${args[*]:0:16}, 2 ranks"
declare -A runs
for r in $(seq 1 "$rounds"); do
  for timeout in 0 600; do
    rm -rf "$work/out"
    mpirun --oversubscribe -np 2 "$exe" "${args[@]}" --out "$work/out" --mpi-timeout "$timeout" >"$work/log" 2>&1
    tps=$(tr '\r' '\n' <"$work/log" | grep -a -o '[0-9]* tok/s' | tail -n 1 | cut -d' ' -f1)
    echo "round $r --mpi-timeout $timeout: $tps tok/s"
    runs[$timeout]+="$tps "
  done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
echo "median: watchdog off $(median "${runs[0]}") tok/s, on $(median "${runs[600]}") tok/s"
