// lm_configs.hpp: the DeltaLM configurations the benchmarks time, built one way (benchLmConfig). The
// paper's size is the authors' default configuration (docs/spec.md §8): GPT-2's vocabulary padded to
// 50 304, d 768, 12 blocks, 6 heads of 128, context 1024, tied head, preset "code"; variants cc-ec (the
// paper's DDL, dv 4, 123.7 M parameters) and additive dv 1 (the pre-norm GPT baseline, 123.6 M). Shared by
// bench_lm_scale.cpp (one process against PyTorch) and mpi_step.cpp (--model lm124, data-parallel), so
// both time the same model; bench_lm.cpp builds its smaller model with benchLmConfig too.
#pragma once

#include "ddl/core/types.hpp"
#include "ddl/nn/models/delta_lm_config.hpp"

namespace ddl_bench {

// A DeltaLM of these sizes: the variant (applyVariant's names: dv1, cc, cc-ec, ...), the residual kind,
// then the "code" preset, which keeps the shapes, the variant and the residual kind.
inline ddl::DeltaLMConfig benchLmConfig(ddl::Index vocab, ddl::Index d, ddl::Index depth, ddl::Index heads,
                                        ddl::Index context, const char* variant, ddl::ResidualKind residual) {
  ddl::DeltaLMConfig c;
  c.vocab = vocab;
  c.d = d;
  c.depth = depth;
  c.heads = heads;
  c.context = context;
  ddl::applyVariant(c, variant);
  c.block.residual.residual = residual;
  ddl::applyPreset(c, "code");
  return c;
}

constexpr ddl::Index kScaleVocab = 50304, kScaleD = 768, kScaleDepth = 12, kScaleHeads = 6, kScaleT = 1024;

enum ScaleVariant { kScaleCcEc = 0, kScaleAdditive = 1 };
inline const char* scaleVariantName(int v) { return v == kScaleCcEc ? "cc-ec" : "additive"; }

inline ddl::DeltaLMConfig scaleConfig(int variant) {
  return variant == kScaleCcEc
             ? benchLmConfig(kScaleVocab, kScaleD, kScaleDepth, kScaleHeads, kScaleT, "cc-ec", ddl::ResidualKind::Delta)
             : benchLmConfig(kScaleVocab, kScaleD, kScaleDepth, kScaleHeads, kScaleT, "dv1", ddl::ResidualKind::Additive);
}

}  // namespace ddl_bench
