// ddl_mpi_step: a data-parallel training step (forward, loss, backward, gradient average through
// ddl::DataParallel, AdamW) on one process or on the ranks of `mpirun`, timed in a loop (MPI programs do
// not fit Google Benchmark's runner). Two models:
//   --model cifar (default): ddl-cifar's default net (ConvDeltaNet, stem stride 2, widths 24,48,96, one
//     block per stage, dv = 1), global batch 128 images split over the ranks (it reports no final
//     gradients during backward: its sums always follow backward);
//   --model lm124: DeltaLM at the paper's size (bench/lm_configs.hpp; --variant cc-ec or additive),
//     one sequence of 1024 tokens per rank per step (weak scaling: the global batch is P sequences);
//     a rank takes about 6.3 GB (cc-ec).
// Prints, from rank 0, the median and minimum step time over rounds, the throughput, and the time per
// step spent in collective calls (including any wait for a slower rank; with overlap, the calls that
// start and move the sums during backward and the final wait).
//   ddl_mpi_step [--model cifar|lm124] [--variant cc-ec|additive] [--threads T] [--steps N] [--rounds R]
//                [--warmup W] [--bucket BYTES] [--overlap on|off] [--native]
//   mpirun -np 2 ddl_mpi_step --threads 1                       (shared memory between the ranks)
//   mpirun -np 2 --mca btl tcp,self ddl_mpi_step --threads 1    (TCP over loopback)
// bench/run_mpi.sh runs the comparisons interleaved (bench/run_mpi.sh --lm124 at the paper's size);
// bench/RESULTS.md has the latest runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ddl/core/collective.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/distributed/mpi_communicator.hpp"
#include "ddl/nn/models/conv_delta_net.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/data_parallel.hpp"
#include "ddl/train/next_token_task.hpp"
#include "ddl/train/task.hpp"
#include "ddl/train/train_step.hpp"

#include "bench_util.hpp"
#include "lm_configs.hpp"

using ddl_bench::median;

namespace {

struct Timing {
  std::vector<double> stepMs, commMs;
};

// Warm-up, then rounds of `steps` steps; every round starts at a barrier. step() runs one step.
template <class Step>
Timing timeSteps(ddl::MpiCommunicator& world, ddl::DataParallel<float>& dp, int warmup, int rounds, int steps,
                 Step&& step) {
  for (int i = 0; i < warmup; ++i) step();  // buffers, optimizer state, MPI connections
  Timing t;
  for (int r = 0; r < rounds; ++r) {
    world.barrier();
    const double comm0 = dp.communicationSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t.stepMs.push_back(1e3 * secs / steps);
    t.commMs.push_back(1e3 * (dp.communicationSeconds() - comm0) / steps);
  }
  return t;
}

// The step of `taskStep` with the data-parallel parts: with overlap, beginStep before backward (the
// model's reports start buckets) and reduceStep after it; without, reduceStep after backward.
// As TrainingLoop: overlap only for a model that reports its final gradients (reports = true).
template <class Model, class Task, class Input>
auto dataParallelStep(Model& model, Task& task, ddl::AdamW<float>& opt, const Input& X,
                      const typename Task::Target& y, ddl::StepBuffers<float>& buf, ddl::DataParallel<float>& dp,
                      bool reports) {
  return [&, reports] {
    ddl::taskStep(
        model, task, opt, X, y, buf, ddl::TrainStepOptions{},
        [&](ddl::StepStats& s) {
          if (dp.size() > 1 && dp.overlaps() && reports) dp.beginStep(s, buf.params);
        },
        [&](ddl::StepStats& s) {
          if (dp.size() > 1) dp.reduceStep(s, buf.params);
        });
  };
}

}  // namespace

