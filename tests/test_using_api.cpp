// The calls docs/using.md teaches: a model saved with its configuration and built again from the file
// alone (train/saved_model.hpp), and DeltaLM::generate with named sampling options.
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/nn/models/conv_delta_net.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/next_token_task.hpp"
#include "ddl/train/saved_model.hpp"

namespace test_using_api {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::MatX;
using ddl_test::contains;
using ddl_test::thrownMessage;

namespace {

std::string tmpPath(const std::string& name) { return std::string(DDL_TEST_TMPDIR) + "/using_" + name; }

// Not the defaults in any size, so a reload that fell back to defaults cannot pass.
ddl::DeltaLMConfig smallLm() {
  ddl::DeltaLMConfig c = ddl_test::deltaLMConfig(16, 2, 2, 12, 24, "cc");
  c.vocab = 32;
  return c;
}

ddl::TokenBatch someTokens() {
  ddl::TokenBatch b;
  b.layout = ddl::TokenLayout::sequence(2, 6);
  for (int i = 0; i < 12; ++i) b.ids.push_back((7 * i + 3) % 32);
  return b;
}

}  // namespace

TEST_CASE("saveModel / loadModel: a DeltaLM comes back from the file alone, same configuration and bits",
          "[using][checkpoint]") {
  ddl::DeltaLM<float> lm(smallLm(), /*seed=*/5);
  const std::string path = tmpPath("lm.safetensors");
  ddl::saveModel(path, lm);

  ddl::DeltaLM<float> loaded = ddl::loadModel<ddl::DeltaLM<float>>(path);
  CHECK(ddl::modelConfigJson(loaded) == ddl::modelConfigJson(lm));
  CHECK(loaded.config().dv == 4);
  MatX<float> a, b;
  lm.forward(someTokens(), a);
  loaded.forward(someTokens(), b);
  CHECK(a == b);
  CHECK(lm.generate({1, 2, 3}, 10, 0.9, 8, 4) == loaded.generate({1, 2, 3}, 10, 0.9, 8, 4));
  CHECK(ddl::readCheckpointMetadata(path).preset == "code");
}

TEST_CASE("saveModel / loadModel: DeltaNet and ConvDeltaNet come back from the file alone", "[using][checkpoint]") {
  ddl::DeltaNet<double> net(ddl_test::deltaNetConfig(7, 3, 5, 2, ddl_test::kDefaultHidden, 2), 4);
  ddl::saveModel(tmpPath("net.safetensors"), net);
  ddl::DeltaNet<double> net2 = ddl::loadModel<ddl::DeltaNet<double>>(tmpPath("net.safetensors"));
  const MatX<double> X = MatX<double>::Random(7, 3);
  MatX<double> a, b;
  net.forward(X, a);
  net2.forward(X, b);
  CHECK(a == b);

  ddl::ConvDeltaNet<float> cnn(ddl_test::convNetConfig(2, 4, 4, 3, {3, 4}, {1, 1}), 6);
  ddl::saveModel(tmpPath("conv.safetensors"), cnn);
  ddl::ConvDeltaNet<float> cnn2 = ddl::loadModel<ddl::ConvDeltaNet<float>>(tmpPath("conv.safetensors"));
  const MatX<float> images = MatX<float>::Random(2 * 4 * 4, 2);
  MatX<float> c, d;
  cnn.forward(images, c);
  cnn2.forward(images, d);
  CHECK(c == d);
  CHECK(ddl::modelConfigJson(cnn2) == ddl::modelConfigJson(cnn));
}

TEST_CASE("saveModel with the optimizer: loadModel takes the model, loadCheckpoint the optimizer too",
          "[using][checkpoint]") {
  ddl::DeltaLM<float> lm(smallLm(), 2);
  ddl::AdamW<float> opt(ddl::AdamWOptions{});
  opt.initState(lm);
  opt.setStepCount(3);
  const std::string path = tmpPath("lm_opt.safetensors");
  ddl::CheckpointMeta meta;
  meta.step = 3;
  ddl::saveModel(path, lm, opt, meta);
  CHECK(ddl::readCheckpointMetadata(path).step == 3);

  ddl::DeltaLM<float> loaded = ddl::loadModel<ddl::DeltaLM<float>>(path);
  MatX<float> a, b;
  lm.forward(someTokens(), a);
  loaded.forward(someTokens(), b);
  CHECK(a == b);
  ddl::AdamW<float> resumed(ddl::AdamWOptions{});
  ddl::loadCheckpoint(path, loaded, resumed);
  CHECK(resumed.stepCount() == 3);
}

TEST_CASE("loadModel refuses a file without model_config and one of another model type, naming itself",
          "[using][checkpoint]") {
  ddl::DeltaLM<float> lm(smallLm(), 1);
  const std::string bare = tmpPath("bare.safetensors"), withConfig = tmpPath("typed.safetensors");
  ddl::saveCheckpoint(bare, lm);
  ddl::saveModel(withConfig, lm);

  const std::string noConfig = thrownMessage<ddl::IoError>([&] { ddl::loadModel<ddl::DeltaLM<float>>(bare); });
  CHECK(contains(noConfig, "ddl::loadModel"));
  CHECK(contains(noConfig, "no model_config"));
  const std::string otherType = thrownMessage<ddl::IoError>([&] { ddl::loadModel<ddl::DeltaNet<float>>(withConfig); });
  CHECK(contains(otherType, "ddl::loadModel"));
  CHECK(contains(otherType, "does not describe this model type"));
}

TEST_CASE("generate with SampleOptions draws the same tokens as the positional call", "[using][generate]") {
  ddl::DeltaLM<float> lm(smallLm(), 9);
  const std::vector<int> prompt = {4, 5, 6};
  ddl::SampleOptions opt;
  opt.temperature = 0.7;
  opt.topK = 5;
  opt.seed = 11;
  CHECK(lm.generate(prompt, 20, opt) == lm.generate(prompt, 20, 0.7, 5, 11));
  CHECK(lm.generate(prompt, 20) == lm.generate(prompt, 20, 1.0, 32, 0));  // defaults: T 1, every token, seed 0
  opt.topK = -1;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { lm.generate(prompt, 5, opt); }), "ddl::LmDecoder::generate"));
}

TEST_CASE("taskStep without a hook is the step with an empty one, bit for bit", "[using][train]") {
  ddl::DeltaLM<float> plain(smallLm(), 5), hooked(smallLm(), 5);
  ddl::NextTokenTask<float> task;
  ddl::AdamW<float> optPlain, optHooked;
  ddl::StepBuffers<float> bufPlain, bufHooked;
  const ddl::TokenBatch batch = someTokens();
  std::vector<int> next(batch.ids.size());
  for (std::size_t i = 0; i < next.size(); ++i) next[i] = (batch.ids[i] + 1) % 32;
  int hookCalls = 0;
  for (int step = 0; step < 3; ++step) {
    const ddl::StepStats a = ddl::taskStep(plain, task, optPlain, batch, next, bufPlain);
    const ddl::StepStats b =
        ddl::taskStep(hooked, task, optHooked, batch, next, bufHooked, {}, [&](ddl::StepStats&) { ++hookCalls; });
    CHECK(a.loss == b.loss);
  }
  CHECK(hookCalls == 3);
  MatX<float> x, y;
  plain.forward(batch, x);
  hooked.forward(batch, y);
  CHECK(x == y);
}

}  // namespace test_using_api
