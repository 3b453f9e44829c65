// ddl::compiled: DeltaLM<float> and everything it calls, compiled once (docs/building.md).
#include "ddl/nn/models/delta_lm.hpp"

template class ddl::DeltaLM<float>;