int main(int argc, char** argv) {
  ddl::MpiSession session(&argc, &argv);
  int threads = 1, steps = -1, rounds = -1, warmup = -1;
  std::size_t bucket = std::size_t(4) << 20;
  bool native = false;
  std::string model = "cifar", variant = "cc-ec", overlap;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ddl_mpi_step: %s needs a value\n", a.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--threads") threads = std::atoi(value().c_str());
    else if (a == "--steps") steps = std::atoi(value().c_str());
    else if (a == "--rounds") rounds = std::atoi(value().c_str());
    else if (a == "--warmup") warmup = std::atoi(value().c_str());
    else if (a == "--bucket") bucket = static_cast<std::size_t>(std::atol(value().c_str()));
    else if (a == "--native") native = true;
    else if (a == "--model") model = value();
    else if (a == "--variant") variant = value();
    else if (a == "--overlap") overlap = value();
    else {
      std::fprintf(stderr, "ddl_mpi_step: unknown option %s\n", a.c_str());
      return 1;
    }
  }
  if ((model != "cifar" && model != "lm124") || (variant != "cc-ec" && variant != "additive") ||
      (!overlap.empty() && overlap != "on" && overlap != "off")) {
    std::fprintf(stderr, "ddl_mpi_step: --model cifar|lm124, --variant cc-ec|additive, --overlap on|off; got %s, %s, %s\n",
                 model.c_str(), variant.c_str(), overlap.c_str());
    return 1;
  }
  const bool lm = model == "lm124";
  if (steps < 0) steps = lm ? 1 : 20;
  if (rounds < 0) rounds = lm ? 3 : 5;
  if (warmup < 0) warmup = lm ? 1 : 3;
  ddl::MpiCommunicator world(MPI_COMM_WORLD, native ? ddl::ReduceMode::Native : ddl::ReduceMode::Deterministic);
  const int P = world.size();
  ddl::setNumThreads(threads);
  ddl::DataParallelOptions dpo;
  dpo.bucketBytes = bucket;
  if (!overlap.empty()) dpo.overlap = overlap == "on";
  ddl::DataParallel<float> dp(world, dpo);
  ddl::AdamW<float> opt;
  ddl::StepBuffers<float> buf;
  ddl::Rng rng(3 + static_cast<std::uint64_t>(world.rank()));

  Timing t;
  ddl::Index samples = 0;  // per step, over all ranks
  std::size_t gradValues = 0;
  // Counted while the model lives (buf.params points into it).
  const auto countGradient = [&] {
    for (const auto& e : buf.params) gradValues += static_cast<std::size_t>(e.param->grad.size());
  };
  const char* unit = "samples";
  if (lm) {
    ddl::DeltaLM<float> net(ddl_bench::scaleConfig(variant == "cc-ec" ? ddl_bench::kScaleCcEc : ddl_bench::kScaleAdditive), 1);
    if (P > 1 && dp.overlaps())
      net.setGradientsReady([&dp](std::size_t first, std::size_t end) { dp.gradientsReady(first, end); });
    const ddl::Index T = ddl_bench::kScaleT;
    ddl::TokenBatch batch;
    batch.layout = ddl::TokenLayout::sequence(1, T);
    std::vector<int> next(static_cast<std::size_t>(T));
    batch.ids.resize(static_cast<std::size_t>(T));
    const auto draw = [&rng] { return static_cast<int>(rng.below(static_cast<std::uint64_t>(ddl_bench::kScaleVocab))); };
    for (auto& id : batch.ids) id = draw();
    for (auto& id : next) id = draw();
    ddl::NextTokenTask<float> task;
    t = timeSteps(world, dp, warmup, rounds, steps, dataParallelStep(net, task, opt, batch, next, buf, dp, true));
    countGradient();
    samples = T * P;
    unit = "tokens";
  } else {
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
    for (ddl::Index i = 0; i < X.size(); ++i) X(i) = static_cast<float>(rng.normal());
    std::vector<int> y(static_cast<std::size_t>(local));
    for (ddl::Index i = 0; i < local; ++i) y[static_cast<std::size_t>(i)] = static_cast<int>(i % 10);
    ddl::ClassificationTask<float> task;
    t = timeSteps(world, dp, warmup, rounds, steps, dataParallelStep(net, task, opt, X, y, buf, dp, false));
    countGradient();
    samples = B;
  }
  if (world.rank() == 0) {
    const double med = median(t.stepMs), mn = *std::min_element(t.stepMs.begin(), t.stepMs.end());
    const double cm = median(t.commMs);
    const std::string how =
        P > 1 ? world.describe() + (lm && dp.overlaps() ? ", overlap" : ", no overlap") : "one process";
    std::printf("%s%s: ranks %d x threads %d, %s, bucket %zu B, gradient %zu floats (%.2f MB): step median %.2f ms, "
                "min %.2f ms, %.0f %s/s (median), collective %.3f ms/step (%.1f %%)\n",
                model.c_str(), lm ? (" " + variant).c_str() : "", P, threads, how.c_str(), bucket, gradValues,
                4.0 * static_cast<double>(gradValues) / 1e6, med, mn, 1e3 * static_cast<double>(samples) / med, unit,
                cm, 100.0 * cm / med);
    std::fflush(stdout);
  }
  return 0;
}
