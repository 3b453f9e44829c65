// ddl_mpi_step: the training step of ddl-cifar's default net (ConvDeltaNet, stem stride 2, widths
// 24,48,96, one block per stage, dv = 1, global batch 128: forward, loss, backward, gradient average,
// AdamW) on one process or on the ranks of `mpirun`, timed in a loop (MPI programs do not fit Google
// Benchmark's runner). Prints, from rank 0, the median and minimum step time over rounds, the
// throughput, and the time per step spent in collective calls (including any wait for a slower rank).
//   ddl_mpi_step [--threads T] [--steps N] [--rounds R] [--bucket BYTES] [--native]
//   mpirun -np 2 ddl_mpi_step --threads 1                       (shared memory between the ranks)
//   mpirun -np 2 --mca btl tcp,self ddl_mpi_step --threads 1    (TCP over loopback)
// bench/run_mpi.sh runs the comparisons interleaved; bench/RESULTS.md has the latest run.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include <chrono>

#include "ddl/core/collective.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/distributed/mpi_communicator.hpp"
#include "ddl/nn/models/conv_delta_net.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/data_parallel.hpp"
#include "ddl/train/task.hpp"
#include "ddl/train/train_step.hpp"

#include "bench_util.hpp"

using ddl_bench::median;

int main(int argc, char** argv) {
  ddl::MpiSession session(&argc, &argv);
  int threads = 1, steps = 20, rounds = 5;
  std::size_t bucket = std::size_t(4) << 20;
  bool native = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ddl_mpi_step: %s needs a value\n", a.c_str());
        std::exit(1);
      }
      return std::atol(argv[++i]);
    };
    if (a == "--threads") threads = static_cast<int>(next());
    else if (a == "--steps") steps = static_cast<int>(next());
    else if (a == "--rounds") rounds = static_cast<int>(next());
    else if (a == "--bucket") bucket = static_cast<std::size_t>(next());
    else if (a == "--native") native = true;
    else {
      std::fprintf(stderr, "ddl_mpi_step: unknown option %s\n", a.c_str());
      return 1;
    }
  }
  ddl::MpiCommunicator world(MPI_COMM_WORLD, native ? ddl::ReduceMode::Native : ddl::ReduceMode::Deterministic);
  const int P = world.size();
  ddl::setNumThreads(threads);

  ddl::ConvDeltaNetConfig cfg;
  ddl::applyPreset(cfg, "code");
  cfg.stemStride = 2;
  cfg.widths = {24, 48, 96};
  cfg.depths = {1, 1, 1};
  ddl::ConvDeltaNet<float> net(cfg, 1);
  const ddl::Index B = 128;
  if (B % P != 0) {
    std::fprintf(stderr, "ddl_mpi_step: the batch of %d does not divide over %d ranks\n", static_cast<int>(B), P);
    return 1;
  }
  const ddl::Index local = B / P;
  ddl::MatX<float> X(cfg.inputDim(), local);
  ddl::Rng rng(3 + static_cast<std::uint64_t>(world.rank()));
  for (ddl::Index i = 0; i < X.size(); ++i) X(i) = static_cast<float>(rng.normal());
  std::vector<int> y(static_cast<std::size_t>(local));
  for (ddl::Index i = 0; i < local; ++i) y[static_cast<std::size_t>(i)] = static_cast<int>(i % 10);

  ddl::ClassificationTask<float> task;
  ddl::AdamW<float> opt;
  ddl::StepBuffers<float> buf;
  ddl::DataParallelOptions dpo;
  dpo.bucketBytes = bucket;
  ddl::DataParallel<float> dp(world, dpo);
  auto step = [&] {
    ddl::taskStep(net, task, opt, X, y, buf, ddl::TrainStepOptions{}, [&](ddl::StepStats& s) {
      if (P > 1) dp.reduceStep(s, buf.params);
    });
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up: buffers, optimizer state, MPI connections

  std::vector<double> stepMs, commMs;
  for (int r = 0; r < rounds; ++r) {
    world.barrier();
    const double comm0 = dp.communicationSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stepMs.push_back(1e3 * secs / steps);
    commMs.push_back(1e3 * (dp.communicationSeconds() - comm0) / steps);
  }
  std::size_t gradValues = 0;
  for (const auto& e : buf.params) gradValues += static_cast<std::size_t>(e.param->grad.size());
  if (world.rank() == 0) {
    const double med = median(stepMs), mn = *std::min_element(stepMs.begin(), stepMs.end());
    const double cm = median(commMs);
    std::printf("ranks %d x threads %d, %s, bucket %zu B, gradient %zu floats (%.2f MB): step median %.2f ms, "
                "min %.2f ms, %.0f samples/s (median), collective %.3f ms/step (%.1f %%)\n",
                P, threads, P > 1 ? world.describe().c_str() : "one process", bucket, gradValues,
                4.0 * static_cast<double>(gradValues) / 1e6, med, mn, 1e3 * static_cast<double>(B) / med, cm,
                100.0 * cm / med);
  }
  return 0;
}
