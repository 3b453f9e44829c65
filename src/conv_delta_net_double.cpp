// ddl::compiled: ConvDeltaNet<double> and everything it calls, compiled once (docs/building.md).
#include "ddl/nn/models/conv_delta_net.hpp"

template class ddl::ConvDeltaNet<double>;
