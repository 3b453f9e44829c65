// The compile-cost probe (tools/compile-cost.sh): what a researcher's first one-file program does with
// ddl's language model. Builds a small DeltaLM, trains it a few AdamW steps on a repeated sentence,
// saves a checkpoint, reloads it into a second model and generates from both; exits 1 when the reloaded
// model does not generate the same text or the loss did not fall.
#include <cstdio>
#include <string>
#include <vector>

#include "ddl/core/token_batch.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/train/adamw.hpp"

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "lm_program.safetensors";
  ddl::DeltaLMConfig cfg;
  cfg.d = 32;
  cfg.heads = 2;
  cfg.depth = 2;
  cfg.context = 16;
  cfg.hidden = 64;
  ddl::applyVariant(cfg, "dv1");

  const std::string text = "the quick brown fox jumps over the lazy dog. ";
  ddl::TokenBatch batch, next;  // 4 windows of 16 bytes and the bytes that follow them
  batch.layout = next.layout = ddl::TokenLayout::sequence(4, 16);
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 16; ++t) {
      batch.ids.push_back(static_cast<unsigned char>(text[static_cast<std::size_t>(b * 5 + t) % text.size()]));
      next.ids.push_back(static_cast<unsigned char>(text[static_cast<std::size_t>(b * 5 + t + 1) % text.size()]));
    }

  ddl::DeltaLM<float> lm(cfg, /*seed=*/1);
  ddl::SoftmaxCrossEntropy<float> lossFn;
  ddl::AdamWOptions adamw;
  adamw.lr = 3e-3;
  ddl::AdamW<float> opt(adamw);
  Eigen::MatrixXf logits, dLogits;
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    ddl::zeroGrad(lm);
    lm.forward(batch, logits);
    last = lossFn.forward(logits, next.ids);
    if (step == 0) first = last;
    lossFn.backward(dLogits);
    lm.backward(dLogits);
    opt.step(lm);
  }
  ddl::saveCheckpoint(path, lm, opt);

  ddl::DeltaLM<float> reloaded(cfg, /*seed=*/2);
  ddl::AdamW<float> reloadedOpt(adamw);
  ddl::loadCheckpoint(path, reloaded, reloadedOpt);
  const std::vector<int> prompt = {'t', 'h', 'e', ' '};
  const std::vector<int> a = lm.generate(prompt, 24, 0.8, 256, 7), b = reloaded.generate(prompt, 24, 0.8, 256, 7);
  std::string sample(prompt.begin(), prompt.end());
  for (int id : a) sample.push_back(static_cast<char>(id));
  std::printf("loss %.3f -> %.3f, sample: %s\n", first, last, sample.c_str());
  return a == b && last < first ? 0 : 1;
}
