// Data-parallel training of the language model over MPI, run by ctest under `mpirun -np 2` and `-np 3`
// (tests/mpi/CMakeLists.txt). Every rank trains the same DeltaLM twice through ddl::TrainingLoop with
// NextTokenTask and TextWindows: once alone, and once as one of the P ranks, its TextWindows sharded
// (each rank keeps B / P of every global batch's windows) and the loop distributed. The first step's
// gradient and the parameters after 20 AdamW steps must agree with the single process. Double: the
// gradient to 1e-14, the parameters to 1e-12 tensor by tensor (measured: up to 2e-13 on 3 ranks), so
// the sharding and the sums are exact. Float: the per-rank sums round differently (the step-1
// gradient differs by up to 7e-7 as one vector) and 20 AdamW steps carry that along (up to 2.1e-6
// as one vector on 3 ranks), hence 1e-6 for the gradient and 1e-5 for the parameters. A global batch
// that does not divide over the ranks is refused by name. The overlap of the sums with backward (the
// model's reports start buckets, train/data_parallel.hpp) gives the bits of the sums after backward.
#include "mpi/mpi_fixture.hpp"  // first: the world communicator and main

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/distributed/mpi_communicator.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/next_token_task.hpp"
#include "ddl/train/text_windows.hpp"
#include "ddl/train/trainer_options.hpp"
#include "ddl/train/training_loop.hpp"

using ddl::Index;
using ddl::MatX;
using ddl_test::contains;
using ddl_test::thrownMessage;
using ddl_test::world;

namespace {

template <class S>
using Loop = ddl::TrainingLoop<ddl::DeltaLM<S>, ddl::NextTokenTask<S>, ddl::TextWindows<S>, ddl::AdamW<S>>;

// Random bytes with some structure (a repeated phrase between them), the same on every rank.
std::vector<std::uint8_t> corpus() {
  ddl::Rng rng(11);
  std::vector<std::uint8_t> out;
  const std::string phrase = "delta rule; ";
  for (int i = 0; i < 200; ++i) {
    out.push_back(static_cast<std::uint8_t>(rng.below(256)));
    out.insert(out.end(), phrase.begin(), phrase.end());
  }
  return out;
}

ddl::DeltaLMConfig config(const std::string& variant, ddl::ResidualKind kind) {
  ddl::DeltaLMConfig c = ddl_test::deltaLMConfig(12, 2, 2, 8, 16, variant);
  c.block.residual.residual = kind;
  if (c.dv > 1) c.dv = 2;
  return c;
}

ddl::TrainerOptions options() {
  ddl::TrainerOptions o;
  o.epochs = 2;
  o.batchSize = 6;  // windows per global batch: divides over 2 and 3 ranks
  o.adam.lr = 3e-3;
  o.warmupSteps = 2;
  o.clipNorm = 1.0;  // the clip sees the global gradient's norm
  o.seed = 5;
  o.threads = 1;
  return o;
}

constexpr Index kSteps = 10;  // per epoch

// ||a - b|| / ||b|| over all tensors as one vector, and the worst tensor's.
template <class S>
std::pair<double, double> relDiffs(const std::vector<MatX<S>>& a, const std::vector<MatX<S>>& b) {
  double d2 = 0, r2 = 0, worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = (a[i].template cast<double>() - b[i].template cast<double>()).norm();
    const double r = b[i].template cast<double>().norm();
    d2 += d * d;
    r2 += r * r;
    worst = std::max(worst, r > 0 ? d / r : d);
  }
  return {std::sqrt(d2 / r2), worst};
}

// Trains cfg alone and on the ranks; returns (step-1 gradient difference, parameter differences).
template <class S>
void compareWithOneProcess(const ddl::DeltaLMConfig& cfg) {
  const std::vector<std::uint8_t> train = corpus();
  const ddl::TrainerOptions opt = options();
  auto firstGradient = [](Loop<S>& loop, std::vector<MatX<S>>& out) {
    loop.addStepHook([&out](ddl::StepContext<S>& c) {
      if (c.step != 1) return;
      for (const auto& e : c.params) out.push_back(e.param->grad);
    });
  };
  ddl::DeltaLM<S> reference(cfg, 7);
  reference.init(opt.seed);
  ddl::NextTokenTask<S> taskAlone;
  ddl::TextWindows<S> windowsAlone(train, opt.batchSize, cfg.context, kSteps, opt.seed);
  ddl::AdamW<S> adamAlone(opt.adam);
  Loop<S> alone(reference, taskAlone, windowsAlone, adamAlone, opt);
  std::vector<MatX<S>> gradAlone, gradRanks;
  firstGradient(alone, gradAlone);
  alone.run();

  // Only rank 0 starts from the reference's weights: the others' must come from its broadcast.
  ddl::DeltaLM<S> ranked(cfg, 7);
  ranked.init(world().rank() == 0 ? opt.seed : 100 + static_cast<std::uint64_t>(world().rank()));
  ddl::NextTokenTask<S> task;
  ddl::TextWindows<S> windows(train, opt.batchSize, cfg.context, kSteps, opt.seed);
  windows.shard(world().rank(), world().size());
  ddl::AdamW<S> adam(opt.adam);
  Loop<S> parallel(ranked, task, windows, adam, opt);
  parallel.distribute(world());
  firstGradient(parallel, gradRanks);
  parallel.run();

  CHECK(parallel.step() == alone.step());
  CHECK(parallel.step() == 2 * kSteps);
  const bool isFloat = sizeof(S) == 4;
  const auto grad = relDiffs(gradRanks, gradAlone);
  const auto params = relDiffs(ddl_test::paramValues(ranked), ddl_test::paramValues(reference));
  INFO("rank " << world().rank() << " of " << world().size() << ": step-1 gradient " << grad.first
               << ", parameters after " << parallel.step() << " steps: all " << params.first << ", worst tensor "
               << params.second);
  CHECK(grad.first <= (isFloat ? 1e-6 : 1e-14));
  CHECK((isFloat ? params.first : params.second) <= (isFloat ? 1e-5 : 1e-12));
}

