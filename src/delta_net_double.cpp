// ddl::compiled: DeltaNet<double> and everything it calls, compiled once (docs/building.md).
#include "ddl/nn/models/delta_net.hpp"

template class ddl::DeltaNet<double>;
