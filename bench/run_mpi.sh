#!/usr/bin/env bash
# Data-parallel step: 1 rank x 2 threads against 2 ranks x 1 thread, interleaved (one run of each per
# round, R rounds), then the gradient bucket size on 2 ranks. Each line is one run of
# build-bench/bench/ddl_mpi_step (median and minimum over its own rounds); compare lines of the same round.
#   bench/run_mpi.sh [rounds] [build-dir]           ddl-cifar's net: shared memory and TCP on loopback
#   bench/run_mpi.sh --lm124 [rounds] [build-dir]   the 124M DeltaLM (cc-ec), one sequence per rank: 2 ranks
#                                                   without and with overlap; buckets of 4, 32, 64 MiB
# (tools/run-bench.sh builds build-bench.) A 124M rank holds about 7 GB: every such run takes the lock
# /tmp/ddl-big.lock (flock), so that big jobs on this machine run one at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
lm=0
if [ "${1:-}" = "--lm124" ]; then lm=1; shift; fi
rounds=${1:-3}
exe=${2:-build-bench}/bench/ddl_mpi_step
[ -x "$exe" ] || { echo "run_mpi.sh: $exe is missing: build it with tools/run-bench.sh (needs libopenmpi-dev)"; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
stamp() { echo "# $(date -u '+%H:%M:%S UTC') load $(cut -d' ' -f1-3 /proc/loadavg)"; }
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), tree $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
if [ "$lm" = 1 ]; then
  run() { stamp; flock /tmp/ddl-big.lock "$@" --model lm124 --variant cc-ec --warmup 1 --steps 1 --rounds 3 | sed "s/^/  /"; }
  for r in $(seq 1 "$rounds"); do
    echo "round $r"
    run "$exe" --threads 2
    run mpirun -np 2 --oversubscribe "$exe" --threads 1 --overlap off
    run mpirun -np 2 --oversubscribe "$exe" --threads 1 --overlap on
  done
  echo "bucket size, 2 ranks x 1 thread, shared memory, overlap off / on"
  for b in 33554432 67108864; do
    run mpirun -np 2 --oversubscribe "$exe" --threads 1 --bucket "$b" --overlap off
    run mpirun -np 2 --oversubscribe "$exe" --threads 1 --bucket "$b" --overlap on
  done
  stamp
  exit 0
fi
run() { "$@" --steps 20 --rounds 5 | sed "s/^/  /"; }
for r in $(seq 1 "$rounds"); do
  echo "round $r"
  run "$exe" --threads 2
  run mpirun -np 2 --oversubscribe "$exe" --threads 1
  run mpirun -np 2 --oversubscribe --mca btl tcp,self "$exe" --threads 1
done
echo "bucket size, 2 ranks x 1 thread, shared memory"
for b in 65536 1048576 4194304; do
  run mpirun -np 2 --oversubscribe "$exe" --threads 1 --bucket "$b"
done
echo "MPI_Allreduce instead of rank-order sums"
run mpirun -np 2 --oversubscribe "$exe" --threads 1 --native
