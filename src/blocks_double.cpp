// ddl::compiled: the blocks of nn/blocks/ in double, compiled once (docs/building.md).
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

template class ddl::CausalAttentionCore<double>;
template class ddl::CausalSelfAttention<double>;
template class ddl::Compressor<double>;
template class ddl::ConvBranch<double>;
template class ddl::DeltaBlock<double, ddl::MlpBranch<double>>;
template class ddl::DeltaResidual<double>;
template class ddl::DeltaTransformerBlock<double>;
template class ddl::Expansion<double>;
template class ddl::MlpBranch<double>;
template class ddl::StageTransition<double>;
template class ddl::SwiGluBranch<double>;
template class ddl::TokenCompressor<double>;
template class ddl::DeltaBlock<double, ddl::ConvBranch<double>>;
