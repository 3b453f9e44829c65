#pragma once
// ddl/core/gradients_ready.hpp: how a model's backward says that some parameters' gradients are final,
// so that data-parallel training (train/data_parallel.hpp) can send them while the backward of earlier
// layers still runs (docs/decisions.md, "Overlap of communication with backward").
//
//   model.setGradientsReady([&](std::size_t first, std::size_t end) { dp.gradientsReady(first, end); });
// The model calls it from the thread that called backward, with the range [first, end) of its
// visitParams order (the indices of a ParamList of it) whose gradients no later part of this backward
// changes; every index once per backward, the last call at the end of backward. An empty function
// (the default) turns the reports off.
#include <cstddef>
#include <functional>

namespace ddl {

using GradientsReady = std::function<void(std::size_t first, std::size_t end)>;

}  // namespace ddl
