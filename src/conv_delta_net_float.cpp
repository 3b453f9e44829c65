// ddl::compiled: ConvDeltaNet<float> and everything it calls, compiled once (docs/building.md).
#include "ddl/nn/models/conv_delta_net.hpp"

template class ddl::ConvDeltaNet<float>;
