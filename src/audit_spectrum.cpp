// ddl::compiled: the audit's frozen-operator spectrum (diag/recorder.hpp) in float and double, compiled once:
// Eigen's self-adjoint eigen-solver and LU in double, which every program that audits would otherwise
// compile again (docs/building.md).
#include "ddl/diag/recorder.hpp"

template ddl::SpectralSample ddl::sampleSpectrum<float>(const ddl::DeltaResidual<float>&, ddl::Index);
template ddl::SpectralSample ddl::sampleSpectrum<double>(const ddl::DeltaResidual<double>&, ddl::Index);
