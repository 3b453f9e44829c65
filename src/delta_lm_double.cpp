// ddl::compiled: DeltaLM<double>, its decoder LmDecoder<double> and everything they call, compiled once (docs/building.md).
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/nn/models/lm_decoder.hpp"

template class ddl::DeltaLM<double>;
template class ddl::LmDecoder<double>;
