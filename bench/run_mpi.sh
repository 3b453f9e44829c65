#!/usr/bin/env bash
# Data-parallel step of ddl-cifar's default net: 1 rank x 2 threads against 2 ranks x 1 thread over
# shared memory and over TCP on loopback, interleaved (one run of each per round, R rounds), then the
# gradient bucket size on 2 ranks. Each line is one run of build-bench/bench/ddl_mpi_step (median and
# minimum over its own rounds); compare lines of the same round.
#   bench/run_mpi.sh [rounds] [build-dir]          (tools/run-bench.sh builds build-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
exe=${2:-build-bench}/bench/ddl_mpi_step
[ -x "$exe" ] || { echo "run_mpi.sh: $exe is missing: build it with tools/run-bench.sh (needs libopenmpi-dev)"; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
run() { "$@" --steps 20 --rounds 5 | sed "s/^/  /"; }
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
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
