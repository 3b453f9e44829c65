#pragma once
// ddl/core/token_layout.hpp: what the columns of an activation are (docs/architecture.md principle 1, tokens are columns).
//
//   vectors(B)          B samples, one token each                       column = b
//   image(B, H, W)      B feature maps of H x W pixels, one token each  column = (b*H + y)*W + x
//   sequence(B, T)      B sequences of T positions                      column = b*T + t
//
// A module that mixes tokens (a convolution, pooling, attention) reads the layout passed through
// forward; per-token modules (Linear, RMSNorm, the Delta write) only need tokens() == X.cols().
// For the expanded state (dv > 1) value channel j is X.middleCols(j * tokens(), tokens()).
#include <sstream>
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

struct TokenLayout {
  Index batch = 0;   // B
  Index height = 1;  // H (images), 1 otherwise
  Index width = 1;   // W (images), 1 otherwise
  Index length = 1;  // T (sequences), 1 otherwise

  static TokenLayout vectors(Index B) { return make(B, 1, 1, 1); }
  static TokenLayout image(Index B, Index H, Index W) { return make(B, H, W, 1); }
  static TokenLayout sequence(Index B, Index T) { return make(B, 1, 1, T); }

  Index tokensPerSample() const { return height * width * length; }
  Index tokens() const { return batch * tokensPerSample(); }
  bool operator==(const TokenLayout& o) const {
    return batch == o.batch && height == o.height && width == o.width && length == o.length;
  }
  bool operator!=(const TokenLayout& o) const { return !(*this == o); }

 private:
  static TokenLayout make(Index B, Index H, Index W, Index T) {
    require(B >= 0 && H >= 1 && W >= 1 && T >= 1, "ddl::TokenLayout",
            "batch must be >= 0 and every extent >= 1, got B = ", B, ", H = ", H, ", W = ", W, ", T = ", T);
    TokenLayout l;
    l.batch = B;
    l.height = H;
    l.width = W;
    l.length = T;
    return l;
  }
};

// "(B=64, H=32, W=32)" for error messages.
inline std::string toString(const TokenLayout& l) {
  std::ostringstream os;
  os << "(B=" << l.batch << ", H=" << l.height << ", W=" << l.width << ", T=" << l.length << ")";
  return os.str();
}

// Throws ShapeError naming fn unless layout is a sequence layout (H = W = 1: TokenLayout::sequence(B, T)).
inline void requireSequenceLayout(const char* fn, const TokenLayout& layout) {
  if (layout.height != 1 || layout.width != 1)
    throw ShapeError(message(fn, "needs a sequence layout (H = W = 1, TokenLayout::sequence(B, T)), got ",
                             toString(layout)));
}

}  // namespace ddl
