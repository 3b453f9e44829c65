#pragma once
// ddl/core/requires_json.hpp: included by every header that reads or writes JSON (checkpoints,
// safetensors, audit files, the trainers' options), before <nlohmann/json.hpp>. Without nlohmann-json
// such a header stops here with a message that says what to install or link, instead of a missing
// file deep inside it. core/ itself never includes nlohmann-json.
#include "ddl/core/config.hpp"

#if !DDL_WITH_JSON
#error "this ddl header needs nlohmann-json: link ddl::json (find_package(ddl COMPONENTS json); Debian: nlohmann-json3-dev)"
#endif
