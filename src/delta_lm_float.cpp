// ddl::compiled: DeltaLM<float>, its decoder LmDecoder<float> and everything they call, compiled once (docs/building.md).
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/nn/models/lm_decoder.hpp"

template class ddl::DeltaLM<float>;
template class ddl::LmDecoder<float>;
