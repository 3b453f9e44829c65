// lm_scale_config.hpp: DeltaLM at the paper's size, the authors' default configuration (docs/spec.md §8):
// GPT-2's vocabulary padded to 50 304, d 768, 12 blocks, 6 heads of 128, context 1024, tied head, preset
// "code"; variants cc-ec (the paper's DDL, dv 4, 123.7 M parameters) and additive dv 1 (the pre-norm GPT
// baseline, 123.6 M). Shared by bench_lm_scale.cpp (one process against PyTorch) and mpi_step.cpp
// (--model lm124, data-parallel), so both time the same model.
#pragma once

#include "ddl/core/types.hpp"
#include "ddl/nn/models/delta_lm_config.hpp"

namespace ddl_bench {

constexpr ddl::Index kScaleVocab = 50304, kScaleD = 768, kScaleDepth = 12, kScaleHeads = 6, kScaleT = 1024;

enum ScaleVariant { kScaleCcEc = 0, kScaleAdditive = 1 };
inline const char* scaleVariantName(int v) { return v == kScaleCcEc ? "cc-ec" : "additive"; }

inline ddl::DeltaLMConfig scaleConfig(int variant) {
  ddl::DeltaLMConfig c;
  c.vocab = kScaleVocab;
  c.d = kScaleD;
  c.depth = kScaleDepth;
  c.heads = kScaleHeads;
  c.context = kScaleT;
  ddl::applyVariant(c, variant == kScaleCcEc ? "cc-ec" : "dv1");
  c.block.residual.residual = variant == kScaleCcEc ? ddl::ResidualKind::Delta : ddl::ResidualKind::Additive;
  ddl::applyPreset(c, "code");
  return c;
}

}  // namespace ddl_bench
