#pragma once
// ddl/core/token_batch.hpp: a batch of token sequences, the input of a language model: B sequences of
// T token ids, id b*T + t at position t of sequence b (the column order of core/token_layout.hpp).
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

struct TokenBatch {
  std::vector<int> ids;  // B*T ids
  TokenLayout layout;    // sequence(B, T)

  Index sequences() const { return layout.batch; }
  Index length() const { return layout.length; }

  // Throws ShapeError naming fn when ids do not fill a sequence layout.
  void check(const char* fn) const {
    requireSequenceLayout(fn, layout);
    if (static_cast<Index>(ids.size()) != layout.tokens())
      throw ShapeError(message(fn, "token batch has ", ids.size(), " ids but its layout ", toString(layout), " holds ",
                               layout.tokens()));
  }
};

}  // namespace ddl
