// ddl::compiled: the layers of nn/layers/ in float, compiled once (docs/building.md).
#include "ddl/nn/layers/activation.hpp"
#include "ddl/nn/layers/conv2d.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/nn/layers/dropout.hpp"
#include "ddl/nn/layers/embedding.hpp"
#include "ddl/nn/layers/global_avg_pool.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/nn/layers/pool2d.hpp"
#include "ddl/nn/layers/rms_norm.hpp"
#include "ddl/nn/layers/state_conv.hpp"
#include "ddl/nn/layers/state_kernel.hpp"
#include "ddl/nn/layers/token_conv.hpp"

template class ddl::ActivationLayer<float>;
template class ddl::Conv2d<float>;
template class ddl::detail::ConvScratch<float>;
template class ddl::SoftmaxCrossEntropy<float>;
template class ddl::Dropout<float>;
template class ddl::Embedding<float>;
template class ddl::GlobalAvgPool<float>;
template class ddl::Linear<float>;
template class ddl::MaxPool2d<float>;
template class ddl::AvgPool2d<float>;
template class ddl::RmsNorm<float>;
template class ddl::StateKernel<float>;
template class ddl::StateConv<float>;
template class ddl::ConvExpansion<float>;
template class ddl::TokenConv<float>;