// Trains cfg on the ranks with dpo; returns the step-1 gradient and the parameters after the run.
template <class S>
std::pair<std::vector<MatX<S>>, std::vector<MatX<S>>> trainOnRanks(const ddl::DeltaLMConfig& cfg,
                                                                   const ddl::DataParallelOptions& dpo) {
  const std::vector<std::uint8_t> train = corpus();
  const ddl::TrainerOptions opt = options();
  ddl::DeltaLM<S> model(cfg, 7);
  model.init(opt.seed);
  ddl::NextTokenTask<S> task;
  ddl::TextWindows<S> windows(train, opt.batchSize, cfg.context, kSteps, opt.seed);
  windows.shard(world().rank(), world().size());
  ddl::AdamW<S> adam(opt.adam);
  Loop<S> loop(model, task, windows, adam, opt);
  loop.distribute(world(), dpo);
  std::vector<MatX<S>> grad;
  loop.addStepHook([&grad](ddl::StepContext<S>& c) {
    if (c.step != 1) return;
    for (const auto& e : c.params) grad.push_back(e.param->grad);
  });
  loop.run();
  REQUIRE(loop.dataParallel() != nullptr);
  CHECK(loop.dataParallel()->overlaps() == dpo.overlap);
  return {grad, ddl_test::paramValues(model)};
}

template <class S>
double maxAbsDiff(const std::vector<MatX<S>>& a, const std::vector<MatX<S>>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].rows() == b[i].rows());
    REQUIRE(a[i].cols() == b[i].cols());
    worst = std::max(worst, (a[i].template cast<double>() - b[i].template cast<double>()).cwiseAbs().maxCoeff());
  }
  return worst;
}

// Overlap on against off, the buckets of 4 MiB (all at once) and 4 * 37 bytes (buckets across parameters
// and blocks); with tinyBuckets also 12 bytes, every parameter's values in messages of 3 floats that start
// while backward runs. Those thousands of messages per step take 3 s on 3 ranks sharing 2 cores (9 s in
// double), against 0.05 s for the others, so one configuration runs them.
template <class S>
void compareOverlap(const ddl::DeltaLMConfig& cfg, bool tinyBuckets) {
  ddl::DataParallelOptions off;
  off.overlap = false;
  const auto reference = trainOnRanks<S>(cfg, off);
  std::vector<std::size_t> buckets = {std::size_t(4) << 20, std::size_t(4 * 37)};
  if (tinyBuckets) buckets.push_back(12);
  for (std::size_t bucket : buckets) {
    ddl::DataParallelOptions on;
    on.bucketBytes = bucket;
    on.overlap = true;
    const auto overlapped = trainOnRanks<S>(cfg, on);
    INFO("rank " << world().rank() << " of " << world().size() << ", bucket " << bucket << " bytes");
    CHECK(maxAbsDiff(overlapped.first, reference.first) == 0.0);
    CHECK(maxAbsDiff(overlapped.second, reference.second) == 0.0);
  }
}

}  // namespace

TEST_CASE("overlap of the gradient sums with backward gives the same bits as sums after it", "[mpi][lm][overlap]") {
  for (const std::string variant : {"dv1", "cc-ec"}) {
    INFO("variant " << variant);
    compareOverlap<float>(config(variant, ddl::ResidualKind::Delta), variant == "cc-ec");
    compareOverlap<double>(config(variant, ddl::ResidualKind::Delta), false);
  }
}

TEST_CASE("P ranks train a DeltaLM as one process does: dv1, cc-ec and tc, delta and additive", "[mpi][lm]") {
  for (const std::string variant : {"dv1", "cc-ec", "tc"})
    for (ddl::ResidualKind kind : {ddl::ResidualKind::Delta, ddl::ResidualKind::Additive}) {
      if (variant != "dv1" && kind == ddl::ResidualKind::Additive) continue;
      INFO("variant " << variant << ", " << ddl::toString(kind));
      compareWithOneProcess<double>(config(variant, kind));
      compareWithOneProcess<float>(config(variant, kind));
    }
}

TEST_CASE("text windows that do not divide over the ranks are refused", "[mpi][lm][errors]") {
  const std::vector<std::uint8_t> train = corpus();
  ddl::TextWindows<float> windows(train, world().size() * 2 + 1, 8, 4, 1);
  const std::string m = thrownMessage<ddl::ValueError>([&] { windows.shard(world().rank(), world().size()); });
  INFO(m);
  CHECK(contains(m, "ddl::TextWindows::shard: the global batch of " + std::to_string(world().size() * 2 + 1) +
                        " windows does not divide over " + std::to_string(world().size()) + " ranks"));
}

int main(int argc, char** argv) { return ddl_test::runCatchOnEveryRank(argc, argv); }
