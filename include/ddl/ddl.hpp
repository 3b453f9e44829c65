#pragma once
// ddl/ddl.hpp: the umbrella header. Include this, or only the headers you need.
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/types.hpp"
