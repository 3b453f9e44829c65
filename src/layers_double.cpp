// ddl::compiled: the layers of nn/layers/ in double, compiled once (docs/building.md).
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

template class ddl::ActivationLayer<double>;
template class ddl::Conv2d<double>;
template class ddl::detail::ConvScratch<double>;
template class ddl::SoftmaxCrossEntropy<double>;
template class ddl::Dropout<double>;
template class ddl::Embedding<double>;
template class ddl::GlobalAvgPool<double>;
template class ddl::Linear<double>;
template class ddl::MaxPool2d<double>;
template class ddl::AvgPool2d<double>;
template class ddl::RmsNorm<double>;
template class ddl::StateKernel<double>;
template class ddl::StateConv<double>;
template class ddl::ConvExpansion<double>;
template class ddl::TokenConv<double>;
