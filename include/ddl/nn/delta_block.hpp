#pragma once
// ddl/nn/delta_block.hpp: one residual block, Compress -> RMSNorm -> MLP branch -> DeltaResidual.
//   x_in = X (dv = 1) | CC(X) (dv > 1);  c = RMSNorm(x_in);  h = fc2(act(fc1(c)));  X' = rewrite(X, x_in, c, h)
// With ResidualKind::Additive this is exactly the plain pre-norm residual MLP block X' = X + h, so a
// comparison against the baseline changes one option. Parameter names: compress.* (dv > 1), norm.weight,
// mlp.fc1.{weight,bias}, mlp.fc2.{weight,bias}, delta.* (see delta_residual.hpp).
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/activation.hpp"
#include "ddl/nn/compressor.hpp"
#include "ddl/nn/delta_residual.hpp"
#include "ddl/nn/linear.hpp"
#include "ddl/nn/rms_norm.hpp"

namespace ddl {

struct DeltaBlockOptions {
  Index hidden = 0;  // MLP hidden width; 0 means 4 d
  Activation activation = Activation::GELU;
  double normEps = 1e-5;
  CompressorKind compressor = CompressorKind::Structured;  // dv > 1 only
  Index compressorKernel = 3;
  DeltaResidualOptions residual;
};

template <class S>
class DeltaBlock {
 public:
  DeltaBlock(Index d, Index dv, const DeltaBlockOptions& opt)
      : m_d(checked(d, dv, opt)), m_dv(dv), m_hidden(opt.hidden > 0 ? opt.hidden : 4 * d),
        m_compress(d, dv, opt.compressor, opt.compressorKernel), m_norm(d, opt.normEps), m_fc1(d, m_hidden),
        m_act(opt.activation), m_fc2(m_hidden, d), m_delta(d, dv, opt.residual) {}

  // Seeded initialisation; draw order: fc1, fc2 (torch.nn.Linear default), then the residual's params.
  void init(Rng& rng) {
    m_fc1.init(rng);
    m_fc2.init(rng);
    m_delta.init(rng);
  }

  // X: (d, dv*N) -> Y: (d, dv*N). Y must not alias X.
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y) {
    const char* fn = "ddl::DeltaBlock::forward";
    if (X.rows() != m_d || X.cols() % m_dv != 0)
      throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", expected (", m_d, ", ", m_dv, "*N)"));
    if (m_dv == 1) {
      m_norm.forward(X, m_c);
      runBranchAndRewrite(X, X, Y);
    } else {
      m_compress.forward(X, m_xin);
      m_norm.forward(m_xin, m_c);
      runBranchAndRewrite(X, m_xin, Y);
    }
  }

  // dY: (d, dv*N) -> dX: (d, dv*N) overwritten; parameter gradients accumulate.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) {
    m_delta.backward(dY, dX, m_dXin, m_dC, m_dH);
    m_fc2.backward(m_dH, m_dHid);
    m_act.backward(m_dHid, m_dHid);
    m_fc1.backward(m_dHid, m_dTmp);
    m_dC += m_dTmp;
    m_norm.backward(m_dC, m_dTmp);
    m_dXin += m_dTmp;
    if (m_dv == 1) {
      dX += m_dXin;
    } else {
      m_compress.backward(m_dXin, m_dXc);  // its own buffer: (d, dv*N), not (d, N) like m_dTmp
      dX += m_dXc;
    }
  }

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    if (m_dv > 1) m_compress.visitParams(joinName(prefix, "compress"), f);
    m_norm.visitParams(joinName(prefix, "norm"), f);
    m_fc1.visitParams(joinName(prefix, "mlp.fc1"), f);
    m_fc2.visitParams(joinName(prefix, "mlp.fc2"), f);
    m_delta.visitParams(joinName(prefix, "delta"), f);
  }

  const DeltaResidual<S>& residual() const { return m_delta; }
  Index hidden() const { return m_hidden; }

 private:
  static Index checked(Index d, Index dv, const DeltaBlockOptions& opt) {
    const char* fn = "ddl::DeltaBlock";
    require(d >= 1, fn, "d must be >= 1, got ", d);
    require(dv >= 1, fn, "dv must be >= 1, got ", dv);
    require(opt.hidden >= 0, fn, "hidden must be >= 0 (0 means 4 d), got ", opt.hidden);
    return d;
  }

  void runBranchAndRewrite(const Eigen::Ref<const MatX<S>>& X, const Eigen::Ref<const MatX<S>>& xin, MatX<S>& Y) {
    m_fc1.forward(m_c, m_pre);
    m_act.forward(m_pre, m_hid);
    m_fc2.forward(m_hid, m_h);
    m_delta.forward(X, xin, m_c, m_h, Y);
  }

  Index m_d, m_dv, m_hidden;
  Compressor<S> m_compress;
  RmsNorm<S> m_norm;
  Linear<S> m_fc1;
  ActivationLayer<S> m_act;
  Linear<S> m_fc2;
  DeltaResidual<S> m_delta;
  MatX<S> m_xin, m_c, m_pre, m_hid, m_h;           // forward
  MatX<S> m_dXin, m_dC, m_dH, m_dHid, m_dTmp, m_dXc;  // backward workspaces
};

}  // namespace ddl
