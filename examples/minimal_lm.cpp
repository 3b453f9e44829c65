// ddl-minimal: the smallest whole use of ddl's language model, to copy as a start (docs/using.md).
// Trains a byte-level DeltaLM on a text file with AdamW, prints the loss, saves the model with its
// configuration, builds it again from the file alone and samples text from it.
//   ddl-minimal FILE [STEPS=300] [CHECKPOINT=minimal_lm.safetensors]
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ddl/core/rng.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/saved_model.hpp"

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE [STEPS=300] [CHECKPOINT=minimal_lm.safetensors]\n", argv[0]);
    return 1;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", argv[1]);
    return 2;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int steps = argc > 2 ? std::stoi(argv[2]) : 300;
  const std::string checkpoint = argc > 3 ? argv[3] : "minimal_lm.safetensors";

  ddl::DeltaLMConfig cfg;  // bytes are the tokens: vocab 256 (the default)
  cfg.d = 64;
  cfg.heads = 4;
  cfg.depth = 2;
  cfg.context = 64;
  const int batchSize = 8, length = static_cast<int>(cfg.context);
  if (text.size() < static_cast<std::size_t>(length) + 1) {
    std::fprintf(stderr, "%s: need at least %d bytes of text\n", argv[1], length + 1);
    return 1;
  }

  ddl::DeltaLM<float> lm(cfg, /*seed=*/1);
  ddl::AdamWOptions adamw;
  adamw.lr = 3e-3;
  ddl::AdamW<float> optimizer(adamw);
  ddl::SoftmaxCrossEntropy<float> lossFn;
  ddl::Rng rng(42);
  ddl::TokenBatch batch;  // batchSize windows of `length` bytes; targets: the byte after each
  batch.layout = ddl::TokenLayout::sequence(batchSize, length);
  std::vector<int> targets;
  Eigen::MatrixXf logits, dLogits;
  for (int step = 1; step <= steps; ++step) {
    batch.ids.clear();
    targets.clear();
    for (int b = 0; b < batchSize; ++b) {
      const auto start = static_cast<std::size_t>(rng.below(text.size() - static_cast<std::size_t>(length)));
      for (std::size_t t = start; t < start + static_cast<std::size_t>(length); ++t) {
        batch.ids.push_back(static_cast<unsigned char>(text[t]));
        targets.push_back(static_cast<unsigned char>(text[t + 1]));
      }
    }
    ddl::zeroGrad(lm);
    lm.forward(batch, logits);  // (256, batchSize * length)
    const float loss = lossFn.forward(logits, targets);
    lossFn.backward(dLogits);
    lm.backward(dLogits);
    optimizer.step(lm);
    if (step == 1 || step % 50 == 0 || step == steps) std::printf("step %d loss %.3f\n", step, loss);
  }

  ddl::saveModel(checkpoint, lm);  // weights + configuration
  auto reloaded = ddl::loadModel<ddl::DeltaLM<float>>(checkpoint);
  std::printf("saved and reloaded %s (%ld parameters)\n", checkpoint.c_str(),
              static_cast<long>(ddl::numParams(reloaded)));

  std::vector<int> ids;  // the prompt: the file's first 8 bytes
  for (std::size_t i = 0; i < 8; ++i) ids.push_back(static_cast<unsigned char>(text[i]));
  ddl::SampleOptions sampling;
  sampling.temperature = 0.8;
  sampling.seed = 7;
  const std::vector<int> sample = reloaded.generate(ids, 120, sampling);
  if (sample != lm.generate(ids, 120, sampling)) {
    std::fprintf(stderr, "the reloaded model samples other text than the trained one\n");
    return 1;
  }
  std::string out(text.begin(), text.begin() + 8);
  for (int id : sample) out.push_back(static_cast<char>(id));
  std::printf("sample: %s\n", out.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}
