#pragma once
// ddl/nn/blocks/two_layer_branch.hpp: what MlpBranch and ConvBranch share, h = layer2(act(layer1(c))):
// the layers, the activations one forward keeps for backward, the forward of both modes and the backward.
//   c: (d, N) -> layer1 -> (hidden, N) -> act -> layer2 -> h: (d, N)
// Layer is Linear or Conv2d, built as Layer(d, hidden, layerArgs...) and Layer(hidden, d, layerArgs...).
#include "ddl/core/config.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/activation.hpp"
#include "ddl/nn/layers/forward_mode.hpp"

namespace ddl {

template <class S, class Layer>
class TwoLayerBranch {
 public:
  // Draw order: layer1, layer2 (PyTorch's Linear and Conv2d defaults).
  void init(Rng& rng) {
    m_layer1.init(rng);
    m_layer2.init(rng);
  }

  // dH: (d, N) -> dC: (d, N) overwritten; parameter gradients accumulate.
  void backward(const Eigen::Ref<const MatX<S>>& dH, MatX<S>& dC) {
    m_layer2.backward(dH, m_dHid);
    m_act.backward(m_dHid, m_dHid);
    m_layer1.backward(m_dHid, dC);
  }

  Index hidden() const { return m_hidden; }

 protected:
  template <class... LayerArgs>
  TwoLayerBranch(Index d, Index hidden, Activation activation, const LayerArgs&... layerArgs)
      : m_hidden(hidden), m_layer1(d, hidden, layerArgs...), m_act(activation), m_layer2(hidden, d, layerArgs...) {}

  // C -> H in mode; layerArgs (a convolution's layout) go to both layers' forward. Train mode keeps what
  // backward reads; Inference mode keeps it in buffers of its own, the hidden one overwritten in place.
  template <class... LayerArgs>
  void runLayers(const Eigen::Ref<const MatX<S>>& C, MatX<S>& H, ForwardMode mode, const LayerArgs&... layerArgs) {
    Activations& a = mode == ForwardMode::Train ? m_acts : m_inferActs;
    forwardAs(mode, m_layer1, C, layerArgs..., a.pre);
    MatX<S>& hid = mode == ForwardMode::Train ? a.hid : a.pre;  // in place: nothing is kept
    forwardAs(mode, m_act, a.pre, hid);
    forwardAs(mode, m_layer2, hid, layerArgs..., H);
  }

  Index m_hidden;
  Layer m_layer1;
  ActivationLayer<S> m_act;
  Layer m_layer2;

 private:
  // What backward reads of one forward (the layers keep views of them).
  struct Activations {
    MatX<S> pre;  // (hidden, N) layer1(c)
    MatX<S> hid;  // (hidden, N) act(pre); Inference mode writes it into pre instead
  };

  Activations m_acts;       // of the last forward, read by backward
  Activations m_inferActs;  // of the last forwardInference
  MatX<S> m_dHid;
};

}  // namespace ddl
