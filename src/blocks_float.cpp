// ddl::compiled: the blocks of nn/blocks/ in float, compiled once (docs/building.md).
#include "ddl/nn/blocks/causal_attention_core.hpp"
#include "ddl/nn/blocks/causal_self_attention.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/nn/blocks/conv_branch.hpp"
#include "ddl/nn/blocks/delta_block.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"
#include "ddl/nn/blocks/delta_transformer_block.hpp"
#include "ddl/nn/blocks/expansion.hpp"
#include "ddl/nn/blocks/mlp_branch.hpp"
#include "ddl/nn/blocks/stage_transition.hpp"
#include "ddl/nn/blocks/swiglu_branch.hpp"
#include "ddl/nn/blocks/token_compressor.hpp"

template class ddl::CausalAttentionCore<float>;
template class ddl::CausalSelfAttention<float>;
template class ddl::Compressor<float>;
template class ddl::ConvBranch<float>;
template class ddl::DeltaBlock<float, ddl::MlpBranch<float>>;
template class ddl::DeltaResidual<float>;
template class ddl::DeltaTransformerBlock<float>;
template class ddl::Expansion<float>;
template class ddl::MlpBranch<float>;
template class ddl::StageTransition<float>;
template class ddl::SwiGluBranch<float>;
template class ddl::TokenCompressor<float>;
template class ddl::DeltaBlock<float, ddl::ConvBranch<float>>;
